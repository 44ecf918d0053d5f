"""worker.runtime.partition: per-process runner cache keyed by (connector, task), prev_epoch, revision."""

from __future__ import annotations

import itertools
import os

import attrs
import pytest

from connect.records import partition_key
from connect.tasks.policy import RunnerPolicy
from connect.tasks.results import FAILED, RUNNING
from connect.testing import MemorySinkConnector, MemorySinkTask, MemorySourceTask
from worker.runtime import partition
from worker.runtime.control import ControlServer
from worker.runtime.partition import TaskPairSpec, run_task_pair_epoch, stop_all_cached

_ids = itertools.count()
P0 = partition_key({"topic": "memory", "partition": 0})


class TrackedSource(MemorySourceTask):
    instances: list[TrackedSource] = []

    def __init__(self):
        super().__init__()
        self.stopped = False
        TrackedSource.instances.append(self)

    def stop(self):
        self.stopped = True


class ExplodingSource(MemorySourceTask):
    def start(self, config, context):
        raise RuntimeError("source cannot start: boom")


@pytest.fixture(autouse=True)
def clean_cache():
    stop_all_cached()
    TrackedSource.instances.clear()
    yield
    stop_all_cached()
    TrackedSource.instances.clear()


@pytest.fixture
def sink_name(request):
    name = f"unit-part-{request.node.name}-{next(_ids)}"
    MemorySinkTask.written.pop(name, None)
    yield name
    MemorySinkTask.written.pop(name, None)


@pytest.fixture
def spec(sink_name):
    policy = RunnerPolicy(epoch_max_ms=300, epoch_max_records=3, retry_timeout_ms=200)

    def make(epoch: int, prev_epoch: int | None, *, revision: str = "g1", offsets=None, task: int = 0,
             connector: str = "conn", source_task_class=TrackedSource, source_config=None,
             dlq_config=None) -> TaskPairSpec:
        return TaskPairSpec(
            connector=connector, task=task, epoch=epoch, prev_epoch=prev_epoch, revision=revision,
            source_task_class=source_task_class,
            source_config=source_config if source_config is not None else {"records": "12", "batch.size": "3"},
            sink_task_class=MemorySinkTask, sink_config={"name": sink_name}, dlq_config=dlq_config,
            policy=policy, token=f"t{epoch}", offsets=offsets or {}, sink_connector_class=MemorySinkConnector)

    return make


def offsets_written(sink_name) -> list[int]:
    return [r.source_offset["offset"] for r in MemorySinkTask.written.get(sink_name, [])]


def test_second_epoch_reuses_the_cached_runner(spec, sink_name):
    first = run_task_pair_epoch(spec(1, None))
    assert first.state == RUNNING, first.trace
    assert first.restarted is True
    assert first.pid == os.getpid()
    assert first.offsets == {P0: {"offset": 2}}
    second = run_task_pair_epoch(spec(2, 1, offsets=first.offsets))
    assert second.state == RUNNING, second.trace
    assert second.restarted is False
    assert second.pid == first.pid
    assert second.offsets == {P0: {"offset": 5}}
    assert len(TrackedSource.instances) == 1  # no new task was built
    assert offsets_written(sink_name) == list(range(6))


def test_wrong_prev_epoch_restarts_from_spec_offsets(spec, sink_name):
    first = run_task_pair_epoch(spec(1, None))
    # the driver says the last persisted epoch of this pair was 7 (it ran elsewhere meanwhile)
    restarted = run_task_pair_epoch(spec(8, 7, offsets={P0: {"offset": 8}}))
    assert restarted.state == RUNNING, restarted.trace
    assert restarted.restarted is True
    assert len(TrackedSource.instances) == 2
    assert TrackedSource.instances[0].stopped  # the stale runner was stopped
    assert restarted.offsets == {P0: {"offset": 11}}  # resumed after the spec's offset 8
    assert offsets_written(sink_name) == [0, 1, 2, 9, 10, 11]
    assert first.restarted is True


def test_changed_generation_restarts(spec):
    run_task_pair_epoch(spec(1, None))
    result = run_task_pair_epoch(spec(2, 1, revision="g2", offsets={P0: {"offset": 2}}))
    assert result.state == RUNNING, result.trace
    assert result.restarted is True
    assert TrackedSource.instances[0].stopped
    # and the new revision is cached in turn
    again = run_task_pair_epoch(spec(3, 2, revision="g2", offsets=result.offsets))
    assert again.restarted is False
    assert len(TrackedSource.instances) == 2


def test_task_whose_start_raises_returns_failed_result(spec):
    result = run_task_pair_epoch(spec(1, None, source_task_class=ExplodingSource))
    assert result.state == FAILED
    assert result.restarted is True
    assert result.offsets == {}
    assert result.stats == {}
    assert (result.connector, result.task, result.epoch) == ("conn", 0, 1)
    assert "RuntimeError: source cannot start: boom" in result.trace
    assert result.pid == os.getpid()
    assert partition._RUNNERS == {}


