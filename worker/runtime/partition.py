"""What one Spark partition runs: one epoch of one task pair, with runners cached per process.

PySpark reuses its Python worker processes, so a :class:`TaskPairRunner` (and its connected
broker clients, and the records it still has in flight) built for one epoch is kept in this
module and reused by the next epoch of the same pair.

Spark decides which Python worker runs each task, and it hands out idle workers in turn: with
two idle workers, one pair would alternate between them and be rebuilt every epoch. So a pair
has a *home*: the process that holds its runner. Every Python worker that runs pairs serves a
small loopback endpoint (``run``); the Spark task that gets a pair whose home is another process
on the same host *delegates* the epoch there and returns its result. Which pair a Spark task
runs is *claimed* from the driver over the control channel (``worker.runtime.control``): a pair cached
fresh in the claiming process first, then a pair whose home is a sibling process on this host
(delegated), then pair ``index``, then any unclaimed one. The driver grants each pair once per
job, so no pair runs twice at a time; a home that cannot be reached is replaced by the claiming
process (the pair restarts there from its committed offsets).

Each spec names the epoch whose offsets the driver committed last (``prev_epoch``): a cached
runner that did not run exactly that epoch is stale (its pair ran elsewhere meanwhile, or a
result was lost) and is restarted from the committed offsets. The spec carries a fencing
``token``; the driver persists a result only if its token is the one it issued for that pair
in that job. Tasks read only their own partitions' committed offsets, through the channel.
Runners left idle (their pair now lives elsewhere) are stopped after a while.

A process holding runners also asks their driver, about once a second (``wanted``), whether each
pair is still wanted in its revision: a runner whose connector was stopped, deleted or
reconfigured is stopped at once (its consumers released, its clients closed) instead of idling,
and so is every runner of a driver that can no longer be reached (it has gone away).
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
from typing import Any

import attrs
import orjson

from connect.errors import ConnectError, RetriableError
from connect.secrets import Redactor, install_log_redaction
from connect.sink.side import SideWriter
from connect.tasks.plan import PairPlan
from connect.tasks.policy import RunnerPolicy
from connect.tasks.results import FAILED, REASON_SHOWN, EpochResult
from connect.tasks.runner import TaskPairRunner
from connect.tasks.stages import StageChain, build_chain
from connect.transforms.chain import TransformsConfig
from worker.runtime.control import MAX_LINE, ControlAddress, ControlServer, client_for, hello

__all__ = ["TaskPairSpec", "JobContext", "run_task_pair_epoch", "run_claimed_epoch", "stop_all_cached", "pair_id",
           "evict_cached", "renew_bridge", "not_run"]

log = logging.getLogger(__name__)

_HOST = socket.gethostname()
_STOP_POLL_S = 0.2
_REAP_EVERY_S = 1.0
_REAP_UNREACHABLE = 3  # consecutive failed ``wanted`` requests before a driver counts as gone


@attrs.frozen
class TaskPairSpec:
    connector: str
    task: int
    epoch: int
    prev_epoch: int | None  # last epoch of this pair whose result the driver persisted
    revision: str  # hash of the connector's config and task split; a change restarts its pairs
    source_task_class: type
    source_config: dict[str, Any]
    sink_task_class: type
    sink_config: dict[str, Any]
    dlq_config: dict[str, Any] | None
    policy: RunnerPolicy
    token: str = ""  # fencing token: the driver accepts this attempt's result only
    offsets: dict[str, dict[str, Any]] | None = None  # fixed offsets (tests); None: ask the driver
    offset_syncs_config: dict[str, Any] | None = None  # the sink's config writing offset syncs
    # builds the side writers (dead letters, offset syncs) from dlq_config / offset_syncs_config
    sink_connector_class: type | None = None
    dlq_connector_class: type | None = None  # dlq.connector.class; None: the sink connector
    secrets: frozenset[str] = frozenset()  # values this process's log lines must never show
    transforms: TransformsConfig | None = None  # the connector's transforms and predicates, parsed
    final: bool = False  # the pair runs elsewhere next: drain what is in flight, no bridge after it
    open_gaps: int = 0  # the connector's open source gaps (worker.runtime.gapledger), marked on what a flow writes


@attrs.frozen
class JobContext:
    """How a Spark task of one job reaches its driver."""

    control: ControlAddress
    job: str


def pair_id(connector: str, task: int) -> str:
    return f"{connector}/{task}"


@attrs.define
class _Cached:
    revision: str
    runner: TaskPairRunner
    idle_after_s: float  # stop it when it has not run for this long (its pair lives elsewhere)
    control: ControlAddress | None = None  # the driver it runs for
    last_epoch: int | None = None
    used_at: float = attrs.field(factory=time.monotonic)


_RUNNERS: dict[tuple[str, int], _Cached] = {}
_LOCK = threading.Lock()  # guards _RUNNERS, _PAIR_LOCKS and _HOME
_PAIR_LOCKS: dict[tuple[str, int], threading.Lock] = {}  # one epoch of a pair at a time in this process
_HOME: ControlServer | None = None
_REAPER: threading.Thread | None = None


def _pair_lock(key: tuple[str, int]) -> threading.Lock:
    with _LOCK:
        return _PAIR_LOCKS.setdefault(key, threading.Lock())


def _idle_after_s(policy: RunnerPolicy) -> float:
    """A cached runner unused for two whole epochs (and 10 s) belongs to a pair that moved."""
    return 2 * (policy.epoch_max_ms + policy.epoch_grace_ms) / 1000 + 10


class _StopBoard:
    """The stop flags of every pair this process runs for one driver, read in one request.

    A process hosting many pairs would otherwise ask once per pair every 0.2 s (200 pairs: 1,000
    requests a second to the driver). Connectors not asked about for a while are forgotten."""

    def __init__(self, control: ControlAddress):
        self._client = client_for(control)
        self._lock = threading.Lock()
        self._asked: dict[str, float] = {}  # connector -> when a pair last asked
        self._stopping: set[str] = set()
        self._next = 0.0
        self._each = False  # a driver without ``stops``: one request per connector

    def requested(self, connector: str) -> bool:
        now = time.monotonic()
        with self._lock:
            fresh = connector in self._asked
            self._asked[connector] = now
            if now >= self._next or not fresh:
                self._next = now + _STOP_POLL_S
                self._asked = {c: t for c, t in self._asked.items() if now - t < 10 * _STOP_POLL_S + 5}
                self._stopping = self._read(sorted(self._asked))
            return connector in self._stopping

    def _read(self, connectors: list[str]) -> set[str]:
        try:
            if not self._each:
                try:
                    return set(self._client.request("stops", connectors=connectors))
                except ConnectionError as exc:
                    if "unknown op" not in str(exc):
                        raise
                    self._each = True
            return {c for c in connectors if self._client.request("stop", connector=c)}
        except ConnectionError:
            return set(connectors)  # an unreachable driver means stop: nobody would receive the results


_BOARDS: dict[tuple[str, int, str], _StopBoard] = {}


def _stop_flag(control: ControlAddress | None, connector: str):
    """A cheap ``stop_requested()``: whether the worker stops or this connector leaves RUNNING, as
    the driver said at most 0.2 s ago (:class:`_StopBoard`); an unreachable driver means stop. A stop
    is asked again too: a paused connector that resumes runs again."""
    if control is None:
        return lambda: False
    with _LOCK:
        board = _BOARDS.get(tuple(control))
        if board is None:
            board = _BOARDS[tuple(control)] = _StopBoard(control)
    return lambda: board.requested(connector)


def _offset_lookup(spec: TaskPairSpec, control: ControlAddress | None):
    if spec.offsets is not None or control is None:
        return None
    client = client_for(control)
    return lambda keys: client.request("offsets", connector=spec.connector, keys=keys)


def _writer_factory(spec: TaskPairSpec, config: dict[str, Any] | None, role: str, cls: type | None):
    """Builds the side writer of the pair's sink connector (:mod:`connect.sink.side`) for the
    dead-letter or offset-syncs topic (``config["topic"]``), with that side's own client settings."""
    if config is None:
        return None

    def build() -> SideWriter:
        writer = cls.side_writer(config, config["topic"]) if cls is not None else None
        if writer is None:  # validation refuses this; a spec built by hand may not
            raise ConnectError(f"{spec.connector}: the sink connector {getattr(cls, '__name__', cls)} has no side "
                               f"writer for the {role} topic {config['topic']!r} (see connect.sink.side)")
        return writer

    return build


