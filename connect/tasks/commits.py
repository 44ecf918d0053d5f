"""Commit accounting of a task pair: which source offsets are safe to persist, and when.

The records put between two commit points form a *generation*. A synchronous sink is flushed at
each commit point (every generation completes at once, or none does; a partial answer of
``pre_commit`` completes the partitions it names). An asynchronous sink (``SinkTask.checkpoint``,
e.g. Kafka's) is never drained: each commit point closes a generation with a checkpoint, and a
source partition's offset moves to where it stood at the last checkpoint whose records - and
every earlier one's - all have outcomes. Backpressure waits for the oldest generation, not for all
of them.

A complete generation's offsets are *ready*; they move into the offsets an epoch returns only
while their partition is not *blocked* (a record of it waits to be re-sent, or failed and is not
resolved yet); a blocked partition keeps its previous offset. A re-sent record is acknowledged
once the generation it went out in is complete. Records of a source that wants
``SourceTask.commit_record`` are handed to it under the same rule (:class:`RecordCommits`).

:class:`CommitAccounting` is the one place holding this; :class:`~connect.tasks.runner.TaskPairRunner`
tells it what was polled and put and what the sink answered, and asks it what is safe. Kafka
Connect keeps the same job in its small ``SubmittedRecords`` class (per record there, per
generation here: the hot path pays per batch, not per record).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from typing import Any, Callable, Mapping

from connect.records import ConnectRecord, partition_key
from connect.tasks.results import EpochStats

__all__ = ["CommitAccounting", "Generation", "RecordCommits"]

Offsets = dict[str, dict[str, Any]]


class Generation:
    """Records put between two commit points: where their partitions stood, and whether each has an outcome."""

    __slots__ = ("seq", "done", "offsets", "records", "size", "stamps")

    def __init__(self, seq: int, done: Callable[[], bool] | None, offsets: Offsets,
                 records: list[ConnectRecord] | None, size: int, stamps: dict[str, int]):
        self.seq = seq
        self.done = done  # None: a synchronous sink, completed by a flush
        self.offsets = offsets  # partition key -> offset of its last record polled in this generation
        self.records = records  # records put (only for sources that want commit_record)
        self.size = size
        self.stamps = stamps  # partition key -> timestamp of its last record (latency, lag in seconds)


class CommitAccounting:
    """Generations of puts and the offsets they make safe; outlives an epoch (records put in one
    epoch may be acknowledged in the next).

    The open generation is ``polled`` (id(source partition) -> its last record polled, updated
    in place by the runner's loop) and ``put`` (records put); :meth:`close` closes it at a commit
    point. ``in_flight`` counts records put and not yet in a complete generation.
    """

    def __init__(self, commit_record: Callable[[ConnectRecord, Any], None] | None = None) -> None:
        self.polled: dict[int, ConnectRecord] = {}
        self.put = 0
        self._records: list[ConnectRecord] | None = [] if commit_record is not None else None
        self.commits = RecordCommits(commit_record) if commit_record is not None else None
        self.generations: deque[Generation] = deque()  # closed, not yet complete, oldest first
        self.seq = 0  # sequence number of the open generation
        self.done_seq = -1  # every generation up to this one is complete
        self.in_flight = 0
        self.ready: Offsets = {}  # offsets of complete generations, partition still blocked
        # records acknowledged (delivered or resolved) not yet counted committed: a partition was held
        self.uncounted = 0
        self.discount = 0  # records reported failed, to take off the next generations to complete
        self.awaiting: dict[str, int] = {}  # partition key of a re-sent record -> generation it went out in
        self.acked_ts: dict[str, int] = {}  # partition key -> timestamp of its newest acknowledged record

    # -- the open generation -------------------------------------------------------------------
    def sent(self, batch: list[ConnectRecord]) -> None:
        """``batch`` was put (the sink's client holds it)."""
        n = len(batch)
        self.put += n
        self.in_flight += n
        if self._records is not None:
            self._records.extend(batch)

    def resent(self, batch: list[ConnectRecord]) -> None:
        """``batch`` (records that failed transiently) was put again: its partitions are held until
        the open generation is complete."""
        seq = self.seq
        self.awaiting.update((partition_key(r.source_partition), seq) for r in batch)
        self.sent(batch)

    def last_seq(self) -> int:
        """The generation holding the latest record put (the open one, or the last one closed)."""
        return self.seq if self.put else self.seq - 1

    def complete_through(self, seq: int) -> bool:
        """Whether generation ``seq`` and every earlier one are complete."""
        return self.done_seq >= seq

    def close(self, checkpoint: Callable[[], Callable[[], bool]] | None) -> None:
        """Close the open generation, if it holds anything. ``checkpoint`` (asynchronous sinks)
        returns whether every record put so far has an outcome; None: completed by a flush."""
        polled = self.polled
        if not self.put and not polled:
            return
        done = checkpoint() if checkpoint is not None else None
        offsets = {partition_key(r.source_partition): r.source_offset for r in polled.values()}
        stamps = {partition_key(r.source_partition): r.timestamp for r in polled.values() if r.timestamp}
        records = None
        if self._records is not None:
            records, self._records = self._records, []
        self.generations.append(Generation(self.seq, done, offsets, records, self.put, stamps))
        self.seq += 1
        polled.clear()  # in place: the runner's loop holds it
        self.put = 0

    # -- completion ----------------------------------------------------------------------------
    def checkpointed(self) -> list[Generation]:
        """Pop the oldest generations whose checkpoint says done (asynchronous sinks), in order:
        a generation not done holds back every later one."""
        gens = self.generations
        complete = []
        while gens and gens[0].done():
            complete.append(gens.popleft())
        return complete

    def unflushed(self) -> Offsets:
        """Synchronous sinks: the offsets a flush (``pre_commit``) is asked to make safe, newest per partition."""
        offsets: dict[str, Any] = {}
        for g in self.generations:
            offsets.update(g.offsets)
        return {k: dict(v) for k, v in offsets.items()}

    def flushed(self, offsets: Mapping[str, Any], safe: Mapping[str, Any]) -> list[Generation]:
        """Synchronous sinks: ``pre_commit(offsets)`` answered ``safe``. Every partition named: all
        generations are complete (returned). A partial answer: the partitions named are ready up
        to the offsets given, and no generation completes."""
        gens = self.generations
        if all(k in safe for k in offsets):
            complete = list(gens)
            gens.clear()
            return complete
        for key in offsets.keys() & safe.keys():
            self.ready[key] = dict(safe[key])
            for g in gens:
                g.offsets.pop(key, None)
        return []

    def failures_reported(self, failures: list) -> None:
        """Records the sink reported failed (their generation's outcome is not their acknowledgement)."""
        if self.commits is not None and failures:
            self.commits.failures_reported(failures)

    def unacknowledged(self, n: int, stats: EpochStats) -> None:
        """``n`` records of the generations completing now or later failed transiently: they count as
        acknowledged only once re-sent and delivered. They are taken off the generations that complete
        next (theirs among them), not off ``stats``: a generation may complete in a later epoch, and
        an epoch that took the failures off its own figure counted below zero, the next one above
        what it moved (34,976 of a 30,000-record backlog; a metrics counter drops the negative part)."""
        self.discount += n

    def acknowledge(self, complete: list[Generation], stats: EpochStats) -> None:
        """Account complete generations (from :meth:`checkpointed` or :meth:`flushed`): their
        offsets become ready, their records acknowledged."""
        now_ms = time.time() * 1000
        for g in complete:
            self.ready.update(g.offsets)
            self.in_flight -= g.size
            counted = g.size
            if self.discount:
                taken = min(self.discount, counted)
                self.discount -= taken
                counted -= taken
            stats.acknowledged += counted
            self.uncounted += counted
            for key, ts in g.stamps.items():
                stats.observe_ack_latency(now_ms - ts)
                self.acked_ts[key] = ts
            self.done_seq = g.seq
            if g.records:
                self.commits.hold(g.records)
        if self.awaiting:  # a re-sent record is acknowledged once its generation is complete
            done = self.done_seq
            self.awaiting = {k: seq for k, seq in self.awaiting.items() if seq > done}

    # -- what is safe --------------------------------------------------------------------------
    def release(self, blocked: set[str], committed: dict, stats: EpochStats) -> None:
        """Move the ready offsets of partitions not ``blocked`` into ``committed`` (the offsets the
        epoch returns), and hand their acknowledged records to ``commit_record``.

        Acknowledged records count as committed once no partition of the pair is held: every
        offset they advanced is then in ``committed``. While one is held nothing is counted (a
        re-sent record's generation does not say which partitions it holds), so the figure never
        runs ahead of the offsets; it catches up when the hold ends."""
        ready = self.ready
        for key in [k for k in ready if k not in blocked]:
            committed[key] = dict(ready.pop(key))
        if not blocked and self.uncounted > 0:
            stats.committed += self.uncounted
            self.uncounted = 0
        if self.commits:
            self.commits.release(blocked)

    def settled(self) -> bool:
        """Every record put has an outcome and every offset reached was released."""
        return not (self.generations or self.awaiting or self.ready or self.put or self.polled)

    def partition_lag(self, behind: Mapping[str, int]) -> dict[str, list[float]]:
        """Per source partition: [records behind the source's end, seconds behind]. Seconds behind is
        the age of the newest acknowledged record while records remain to copy (0 when caught up):
        how old the data the target has just received is."""
        now_ms = time.time() * 1000
        out = {}
        for key, records in behind.items():
            ts = self.acked_ts.get(key)
            seconds = max(now_ms - ts, 0.0) / 1000 if records > 0 and ts is not None else 0.0
            out[key] = [float(records), seconds]
        return out


class RecordCommits:
    """``SourceTask.commit_record`` for acknowledged records, once their partition is not blocked."""

    def __init__(self, commit_record: Callable[[ConnectRecord, Any], None]):
        self._commit_record = commit_record
        self.held: list[ConnectRecord] = []  # complete, waiting for commit_record (partition blocked)
        self.failed: Counter[int] = Counter()  # reported failures, matched to records for commit_record

    def __bool__(self) -> bool:
        return bool(self.held)

    def failures_reported(self, failures: list) -> None:
        self.failed.update(id(r) for r, _ in failures)

    def hold(self, records: list[ConnectRecord]) -> None:
        self.held.extend(records)

    def release(self, blocked: set[str]) -> None:
        """``commit_record`` for each held record whose partition is not blocked; a record reported
        as failed is not acknowledged (its re-sent copy may be, later)."""
        failed = self.failed
        keys: dict[int, str] = {}
        keep = []
        for r in self.held:
            if failed and failed.get(id(r)):
                failed[id(r)] -= 1
                if not failed[id(r)]:
                    del failed[id(r)]
                continue
            sp = r.source_partition
            key = keys.get(id(sp))
            if key is None:
                key = keys[id(sp)] = partition_key(sp)
            if key in blocked:
                keep.append(r)
            else:
                self._commit_record(r, None)
        self.held = keep
