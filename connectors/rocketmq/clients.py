"""The connection keys every RocketMQ connector shares, and one client per name server list and
credentials per process (:class:`connect.clientpool.ClientPool`, shared).

- ``namesrv.addr``: name servers, ``host:port`` separated by ``;`` (RocketMQ's own form) or ``,``.
- ``access.key`` / ``secret.key`` (a secret): ACL credentials; requests are signed as RocketMQ's
  ``AclClientRPCHook`` signs them. Empty: no ACL.
- ``request.timeout.ms``: how long a request waits for its answer.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from connect.clientpool import ClientPool
from connect.config import ConfigDef, Importance, Type, at_least
from connect.errors import ConfigIssue

__all__ = ["CLIENT_CONFIG", "CLIENTS", "client_settings", "client_issues", "namesrv_list"]

_ADDRESS = re.compile(r"^[A-Za-z0-9._-]+:\d{1,5}$")


def namesrv_list(value: Any) -> list[str]:
    return [a.strip() for a in re.split(r"[;,]", str(value or "")) if a.strip()]


def _namesrv(value: Any) -> str | None:
    addrs = namesrv_list(value)
    if not addrs:
        return "must list name servers as host:port, separated by ';'"
    bad = [a for a in addrs if not _ADDRESS.match(a)]
    return f"{bad[0]!r} is not host:port" if bad else None


CLIENT_CONFIG = (
    ConfigDef()
    .define("namesrv.addr", Type.STRING, doc="Name servers, host:port separated by ';'.", importance=Importance.HIGH,
            validator=_namesrv)
    .define("access.key", Type.STRING, "", "ACL access key; empty: no ACL.")
    .define("secret.key", Type.PASSWORD, "", "ACL secret key (with access.key).")
    .define("request.timeout.ms", Type.INT, 5000, "How long a request waits for its answer.", validator=at_least(100))
)


def client_issues(config: Mapping[str, Any]) -> list[ConfigIssue]:
    if config.get("access.key") and not config.get("secret.key"):
        return [ConfigIssue("secret.key", None, "access.key needs its secret.key")]
    return []


def client_settings(cfg: Mapping[str, Any]) -> tuple:
    """The parsed keys that define a client: what two tasks must agree on to share one."""
    return tuple((key.name, cfg[key.name]) for key in CLIENT_CONFIG.keys())


def _new_client(settings: tuple):
    from connectors.rocketmq.remoting import AclSigner
    from connectors.rocketmq.sync_client import SyncRocketMQClient

    cfg = dict(settings)
    signer = AclSigner(cfg["access.key"], str(cfg["secret.key"])) if cfg["access.key"] else None
    timeout = cfg["request.timeout.ms"] / 1000
    return SyncRocketMQClient(namesrv_list(cfg["namesrv.addr"]), signer=signer, timeout=timeout,
                              connect_timeout=min(timeout, 3.0))


CLIENTS = ClientPool(_new_client, what="RocketMQ client", shared=True)
