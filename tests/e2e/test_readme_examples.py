"""The documented shell examples, run as printed against the shipped configs (issue 22: the
"Replicators" example answered `error 400: $.authPlugin: 'directory' is not a config provider of
this worker` with the shipped conf/worker.json, and nothing ran it).

Every ```sh / ```bash block of the README and of docs/ is in one of the sections of
``readme_util.SHELL_SECTIONS`` (asserted): the README's opening (its `make` lines are run by
test_readme_commands.py), its "A first mirror in five minutes", and docs/operations.md's "Running a
connector" and "Running the worker service" and docs/replication.md's "Replicators (PIP-18
onboarding)". Each line of those blocks is run, in page order, as a process (`connect` and `python`
of this installation), from a directory holding the shipped `conf/` (a symlink to the repository's,
so the relative paths `conf/...`, `data` and conf/worker.json's `data/worker/...` resolve as for a
user in a fresh clone).

The first mirror runs against the brokers its own `connect dev brokers kafka kafka` line starts: the
`export` line is checked to name the variables that line printed, and sets them to what it printed
(what a user pastes). The other sections run against embedded brokers: two tansu (source, target)
and one pulsar-lite. What is set around their lines, never in them:

- SOURCE_BOOTSTRAP / TARGET_BOOTSTRAP, the variables conf/demo-mirror.json reads, name the tansu
  brokers (the worker resolves them through conf/worker.json's fenced `env` provider);
- CONNECT_URL, the CLI's documented variable, names the worker;
- records for the examples to move: a `demo.*` topic per section in the source tansu, and the
  replicator example's namespace topics in pulsar-lite;
- state a line needs that the lines before it did not leave (the two `create` lines are
  alternatives, so the connector is deleted before the second; `delete` comes before `restart`,
  so the connector is created again), set through the REST API and said in ``STEPS``.

What does not run as printed is in ``SUBSTITUTED`` and ``SKIPPED``, with the reason; every other
line runs exactly as printed (`pause|resume|stop|delete NAME` is four commands, in that order),
and must exit 0 and have the effect the README claims (``STEPS``).
Long-running lines (`connect run`, `connect worker start`, `status --watch`) run in the background
and are stopped with SIGTERM (SIGINT for `--watch`: "Refresh until Ctrl-C") once their effect is
seen; they must then exit 0. A README line this module does not know fails the test.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx
import pulsar_util
import pytest
from confluent_kafka.admin import AdminClient
from kafka_util import create_topic, produce
from readme_util import FIRST_MIRROR, OPENING, REPLICATORS, ROOT, RUNNING, SHELL_SECTIONS, WORKER, argv_variants, shell_blocks
from service_util import Arrivals, wait_for

from worker.api.restcli_client import DEFAULT_URL
from worker.embedded import EmbeddedKafka, EmbeddedPulsar, free_port

pytestmark = pytest.mark.timeout(300)

CONNECTOR = RUNNING

# printed text -> (what runs instead, why). Applied to the README line as text, before it is split.
SUBSTITUTED = {
    "connect worker start --config conf/worker.json": (
        "connect worker start --config conf/worker.json --port {port}",
        "conf/worker.json's port 8083 may be taken on a shared machine: a free port (`--port`, which the "
        "worker settings table names), and CONNECT_URL pointing at it for the CLI lines"),
    "pulsar://west:6650": ("{pulsar}", "placeholder host: the embedded pulsar-lite"),
    '"east:9092"': ('"{target}"', "placeholder host: the embedded target tansu"),
}
# text of a README line -> why the line is not run
SKIPPED = {
    ". .venv/bin/activate": (
        "the test runs this installation's `connect` and `python`: their directory is first on PATH"),
    "--master spark://host:7077": (
        "a Spark cluster at a placeholder host, placeholder files a.json b.json; `connect run` is run by the "
        "line above it, and on a standalone cluster by tests/e2e/test_cluster.py"),
}

CALLER_SETTINGS = {"CONNECT_URL", "CONNECT_TOKEN", "CONNECT_USER", "CONNECT_PASSWORD", "CONNECT_DATA_DIR",
                   "CONNECT_CLIENT_CONFIG_POLICY", "CONNECT_CLIENT_ALLOWED_PATHS", "CONNECT_CLIENT_ALLOWED_KEYS"}
DEMO_MIRROR = json.loads((ROOT / "conf" / "demo-mirror.json").read_text())
NAME = DEMO_MIRROR["name"]
RUN_TOPIC, WORKER_TOPIC = "demo.readme-run", "demo.readme-worker"  # matched by its source.topics.regex (asserted)
RID = "kafka.us-east.tenant_ns"  # the id `replicators add tenant/ns --type kafka --region us-east` gives
RECORDS = 500
FIRST_TOPIC = "demo.orders"  # the topic the first mirror's `python -c` line writes to (asserted)


# --- running README lines ---------------------------------------------------------------------------

@dataclass
class Session:
    cwd: Path
    env: dict[str, str]
    source: EmbeddedKafka | Address | None
    target: EmbeddedKafka | Address | None
    pulsar: EmbeddedPulsar | None
    port: int
    rest: httpx.Client | None
    background: list[subprocess.Popen] = field(default_factory=list)
    worker: subprocess.Popen | None = None
    run_topic: str = RUN_TOPIC  # the topic `connect run` is watched mirroring, and how many records, in how many partitions
    records: int = RECORDS
    partitions: int = 2
    printed: dict[str, str] = field(default_factory=dict)  # what `connect dev brokers` printed to export

    def run(self, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
        result = subprocess.run(argv, cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=timeout)
        assert result.returncode == 0, (f"README command failed ({result.returncode}): {' '.join(argv)}\n"
                                        f"{result.stdout}{result.stderr}{self.worker_log()}")
        return result

    def start(self, argv: list[str], log: str) -> tuple[subprocess.Popen, Path]:
        path = self.cwd / log
        with open(path, "wb") as out:
            proc = subprocess.Popen(argv, cwd=self.cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.background.append(proc)
        return proc, path

    def stop(self, proc: subprocess.Popen, sig: int, path: Path, timeout: float = 60) -> str:
        proc.send_signal(sig)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{proc.args} did not exit within {timeout} s of {sig!r}:\n"
                                 f"{path.read_text()[-3000:]}") from None
        output = path.read_text()
        assert code == 0, f"{proc.args} exited {code} after {sig!r}:\n{output[-3000:]}"
        return output

    def worker_log(self) -> str:
        log = self.cwd / "worker.log"
        return f"\n--- worker log (tail) ---\n{log.read_text()[-3000:]}" if log.exists() else ""

    def state(self, name: str = NAME) -> str | None:
        response = self.rest.get(f"/connectors/{name}/status")
        return None if response.status_code == 404 else response.json()["connector"]["state"]

    def wait_state(self, state: str | None, name: str = NAME) -> None:
        wait_for(lambda: self.state(name) == state, 60, f"{name} {state or 'deleted'}")

    def ensure_absent(self) -> None:
        if self.state() is not None:
            assert self.rest.delete(f"/connectors/{NAME}").status_code == 204
            self.wait_state(None)

    def ensure_present(self) -> None:
        if self.state() is None:
            assert self.rest.post("/connectors", json=DEMO_MIRROR).status_code == 201
            self.wait_state("RUNNING")


@dataclass(frozen=True)
class Address:
    """A broker `connect dev brokers` started: only its address is known."""
    bootstrap: str


def _commands(where: tuple[str, str]) -> list[str]:
    """The commands of every shell block of a (page, section), in page order."""
    found = [b for b in shell_blocks() if b.where == where]
    assert found, f"no shell block in {where}"
    return [c for b in found for c in b.commands()]


def _printed(where: tuple[str, str], key: tuple[str, ...]) -> list[str]:
    """The argv of the line of ``where`` that runs ``key`` (as printed)."""
    [argv] = [argv for c in _commands(where) for argv in argv_variants(c) if _key(argv) == key]
    return argv


def _option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _mirrored(topic: str) -> str:
    """Where conf/demo-mirror.json puts a source topic."""
    assert re.fullmatch(DEMO_MIRROR["config"]["source.topics.regex"], topic), topic
    return DEMO_MIRROR["config"]["sink.topic.template"].format(topic=topic)


def _substitute(command: str, session: Session) -> str:
    for printed, (replacement, _why) in SUBSTITUTED.items():
        if printed in command:
            command = command.replace(printed, replacement.format(port=session.port, pulsar=session.pulsar.service_url,
                                                                  target=session.target.bootstrap))
    return command


def _key(argv: list[str]) -> tuple[str, ...]:
    """``("connectors", "create")`` for ``connect connectors create ...``; ``("run",)`` for ``connect run ...``;
    ``("export",)`` and ``("python",)`` for those."""
    if argv[0] in ("export", "python"):
        return (argv[0],)
    assert argv[0] == "connect", f"a documented example that is not `connect`, `export` or `python`: {argv}"
    return tuple(argv[1:3]) if argv[1] in ("worker", "connectors", "replicators", "dev") else (argv[1],)


def run_section(where: tuple[str, str], session: Session) -> None:
    for command in _commands(where):
        if any(marker in command for marker in SKIPPED):
            continue
        for argv in argv_variants(_substitute(command, session)):
            step = STEPS.get(_key(argv))
            assert step is not None, f"README line not run by this test (add it to STEPS): {command}"
            step(session, argv)


def _table_rows(output: str) -> list[list[str]]:
    lines = [line.replace("┃", "│") for line in output.splitlines()]
    return [[cell.strip() for cell in line.split("│") if cell.strip()] for line in lines if "│" in line]


# --- what each README line must do ------------------------------------------------------------------

def validate(s: Session, argv):
    out = s.run(argv).stdout
    assert f"{NAME}: OK (KafkaSourceConnector -> KafkaSinkConnector" in out, out


def _topic_partitions(bootstrap: str, topic: str) -> int:
    """How many partitions ``topic`` has (0: it does not exist yet)."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics.get(topic)
    return 0 if metadata is None or metadata.error is not None else len(metadata.partitions)


