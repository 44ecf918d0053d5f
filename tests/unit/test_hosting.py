"""Placement of task pairs on hosts (``worker.runtime.hosting.HostPool``), without Spark: hosts are records."""

from __future__ import annotations

import threading

import pytest

from connect.tasks.results import FAILED, RUNNING, EpochResult
from worker.runtime.hosting import BUSY, HostPool, _Host


class _Pool(HostPool):
    """Hosts that exist only as bookkeeping: no Spark job behind them."""

    def __init__(self, max_hosts: int):
        super().__init__(lambda: None, lambda: None, lambda: max_hosts)

    def _start_host(self) -> _Host:
        self._next += 1
        host = _Host(f"h{self._next}")
        self._hosts[host.id] = host
        return host

    def place(self, pair: str) -> str:
        """Where the pair's next epoch runs; a move takes two epochs: the last one where it was
        (``final``), then the first on its new host."""
        with self._cond:
            host, final = self._place(pair)
            if final:
                host, final = self._place(pair)
            assert not final
            return host.id

    def learn(self, pair: str, cpu_s: float, seconds: float = 10.0) -> None:
        connector, _, task = pair.rpartition("/")
        result = EpochResult(connector, int(task), 1, RUNNING, {}, {"cpu_s": cpu_s, "wall_s": seconds}, 0.0, seconds)
        with self._cond:
            self._learn(pair, result)

    def layout(self) -> dict[str, list[str]]:
        return {h["host"]: h["pairs"] for h in self.hosts()}


def test_new_pairs_spread_over_new_hosts_up_to_the_cap_then_share_the_least_loaded():
    pool = _Pool(max_hosts=3)
    assert [pool.place(f"c{i}/0") for i in range(3)] == ["h1", "h2", "h3"]
    pool.learn("c0/0", 0.2)
    pool.learn("c1/0", 0.05)
    pool.learn("c2/0", 0.1)
    assert pool.place("c3/0") == "h2"
    assert pool.place("c3/0") == "h2"  # a pair stays where it is
    assert len(pool.hosts()) == 3


def test_a_busy_pair_gets_its_host_to_itself_and_the_others_move_off_at_their_next_epoch():
    pool = _Pool(max_hosts=2)
    for i in range(6):
        pool.place(f"c{i}/0")
    layout = pool.layout()
    assert sorted(len(p) for p in layout.values()) == [3, 3]
    busy = layout["h1"][0]
    pool.learn(busy, BUSY * 10 * 2)  # two cores' worth of seconds over 10 s: busy
    neighbour = layout["h1"][1]
    with pool._cond:  # a move: one last epoch where it is (drained, no bridge), then the new host
        assert [(h.id, final) for h, final in (pool._place(neighbour), pool._place(neighbour))] == [
            ("h1", True), ("h2", False)]
    for pair in layout["h1"]:
        assert pool.place(pair) == ("h1" if pair == busy else "h2")  # (the neighbour has moved already)
    assert pool.layout() == {"h1": [busy], "h2": sorted(p for p in layout["h1"] + layout["h2"] if p != busy)}
    assert pool.moves == 2
    with pool._cond:  # the busy pair's old neighbours are evicted from h1's process
        assert pool._hosts["h1"].evict == set(layout["h1"]) - {busy}
    assert pool.place("new/0") == "h2"  # new pairs keep off the busy pair's host too


def test_a_pair_leaves_a_host_that_needs_more_than_a_core_for_one_with_room_and_nothing_thrashes():
    pool = _Pool(max_hosts=2)
    for i in range(8):
        pool.place(f"c{i}/0")
    assert pool.layout() == {"h1": ["c0/0", "c2/0", "c4/0", "c6/0"], "h2": ["c1/0", "c3/0", "c5/0", "c7/0"]}
    for i in range(8):
        pool.learn(f"c{i}/0", 2.5 if i % 2 == 0 else 0.1)  # h1: 4 x 0.25 of a core (none busy), h2: 4 x 0.01
    assert pool.place("c0/0") == "h2"  # h1 needs a whole core; h2 has room for 0.25
    assert [pool.place(f"c{i}/0") for i in (2, 4, 6)] == ["h1"] * 3  # 0.75 left on h1: fine
    assert pool.moves == 1
    # Two busy pairs on one host and no empty host: both stay (a move would find nothing better).
    pool.learn("c2/0", 9.0)
    pool.learn("c4/0", 9.0)
    assert [pool.place(p) for p in ("c2/0", "c4/0", "c2/0")] == ["h1"] * 3
    assert pool.place("c6/0") == "h2"  # the quiet neighbour leaves the busy pairs' host
    assert pool.place("c6/0") == "h2"
    assert pool.moves == 2


