"""Kafka sink: idempotent producer, target topic by name/template/fixed, partitions kept.

- Target topic: ``topic`` (fixed) or ``topic.template`` (default ``{topic}``: same name).
- Partition: the record's partition hint (the source partition number) when the target topic
  has that partition, otherwise librdkafka's murmur2 partitioner on the key (Java-compatible).
- Missing target topics are created (``topic.creation.enable``) before the tasks start, with the
  source topic's partition count (or ``topic.creation.partitions``), and grown when the source
  grows (where the broker supports CreatePartitions); a topic first seen in a batch is created
  with the highest partition hint seen + 1.
- Every delivery report is checked: the producer reports failures only
  (``delivery.report.only.error``), ``flush`` waits until librdkafka holds no message, and each
  failure is matched back to its record and reported to the runner - never dropped.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any, Mapping, Sequence

from confluent_kafka import KafkaError, KafkaException

from connect.config import ConfigDef, Importance, Type, non_empty
from connect.connector import SinkConnector
from connect.errors import ConnectError, RetriableError
from connect.records import ConnectRecord
from connect.sink import SinkTask
from connect.sink.routing import ROUTING_CONFIG, TopicRouter
from connectors.kafka.clients import POOL, client_config
from connectors.kafka.topics import TargetTopics

__all__ = ["KafkaSinkConnector", "KafkaSinkTask"]


def _as_bytes(payload: Any) -> Any:
    return payload.encode() if isinstance(payload, str) else payload

log = logging.getLogger(__name__)

CONFIG = ROUTING_CONFIG.merge(
    ConfigDef()
    .define("bootstrap.servers", Type.STRING, doc="Target cluster bootstrap servers, host:port[,host:port].",
            importance=Importance.HIGH, validator=non_empty)
    .define("partition.preserve", Type.BOOLEAN, True,
            "Write each record to its source partition number when the target topic has it.")
    .define("topic.creation.enable", Type.BOOLEAN, True, "Create missing target topics.")
    .define("topic.creation.partitions", Type.INT, -1,
            "Partitions of created topics; -1: highest source partition seen + 1.")
    .define("topic.creation.replication.factor", Type.INT, -1, "Replication factor of created topics; -1: broker default.")
    .define("flush.timeout.ms", Type.INT, 300_000,
            "Longest a flush waits for acknowledgements before it raises a retriable error.")
)

PRODUCER_DEFAULTS = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "partitioner": "murmur2_random",
    "delivery.report.only.error": True,
    "queue.buffering.max.messages": 200_000,
}


class KafkaSinkConnector(SinkConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return CONFIG

    def prepare_topics(self, source_topics: Mapping[str, int]) -> None:
        """Create each target topic with its source's partition count (or grow it), as MM2 does."""
        cfg = CONFIG.parse(self.config)
        route = TopicRouter(cfg)
        admin_conf = client_config(self.config, "admin")
        admin = POOL.acquire("admin", "connector", admin_conf)
        try:
            topics = TargetTopics(admin, cfg)
            existing = topics.partition_counts()
            for topic, partitions in source_topics.items():
                topics.ensure(route(topic), partitions, existing)
        finally:
            POOL.release("admin", "connector", admin_conf, admin)

    @classmethod
    def task_class(cls) -> type:
        return KafkaSinkTask


