"""Offset syncs: where a replicated record landed in the target, for offset translation.

A replication flow with ``offset.syncs.topic`` set asks its sink to report, with each
acknowledgement, where the record was stored (``SinkTaskContext.positions``: target topic, a
partition label and the target position - Kafka offset, RocketMQ queue offset, Pulsar message id).
:class:`AckedPositions` keeps the newest acknowledged record per (source partition, target
partition); :class:`OffsetSyncEmitter` turns them into *offset-sync records* at commit points and
writes them, with the sink's own connector, to the offset-syncs topic in the target cluster.

An offset sync says "the record at source position ``u`` of this source partition is stored at
``d`` in this target partition". Each one is a fact about one acknowledged record, so any of them
translates a consumer position conservatively (``connectors.replicator.checkpoint``): a group whose
next record is ``C > u`` has consumed ``u``, so resuming after ``d`` repeats at most the records
between ``u`` and ``C`` and skips nothing - records of one source partition reach a target
partition in their order, replays included. Unlike MirrorMaker 2 no offset arithmetic is done
(``d + (C - u)`` breaks on compacted or filtered sources), so no sync can be wrong, only older.

Sparse but bounded: per (source partition, target partition) a sync is written for the first
record, then at most once per ``offset.syncs.interval.ms`` when it moved - and always for the
newest record once the partition is idle, so a caught-up consumer translates exactly. Writing a
sync is best effort (a lost one only makes translation use an older one); failures are counted
and logged, never block the data.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Mapping

import orjson

from connect.records import ConnectRecord, make_record, partition_key

__all__ = ["AckedPositions", "OffsetSyncEmitter", "OffsetSync", "decode_sync"]

log = logging.getLogger(__name__)


class AckedPositions:
    """Fed by a sink's acknowledgements: the newest stored record per (source partition, target partition).

    A sync must say "every later record of this source partition is stored after ``d``", which holds
    for records that land in the order they were sent. A record sent *again* (a transient failure
    re-sent by the runner, a batch the sink re-sends record by record) may land after records that
    were polled later, so its acknowledgement is not used: the runner and the sinks mark such records
    with ``resent`` before sending them again. And an entry only moves when its target position grows
    - acknowledgements served out of order never move it back."""

    __slots__ = ("latest", "resent")

    def __init__(self) -> None:
        # (id(source partition), target topic, label) -> [source partition, source offset, target position]
        self.latest: dict[tuple, list] = {}
        self.resent: set[int] = set()  # id() of records sent again: their acknowledgements are not used

    def mark_resent(self, records) -> None:
        self.resent.update(map(id, records))

    def ack(self, record: ConnectRecord, topic: str, label: Any, position: Any) -> None:
        """``record`` is stored at ``position`` of ``(topic, label)`` (called once per acknowledged record)."""
        if self.resent and id(record) in self.resent:
            self.resent.discard(id(record))
            return
        key = (id(record.source_partition), topic, label)
        entry = self.latest.get(key)
        if entry is None:
            self.latest[key] = [record.source_partition, record.source_offset, position]
        elif position > entry[2]:  # positions only grow within a target partition
            entry[1] = record.source_offset
            entry[2] = position


class OffsetSync:
    """One decoded offset-sync record."""

    __slots__ = ("source_alias", "source_partition", "source_offset", "target_alias", "topic", "label", "position", "ts")

    def __init__(self, source_alias: str, source_partition: dict, source_offset: dict, target_alias: str,
                 topic: str, label: Any, position: Any, ts: int):
        self.source_alias = source_alias
        self.source_partition = source_partition
        self.source_offset = source_offset
        self.target_alias = target_alias
        self.topic = topic
        self.label = label
        self.position = position
        self.ts = ts

    def __repr__(self) -> str:
        return (f"OffsetSync({self.source_alias}:{partition_key(self.source_partition)}@{self.source_offset} -> "
                f"{self.target_alias}:{self.topic}[{self.label}]@{self.position})")


def _tupled(value: Any) -> Any:
    """JSON lists back to (hashable, comparable) tuples."""
    return tuple(_tupled(v) for v in value) if isinstance(value, list) else value


def decode_sync(value: bytes | str) -> OffsetSync:
    """An offset-sync record's value; ValueError naming what is wrong otherwise."""
    try:
        doc = orjson.loads(value)
        source, target = doc["source"], doc["target"]
        return OffsetSync(str(source["alias"]), dict(source["partition"]), dict(source["offset"]), str(target["alias"]),
                          str(target["topic"]), _tupled(target["partition"]), _tupled(target["position"]),
                          int(doc.get("ts", 0)))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not an offset-sync record ({type(exc).__name__}: {exc})") from None


class OffsetSyncEmitter:
    """Writes offset syncs for one task pair through a side writer of the pair's sink connector
    (:class:`~connect.sink.side.SideWriter`, its topic the offset-syncs topic)."""

    def __init__(self, positions: AckedPositions, writer_factory: Callable[[], Any], *, topic: str,
                 source_alias: str, target_alias: str, interval_ms: int, name: str):
        self.positions = positions
        self._factory = writer_factory
        self._writer = None
        self.topic = topic
        self.source_alias = source_alias
        self.target_alias = target_alias
        self.interval = interval_ms / 1000
        self.name = name
        self._written: dict[tuple, tuple[Any, float]] = {}  # key -> (position written, when)
        self._partition = {"offset-syncs": f"{source_alias}->{target_alias}"}
        self.emitted = 0
        self.failed = 0

    def _due(self, now: float) -> list[ConnectRecord]:
        out = []
        ts = int(time.time() * 1000)
        for key, (sp, offset, position) in self.positions.latest.items():
            written = self._written.get(key)
            if written is not None and (written[0] == position or now - written[1] < self.interval):
                continue
            self._written[key] = (position, now)
            value = orjson.dumps({
                "source": {"alias": self.source_alias, "topic": sp.get("topic"), "partition": sp, "offset": offset},
                "target": {"alias": self.target_alias, "topic": key[1], "partition": key[2], "position": position},
                "ts": ts})
            label = f"{self.source_alias}:{partition_key(sp)}->{key[1]}:{key[2]}"
            out.append(make_record(self.topic, label.encode(), value, None, ts, self._partition, {"ts": ts}, 0))
        return out

    def emit(self) -> int:
        """Write the syncs that are due; serve the writer's outcomes. Never raises."""
        records = self._due(time.monotonic())
        try:
            writer = self._writer
            if records:
                if writer is None:
                    writer = self._writer = self._factory()
                writer.send(records, time.monotonic() + 0.5)  # a full queue never holds the data up
                self.emitted += len(records)
            if writer is not None:
                writer.flush(time.monotonic())  # serve the outcomes that arrived, never wait
                failed = writer.take_failures()
                if failed:
                    self.failed += len(failed)
                    log.warning("[%s] %d offset sync(s) not written to %s: %s", self.name, len(failed), self.topic,
                                failed[0][1])
        except Exception as exc:  # noqa: BLE001 - syncs are advisory; the data flow goes on
            self.failed += len(records)
            log.warning("[%s] offset syncs not written to %s: %s", self.name, self.topic, exc)
            self._drop_writer()
        return len(records)

    def _drop_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            except Exception:  # noqa: BLE001
                pass

    def metrics(self) -> Mapping[str, float]:
        return {"offset_syncs.emitted": float(self.emitted), "offset_syncs.failed": float(self.failed)}

    def close(self) -> None:
        writer = self._writer
        if writer is not None:
            try:
                writer.flush(time.monotonic() + 1.0)
            except Exception:  # noqa: BLE001
                pass
        self._drop_writer()
