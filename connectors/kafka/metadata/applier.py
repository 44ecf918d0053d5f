"""The ``kafka-metadata`` sink task: applies metadata events to a Kafka cluster (see
:mod:`connectors.kafka.metadata`)."""

from __future__ import annotations

import logging
import re
from typing import Any, Mapping, Sequence

import orjson
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic, ResourceType

from connect import patterns
from connect.errors import ConfigError, ConfigIssue, ConnectError, RetriableError
from connect.records import ConnectRecord
from connect.sink import SinkTask
from connect.sink.routing import render_template
from connectors.kafka.metadata.acls import acl_binding, target_acl
from connectors.kafka.metadata.admin import Admin, kafka_error, permanent, result
from connectors.kafka.metadata.config import SINK_CONFIG
from connectors.kafka.metadata.topics import config_ops, local_topic_name
from connectors.replicator.mapping import target_units
from connectors.replicator.metadata import MetadataChangeEvent, newer

__all__ = ["KafkaMetadataSinkTask"]

log = logging.getLogger(__name__)


BROKERS = ("kafka", "rocketmq", "pulsar")
_LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


_SINK_COUNTS = ("events", "topics_created", "partitions_added", "configs_set", "configs_deleted", "topics_deleted",
                "acls_applied", "acls_skipped", "skipped_own_cluster", "skipped_stale", "ignored", "failed", "retried")