def _stages(spec: TaskPairSpec) -> StageChain:
    """The pair's stage chain with its own instances of the connector's transforms."""
    steps, closers = spec.transforms.build() if spec.transforms else ((), ())
    return build_chain(spec.policy, spec.source_config, spec.sink_config, steps, closers)


def _plan(spec: TaskPairSpec, control: ControlAddress | None) -> PairPlan:
    """The pair as its runner gets it: new task instances, and every way the runner reaches the driver."""
    return PairPlan(
        connector=spec.connector, task_id=spec.task, source=spec.source_task_class(), sink=spec.sink_task_class(),
        source_config=spec.source_config, sink_config=spec.sink_config, policy=spec.policy,
        offsets=spec.offsets, offset_lookup=_offset_lookup(spec, control),
        dlq_factory=_writer_factory(spec, spec.dlq_config, "dlq", spec.dlq_connector_class or spec.sink_connector_class),
        offset_syncs_factory=_writer_factory(spec, spec.offset_syncs_config, "offset-syncs", spec.sink_connector_class),
        stages=_stages(spec), stop_requested=_stop_flag(control, spec.connector))


def _evict(key: tuple[str, int]) -> None:
    """Stop and forget the runner cached for ``key``; the caller holds the pair's lock."""
    with _LOCK:
        cached = _RUNNERS.pop(key, None)
    if cached is not None:
        try:
            cached.runner.stop()
        except Exception as exc:  # noqa: BLE001 - a stale runner failing to stop must not fail this epoch
            log.warning("stopping stale task pair %s-%s: %s", *key, exc)


