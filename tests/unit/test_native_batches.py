"""The batch-native path (``connect.batch``): the runner on native batches of the memory source and
sink, and the fused replication step against the record stages it stands for."""

from __future__ import annotations

import itertools

import attrs
import pytest

from connect.batch import NativeBatch, NativeCodec
from connect.records import ConnectRecord, partition_key
from connect.source import SourceTask
from connect.tasks.fused import FusedReplication
from connect.tasks.plan import PairPlan
from connect.tasks.policy import RunnerPolicy
from connect.tasks.replication import DEFAULT_ORIGIN_PROPERTY as PROP
from connect.tasks.replication import GAPS_HEADER, open_gaps_of, replication_stages
from connect.tasks.results import RUNNING
from connect.tasks.runner import TaskPairRunner
from connect.tasks.stages import RecordStages, StageChain, build_chain
from connect.tasks.topology import Flow, Topology
from connect.testing import MemorySideWriter, MemorySinkTask, MemorySourceTask
from worker.settings import FrameworkSettings

_ids = itertools.count()


def _settings(**keys) -> RunnerPolicy:
    raw = {"epoch.max.ms": 300, "errors.retry.timeout": 2000, "errors.retry.delay.max.ms": 50, "epoch.grace.ms": 500}
    raw.update(keys)
    return FrameworkSettings.parse(raw).runner


@pytest.fixture
def pair():
    made = []

    def build(policy: RunnerPolicy | None = None, source: dict | None = None, sink: dict | None = None,
              source_task: SourceTask | None = None, **kw) -> tuple[TaskPairRunner, str]:
        name = f"native-{next(_ids)}"
        runner = TaskPairRunner(PairPlan(
            connector="native", task_id=0, source=source_task or MemorySourceTask(), sink=MemorySinkTask(),
            source_config={k: str(v) for k, v in (source or {}).items()},
            sink_config={"name": name, **{k: str(v) for k, v in (sink or {}).items()}},
            policy=policy or _settings(), offsets={}, **kw))
        made.append((runner, name))
        return runner, name

    yield build
    for runner, name in made:
        runner.stop()
        MemorySinkTask.written.pop(name, None)


def _run(runner: TaskPairRunner, epochs: int = 6) -> dict:
    committed: dict = {}
    for epoch in range(epochs):
        result = runner.run_epoch(epoch)
        assert result.state == RUNNING, result.trace
        committed.update(result.offsets)
        runner.offsets_persisted()
    return committed


def _pk(p: int) -> str:
    return partition_key({"topic": "memory", "partition": p})


def test_offsets_are_taken_per_batch_and_exact(pair):
    runner, name = pair(source={"partitions": 3, "records": 250, "batch.size": 100})
    before = MemorySinkTask.native_puts
    committed = _run(runner)
    assert runner.source.context.native_batches is True
    assert MemorySinkTask.native_puts - before == 3  # 3 polls of 3 x 100, 3 x 100, 3 x 50
    assert committed == {_pk(p): {"offset": 249} for p in range(3)}
    got = MemorySinkTask.written[name]
    for p in range(3):
        assert [r.source_offset["offset"] for r in got if r.partition == p] == list(range(250))


def test_a_record_failing_in_the_middle_of_a_native_batch_goes_alone_to_the_dead_letter_topic(pair):
    dlq_name = f"dlq-{next(_ids)}"
    dead = MemorySideWriter({"name": dlq_name}, "dlq")
    runner, name = pair(policy=_settings(**{"errors.tolerance": "none"}),
                        source={"partitions": 2, "records": 100, "batch.size": 100},
                        sink={"reject.values": "^memory-1-57$", "reject.times": -1}, dlq_factory=lambda: dead)
    committed = _run(runner, 3)
    assert runner.source.context.native_batches is True
    dead_letters = MemorySinkTask.written.pop(dlq_name)
    assert [(r.source_partition["partition"], r.source_offset["offset"], r.key) for r in dead_letters] == [
        (1, 57, b"57")]
    assert committed == {_pk(0): {"offset": 99}, _pk(1): {"offset": 99}}
    delivered = MemorySinkTask.written[name]
    assert len(delivered) == 199 and all(r.value != b"memory-1-57" for r in delivered)