class KafkaMetadataSinkTask(SinkTask):
    def start(self, config: Mapping[str, Any], context) -> None:
        if config.get("topic"):
            raise ConfigError([ConfigIssue("topic", config["topic"], "the metadata sink applies events, it writes no "
                                           "records: a dead-letter or offset-syncs topic needs a data sink")])
        cfg = SINK_CONFIG.parse(config)
        self.context = context
        self._cfg = cfg
        self._cluster = cfg["cluster.name"]
        self._exclude = cfg["configs.exclude"]
        self._admin = Admin(config, f"metadata-{context.task_id}", context, cfg["request.timeout.ms"])
        self._stamps: dict[str, tuple[int, str]] = {}
        self._partitions: dict[str, int] | None = None  # target topics' partition counts, read once per put
        self._noted: set[str] = set()
        self._counts = dict.fromkeys(_SINK_COUNTS, 0)

    def _note_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._noted:
            self._noted.add(key)
            log.info(message, *args)

    def put(self, records: Sequence[ConnectRecord]) -> None:
        report = self.context.errant_record_reporter.report
        self._partitions = None
        transient: RetriableError | None = None
        for record in records:
            if transient is not None:  # keep the order: what follows a transient failure is re-sent after it
                report(record, RetriableError(f"metadata event at {record.position()}: waits for an earlier one ({transient})"))
                self._counts["retried"] += 1
                continue
            try:
                self._apply(record)
            except RetriableError as exc:
                transient = RetriableError(f"metadata event at {record.position()}: {exc}")
                report(record, transient)
                self._counts["retried"] += 1
            except ConnectError as exc:
                report(record, ConnectError(f"metadata event at {record.position()}: {exc}"))
                self._counts["failed"] += 1

    def _apply(self, record: ConnectRecord) -> None:
        value = record.value
        if isinstance(value, (dict, list)):  # a json value converter decoded it
            value = orjson.dumps(value)
        try:
            event = MetadataChangeEvent.from_json(value)
        except ValueError as exc:
            raise ConnectError(f"not a metadata change event: {exc}") from None
        self._counts["events"] += 1
        if event.source_cluster == self._cluster:
            self._counts["skipped_own_cluster"] += 1
            return
        if not newer(event.stamp, self._stamps.get(event.key)):
            self._counts["skipped_stale"] += 1
            return
        if event.resource == "Topics":
            self._topic(event)
        elif event.resource == "Acls":
            self._acl(event)
        else:
            self._note_once(event.resource, "%s events have no Kafka counterpart here: ignored", event.resource)
            self._counts["ignored"] += 1
        self._stamps[event.key] = event.stamp

    def _target(self, name: str) -> str:
        target = render_template(self._cfg["topic.template"], local_topic_name(name))
        if not _LEGAL_TOPIC.fullmatch(target) or target in (".", ".."):
            raise ConnectError(f"$.resourceName: {name!r} gives the topic name {target!r}, which Kafka does not allow "
                               "(1 to 249 of a-z A-Z 0-9 . _ -); change topic.template or exclude it at the source")
        return target

    def _partition_counts(self) -> dict[str, int]:
        if self._partitions is None:
            try:
                md = self._admin.client.list_topics(timeout=self._admin.timeout())
            except KafkaException as exc:
                raise RetriableError(f"cannot list topics on {self._cfg['bootstrap.servers']}: {exc}") from exc
            self._partitions = {n: len(t.partitions) for n, t in md.topics.items() if t.error is None}
        return self._partitions

    # topics

    def _topic(self, event: MetadataChangeEvent) -> None:
        name = self._target(event.resource_name)
        if event.type == "Deleted":
            if self._cfg["sync.topic.deletes"]:
                self._delete(name)
            else:
                self._counts["ignored"] += 1
            return
        data = event.data or {}
        broker, partitions = data.get("broker"), data.get("partitions")
        if broker not in BROKERS:
            raise ConnectError(f"$.data.broker: {broker!r} is not one of {', '.join(BROKERS)}")
        if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 0:
            raise ConnectError(f"$.data.partitions: a count >= 0 expected, got {partitions!r}")
        configs = self._event_configs(broker, data.get("configs"))
        current = self._partition_counts().get(name)
        wanted = target_units(broker, partitions, "kafka", current)
        if current is None and self._create(name, max(wanted or 1, 1), configs):
            return
        current = self._partition_counts().get(name, current)
        wanted = target_units(broker, partitions, "kafka", current)
        problems = []
        for step, args in ((self._sync_configs, (name, configs)), (self._grow, (name, current, wanted))):
            try:
                step(*args)
            except RetriableError:
                raise
            except ConnectError as exc:
                problems.append(str(exc))
        if problems:
            raise ConnectError("; ".join(problems))

    def _event_configs(self, broker: str, configs: Any) -> dict[str, str] | None:
        """The configs to copy (None: none, as the source is another broker)."""
        if broker != "kafka":
            if configs:
                self._note_once(f"configs:{broker}", "topic configs of %s topics are not copied to Kafka (configs do "
                                "not map across brokers; only Kafka to Kafka)", broker)
            return None
        if configs is None:
            return {}
        if not isinstance(configs, dict):
            raise ConnectError(f"$.data.configs: a JSON object expected, got {type(configs).__name__}")
        for key, value in configs.items():
            if not isinstance(value, str):
                raise ConnectError(f"$.data.configs.{key}: a string expected, got {value!r}")
        return {k: v for k, v in configs.items() if not (self._exclude and patterns.fullmatch(self._exclude, k))}

    def _create(self, name: str, partitions: int, configs: Mapping[str, str] | None) -> bool:
        """Create the topic with ``configs`` (MM2 does so: a compacted topic is compacted from its first
        record); False when it existed already. Configs the target refuses at creation: the topic is
        created without them, then they are set (and their refusal reported)."""
        if configs:
            created = self._new_topic(name, partitions, configs, refused_ok=True)
            if created is not None:
                self._counts["configs_set"] += len(configs) if created else 0
                return created
        if not self._new_topic(name, partitions, {}):
            return False
        if configs:
            self._sync_configs(name, configs)
        return True

    def _new_topic(self, name: str, partitions: int, configs: Mapping[str, str], refused_ok: bool = False) -> bool | None:
        """True: created; False: it exists; None: its configs were refused (``refused_ok``)."""
        timeout = self._admin.timeout()
        what = f"create topic {name} with {partitions} partition(s)" + (f" and configs {dict(configs)}" if configs else "")
        topic = NewTopic(name, partitions, self._cfg["replication.factor"], config=dict(configs))
        refusals = (KafkaError.INVALID_CONFIG, KafkaError.POLICY_VIOLATION) if refused_ok else ()
        try:
            err = result(self._admin.client.create_topics([topic], request_timeout=timeout)[name], timeout, what,
                          accept=(KafkaError.TOPIC_ALREADY_EXISTS, *refusals))
        except KafkaException as exc:
            raise permanent(exc, what) from exc
        if isinstance(err, KafkaError):
            if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                self._partitions = None  # created meanwhile (by a data connector?): read it again
                return False
            log.warning("cannot %s (%s): creating it without configs, then setting them", what, err.str())
            return None
        log.info("%s: done", what)
        self._counts["topics_created"] += 1
        self._partition_counts()[name] = partitions
        return True

    def _grow(self, name: str, current: int | None, wanted: int | None) -> None:
        if wanted is None or current is None:
            return
        timeout = self._admin.timeout()
        what = f"grow topic {name} from {current} to {wanted} partitions"
        try:
            err = result(self._admin.client.create_partitions([NewPartitions(name, wanted)], request_timeout=timeout)[name],
                          timeout, what, accept=(KafkaError.INVALID_PARTITIONS,))
        except KafkaException as exc:
            raise permanent(exc, what) from exc
        if isinstance(err, KafkaError):  # it has that many already (a concurrent grow): MM2 swallows this too
            self._partitions = None
            return
        log.info("%s: done", what)
        self._counts["partitions_added"] += wanted - current
        self._partition_counts()[name] = wanted

    def _sync_configs(self, name: str, wanted: Mapping[str, str] | None) -> None:
        if wanted is None:
            return
        timeout = self._admin.timeout()
        resource = ConfigResource(ResourceType.TOPIC, name)
        try:
            current = result(self._admin.client.describe_configs([resource], request_timeout=timeout)[resource], timeout,
                              f"describe the configs of topic {name}")
        except KafkaException as exc:
            raise permanent(exc, f"describe the configs of topic {name}") from exc
        ops = config_ops(wanted, current, self._exclude)
        if not ops:
            return
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET if v is not None else AlterConfigOpType.DELETE)
                   for k, v in ops.items()]
        timeout = self._admin.timeout()
        what = f"alter the configs of topic {name} ({ops})"
        future = self._admin.client.incremental_alter_configs(
            [ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)], request_timeout=timeout)
        try:
            result(next(iter(future.values())), timeout, what)
        except KafkaException as exc:
            raise permanent(exc, what) from exc
        self._counts["configs_set"] += sum(1 for v in ops.values() if v is not None)
        self._counts["configs_deleted"] += sum(1 for v in ops.values() if v is None)

    def _delete(self, name: str) -> None:
        if name not in self._partition_counts():
            return
        timeout = self._admin.timeout()
        try:
            result(self._admin.client.delete_topics([name], request_timeout=timeout)[name], timeout, f"delete topic {name}",
                    accept=(KafkaError.UNKNOWN_TOPIC_OR_PART,))
        except KafkaException as exc:
            raise permanent(exc, f"delete topic {name}") from exc
        log.info("deleted topic %s (sync.topic.deletes)", name)
        self._counts["topics_deleted"] += 1
        self._partition_counts().pop(name, None)

    # ACLs

    def _acl(self, event: MetadataChangeEvent) -> None:
        if event.type == "Deleted":
            self._counts["ignored"] += 1  # MM2 never deletes ACLs
            return
        broker = (event.data or {}).get("broker", "kafka")
        if broker != "kafka":
            self._note_once(f"acls:{broker}", "ACLs of %s clusters are not copied to Kafka (ACL models differ)", broker)
            self._counts["ignored"] += 1
            return
        try:
            decision = target_acl(event.data or {})
        except ValueError as exc:
            raise ConnectError(str(exc)) from None
        if decision.operation is None:
            self._counts["acls_skipped"] += 1
            log.debug("ACL %s not copied: %s", event.resource_name, decision.reason)
            return
        name = event.data["topic"]
        template = self._cfg["topic.template"]
        if str(event.data.get("patternType", "LITERAL")).upper() == "PREFIXED" and \
                (not template.endswith("{topic}") or template.count("{topic}") != 1):
            self._counts["acls_skipped"] += 1
            self._note_once("acls:prefix", "prefixed ACLs are not copied: topic.template %r puts text after {topic},"
                            " so a prefix has no target prefix", template)
            return
        binding = acl_binding(event.data, decision.operation, self._target(name))
        timeout = self._admin.timeout()
        what = f"create the ACL {binding}"
        try:
            result(self._admin.client.create_acls([binding], request_timeout=timeout)[binding], timeout, what)
        except KafkaException as exc:
            err = kafka_error(exc)
            hint = " (the target has no authorizer: set sync.acls.enabled=false on the metadata source)" \
                if err is not None and err.code() == KafkaError.SECURITY_DISABLED else ""
            raise ConnectError(f"cannot {what}: {err.str() if err else exc}{hint}") from exc
        self._counts["acls_applied"] += 1

    def flush(self, offsets) -> None:
        return None  # every put is applied (or reported) before it returns

    def metrics(self) -> Mapping[str, float]:
        return {f"metadata.sink.{k}": float(v) for k, v in self._counts.items()}

    def stop(self) -> None:
        if getattr(self, "_admin", None) is not None:
            self._admin.close()
