"""Offset syncs: where a replicated record landed in the target, for offset translation.

A replication flow with ``offset.syncs.topic`` set asks its sink to report, with each
acknowledgement, where the record was stored (``SinkTaskContext.positions``: target topic, a
partition label and the target position - Kafka offset, RocketMQ queue offset, Pulsar message id).
:class:`AckedPositions` keeps the newest acknowledged record per (source partition, target
partition); :class:`OffsetSyncEmitter` turns them into *offset-sync records* at commit points and
writes them, with the sink's own connector, to the offset-syncs topic in the target cluster.
:class:`OffsetSyncListener` is how a pair runs them: an acknowledgement listener the runner calls
at its commit points (``connect.tasks.listeners``), not code inside the runner.

An offset sync says "the record at source position ``u`` of this source partition is stored at
``d`` in this target partition". Each one is a fact about one acknowledged record, so any of them
translates a consumer position conservatively (``connectors.replicator.checkpoint``): a group whose
next record is ``C > u`` has consumed ``u``, so resuming after ``d`` repeats at most the records
between ``u`` and ``C`` and skips nothing - records of one source partition reach a target
partition in their order, replays included. Unlike MirrorMaker 2 no offset arithmetic is done
(``d + (C - u)`` breaks on compacted or filtered sources), so no sync can be wrong, only older.

A source gap (records the source dropped before the flow copied them, ``connect.source.gaps``) is
written to the same topic as a *gap record*: ``{"source": {"alias", "topic", "partition", "gap":
{"first", "last", "records"}}, "target": {"alias"}, "ts"}`` (:class:`GapSync`), so the checkpoint
connector never translates a group positioned in the gap (a consumer moved there would skip,
without a word, records it never read). Gaps of unknown extent (a re-created topic) are not written.

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
from connect.source.gaps import is_bookkeeping_key
from connect.tasks.listeners import AckListener

__all__ = ["AckedPositions", "OffsetSyncEmitter", "OffsetSyncListener", "OffsetSync", "GapSync", "decode_sync"]

log = logging.getLogger(__name__)


class AckedPositions:
    """Fed by a sink's acknowledgements, per (source partition, target partition): the newest stored
    record, and the *distance points* - the first acknowledged record, then one record every
    ``max_lag`` acknowledged records - each of which becomes an offset sync.

    Distance is counted in acknowledged records of the (source partition, target partition), not in
    source offsets: it is the same for every broker (a Pulsar message id has no arithmetic), costs one
    increment and one comparison per record, and it is exactly what a consumer translated with the
    previous point reads again in that target partition (a compacted or filtered source skips offsets
    but not target records).

    A sync must say "every later record of this source partition is stored after ``d``", which holds
    for records that land in the order they were sent. A record sent *again* (a transient failure
    re-sent by the runner, a batch the sink re-sends record by record) may land after records that
    were polled later, so its acknowledgement gives no sync (it is still counted: it is in the target):
    the runner and the sinks mark such records with ``resent`` before sending them again. And an entry
    only moves when its target position grows - acknowledgements served out of order never move it back.

    Bounded: at most ``limit`` points wait per entry for the emitter (which takes them at every
    commit point); past that the waiting points are thinned (every other one dropped, the oldest kept)
    and ``thinned`` counts what was dropped."""

    __slots__ = ("latest", "resent", "max_lag", "limit", "thinned")

    def __init__(self, max_lag: int = 100, limit: int = 1024) -> None:
        # (id(source partition), target topic, label) ->
        #     [source partition, source offset, target position, acknowledged count, next point at, points]
        # with points: [(source offset, target position), ...] not yet taken by the emitter
        self.latest: dict[tuple, list] = {}
        self.resent: set[int] = set()  # id() of records sent again: their acknowledgements are not used
        self.max_lag = max(int(max_lag), 1)
        self.limit = max(int(limit), 2)
        self.thinned = 0

    def mark_resent(self, records) -> None:
        self.resent.update(map(id, records))

    def ack(self, record: ConnectRecord, topic: str, label: Any, position: Any) -> None:
        """``record`` is stored at ``position`` of ``(topic, label)`` (called once per acknowledged record)."""
        key = (id(record.source_partition), topic, label)
        entry = self.latest.get(key)
        if self.resent and id(record) in self.resent:
            self.resent.discard(id(record))
            if entry is not None:
                entry[3] += 1
            return
        if entry is None:  # the first acknowledged record always gives a sync
            offset = record.source_offset
            self.latest[key] = [record.source_partition, offset, position, 1, 1 + self.max_lag, [(offset, position)]]
            return
        entry[3] += 1
        if position > entry[2]:  # positions only grow within a target partition
            entry[1] = offset = record.source_offset
            entry[2] = position
            if entry[3] >= entry[4]:  # moved max_lag records since the last sync
                entry[4] = entry[3] + self.max_lag
                points = entry[5]
                points.append((offset, position))
                if len(points) > self.limit:
                    self._thin(points)

    def _thin(self, points: list) -> None:
        """The emitter fell behind: keep every other waiting point (the oldest and the newest stay)."""
        kept = points[::2]
        if kept[-1] is not points[-1]:
            kept.append(points[-1])
        self.thinned += len(points) - len(kept)
        points[:] = kept

    def synced(self, entry: list) -> None:
        """The newest record of ``entry`` was written as a sync: the distance counts from it."""
        entry[4] = entry[3] + self.max_lag


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


class GapSync:
    """One decoded gap record: source positions ``first..last`` of ``source_partition`` were never copied."""

    __slots__ = ("source_alias", "source_partition", "first", "last", "records", "target_alias", "ts")

    def __init__(self, source_alias: str, source_partition: dict, first: Any, last: Any, records: int | None,
                 target_alias: str, ts: int):
        self.source_alias = source_alias
        self.source_partition = source_partition
        self.first = first
        self.last = last
        self.records = records
        self.target_alias = target_alias
        self.ts = ts

    def __repr__(self) -> str:
        return f"GapSync({self.source_alias}:{partition_key(self.source_partition)} {self.first}..{self.last})"


def _tupled(value: Any) -> Any:
    """JSON lists back to (hashable, comparable) tuples."""
    return tuple(_tupled(v) for v in value) if isinstance(value, list) else value


def decode_sync(value: bytes | str) -> OffsetSync | GapSync:
    """An offset-sync record's value (or a gap record's); ValueError naming what is wrong otherwise."""
    try:
        doc = orjson.loads(value)
        source, target = doc["source"], doc["target"]
        if "gap" in source:
            gap = source["gap"]
            records = gap.get("records")
            return GapSync(str(source["alias"]), dict(source["partition"]), _tupled(gap["first"]), _tupled(gap["last"]),
                           None if records is None else int(records), str(target["alias"]), int(doc.get("ts", 0)))
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
        self._gaps: list[ConnectRecord] = []  # gap records not written yet
        self.emitted = 0
        self.failed = 0

    def add_gaps(self, gaps: list) -> None:
        """Gap records for ``gaps`` (``SourceGap.as_dict``), written with the next syncs."""
        ts = int(time.time() * 1000)
        for gap in gaps:
            keys = [k for k in gap.get("resume") or () if not is_bookkeeping_key(k)]
            if gap.get("last") is None or not keys or len(self._gaps) >= 1000:
                continue  # of unknown extent (a re-created topic), or far too many waiting
            sp = orjson.loads(keys[0])
            value = orjson.dumps({
                "source": {"alias": self.source_alias, "topic": sp.get("topic"), "partition": sp,
                           "gap": {"first": gap["first"], "last": gap["last"], "records": gap.get("records")}},
                "target": {"alias": self.target_alias}, "ts": ts})
            label = f"{self.source_alias}:{partition_key(sp)}:gap"
            self._gaps.append(make_record(self.topic, label.encode(), value, None, ts, self._partition, {"ts": ts}, 0))

    def _due(self, now: float) -> list[ConnectRecord]:
        """Per (source partition, target partition): its distance points, then its newest record if
        it moved and no sync was written for ``offset.syncs.interval.ms`` (so an idle partition ends
        with its newest record synced)."""
        out, self._gaps = self._gaps, []
        ts = int(time.time() * 1000)
        for key, entry in self.positions.latest.items():
            sp, points = entry[0], entry[5]
            written = self._written.get(key)
            if points:
                for offset, position in points:
                    out.append(self._sync(key, sp, offset, position, ts))
                written = self._written[key] = (points[-1][1], now)
                points.clear()
            position = entry[2]
            if written is not None and (written[0] == position or now - written[1] < self.interval):
                continue
            self._written[key] = (position, now)
            self.positions.synced(entry)
            out.append(self._sync(key, sp, entry[1], position, ts))
        return out

    def _sync(self, key: tuple, sp: dict, offset: Any, position: Any, ts: int) -> ConnectRecord:
        value = orjson.dumps({
            "source": {"alias": self.source_alias, "topic": sp.get("topic"), "partition": sp, "offset": offset},
            "target": {"alias": self.target_alias, "topic": key[1], "partition": key[2], "position": position},
            "ts": ts})
        label = f"{self.source_alias}:{partition_key(sp)}->{key[1]}:{key[2]}"
        return make_record(self.topic, label.encode(), value, None, ts, self._partition, {"ts": ts}, 0)

    def emit(self, deadline: float = float("inf")) -> int:
        """Write the syncs that are due; serve the writer's outcomes. Never raises, and never waits
        past ``deadline`` (the epoch's, monotonic) nor more than half a second."""
        records = self._due(time.monotonic())
        try:
            writer = self._writer
            if records:
                if writer is None:
                    writer = self._writer = self._factory()
                writer.send(records, min(deadline, time.monotonic() + 0.5))  # a full queue never holds the data up
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
        return {"offset_syncs.emitted": float(self.emitted), "offset_syncs.failed": float(self.failed),
                "offset_syncs.thinned": float(self.positions.thinned)}

    def close(self) -> None:
        writer = self._writer
        if writer is not None:
            try:
                writer.flush(time.monotonic() + 1.0)
            except Exception:  # noqa: BLE001
                pass
        self._drop_writer()


class OffsetSyncListener(AckListener):
    """Offset syncs as an acknowledgement listener of the pair (``connect.tasks.listeners``): hangs
    :class:`AckedPositions` on the sink's context for the sink to feed, keeps re-sent records out of
    it, and has the :class:`OffsetSyncEmitter` write what is due at each commit point."""

    def __init__(self, emitter: OffsetSyncEmitter):
        self.emitter = emitter
        self._context: Any = None  # the sink's context: its deadline is the epoch's

    @classmethod
    def for_policy(cls, policy, writer_factory: Callable[[], Any] | None, name: str) -> OffsetSyncListener | None:
        """The listener of a pair with ``policy`` (a RunnerPolicy); None when it writes no offset syncs."""
        if not policy.offset_syncs_topic or writer_factory is None:
            return None
        return cls(OffsetSyncEmitter(
            AckedPositions(policy.offset_syncs_max_lag), writer_factory, topic=policy.offset_syncs_topic,
            source_alias=policy.source_alias, target_alias=policy.target_alias,
            interval_ms=policy.offset_syncs_interval_ms, name=name))

    def attach(self, context: Any) -> None:
        self._context = context
        context.positions = self.emitter.positions

    def resending(self, records: list) -> None:
        self.emitter.positions.mark_resent(records)  # may land after later records: no offset sync from them

    def commit_point(self) -> None:
        self.emitter.emit(getattr(self._context, "deadline", float("inf")))

    def source_gaps(self, gaps: list) -> None:
        self.emitter.add_gaps(gaps)
        self.emitter.emit(time.monotonic() + 0.5)  # now: a pair stopped at its gap has no commit point after it

    def metrics(self) -> Mapping[str, float]:
        return self.emitter.metrics()

    def close(self) -> None:
        self.emitter.close()
