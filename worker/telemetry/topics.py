"""Active topics (Kafka Connect's KIP-558): the topics each connector's task pairs have read records
from, since the connector was created, the worker started, or its topics were last reset.

Taken from the epoch results the driver already gets: a source partition whose offset an epoch
committed (with records committed in it) names its topic (``{"topic": ..., ...}``, as the Kafka,
Pulsar and RocketMQ sources key their partitions). A partition key is parsed once per connector.
Kept in memory: a worker restart starts the sets again, as a reset does.
"""

from __future__ import annotations

import threading
from typing import Iterable

import orjson

from connect.tasks.results import EpochResult

__all__ = ["ActiveTopics"]


class ActiveTopics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._topics: dict[str, set[str]] = {}
        self._seen: dict[str, set[str]] = {}  # connector -> partition keys already taken

    def observe(self, connector: str, results: Iterable[EpochResult]) -> None:
        for r in results:
            if not r.offsets or not (r.stats or {}).get("committed"):
                continue  # nothing read (e.g. only start positions persisted)
            with self._lock:
                seen = self._seen.setdefault(connector, set())
                fresh = [key for key in r.offsets if key not in seen]
                if not fresh:
                    continue
                seen.update(fresh)
                topics = self._topics.setdefault(connector, set())
                for key in fresh:
                    try:
                        topic = orjson.loads(key).get("topic")
                    except (orjson.JSONDecodeError, AttributeError):
                        continue
                    if isinstance(topic, str) and topic:
                        topics.add(topic)

    def topics(self, connector: str) -> list[str]:
        with self._lock:
            return sorted(self._topics.get(connector, ()))

    def reset(self, connector: str) -> None:
        with self._lock:
            self._topics.pop(connector, None)
            self._seen.pop(connector, None)
