"""The ``kafka-metadata`` source task: watches topics (partitions, configs) and their ACLs (see
:mod:`connectors.kafka.metadata`)."""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping, Sequence

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)

from connect import patterns
from connect.errors import RetriableError
from connect.records import ConnectRecord
from connect.source import SourceTask
from connectors.kafka.metadata.acls import acl_data, acl_id
from connectors.kafka.metadata.admin import Admin, kafka_error, result
from connectors.kafka.metadata.config import SOURCE_CONFIG
from connectors.kafka.metadata.topics import topic_configs
from connectors.replicator.metadata import MetadataChangeEvent, diff_events

__all__ = ["KafkaMetadataSourceTask"]

log = logging.getLogger(__name__)


# DescribeAcls answers meaning "this cluster has no ACLs to tell": ACL sync skipped, nothing deleted.
_NO_ACLS = {KafkaError.SECURITY_DISABLED, KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION,
            KafkaError.CLUSTER_AUTHORIZATION_FAILED}


class KafkaMetadataSourceTask(SourceTask):
    def start(self, config: Mapping[str, Any], context) -> None:
        cfg = SOURCE_CONFIG.parse(config)
        self.context = context
        self._cfg = cfg
        self._cluster = cfg["cluster.name"]
        self._partition = {"metadata": self._cluster}
        self._interval = cfg["poll.interval.ms"] / 1000
        self._snapshot_every = cfg["snapshot.interval.ms"] / 1000
        self._admin = Admin(config, f"metadata-{context.task_id}", context, cfg["request.timeout.ms"])
        self._known: dict[tuple[str, str], dict] = {}
        self._next_poll = self._next_snapshot = time.monotonic()
        self._acl_note: str | None = None
        self._counts = {"events": 0, "snapshots": 0, "topics": 0, "acls": 0}

    def _matches(self, topic: str) -> bool:
        if self._cfg["topics"]:  # named on purpose: watched whatever topics.exclude says (as the Kafka source)
            return topic in self._cfg["topics"]
        if patterns.fullmatch(self._cfg["topics.exclude"], topic):
            return False
        return bool(self._cfg["topics.regex"]) and patterns.fullmatch(self._cfg["topics.regex"], topic)

    def poll(self) -> Sequence[ConnectRecord]:
        wait = self._next_poll - time.monotonic()
        if wait > 0:
            time.sleep(max(min(wait, 0.1, self.context.time_left()), 0))
            return []
        if self.context.time_left() < 0.2:
            return []  # too little time to ask the cluster: the next epoch will
        current = self._describe()
        now = time.monotonic()
        self._next_poll = now + self._interval
        now_ms = int(time.time() * 1000)
        events = diff_events(self._known, current, self._cluster, now_ms)
        if now >= self._next_snapshot:
            changed = {(e.resource, e.resource_name) for e in events}
            events += [MetadataChangeEvent("Modified", kind, name, dict(data), self._cluster, now_ms)
                       for (kind, name), data in current.items() if (kind, name) not in changed]
            self._next_snapshot = now + self._snapshot_every if self._snapshot_every else float("inf")
            self._counts["snapshots"] += 1
        self._known = current
        self._counts["events"] += len(events)
        self._counts["topics"] = sum(1 for kind, _ in current if kind == "Topics")
        self._counts["acls"] = sum(1 for kind, _ in current if kind == "Acls")
        offset = {"ts": now_ms}
        return [e.to_record(self._cfg["topic"], self._partition, offset) for e in events]

    def _describe(self) -> dict[tuple[str, str], dict]:
        """Every watched resource now: ``(resource, name) -> data``; RetriableError if the cluster
        cannot be asked (the state held is kept)."""
        admin = self._admin.client
        try:
            md = admin.list_topics(timeout=self._admin.timeout())
        except KafkaException as exc:
            raise RetriableError(f"cannot list topics on {self._cfg['bootstrap.servers']}: {exc}") from exc
        counts = {name: len(t.partitions) for name, t in md.topics.items() if t.error is None and self._matches(name)}
        current: dict[tuple[str, str], dict] = {}
        configs = self._configs(sorted(counts)) if counts else {}
        for name in sorted(counts):
            if name in configs:  # else deleted meanwhile
                current[("Topics", name)] = {"broker": "kafka", "partitions": counts[name], "configs": configs[name]}
        if self._cfg["sync.acls.enabled"]:
            acls = self._acls(counts)
            if acls is None:  # not described: keep what is known, delete nothing
                acls = {key: data for key, data in self._known.items() if key[0] == "Acls"}
            current.update(acls)
        return current

    def _configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        timeout = self._admin.timeout()
        futures = self._admin.client.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in topics],
                                                      request_timeout=timeout)
        exclude, source_defaults = self._cfg["configs.exclude"], self._cfg["use.defaults.from"] == "source"
        out = {}
        for resource, future in futures.items():
            what = f"describe the configs of topic {resource.name}"
            try:
                entries = result(future, timeout, what, accept=(KafkaError.UNKNOWN_TOPIC_OR_PART,))
            except KafkaException as exc:
                raise RetriableError(f"cannot {what}: {exc}") from exc
            if not isinstance(entries, KafkaError):  # else deleted since it was listed
                out[resource.name] = topic_configs(entries, exclude, source_defaults)
        return out

    def _acls(self, topics: Sequence[str]) -> dict[tuple[str, str], dict] | None:
        """Literal TOPIC bindings of watched topics and prefixed ones that are watched names or
        prefixes of ``topics`` (the watched topics now); None when they cannot be described."""
        timeout = self._admin.timeout()
        wanted = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
        try:
            bindings = result(self._admin.client.describe_acls(wanted, request_timeout=timeout), timeout, "describe ACLs")
        except KafkaException as exc:
            err = kafka_error(exc)
            note = err.str() if err is not None else str(exc)
            if note != self._acl_note:
                level = logging.INFO if err is not None and err.code() == KafkaError.SECURITY_DISABLED else logging.WARNING
                log.log(level, "ACLs of %s not synced: %s%s", self._cluster, note,
                        " (no authorizer; set sync.acls.enabled=false)" if level == logging.INFO else "")
                self._acl_note = note
            if err is None or err.code() not in _NO_ACLS:
                log.debug("DescribeAcls failed", exc_info=True)
            return None
        out = {}
        for b in bindings:
            if b.restype == ResourceType.TOPIC and self._watched_acl(b, topics):
                data = acl_data(b)
                out[("Acls", acl_id(data))] = data
        return dict(sorted(out.items()))

    def _watched_acl(self, binding: AclBinding, topics: Sequence[str]) -> bool:
        if binding.resource_pattern_type == ResourcePatternType.LITERAL:
            return self._matches(binding.name)
        return binding.resource_pattern_type == ResourcePatternType.PREFIXED and (
            self._matches(binding.name) or any(t.startswith(binding.name) for t in topics))

    def metrics(self) -> Mapping[str, float]:
        return {f"metadata.source.{k}": float(v) for k, v in self._counts.items()}

    def stop(self) -> None:
        if getattr(self, "_admin", None) is not None:
            self._admin.close()
