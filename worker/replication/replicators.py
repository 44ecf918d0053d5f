"""Replicator onboarding (PIP-18): one request puts a namespace's topics under replication.

``POST /replicators`` (``connect replicators add``) takes what PIP-18's ``add-repl-config`` takes::

    {"namespace": "tenant/ns", "type": "kafka|pulsar|rocketmq", "region": "us-east",
     "source": {"type": "pulsar", "service.url": "pulsar://...", "alias": "pulsar-west"},
     "topicMapping": {"orders": "orders-copy", "payments": "payments"},
     "replicationProperties": {"bootstrap.servers": "..."},
     "authPlugin": "directory", "authParam": {"sasl.password": "..."},
     "config": {"tasks.max": "2"}}

and starts one connector per mapped topic (``<id>.<topic>``, id = ``<type>.<region>.<namespace>``):
the source's connector reads the topic (a Pulsar source reads ``persistent://<namespace>/<topic>``;
Kafka and RocketMQ sources read the topic by its name), the ``type`` connector writes it to the
mapped name with ``replicationProperties`` as its client keys; ``config`` holds framework keys
for every connector (``tasks.max``, ``epoch.max.ms``, ``errors.*``...). With ``source.alias`` the flow is a
replication flow (origin chain, loop-proof) from that alias to ``region``.

Credentials (PIP-18's pluggable KeyStore): ``authParam`` is handed to the worker's config provider
named ``authPlugin`` (one that can ``store``, e.g. ``directory``, or a vault plugin), kept under
``<replicators.keystore.root>/<id>``, and the connectors' configs hold only references
``${<plugin>:<root>/<id>:<key>}`` - never the secrets. Removing the replicator deletes its
connectors and its keystore entry.

The replicator itself is not stored apart: its connectors carry ``replicator.*`` keys (id,
namespace, type, region, topic), so the worker's config store (SQLite or Kafka topics) keeps it,
and a restarted worker lists it again. Per topic: ``PUT /replicators/{id}/topics/{topic}/stop`` and
``.../start`` (the connector's stop and resume), and ``GET /replicators/{id}/stats``: state, records
and rate of the last epoch, lag, failures.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any, Mapping

from connect.errors import ConfigError, ConnectError
from worker.herder import RUNNING, STOPPED, BadRequest, ConnectorNotFound, Herder

__all__ = ["Replicators", "KINDS"]

KINDS = ("kafka", "pulsar", "rocketmq")
_CONNECTION = {"kafka": "bootstrap.servers", "pulsar": "service.url", "rocketmq": "namesrv.addr"}
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def _safe(text: str) -> str:
    return _SAFE.sub("_", text).strip("._") or "_"


def _strings(doc: Any, path: str) -> dict[str, str]:
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise BadRequest(f"{path}: a JSON object of strings expected, got {type(doc).__name__}")
    out = {}
    for k, v in doc.items():
        if not isinstance(v, (str, int, float, bool)):
            raise BadRequest(f'{path}["{k}"]: a string expected, got {type(v).__name__}')
        out[str(k)] = str(v).lower() if isinstance(v, bool) else str(v)
    return out


def _text(body: Mapping[str, Any], key: str, *, choices: tuple[str, ...] = ()) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"$.{key}: a non-empty string expected, got {value!r}")
    value = value.strip()
    if choices and value not in choices:
        raise BadRequest(f"$.{key}: {value!r} is not one of {', '.join(choices)}")
    return value


class Replicators:
    """PIP-18 replicators on top of a herder: each is a set of connectors, one per topic."""

    def __init__(self, herder: Herder, providers: Any, keystore_root: str):
        self.herder = herder
        self.providers = providers
        self.root = keystore_root.rstrip("/")
        self._lock = threading.Lock()  # one add or remove at a time: the id check and the keystore agree

    def _path(self, rid: str) -> str:
        """The keystore path of a replicator: directly under the root, whatever the id holds."""
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", rid) or rid in (".", ".."):
            raise BadRequest(f"{rid!r} is not a replicator id (<type>.<region>.<namespace>, letters, digits, _.-)")
        path = f"{self.root}/{rid}"
        if os.path.dirname(os.path.normpath(path)) != os.path.normpath(self.root):
            raise BadRequest(f"{rid!r} is not a replicator id")
        return path

    # -- add / remove ------------------------------------------------------------------------------
    def add(self, body: Any) -> dict[str, Any]:
        with self._lock:
            return self._add(body)

    def _add(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise BadRequest(f"$: a JSON object expected, got {type(body).__name__}")
        namespace = _text(body, "namespace")
        kind = _text(body, "type", choices=KINDS)
        region = _text(body, "region")
        source = _strings(body.get("source"), "$.source")
        source_kind = source.pop("type", "pulsar")
        if source_kind not in KINDS:
            raise BadRequest(f"$.source.type: {source_kind!r} is not one of {', '.join(KINDS)}")
        if not source.get(_CONNECTION[source_kind]):
            raise BadRequest(f'$.source["{_CONNECTION[source_kind]}"]: a {source_kind} source needs it')
        source_alias = source.pop("alias", "")
        mapping = _strings(body.get("topicMapping"), "$.topicMapping")
        if not mapping:
            raise BadRequest("$.topicMapping: name at least one topic (source topic -> target name)")
        sink = _strings(body.get("replicationProperties"), "$.replicationProperties")
        if not sink.get(_CONNECTION[kind]):
            raise BadRequest(f'$.replicationProperties["{_CONNECTION[kind]}"]: a {kind} target needs it')
        extra = _strings(body.get("config"), "$.config")
        for key in extra:
            if key.startswith(("source.", "sink.", "replicator.", "dlq.")) or key in ("name", "connector.class"):
                raise BadRequest(f'$.config["{key}"]: framework keys only here (tasks.max, epoch.max.ms, errors.*...); '
                                 "source and target keys go in source and replicationProperties")
        auth = _strings(body.get("authParam"), "$.authParam")
        plugin = body.get("authPlugin") or ""
        if not isinstance(plugin, str):
            raise BadRequest(f"$.authPlugin: a config provider name expected, got {type(plugin).__name__}")
        if auth and not plugin:
            raise BadRequest("$.authPlugin: authParam needs the keystore plugin that keeps it")
        if plugin and plugin not in self.providers:
            raise BadRequest(f"$.authPlugin: {plugin!r} is not a config provider of this worker "
                             f"(config.providers: {', '.join(self.providers.names) or 'none'})")
        rid = f"{kind}.{_safe(region)}.{_safe(namespace)}"
        if self._connectors(rid):
            raise BadRequest(f"$: replicator {rid} exists already (remove it first)")
        path = self._path(rid)
        secrets = {k: f"${{{plugin}:{path}:{k}}}" for k in auth}
        if auth:
            self.herder.redactor.add(auth.values())  # never in logs, traces or errors
            try:
                self.providers[plugin].store(path, auth)
            except (ConfigError, OSError) as exc:
                self.providers[plugin].remove(path)  # nothing half-written stays behind
                why = exc if isinstance(exc, ConfigError) else f"the {plugin} keystore cannot keep the credentials: {exc}"
                raise BadRequest(f"$.authParam: {why}") from None
        created = []
        try:
            for topic, target in mapping.items():
                name = f"{rid}.{_safe(topic)}"
                config = {**extra, **self._connector_config(rid, namespace, kind, region, topic, target, source_kind,
                                                            source, source_alias, sink, secrets)}
                self.herder.create(name, config)
                created.append(name)
        except BaseException:
            for name in created:
                self._delete_quietly(name)
            if auth:
                self.providers[plugin].remove(path)
            raise
        return {"id": rid, "connectors": created}

    @staticmethod
    def _connector_config(rid: str, namespace: str, kind: str, region: str, topic: str, target: str,
                          source_kind: str, source: Mapping[str, str], source_alias: str, sink: Mapping[str, str],
                          secrets: Mapping[str, str]) -> dict[str, str]:
        read = f"persistent://{namespace}/{topic}" if source_kind == "pulsar" and "://" not in topic else topic
        config = {"source.connector.class": source_kind, "source.topics": read,
                  **{f"source.{k}": v for k, v in source.items()},
                  "sink.connector.class": kind, "sink.topic": target,
                  **{f"sink.{k}": v for k, v in sink.items()}, **{f"sink.{k}": v for k, v in secrets.items()},
                  "replicator.id": rid, "replicator.namespace": namespace, "replicator.type": kind,
                  "replicator.region": region, "replicator.topic": topic}
        if source_alias:
            config["source.cluster.alias"] = source_alias
            config["sink.cluster.alias"] = region
        return config

    def remove(self, rid: str) -> None:
        with self._lock:
            self._remove(rid)

    def _remove(self, rid: str) -> None:
        path = self._path(rid)
        names = self._connectors(rid)
        if not names:
            raise ConnectorNotFound(f"Replicator {rid} not found")
        plugin_paths = set()
        for name in names:
            config = self.herder.info(name)["config"]
            for value in config.values():
                match = re.fullmatch(r"\$\{([A-Za-z_][A-Za-z0-9_-]*):(.+):[^:}]+\}", str(value))
                if match and match.group(2) == path:
                    plugin_paths.add((match.group(1), match.group(2)))
            self.herder.delete(name)
        for plugin, path in plugin_paths:
            if plugin in self.providers:
                self.providers[plugin].remove(path)

    def _delete_quietly(self, name: str) -> None:
        try:
            self.herder.delete(name)
        except ConnectError:
            pass

    # -- reading -----------------------------------------------------------------------------------
    def _connectors(self, rid: str | None = None) -> dict[str, dict[str, str]]:
        """Connector name -> its replicator.* keys, of one replicator (or all)."""
        out = {}
        for name in self.herder.connector_names():
            try:
                config = self.herder.info(name)["config"]
            except ConnectorNotFound:
                continue
            if "replicator.id" in config and (rid is None or config["replicator.id"] == rid):
                out[name] = {k[len("replicator."):]: v for k, v in config.items() if k.startswith("replicator.")}
        return out

    def list(self) -> list[dict[str, Any]]:
        by_id: dict[str, dict[str, Any]] = {}
        for name, keys in sorted(self._connectors().items()):
            entry = by_id.setdefault(keys["id"], {"id": keys["id"], "namespace": keys.get("namespace"),
                                                  "type": keys.get("type"), "region": keys.get("region"), "topics": {}})
            entry["topics"][keys.get("topic", name)] = {"connector": name,
                                                        "state": self.herder.status(name)["connector"]["state"]}
        return list(by_id.values())

    def get(self, rid: str) -> dict[str, Any]:
        for entry in self.list():
            if entry["id"] == rid:
                return entry
        raise ConnectorNotFound(f"Replicator {rid} not found")

    def _topic_connector(self, rid: str, topic: str) -> str:
        for name, keys in self._connectors(rid).items():
            if keys.get("topic") == topic:
                return name
        if not self._connectors(rid):
            raise ConnectorNotFound(f"Replicator {rid} not found")
        raise ConnectorNotFound(f"Replicator {rid} has no topic {topic!r}")

    def set_topic(self, rid: str, topic: str, action: str) -> dict[str, str]:
        name = self._topic_connector(rid, topic)
        self.herder.set_target(name, STOPPED if action == "stop" else RUNNING)
        return {"connector": name, "target": STOPPED if action == "stop" else RUNNING}

    def stats(self, rid: str, metrics: Any) -> dict[str, Any]:
        entry = self.get(rid)
        topics = {}
        for topic, info in entry["topics"].items():
            figures = metrics.connector_summary(info["connector"]) if metrics is not None else {}
            topics[topic] = {"connector": info["connector"], "state": info["state"], **figures}
        return {"id": rid, "topics": topics}
