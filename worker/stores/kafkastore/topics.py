"""The store's topics on the broker, at start-up: created compacted when missing, refused when
another cleanup policy would drop their records, and read from the beginning to their end (see
"Start-up" in :mod:`worker.stores.kafkastore`)."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Callable, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec, ResourceType

from connect.errors import ConnectError, RetriableError
from worker.stores.kafkastore.errors import error_class, kafka_error

__all__ = ["Record", "StoreTopics"]

log = logging.getLogger(__name__)

Record = tuple[bytes, "bytes | None"]

# describe_configs failures that only mean "this broker/user cannot tell": checked as Kafka Connect does.
_UNVERIFIABLE = {KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                 KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.INVALID_REQUEST}

# consumer errors that retrying does not cure
_UNREADABLE = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
               KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.SASL_AUTHENTICATION_FAILED,
               KafkaError._AUTHENTICATION, KafkaError._SSL}


class StoreTopics:
    """Start-up reads of the store topics through ``admin``; ``client(factory, role, settings)``
    makes the consumer (with the store's client settings); ``timeout_s`` bounds each operation."""

    def __init__(self, admin: AdminClient, client: Callable[[Callable[[dict], Any], str, Mapping[str, Any]], Any],
                 bootstrap_servers: str, timeout_s: float):
        self._admin, self._client = admin, client
        self.bootstrap_servers, self.timeout_s = bootstrap_servers, timeout_s

    def ensure(self, wanted: dict[str, int], replication: int, config_topic: str) -> dict[str, int]:
        """Create missing topics (compacted), refuse existing ones that are not; partition counts."""
        existing = self._partition_counts(wanted)
        missing = [topic for topic in wanted if topic not in existing]
        created = set()
        if missing:
            new = [NewTopic(topic, wanted[topic], replication, config={"cleanup.policy": "compact"}) for topic in missing]
            futures = self._admin.create_topics(new, operation_timeout=self.timeout_s, request_timeout=self.timeout_s)
            for topic, future in futures.items():
                try:
                    future.result(timeout=self.timeout_s + 5)
                    created.add(topic)
                    log.info("created compacted topic %s (%d partitions)", topic, wanted[topic])
                except KafkaException as exc:
                    err = kafka_error(exc)
                    if err.code() != KafkaError.TOPIC_ALREADY_EXISTS:  # else: created meanwhile; checked below
                        raise error_class(err)(f"cannot create store topic {topic!r}: {err.str()}") from exc
                except Exception as exc:
                    raise RetriableError(f"cannot create store topic {topic!r}: {exc}") from exc
            deadline = time.monotonic() + self.timeout_s
            while True:  # metadata may lag behind the creation
                existing = self._partition_counts(wanted)
                if all(topic in existing for topic in wanted):
                    break
                if time.monotonic() > deadline:
                    absent = sorted(set(wanted) - set(existing))
                    raise RetriableError(f"store topics {absent} created but not in the metadata after {self.timeout_s}s")
                time.sleep(0.1)
        self._check_compacted([topic for topic in wanted if topic not in created])
        if existing[config_topic] != 1:
            raise ConnectError(f"config topic {config_topic!r} must have a single partition (to keep connector "
                               f"configs in order), but has {existing[config_topic]}")
        return {topic: existing[topic] for topic in wanted}

    def _partition_counts(self, topics) -> dict[str, int]:
        try:
            metadata = self._admin.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise RetriableError(f"cannot read the topic metadata of {self.bootstrap_servers}: {exc}") from exc
        counts = {}
        for topic in topics:
            meta = metadata.topics.get(topic)
            if meta is None or (meta.error is not None and meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
                continue
            if meta.error is not None:
                raise error_class(meta.error)(f"cannot use store topic {topic!r}: {meta.error.str()}")
            if meta.partitions:
                counts[topic] = len(meta.partitions)
        return counts

    def _check_compacted(self, topics: list[str]) -> None:
        if not topics:
            return
        futures = self._admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic) for topic in topics],
                                         request_timeout=self.timeout_s)
        for resource, future in futures.items():
            topic = resource.name
            try:
                entries = future.result(timeout=self.timeout_s + 5)
            except KafkaException as exc:
                err = kafka_error(exc)
                if err.code() in _UNVERIFIABLE:
                    log.warning("cannot verify that store topic %s is compacted (%s); using it as is", topic, err.str())
                    continue
                raise error_class(err)(f"cannot describe the configs of store topic {topic!r}: {err.str()}") from exc
            except Exception as exc:
                raise RetriableError(f"cannot describe the configs of store topic {topic!r}: {exc}") from exc
            entry = entries.get("cleanup.policy")
            if entry is None or entry.value is None:
                log.warning("the broker does not report cleanup.policy of store topic %s: cannot verify that it is "
                            "compacted; using it as is", topic)
                continue
            policies = {p.strip().lower() for p in entry.value.split(",") if p.strip()}
            if policies != {"compact"}:
                raise ConnectError(f"store topic {topic!r} has cleanup.policy={entry.value}, but it must be "
                                   "cleanup.policy=compact only: other policies delete connector configs, offsets or "
                                   "statuses. Change the topic's cleanup.policy to compact, or use another topic")

    def _end_offsets(self, tps: list[TopicPartition]) -> dict[tuple[str, int], int]:
        """The end offset of each partition. A transient answer is asked again for up to ``timeout_s``:
        a topic just created has no leader for a moment (Apache Kafka answers NOT_LEADER_OR_FOLLOWER)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                futures = self._admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, request_timeout=self.timeout_s)
                return {(tp.topic, tp.partition): future.result(timeout=self.timeout_s + 5).offset
                        for tp, future in futures.items()}
            except KafkaException as exc:
                err = kafka_error(exc)
                if error_class(err) is not RetriableError or time.monotonic() > deadline:
                    raise error_class(err)(f"cannot read the end offsets of the store topics: {err.str()}") from exc
            except Exception as exc:
                raise RetriableError(f"cannot read the end offsets of the store topics: {exc}") from exc
            time.sleep(0.1)

    def read_all(self, partitions: dict[str, int]) -> dict[str, list[Record]]:
        """Every record of the topics, from the beginning to the end as of now, in partition order."""
        out: dict[str, list[Record]] = {topic: [] for topic in partitions}
        tps = [TopicPartition(topic, p) for topic, count in partitions.items() for p in range(count)]
        ends = self._end_offsets(tps)
        pending = {key for key, end in ends.items() if end > 0}
        if not pending:
            return out
        consumer = self._client(Consumer, "consumer", {
            "group.id": f"connect-store-reader-{uuid.uuid4().hex}", "enable.auto.commit": False,
            "enable.partition.eof": True, "auto.offset.reset": "earliest", "isolation.level": "read_committed",
            "fetch.wait.max.ms": 50})
        try:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for topic, p in sorted(pending)])
            deadline, last_error = time.monotonic() + self.timeout_s, None
            while pending:
                if time.monotonic() > deadline:  # no progress for timeout_s
                    late = ", ".join(f"{t}[{p}]" for t, p in sorted(pending))
                    raise RetriableError(f"timed out after {self.timeout_s}s reading store topics {late} to their end"
                                         + (f" (last error: {last_error})" if last_error else ""))
                for msg in consumer.consume(1000, 0.1):
                    key = (msg.topic(), msg.partition())
                    err = msg.error()
                    if err is None:
                        out[key[0]].append((msg.key(), msg.value()))
                        deadline = time.monotonic() + self.timeout_s
                    elif err.code() == KafkaError._PARTITION_EOF:
                        if msg.offset() >= ends.get(key, 0):
                            pending.discard(key)
                    elif err.fatal() or err.code() in _UNREADABLE:
                        raise ConnectError(f"cannot read store topic {key[0]!r}: {err.str()}")
                    else:  # transport errors...: librdkafka retries; the deadline bounds it
                        last_error = err.str()
                        log.debug("reading store topic %s: %s", key[0], last_error)
        finally:
            consumer.close()
        return out
