"""Stages: what happens to a polled batch between ``SourceTask.poll`` and ``SinkTask.put``.

A task pair runs one :class:`StageChain`: the replication stages (origin-chain filter, hop limit,
one path, origin append, topic naming; ``connect.tasks.replication``), the source-side converters, the user's
transforms and predicates (``connect.transforms``) and the sink-side converters, in that order.
Each stage owns one concern; the runner only hands it batches and routes what comes out.

The contract of :meth:`Stage.apply`:

- it gets a batch (a list of records, in poll order) and returns the records to pass on, in
  their order: a record it does not return is *dropped* (counted ``filtered``; its offset
  advances like any delivered record's);
- a record it cannot handle is appended to ``failures`` as ``(record, error)`` and not returned:
  a *permanent* failure of that record only, routed like a record the sink refused (failed-message
  hooks, then the dead-letter topic, then ``errors.tolerance``); the error's text names the stage;
- it never raises for one bad record; an exception out of ``apply`` is a failure of the pair.

Stages work on whole batches so a stage can act on a batch without touching every record (the
replication filter needs only headers; a batch-native path can skip record building where no
stage needs one). Per-record stages (converters, transforms) run together in one
:class:`RecordStages` pass, so a failure reports the record as it entered them - what goes to the
dead-letter topic is the polled record (in a replication flow: with its origin chain extended and
its topic named for the target), not a half-transformed copy. No step may change a record's
``source_partition`` or ``source_offset``: offsets are held and committed by them.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from connect.converters import BytesConverter, converter_for
from connect.errors import ConnectError, ConversionError
from connect.records import ConnectRecord, make_record
from connect.tasks.fused import FusedReplication
from connect.tasks.replication import FlowRules, TopicNaming, replication_stages
from connect.transforms.topics import DROPPED, TopicRoute, topic_routes

__all__ = ["Stage", "StageChain", "RecordStages", "StageError", "ConvertStage", "Failures", "target_routes",
           "target_counts"]

Failures = list  # list[tuple[ConnectRecord, BaseException]]


class StageError(ConnectError):
    """A stage could not handle one record; its text names the stage and the record's position."""


class Stage:
    """One step of the chain; see the module doc for the contract."""

    name = "stage"

    def apply(self, batch: list[ConnectRecord], failures: Failures) -> list[ConnectRecord]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the stage holds; called once when the pair stops."""


class RecordStages(Stage):
    """Per-record steps run as one pass: each record goes through every step in turn; a step
    returns the (possibly new) record, or None to drop it. A step that raises fails that record
    only, with the step's name and the record's polled position in the reason."""

    name = "record stages"

    def __init__(self, steps: Sequence[tuple[str, Callable[[ConnectRecord], ConnectRecord | None]]],
                 closers: Sequence[Callable[[], None]] = ()):
        self.steps = list(steps)
        self._closers = list(closers)

    def apply(self, batch: list[ConnectRecord], failures: Failures) -> list[ConnectRecord]:
        out = []
        append = out.append
        steps = self.steps
        for original in batch:
            r = original
            for name, step in steps:
                try:
                    r = step(r)
                except ConversionError as exc:
                    failures.append((original, exc))
                    r = None
                except Exception as exc:  # noqa: BLE001 - one record fails, not the pair
                    failures.append((original, StageError(f"{name} failed on record {original.position()}: "
                                                          f"{type(exc).__name__}: {exc}")))
                    r = None
                if r is None:
                    break
            else:
                if r.source_partition is not original.source_partition or r.source_offset is not original.source_offset:
                    if r.source_partition != original.source_partition or r.source_offset != original.source_offset:
                        # the runner holds and commits offsets by these: a step may not move a record
                        failures.append((original, StageError(
                            f"{_last_named(steps)} changed the source partition or offset of record "
                            f"{original.position()}; transforms may change anything else")))
                        continue
                append(r)
        return out

    def close(self) -> None:
        for close in self._closers:
            close()


def _last_named(steps) -> str:
    """The steps that may have moved a record (any of them: the check runs after the last)."""
    return "a step (" + ", ".join(name for name, _ in steps) + ")"


class ConvertStage:
    """Source-side decode and sink-side encode of keys and values (``key.converter`` /
    ``value.converter`` of each side)."""

    def __init__(self, source_cfg: Mapping[str, Any], sink_cfg: Mapping[str, Any]):
        self.src_key = converter_for(source_cfg.get("key.converter", "bytes"))
        self.src_value = converter_for(source_cfg.get("value.converter", "bytes"))
        self.sink_key = converter_for(sink_cfg.get("key.converter", "bytes"))
        self.sink_value = converter_for(sink_cfg.get("value.converter", "bytes"))

    @property
    def decodes(self) -> bool:
        return not (isinstance(self.src_key, BytesConverter) and isinstance(self.src_value, BytesConverter))

    @property
    def encodes(self) -> bool:
        return not (isinstance(self.sink_key, BytesConverter) and isinstance(self.sink_value, BytesConverter))

    def decode(self, r: ConnectRecord) -> ConnectRecord:
        return _converted(r, self.src_key.from_bytes, self.src_value.from_bytes)

    def encode(self, r: ConnectRecord) -> ConnectRecord:
        return _converted(r, self.sink_key.to_bytes, self.sink_value.to_bytes)


def _converted(r: ConnectRecord, key_fn: Callable[[Any], Any], value_fn: Callable[[Any], Any]) -> ConnectRecord:
    """``r`` with its key and value passed through one side's converters; the error names which one."""
    try:
        key = key_fn(r.key)
    except ConversionError as exc:
        raise ConversionError(f"key of record {r.position()}: {exc}") from None
    try:
        value = value_fn(r.value)
    except ConversionError as exc:
        raise ConversionError(f"value of record {r.position()}: {exc}") from None
    return make_record(r.topic, key, value, r.headers, r.timestamp, r.source_partition, r.source_offset,
                       r.partition, r.value_schema)


