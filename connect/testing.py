"""The test kit: in-memory connectors, and one task pair run in-process without Spark.

**In-memory connectors** (tests, demos, connector authors; bytewax-style). ``memory`` source:
``partitions`` partitions of ``records`` records each, values ``b"<topic>-<partition>-<offset>"``;
resumes after committed offsets; can raise RetriableError from ``poll`` a number of times.
``memory`` sink: appends what it receives to ``MemorySinkTask.written[<sink name>]`` (this process
only); can reject chosen records as a broker would (reported through the errant-record reporter)
or raise RetriableError from ``put``; its side writer (dead letters, offset syncs) appends to the
same list, records renamed to the side topic, and rejects alike.

**One pair, in-process.** :func:`run_pair` drives the real
:class:`~connect.tasks.runner.TaskPairRunner` (the loop, the at-least-once accounting, the
failed-record routing through hooks, dead-letter topic and ``errors.tolerance``) with the
transforms and predicates of a pipeline config, epoch after epoch as the worker would, and returns
what happened::

    from connect.testing import run_pair

    run = run_pair({"transforms": "mask", "transforms.mask.type": "MaskField$Value",
                    "transforms.mask.fields": "card", "errors.deadletterqueue.topic.name": "dlq"},
                   records=[(b"k1", b'{"card": "4111", "id": 1}'), (b"k2", b"not json")])
    assert [r.value for r in run.delivered] == [b'{"card":"","id":1}']
    assert run.dead_letters[0].key == b"k2"
    assert run.committed  # both offsets committed: one delivered, one dead-lettered

The config is a pipeline config's ``config`` object (flat keys): ``source.*`` and ``sink.*`` (each
with its ``connector.class``: a name the worker resolves, or give the class as ``source=`` /
``sink=``), ``dlq.*``, ``transforms*``, ``predicates*`` and the framework keys of one pair
(:data:`FRAMEWORK_KEYS`). Without a source, ``records=`` feeds the pair (ConnectRecords,
``(key, value)`` pairs or values); without a sink, a memory sink collects what was delivered
(:attr:`PairRun.delivered`). With ``errors.deadletterqueue.topic.name`` set, dead letters go to
the memory side writer (:attr:`PairRun.dead_letters`), or through ``dead_letters=``: ``"sink"``
(the side writer of the pair's sink connector - or of ``dlq.connector.class`` when set - as the
worker writes them, :mod:`connect.sink.side`) or a SinkConnector class whose side writer keeps them.
"""

from __future__ import annotations

import itertools
import operator
import threading
from collections import defaultdict
from typing import Any, Callable, Iterable, Mapping, Sequence

import attrs

from connect import patterns
from connect.batch import NativeBatch, NativeCodec
from connect.config import ConfigDef, Type, at_least
from connect.connector import Connector, SinkConnector, SourceConnector
from connect.errors import ConfigError, ConfigIssue, RetriableError
from connect.plugins import resolve_connector
from connect.records import ConnectRecord
from connect.settings import settings_def, settings_from
from connect.sink import SinkTask
from connect.sink.routing import ROUTING_CONFIG, TopicRouter
from connect.sink.side import SideWriter, side_output_config, side_output_issues
from connect.source import SourceTask
from connect.tasks.plan import PairPlan
from connect.tasks.policy import RunnerPolicy
from connect.tasks.results import EpochResult
from connect.tasks.runner import TaskPairRunner
from connect.tasks.stages import build_chain
from connect.transforms.chain import is_transforms_key, load_transforms

__all__ = ["MemorySourceConnector", "MemorySourceTask", "MemorySinkConnector", "MemorySinkTask", "MemorySideWriter",
           "run_pair", "PairRun", "ListSourceTask", "FRAMEWORK_KEYS"]


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


# The framework keys of one pair: the runner's own settings (declared once, on RunnerPolicy) and the
# dead-letter topic; the worker's other keys (tasks.max, restart backoff) mean nothing for one pair.
_PAIR_CONFIG = settings_def(RunnerPolicy).define(
    "errors.deadletterqueue.topic.name", Type.STRING, "", "Topic that receives records the sink rejected.")
FRAMEWORK_KEYS = tuple(k.name for k in _PAIR_CONFIG.keys())
_RUNS = itertools.count()
_SIDE_KEYS = ("key.converter", "value.converter", "cluster.alias")  # the worker's, not the connector's
_PREFIXES = ("source.", "sink.", "dlq.")


