"""Loop-proof replication (connect.tasks.origin): the origin chain, max hops, topic naming, and the
runner dropping what would loop while its offsets still advance."""

from __future__ import annotations

import pytest

from connect.errors import ConfigError
from connect.records import make_record, partition_key
from connect.source import SourceTask
from connect.tasks.origin import DEFAULT_ORIGIN_PROPERTY as PROP
from connect.tasks.origin import OriginChain, chain_of, local_topic_name
from connect.tasks.plan import PairPlan
from connect.tasks.policy import RunnerPolicy
from connect.tasks.runner import TaskPairRunner
from connect.testing import MemorySinkTask
from worker.pipeline import parse_pipeline

SP = {"topic": "orders", "partition": 0}


def rec(value: bytes, chain: str | None = None, topic: str = "orders", offset: int = 0, headers=()):
    hs = list(headers)
    if chain is not None:
        hs.append((PROP, chain.encode()))
    return make_record(topic, b"k", value, hs or None, 1_700_000_000_000, SP, {"offset": offset}, 0)


def test_a_record_born_here_gets_the_source_alias_and_keeps_its_other_headers():
    out, dropped = OriginChain("A", "B").apply([rec(b"1", headers=[("h", b"v")])])
    assert dropped == 0
    assert out[0].headers == [("h", b"v"), (PROP, b"A")]
    assert out[0].topic == "orders" and out[0].value == b"1" and out[0].source_offset == {"offset": 0}


def test_the_chain_grows_along_a_ring_and_stops_at_the_cluster_the_record_was_born_in():
    ab, bc, ca = OriginChain("A", "B"), OriginChain("B", "C"), OriginChain("C", "A")
    in_b, _ = ab.apply([rec(b"x")])
    in_c, _ = bc.apply(in_b)
    assert chain_of(in_c[0].headers) == ["A", "B"]
    back_in_a, dropped = ca.apply(in_c)
    assert back_in_a == [] and dropped == 1
    # and a record born in B, copied to A, is never copied back to B
    in_a, _ = OriginChain("B", "A").apply([rec(b"y")])
    again, dropped = ab.apply(in_a)
    assert again == [] and dropped == 1


def test_max_hops_1_copies_only_records_born_in_the_source():
    mesh = OriginChain("A", "C", max_hops=1)
    out, dropped = mesh.apply([rec(b"born-here"), rec(b"from-b", chain="B"), rec(b"from-b-via-d", chain="B,D")])
    assert [r.value for r in out] == [b"born-here"] and dropped == 2
    two = OriginChain("A", "C", max_hops=2)
    out, dropped = two.apply([rec(b"from-b", chain="B"), rec(b"from-b-via-d", chain="B,D")])
    assert [r.value for r in out] == [b"from-b"] and chain_of(out[0].headers) == ["B", "A"] and dropped == 1


def test_the_prefix_policy_renames_and_refuses_a_cycle_by_name():
    policy = OriginChain("A", "B", policy="prefix")
    out, dropped = policy.apply([rec(b"1"), rec(b"2", topic="C.orders"), rec(b"3", topic="B.orders"),
                                 rec(b"4", topic="C.B.orders")])
    assert [r.topic for r in out] == ["A.orders", "A.C.orders"]
    assert dropped == 2
    dashed = OriginChain("east", "west", policy="prefix", separator="_")
    assert dashed.apply([rec(b"1", topic="persistent://public/default/orders")])[0][0].topic == "east_orders"


def test_identity_names_a_pulsar_topic_by_its_local_name_and_a_custom_property_is_used():
    assert local_topic_name("persistent://t/ns/orders") == "orders" and local_topic_name("a.b") == "a.b"
    out, _ = OriginChain("P", "K", prop="X-ORIGIN").apply([rec(b"1", topic="persistent://public/default/orders",
                                                                headers=[("X-ORIGIN", b"R")])])
    assert out[0].topic == "orders" and out[0].headers == [("X-ORIGIN", b"R,P")]


