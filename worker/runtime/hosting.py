"""Shared hosting of task pairs (``worker.pair.hosting=shared``, the default).

With one Spark job per epoch (``job``), a task pair holds a Spark slot and a Python worker for a
whole epoch whether it moves 50 msg/s or 50,000: N connectors need N slots and N Python workers, and
when pairs outnumber slots they take turns an epoch at a time (latency goes from 0.2 s to 20 s).

Here a few long-lived Spark tasks, the *hosts*, each hold one slot and one Python worker for as
long as the application runs, and run many pairs at once, each epoch in a thread of its own (the
runners are the same as in ``job`` mode: every pair keeps its own accounting, epoch bound, stop
flag, fencing token and failure isolation). A host pulls its work from the driver over the
control channel (``host_work``, a long poll) and posts each epoch's result back (``host_result``),
so nothing listens on the executors and it works on a cluster as in local mode. A connector's
epoch is no Spark job any more: its driver thread hands each pair's epoch to the pair's host and
waits for the results, so pairs never wait for a slot and the gap between two epochs of a pair is
a round trip, not a job.

Packing (:class:`HostPool`): the driver places each pair on a host and keeps it there (its runner
and broker clients stay cached in that process). It learns each pair's load from its results (the
CPU seconds of its epoch thread per second of epoch, a moving average) and places a new pair on
the least loaded host. A *busy* pair (over :data:`BUSY` of a core) gets a host of its own: the other
pairs move off its host at their next epoch, each to the least loaded host without a busy pair. A
pair also moves off a host whose pairs together need more than a core (one Python process, one
GIL) when another host has room for it. A move restarts the pair on its new host from its
committed offsets, so moves are rare: a pair stays where it is unless the rule above says so.

How many hosts: ``worker.pair.hosts`` (default: twice the application's cores, at most the slots,
at most the pairs). A host that is lost (its Python worker killed, its executor gone) fails its
Spark job; the epochs it was running are reported FAILED (retriable, so their pairs restart with
backoff from their committed offsets, 0 lost) and a new host replaces it when pairs need it.
"""

from __future__ import annotations

import base64
import logging
import os
import pickle
import socket
import threading
import time
import traceback
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_any
from typing import Any, Callable, Sequence

import attrs

from connect.tasks.results import FAILED, EpochResult
from worker.runtime.control import ControlAddress, ControlClient, ControlServer, client_for
from worker.runtime.partition import TaskPairSpec, evict_cached, not_run, pair_id, renew_bridge, run_task_pair_epoch

__all__ = ["HostPool", "serve_host", "BUSY", "HOT"]

log = logging.getLogger(__name__)

BUSY = 0.3  # of a core: a pair this busy gets a host of its own
HOT = 0.9  # of a core: a host whose pairs need more than this sheds one to a host with room
_EMA = 0.5  # weight of the newest epoch in a pair's load
MIN_LEARN_S = 1.0  # epochs shorter than this say nothing about a pair's load
_LONG_POLL_S = 1.0  # a host's request for work waits this long for some
_RESULT_MARGIN_S = 60.0  # beyond an epoch and its grace: a task start (lookups of 10 s), the way back
_HOST_GONE_AFTER = 3  # consecutive failed requests for work before a host counts its driver gone
_HOSTNAME = socket.gethostname()


# -- driver side ---------------------------------------------------------------------------------
class _Host:
    """One long-lived Spark task: its work queue and what runs there."""

    def __init__(self, host_id: str):
        self.id = host_id
        self.inbox: deque[tuple[str, str, list | None]] = deque()  # (key, pickled spec, driver) not taken yet
        self.running: dict[str, tuple[TaskPairSpec, Future]] = {}  # key -> its epoch, until the result
        self.pairs: set[str] = set()  # pairs placed here
        self.evict: set[str] = set()  # pairs moved away whose runners this host should stop
        self.renew: set[str] = set()  # pairs done with their epoch whose bridges go on (a sibling runs)
        self.where: tuple[str, int] | None = None  # (hostname, pid) once it asked for work
        self.alive = True


_POOLS: dict[int, tuple[HostPool, int]] = {}  # id of the Spark application (or its future) -> (pool, users)
_POOLS_LOCK = threading.Lock()