class ListSourceTask(SourceTask):
    """Emits :attr:`records` in batches of ``batch.size`` (default 500), one source partition
    (``{"testkit": <topic>}``, offsets 0, 1, ...), resuming after the committed offset."""

    records: Sequence[ConnectRecord] = ()

    def start(self, config: Mapping[str, Any], context) -> None:
        self.batch = int(config.get("batch.size", 500))
        committed = context.offset_storage_reader.offset(self.records[0].source_partition) if self.records else None
        self.next = committed["offset"] + 1 if committed else 0

    @property
    def exhausted(self) -> bool:
        return self.next >= len(self.records)

    def poll(self) -> Sequence[ConnectRecord]:
        out = self.records[self.next:self.next + self.batch]
        self.next += len(out)
        return out

    def stop(self) -> None:
        pass


@attrs.define
class PairRun:
    """What one :func:`run_pair` did."""

    delivered: list[ConnectRecord]  # what the memory sink acknowledged, in order ([] for a real sink)
    dead_letters: list[ConnectRecord]  # what the memory dead-letter writer acknowledged
    committed: dict[str, Any]  # source partition key -> last committed offset
    results: list[EpochResult]  # one per epoch

    @property
    def state(self) -> str:
        return self.results[-1].state if self.results else "UNASSIGNED"

    @property
    def trace(self) -> str | None:
        return next((r.trace for r in self.results if r.trace), None)

    @property
    def stats(self) -> dict[str, Any]:
        """The epochs' counters added up (records, filtered, errors, dead_lettered...) and their failure reasons."""
        total: dict[str, Any] = {"failure_reasons": {}}
        for r in self.results:
            for key, value in r.stats.items():
                if key == "failure_reasons":
                    for reason, n in value.items():
                        total[key][reason] = total[key].get(reason, 0) + n
                elif key.endswith("_max") and isinstance(value, (int, float)):
                    total[key] = max(total.get(key, 0), value)
                elif isinstance(value, (int, float)) and not isinstance(value, bool) and not key.endswith("_avg"):
                    total[key] = total.get(key, 0) + value
        return total


def _records(items: Iterable[Any], topic: str) -> list[ConnectRecord]:
    """ConnectRecords of one partition ``{"testkit": topic}`` with offsets 0, 1, ..."""
    partition = {"testkit": topic}
    out = []
    for i, item in enumerate(items):
        if isinstance(item, ConnectRecord):
            item = attrs.evolve(item, source_partition=partition, source_offset={"offset": i})
        elif isinstance(item, tuple) and len(item) == 2:
            item = ConnectRecord(topic, item[0], item[1], None, None, partition, {"offset": i})
        else:
            item = ConnectRecord(topic, None, item, None, None, partition, {"offset": i})
        out.append(item)
    return out


def _policy(flat: Mapping[str, Any]) -> tuple[RunnerPolicy, str]:
    """The pair's RunnerPolicy (2 s epochs unless the config says) and the dead-letter topic."""
    framework = {k: v for k, v in flat.items() if not k.startswith(_PREFIXES) and not is_transforms_key(k)}
    issues = _PAIR_CONFIG.validate(framework) + _PAIR_CONFIG.unknown_keys(framework)
    if issues:
        raise ConfigError(issues, source="run_pair")
    values = _PAIR_CONFIG.parse(framework)
    quick = {field: 2_000 for key, field in (("epoch.max.ms", "epoch_max_ms"), ("epoch.grace.ms", "epoch_grace_ms"))
             if key not in framework}
    return settings_from(RunnerPolicy, values, **quick), values["errors.deadletterqueue.topic.name"]