def standalone_run(s: Session, argv):
    """Runs until SIGTERM: the records of a demo.* topic arrive under mirror.<topic> (which the sink creates
    if it is missing); SIGTERM commits and exits 0."""
    target = _mirrored(s.run_topic)
    arrivals: list[Arrivals] = []

    def arrived() -> int:
        if not arrivals:
            if _topic_partitions(s.target.bootstrap, target) < s.partitions:
                return 0
            arrivals.append(Arrivals(s.target.bootstrap, target, partitions=s.partitions))
        return arrivals[0].count()

    proc, log = s.start(argv, "run.log")
    try:
        wait_for(lambda: proc.poll() is None and arrived() >= s.records, 120, f"`connect run` mirroring {s.run_topic}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}:\n{log.read_text()[-3000:]}") from None
    finally:
        for a in arrivals:
            a.close()
    output = s.stop(proc, signal.SIGTERM, log)
    assert "stopped: the last epoch is committed" in output, output[-3000:]
    assert (s.cwd / "data" / "offsets.sqlite").exists()  # --data-dir data, relative to where it runs


def local_plugins(s: Session, argv):
    out = s.run(argv).stdout
    assert all(f"{name} " in out for name in ("kafka-source", "kafka-sink", "pulsar-source", "rocketmq-sink")), out