def evict_cached(connector: str, task: int, wait_s: float = 5.0) -> bool:
    """Stop the runner cached here for a pair that now runs in another process (its bridge first);
    False if its lock could not be had within ``wait_s`` (an epoch still running here)."""
    key = (connector, task)
    cached = _RUNNERS.get(key)
    if cached is None:
        return True
    cached.runner.halt()
    lock = _pair_lock(key)
    if not lock.acquire(timeout=wait_s):
        return False
    try:
        if _RUNNERS.get(key) is cached:
            _evict(key)
        return True
    finally:
        lock.release()


def _evict_idle(running: tuple[str, int]) -> None:
    """Stop runners that have not run for a while: their pairs run elsewhere now. Stopping
    unassigns their consumers (no idle prefetching) and returns their clients to the pool."""
    now = time.monotonic()
    with _LOCK:
        idle = [k for k, c in _RUNNERS.items() if k != running and now - c.used_at > c.idle_after_s]
    for key in idle:
        lock = _pair_lock(key)
        if lock.acquire(blocking=False):  # busy means it is not idle after all
            try:
                cached = _RUNNERS.get(key)
                if cached is not None and time.monotonic() - cached.used_at > cached.idle_after_s:
                    _evict(key)
            finally:
                lock.release()


_REDACTOR = Redactor()
_REDACTION_INSTALLED = False


def _mask_secrets_in_logs(secrets: frozenset[str]) -> None:
    """Executors log too (client errors, retries, librdkafka's lines): every secret of every pair
    this process runs is masked in them, as on the driver."""
    global _REDACTION_INSTALLED
    _REDACTOR.add(secrets)
    if _REDACTION_INSTALLED:
        return
    with _LOCK:
        if not _REDACTION_INSTALLED:
            root = logging.getLogger()
            if not root.handlers:  # logging's last resort handler takes no filters: give it one that does
                handler = logging.StreamHandler()
                handler.setLevel(logging.WARNING)
                handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
                root.addHandler(handler)
            install_log_redaction(_REDACTOR)
            _REDACTION_INSTALLED = True