def _task(spec: Any, kind: str, config: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(task instance, task config) for a connector class or name, or a task class."""
    own = {k: v for k, v in config.items() if k not in _SIDE_KEYS and k != "connector.class"}
    if isinstance(spec, str):
        spec = resolve_connector(spec, kind)
    if isinstance(spec, type) and issubclass(spec, Connector):
        connector = spec()
        connector.start(own)
        try:
            task_configs = connector.task_configs(1)
        finally:
            connector.stop()
        own = task_configs[0] if task_configs else own
        spec = spec.task_class()
    side = {k: v for k, v in config.items() if k in _SIDE_KEYS}
    return spec(), {**side, **own}


def _dead_letter_writer(flat: Mapping[str, str], topic: str, capture: SideWriter, dead_letters: Any,
                        sink: Any, sink_cfg: Mapping[str, Any]) -> Callable[[], SideWriter]:
    """The dead-letter writer's factory, as the worker builds it: the memory writer, or the side
    writer of ``dlq.connector.class`` (its keys the ``dlq.*`` ones), of a connector class given as
    ``dead_letters``, or of the sink connector (``"sink"``: its keys with the ``dlq.*`` overrides)."""
    if dead_letters is None:
        return lambda: capture
    dlq = {k[4:]: v for k, v in flat.items() if k.startswith("dlq.")}
    named = dlq.pop("connector.class", None)
    cls = named or (sink if dead_letters == "sink" else dead_letters)
    if isinstance(cls, str):
        cls = resolve_connector(cls, "sink")
    if not (isinstance(cls, type) and issubclass(cls, SinkConnector)):
        raise ConfigError([ConfigIssue("errors.deadletterqueue.topic.name", None, "dead_letters='sink' needs the sink "
                                       "as a SinkConnector class or name (its side writer keeps the dead letters)")],
                          source="run_pair")
    issues = side_output_issues(cls, {"errors.deadletterqueue.topic.name": topic})
    if issues:
        raise ConfigError(issues, source="run_pair")
    config = side_output_config(sink_cfg, dlq, topic, own_connector=bool(named) or dead_letters != "sink")
    return lambda: cls.side_writer(config, topic)


def run_pair(config: Mapping[str, Any] | None = None, *, records: Iterable[Any] | None = None,
             source: type[SourceConnector] | type[SourceTask] | str | None = None,
             sink: type[SinkConnector] | type[SinkTask] | str | None = None,
             dead_letters: str | type[SinkConnector] | None = None, epochs: int = 5,
             until: Callable[[PairRun], bool] | None = None, offsets: Mapping[str, Any] | None = None,
             name: str = "testkit") -> PairRun:
    """Run a pair for at most ``epochs`` epochs (see the module doc); stops early once ``until(run)``
    is true, once a ``records=`` source is drained, or when an epoch FAILED. ``offsets``: committed
    offsets to start from (e.g. an earlier run's :attr:`PairRun.committed`). Raises ConfigError for
    a config the worker would refuse (the transforms keys, the framework keys)."""
    flat = {k: str(v) for k, v in (config or {}).items()}
    transforms = load_transforms(flat, source="run_pair")
    policy, dlq_topic = _policy(flat)
    source_cfg = {k[7:]: v for k, v in flat.items() if k.startswith("source.")}
    sink_cfg = {k[5:]: v for k, v in flat.items() if k.startswith("sink.")}
    if records is not None:
        source_task = ListSourceTask()
        source_task.records = _records(records, source_cfg.get("topic", "testkit"))
    else:
        source_task, source_cfg = _task(source or source_cfg.get("connector.class"), "source", source_cfg)
    # Without a sink, a memory sink and its side writer under names of this run only (their lists
    # are taken out of MemorySinkTask.written when the run ends)
    key = f"run_pair-{next(_RUNS)}"
    if sink is None and "connector.class" not in sink_cfg:
        sink_task, sink_cfg = MemorySinkTask(), {"name": key}
    else:
        sink_task, sink_cfg = _task(sink or sink_cfg["connector.class"], "sink", sink_cfg)
    dlq_capture = MemorySideWriter({"name": f"{key}-dlq"}, dlq_topic)
    dlq_factory = None
    if dlq_topic:
        dlq_factory = _dead_letter_writer(flat, dlq_topic, dlq_capture, dead_letters,
                                          sink or flat.get("sink.connector.class"), sink_cfg)

    steps, closers = transforms.build()
    runner = TaskPairRunner(PairPlan(
        connector=name, task_id=0, source=source_task, sink=sink_task, source_config=source_cfg,
        sink_config=sink_cfg, policy=policy, offsets=dict(offsets or {}), dlq_factory=dlq_factory,
        stages=build_chain(policy, source_cfg, sink_cfg, steps, closers),
        stop_requested=lambda: getattr(source_task, "exhausted", False)))
    with MemorySinkTask._lock:
        delivered, dead = MemorySinkTask.written[key], MemorySinkTask.written[f"{key}-dlq"]
    run = PairRun(delivered, dead, dict(offsets or {}), [])
    try:
        for epoch in range(epochs):
            result = runner.run_epoch(epoch)
            run.results.append(result)
            run.committed.update(result.offsets)
            if result.state != "RUNNING":
                break
            runner.offsets_persisted()
            if (until is not None and until(run)) or (getattr(source_task, "exhausted", False)
                                                      and not result.stats.get("in_flight")):
                break
    finally:
        runner.stop()
        with MemorySinkTask._lock:
            MemorySinkTask.written.pop(key, None)
            MemorySinkTask.written.pop(f"{key}-dlq", None)
    return run