def dev_brokers(s: Session, argv):
    """Runs until Ctrl-C (stopped with SIGINT at the end of the test): two reachable brokers, each line
    with the `export` a user pastes: SOURCE_BOOTSTRAP, then TARGET_BOOTSTRAP."""
    proc, log = s.start(argv, "dev-brokers.log")
    wait_for(lambda: proc.poll() is None and len(_exports(log.read_text())) == 2, 120,
             f"`connect dev brokers` printing two exports:\n{log.read_text()}")
    s.printed = dict(_exports(log.read_text()))
    assert list(s.printed) == ["SOURCE_BOOTSTRAP", "TARGET_BOOTSTRAP"], s.printed
    s.source, s.target = Address(s.printed["SOURCE_BOOTSTRAP"]), Address(s.printed["TARGET_BOOTSTRAP"])


def _exports(output: str) -> list[tuple[str, str]]:
    return re.findall(r"\bexport (\w+)=(\S+)", output)


def export(s: Session, argv):
    """The line to paste: it must name the variables `connect dev brokers` printed, in order; the values
    are what it printed (the documented line has placeholders)."""
    names = [word.split("=", 1)[0] for word in argv[1:]]
    assert names == list(s.printed), f"the export line names {names}, `connect dev brokers` printed {list(s.printed)}"
    s.env.update(s.printed)