def test_only_steady_epochs_count_towards_a_pairs_load():
    pool = _Pool(max_hosts=2)
    pool.place("a/0")
    restarted = EpochResult("a", 0, 1, RUNNING, {}, {"cpu_s": 0.4, "wall_s": 2.0}, 0.0, 2.0, restarted=True)
    short = EpochResult("a", 0, 2, RUNNING, {}, {"cpu_s": 0.2, "wall_s": 0.05}, 0.0, 0.05)
    with pool._cond:
        pool._learn("a/0", restarted)  # its CPU went into building the runner (clients, connections)
        pool._learn("a/0", short)  # 4 cores' worth over 50 ms says nothing
    assert pool.loads == {}
    pool.learn("a/0", 0.5)
    assert pool.loads == {"a/0": 0.05}


def test_a_lost_host_reports_its_epochs_failed_retriable_and_its_pairs_are_placed_again():
    from concurrent.futures import Future

    pool = _Pool(max_hosts=2)
    pool.place("a/0")
    with pool._cond:
        host = pool._hosts["h1"]
    spec = type("Spec", (), {"connector": "a", "task": 0, "epoch": 7, "token": "t", "secrets": frozenset()})()
    future: Future = Future()
    host.running["t"] = (spec, future)

    class _Failing:
        def setLocalProperty(self, *_):
            pass

        def setJobDescription(self, *_):
            pass

        def parallelize(self, *_a):
            raise RuntimeError("Python worker exited unexpectedly (crashed)")

    pool._sc_of = lambda: _Failing()
    pool._host_job(host)
    result = future.result(timeout=1)
    assert result.state == FAILED and result.retriable and "was lost" in result.trace
    assert "crashed" in result.trace and result.token == "t" and result.epoch == 7
    assert pool.hosts() == []
    assert pool.place("a/0") == "h2"


def test_results_of_a_host_declared_lost_are_dropped_and_work_waits_for_its_host():
    import base64
    import pickle

    pool = _Pool(max_hosts=1)
    assert pool._work_request({"host": "nope", "wait": 0}) == {"exit": True}
    pool.place("a/0")
    got = {}
    t = threading.Thread(target=lambda: got.update(pool._work_request({"host": "h1", "wait": 2})))
    t.start()
    with pool._cond:
        pool._hosts["h1"].inbox.append(("k", "spec", ["127.0.0.1", 1, "s"]))
        pool._cond.notify_all()
    t.join(3)
    assert got == {"run": [{"key": "k", "spec": "spec", "control": ["127.0.0.1", 1, "s"]}], "evict": []}
    late = EpochResult("a", 0, 1, RUNNING, {}, {}, 0.0, 1.0, token="k")
    assert pool._result_request({"host": "h1", "key": "k",
                                 "result": base64.b64encode(pickle.dumps(late)).decode()}) is False


@pytest.mark.parametrize("hosting", ["shared", "job"])
def test_the_executor_knows_both_hostings_and_refuses_others(hosting):
    from worker.runtime.spark import SparkExecutor

    assert SparkExecutor(None, hosting=hosting).hosting == hosting
    with pytest.raises(ValueError, match="worker.pair.hosting must be one of shared, job, not 'slots'"):
        SparkExecutor(None, hosting="slots")


