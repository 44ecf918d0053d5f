"""The record that flows from a SourceTask to a SinkTask.

A :class:`ConnectRecord` is immutable and cheap to create: it is built once per message on the
hot path, so it holds references only (no copies) and validates nothing at construction.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence, Tuple

import attrs

__all__ = ["ConnectRecord", "ValueSchema", "make_record", "Headers", "SourcePartition", "SourceOffset", "partition_key"]

import orjson

Headers = Sequence[Tuple[str, bytes | None]]
SourcePartition = Mapping[str, Any]
"""Where a record came from, e.g. ``{"topic": "orders", "partition": 3}``: primitives only."""
SourceOffset = Mapping[str, Any]
"""How far into its source partition a record is, e.g. ``{"offset": 1041}``: primitives only."""


@attrs.frozen(slots=True)
class ValueSchema:
    """The schema a record's value was written with at its source (a Pulsar schema: PIP-87).

    ``type`` is the schema type's name as Pulsar spells it (``AVRO``, ``JSON``, ``PROTOBUF``,
    ``KEY_VALUE``, ``STRING``...), ``definition`` its text (for AVRO and JSON the Avro schema
    JSON). Versions are not carried: they are numbers local to one cluster's registry, and the
    destination assigns its own. Sources build one object per schema and share it between the
    records that use it, so sinks can compare schemas cheaply.
    """

    type: str
    definition: str
    name: str = ""


@attrs.define(slots=True, eq=False, repr=False)
class _RecordSlots:
    """Storage layout of ConnectRecord, with a plain (fast) ``__init__``; see :func:`make_record`."""

    topic: str
    key: Any
    value: Any
    headers: Headers | None = None
    timestamp: int | None = None
    source_partition: SourcePartition = attrs.field(factory=dict)
    source_offset: SourceOffset = attrs.field(factory=dict)
    partition: int | None = None
    value_schema: ValueSchema | None = None


@attrs.frozen(slots=True, eq=True, repr=True)
class ConnectRecord(_RecordSlots):
    """One message in flight.

    Attributes:
        topic: the source topic (sinks map it to a target topic).
        key, value: payloads; ``bytes`` when they come from a broker, any Python object when a
            converter decoded them.
        headers: a sequence of ``(name, bytes | None)`` pairs, kept in order, duplicates allowed.
        timestamp: milliseconds since the epoch, or None.
        source_partition, source_offset: dicts of primitives the framework persists so the
            source task resumes after the last record acknowledged by the sink. Sources should
            reuse one ``source_partition`` object for every record of a partition: the runner
            groups offsets by that object's identity before it serialises them.
        partition: a partition-number hint for the sink: sinks keep it when the target topic has
            that partition (mirroring keeps partition numbers) and otherwise partition by key.
        value_schema: the value's schema when the source has one (:class:`ValueSchema`); sinks
            that can register schemas publish the value with it.
    """

    def position(self) -> str:
        """Human-readable position for error messages: ``topic[partition]@offset``."""
        sp = dict(self.source_partition)
        part = sp.pop("partition", None)
        sp.pop("topic", None)
        where = f"[{part}]" if part is not None else ""
        extra = f" {sp}" if sp else ""
        return f"{self.topic}{where}@{dict(self.source_offset)}{extra}"


def make_record(topic: str, key: Any, value: Any, headers: Headers | None, timestamp: int | None,
                source_partition: SourcePartition, source_offset: SourceOffset,
                partition: int | None = None, value_schema: ValueSchema | None = None, *,
                _new=_RecordSlots, _cls=ConnectRecord) -> ConnectRecord:
    """Build a ConnectRecord about 3x faster than ``ConnectRecord(...)``; for hot loops.

    attrs' frozen ``__init__`` sets each slot through ``object.__setattr__``; here the plain
    layout class fills the same slots with ordinary stores and the instance then becomes a
    ConnectRecord (same slots, so the class switch is allowed). The result is an ordinary,
    frozen, equal-comparing ConnectRecord.
    """
    record = _new(topic, key, value, headers, timestamp, source_partition, source_offset, partition, value_schema)
    record.__class__ = _cls
    return record


def partition_key(source_partition: SourcePartition) -> str:
    """Canonical string form of a source partition (sorted-key JSON), used as a store key."""
    return orjson.dumps(source_partition, option=orjson.OPT_SORT_KEYS).decode()
