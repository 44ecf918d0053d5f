"""Offset syncs and their translation: the sink-side tracker, the emitter's spacing, the store's
conservative translation and its thinning."""

from __future__ import annotations

import time

import orjson
import pytest

from connect.errors import DeliveryError
from connect.records import make_record, partition_key
from connect.sink.side import SideWriter
from connect.tasks.offsetsync import AckedPositions, GapSync, OffsetSync, OffsetSyncEmitter, decode_sync
from connectors.replicator.syncstore import SyncStore, Translation

SP = {"topic": "orders", "partition": 0}


def rec(offset: int, sp=SP):
    return make_record("orders", None, b"v", None, 0, sp, {"offset": offset}, 0)


def sync(u: int, d, label=0, sp=SP) -> OffsetSync:
    return OffsetSync("A", sp, {"offset": u}, "B", "orders", label, d, 0)


def store(*syncs) -> SyncStore:
    s = SyncStore(lambda o: int(o["offset"]))
    for x in syncs:
        s.add(x)
    return s


def test_translation_at_after_and_before_the_first_sync():
    s = store(sync(10, 100), sync(20, 130), sync(30, 150))
    key = partition_key(SP)
    assert s.translate(key, 20) == {("orders", 0): Translation(130, True)}  # the record at 20 is at 130: start there
    assert s.translate(key, 25) == {("orders", 0): Translation(130, False)}  # 20 consumed: after 130 (21..24 again)
    assert s.translate(key, 10**9) == {("orders", 0): Translation(150, False)}
    assert s.translate(key, 9) == {}  # before every known sync: never guessed
    assert s.translate(partition_key({"topic": "other", "partition": 0}), 25) == {}


def test_a_replayed_copy_and_an_older_sync_both_translate_without_gaps():
    # first run: 0..50 at 0..50; a replay from 40 re-wrote 40.. at 51..: sync 45 -> 56 arrives later
    s = store(sync(30, 30), sync(50, 50), sync(45, 56))
    key = partition_key(SP)
    assert s.translate(key, 47) == {("orders", 0): Translation(56, False)}  # 47 is at 58 (replay), after 56: fine
    assert s.translate(key, 50) == {("orders", 0): Translation(50, True)}


def test_several_target_partitions_per_source_partition():
    s = store(sync(10, 5, label=0), sync(11, 7, label=1), sync(20, 9, label=0))
    assert s.translate(partition_key(SP), 15) == {("orders", 0): Translation(5, False), ("orders", 1): Translation(7, False)}


def test_translation_sort_key_puts_at_before_after():
    assert Translation(5, True).sort_key() < Translation(5, False).sort_key() < Translation(6, True).sort_key()


def test_thinning_keeps_recent_syncs_dense_and_the_first_forever():
    s = store(*(sync(u, u * 2) for u in range(1000)))
    key = partition_key(SP)
    history = s._syncs[key][("orders", 0)]
    assert len(history.keys) < 1000
    assert history.keys[0] == 0  # the oldest stays: a group far behind still translates
    assert history.keys[-256:] == list(range(744, 1000))  # the newest are all there
    assert s.translate(key, 999) == {("orders", 0): Translation(1998, True)}
    t = s.translate(key, 3)[("orders", 0)]
    assert t.position <= 6 and not (t.position == 6 and not t.inclusive)  # conservative: never past record 3 (at 6)