def test_while_a_sibling_still_runs_the_pairs_done_are_told_to_keep_bridging_and_then_no_more():
    """A connector's next epoch starts once every pair's result is in: a pair that ended early keeps
    moving records (its host renews its bridge, ``renew_bridge``) until the last one ended (issue 36)."""
    import base64
    import pickle
    import time

    from connect.tasks.policy import RunnerPolicy
    from worker.runtime.partition import TaskPairSpec

    pool = _Pool(max_hosts=2)
    specs = [TaskPairSpec("c", i, 1, 0, "g", object, {}, object, {}, None, RunnerPolicy(), token=f"t{i}")
             for i in range(2)]
    got: list = []
    running = threading.Thread(target=lambda: got.extend(pool.run(specs, None)))
    running.start()
    deadline = time.monotonic() + 5
    while len(pool.hosts()) < 2 and time.monotonic() < deadline:  # placed by the running thread
        time.sleep(0.01)
    taken = {h: pool._work_request({"host": h, "wait": 5}) for h in ("h1", "h2")}
    assert sorted(item["key"] for answer in taken.values() for item in answer["run"]) == ["t0", "t1"]
    first = "h1" if taken["h1"]["run"][0]["key"] == "t0" else "h2"
    second = "h2" if first == "h1" else "h1"

    def post(host: str, task: int) -> None:
        result = EpochResult("c", task, 1, RUNNING, {}, {}, 0.0, 1.0, token=f"t{task}")
        assert pool._result_request({"host": host, "key": f"t{task}",
                                     "result": base64.b64encode(pickle.dumps(result)).decode()})

    post(first, 0)
    assert pool._work_request({"host": first, "wait": 5}).get("renew") == ["c/0"]
    assert pool._work_request({"host": first, "wait": 5}).get("renew") == ["c/0"], "renewed until the sibling ends"
    assert "renew" not in pool._work_request({"host": second, "wait": 0.3}), "the pair still running is not"
    post(second, 1)
    running.join(5)
    assert [r.task for r in got] == [0, 1]
    pool._work_request({"host": first, "wait": 0})  # one renewal may have been queued before the last result
    assert "renew" not in pool._work_request({"host": first, "wait": 0.5}), "the next epoch is due: no more"


def _spec_with(secret: str):
    from connect.tasks.policy import RunnerPolicy
    from connect.testing import MemorySinkConnector, MemorySinkTask, MemorySourceTask
    from worker.runtime.partition import TaskPairSpec

    return TaskPairSpec(connector="a", task=0, epoch=3, prev_epoch=None, revision="g",
                        source_task_class=MemorySourceTask, source_config={"password": secret},
                        sink_task_class=MemorySinkTask, sink_config={}, dlq_config=None, policy=RunnerPolicy(),
                        token="t3", sink_connector_class=MemorySinkConnector, secrets=frozenset({secret}))


def test_an_error_escaping_a_hosted_pair_reaches_the_driver_with_its_secrets_masked(monkeypatch):
    """The executor side of shared hosting: whatever escapes the epoch (its traceback quotes the
    secret) is posted over the control channel masked, as every error text leaving an executor."""
    import base64
    import pickle

    from connect.secrets import MASK
    from worker.runtime import hosting
    from worker.runtime.control import ControlServer

    secret = "hosted-s3cr3t-7f1c"

    def escaping(spec, control):
        raise RuntimeError(f"login failed for password={secret}")

    monkeypatch.setattr(hosting, "run_task_pair_epoch", escaping)
    posted: list[EpochResult] = []
    server = ControlServer()
    server.register("host_result", lambda request: posted.append(pickle.loads(base64.b64decode(request["result"]))))
    try:
        hosting._run_and_report(server.address, None, "h1", "k", _spec_with(secret))
    finally:
        server.close()
    [result] = posted
    assert result.state == FAILED and result.retriable and result.token == "t3"
    assert "RuntimeError: login failed for password=" + MASK in result.trace
    assert secret not in result.trace


def test_a_lost_host_reports_its_epochs_with_the_pairs_secrets_masked():
    """The driver side: the error that ended a host's Spark job may quote a pair's config."""
    from concurrent.futures import Future

    from connect.secrets import MASK

    secret = "lost-host-s3cr3t-90ab"
    pool = _Pool(max_hosts=1)
    pool.place("a/0")
    with pool._cond:
        host = pool._hosts["h1"]
    future: Future = Future()
    host.running["t3"] = (_spec_with(secret), future)

    class _Failing:
        def setLocalProperty(self, *_):
            pass

        def setJobDescription(self, *_):
            pass

        def parallelize(self, *_a):
            raise RuntimeError(f"Python worker exited: bad config password={secret}")

    pool._sc_of = lambda: _Failing()
    pool._host_job(host)
    result = future.result(timeout=1)
    assert result.state == FAILED and "was lost" in result.trace
    assert secret not in result.trace and MASK in result.trace
