"""Kafka sink: idempotent producer, target topic by name/template/fixed, partitions kept.

- Target topic: ``topic`` (fixed) or ``topic.template`` (default ``{topic}``: same name).
- Partition: the record's partition hint (the source partition number) when the target topic
  has that partition, otherwise librdkafka's murmur2 partitioner on the key (Java-compatible).
- A missing target topic is created (``topic.creation.enable``) with ``topic.creation.partitions``
  partitions, or as many as the highest source partition seen in the batch + 1.
- Every delivery report is checked: the producer reports failures only
  (``delivery.report.only.error``), ``flush`` waits until librdkafka holds no message, and each
  failure is matched back to its record and reported to the runner - never dropped.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any, Mapping, Sequence

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic

from connect.config import ConfigDef, Importance, Type, non_empty
from connect.connector import SinkConnector
from connect.errors import ConnectError, RetriableError
from connect.records import ConnectRecord
from connect.sink import SinkTask
from connect.sink.routing import ROUTING_CONFIG, TopicRouter
from connectors.kafka.clients import POOL, client_config

__all__ = ["KafkaSinkConnector", "KafkaSinkTask"]

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
        self._conf = client_config(config, "producer", PRODUCER_DEFAULTS)
        self._producer = POOL.acquire("producer", self._owner, self._conf)
        self._admin_conf = client_config(config, "admin")
        self._admin = POOL.acquire("admin", self._owner, self._admin_conf)
        self._partitions: dict[str, int] = {}
        self._in_flight: list[ConnectRecord] = []
        self._warned_small: set[str] = set()

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self._failures.append((err, msg))

    # -- topics ---------------------------------------------------------------------------
    def _partition_count(self, topic: str, batch: Sequence[ConnectRecord]) -> int:
        count = self._partitions.get(topic)
        if count is not None:
            return count
        count = self._describe(topic)
        if count == 0:
            if not self._cfg["topic.creation.enable"]:
                raise ConnectError(f"target topic {topic!r} does not exist and topic.creation.enable=false")
            wanted = self._cfg["topic.creation.partitions"]
            if wanted <= 0:
                wanted = max((r.partition for r in batch if r.partition is not None), default=0) + 1
            self._create(topic, wanted)
            count = self._describe(topic) or wanted
        self._partitions[topic] = count
        return count

    def _describe(self, topic: str) -> int:
        try:
            md = self._admin.list_topics(timeout=10)
        except KafkaException as exc:
            raise RetriableError(f"cannot read target metadata: {exc}") from exc
        entry = md.topics.get(topic)
        return len(entry.partitions) if entry is not None and entry.error is None else 0

    def _create(self, topic: str, partitions: int) -> None:
        rf = self._cfg["topic.creation.replication.factor"]
        futures = self._admin.create_topics([NewTopic(topic, partitions, rf)], request_timeout=15)
        for name, future in futures.items():
            try:
                future.result()
                log.info("created target topic %s with %d partition(s)", name, partitions)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise ConnectError(f"cannot create target topic {name!r}: {exc.args[0].str()}") from exc

    # -- data -----------------------------------------------------------------------------
    def put(self, records: Sequence[ConnectRecord]) -> None:
        if self._fatal is not None:
            raise ConnectError(f"producer failed fatally: {self._fatal.str()}")
        produce = self._producer.produce
        route = self._route
        counts = self._partitions
        preserve = self._cfg["partition.preserve"]
        on_delivery = self._on_delivery
        for r in records:
            topic = route(r.topic)
            count = counts.get(topic)
            if count is None:
                count = self._partition_count(topic, records)
            part = r.partition
            if part is None or not preserve or part >= count:
                if part is not None and preserve and topic not in self._warned_small:
                    self._warned_small.add(topic)
                    log.warning("target topic %s has %d partition(s), fewer than the source; "
                                "records beyond them are partitioned by key", topic, count)
                part = -1
            headers = r.headers
            if headers is not None and headers.__class__ is not list:
                headers = list(headers)
            while True:
                try:
                    produce(topic, r.value, r.key, partition=part, on_delivery=on_delivery,
                            timestamp=r.timestamp or 0, headers=headers)
                    break
                except BufferError:
                    self._producer.poll(0.05)  # queue full: wait for acknowledgements
        self._in_flight.extend(records)
        self._producer.poll(0)

    def flush(self, offsets) -> None:
        deadline_s = self._cfg["flush.timeout.ms"] / 1000
        waited = 0.0
        while self._producer.flush(1.0) > 0:
            waited += 1.0
            if waited >= deadline_s:
                raise RetriableError(f"{len(self._producer)} message(s) still unacknowledged after "
                                     f"flush.timeout.ms={self._cfg['flush.timeout.ms']}")
        if self._failures:
            self._report_failures()
        self._in_flight.clear()

    def _report_failures(self) -> None:
        """Match each failed delivery report to its record by (target topic, key, value)."""
        index: dict[tuple, list[ConnectRecord]] = defaultdict(list)
        for r in reversed(self._in_flight):
            index[(self._route(r.topic), r.key, r.value)].append(r)
        reporter = self.context.errant_record_reporter
        failures, self._failures = self._failures, []
        for err, msg in failures:
            if err.fatal():
                self._fatal = err
            candidates = index.get((msg.topic(), msg.key(), msg.value()))
            if not candidates:
                raise ConnectError(f"delivery to {msg.topic()} failed ({err.str()}) for a message that "
                                   "matches no record put since the last flush")
            reporter.report(candidates.pop(), KafkaException(err))

    def stop(self) -> None:
        producer = getattr(self, "_producer", None)
        if producer is None:
            return
        self._producer = None
        if producer.flush(10) > 0 or self._fatal is not None:
            return  # never hand a broken or non-empty producer to the next task
        POOL.release("producer", self._owner, self._conf, producer)
        POOL.release("admin", self._owner, self._admin_conf, self._admin)