def test_transient_failures_of_a_native_batch_are_re_sent_in_order(pair):
    """Re-sent records go out in their order, before anything polled later, each delivered once:
    the same outcome as the record path's for the same input."""
    config = dict(source={"partitions": 2, "records": 300, "batch.size": 100},
                  sink={"reject.values": "^memory-0-(12|13|150)$", "reject.times": 2})
    runner, name = pair(**config)
    same, same_name = pair(policy=_settings(**{"native.batches": "false"}), **config)
    committed = _run(runner, 10)
    assert committed == _run(same, 10) == {_pk(0): {"offset": 299}, _pk(1): {"offset": 299}}
    got = MemorySinkTask.written[name]
    assert got == MemorySinkTask.written[same_name]
    for p in range(2):
        assert sorted(r.source_offset["offset"] for r in got if r.partition == p) == list(range(300))
    resent = [r.source_offset["offset"] for r in got if r.value in (b"memory-0-12", b"memory-0-13", b"memory-0-150")]
    assert resent == [12, 13, 150]


def test_replication_stages_act_on_native_batches_as_on_records(pair):
    policy = attrs.evolve(_settings(**{"replication.policy": "prefix"}), source_alias="A", target_alias="B")
    native, native_name = pair(policy=policy, source={"partitions": 2, "records": 50})
    records, records_name = pair(policy=attrs.evolve(policy, native_batches=False),
                                 source={"partitions": 2, "records": 50})
    _run(native, 2)
    _run(records, 2)
    assert native.source.context.native_batches is True and records.source.context.native_batches is False
    a, b = MemorySinkTask.written[native_name], MemorySinkTask.written[records_name]
    assert len(a) == 100 and a == b
    assert a[0].topic == "A.memory" and a[0].headers[-1] == (PROP, b"A")


class _CommitRecordSource(MemorySourceTask):
    def commit_record(self, record, metadata) -> None:
        pass


def test_records_are_built_when_something_needs_them(pair):
    with_transform = StageChain([RecordStages([("noop", lambda r: r)])])
    runner, _ = pair(stages=with_transform)
    assert runner.source.context.native_batches is False
    runner, _ = pair(source_task=_CommitRecordSource())
    assert runner.source.context.native_batches is False
    runner, _ = pair(policy=_settings(**{"native.batches": "false"}))
    assert runner.source.context.native_batches is False
    chain = build_chain(_settings(), {"value.converter": "json"}, {})
    assert chain.native is False  # a converter needs records
    assert build_chain(_settings(), {}, {}).native is None  # nothing to do on native batches


# -- the fused replication step against the record stages ---------------------------------------
class _RecordCodec(NativeCodec):
    """Native 'messages' that are ConnectRecords already (so both paths start from the same input)."""

    def __init__(self):
        self.topic_getter = self.topic
        self.header_getter = self.headers

    def record(self, m: ConnectRecord) -> ConnectRecord:
        return m

    def topic(self, m: ConnectRecord) -> str:
        return m.topic

    def headers(self, m: ConnectRecord):
        return m.headers


_CHAINS = [None, [], [("x", b"1")], [(PROP, b"X")], [(PROP, b"X,Y"), ("x", b"2")], [(PROP, b"B")],
           [(PROP, b"X,B,Y")], [("a", None), (PROP, b"")], [(PROP, b"X"), (PROP, b"Y,Z")]]
_MESH = Topology(Flow(s, t, frozenset({"t1", "t2"})) for s, t in itertools.permutations("ABX", 2))


@pytest.mark.parametrize("policy,max_hops,topology", [
    ("identity", 0, None), ("prefix", 0, None), ("identity", 2, None), ("identity", 1, _MESH), ("prefix", 0, _MESH)])