class HostPool:
    """Driver side of shared hosting: the hosts (Spark jobs of one task each), placement and work.

    One pool per Spark application (:meth:`acquire`): every executor on it (the worker's one, or
    several drivers in one process) shares its hosts, which hold its slots. The pool serves its own
    control endpoint (``host_work``, ``host_result``); each epoch handed out carries the control
    address of the driver it runs for (offsets, stop flags)."""

    @classmethod
    def acquire(cls, app: Any, sc_of: Callable[[], Any], bind: str, max_hosts: Callable[[], int], *,
                tls: bool = False) -> HostPool:
        with _POOLS_LOCK:
            pool, users = _POOLS.get(id(app), (None, 0))
            if pool is None or pool._closed:
                pool, users = cls(sc_of, None, max_hosts, bind=bind, tls=tls), 0
            _POOLS[id(app)] = (pool, users + 1)
            pool._app_key = id(app)
            return pool

    def release(self) -> None:
        """One user fewer; the last one closes the pool (its hosts end, their slots free up)."""
        with _POOLS_LOCK:
            pool, users = _POOLS.get(self._app_key, (None, 0))
            if pool is not self:
                return
            if users > 1:
                _POOLS[self._app_key] = (pool, users - 1)
                return
            del _POOLS[self._app_key]
        self.close()

    def __init__(self, sc_of: Callable[[], Any], control_of: Callable[[], ControlAddress | None] | None,
                 max_hosts: Callable[[], int], *, bind: str | None = None, tls: bool = False):
        self._sc_of = sc_of
        self._server = ControlServer(bind, tls=tls) if bind is not None else None
        if self._server is not None:
            self.register(self._server)
        self._control_of = (lambda: self._server.address) if control_of is None else control_of
        self._app_key = 0
        self._max_hosts = max_hosts
        self._cond = threading.Condition()
        self._hosts: dict[str, _Host] = {}
        self._placed: dict[str, str] = {}  # pair -> host id
        self._moving: dict[str, str] = {}  # pair -> the host it moves to after its running (last) epoch here
        self.loads: dict[str, float] = {}  # pair -> cores its epochs used (moving average)
        self._next = 0
        self._closed = False
        self.moves = 0

    # -- control channel handlers (threads of the driver's control server) -------------------------
    def register(self, server) -> None:
        server.register("host_work", self._work_request)
        server.register("host_result", self._result_request)

    def _work_request(self, request: dict) -> dict:
        host_id = request.get("host", "")
        deadline = time.monotonic() + min(float(request.get("wait", _LONG_POLL_S)), 5.0)
        with self._cond:
            host = self._hosts.get(host_id)
            if host is None or not host.alive or self._closed:
                return {"exit": True}
            host.where = (str(request.get("hostname", "")), int(request.get("pid", 0)))
            while not host.inbox and not host.evict and not host.renew and not self._closed and host.alive:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            if self._closed or not host.alive:
                return {"exit": True}
            run = [{"key": key, "spec": spec, "control": control} for key, spec, control in host.inbox]
            host.inbox.clear()
            evict, host.evict = sorted(host.evict), set()
            renew, host.renew = sorted(host.renew), set()
        answer = {"run": run, "evict": evict}
        if renew:
            answer["renew"] = renew
        return answer

    def _result_request(self, request: dict) -> bool:
        result = pickle.loads(base64.b64decode(request["result"]))
        with self._cond:
            host = self._hosts.get(request.get("host", ""))
            entry = host.running.pop(request.get("key", ""), None) if host is not None else None
            if entry is None:  # its host was declared lost meanwhile: the epoch was reported FAILED already
                return False
            self._learn(pair_id(result.connector, result.task), result)
        entry[1].set_result(result)
        return True

    # -- the executor's side ---------------------------------------------------------------------
    def run(self, specs: Sequence[TaskPairSpec], control: ControlAddress | None) -> list[EpochResult]:
        """Each pair's epoch on its host, for the driver at ``control``; the results in the order of
        ``specs``. An epoch whose host was lost, or whose result does not come within its bound, is
        reported FAILED (retriable)."""
        from pyspark import cloudpickle  # classes defined in tests or notebooks travel by value

        waits = []
        for spec in specs:
            future: Future = Future()
            key = f"{spec.token or id(future)}"
            with self._cond:
                host, final = self._place(pair_id(spec.connector, spec.task))
            if final:
                spec = attrs.evolve(spec, final=True)
            payload = base64.b64encode(cloudpickle.dumps(spec)).decode()
            with self._cond:
                host.running[key] = (spec, future)
                host.inbox.append((key, payload, list(control) if control else None))
                self._cond.notify_all()
            waits.append((spec, host, key, future))
        return self._results(waits)

    def _results(self, waits: list[tuple[TaskPairSpec, _Host, str, Future]]) -> list[EpochResult]:
        """The epochs' results, in the order of ``waits``. While some pairs still run, the pairs
        already done keep moving records between epochs (their bridges' leases are renewed,
        ``worker.runtime.partition.renew_bridge``): the connector's next epoch starts only once
        every result is in, and a pair that ended early (its record budget) would otherwise stand
        idle until its slowest sibling ended, a second at a time (issue 36). An epoch whose result
        does not come within its bound is reported FAILED (retriable)."""
        started = time.monotonic()
        bounds = {key: started + (s.policy.epoch_max_ms + s.policy.epoch_grace_ms) / 1000 + _RESULT_MARGIN_S
                  for s, _, key, _ in waits}
        bridge = min((s.policy.epoch_bridge_ms for s, *_ in waits), default=0) / 1000
        tick = max(bridge / 3, 0.05) if bridge > 0 else None  # renewals well within a lease
        results: dict[str, EpochResult] = {}
        while len(results) < len(waits):
            pending = [w for w in waits if w[2] not in results]
            left = max(min(bounds[key] for _, _, key, _ in pending) - time.monotonic(), 0.0)
            wait_any([f for *_, f in pending], timeout=left if tick is None else min(left, tick),
                     return_when=FIRST_COMPLETED)
            now = time.monotonic()
            for spec, host, key, future in pending:
                if future.done():
                    results[key] = future.result()
                elif now >= bounds[key]:
                    with self._cond:
                        host.running.pop(key, None)
                        self._unplace(pair_id(spec.connector, spec.task))  # its old runner may be stuck there
                    results[key] = not_run(spec, f"no result from host {host.id} within {bounds[key] - started:.0f} s",
                                           retriable=True, on_executor=False)
            if tick is not None and len(results) < len(waits):
                with self._cond:
                    for spec, host, key, _ in waits:
                        if key in results and host.alive and results[key].state != FAILED:
                            host.renew.add(pair_id(spec.connector, spec.task))
                    self._cond.notify_all()
        return [results[key] for _, _, key, _ in waits]

    def close(self) -> None:
        """Hosts end at their next request for work (their Spark jobs return)."""
        with self._cond:
            self._closed = True
            for host in self._hosts.values():
                for spec, future in list(host.running.values()):
                    if not future.done():
                        future.set_result(not_run(spec, "the worker is stopping", retriable=True, on_executor=False))
                host.running.clear()
            self._cond.notify_all()
        if self._server is not None:  # once the waiting hosts were told to end
            closer = threading.Timer(2 * _LONG_POLL_S, self._server.close)
            closer.daemon = True  # a stopping worker exits without waiting for it (SIGTERM took 2 s longer)
            closer.start()

    def hosts(self) -> list[dict[str, Any]]:
        """What each live host runs (for status and metrics)."""
        with self._cond:
            return [{"host": h.id, "where": list(h.where) if h.where else None, "pairs": sorted(h.pairs),
                     "load": round(self._load(h), 3)} for h in self._hosts.values() if h.alive]

    # -- placement -------------------------------------------------------------------------------
    def _load(self, host: _Host) -> float:
        return sum(self.loads.get(p, 0.0) for p in host.pairs)

    def _busy(self, pair: str) -> bool:
        return self.loads.get(pair, 0.0) >= BUSY

    def _learn(self, pair: str, result: EpochResult) -> None:
        """Fold an epoch's CPU into the pair's load: steady epochs only. An epoch that (re)built the
        runner spent its CPU connecting clients, and a short one (the first, persisting start
        positions) would make that look like several cores."""
        stats = result.stats or {}
        cpu, wall = stats.get("cpu_s"), stats.get("wall_s")
        if cpu is None or not wall or wall < MIN_LEARN_S or result.restarted or result.state == FAILED:
            return
        used = cpu / wall
        old = self.loads.get(pair)
        self.loads[pair] = used if old is None else _EMA * used + (1 - _EMA) * old

    def _place(self, pair: str) -> tuple[_Host, bool]:
        """The host of ``pair`` for its next epoch (the caller holds the lock), and whether that is
        its last epoch there. A pair stays where it is unless it should move and a better host
        exists (see the module doc); then it runs one last epoch where it is, draining what it has in
        flight and without a bridge after it (so its new host replays nothing it already delivered),
        and moves at the next. A new pair goes to an empty host, a new one while there may be more,
        then the least loaded."""
        current = self._hosts.get(self._placed.get(pair, ""))
        if current is not None and not current.alive:
            current = None
        moving = self._hosts.get(self._moving.pop(pair, ""))
        if current is not None and moving is not None and moving.alive:
            current.pairs.discard(pair)
            current.evict.add(pair)
            self.moves += 1
            log.info("task pair %s moves from host %s to host %s (loads %.2f and %.2f of a core)", pair, current.id,
                     moving.id, self._load(current), self._load(moving))
            moving.pairs.add(pair)
            self._placed[pair] = moving.id
            return moving, False
        if current is not None and not self._should_move(pair, current):
            return current, False
        target = self._best_host(pair, current)
        if current is not None:
            if target is not None:  # nowhere better (None): a move would only restart it
                self._moving[pair] = target.id
            return current, target is not None
        target.pairs.add(pair)
        self._placed[pair] = target.id
        return target, False

    def _has_busy(self, host: _Host, besides: str) -> bool:
        return any(self._busy(p) for p in host.pairs if p != besides)

    def _should_move(self, pair: str, host: _Host) -> bool:
        if not host.pairs - {pair}:
            return False
        if not self._busy(pair) and self._has_busy(host, pair):
            return True  # a busy pair's host is its own
        if self._load(host) <= HOT:
            return False
        mine = self.loads.get(pair, 0.0)
        return any(h is not host and h.alive and self._load(h) + mine <= HOT / 2 for h in self._hosts.values())

    def _best_host(self, pair: str, current: _Host | None) -> _Host | None:
        """Where ``pair`` should go; None when it should stay at ``current`` after all."""
        live = [h for h in self._hosts.values() if h.alive and h is not current]
        can_start = len(live) + (current is not None) < max(self._max_hosts(), 1)
        by_load = lambda h: (self._has_busy(h, pair), self._load(h), len(h.pairs))  # noqa: E731
        if self._busy(pair):
            empty = [h for h in live if not h.pairs]
            if empty:
                return empty[0]
            if can_start:
                return self._start_host()
            return None if current is not None else min(live, key=by_load)
        quiet = [h for h in live if not self._has_busy(h, pair)]
        if current is not None and not self._has_busy(current, pair):  # a hot host sheds it: only to room
            mine = self.loads.get(pair, 0.0)
            roomy = [h for h in quiet if self._load(h) + mine <= HOT / 2]
            return min(roomy, key=by_load) if roomy else None
        empty = [h for h in quiet if not h.pairs]
        if empty:
            return empty[0]
        if can_start:
            return self._start_host()
        if quiet:
            return min(quiet, key=by_load)
        return None if current is not None else min(live, key=by_load)

    def _unplace(self, pair: str) -> None:
        self._moving.pop(pair, None)
        host = self._hosts.get(self._placed.pop(pair, ""))
        if host is not None:
            host.pairs.discard(pair)
            host.evict.add(pair)

    # -- host lifecycle --------------------------------------------------------------------------
    def _start_host(self) -> _Host:
        self._next += 1
        host = _Host(f"h{self._next}")
        self._hosts[host.id] = host
        threading.Thread(target=self._host_job, args=(host,), name=f"connect-host-{host.id}", daemon=True).start()
        return host

    def _host_job(self, host: _Host) -> None:
        """The host's Spark job, for as long as it lives; then its epochs are reported lost."""
        control = self._control_of()
        error = "its Spark task ended"
        try:
            sc = self._sc_of()
            sc.setLocalProperty("spark.scheduler.pool", "connect-hosts")
            sc.setJobDescription(f"connect host {host.id}: runs task pairs until the worker stops")
            host_id = host.id
            sc.parallelize([0], 1).map(lambda _: serve_host(control, host_id)).collect()
        except Exception as exc:  # noqa: BLE001 - a lost Python worker or executor fails the job
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        with self._cond:
            host.alive = False
            lost = list(host.running.values())
            host.running.clear()
            for pair in host.pairs:
                self._placed.pop(pair, None)
            host.pairs.clear()
            del self._hosts[host.id]
            closed = self._closed
            self._cond.notify_all()
        if lost or not closed:
            where = f"{host.where[0]} pid {host.where[1]}" if host.where else "not started"
            log.warning("task pair host %s (%s) ended: %s; %d epoch(s) lost there restart from their committed "
                        "offsets", host.id, where, error, len(lost))
        for spec, future in lost:
            if not future.done():
                future.set_result(not_run(spec, f"the host running this pair ({host.id}) was lost: {error}",
                                          retriable=True, on_executor=False))


