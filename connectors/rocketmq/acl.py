"""The embedded broker's ACL: accounts, where their secrets come from, and the signature check.

Secrets are read from a file (``--acl-file``) or the environment (``CONNECT_ROCKETMQ_ACL``), not
the command line, where every local user sees them in ``ps``. Both hold ``ACCESS_KEY:SECRET_KEY``
entries: one a line in the file (``#`` comments and blank lines skipped), separated by commas or
whitespace in the variable.

The check is ``PlainAccessValidator``'s, for wire compatibility with the official 4.x clients:
HmacSHA1, keyed by the account's secret, over the values of every ext field but ``Signature`` and
``_UNIQUE_KEY_QUERY`` concatenated in key order, then the body. Its limits are those of RocketMQ:
the request code, opaque and flags are not signed and the values are joined without separators (a
signed request can be replayed as another request, or with its fields re-cut, under the same
signature), nothing is encrypted, and nothing stops a replay. See the README's RocketMQ section.
"""

from __future__ import annotations

import hmac
import logging
import os
from pathlib import Path
from typing import Iterable

from connectors.rocketmq.protocol import RemotingCommand, ResponseCode
from connectors.rocketmq.remoting import acl_signature
from connectors.rocketmq.validation import Refused, shown

__all__ = ["ACL_ENV", "load_accounts", "check_access"]

log = logging.getLogger(__name__)

ACL_ENV = "CONNECT_ROCKETMQ_ACL"
_UNSIGNED = ("Signature", "_UNIQUE_KEY_QUERY")  # SessionCredentials.SIGNATURE, MixAll.UNIQUE_MSG_QUERY_FLAG


def _entries(items: Iterable[str], where: str) -> dict[str, str]:
    accounts = {}
    for item in items:
        access, sep, secret = item.partition(":")
        if not sep or not access or not secret:
            raise ValueError(f"{where}: an entry is not ACCESS_KEY:SECRET_KEY")  # the entry holds a secret: not shown
        accounts[access] = secret
    return accounts


def load_accounts(*, file: str | Path | None = None, env: dict[str, str] | None = None,
                  inline: Iterable[str] = ()) -> dict[str, str]:
    """Accounts from ``file``, the ``CONNECT_ROCKETMQ_ACL`` variable of ``env`` (default
    ``os.environ``) and ``inline`` entries (``--acl``, kept for compatibility), later sources
    overriding earlier ones for the same access key."""
    accounts: dict[str, str] = {}
    if file is not None:
        path = Path(file)
        text = path.read_text()
        if path.stat().st_mode & 0o077:
            log.warning("%s is readable by other users: chmod 600 it", path)
        lines = [line.strip() for line in text.splitlines()]
        accounts.update(_entries((line for line in lines if line and not line.startswith("#")), str(path)))
    value = (os.environ if env is None else env).get(ACL_ENV, "")
    if value.strip():
        accounts.update(_entries(value.replace(",", " ").split(), ACL_ENV))
    inline = list(inline)
    if inline:
        log.warning("--acl puts the secret on the command line, where local users see it (ps): use --acl-file "
                    "or %s", ACL_ENV)
        accounts.update(_entries(inline, "--acl"))
    return accounts


def check_access(accounts: dict[str, str], cmd: RemotingCommand) -> None:
    """Raises :class:`Refused` (NO_PERMISSION) unless ``cmd`` carries a known ``AccessKey`` and
    its ``Signature``; nothing to check without accounts."""
    if not accounts:
        return
    fields = cmd.ext_fields
    access = fields.get("AccessKey")
    secret = accounts.get(access or "")
    if secret is None:
        raise Refused(ResponseCode.NO_PERMISSION, f"No acl config for {shown(access) if access else '(no AccessKey)'}")
    expected = acl_signature(fields, cmd.body, secret, _UNSIGNED).encode("ascii")
    if not hmac.compare_digest(expected, fields.get("Signature", "").encode("utf-8", "replace")):
        raise Refused(ResponseCode.NO_PERMISSION, "Check signature failed for accessKey=" + shown(access))