def python_line(s: Session, argv):
    """The first mirror's records: `python -c` writes range(N) records to demo.orders in the source."""
    code = argv[-1]
    assert f"'{FIRST_TOPIC}'" in code, code
    s.run_topic, s.records = FIRST_TOPIC, int(re.search(r"range\((\d+)\)", code).group(1))
    s.run(argv)
    s.partitions = _topic_partitions(s.source.bootstrap, FIRST_TOPIC)
    written = Arrivals(s.source.bootstrap, FIRST_TOPIC, partitions=s.partitions)
    try:
        wait_for(lambda: written.count() >= s.records, 30, f"{s.records} records in {FIRST_TOPIC}")
    finally:
        written.close()


def worker_start(s: Session, argv):
    """Stays up for the lines after it (the replicators' too); stopped with SIGTERM at the end."""
    s.worker, _ = s.start(argv, "worker.log")
    wait_for(lambda: s.worker.poll() is None and _healthy(s), 120, f"the worker healthy\n{s.worker_log()}")


def _healthy(s: Session) -> bool:
    try:
        return s.rest.get("/health").status_code == 200
    except httpx.HTTPError:
        return False


def create(s: Session, argv):
    s.ensure_absent()  # the two `create` lines are alternatives
    out = s.run(argv).stdout
    if "--state" in argv:
        state = argv[argv.index("--state") + 1]
        assert out.strip() == f"created connector {NAME} (source, tasks starting, initial state {state})", out
        s.wait_state(state)
        return
    assert out.strip() == f"created connector {NAME} (source, tasks starting)", out
    arrivals = Arrivals(s.target.bootstrap, _mirrored(WORKER_TOPIC))
    try:
        wait_for(lambda: arrivals.count() >= RECORDS, 90, f"{NAME} mirroring {WORKER_TOPIC}\n{s.worker_log()}")
    finally:
        arrivals.close()


def list_connectors(s: Session, argv):
    out = s.run(argv).stdout
    assert [NAME, s.state()] in [row[:2] for row in _table_rows(out)], out


def status_watch(s: Session, argv):
    """Refreshes until Ctrl-C (SIGINT), then exits 0; not a terminal: one snapshot after the other."""
    proc, log = s.start(argv, "status.log")
    wait_for(lambda: log.read_text().count(f"{NAME} (source)") >= 2, 30, f"two refreshes of status --watch\n{log}")
    output = s.stop(proc, signal.SIGINT, log, timeout=10)
    assert any(row[:2] == ["connector", s.state()] for row in _table_rows(output)), output


def state_change(s: Session, argv):
    verb = argv[2]
    out = s.run(argv).stdout.strip()
    if verb == "delete":
        assert out == f"deleted {NAME}", out
        s.wait_state(None)
        return
    assert out == f"{verb} requested for {NAME}", out
    s.wait_state({"pause": "PAUSED", "resume": "RUNNING", "stop": "STOPPED"}[verb])


def restart(s: Session, argv):
    s.ensure_present()  # the line before deleted it
    out = s.run(argv).stdout
    assert out.startswith(f"restart requested for {NAME}"), out


def update(s: Session, argv):
    out = s.run(argv).stdout
    assert out.startswith(f"updated connector {NAME} (source, "), out
    s.wait_state("RUNNING")


def offsets(s: Session, argv):
    """The offsets committed by the first `create` are kept across `delete` (as the README says)."""
    out = s.run(argv).stdout
    rows = [row for row in _table_rows(out) if WORKER_TOPIC in row[0]]
    assert len(rows) == 2, out  # both partitions


def worker_plugins(s: Session, argv):
    out = s.run(argv).stdout
    assert ["connectors.kafka.source.KafkaSourceConnector", "source"] in [row[:2] for row in _table_rows(out)], out


