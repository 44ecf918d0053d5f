"""Spark set-up and the executor that runs task-pair epochs as Spark partitions.

Records never enter the JVM: each partition's Python function runs a whole epoch of one task pair
inside a (reused) PySpark Python worker and returns only the small EpochResult.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

from connect.tasks.results import EpochResult
from worker.runtime.classarchive import ClassArchive
from worker.runtime.control import ControlAddress
from worker.runtime.hosting import HostPool
from worker.runtime.partition import JobContext, TaskPairSpec, pair_id, run_claimed_epoch

log = logging.getLogger(__name__)

__all__ = ["build_spark", "start_spark", "SparkApp", "SparkExecutor", "default_master"]

_PROJECT_ROOT = str(Path(__file__).resolve().parents[2])

SPARK_DEFAULTS = {
    "spark.python.worker.reuse": "true",  # keeps task pairs and their broker clients across epochs
    "spark.ui.showConsoleProgress": "false",
    "spark.log.level": "WARN",
    "spark.task.maxFailures": "1",  # an epoch that fails is reported, not silently re-run
    "spark.speculation": "false",  # a second attempt of a pair must never run beside the first
    "spark.scheduler.mode": "FAIR",  # each connector's jobs in their own pool: independent epochs
    "spark.sql.shuffle.partitions": "1",
    # Python workers import PySpark from the environment, with its cached bytecode, not from the
    # zip Spark puts first on their path (see worker.runtime.pydaemon): 1.0 s off the first job.
    "spark.python.daemon.module": "worker.runtime.pydaemon",
    # Safe at no cost (README, Security): the UI's kill links are plain GETs a web page could
    # trigger; Spark's own redaction of its UI and event logs also covers credential-named keys.
    "spark.ui.killEnabled": "false",
    "spark.redaction.regex": r"(?i)secret|passw(or)?d|token|credential|jaas|access[._-]?key|api[._-]?key|private[._-]?key",
}

# In local mode nothing needs to be reachable from another host: the driver's RPC, block manager
# and UI listen on loopback only (the UI follows SPARK_LOCAL_IP, not spark.driver.bindAddress).
LOCAL_LOOPBACK = {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}


# In local mode the driver JVM is also the executor, and it only schedules: records never enter
# it. C1-only JIT and the serial collector cut its idle CPU from ~10 % to ~2 % of a core
# (measured: 1.15 s -> 0.20 s over 8 s), which the Python task pairs get instead.
LOCAL_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


# Shipped next to this module: the driver JVM's log configuration and its FAIR scheduler pools.
LOG4J2_FILE = Path(__file__).with_name("log4j2.properties")
FAIR_POOLS_FILE = Path(__file__).with_name("fairscheduler.xml")


def _with_driver_files(settings: dict[str, str]) -> None:
    """The shipped log configuration and pools, unless the settings name their own."""
    settings.setdefault("spark.scheduler.allocation.file", str(FAIR_POOLS_FILE))
    extra = settings.get("spark.driver.extraJavaOptions", "")
    if "log4j" not in extra:
        path = f'"{LOG4J2_FILE}"' if " " in str(LOG4J2_FILE) else str(LOG4J2_FILE)
        settings["spark.driver.extraJavaOptions"] = f"{extra} -Dlog4j2.configurationFile={path}".strip()


def default_master(total_task_pairs: int) -> str:
    """Local mode with a slot per task pair (pairs are I/O-bound), at least one per core."""
    return f"local[{max(total_task_pairs, os.cpu_count() or 1)}]"


class SparkApp:
    """The running Spark application. Task pairs run as plain RDD jobs, so only the SparkContext
    is needed: no SparkSession, whose SQL side took 2.5 of the ~6 s Spark start (measured with
    cProfile on `connect run`)."""

    def __init__(self, sc, archive: ClassArchive | None = None):
        self.sparkContext = sc
        self._archive = archive

    def stop(self) -> None:
        self.sparkContext.stop()
        if self._archive is not None and self._archive.recording:
            self._archive.publish(_end_gateway_jvm())


def _end_gateway_jvm(timeout_s: float = 120.0) -> int | None:
    """Ends the driver JVM now, as the driver's own exit would (it exits when its stdin closes),
    and waits for it: a JVM recording a class archive writes it as it exits. Its exit code."""
    from pyspark import SparkContext

    gateway, SparkContext._gateway, SparkContext._jvm = SparkContext._gateway, None, None
    proc = getattr(gateway, "proc", None)
    try:
        gateway.shutdown()
    except Exception:  # noqa: BLE001 - the JVM exits below either way
        pass
    if proc is None:
        return None
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        return proc.wait(timeout_s)
    except Exception:  # noqa: BLE001 - a JVM that does not exit in time: its archive is not taken
        return None


def build_spark(master: str, conf: Mapping[str, str] | None = None, app_name: str = "connect") -> SparkApp:
    """A Spark application whose driver JVM runs in a session of its own (an OS session).

    SIGTERM sent to the whole process group (systemd, most supervisors) must reach only the
    Python driver, which then ends the epoch, commits and stops Spark itself; the JVM (and its
    Python workers, which are its children) must not die first. PySpark already keeps SIGINT
    away from the JVM; a new session keeps every group signal away. The JVM still exits with the
    driver: it watches its stdin pipe.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    path = os.environ.get("PYTHONPATH", "")
    if _PROJECT_ROOT not in path.split(os.pathsep):  # a source checkout that was not pip-installed
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_PROJECT_ROOT, path) if p)
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    settings = dict(SPARK_DEFAULTS)
    if master.startswith("local"):
        settings["spark.driver.extraJavaOptions"] = LOCAL_DRIVER_JAVA_OPTIONS
        settings.update(LOCAL_LOOPBACK)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings.update(conf or {})
    _with_driver_files(settings)
    archive = ClassArchive.for_this_install() if SparkContext._gateway is None else None
    options = archive.java_options() if archive is not None else ""
    if options:
        extra = settings.get("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = f"{extra} {options}".strip()
    spark_conf = SparkConf(loadDefaults=False).setMaster(master).setAppName(app_name)
    for key, value in settings.items():
        spark_conf.set(key, value)
    try:
        if SparkContext._gateway is None:
            SparkContext._gateway = launch_gateway(spark_conf, popen_kwargs={"start_new_session": True})
            SparkContext._jvm = SparkContext._gateway.jvm
        sc = SparkContext.getOrCreate(spark_conf)
    except BaseException:
        if archive is not None:
            archive.publish(None)  # gives up its recording (and the lock), if it had one
        raise
    sc.setLogLevel(settings.get("spark.log.level", "WARN"))
    return SparkApp(sc, archive)


def start_spark(master: str, conf: Mapping[str, str] | None = None) -> Future:
    """:func:`build_spark` in a thread of its own: the JVM's start (about 3 s) then overlaps what
    the driver does meanwhile (starting connectors, checking and creating topics). PySpark
    installs its SIGINT handler only from the main thread, so none is installed here."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="spark-start")
    try:
        return pool.submit(build_spark, master, conf)
    finally:
        pool.shutdown(wait=False)


def control_host(spark) -> str:
    """Where executors reach the driver: loopback in local mode, else the driver's host."""
    sc = spark.sparkContext
    if sc.master.startswith("local"):
        return "127.0.0.1"
    return sc.getConf().get("spark.driver.host", "127.0.0.1")


class ClaimBook:
    """Driver side of claiming: per job, which pair each Spark task runs (see ``worker.runtime.partition``).

    Each pair is granted once per job. A task is offered, in this order: a pair cached fresh in
    its own process; a pair whose home (the process that ran it last, learnt from the results)
    is another process on the same host - the task then delegates the epoch there; pair
    ``index``; any pair not yet granted. ``moves`` counts epochs of a pair that ran in another
    process than its previous one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, tuple[list[str], set[str]]] = {}
        self._where: dict[str, tuple[str, int]] = {}  # pair -> (host, pid) that ran its last epoch
        self._homes: dict[tuple[str, int], list] = {}  # (host, pid) -> that process's delegation endpoint
        self.moves = 0
        self.grants = 0
        self.delegated = 0

    def open(self, job: str, pairs: list[str]) -> None:
        with self._lock:
            self._jobs[job] = (pairs, set())

    def close(self, job: str) -> None:
        with self._lock:
            self._jobs.pop(job, None)

    def claim(self, request: dict) -> dict | None:
        with self._lock:
            pairs, taken = self._jobs.get(request["job"], ([], set()))
            host = request.get("host", "")
            me = (host, request.get("pid", 0))
            if request.get("home"):
                self._homes[me] = request["home"]
            index = request.get("index", 0)
            fresh = [p for p in request.get("fresh", ()) if p in pairs]
            homes = {}
            for pair in pairs:
                where = self._where.get(pair)
                if where is not None and where[0] == host and where != me and where in self._homes:
                    homes[pair] = self._homes[where]
            for pair in [*fresh, *homes, *pairs[index:index + 1], *pairs]:
                if pair not in taken:
                    taken.add(pair)
                    self.grants += 1
                    home = None if pair in fresh else homes.get(pair)
                    self.delegated += home is not None
                    return {"pair": pair, "home": home}
            return None

    def ran(self, results: Sequence[EpochResult]) -> None:
        """Learn where each pair's runner lives now (the process that ran its epoch)."""
        with self._lock:
            for r in results:
                pair, where = pair_id(r.connector, r.task), (r.host, r.pid)
                if self._where.get(pair, where) != where:
                    self.moves += 1
                self._where[pair] = where


class SlotGate:
    """First come, first served admission of epochs to the application's task slots.

    Each connector submits its next epoch as soon as one ends, each in its own FAIR pool. When more
    task pairs want to run than there are slots, Spark's FAIR scheduler breaks the tie between
    pools that run nothing by pool name, so the connectors whose names sort last would hardly ever
    get a slot. The gate lets an epoch's job in only when its pairs fit in the free slots and every
    job that asked before it is in: a connector waits at most for the jobs queued ahead of it. A job
    wider than the application takes every slot."""

    WARN_AFTER_S = 1.0  # a connector that waited this long for slots is named in the log (once)

    def __init__(self, slots: Callable[[], int]):
        self._slots = slots
        self._cond = threading.Condition()
        self._used = 0
        self._queue: deque[object] = deque()
        self.waiting: dict[str, float] = {}  # connector -> since when (monotonic) its epoch waits for slots
        self.waited_s: dict[str, float] = {}  # connector -> seconds its epochs waited for slots, in all
        self._warned: set[str] = set()

    @contextmanager
    def admit(self, pairs: int, who: str = "") -> Iterator[None]:
        ticket = object()
        since = time.monotonic()
        with self._cond:
            self._queue.append(ticket)
            try:
                while True:
                    total = max(self._slots(), 1)
                    want = min(max(pairs, 1), total)
                    if self._queue[0] is ticket and self._used + want <= total:
                        break
                    self.waiting.setdefault(who, since)
                    if time.monotonic() - since > self.WARN_AFTER_S and who not in self._warned:
                        self._warned.add(who)
                        log.warning("connector %s waits for task slots: its %d pair(s) want slots while %d of %d are "
                                    "taken and %d epoch(s) queue ahead of it; with worker.pair.hosting=job every "
                                    "pair holds a slot for a whole epoch, so pairs beyond the slots take turns "
                                    "(raise worker.task.slots, or use worker.pair.hosting=shared)", who or "-",
                                    pairs, self._used, total, self._queue.index(ticket))
                    self._cond.wait(0.5)
            finally:  # admitted or not (an error, an interrupt), the ticket leaves the queue
                self._queue.remove(ticket)
                if self.waiting.get(who) == since:
                    del self.waiting[who]
                self.waited_s[who] = self.waited_s.get(who, 0.0) + time.monotonic() - since
                self._cond.notify_all()
            self._used += want
        try:
            yield
        finally:
            with self._cond:
                self._used -= want
                self._cond.notify_all()


HOSTING_MODES = ("shared", "job")


class SparkExecutor:
    """Runs the epochs of a connector's task pairs on Spark, in one of two ways (``hosting``):

    - ``shared`` (default): on long-lived host tasks that run many pairs each (:mod:`worker.runtime.hosting`);
      ``hosts`` caps how many (default: twice the application's cores, at most its slots);
    - ``job``: one Spark job per epoch, one partition per pair, each holding a slot for the epoch.
      Each connector's jobs are submitted from its own driver thread, in its own FAIR scheduler pool
      (``spark.scheduler.pool`` = the connector name), so connectors never wait for each other, except
      for free slots (:class:`SlotGate`). The partitions claim their pairs from the driver
      (:class:`ClaimBook`) over the control channel, which works in local mode and on a cluster alike.
    """

    def __init__(self, spark, hosting: str = "shared", hosts: int = 0):
        """``spark``: a :class:`SparkApp`, or a future of one still starting (see :func:`start_spark`)."""
        if hosting not in HOSTING_MODES:
            raise ValueError(f"worker.pair.hosting must be one of {', '.join(HOSTING_MODES)}, not {hosting!r}")
        self._spark = spark
        self.hosting = hosting
        self._hosts_wanted = hosts
        self.claims = ClaimBook()
        self.control: ControlAddress | None = None
        self._jobs = itertools.count()
        self.gate = SlotGate(self._slot_count)
        self._slots = (0, 0.0)  # (count, when read)
        self.pool: HostPool | None = None  # shared hosting: the Spark application's pool, from attach()

    def slot_waits(self) -> dict[str, float]:
        """Connector -> seconds its current epoch has waited for task slots so far (``job`` hosting)."""
        now = time.monotonic()
        return {who: now - since for who, since in list(self.gate.waiting.items())}

    def hosts(self) -> list[dict]:
        """The live hosts and their pairs (``shared`` hosting), else []."""
        return self.pool.hosts() if self.pool is not None else []

    def close(self) -> None:
        """Hosts end (their Spark jobs return) at their next request for work."""
        if self.pool is not None:
            self.pool, pool = None, self.pool
            pool.release()

    def _max_hosts(self) -> int:
        """``hosts`` if set, else twice the cores (local mode: this machine's; a cluster: its slots),
        at most the slots: more Python processes than that only add memory."""
        slots = self._slot_count()
        if self._hosts_wanted > 0:
            return min(self._hosts_wanted, slots)
        cores = os.cpu_count() or 1 if self.sc.master.startswith("local") else slots
        return max(1, min(slots, 2 * cores))

    def _slot_count(self) -> int:
        """The application's task slots (local[N]: N; a cluster: its executors' cores), read again every 5 s."""
        count, when = self._slots
        if time.monotonic() - when > 5.0:
            try:
                count = int(self.sc.defaultParallelism)
            except Exception:  # noqa: BLE001 - a py4j hiccup: keep the last count
                count = count or 1
            self._slots = (count, time.monotonic())
        return count

    @property
    def spark(self) -> SparkApp:
        if isinstance(self._spark, Future):
            self._spark = self._spark.result()
        return self._spark

    @property
    def sc(self):
        return self.spark.sparkContext

    def attach(self, server) -> None:
        """Serve claims on the driver's control channel."""
        server.register("claim", self.claims.claim)
        if self.hosting == "shared" and self.pool is None:
            self.pool = HostPool.acquire(self._spark, lambda: self.sc, server.address[0], self._max_hosts,
                                         tls=server.tls)
        self.control = server.address

    def run(self, specs: Sequence[TaskPairSpec], description: str = "epoch", pool: str | None = None
            ) -> list[EpochResult]:
        if self.control is None:
            raise RuntimeError("SparkExecutor.attach(control server) must be called before run()")
        specs = list(specs)
        if self.pool is not None:
            return self.pool.run(specs, self.control)
        job = JobContext(self.control, f"job-{next(self._jobs)}")
        sc = self.sc
        sc.setLocalProperty("spark.scheduler.pool", pool or "default")
        sc.setJobDescription(f"connect {description}: {len(specs)} task pair(s)")
        with self.gate.admit(len(specs), pool or ""):
            self.claims.open(job.job, [pair_id(s.connector, s.task) for s in specs])
            try:
                results = (sc.parallelize(range(len(specs)), len(specs))
                           .map(lambda i: run_claimed_epoch(i, specs, job)).collect())
                self.claims.ran(results)
                return results
            finally:
                self.claims.close(job.job)