@pytest.mark.parametrize("order", ["in order", "shuffled"])
def test_thinned_history_bounds_the_records_read_again_by_age(order):
    """A sync every L=10 records; a group r syncs behind the newest re-reads at most L * 2^level(r)
    (< L * (1 + r / 256)) records; memory grows with the logarithm of the history."""
    import random

    lag, n = 10, 20_000
    syncs = [sync(u * lag, u * lag) for u in range(n)]
    if order == "shuffled":  # syncs of several offset-syncs partitions interleave; replays come late
        random.Random(7).shuffle(syncs[: n // 2])
    s = store(*syncs)
    key = partition_key(SP)
    history = s._syncs[key][("orders", 0)]
    levels = ((n - 1) // 256 + 1).bit_length()
    assert len(history.keys) <= 256 * levels + 128 + 1
    newest = (n - 1) * lag
    for c in range(0, newest + 1, 7):
        t = s.translate(key, c)[("orders", 0)]
        assert t.position <= c and (t.inclusive or t.position < c)  # never past the group: no gap
        r = (newest - c) // lag  # syncs behind the newest
        bound = lag * (1 + r / 256) if order == "in order" else lag * (1 + 2 * r / 256)
        assert c - t.position <= bound, (c, t, r)
    assert s.translate(key, 0)[("orders", 0)] == Translation(0, True)


def test_acked_positions_keep_the_newest_per_target_partition():
    acked = AckedPositions()
    for offset, pos in ((1, 10), (3, 12), (2, 11)):  # acknowledgements may come out of order
        acked.ack(rec(offset), "orders", 0, pos)
    acked.ack(rec(4), "orders", 1, 3)
    [e0, e1] = acked.latest.values()
    assert (e0[0], e0[1], e0[2]) == (SP, {"offset": 3}, 12)
    assert (e1[1], e1[2]) == ({"offset": 4}, 3)
    assert e0[5] == [({"offset": 1}, 10)] and e1[5] == [({"offset": 4}, 3)]  # the first of each: a sync point


def test_acked_positions_take_a_point_every_max_lag_records():
    acked = AckedPositions(max_lag=100)
    sp = dict(SP)
    for i in range(1000):
        acked.ack(rec(i, sp), "orders", 0, 5000 + i)
    [entry] = acked.latest.values()
    assert [o["offset"] for o, _p in entry[5]] == list(range(0, 1000, 100))  # the first, then every 100th
    assert [p for _o, p in entry[5]] == list(range(5000, 6000, 100))
    assert (entry[1], entry[2]) == ({"offset": 999}, 5999)


def test_waiting_points_are_thinned_not_grown_when_the_emitter_falls_behind():
    acked = AckedPositions(max_lag=1, limit=8)
    sp = dict(SP)
    for i in range(100):
        acked.ack(rec(i, sp), "orders", 0, i)
    [entry] = acked.latest.values()
    offsets = [o["offset"] for o, _p in entry[5]]
    assert len(offsets) <= 8 and offsets[0] == 0 and offsets == sorted(offsets)
    assert acked.thinned == 100 - len(offsets)


class Collecting(SideWriter):
    def __init__(self, topic="syncs"):
        super().__init__(topic)
        self.records = []

    def send(self, records, deadline):
        self.records.extend(records)

    def flush(self, deadline):
        return True


class Refusing(Collecting):
    """Every record refused for good: counted as failed, never raised."""

    def send(self, records, deadline):
        for r in records:
            self._fail(r, DeliveryError("refused"))


def test_emitter_spaces_syncs_and_writes_the_final_position_once_idle(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("connect.tasks.offsetsync.time.monotonic", lambda: clock[0])
    writer = Collecting()
    acked = AckedPositions()
    emitter = OffsetSyncEmitter(acked, lambda: writer, topic="syncs", source_alias="A", target_alias="B",
                                interval_ms=1000, name="t")
    acked.ack(rec(1), "orders", 0, 10)
    assert emitter.emit() == 1  # the first one at once
    acked.ack(rec(2), "orders", 0, 11)
    clock[0] += 0.5
    assert emitter.emit() == 0  # within the interval: not yet
    clock[0] += 0.6
    assert emitter.emit() == 1  # the newest position once the interval passed
    clock[0] += 5
    assert emitter.emit() == 0  # nothing moved: nothing written
    decoded = [decode_sync(r.value) for r in writer.records]
    assert [(d.source_offset, d.position) for d in decoded] == [({"offset": 1}, 10), ({"offset": 2}, 11)]
    assert decoded[0].source_partition == SP and (decoded[0].source_alias, decoded[0].target_alias) == ("A", "B")
    assert all(r.topic == "syncs" for r in writer.records)
    assert emitter.metrics() == {"offset_syncs.emitted": 2.0, "offset_syncs.failed": 0.0, "offset_syncs.thinned": 0.0}


def test_emitter_writes_source_gaps_of_known_extent_as_gap_records():
    writer = Collecting()
    emitter = OffsetSyncEmitter(AckedPositions(), lambda: writer, topic="syncs", source_alias="A", target_alias="B",
                                interval_ms=1000, name="t")
    sp_key = partition_key(SP)
    identity = partition_key({"topic.identity": SP["topic"], "partition": "0"})
    emitter.add_gaps([{"first": 100, "last": 149, "records": 50, "resume": {identity: {"id": "x"}, sp_key: {"offset": 149}}},
                      {"first": 7, "last": None, "records": None, "resume": {sp_key: {"offset": -1}}}])  # re-created
    assert emitter.emit() == 1
    [gap] = [decode_sync(r.value) for r in writer.records]
    assert isinstance(gap, GapSync) and (gap.first, gap.last, gap.records) == (100, 149, 50)
    assert gap.source_partition == SP and (gap.source_alias, gap.target_alias) == ("A", "B")

def test_emitter_writes_every_distance_point_of_a_backlog_acknowledged_at_once(monkeypatch):
    """A backlog copied between two commit points still gets a sync every max_lag records (not one at its
    end), and the newest record once the partition is idle for the interval."""
    clock = [100.0]
    monkeypatch.setattr("connect.tasks.offsetsync.time.monotonic", lambda: clock[0])
    writer = Collecting()
    acked = AckedPositions(max_lag=100)
    emitter = OffsetSyncEmitter(acked, lambda: writer, topic="syncs", source_alias="A", target_alias="B",
                                interval_ms=1000, name="t")
    sp = dict(SP)
    for i in range(30_000):
        acked.ack(rec(i, sp), "orders", 0, i)
    assert emitter.emit() == 300
    clock[0] += 1.5
    assert emitter.emit() == 1  # idle: the newest
    u = [decode_sync(r.value).source_offset["offset"] for r in writer.records]
    assert u == [*range(0, 30_000, 100), 29_999]
    assert max(b - a for a, b in zip(u, u[1:], strict=False)) <= 100
    for i in range(30_000, 30_050):  # 50 more: the distance counts from the newest synced record
        acked.ack(rec(i, sp), "orders", 0, i)
    clock[0] += 0.1
    assert emitter.emit() == 0


def test_emitter_survives_a_failing_writer():
    class Broken(Collecting):
        def send(self, records, deadline):
            raise RuntimeError("broker gone")

    acked = AckedPositions()
    emitter = OffsetSyncEmitter(acked, Broken, topic="s", source_alias="A", target_alias="B",
                                interval_ms=10, name="t")
    acked.ack(rec(1), "orders", 0, 1)
    emitter.emit()  # does not raise: syncs are advisory
    assert emitter.failed == 1


def test_emitter_counts_syncs_the_broker_refused():
    acked = AckedPositions()
    emitter = OffsetSyncEmitter(acked, Refusing, topic="s", source_alias="A", target_alias="B",
                                interval_ms=10, name="t")
    acked.ack(rec(1), "orders", 0, 1)
    assert emitter.emit() == 1
    assert emitter.metrics()["offset_syncs.emitted"] == emitter.metrics()["offset_syncs.failed"] == 1.0


@pytest.mark.parametrize("value, why", [(b"{", "JSONDecodeError"), (orjson.dumps({"source": {}}), "KeyError")])
def test_decode_sync_names_what_is_wrong(value, why):
    with pytest.raises(ValueError, match=why):
        decode_sync(value)


def test_positions_as_json_lists_come_back_as_tuples():
    value = orjson.dumps({"source": {"alias": "A", "partition": SP, "offset": {"ledger": 1, "entry": 2, "batch": -1}},
                          "target": {"alias": "B", "topic": "t", "partition": ["broker-a", 3], "position": [1, 2, -1]}})
    d = decode_sync(value)
    assert d.label == ("broker-a", 3) and d.position == (1, 2, -1)


def test_a_record_sent_again_gives_no_sync():
    # 10 failed transiently while 11..20 landed at 100..109; 10 sent again lands at 110: a sync (10 -> 110)
    # would translate a group at 15 to "after 110" and skip 11..14
    acked = AckedPositions()
    acked.ack(rec(20), "orders", 0, 109)
    acked.mark_resent([r10 := rec(10)])
    acked.ack(r10, "orders", 0, 110)
    [entry] = acked.latest.values()
    assert (entry[1], entry[2]) == ({"offset": 20}, 109)
    assert entry[5] == [({"offset": 20}, 109)] and entry[3] == 2  # no point from it, but it is counted
    assert not acked.resent  # forgotten once acknowledged


class _Upstream:
    def __init__(self, positions):
        self._positions = positions

    def positions(self, group, topics):
        return self._positions

    @staticmethod
    def order_key(offset):
        return int(offset["offset"])


class _Downstream:
    def __init__(self):
        self.applied = []

    def apply(self, group, targets):
        self.applied.append(dict(targets))
        return list(targets)


def _checkpoint_task(store_, positions):
    from connectors.replicator.checkpoint import CheckpointSourceTask

    task = CheckpointSourceTask.__new__(CheckpointSourceTask)
    task.store, task.upstream, task.downstream = store_, _Upstream(positions), _Downstream()
    task.upstream_alias, task.downstream_alias, task.topic = "A", "B", "checkpoints"
    task.partition, task._emitted, task.mm2 = {"checkpoint": "A->B"}, {}, False
    task.counts = {k: 0 for k in ("checkpoint.emitted", "checkpoint.applied", "checkpoint.parked",
                                  "checkpoint.targets.incomplete")}
    task._untranslatable, task._last_untranslatable, task._reported, task._parked = {}, {}, {}, {}
    task.gaps = {}
    task.context = type("Ctx", (), {"task_id": "cp-0"})()
    return task


def test_a_target_partition_fed_by_two_source_partitions_moves_only_when_both_translate():
    p0, p1 = {"topic": "orders", "broker": "a", "queue": 0}, {"topic": "orders", "broker": "b", "queue": 0}
    s = store(sync(100, 500, sp=p0), sync(50, 300, sp=p1))  # both feed ("orders", 0)
    # p1's group position (10) is before every known sync of p1: untranslated, so the target must not move
    # past anything: it is parked (its earliest position, where the group has none)
    task = _checkpoint_task(s, {partition_key(p0): (p0, 101), partition_key(p1): (p1, 10)})
    out = []
    task._checkpoint_group("g", ["orders"], 1, out)
    assert task.downstream.applied == [{("orders", 0): Translation(None, True)}]
    assert task.counts["checkpoint.parked"] == 1 and task.counts["checkpoint.applied"] == 0
    assert len(out) == 1  # p0's own checkpoint record is still emitted
    assert task._untranslatable == {("g", partition_key(p1)): "behind-oldest-sync"}
    # one fed by a source partition the group has no position in: not moved
    task = _checkpoint_task(s, {partition_key(p0): (p0, 101)})
    task._checkpoint_group("g", ["orders"], 1, out := [])
    assert task.downstream.applied == [] and task.counts["checkpoint.targets.incomplete"] == 1
    # both translate: the lowest of the two
    task = _checkpoint_task(s, {partition_key(p0): (p0, 101), partition_key(p1): (p1, 60)})
    task._checkpoint_group("g", ["orders"], 1, out := [])
    assert task.downstream.applied == [{("orders", 0): Translation(300, False)}]
    assert len({r.key for r in out}) == 2  # one key per source partition


@pytest.mark.parametrize("next_position,translated", [(99, True), (100, False), (149, False), (150, True)])
def test_a_group_whose_next_record_is_in_a_source_gap_is_not_translated(next_position, translated):
    s = store(sync(98, 500), sync(150, 510))  # 99 copied to 501 (no sync of it), 100..149 never copied
    task = _checkpoint_task(s, {partition_key(SP): (SP, next_position)})
    task.gaps = {partition_key(SP): [(100, 149)]}
    task._checkpoint_group("g", ["orders"], 1, out := [])
    assert bool(out) is translated
    assert task._untranslatable == ({} if translated else {("g", partition_key(SP)): "in-source-gap"})

def test_a_parked_target_partition_is_parked_once_until_it_translates():
    p0, p1 = {"topic": "orders", "broker": "a", "queue": 0}, {"topic": "orders", "broker": "b", "queue": 0}
    s = store(sync(100, 500, sp=p0), sync(50, 300, sp=p1))  # both feed ("orders", 0)
    behind = {partition_key(p0): (p0, 101), partition_key(p1): (p1, 10)}
    task = _checkpoint_task(s, behind)
    for _ in range(3):
        task._checkpoint_group("g", ["orders"], 1, [])
    assert task.downstream.applied == [{("orders", 0): Translation(None, True)}]  # parked once, not every round
    assert task.counts["checkpoint.parked"] == 1
    task.upstream = _Upstream({partition_key(p0): (p0, 101), partition_key(p1): (p1, 60)})
    task._checkpoint_group("g", ["orders"], 1, [])  # translates: moved, and no longer remembered as parked
    assert task.downstream.applied[-1] == {("orders", 0): Translation(300, False)}
    task.upstream = _Upstream(behind)
    task._checkpoint_group("g", ["orders"], 1, [])  # behind again: parked again
    assert task.downstream.applied[-1] == {("orders", 0): Translation(None, True)} and len(task.downstream.applied) == 3
    task._checkpoint_group("h", ["orders"], 1, [])  # another group is parked on its own
    assert len(task.downstream.applied) == 4 and set(task._parked) == {"g", "h"}


def test_an_untranslated_group_is_named_in_the_metrics_with_its_partition_and_why(caplog):
    s = store(sync(100, 500))
    other = {"topic": "orders", "partition": 1}  # a replicated topic's partition nothing was copied of yet
    task = _checkpoint_task(s, {partition_key(SP): (SP, 40), partition_key(other): (other, 7)})
    task.counts.update({"checkpoint.rounds": 0})
    task._checkpoint_group("orders-app", ["orders"], 1, [])
    task._last_untranslatable = task._untranslatable
    m = task.metrics()
    assert m["checkpoint.untranslated"] == 2.0
    assert m[f"checkpoint.untranslated|orders-app|{partition_key(SP)}|behind-oldest-sync"] == 1.0
    assert m[f"checkpoint.untranslated|orders-app|{partition_key(other)}|no-sync-yet"] == 1.0
    warned = [r.getMessage() for r in caplog.records if "not translated" in r.getMessage()]
    assert len(warned) == 2 and "oldest known is at 100" in " ".join(warned)
    task._checkpoint_group("orders-app", ["orders"], 1, [])  # logged once per group, partition and reason
    assert len([r for r in caplog.records if "not translated" in r.getMessage()]) == 2


class _MissingTopic:
    """A TopicTail whose topic does not exist yet: every poll returns nothing at once."""

    caught_up = False
    polls = 0

    def poll(self, until):
        self.polls += 1
        return []


def test_the_checkpoint_task_does_not_spin_while_the_offset_syncs_topic_is_missing():
    task = _checkpoint_task(store(), {})
    task.reader, task._next_at = _MissingTopic(), 0.0
    task.context.time_left = lambda: 10.0
    until = time.monotonic() + 1.0
    while time.monotonic() < until:
        assert task.poll() == []
    assert task.reader.polls <= 15