@pytest.mark.parametrize("topics", [["t1"], ["t1", "t2", "B.t3", "persistent://p/ns/t1"]])
def test_fused_replication_decides_as_the_record_stages(policy, max_hops, topology, topics):
    sp = {"topic": "t", "partition": 0}
    records = [ConnectRecord(topics[i % len(topics)], b"k", b"v", None if h is None else list(h), i, sp,
                             {"offset": i}, 0)
               for i, h in enumerate(_CHAINS * 3)]
    stages = StageChain(replication_stages("A", "B", prop=PROP, max_hops=max_hops, policy=policy, topology=topology))
    fused = FusedReplication("A", "B", prop=PROP, max_hops=max_hops, policy=policy, topology=topology)
    expected, dropped, _ = stages.apply(list(records))
    for _ in range(2):  # the second time from the cache
        batch = NativeBatch("records", list(records), _RecordCodec(), {}, topics[0] if len(topics) == 1 else None)
        out, fused_dropped = fused.apply(batch)
        assert fused_dropped == dropped
        assert out.records() == expected
        assert [out.topic_of(i) for i in range(len(out))] == [r.topic for r in expected]
        assert [out.headers_of(i) for i in range(len(out))] == [r.headers for r in expected]



def test_a_flow_with_open_source_gaps_marks_what_it_writes_on_both_paths_until_they_are_acknowledged():
    sp = {"topic": "t", "partition": 0}
    records = [ConnectRecord("t1", b"k", b"v", None if h is None else list(h), i, sp, {"offset": i}, 0)
               for i, h in enumerate([None, [(PROP, b"X")], [(GAPS_HEADER, b"2"), (PROP, b"X")]])]
    stages = StageChain(replication_stages("A", "B", prop=PROP),
                        FusedReplication("A", "B", prop=PROP).apply)

    def marks() -> tuple[list, list]:
        expected, _, _ = stages.apply(list(records))
        out, _ = stages.native(NativeBatch("records", list(records), _RecordCodec(), {}, "t1"))
        native = [open_gaps_of(out.headers_of(i)) for i in range(len(out))]
        return [open_gaps_of(r.headers) for r in expected], native

    assert marks() == ([0, 0, 2], [0, 0, 2])  # no gap here: what came marked from upstream stays as it was
    stages.mark_open_gaps(3)
    assert marks() == ([3, 3, 5], [3, 3, 5])  # this flow's gaps, added to those of the flows before it
    stages.mark_open_gaps(0)  # acknowledged: the fused step's cached outcomes go with the mark
    assert marks() == ([0, 0, 2], [0, 0, 2])

# -- delivery slots (``connectors.kafka.delivery``) ------------------------------------------------
def test_delivery_slots_are_reused_once_reported_and_never_shared():
    from connectors.kafka.delivery import DeliverySlots

    class Count:
        def __init__(self, gen=None):
            self.left, self.gen = 0, gen

    failures = []

    def outcome(batch, i, put, err, msg) -> bool:
        failures.append((batch, i, err))
        return err == "held"  # a transient failure is held: counted down later, not now

    slots = DeliverySlots(outcome)
    put = Count(Count())
    taken = [slots.take() for _ in range(4)]
    assert len({id(s) for s in taken}) == 4  # in flight together: one slot each
    for i, slot in enumerate(taken):
        slot.batch, slot.i, slot.put = "batch", i, put
        put.left += 1
        put.gen.left += 1
    taken[1].report("too large", None)
    taken[2].report("held", None)
    taken[0].report(None, None)
    assert failures == [("batch", 1, "too large"), ("batch", 2, "held")]
    assert put.left == put.gen.left == 2  # the held one and the one not reported yet
    assert slots.take() is taken[0] and slots.take() is taken[2]  # back in the pool once reported
    assert slots.take() is taken[1]
    assert slots.take() not in taken  # taken[3] has not reported: a new slot


def test_a_native_batch_columns_read_the_same_fields_as_its_records():
    """What a sink of another broker reads through ``NativeBatch.columns`` (the Pulsar sink from
    Kafka messages) is what the record of each message holds, overlays applied."""
    from connect.testing import MemoryCodec

    codec = MemoryCodec("t", {0: {"p": 0}, 1: {"p": 1}})
    items = [(0, 0), (1, 5), (0, 1)]
    for batch in (NativeBatch("memory", items, codec, {}),
                  NativeBatch("memory", items, codec, {}, None, ["a", "b", "c"], [[("h", b"1")], None, []])):
        columns = [(t, p, k, None if h is None else list(h), v, ts)
                   for t, p, k, h, v, ts in zip(*batch.columns(), strict=True)]
        records = [batch.record(i) for i in range(len(items))]
        assert columns == [(r.topic, r.partition, r.key, None if r.headers is None else list(r.headers), r.value,
                            r.timestamp) for r in records]