def replicators_add(s: Session, argv):
    """The issue's example: `--auth-plugin directory` against the shipped conf/worker.json. The credential
    goes to the keystore (data/worker/keystore, 0600), and both mapped topics are replicated."""
    out = s.run(argv).stdout
    assert out.splitlines()[0] == f"added replicator {RID}: 2 connector(s)", out
    [(key, value)] = json.loads(_option(argv, "--auth-param")).items()
    secret = s.cwd / "data" / "worker" / "keystore" / RID / key
    assert secret.read_text() == value and stat.S_IMODE(secret.stat().st_mode) == 0o600
    mapping = json.loads(_option(argv, "--topic-mapping"))
    arrivals = {target: Arrivals(s.target.bootstrap, target, partitions=1) for target in mapping.values()}
    try:
        wait_for(lambda: all(a.count() >= RECORDS for a in arrivals.values()), 90,
                 f"every mapped topic replicated from Pulsar\n{s.worker_log()}")
    finally:
        for a in arrivals.values():
            a.close()


def replicators_list(s: Session, argv):
    rows = _table_rows(s.run(argv).stdout)
    assert [RID, "tenant/ns", "kafka", "us-east", "orders", "RUNNING"] in rows, rows
    assert [RID, "tenant/ns", "kafka", "us-east", "payments", "RUNNING"] in rows, rows


def replicators_stop(s: Session, argv):
    rid, topic = argv[3:5]
    out = s.run(argv).stdout
    assert out.startswith(f"stop requested for {topic} of {rid}"), out
    s.wait_state("STOPPED", name=f"{rid}.{topic}")


def replicators_stats(s: Session, argv):
    rows = {row[0]: row for row in _table_rows(s.run(argv).stdout)}
    assert rows["orders"][1] == "STOPPED" and rows["payments"][1] == "RUNNING", rows


def replicators_remove(s: Session, argv):
    rid = argv[3]
    assert s.run(argv).stdout.strip() == f"removed replicator {rid}"
    assert not (s.cwd / "data" / "worker" / "keystore" / rid).exists()  # its credentials went with it
    assert s.rest.get("/replicators").json() == []
    assert s.run(["connect", "replicators", "list"]).stdout.strip() == "no replicators"


STEPS: dict[tuple[str, ...], Callable[[Session, list[str]], None]] = {
    ("validate",): validate, ("run",): standalone_run, ("plugins",): local_plugins,
    ("dev", "brokers"): dev_brokers, ("export",): export, ("python",): python_line,
    ("worker", "start"): worker_start,
    ("connectors", "create"): create, ("connectors", "list"): list_connectors, ("connectors", "status"): status_watch,
    ("connectors", "pause"): state_change, ("connectors", "resume"): state_change,
    ("connectors", "stop"): state_change, ("connectors", "delete"): state_change,
    ("connectors", "restart"): restart, ("connectors", "update"): update, ("connectors", "offsets"): offsets,
    ("connectors", "plugins"): worker_plugins,
    ("replicators", "add"): replicators_add, ("replicators", "list"): replicators_list,
    ("replicators", "stop"): replicators_stop, ("replicators", "stats"): replicators_stats,
    ("replicators", "remove"): replicators_remove,
}


# --- tests ----------------------------------------------------------------------------------------

def test_every_readme_shell_block_is_run():
    """No shell example of the README or docs/ escapes the suite: each block is in one of the sections
    this module runs (or the opening), each of those has one; every substitution and skip still matches
    a line; every line has a step."""
    blocks = shell_blocks()
    stray = [(b.page, b.line, b.section) for b in blocks if b.where not in SHELL_SECTIONS]
    assert not stray, f"shell blocks in sections no test runs (run them here): {stray}"
    assert {b.where for b in blocks} == set(SHELL_SECTIONS)
    commands = [c for b in blocks if b.where != OPENING for c in b.commands()]
    for marker in [*SUBSTITUTED, *SKIPPED]:
        assert sum(marker in c for c in commands) == 1, f"{marker!r} is in no README line, or in several"
    for command in commands:
        if not any(marker in command for marker in SKIPPED):
            for argv in argv_variants(command):
                assert _key(argv) in STEPS, f"README line not run by this test (add it to STEPS): {command}"


