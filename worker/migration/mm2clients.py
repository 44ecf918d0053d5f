"""MirrorMaker 2's Java client settings as librdkafka settings, secrets as provider references.

MM2 gives each cluster Java client settings (``A.security.protocol``, ``A.sasl.jaas.config``,
``A.ssl.truststore.location``, ``A.consumer.fetch.min.bytes``...). This project's Kafka connectors
run librdkafka, which shares most names with the Java client but not all:

- ``sasl.jaas.config`` holds the SASL credentials inside a JAAS line; librdkafka takes them as
  ``sasl.username`` / ``sasl.password``. PLAIN and SCRAM login modules are read; others
  (OAUTHBEARER, Kerberos) are reported, not guessed.
- librdkafka reads no Java key store (JKS, or a PKCS#12 *trust* store): a ``PEM`` trust store
  becomes ``ssl.ca.location``, a PKCS#12 key store stays ``ssl.keystore.location``; the others are
  reported with what to do.
- ``ssl.endpoint.identification.algorithm=`` (empty, Java's "off") is librdkafka's ``none``.
- Any other name is carried when librdkafka itself accepts it (asked by building a client with
  that one setting: no connection is made), else reported.

Secrets never appear in the output: a value of a key named like a credential
(:func:`connect.secrets.is_secret_name`), and the password inside a JAAS line, become
``${env:MM2_<SCOPE>_<KEY>}`` references (the variable the operator sets for the worker); a value
that already is a provider reference (MM2 reads ``${file:...}`` too) is kept as written.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from connect.providers import parse_references
from connect.secrets import is_secret_name

__all__ = ["ClientSettings", "Skipped", "translate_client_key"]

_QUIET = logging.getLogger("connect.mm2import.probe")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False

_JAAS = re.compile(r"\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)\s*(?P<options>.*?);?\s*$",
                   re.DOTALL)
_JAAS_OPTION = re.compile(r'\s*([\w.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|(\S+?))(?=\s|;|$)', re.DOTALL)
_PASSWORD_MODULES = ("org.apache.kafka.common.security.plain.PlainLoginModule",
                     "org.apache.kafka.common.security.scram.ScramLoginModule")
# Read with the store they describe (below), never carried on their own.
_STORE_KEYS = {"ssl.truststore.type", "ssl.keystore.type"}


@dataclass(frozen=True)
class Skipped:
    key: str
    line: int
    reason: str


@dataclass
class ClientSettings:
    """librdkafka settings of one cluster and role, what was left out, and the env variables the
    secret references name (variable -> the key it comes from)."""

    settings: dict[str, str] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)
    secrets: dict[str, str] = field(default_factory=dict)


def env_name(scope: str, key: str) -> str:
    return "MM2_" + re.sub(r"[^A-Za-z0-9]+", "_", f"{scope}_{key}" if scope else key).strip("_").upper()


def _librdkafka_accepts(key: str, value: str) -> str | None:
    """None when librdkafka takes ``key`` (with ``value``, or a placeholder for a secret), else why not."""
    from confluent_kafka import KafkaException, Producer

    probe = {key: value, "logger": _QUIET}
    if key == "security.protocol":  # SASL_* alone would fail on the default mechanism (GSSAPI) of the build
        probe["sasl.mechanism"] = "PLAIN"
    try:
        Producer(probe)
    except KafkaException as exc:
        text = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        if text.startswith("Failed to create"):  # the name and value were taken; the client needs more
            return None
        return "librdkafka refuses it: " + (text.replace(value, "<value>") if value else text)
    except (TypeError, ValueError) as exc:
        return f"librdkafka refuses it: {exc}"
    return None


def _secret(out: ClientSettings, scope: str, key: str, value: str, source_key: str) -> str:
    if bool(parse_references(value)):
        return value
    name = env_name(scope, key)
    out.secrets[name] = source_key
    return "${env:" + name + "}"


def _jaas(out: ClientSettings, scope: str, source_key: str, line: int, value: str) -> None:
    if bool(parse_references(value)) and not _JAAS.match(value):  # the whole line from a provider: cannot be split
        out.skipped.append(Skipped(source_key, line, "a JAAS line from a config provider cannot be split into "
                                   "sasl.username / sasl.password: set them (as references) by hand"))
        return
    match = _JAAS.match(value)
    module = match.group("module") if match else ""
    if module not in _PASSWORD_MODULES:
        out.skipped.append(Skipped(source_key, line, f"only PLAIN and SCRAM login modules are carried over "
                                   f"(sasl.username / sasl.password); this one is {module or 'not readable'}: "
                                   "set librdkafka's sasl.* settings by hand"))
        return
    options = {m.group(1): m.group(2) if m.group(2) is not None else m.group(3)
               for m in _JAAS_OPTION.finditer(match.group("options"))}
    if "username" not in options or "password" not in options:
        out.skipped.append(Skipped(source_key, line, "the JAAS line has no username and password options"))
        return
    out.settings["sasl.username"] = re.sub(r"\\(.)", r"\1", options["username"])
    out.settings["sasl.password"] = _secret(out, scope, "sasl.password", re.sub(r"\\(.)", r"\1", options["password"]),
                                            f"{source_key} (its password)")


def translate_client_key(out: ClientSettings, scope: str, key: str, value: str, line: int, source_key: str,
                         siblings: dict[str, str]) -> None:
    """Carries one Java client setting into ``out`` (or reports it). ``siblings``: the other
    settings of the same cluster and role (a store's type is read with its location)."""
    if key == "sasl.jaas.config":
        _jaas(out, scope, source_key, line, value)
        return
    if key in _STORE_KEYS:
        return
    if key == "ssl.truststore.location":
        kind = siblings.get("ssl.truststore.type", "JKS").upper()
        if kind == "PEM":
            out.settings["ssl.ca.location"] = value
        else:
            out.skipped.append(Skipped(source_key, line, f"librdkafka reads no {kind} trust store: export its "
                                       "certificates to a PEM file and set ssl.ca.location"))
        return
    if key == "ssl.truststore.password":
        out.skipped.append(Skipped(source_key, line, "librdkafka reads CA certificates from PEM, without a password"))
        return
    if key == "ssl.truststore.certificates":
        out.settings["ssl.ca.pem"] = value
        return
    if key == "ssl.keystore.location":
        kind = siblings.get("ssl.keystore.type", "JKS").upper()
        if kind == "PKCS12":
            out.settings["ssl.keystore.location"] = value
        else:
            out.skipped.append(Skipped(source_key, line, f"librdkafka reads no {kind} key store: convert it to "
                                       "PKCS#12 (ssl.keystore.location) or PEM (ssl.certificate.location, "
                                       "ssl.key.location)"))

        return
    if key == "ssl.keystore.password":
        if siblings.get("ssl.keystore.type", "JKS").upper() == "PKCS12" and "ssl.keystore.location" in siblings:
            out.settings[key] = _secret(out, scope, key, value, source_key)
        else:
            out.skipped.append(Skipped(source_key, line, "goes with a key store that is not carried over"))
        return
    if key == "ssl.endpoint.identification.algorithm":
        out.settings[key] = value.strip().lower() or "none"
        return
    secret = is_secret_name(key)
    problem = _librdkafka_accepts(key, "x" if secret else value)
    if problem:
        out.skipped.append(Skipped(source_key, line, problem))
        return
    out.settings[key] = _secret(out, scope, key, value, source_key) if secret else value
