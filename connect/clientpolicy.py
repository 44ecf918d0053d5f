"""Which client settings a connector config may carry: none that loads code or touches local files.

A connector config reaches broker clients through pass-through keys (``client.override.*``,
``consumer.override.*``, ``producer.override.*``, ``admin.override.*``, the replicator's
``upstream.*`` / ``downstream.*`` / ``inbound.*``) and through declared keys that name files
(the Pulsar client's ``*.file`` keys). Whoever may submit a connector (a REST caller) must not be
able to make the worker ``dlopen`` a library (librdkafka's ``plugin.library.paths``), run a
command (``sasl.kerberos.kinit.cmd``) or read a file it chooses. This is the class of Kafka
Connect's CVE-2023-25194, which KIP-458's ``connector.client.config.override.policy`` answers.

Guarantees of :meth:`ClientConfigPolicy.check` (policy ``default``), for every key of a flat
pipeline config, whatever prefix it sits behind (a key matches when it *is* the setting or ends
with ``.`` + the setting):

- **code**: ``plugin.library.paths``, ``ssl.engine.location``, ``ssl.engine.id``, ``ssl.providers``
  and ``sasl.kerberos.kinit.cmd`` (load or run code), and ``debug`` (librdkafka's debug log prints
  protocol internals, credentials included, into the worker's logs) are refused, unless the operator
  names them in ``allowed.keys``;
- **files**: a key naming a local file (``*.location`` except ``ssl.ca.location=probe``, ``*.file``,
  ``*.keytab``, ``*.path``) is refused unless its real path (symlinks followed) lies in
  ``allowed.paths`` and holds no shell characters; ``offset.store.method`` (librdkafka's file offset
  store) is refused like the code keys;
- **shell**: ``sasl.kerberos.principal`` and ``sasl.kerberos.service.name`` hold only
  ``[A-Za-z0-9._/@=+-]`` (librdkafka's default kinit command line interpolates them);
- **URLs**: a ``*.url`` value must be ``http(s)://`` or a broker scheme (``pulsar(+ssl)://``,
  ``kafka://``...): never ``file://`` (librdkafka fetches OAuth tokens with libcurl, which reads
  local files for such URLs).

Policy ``all`` accepts everything (Kafka Connect's ``All``): for a worker whose REST API only the
operator can reach. Errors name the key and the rule, never the value.
"""

from __future__ import annotations

import os
import re
from typing import Iterable, Mapping

import attrs

from connect.errors import ConfigIssue

__all__ = ["ClientConfigPolicy", "CODE_KEYS", "POLICIES", "DEFAULT_POLICY"]

POLICIES = ("default", "all")

# Settings that load or run code, or pour secrets into logs (librdkafka's names).
# ``offset.store.method=file`` makes librdkafka write offset files (by default into the working
# directory) wherever ``offset.store.path`` says.
CODE_KEYS = ("plugin.library.paths", "ssl.engine.location", "ssl.engine.id", "ssl.providers",
             "sasl.kerberos.kinit.cmd", "debug", "offset.store.method")
_FILE_SUFFIXES = (".location", ".file", ".keytab", ".path")
# librdkafka puts these into the default kinit command line, which runs in a shell (GSSAPI builds)
_SHELL_FED = ("sasl.kerberos.principal", "sasl.kerberos.service.name")
_SHELL_SAFE = re.compile(r"[A-Za-z0-9._/@=+-]*")
_SAFE_URL = re.compile(r"(?:https?|pulsar|pulsar\+ssl|kafka|ssl|sasl_ssl|sasl_plaintext|plaintext)://", re.IGNORECASE)


def _matches(key: str, setting: str) -> bool:
    return key == setting or key.endswith("." + setting)


@attrs.frozen
class ClientConfigPolicy:
    """``policy``: ``default`` or ``all``; ``allowed_keys``: code keys the operator allows anyway;
    ``allowed_paths``: directories (absolute, real) where file keys may point."""

    policy: str = "default"
    allowed_keys: frozenset[str] = frozenset()
    allowed_paths: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, policy: str = "default", allowed_keys: Iterable[str] | str = (),
                      allowed_paths: Iterable[str] | str = ()) -> ClientConfigPolicy:
        """From worker settings (comma lists accepted); relative paths are taken from the current
        directory. Raises ValueError for an unknown policy."""
        if policy not in POLICIES:
            raise ValueError(f"must be one of {', '.join(POLICIES)}")
        keys = allowed_keys.split(",") if isinstance(allowed_keys, str) else allowed_keys
        paths = allowed_paths.split(",") if isinstance(allowed_paths, str) else allowed_paths
        return cls(policy, frozenset(k.strip() for k in keys if k.strip()),
                   tuple(os.path.realpath(p.strip()) for p in paths if p.strip()))

    def _inside(self, path: str) -> bool:
        real = os.path.realpath(path)
        return any(os.path.commonpath([real, root]) == root for root in self.allowed_paths)

    def check(self, config: Mapping[str, str]) -> list[ConfigIssue]:
        """One issue per key the policy refuses (see the module's guarantees)."""
        if self.policy == "all":
            return []
        issues = []
        for key, value in config.items():
            value = "" if value is None else str(value)
            code = next((s for s in CODE_KEYS if _matches(key, s)), None)
            if code is not None:
                if code not in self.allowed_keys and value.strip():
                    issues.append(ConfigIssue(key, None, f"{code} is refused by the client config override policy "
                                                         "(it loads code or leaks credentials into logs); an operator "
                                                         f"can allow it with connector.client.config.allowed.keys={code}"))
                continue
            if any(_matches(key, k) for k in _SHELL_FED) and not _SHELL_SAFE.fullmatch(value):
                issues.append(ConfigIssue(key, None, "may only hold letters, digits and . _ / @ = + - (librdkafka "
                                                     "puts it into a shell command line)"))
                continue
            if key.endswith(_FILE_SUFFIXES) and value.strip():
                if any(c in value for c in "$`;|&<>\n"):
                    issues.append(ConfigIssue(key, None, "names a file with shell characters in its path"))
                    continue
                if _matches(key, "ssl.ca.location") and value.strip() == "probe":
                    continue
                if not os.path.isabs(value.strip()) or not self._inside(value.strip()):
                    where = ", ".join(self.allowed_paths) or "none configured"
                    issues.append(ConfigIssue(key, None, "names a local file outside the directories the client "
                                                         "config override policy allows "
                                                         f"(connector.client.config.allowed.paths: {where}); "
                                                         "give an absolute path inside them"))
                continue
            if key.endswith(".url") and value.strip() and not _SAFE_URL.match(value.strip()):
                issues.append(ConfigIssue(key, None, "must be an http(s):// or broker URL (the client config "
                                                     "override policy refuses other schemes, e.g. file://)"))
        return issues


DEFAULT_POLICY = ClientConfigPolicy()
