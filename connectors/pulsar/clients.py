"""Pulsar clients: the connection keys every Pulsar connector shares, and one ``pulsar.Client`` per
cluster and credentials per process.

A ``pulsar.Client`` owns IO threads and the broker connections; readers and producers are cheap on
top of it. Every task of a Python worker that talks to the same cluster with the same credentials
shares one client (reference counted), as Pulsar's own IO connectors share theirs.

Authentication and TLS are passed through to pulsar-client:

- ``auth.plugin``: ``none`` (default), ``token`` (``auth.token``, a secret, or ``auth.token.file``)
  or ``tls`` (``auth.tls.cert.file`` and ``auth.tls.key.file``: client certificate authentication).
- TLS transport: a ``pulsar+ssl://`` service URL, with ``tls.trust.certs.file``,
  ``tls.allow.insecure.connection`` and ``tls.validate.hostname``.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from connect.clientpool import ClientPool
from connect.config import ConfigDef, Importance, Type, at_least, one_of
from connect.errors import ConfigIssue

__all__ = ["CLIENT_CONFIG", "CLIENTS", "client_settings", "client_issues"]

log = logging.getLogger(__name__)


def _service_url(value: Any) -> str | None:
    if not isinstance(value, str) or not value.startswith(("pulsar://", "pulsar+ssl://")):
        return "must be a pulsar://host:port or pulsar+ssl://host:port URL"
    return None


CLIENT_CONFIG = (
    ConfigDef()
    .define("service.url", Type.STRING, doc="Pulsar service URL, pulsar://host:port or pulsar+ssl://host:port.",
            importance=Importance.HIGH, validator=_service_url)
    .define("auth.plugin", Type.STRING, "none", "Authentication: none, token or tls.",
            validator=one_of("none", "token", "tls"))
    .define("auth.token", Type.PASSWORD, "", "With auth.plugin=token: the token (or set auth.token.file).")
    .define("auth.token.file", Type.STRING, "", "With auth.plugin=token: a file holding the token.")
    .define("auth.tls.cert.file", Type.STRING, "", "With auth.plugin=tls: the client certificate (PEM).")
    .define("auth.tls.key.file", Type.STRING, "", "With auth.plugin=tls: the client private key (PEM).")
    .define("tls.trust.certs.file", Type.STRING, "", "CA certificates (PEM) that sign the brokers' certificates.")
    .define("tls.allow.insecure.connection", Type.BOOLEAN, False, "Accept a broker certificate that is not trusted.")
    .define("tls.validate.hostname", Type.BOOLEAN, False, "Check the broker certificate's host name.")
    .define("operation.timeout.ms", Type.INT, 30_000, "Timeout of lookups and other client operations.",
            validator=at_least(1000))
    .define("io.threads", Type.INT, 1, "IO threads of the client.", validator=at_least(1))
)


def client_issues(config: Mapping[str, Any]) -> list[ConfigIssue]:
    """Checks across keys (each key alone is checked by its ConfigDef)."""
    issues = []
    plugin = str(config.get("auth.plugin", "none")).lower()
    if plugin == "token" and not (config.get("auth.token") or config.get("auth.token.file")):
        issues.append(ConfigIssue("auth.token", None, "auth.plugin=token needs auth.token or auth.token.file"))
    if plugin == "tls":
        for key in ("auth.tls.cert.file", "auth.tls.key.file"):
            if not config.get(key):
                issues.append(ConfigIssue(key, None, "auth.plugin=tls needs a client certificate and its key"))
    return issues


def client_settings(cfg: Mapping[str, Any]) -> tuple:
    """The parsed keys that define a client: what two tasks must agree on to share one."""
    return tuple((key.name, cfg[key.name]) for key in CLIENT_CONFIG.keys())


def _new_client(settings: tuple):
    import pulsar

    cfg = dict(settings)
    auth = None
    if cfg["auth.plugin"] == "token":
        token = cfg["auth.token"]
        if not token and cfg["auth.token.file"]:
            with open(cfg["auth.token.file"]) as f:
                token = f.read().strip()
        auth = pulsar.AuthenticationToken(token)
    elif cfg["auth.plugin"] == "tls":
        auth = pulsar.AuthenticationTLS(cfg["auth.tls.cert.file"], cfg["auth.tls.key.file"])
    kwargs: dict[str, Any] = {
        "authentication": auth,
        "operation_timeout_seconds": max(cfg["operation.timeout.ms"] // 1000, 1),
        "io_threads": cfg["io.threads"],
        "tls_allow_insecure_connection": cfg["tls.allow.insecure.connection"],
        "tls_validate_hostname": cfg["tls.validate.hostname"],
        "logger": pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    }
    if cfg["tls.trust.certs.file"]:
        kwargs["tls_trust_certs_file_path"] = cfg["tls.trust.certs.file"]
    return pulsar.Client(cfg["service.url"], **kwargs)


CLIENTS = ClientPool(_new_client, what="pulsar client", shared=True)
