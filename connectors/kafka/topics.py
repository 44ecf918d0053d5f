"""Target-topic management for the Kafka sink: create missing topics, grow partition counts."""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewPartitions, NewTopic

from connect.errors import ConnectError, RetriableError

__all__ = ["TargetTopics"]

log = logging.getLogger(__name__)


_UNREACHABLE = {KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError.REQUEST_TIMED_OUT,
                KafkaError._ALL_BROKERS_DOWN, KafkaError.NOT_CONTROLLER}

# Longest single admin call; shorter when the caller's time runs out first.
_ADMIN_TIMEOUT_S = 10.0


class TargetTopics:
    def __init__(self, admin, cfg: Mapping[str, Any], time_left: Callable[[], float] = lambda: _ADMIN_TIMEOUT_S):
        self._admin = admin
        self._time_left = time_left
        self._create = cfg["topic.creation.enable"]
        self._partitions = cfg["topic.creation.partitions"]
        self._rf = cfg["topic.creation.replication.factor"]

    def _timeout(self) -> float:
        """Seconds the next admin call may take: the caller's time left (a bounded epoch), capped."""
        left = min(self._time_left(), _ADMIN_TIMEOUT_S)
        if left <= 0.05:
            raise RetriableError("no time left in this epoch to read or change target topics")
        return left

    def partition_counts(self) -> dict[str, int]:
        try:
            md = self._admin.list_topics(timeout=self._timeout())
        except KafkaException as exc:
            raise RetriableError(f"cannot read target metadata: {exc}") from exc
        return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}

    def ensure(self, topic: str, source_partitions: int, existing: Mapping[str, int] | None = None) -> int:
        """Partition count of ``topic`` after creating or growing it to ``source_partitions``."""
        counts = self.partition_counts() if existing is None else existing
        current = counts.get(topic, 0)
        wanted = self._partitions if self._partitions > 0 else max(source_partitions, 1)
        if current == 0:
            if not self._create:
                raise ConnectError(f"target topic {topic!r} does not exist and topic.creation.enable=false")
            self._run(self._admin.create_topics([NewTopic(topic, wanted, self._rf)], request_timeout=self._timeout()),
                      f"create target topic {topic!r} with {wanted} partition(s)", KafkaError.TOPIC_ALREADY_EXISTS)
            return self.partition_counts().get(topic, wanted)
        if self._create and current < source_partitions:
            try:
                self._run(self._admin.create_partitions([NewPartitions(topic, source_partitions)],
                                                        request_timeout=self._timeout()),
                          f"grow target topic {topic!r} to {source_partitions} partition(s)", None)
                return source_partitions
            except RetriableError:
                raise
            except ConnectError as exc:
                log.warning("%s; records of the extra source partitions are partitioned by key", exc)
        return current

    @staticmethod
    def _run(futures, what: str, ignore_code) -> None:
        for future in futures.values():
            try:
                future.result()
                log.info("%s: done", what)
            except KafkaException as exc:
                err = exc.args[0]
                if ignore_code is not None and err.code() == ignore_code:
                    continue
                if err.retriable() or err.code() in _UNREACHABLE:
                    raise RetriableError(f"cannot {what} now: {err.str()}") from exc
                raise ConnectError(f"cannot {what}: {err.str()}") from exc