# -- executor side -------------------------------------------------------------------------------
def serve_host(control: ControlAddress, host_id: str) -> int:
    """The body of a host's Spark task: run the epochs the driver hands out, each in a thread,
    until the driver says to end (or cannot be reached). Returns the number of epochs run."""
    work = ControlClient(control, timeout=_LONG_POLL_S + 30)  # its own connection: long polls block it
    failures, ran = 0, 0
    threads: list[threading.Thread] = []
    while True:
        try:
            answer = work.request("host_work", host=host_id, hostname=_HOSTNAME, pid=os.getpid(), wait=_LONG_POLL_S)
            failures = 0
        except ConnectionError as exc:
            failures += 1
            if failures >= _HOST_GONE_AFTER:
                log.warning("host %s: driver %s:%s unreachable (%s); ending", host_id, *control[:2], exc)
                break
            time.sleep(0.5)
            continue
        if answer.get("exit"):
            break
        for pair in answer.get("evict", ()):
            connector, _, task = pair.rpartition("/")
            evict_cached(connector, int(task))
        for pair in answer.get("renew", ()):
            connector, _, task = pair.rpartition("/")
            renew_bridge(connector, int(task))
        for item in answer.get("run", ()):
            spec = pickle.loads(base64.b64decode(item["spec"]))
            driver = tuple(item["control"]) if item.get("control") else None
            t = threading.Thread(target=_run_and_report, args=(control, driver, host_id, item["key"], spec),
                                 name=f"connect-pair-{spec.connector}-{spec.task}", daemon=True)
            t.start()
            threads.append(t)
            ran += 1
        threads = [t for t in threads if t.is_alive()]
    work.close()
    return ran


def _run_and_report(control: ControlAddress, driver: ControlAddress | None, host_id: str, key: str,
                    spec: TaskPairSpec) -> None:
    """Run one epoch for the driver at ``driver`` and post its result to the pool at ``control``."""
    cpu, wall = time.thread_time(), time.monotonic()
    try:
        result = run_task_pair_epoch(spec, driver)
    except BaseException as exc:  # noqa: BLE001 - run_task_pair_epoch reports failures; this is a bug there
        result = not_run(spec, "".join(traceback.format_exception(exc)), retriable=True)
    result.stats = dict(result.stats or {}, cpu_s=time.thread_time() - cpu, wall_s=time.monotonic() - wall)
    try:
        client_for(control).request("host_result", host=host_id, key=key,
                                    result=base64.b64encode(pickle.dumps(result)).decode())
    except ConnectionError as exc:  # the driver is gone: nobody is waiting for this result
        log.warning("host %s: the result of %s epoch %d could not reach the driver: %s", host_id,
                    pair_id(spec.connector, spec.task), spec.epoch, exc)