def test_invalid_source_config_returns_failed_result(spec):
    result = run_task_pair_epoch(spec(1, None, source_config={"records": "lots"}))
    assert result.state == FAILED
    assert "ConfigError" in result.trace
    assert "records: invalid value 'lots'" in result.trace


def test_failed_epoch_evicts_the_runner(spec):
    run_task_pair_epoch(spec(1, None))
    TrackedSource.instances[0].poll_failures = 10_000  # the cached task starts failing
    # retries span epochs; the pair fails once errors.retry.timeout (200 ms) has passed
    failed = run_task_pair_epoch(spec(2, 1))
    if failed.state == RUNNING:
        failed = run_task_pair_epoch(spec(3, 2))
    assert failed.state == FAILED and failed.retriable
    assert "source poll still failing" in failed.trace
    assert partition._RUNNERS == {}
    assert TrackedSource.instances[0].stopped
    # the next epoch starts over, even with the "right" prev_epoch
    fresh = run_task_pair_epoch(spec(4, failed.epoch, offsets={P0: {"offset": 2}}))
    assert fresh.state == RUNNING
    assert fresh.restarted is True


def test_pairs_of_one_connector_live_side_by_side(spec):
    run_task_pair_epoch(spec(1, None, task=0))
    other = run_task_pair_epoch(spec(1, None, task=1))
    assert other.restarted is True
    assert set(partition._RUNNERS) == {("conn", 0), ("conn", 1)}
    back = run_task_pair_epoch(spec(2, 1, task=0))
    assert back.restarted is False


def test_a_runner_left_idle_is_stopped(spec):
    run_task_pair_epoch(spec(1, None, task=0))
    partition._RUNNERS[("conn", 0)].used_at -= partition._RUNNERS[("conn", 0)].idle_after_s + 1
    run_task_pair_epoch(spec(1, None, task=1))  # any epoch in this process sweeps idle runners
    assert set(partition._RUNNERS) == {("conn", 1)}
    assert TrackedSource.instances[0].stopped


def test_stop_requested_by_the_driver_ends_the_epoch(spec):
    server = ControlServer()
    server.register("stop", lambda _request: True)
    try:
        result = run_task_pair_epoch(attrs.evolve(spec(1, None), policy=RunnerPolicy(epoch_max_ms=60_000)),
                                     server.address)
    finally:
        server.close()
    assert result.state == RUNNING
    assert result.stats["records"] == 0
    assert result.token == "t1"


def test_offsets_come_from_the_driver_and_only_for_the_tasks_own_partitions(spec):
    asked = []
    server = ControlServer()
    server.register("stop", lambda _request: False)

    def offsets(request):
        asked.append((request["connector"], request["keys"]))
        return {P0: {"offset": 8}}

    server.register("offsets", offsets)
    try:
        result = run_task_pair_epoch(attrs.evolve(spec(1, None), offsets=None), server.address)
    finally:
        server.close()
    assert result.state == RUNNING, result.trace
    assert asked == [("conn", [P0])]
    assert result.offsets == {P0: {"offset": 11}}  # resumed after 8: 9, 10, 11


def test_dlq_config_builds_a_dead_letter_writer(spec, sink_name):
    dlq_name = f"{sink_name}-dlq"
    MemorySinkTask.written.pop(dlq_name, None)
    try:
        base = spec(1, None, dlq_config={"name": dlq_name, "topic": "dead"})
        # the main sink rejects offset 1 forever
        dlq_spec = attrs.evolve(base, sink_config={"name": sink_name, "reject.values": "^memory-0-1$"})
        result = run_task_pair_epoch(dlq_spec)
        assert result.state == RUNNING, result.trace
        assert result.stats["dead_lettered"] == 1
        assert result.offsets == {P0: {"offset": 2}}
        [dead] = MemorySinkTask.written[dlq_name]
        assert dead.topic == "dead" and dead.value == b"memory-0-1"
        assert dict(dead.headers)["__connect.errors.connector.name"] == b"conn"
    finally:
        MemorySinkTask.written.pop(dlq_name, None)


def test_stop_all_cached_stops_runners(spec):
    run_task_pair_epoch(spec(1, None))
    assert set(partition._RUNNERS) == {("conn", 0)}
    stop_all_cached()
    assert partition._RUNNERS == {}
    assert TrackedSource.instances[0].stopped


def test_claimed_epoch_prefers_the_pair_cached_in_this_process(spec):
    from worker.runtime.partition import JobContext, run_claimed_epoch
    from worker.runtime.spark import ClaimBook

    server = ControlServer()
    book = ClaimBook()
    server.register("claim", book.claim)
    server.register("stop", lambda _request: False)
    try:
        run_task_pair_epoch(spec(1, None, task=1))  # this process now holds pair 1
        specs = [spec(2, 1, task=0), spec(2, 1, task=1)]
        book.open("j", ["conn/0", "conn/1"])
        job = JobContext(server.address, "j")
        result = run_claimed_epoch(0, specs, job)  # partition 0, but pair 1 is fresh here
        assert (result.task, result.restarted) == (1, False)
        other = run_claimed_epoch(1, specs, job)  # the other Spark task gets what is left
        assert other.task == 0
        with pytest.raises(RuntimeError, match="no task pair left"):
            run_claimed_epoch(0, specs, job)
    finally:
        server.close()