class StageChain:
    """The stages of one pair, in order. :meth:`apply` returns (records to put, dropped, failures).

    ``native``: what the chain does to a native batch (:class:`~connect.batch.NativeBatch`):
    None when it has nothing to do, a callable ``(batch) -> (batch, dropped)`` when its stages read
    and write headers and topic names only (the fused replication step, ``connect.tasks.fused``),
    False when a stage needs records (the pair then moves records)."""

    def __init__(self, stages: Sequence[Stage], native: Callable | None | bool = False):
        self.stages = [s for s in stages if s is not None]
        self.native = None if not self.stages else native

    def __bool__(self) -> bool:
        return bool(self.stages)

    def apply(self, batch: list[ConnectRecord]) -> tuple[list[ConnectRecord], int, Failures]:
        failures: Failures = []
        n = len(batch)
        for stage in self.stages:
            batch = stage.apply(batch, failures)
            if not batch:
                break
        return batch, n - len(batch) - len(failures), failures

    def mark_open_gaps(self, gaps: int) -> None:
        """The flow's open source gaps, as the worker knows them (``worker.runtime.gapledger``): the
        replication stages mark the records they write while there are any (``GAPS_HEADER``)."""
        for stage in [*self.stages, getattr(self.native, "__self__", None)]:
            if hasattr(stage, "mark_open_gaps"):
                stage.mark_open_gaps(gaps)
            elif isinstance(getattr(stage, "rules", None), FlowRules):
                stage.rules.open_gaps = gaps

    def close(self) -> None:
        for stage in [*self.stages, getattr(self.native, "__self__", None)]:
            try:
                if stage is not None:
                    stage.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass


def build_chain(policy, source_cfg: Mapping[str, Any], sink_cfg: Mapping[str, Any],
                transforms: Sequence[tuple[str, Callable[[ConnectRecord], ConnectRecord | None]]] = (),
                closers: Sequence[Callable[[], None]] = ()) -> StageChain:
    """The chain of a pair: the replication stages (when ``policy`` names both cluster aliases;
    ``connect.tasks.replication``), then decode, the transforms (``(name, apply)`` steps), encode."""
    stages: list[Stage] = []
    native: Callable | None | bool = None
    if policy.source_alias and policy.target_alias:
        replication = dict(prop=policy.origin_property, max_hops=policy.max_hops, policy=policy.topic_policy,
                           separator=policy.policy_separator, topology=policy.topology)
        stages.extend(replication_stages(policy.source_alias, policy.target_alias, **replication))
        native = FusedReplication(policy.source_alias, policy.target_alias, **replication).apply
    conv = ConvertStage(source_cfg, sink_cfg)
    steps: list = []
    if conv.decodes:
        steps.append(("source converter", conv.decode))
    steps.extend(transforms)
    if conv.encodes:
        steps.append(("sink converter", conv.encode))
    if steps:
        stages.append(RecordStages(steps, closers))
        native = False
    return StageChain(stages, native)


def target_routes(policy, transforms, topics: Iterable[str]) -> dict[str, TopicRoute]:
    """Source topic -> where the chain sends its records, as far as the topic alone says: the
    replication stage's naming (a prefix, or none: dropped), then the transforms'
    (:func:`connect.transforms.topics.topic_routes`). What the pipeline validates and the driver
    prepares targets under."""
    naming = TopicNaming(policy.source_alias, policy.target_alias, policy.topic_policy, policy.policy_separator) \
        if policy.source_alias and policy.target_alias else None
    received = {t: naming.target_topic(t) if naming else t for t in topics}
    routes = topic_routes(transforms, [n for n in received.values() if n is not None])
    return {t: DROPPED if n is None else routes[n] for t, n in received.items()}


def target_counts(routes: Mapping[str, TopicRoute], counts: Mapping[str, int]) -> dict[str, int]:
    """The target names of ``routes`` with their sources' partition (queue) counts: the most
    of the sources that land in one target."""
    out: dict[str, int] = {}
    for topic, route in routes.items():
        for name in route.names:
            out[name] = max(out.get(name, 0), counts[topic])
    return out
