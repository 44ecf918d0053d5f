"""In-memory source and sink for tests, demos and connector authors (bytewax-style).

``memory`` source: ``partitions`` partitions of ``records`` records each, values
``b"<topic>-<partition>-<offset>"``; resumes after committed offsets; can raise RetriableError
from ``poll`` a number of times. ``memory`` sink: appends what it receives to
``MemorySinkTask.written[<sink name>]`` (this process only); can reject chosen records as a
broker would (reported through the errant-record reporter) or raise RetriableError from ``put``;
its side writer (dead letters, offset syncs) appends to the same list, records renamed to the
side topic, and rejects alike.
"""

from __future__ import annotations

import operator
import threading
from collections import defaultdict
from typing import Any, Mapping, Sequence

from connect import patterns
from connect.batch import NativeBatch, NativeCodec
from connect.config import ConfigDef, Type, at_least
from connect.connector import SinkConnector, SourceConnector
from connect.errors import RetriableError
from connect.records import ConnectRecord
from connect.sink import SinkTask
from connect.sink.routing import ROUTING_CONFIG, TopicRouter
from connect.sink.side import SideWriter
from connect.source import SourceTask

__all__ = ["MemorySourceConnector", "MemorySourceTask", "MemorySinkConnector", "MemorySinkTask", "MemorySideWriter"]


class MemoryCodec(NativeCodec):
    """The memory source's native messages: ``(partition, index)`` tuples (``connect.batch``)."""

    def __init__(self, topic: str, partitions: dict[int, dict]):
        self.partitions = partitions
        self.topic_name = topic
        self.topic_getter = self.topic
        self.header_getter = self.headers
        self.partition_getter = operator.itemgetter(0)
        self.key_getter = lambda m: str(m[1]).encode()
        self.value_getter = lambda m: f"{self.topic_name}-{m[0]}-{m[1]}".encode()

    def timestamps(self, messages: list):
        return (1_700_000_000_000 + i for _p, i in messages)

    def record(self, m: tuple[int, int]) -> ConnectRecord:
        p, i = m
        return ConnectRecord(self.topic_name, str(i).encode(), f"{self.topic_name}-{p}-{i}".encode(),
                             (("i", str(i).encode()),), 1_700_000_000_000 + i, self.partitions[p], {"offset": i}, p)

    def topic(self, m: tuple[int, int]) -> str:
        return self.topic_name

    def headers(self, m: tuple[int, int]) -> list:
        return [("i", str(m[1]).encode())]

    def payload_bytes(self, messages: list) -> int:
        return sum(len(str(i)) + len(f"{self.topic_name}-{p}-{i}") for p, i in messages)


class MemorySourceTask(SourceTask):
    native_kind = "memory"  # ``poll`` returns native batches of (partition, index) when allowed

    def start(self, config: Mapping[str, Any], context) -> None:
        cfg = MemorySourceConnector.config_def().parse(config)
        self.topic = cfg["topic"]
        self.records = cfg["records"]
        self.batch = cfg["batch.size"]
        self.poll_failures = cfg["fail.poll.times"]
        assigned = [int(p) for p in config.get("task.partitions", "").split(",") if p.strip()]
        if not assigned:
            assigned = list(range(cfg["partitions"]))
        self.partitions = {p: {"topic": self.topic, "partition": p} for p in assigned}
        self.next = {}
        for p, sp in self.partitions.items():
            committed = context.offset_storage_reader.offset(sp)
            self.next[p] = committed["offset"] + 1 if committed else 0

    def poll(self) -> Sequence[ConnectRecord]:
        if self.poll_failures > 0:
            self.poll_failures -= 1
            raise RetriableError("memory source: injected poll failure")
        if self.context.native_batches:
            return self._native()
        out = []
        for p, sp in self.partitions.items():
            start = self.next[p]
            end = min(start + self.batch, self.records)
            for i in range(start, end):
                out.append(ConnectRecord(self.topic, str(i).encode(), f"{self.topic}-{p}-{i}".encode(),
                                         (("i", str(i).encode()),), 1_700_000_000_000 + i, sp, {"offset": i}, p))
            self.next[p] = end
        return out

    def _native(self) -> NativeBatch:
        items = []
        for p in self.partitions:
            start = self.next[p]
            end = min(start + self.batch, self.records)
            items.extend((p, i) for i in range(start, end))
            self.next[p] = end
        codec = MemoryCodec(self.topic, self.partitions)
        last = {}
        for p, i in {p: (p, i) for p, i in items}.values():
            last[id(self.partitions[p])] = codec.record((p, i))
        return NativeBatch("memory", items, codec, last, self.topic)

    def lag(self) -> int:
        return sum(self.records - n for n in self.next.values())

    def stop(self) -> None:
        pass