def test_the_worker_line_says_what_conf_worker_json_sets():
    """Its comment ("REST on 127.0.0.1:8083, stores in data/worker") is what the shipped file sets (the
    run above substitutes the port), and the CLI's default --url reaches that worker without CONNECT_URL."""
    [line] = [c for c in _commands(WORKER) if _key(argv_variants(c)[0]) == ("worker", "start")]
    host, port, data_dir = re.search(r"# REST on ([\d.]+):(\d+), stores in (\S+)$", line).groups()
    conf = json.loads((ROOT / "conf" / "worker.json").read_text())
    assert (conf["rest.host"], conf["rest.port"], conf["data.dir"]) == (host, int(port), data_dir)
    assert DEFAULT_URL == f"http://{host}:{port}"


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    logs = tmp_path_factory.mktemp("readme-brokers")
    source = EmbeddedKafka(log_path=logs / "source.log").start()
    target = EmbeddedKafka(log_path=logs / "target.log").start()
    pulsar = EmbeddedPulsar(logs / "pulsar", log_path=logs / "pulsar.log").start()
    yield source, target, pulsar
    for broker in (source, target, pulsar):
        broker.stop()


@pytest.fixture(scope="module")
def session(brokers, tmp_path_factory):
    """One directory for both tests, as one clone for a user following the README."""
    source, target, pulsar = brokers
    tmp_path = _clone(tmp_path_factory.mktemp("clone"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = _user_env(tmp_path, SOURCE_BOOTSTRAP=source.bootstrap, TARGET_BOOTSTRAP=target.bootstrap, CONNECT_URL=url)
    with httpx.Client(base_url=url, timeout=30) as rest:
        s = Session(tmp_path, env, source, target, pulsar, port, rest)
        yield s
        for proc in s.background:  # a failed test leaves them running: end them (they are in their own sessions)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def _clone(tmp_path: Path) -> Path:
    """A directory as a fresh clone has it for these lines: the shipped conf/."""
    (tmp_path / "conf").symlink_to(ROOT / "conf")
    return tmp_path


def _user_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    # the caller's CLI and broker settings would change what the lines do (CONNECT_CACHE_DIR... may stay)
    keep = {k: v for k, v in os.environ.items() if k not in CALLER_SETTINGS and not k.startswith(("SOURCE_", "TARGET_"))}
    return {**keep, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{keep.get('PATH', '')}", "TMPDIR": str(tmp_path),
            "NO_COLOR": "1", "COLUMNS": "200", **settings}


def test_first_mirror_examples(tmp_path):
    """The README's five-minute path, against the brokers its own `connect dev brokers` line starts."""
    s = Session(_clone(tmp_path), _user_env(tmp_path), None, None, None, 0, None)
    try:
        run_section(FIRST_MIRROR, s)
        [brokers] = [p for p in s.background if p.args[1:3] == ["dev", "brokers"]]
        s.stop(brokers, signal.SIGINT, s.cwd / "dev-brokers.log")  # "runs until Ctrl-C"
    finally:
        for proc in s.background:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def test_running_a_connector_examples(session):
    create_topic(session.source.bootstrap, RUN_TOPIC, 2)
    create_topic(session.target.bootstrap, _mirrored(RUN_TOPIC), 2)
    produce(session.source.bootstrap, RUN_TOPIC, RECORDS, 2)
    run_section(CONNECTOR, session)


def test_worker_service_and_replicator_examples(session):
    s = session
    create_topic(s.source.bootstrap, WORKER_TOPIC, 2)
    create_topic(s.target.bootstrap, _mirrored(WORKER_TOPIC), 2)
    produce(s.source.bootstrap, WORKER_TOPIC, RECORDS, 2)
    # the replicator example's namespace and mapped topics: Pulsar topics with records (a Pulsar source
    # reads persistent://<namespace>/<topic>), and their Kafka targets
    add = _printed(REPLICATORS, ("replicators", "add"))
    for topic, target in json.loads(_option(add, "--topic-mapping")).items():
        pulsar_util.produce(s.pulsar, f"persistent://{add[3]}/{topic}", RECORDS, 0)
        create_topic(s.target.bootstrap, target, 1)
    run_section(WORKER, s)
    run_section(REPLICATORS, s)
    s.stop(s.worker, signal.SIGTERM, s.cwd / "worker.log")