def test_bad_alias_configs_are_named(tmp_path):
    base = {"source.connector.class": "memory-source", "sink.connector.class": "memory-sink"}
    with pytest.raises(ConfigError, match="target.cluster.alias"):
        parse_pipeline({"name": "x", "config": {**base, "source.cluster.alias": "A"}})
    with pytest.raises(ConfigError, match="must differ"):
        parse_pipeline({"name": "x", "config": {**base, "source.cluster.alias": "A", "target.cluster.alias": "A"}})
    with pytest.raises(ConfigError, match="may not contain ','"):
        parse_pipeline({"name": "x", "config": {**base, "source.cluster.alias": "A,B", "sink.cluster.alias": "C"}})
    with pytest.raises(ConfigError, match="replication.policy"):
        parse_pipeline({"name": "x", "config": {**base, "replication.policy": "mirror"}})
    ok = parse_pipeline({"name": "x", "config": {**base, "source.cluster.alias": "A", "sink.cluster.alias": "B",
                                                 "replication.max.hops": "1", "replication.policy": "prefix"}})
    runner = ok.settings.runner
    assert (runner.source_alias, runner.target_alias, runner.max_hops, runner.topic_policy) == ("A", "B", 1, "prefix")
    mm2 = parse_pipeline({"name": "x", "config": {**base, "source.cluster.alias": "A", "target.cluster.alias": "B"}})
    assert mm2.settings.runner.target_alias == "B"


class ChainedSource(SourceTask):
    """Ten records; odd ones were copied here from B already (their chain holds B)."""

    def start(self, config, context):
        self.done = False

    def poll(self):
        if self.done:
            return []
        self.done = True
        return [rec(f"v{i}".encode(), chain="B" if i % 2 else None, offset=i) for i in range(10)]

    def stop(self):
        pass


def test_the_runner_drops_what_would_loop_counts_it_and_still_advances_the_offset(request):
    name = f"origin-{request.node.name}"
    MemorySinkTask.written.pop(name, None)
    runner = TaskPairRunner(PairPlan(connector="c", task_id=0, source=ChainedSource(), sink=MemorySinkTask(),
                                     source_config={}, sink_config={"name": name},
                                     policy=RunnerPolicy(epoch_max_ms=300, source_alias="A", target_alias="B"), offsets={}))
    try:
        result = runner.run_epoch(0)
    finally:
        runner.stop()
    assert result.state == "RUNNING", result.trace
    assert result.stats["filtered"] == 5 and result.stats["records"] == 5
    written = MemorySinkTask.written.pop(name)
    assert [r.value for r in written] == [b"v0", b"v2", b"v4", b"v6", b"v8"]
    assert all(chain_of(r.headers) == ["A"] for r in written)
    assert result.offsets == {partition_key(SP): {"offset": 9}}  # the filtered last record's offset too


def test_replication_examples_in_conf_are_valid_flows():
    from pathlib import Path

    from worker.pipeline import load_pipeline_file

    files = sorted((Path(__file__).resolve().parents[2] / "conf" / "replication").glob("*.json"))
    assert len(files) >= 8
    flows = 0
    for path in files:
        try:
            pipeline = load_pipeline_file(path)
        except ConfigError as exc:  # pragma: no cover - the failure message is the point
            pytest.fail(f"{path.name}: {exc}")
        runner = pipeline.settings.runner
        if runner.source_alias:
            flows += 1
            assert runner.target_alias and runner.target_alias != runner.source_alias, path.name
    assert flows == 6  # two active-active flows, the DR mirror, three ring flows
    syncs = {load_pipeline_file(p).settings.runner.offset_syncs_topic for p in files} - {""}
    checkpoints = [load_pipeline_file(p).source_config for p in files if "checkpoint" in p.name]
    assert len(checkpoints) == 2
    assert all(c["offset.syncs.topic"] in syncs for c in checkpoints)  # each reads syncs some mirror writes


class LaggingSource(ChainedSource):
    """ChainedSource that says how far behind it is: ``behind`` records on its partition."""

    behind = 5

    def lag_by_partition(self):
        return {partition_key(SP): self.behind}


def test_partition_lag_reports_records_and_seconds_behind_per_partition(request):
    name = f"lag-{request.node.name}"
    source = LaggingSource()
    runner = TaskPairRunner(PairPlan(connector="c", task_id=0, source=source, sink=MemorySinkTask(), source_config={},
                                     sink_config={"name": name}, policy=RunnerPolicy(epoch_max_ms=300), offsets={}))
    try:
        behind = runner.run_epoch(0).partition_lag[partition_key(SP)]
        source.behind = 0
        caught_up = runner.run_epoch(1).partition_lag[partition_key(SP)]
    finally:
        runner.stop()
        MemorySinkTask.written.pop(name, None)
    import time

    age = time.time() - 1_700_000_000  # the records' timestamps are 1.7e12 ms
    assert behind[0] == 5 and abs(behind[1] - age) < 60  # the newest acknowledged record's age
    assert caught_up == [0.0, 0.0]
