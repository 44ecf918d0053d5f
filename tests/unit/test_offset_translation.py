"""Offset syncs and their translation: the sink-side tracker, the emitter's spacing, the store's
conservative translation and its thinning."""

from __future__ import annotations

import orjson
import pytest

from connect.errors import DeliveryError
from connect.records import make_record, partition_key
from connect.sink.side import SideWriter
from connect.tasks.offsetsync import AckedPositions, OffsetSync, OffsetSyncEmitter, decode_sync
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
    assert len(history.keys) <= 128
    assert history.keys[0] == 0  # the oldest stays: a group far behind still translates
    assert history.keys[-32:] == list(range(968, 1000))  # the newest are all there
    assert s.translate(key, 999) == {("orders", 0): Translation(1998, True)}
    t = s.translate(key, 3)[("orders", 0)]
    assert t.position <= 6 and not (t.position == 6 and not t.inclusive)  # conservative: never past record 3 (at 6)


def test_acked_positions_keep_the_newest_per_target_partition():
    acked = AckedPositions()
    for offset, pos in ((1, 10), (3, 12), (2, 11)):  # acknowledgements may come out of order
        acked.ack(rec(offset), "orders", 0, pos)
    acked.ack(rec(4), "orders", 1, 3)
    [(sp0, off0, pos0), (_sp1, off1, pos1)] = acked.latest.values()
    assert (sp0, off0, pos0) == (SP, {"offset": 3}, 12)
    assert (off1, pos1) == ({"offset": 4}, 3)


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
    assert emitter.metrics() == {"offset_syncs.emitted": 2.0, "offset_syncs.failed": 0.0}


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
    assert emitter.metrics() == {"offset_syncs.emitted": 1.0, "offset_syncs.failed": 1.0}


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
    [(_sp, offset, position)] = acked.latest.values()
    assert (offset, position) == ({"offset": 20}, 109)
    assert not acked.resent  # forgotten once acknowledged


class _Upstream:
    def __init__(self, positions):
        self._positions = positions

    def positions(self, group, topics):
        return self._positions


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
    task.partition, task._emitted = {"checkpoint": "A->B"}, {}
    task.counts = {k: 0 for k in ("checkpoint.emitted", "checkpoint.untranslated", "checkpoint.applied",
                                  "checkpoint.targets.incomplete")}
    task.context = type("Ctx", (), {"task_id": "cp-0"})()
    return task


def test_a_target_partition_fed_by_two_source_partitions_moves_only_when_both_translate():
    p0, p1 = {"topic": "orders", "broker": "a", "queue": 0}, {"topic": "orders", "broker": "b", "queue": 0}
    s = store(sync(100, 500, sp=p0), sync(50, 300, sp=p1))  # both feed ("orders", 0)
    # p1's group position (10) is before every known sync of p1: untranslated, so the target must not move
    task = _checkpoint_task(s, {partition_key(p0): (p0, 101), partition_key(p1): (p1, 10)})
    out = []
    task._checkpoint_group("g", ["orders"], 1, out)
    assert task.downstream.applied == [] and task.counts["checkpoint.targets.incomplete"] == 1
    assert len(out) == 1  # p0's own checkpoint record is still emitted
    # both translate: the lowest of the two
    task = _checkpoint_task(s, {partition_key(p0): (p0, 101), partition_key(p1): (p1, 60)})
    task._checkpoint_group("g", ["orders"], 1, out := [])
    assert task.downstream.applied == [{("orders", 0): Translation(300, False)}]
    assert len({r.key for r in out}) == 2  # one key per source partition