class MemorySourceConnector(SourceConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return (ConfigDef()
                .define("topic", Type.STRING, "memory", "Topic name the records carry.")
                .define("partitions", Type.INT, 1, "Number of partitions.", validator=at_least(1))
                .define("records", Type.INT, 100, "Records per partition.", validator=at_least(0))
                .define("batch.size", Type.INT, 100, "Most records per partition per poll.", validator=at_least(1))
                .define("fail.poll.times", Type.INT, 0, "Raise RetriableError from the first N polls."))

    @classmethod
    def task_class(cls) -> type:
        return MemorySourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        n = int(self.config.get("partitions", 1))
        groups = [list(range(n))[i::max_tasks] for i in range(min(max_tasks, n))]
        return [{**self.config, "task.partitions": ",".join(map(str, g))} for g in groups]


class _Rejections:
    """``reject.values`` / ``reject.times``: which records the memory sink refuses, and how."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.reject = patterns.compile(cfg["reject.values"]) if cfg["reject.values"] else None
        self.reject_times = cfg["reject.times"]
        self.rejections: dict[bytes, int] = defaultdict(int)

    def error(self, r: ConnectRecord) -> BaseException | None:
        if self.reject is None or not isinstance(r.value, bytes) or not self.reject.search(r.value.decode()):
            return None
        self.rejections[r.value] += 1
        if self.reject_times < 0 or self.rejections[r.value] <= self.reject_times:
            # Rejected a bounded number of times: a transient failure (re-sent by the runner);
            # always rejected: permanent (hooks, dead-letter topic, tolerance).
            return (RetriableError(f"memory sink refused {r.value!r} for now") if self.reject_times >= 0
                    else RuntimeError(f"memory sink rejected {r.value!r}"))
        return None


def _renamed(r: ConnectRecord, topic: str) -> ConnectRecord:
    return ConnectRecord(topic, r.key, r.value, r.headers, r.timestamp, r.source_partition, r.source_offset, r.partition)


class MemorySinkTask(SinkTask):
    written: dict[str, list[ConnectRecord]] = defaultdict(list)
    _lock = threading.Lock()

    def start(self, config: Mapping[str, Any], context) -> None:
        cfg = MemorySinkConnector.config_def().parse(config)
        self.name = cfg["name"]
        self.route = TopicRouter(cfg)
        self.rejecting = _Rejections(cfg)
        self.put_failures = cfg["fail.put.times"]
        self.buffer: list[ConnectRecord] = []

    def put(self, records: Sequence[ConnectRecord]) -> None:
        if self.put_failures > 0:
            self.put_failures -= 1
            raise RetriableError("memory sink: injected put failure")
        self.buffer.extend(records)

    native_kinds = frozenset({"memory"})
    native_puts = 0  # native batches taken (tests check which path a pair took)

    def put_native(self, batch: NativeBatch) -> None:
        """Records of a native batch are built here, each with the overlays the stages set."""
        self.put(batch.records())
        MemorySinkTask.native_puts += 1

    def flush(self, offsets) -> None:
        reporter = self.context.errant_record_reporter
        accepted = []
        for r in self.buffer:
            error = self.rejecting.error(r)
            if error is not None:
                reporter.report(r, error)
                continue
            accepted.append(_renamed(r, self.route(r.topic)))
        self.buffer = []
        with self._lock:
            self.written[self.name].extend(accepted)

    def stop(self) -> None:
        self.buffer = []


class MemorySideWriter(SideWriter):
    """The memory sink's side writer: appends to ``MemorySinkTask.written[<name>]`` at once,
    each record renamed to the side topic; ``reject.values`` applies as for the sink."""

    def __init__(self, config: Mapping[str, Any], topic: str) -> None:
        super().__init__(topic)
        cfg = MemorySinkConnector.config_def().parse(config)
        self.name = cfg["name"]
        self.rejecting = _Rejections(cfg)
        self.closed = 0

    def send(self, records: Sequence[ConnectRecord], deadline: float) -> None:
        accepted = []
        for r in records:
            error = self.rejecting.error(r)
            if error is not None:
                self._fail(r, error)
            else:
                accepted.append(_renamed(r, self.topic))
        with MemorySinkTask._lock:
            MemorySinkTask.written[self.name].extend(accepted)

    def flush(self, deadline: float) -> bool:
        return True

    def close(self) -> None:
        self.closed += 1


class MemorySinkConnector(SinkConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return ROUTING_CONFIG.merge(
            ConfigDef()
            .define("name", Type.STRING, "memory", "Key of MemorySinkTask.written that receives the records.")
            .define("reject.values", Type.STRING, "", "Regex: matching values are rejected at flush.",
                    validator=patterns.problem)
            .define("reject.times", Type.INT, -1,
                    "Reject a matching record this many times, as a transient failure; -1: always, as a permanent one.")
            .define("fail.put.times", Type.INT, 0, "Raise RetriableError from the first N puts."))

    @classmethod
    def task_class(cls) -> type:
        return MemorySinkTask

    @classmethod
    def side_writer(cls, config: Mapping[str, Any], topic: str) -> SideWriter:
        return MemorySideWriter(config, topic)