class KafkaSinkTask(SinkTask):
    def start(self, config: Mapping[str, Any], context) -> None:
        cfg = CONFIG.parse(config)
        self._cfg = cfg
        self._route = TopicRouter(cfg)
        self._owner = context.task_id
        self._failures: list[tuple[Any, Any]] = []
        self._fatal: KafkaError | None = None
        self._tainted = False  # a producer that saw a failed delivery is never pooled for reuse
        self._conf = client_config(config, "producer", PRODUCER_DEFAULTS)
        self._producer = POOL.acquire("producer", self._owner, self._conf)
        self._admin_conf = client_config(config, "admin")
        self._admin = POOL.acquire("admin", self._owner, self._admin_conf)
        self._topics = TargetTopics(self._admin, cfg)
        self._targets: dict[str, tuple[str, int]] = {}  # source topic -> (target topic, partitions)
        self._in_flight: list[ConnectRecord] = []
        self._rejected: set[int] = set()
        self._warned_small: set[str] = set()

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self._failures.append((err, msg))
            self._tainted = True

    # -- topics ---------------------------------------------------------------------------
    def _target(self, source_topic: str, batch: Sequence[ConnectRecord]) -> tuple[str, int]:
        """(target topic, its partition count), creating it if needed; cached per source topic."""
        topic = self._route(source_topic)
        seen = max((r.partition for r in batch if r.topic == source_topic and r.partition is not None), default=0) + 1
        target = self._targets[source_topic] = (topic, self._topics.ensure(topic, seen))
        return target

    # -- data -----------------------------------------------------------------------------
    def put(self, records: Sequence[ConnectRecord]) -> None:
        if self._fatal is not None:
            raise ConnectError(f"producer failed fatally: {self._fatal.str()}")
        produce = self._producer.produce
        targets = self._targets
        preserve = self._cfg["partition.preserve"]
        on_delivery = self._on_delivery
        for r in records:
            target = targets.get(r.topic)
            if target is None:
                target = self._target(r.topic, records)
            topic, count = target
            part = r.partition
            if part is None or not preserve:
                part = -1
            elif part >= count:
                self._warn_fewer_partitions(topic, count)
                part = -1
            headers = r.headers
            if headers is not None and headers.__class__ is not list:
                headers = list(headers)
            try:
                produce(topic, r.value, r.key, partition=part, on_delivery=on_delivery,
                        timestamp=r.timestamp or 0, headers=headers)
            except BufferError:  # queue full: wait for acknowledgements, then send it
                self._produce_when_room(topic, r, part, headers)
            except (KafkaException, TypeError, ValueError) as exc:
                # Refused before sending (larger than message.max.bytes, a payload that is not
                # bytes...): this record only, reported with its position; never in flight.
                self._reject(r, exc)
        if self._rejected:
            rejected, self._rejected = self._rejected, set()
            self._in_flight.extend(r for r in records if id(r) not in rejected)
        else:
            self._in_flight.extend(records)
        self._producer.poll(0)

    def _reject(self, r: ConnectRecord, exc: Exception) -> None:
        if not isinstance(exc, KafkaException):
            exc = ConnectError(f"record {r.position()} cannot be produced: {exc} "
                               "(keys and values must be bytes, str or None: set the sink's key/value.converter)")
        self._rejected.add(id(r))
        self.context.errant_record_reporter.report(r, exc)

    def _produce_when_room(self, topic: str, r: ConnectRecord, part: int, headers) -> None:
        while True:
            self._producer.poll(0.05)
            try:
                self._producer.produce(topic, r.value, r.key, partition=part, on_delivery=self._on_delivery,
                                       timestamp=r.timestamp or 0, headers=headers)
                return
            except BufferError:
                continue

    def _warn_fewer_partitions(self, topic: str, count: int) -> None:
        if topic not in self._warned_small:
            self._warned_small.add(topic)
            log.warning("target topic %s has %d partition(s), fewer than the source; "
                        "records beyond them are partitioned by key", topic, count)

    def flush(self, offsets) -> None:
        deadline_s = self._cfg["flush.timeout.ms"] / 1000
        waited = 0.0
        while self._flush_once() > 0:
            waited += 1.0
            if waited >= deadline_s:
                raise RetriableError(f"{len(self._producer)} message(s) still unacknowledged after "
                                     f"flush.timeout.ms={self._cfg['flush.timeout.ms']}")
        if self._failures:
            self._report_failures()
        self._in_flight.clear()

    def _flush_once(self) -> int:
        try:
            return self._producer.flush(1.0)
        except (KafkaException, SystemError) as exc:  # fatal producer errors surface here
            self._tainted = True
            raise ConnectError(f"producer failed: {exc}") from exc

    def _target_partition(self, r: ConnectRecord) -> int:
        """The partition ``put`` asked for (-1: the partitioner chose)."""
        count = self._targets[r.topic][1]
        part = r.partition
        return part if part is not None and self._cfg["partition.preserve"] and part < count else -1

    def _report_failures(self) -> None:
        """Match each failed delivery report to its record.

        librdkafka gives the failed message back, not the record, so the match is by target
        topic, key, value and - when ``put`` chose it - partition. Identical messages from one
        source partition are interchangeable (the partition's offset is blocked either way). If
        identical messages came from several source partitions, each of those partitions gets a
        failure reported, because any of them may be the one that failed: over-reporting means a
        retry or a duplicate, never a lost record.
        """
        index: dict[tuple, list[ConnectRecord]] = defaultdict(list)
        for r in self._in_flight:
            index[(self._targets[r.topic][0], _as_bytes(r.key), _as_bytes(r.value))].append(r)
        reporter = self.context.errant_record_reporter
        failures, self._failures = self._failures, []
        for err, msg in failures:
            if err.fatal():
                self._fatal = err
            candidates = index.get((msg.topic(), msg.key(), msg.value()), [])
            candidates = [r for r in candidates if self._target_partition(r) in (-1, msg.partition())]
            if not candidates:
                raise ConnectError(f"delivery to {msg.topic()}[{msg.partition()}] failed ({err.str()}) for a message "
                                   "that matches no record put since the last flush")
            first_by_partition: dict[int, ConnectRecord] = {}
            for r in candidates:
                first_by_partition.setdefault(id(r.source_partition), r)
            if len(first_by_partition) > 1:
                log.warning("a failed delivery to %s matches identical records of %d source partitions; "
                            "reporting one of each", msg.topic(), len(first_by_partition))
            bucket = index[(msg.topic(), msg.key(), msg.value())]
            for r in first_by_partition.values():
                bucket.remove(r)
                reporter.report(r, KafkaException(err))

    def stop(self) -> None:
        producer = getattr(self, "_producer", None)
        if producer is None:
            return
        self._producer = None
        POOL.release("admin", self._owner, self._admin_conf, self._admin)
        try:
            clean = producer.flush(10) == 0 and not self._tainted and self._fatal is None
        except (KafkaException, SystemError):
            clean = False
        if clean:  # never hand a broken, failing or non-empty producer to the next task
            POOL.release("producer", self._owner, self._conf, producer)