def test_an_epoch_delegated_to_the_pairs_home_runs_its_cached_runner(spec):
    from worker.runtime.partition import _delegate, home_address

    first = run_task_pair_epoch(spec(1, None))
    again = _delegate(home_address(), spec(2, 1), None)  # over the loopback endpoint, as a sibling would
    assert again.state == RUNNING, again.trace
    assert (again.restarted, again.pid, again.token) == (False, first.pid, "t2")
    assert again.offsets == {P0: {"offset": 5}}  # continued after 0, 1, 2
    wrong = _delegate(home_address(), attrs.evolve(spec(2, 1), token="x"), None)  # prev_epoch 1 ran already
    assert wrong.restarted is True


def test_a_home_that_is_gone_means_the_pair_runs_here(spec):
    from worker.embedded import free_port
    from worker.runtime.partition import JobContext, run_claimed_epoch

    server = ControlServer()
    server.register("claim", lambda _request: {"pair": "conn/0", "home": ["127.0.0.1", free_port(), "s"]})
    server.register("stop", lambda _request: False)
    try:
        result = run_claimed_epoch(0, [spec(1, None)], JobContext(server.address, "j"))
    finally:
        server.close()
    assert result.state == RUNNING, result.trace
    assert result.pid == os.getpid() and result.restarted is True


def test_claims_prefer_fresh_then_home_on_this_host_then_index():
    from connect.tasks.results import EpochResult
    from worker.runtime.spark import ClaimBook

    book = ClaimBook()
    pairs = ["c/0", "c/1", "c/2"]

    def claim(job, pid, index, fresh=(), host="h1"):
        return book.claim({"job": job, "index": index, "fresh": list(fresh), "host": host, "pid": pid,
                           "home": [host, pid, "secret"]})

    def ran(task, pid, host="h1"):
        return EpochResult("c", task, 1, RUNNING, {}, {}, 0.0, 0.0, pid=pid, host=host)

    book.open("j1", pairs)
    assert [claim("j1", pid, i)["pair"] for i, pid in enumerate((10, 11, 12))] == pairs
    book.ran([ran(0, 10), ran(1, 11), ran(2, 12)])
    assert book.moves == 0
    book.open("j2", pairs)
    # pid 13 is new: it gets a pair living in a sibling on its host, to delegate there
    assert claim("j2", 13, 0) == {"pair": "c/0", "home": ["h1", 10, "secret"]}
    assert claim("j2", 11, 0, fresh=["c/1"]) == {"pair": "c/1", "home": None}  # fresh here: run here
    assert claim("j2", 20, 2, host="h2") == {"pair": "c/2", "home": None}  # another host: no delegation
    assert claim("j2", 21, 0, host="h2") is None
    book.ran([ran(0, 10), ran(1, 11), ran(2, 20, host="h2")])
    assert book.moves == 1 and book.delegated == 1


def test_runners_their_driver_no_longer_wants_are_stopped_and_a_vanished_driver_stops_all(spec):
    wanted = {("conn", 0): "g1", ("conn", 1): "g1"}
    asked = []
    server = ControlServer()
    server.register("stop", lambda _request: False)

    def unwanted(request):
        asked.append(sorted(tuple(p) for p in request["pairs"]))
        return [[c, t] for c, t, g in request["pairs"] if wanted.get((c, t)) != g]

    server.register("wanted", unwanted)
    try:
        for task in (0, 1):
            assert run_task_pair_epoch(spec(1, None, task=task), server.address).state == RUNNING
        assert partition.reap_unwanted() == []  # both wanted in their revision: kept
        assert asked[-1] == [("conn", 0, "g1"), ("conn", 1, "g1")]
        wanted[("conn", 1)] = "g2"  # reconfigured: task 1's runner is of an old revision
        del wanted[("conn", 0)]  # and task 0 is gone (connector stopped or deleted)
        assert sorted(partition.reap_unwanted()) == [("conn", 0), ("conn", 1)]
        assert partition._RUNNERS == {}
        assert [t.stopped for t in TrackedSource.instances] == [True, True]
        wanted[("conn", 0)] = "g1"
        assert run_task_pair_epoch(spec(1, None, task=0), server.address).state == RUNNING
        assert partition.reap_unwanted() == []
    finally:
        server.close()
    partition.client_for(server.address)._close()  # the driver process is gone: its connection too
    unreachable: dict = {}
    for _ in range(partition._REAP_UNREACHABLE - 1):  # a blip is not a vanished driver
        assert partition.reap_unwanted(unreachable) == []
    assert partition.reap_unwanted(unreachable) == [("conn", 0)]
    assert TrackedSource.instances[-1].stopped