def _mask_reasons(result: EpochResult) -> None:
    """Error texts leave this process masked, then cut (masking a cut secret would miss it)."""
    stats = result.stats
    for retry in stats.get("retrying") or ():
        retry["reason"] = _REDACTOR.redact(retry["reason"])[:REASON_SHOWN]
    reasons: dict[str, int] = {}
    for reason, n in (stats.get("failure_reasons") or {}).items():
        shown = _REDACTOR.redact(reason)[:REASON_SHOWN]
        reasons[shown] = reasons.get(shown, 0) + n
    if "failure_reasons" in stats:
        stats["failure_reasons"] = reasons
    if result.trace:
        result.trace = _REDACTOR.redact(result.trace)


def run_task_pair_epoch(spec: TaskPairSpec, control: ControlAddress | None = None) -> EpochResult:
    _mask_secrets_in_logs(spec.secrets)
    key = (spec.connector, spec.task)
    _evict_idle(key)
    waiting = _RUNNERS.get(key)
    if waiting is not None:
        waiting.runner.halt()  # a bridge bridging the gap since its last epoch gives the pair back
    with _pair_lock(key):
        cached = _RUNNERS.get(key)
        if cached is not None and (cached.last_epoch != spec.prev_epoch or cached.revision != spec.revision):
            _evict(key)
            cached = None
        restarted = cached is None
        if cached is not None:
            cached.runner.offsets_persisted()  # prev_epoch matched: the driver stored its offsets
        if cached is None:
            started = time.time()
            try:
                cached = _Cached(spec.revision, TaskPairRunner(_plan(spec, control)), _idle_after_s(spec.policy), control)
            except Exception as exc:  # noqa: BLE001 - a task that cannot start is reported FAILED
                return not_run(spec, "".join(traceback.format_exception(exc)), started=started,
                               retriable=_transient_start_failure(exc))
            with _LOCK:
                _RUNNERS[key] = cached
            if control is not None:
                _start_reaper()
        try:
            cached.runner.mark_open_gaps(spec.open_gaps)
            result = cached.runner.run_epoch(spec.epoch, drain=spec.final)
        finally:
            cached.used_at = time.monotonic()
        result.restarted = restarted
        result.token = spec.token
        _mask_reasons(result)
        cached.last_epoch = spec.epoch
        if result.state == FAILED:
            _evict(key)
        elif control is not None and spec.policy.epoch_bridge_ms > 0 and not spec.final:
            _bridge(key, cached, spec.epoch, spec.policy.epoch_bridge_ms / 1000)
        return result


def _bridge(key: tuple[str, int], cached: _Cached, epoch: int, lease_s: float) -> None:
    """Keep the pair moving records (``TaskPairRunner.bridge``) while its result travels to the
    driver and the next epoch is scheduled: the 50-200 ms between two epochs would otherwise be a
    pause of the whole pipeline (a latency spike at every epoch boundary). The bridge stops when the
    next epoch arrives (``halt``), when the pair's connector stops, or after ``lease_s`` (which the
    driver renews while a sibling pair of the same epoch still runs, :func:`renew_bridge`): a pair
    whose next epoch runs elsewhere only replays what the bridge moved (it is never committed)."""
    until = time.monotonic() + lease_s

    def bridge() -> None:
        lock = _pair_lock(key)
        if not lock.acquire(timeout=lease_s):
            return
        try:
            # Only the runner of that epoch, and only if no later epoch ran meanwhile.
            if _RUNNERS.get(key) is cached and cached.last_epoch == epoch:
                cached.runner.bridge(until)
                cached.used_at = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - the next epoch of the pair reports its own failures
            log.warning("task pair %s-%s between epochs: %s", *key, exc)
        finally:
            lock.release()

    threading.Thread(target=bridge, name=f"connect-bridge-{key[0]}-{key[1]}", daemon=True).start()


