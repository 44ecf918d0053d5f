"""The connector authors' test kit: run one source task + sink task pair in-process, without Spark.

:func:`run_pair` drives the real :class:`~connect.tasks.runner.TaskPairRunner` (the loop, the
at-least-once accounting, the failed-record routing through hooks, dead-letter topic and
``errors.tolerance``) with the transforms and predicates of a pipeline config, epoch after
epoch as the worker would, and returns what happened::

    from connect.testkit import run_pair

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
``(key, value)`` pairs or values); without a sink, a capture sink collects what it receives
(:attr:`PairRun.delivered`). With ``errors.deadletterqueue.topic.name`` set, dead letters go to a
capture writer (:attr:`PairRun.dead_letters`), or through ``dead_letters=``: ``"sink"`` (the side
writer of the pair's sink connector - or of ``dlq.connector.class`` when set - as the worker writes
them, :mod:`connect.sink.side`) or a SinkConnector class whose side writer keeps them.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

import attrs

from connect.config import Type
from connect.connector import Connector, SinkConnector, SourceConnector
from connect.errors import ConfigError, ConfigIssue
from connect.plugins import resolve_connector
from connect.records import ConnectRecord
from connect.settings import settings_def, settings_from
from connect.sink import SinkTask
from connect.sink.side import SideWriter, side_output_config, side_output_issues
from connect.source import SourceTask
from connect.tasks.policy import RunnerPolicy
from connect.tasks.results import EpochResult
from connect.tasks.runner import TaskPairRunner
from connect.tasks.stages import build_chain
from connect.transforms.chain import is_transforms_key, load_transforms

__all__ = ["run_pair", "PairRun", "CaptureSinkTask", "CaptureSideWriter", "ListSourceTask", "FRAMEWORK_KEYS"]

# The framework keys of one pair: the runner's own settings (declared once, on RunnerPolicy) and the
# dead-letter topic; the worker's other keys (tasks.max, restart backoff) mean nothing for one pair.
_PAIR_CONFIG = settings_def(RunnerPolicy).define(
    "errors.deadletterqueue.topic.name", Type.STRING, "", "Topic that receives records the sink rejected.")
FRAMEWORK_KEYS = tuple(k.name for k in _PAIR_CONFIG.keys())
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


class CaptureSinkTask(SinkTask):
    """Collects what it is given in :attr:`received`, acknowledging every record."""

    def __init__(self) -> None:
        super().__init__()
        self.received: list[ConnectRecord] = []

    def start(self, config: Mapping[str, Any], context) -> None:
        pass

    def put(self, records: Sequence[ConnectRecord]) -> None:
        self.received.extend(records)

    def flush(self, offsets) -> None:
        pass

    def stop(self) -> None:
        pass


class CaptureSideWriter(SideWriter):
    """Collects the side records it is given in :attr:`received` (their topic set to its own),
    acknowledging every one."""

    def __init__(self, topic: str = "") -> None:
        super().__init__(topic)
        self.received: list[ConnectRecord] = []

    def send(self, records: Sequence[ConnectRecord], deadline: float) -> None:
        self.received.extend(attrs.evolve(r, topic=self.topic) for r in records)

    def flush(self, deadline: float) -> bool:
        return True


@attrs.define
class PairRun:
    """What one :func:`run_pair` did."""

    delivered: list[ConnectRecord]  # what the capture sink received, in order ([] for a real sink)
    dead_letters: list[ConnectRecord]  # what the capture dead-letter writer received
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


def _dead_letter_writer(flat: Mapping[str, str], topic: str, capture: CaptureSideWriter, dead_letters: Any,
                        sink: Any, sink_cfg: Mapping[str, Any]) -> Callable[[], SideWriter]:
    """The dead-letter writer's factory, as the worker builds it: the capture writer, or the side
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
    capture = CaptureSinkTask()
    sink_task, sink_cfg = (capture, sink_cfg) if sink is None and "connector.class" not in sink_cfg \
        else _task(sink or sink_cfg["connector.class"], "sink", sink_cfg)
    dlq_capture = CaptureSideWriter(dlq_topic)
    dlq_factory = None
    if dlq_topic:
        dlq_factory = _dead_letter_writer(flat, dlq_topic, dlq_capture, dead_letters,
                                          sink or flat.get("sink.connector.class"), sink_cfg)

    steps, closers = transforms.build()
    runner = TaskPairRunner(
        connector=name, task_id=0, source=source_task, sink=sink_task, source_config=source_cfg,
        sink_config=sink_cfg, policy=policy, offsets=dict(offsets or {}), dlq_factory=dlq_factory,
        stages=build_chain(policy, source_cfg, sink_cfg, steps, closers),
        stop_requested=lambda: getattr(source_task, "exhausted", False))
    run = PairRun(capture.received, dlq_capture.received, dict(offsets or {}), [])
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
    return run