def renew_bridge(connector: str, task: int) -> None:
    """The driver still waits for a sibling of this pair's last epoch: the pair's bridge (running, or
    about to start) keeps moving records for another ``epoch.bridge.ms`` from now."""
    cached = _RUNNERS.get((connector, task))
    if cached is not None:
        cached.runner.renew_bridge(time.monotonic() + cached.runner.policy.epoch_bridge_ms / 1000)


def not_run(spec: TaskPairSpec, trace: str, *, retriable: bool, started: float | None = None,
            on_executor: bool = True) -> EpochResult:
    """FAILED result of an epoch whose pair never ran: it could not start, its answer was lost, its
    host was lost or the worker is stopping. The one place such a result is built, on the executor
    or on the driver (``on_executor=False``: it names no process). Error texts leave this process
    masked: the pair's own secrets and every secret this process has seen are replaced in ``trace``."""
    _REDACTOR.add(spec.secrets)
    now = time.time()
    return EpochResult(spec.connector, spec.task, spec.epoch, FAILED, {}, {}, now if started is None else started,
                       now, trace=_REDACTOR.redact(trace), pid=os.getpid() if on_executor else 0,
                       restarted=True, retriable=retriable, token=spec.token, host=_HOST if on_executor else "")


def _transient_start_failure(exc: BaseException) -> bool:
    """A start that failed for lack of a broker or the driver is worth retrying with backoff."""
    return isinstance(exc, (RetriableError, ConnectionError, TimeoutError)) or "transport" in str(exc).lower()


def _fresh(spec: TaskPairSpec) -> bool:
    cached = _RUNNERS.get((spec.connector, spec.task))
    return cached is not None and cached.last_epoch == spec.prev_epoch and cached.revision == spec.revision


def home_address() -> ControlAddress:
    """This process's loopback endpoint where sibling processes delegate epochs (started once)."""
    global _HOME
    with _LOCK:
        if _HOME is None:
            _HOME = ControlServer("127.0.0.1")
            _HOME.register("run", _serve_delegated)
        return _HOME.address


def _serve_delegated(request: dict) -> str:
    spec = pickle.loads(base64.b64decode(request["spec"]))
    control = tuple(request["control"]) if request.get("control") else None
    result = run_task_pair_epoch(spec, control)
    return base64.b64encode(pickle.dumps(result)).decode()


class _HomeGone(Exception):
    """The pair's home process cannot be reached: nothing was sent, run the pair here."""


def _delegate(home: ControlAddress, spec: TaskPairSpec, control: ControlAddress | None) -> EpochResult:
    """Run the epoch in the pair's home process and return its result.

    One connection per epoch, one attempt: a request that was sent must never be sent twice.
    If the answer is lost, the epoch is reported FAILED (retriable); the driver does not
    persist it, so the home's runner is stale next time and restarts from the committed offsets.
    """
    from pyspark import cloudpickle  # classes defined in tests or notebooks travel by value

    host, port, secret = home[:3]  # loopback, on this host: plain
    try:
        sock = socket.create_connection((host, port), timeout=2.0)
    except OSError as exc:
        raise _HomeGone(f"{host}:{port}: {exc}") from exc
    p = spec.policy
    started = time.time()
    payload = {"op": "run", "secret": secret, "spec": base64.b64encode(cloudpickle.dumps(spec)).decode(),
               "control": list(control) if control else None}
    try:
        with sock:
            # The home needs at most the epoch, its grace and a task start (lookups of 10 s).
            sock.settimeout((p.epoch_max_ms + p.epoch_grace_ms) / 1000 + 60)
            sock.sendall(hello(secret) + orjson.dumps(payload) + b"\n")
            line = sock.makefile("rb").readline(MAX_LINE + 1)
        answer = orjson.loads(line) if line else {"error": "the home process closed the connection"}
        if "error" in answer:
            raise ConnectionError(answer["error"])
        return pickle.loads(base64.b64decode(answer["ok"]))
    except (OSError, ValueError) as exc:
        return not_run(spec, f"the epoch delegated to {host}:{port} (the pair's home process) was lost: {exc}",
                       started=started, retriable=True)


def run_claimed_epoch(index: int, specs: list[TaskPairSpec], job: JobContext) -> EpochResult:
    """Claim a pair of ``specs`` from the driver (preferring one at home here) and run its epoch,
    here or in the pair's home process on this host."""
    fresh = [pair_id(s.connector, s.task) for s in specs if _fresh(s)]
    home = home_address()
    claimed = client_for(job.control).request("claim", job=job.job, index=index, fresh=fresh, host=_HOST,
                                              pid=os.getpid(), home=list(home))
    if claimed is None:
        raise RuntimeError(f"job {job.job}: no task pair left to claim (more Spark tasks than pairs?)")
    spec = next(s for s in specs if pair_id(s.connector, s.task) == claimed["pair"])
    elsewhere = claimed.get("home")
    if elsewhere and tuple(elsewhere) != home:
        try:
            return _delegate(tuple(elsewhere), spec, job.control)
        except _HomeGone as exc:
            log.warning("home of task pair %s is gone (%s); running it here", claimed["pair"], exc)
    return run_task_pair_epoch(spec, job.control)


def _start_reaper() -> None:
    global _REAPER
    with _LOCK:
        if _REAPER is None or not _REAPER.is_alive():
            _REAPER = threading.Thread(target=_reap_forever, name="connect-reaper", daemon=True)
            _REAPER.start()


def _reap_forever() -> None:
    unreachable: dict[tuple[str, int], int] = {}
    while True:
        time.sleep(_REAP_EVERY_S)
        try:
            reap_unwanted(unreachable)
        except Exception as exc:  # noqa: BLE001 - the reaper must outlive any one failure
            log.warning("checking cached task pairs with their driver: %s", exc)


def reap_unwanted(unreachable: dict[tuple[str, int], int] | None = None) -> list[tuple[str, int]]:
    """Ask each driver which of its cached pairs it still wants, in their revision; stop the
    others (skipping a pair busy with an epoch: it is wanted after all, or ends at its stop flag).
    Returns the pairs stopped."""
    unreachable = {} if unreachable is None else unreachable
    with _LOCK:
        by_driver: dict[ControlAddress, list[tuple[tuple[str, int], str]]] = {}
        asked: dict[tuple[str, int], _Cached] = {}
        for key, cached in _RUNNERS.items():
            if cached.control is not None:
                by_driver.setdefault(tuple(cached.control), []).append((key, cached.revision))
                asked[key] = cached
    doomed: list[tuple[str, int]] = []
    for control, pairs in by_driver.items():
        try:
            unwanted = client_for(control).request("wanted", pairs=[[c, t, g] for (c, t), g in pairs])
            unreachable.pop(control[:2], None)
        except ConnectionError as exc:
            if "unknown op" in str(exc):  # a driver that does not track this: idle eviction only
                continue
            unreachable[control[:2]] = unreachable.get(control[:2], 0) + 1
            if unreachable[control[:2]] < _REAP_UNREACHABLE:
                continue
            log.warning("driver %s:%s unreachable (%s): stopping its %d cached task pair(s)", *control[:2], exc, len(pairs))
            unwanted = [list(key) for key, _ in pairs]
        doomed.extend((c, int(t)) for c, t in unwanted)
    stopped = []
    for key in doomed:
        if key in asked:
            asked[key].runner.halt()  # a bridge between epochs ends at once
        lock = _pair_lock(key)
        if lock.acquire(blocking=False):
            try:
                # Only the runner the driver was asked about: a newer one cached since is wanted.
                if key in asked and _RUNNERS.get(key) is asked[key]:
                    log.info("stopping task pair %s-%s: its driver no longer runs it here", *key)
                    _evict(key)
                    stopped.append(key)
            finally:
                lock.release()
    return stopped


def stop_all_cached() -> None:
    for cached in list(_RUNNERS.values()):
        cached.runner.halt()
    for key in list(_RUNNERS):
        with _pair_lock(key):
            _evict(key)
