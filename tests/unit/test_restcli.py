"""``connect connectors ...`` (worker.api.restcli) against a small in-memory REST worker served over real HTTP."""

from __future__ import annotations

import base64
import json
import re
import shutil
import socket
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from typer.testing import CliRunner

from worker.api.restcli import app
from worker.api.restcli_status import parse_prometheus
from worker.cli import app as cli_app

runner = CliRunner()


# --- the fake worker ----------------------------------------------------------------------------

class FakeWorker:
    """Kafka Connect's REST contract, in memory; records every request it gets."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.connectors: dict[str, dict] = {}
        self.replicators: list[dict] = []
        self.requests: list[dict] = []
        self.auth: tuple | None = None  # ("bearer", token) or ("basic", user, password)
        self.metrics_status = 200
        self.scrapes = 0
        self.fail_with: tuple[int, str, str] | None = None  # (status, content type, body) for every request
        self.plugins = [{"class": "kafka-source", "type": "source", "version": "0.1.0"},
                        {"class": "pulsar-sink", "type": "sink", "version": "0.1.0"}]

    def add(self, name: str, state: str = "RUNNING", tasks: list[str] | None = None, traces: dict | None = None,
            type_: str = "source", offsets: list | None = None) -> None:
        self.connectors[name] = {"config": {"connector.class": "kafka-source", "tasks.max": str(len(tasks or []))},
                                 "state": state, "tasks": list(tasks or []), "traces": dict(traces or {}),
                                 "type": type_, "offsets": offsets or []}

    # -- answers

    def status(self, name: str) -> dict:
        c = self.connectors[name]
        tasks = []
        for i, state in enumerate(c["tasks"]):
            task = {"id": i, "state": state, "worker_id": f"127.0.0.1:{8083 + i}"}
            if i in c["traces"]:
                task["trace"] = c["traces"][i]
            tasks.append(task)
        return {"name": name, "connector": {"state": c["state"], "worker_id": "127.0.0.1:8083"}, "tasks": tasks,
                "type": c["type"]}

    def info(self, name: str) -> dict:
        c = self.connectors[name]
        return {"name": name, "config": dict(c["config"], name=name),
                "tasks": [{"connector": name, "task": i} for i in range(len(c["tasks"]))], "type": c["type"]}

    def metrics(self) -> str:
        self.scrapes += 1
        lines = ["# HELP connect_records_polled_total Records polled.", "# TYPE connect_records_polled_total counter"]
        for name, c in sorted(self.connectors.items()):
            for i in range(len(c["tasks"])):
                lines.append(f'connect_records_polled_total{{connector="{name}",task="{i}"}} {10.0 * self.scrapes}')
                lines.append(f'connect_records_polled_created{{connector="{name}",task="{i}"}} 1.7e9')
                lines.append(f'connect_records_acknowledged_total{{connector="{name}",task="{i}"}} {8.0 * self.scrapes}')
                lines.append(f'connect_records_committed_total{{connector="{name}",task="{i}"}} {6.0 * self.scrapes}')
                if i == 0:  # only task 0 reports a lag: the others must show "-"
                    lines.append(f'connect_source_lag_records{{connector="{name}",task="{i}"}} 5')
        return "\n".join(lines) + "\n"

    def validate(self, config) -> str | None:
        if not isinstance(config, dict):
            return "config: must be an object"
        for key, value in config.items():
            if not isinstance(value, str):
                return f"config.{key}: must be a string"
        if not config.get("tasks.max", "1").isdigit():
            return f"config.tasks.max: must be an integer, got {config['tasks.max']!r}"
        return None

    def create(self, name: str, config: dict, state: str = "RUNNING") -> None:
        self.add(name, state, ["RUNNING"] * int(config.get("tasks.max", "1")), type_="source")
        self.connectors[name]["config"] = dict(config)

    def handle(self, method: str, path: str, query: dict, headers: dict, body) -> tuple[int, object]:
        if self.auth:
            expected = (f"Bearer {self.auth[1]}" if self.auth[0] == "bearer" else
                        "Basic " + base64.b64encode(f"{self.auth[1]}:{self.auth[2]}".encode()).decode())
            if headers.get("authorization") != expected:
                return 401, {"error_code": 401, "message": "Unauthorized: credentials required"}
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts == ["connectors"] and method == "GET":
            if "expand" in query:
                return 200, {n: {"status": self.status(n), "info": self.info(n)} for n in self.connectors}
            return 200, sorted(self.connectors)
        if parts == ["connectors"] and method == "POST":
            if not isinstance(body, dict) or not isinstance(body.get("name"), str):
                return 400, {"error_code": 400, "message": "name: required"}
            problem = self.validate(body.get("config"))
            if problem:
                return 400, {"error_code": 400, "message": problem}
            if body["name"] in self.connectors:
                return 409, {"error_code": 409, "message": f"Connector {body['name']} already exists"}
            self.create(body["name"], body["config"], body.get("initial_state", "RUNNING"))
            return 201, {**self.info(body["name"]), "tasks": []}  # as the worker: its tasks start a moment later
        if parts == ["replicators"] and method == "GET":
            return 200, self.replicators
        if parts == ["connector-plugins"] and method == "GET":
            return 200, self.plugins
        if parts == ["metrics"] and method == "GET":
            return self.metrics_status, self.metrics() if self.metrics_status == 200 else "metrics are off"
        if len(parts) >= 2 and parts[0] == "connectors":
            name, rest = parts[1], parts[2:]
            if method == "PUT" and rest == ["config"]:
                problem = self.validate(body)
                if problem:
                    return 400, {"error_code": 400, "message": problem}
                created = name not in self.connectors
                if created:
                    self.create(name, body)
                else:
                    self.connectors[name]["config"] = dict(body)
                return (201, {**self.info(name), "tasks": []}) if created else (200, self.info(name))
            if name not in self.connectors:
                return 404, {"error_code": 404, "message": f"Connector {name} not found"}
            c = self.connectors[name]
            if method == "GET" and rest == ["status"]:
                return 200, self.status(name)
            if method == "GET" and rest == ["offsets"]:
                return 200, {"offsets": c["offsets"]}
            if method == "PUT" and len(rest) == 1 and rest[0] in ("pause", "resume", "stop"):
                c["state"] = {"pause": "PAUSED", "resume": "RUNNING", "stop": "STOPPED"}[rest[0]]
                return 202, None
            if method == "POST" and rest == ["restart"]:
                if query.get("includeTasks") == ["true"] or query.get("onlyFailed") == ["true"]:
                    status = self.status(name)
                    status["connector"]["state"] = "RESTARTING"
                    for task in status["tasks"]:
                        if query.get("onlyFailed") != ["true"] or task["state"] == "FAILED":
                            task["state"] = "RESTARTING"
                    return 202, status
                return 204, None
            if method == "DELETE" and not rest:
                del self.connectors[name]
                return 204, None
        return 404, {"error_code": 404, "message": f"no such endpoint: {method} {path}"}


def _handler(worker: FakeWorker):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def _serve(self) -> None:
            url = urlsplit(self.path)
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.loads(raw) if raw else None
            headers = {k.lower(): v for k, v in self.headers.items()}
            query = parse_qs(url.query)
            worker.requests.append({"method": self.command, "path": url.path, "query": query, "headers": headers, "body": body})
            if worker.fail_with:
                status, ctype, payload = worker.fail_with
                self._send(status, ctype, payload.encode())
                return
            status, answer = worker.handle(self.command, url.path, query, headers, body)
            if status == 204 or answer is None:
                self._send(status, "application/json", b"")
            elif isinstance(answer, str):
                self._send(status, "text/plain; version=0.0.4", answer.encode())
            else:
                self._send(status, "application/json", json.dumps(answer).encode())

        def _send(self, status: int, ctype: str, payload: bytes) -> None:
            self.send_response(status)
            if status != 204:
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if status != 204:
                self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_DELETE = _serve

    return Handler


@pytest.fixture(scope="module")
def server():
    worker = FakeWorker()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(worker))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    worker.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield worker
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def worker(server):
    server.reset()
    return server


CLEAN_ENV = {"CONNECT_TOKEN": None, "CONNECT_USER": None, "CONNECT_PASSWORD": None, "FORCE_COLOR": None,
             "TTY_COMPATIBLE": None, "NO_COLOR": "1", "COLUMNS": "200"}


def cli(worker: FakeWorker, *args: str, env: dict | None = None):
    return runner.invoke(app, list(args), env={**CLEAN_ENV, "CONNECT_URL": worker.url, **(env or {})})


def table_rows(output: str) -> list[list[str]]:
    """The cells of every rich table row in ``output``."""
    lines = [line.replace("┃", "│") for line in output.splitlines()]  # the header row has heavy bars
    return [[cell.strip() for cell in line.split("│")] for line in lines if "│" in line]


def write(tmp_path, text: str, name: str = "conn.json"):
    path = tmp_path / name
    path.write_text(text)
    return path


GOOD = {"name": "orders", "config": {"connector.class": "kafka-source", "tasks.max": "2", "kafka.password": "hunter2"}}


# --- create / update ----------------------------------------------------------------------------

def test_create_sends_name_config_and_initial_state(worker, tmp_path):
    path = write(tmp_path, json.dumps(GOOD))
    result = cli(worker, "create", str(path), "--state", "paused")
    assert result.exit_code == 0, result.output
    assert "created connector orders (source, tasks starting, initial state PAUSED)" in result.stdout
    [req] = worker.requests
    assert (req["method"], req["path"]) == ("POST", "/connectors")
    assert req["body"] == {**GOOD, "initial_state": "PAUSED"}
    assert worker.connectors["orders"]["state"] == "PAUSED"
    assert "hunter2" not in result.output  # the body is never echoed


def test_create_without_state_sends_no_initial_state(worker, tmp_path):
    result = cli(worker, "create", str(write(tmp_path, json.dumps(GOOD))))
    assert result.exit_code == 0, result.output
    assert worker.requests[0]["body"] == GOOD
    # the answer lists no tasks yet (issue 22: "0 tasks" read as a connector that would run none)
    assert "created connector orders (source, tasks starting)" in result.stdout
    assert "0 tasks" not in result.stdout


def test_create_stopped_says_no_tasks_until_resumed(worker, tmp_path):
    result = cli(worker, "create", str(write(tmp_path, json.dumps(GOOD))), "--state", "STOPPED")
    assert result.exit_code == 0, result.output
    assert "created connector orders (source, no tasks until resumed, initial state STOPPED)" in result.stdout


def test_create_conflict_prints_the_workers_error(worker, tmp_path):
    worker.add("orders", tasks=["RUNNING"])
    result = cli(worker, "create", str(write(tmp_path, json.dumps(GOOD))))
    assert result.exit_code == 1
    assert "error 409: Connector orders already exists" in result.stderr


def test_create_bad_state_is_usage_error(worker, tmp_path):
    result = cli(worker, "create", str(write(tmp_path, json.dumps(GOOD))), "--state", "SLEEPING")
    assert result.exit_code == 2
    assert "SLEEPING" in result.stderr
    assert worker.requests == []


@pytest.mark.parametrize("content, problem", [
    (None, "no such file"),
    ("{not json", "is not valid JSON"),
    ("[1, 2]", "not an array"),
    ('{"config": {}}', '"name" is missing'),
    ('{"name": "", "config": {}}', '"name" is missing'),
    ('{"name": "x"}', '"config" is missing'),
    ('{"name": "x", "config": ["a"]}', '"config" is missing or is not a JSON object'),
])
@pytest.mark.parametrize("command", ["create", "update"])
def test_bad_files_exit_2_and_send_nothing(worker, tmp_path, command, content, problem):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    result = cli(worker, command, str(path))
    assert result.exit_code == 2, result.output
    assert str(path) in result.stderr and problem in result.stderr
    assert worker.requests == []


def test_update_puts_the_config_and_says_created_then_updated(worker, tmp_path):
    path = write(tmp_path, json.dumps(GOOD))
    first = cli(worker, "update", str(path))
    second = cli(worker, "update", str(path))
    assert (first.exit_code, second.exit_code) == (0, 0), first.output + second.output
    assert "created connector orders (source, tasks starting)" in first.stdout
    assert "updated connector orders (source, 2 tasks)" in second.stdout
    sent = [(r["method"], r["path"], r["body"]) for r in worker.requests]
    assert sent == [("PUT", "/connectors/orders/config", GOOD["config"])] * 2


def test_update_400_names_the_json_path(worker, tmp_path):
    doc = {"name": "orders", "config": {"connector.class": "kafka-source", "tasks.max": "many"}}
    result = cli(worker, "update", str(write(tmp_path, json.dumps(doc))))
    assert result.exit_code == 1
    assert "error 400: config.tasks.max: must be an integer, got 'many'" in result.stderr


def test_names_are_escaped_in_paths(worker, tmp_path):
    doc = {"name": "a b/c", "config": {"tasks.max": "1"}}
    result = cli(worker, "update", str(write(tmp_path, json.dumps(doc))))
    assert result.exit_code == 0, result.output
    assert worker.requests[0]["path"] == "/connectors/a%20b%2Fc/config"
    assert "a b/c" in worker.connectors


# --- list / status ------------------------------------------------------------------------------

def test_list_table_and_json(worker):
    worker.add("orders", tasks=["RUNNING", "FAILED"])
    worker.add("audit", state="PAUSED", tasks=["PAUSED"], type_="sink")
    result = cli(worker, "list")
    assert result.exit_code == 0, result.output
    rows = table_rows(result.stdout)
    assert rows[0] == ["NAME", "STATE", "TASKS", "TYPE"]
    assert ["audit", "PAUSED", "0/1", "sink"] in rows
    assert ["orders", "RUNNING", "1/2", "source"] in rows
    req = worker.requests[0]
    assert (req["method"], req["path"], req["query"]) == ("GET", "/connectors", {"expand": ["status", "info"]})

    raw = cli(worker, "list", "--json")
    assert raw.exit_code == 0
    doc = json.loads(raw.stdout)
    assert set(doc) == {"orders", "audit"} and doc["orders"]["status"]["tasks"][1]["state"] == "FAILED"


def test_list_empty(worker):
    result = cli(worker, "list")
    assert result.exit_code == 0 and "no connectors" in result.stdout


def test_replicators_list_empty_says_so_and_lists_topics(worker):
    def replicators(*args: str):
        return runner.invoke(cli_app, ["replicators", "list", *args],
                             env={**CLEAN_ENV, "CONNECT_URL": worker.url})

    empty = replicators()
    assert empty.exit_code == 0, empty.output
    assert empty.stdout.strip() == "no replicators"  # not an empty table (issue 22)
    worker.replicators = [{"id": "kafka.east.t_ns", "namespace": "t/ns", "type": "kafka", "region": "east",
                           "topics": {"orders": {"state": "RUNNING"}, "payments": {"state": "STOPPED"}}}]
    listed = replicators()
    assert listed.exit_code == 0, listed.output
    rows = table_rows(listed.stdout)
    assert ["kafka.east.t_ns", "t/ns", "kafka", "east", "orders", "RUNNING"] in [r[1:-1] for r in rows]
    assert json.loads(replicators("--json").stdout) == worker.replicators


def test_status_prefers_the_drivers_lag_and_shows_what_is_retried(worker, monkeypatch):
    """Lag from the REST status (measured from committed offsets, in every state) wins over the
    metric; a STOPPED connector's own lag fills the connector row; retries are spelled out."""
    worker.add("orders", tasks=["RUNNING"])
    status = worker.status("orders")
    status["connector"]["lag"] = {"records": 3000, "seconds": 12.5}
    status["tasks"][0]["lag"] = {"records": 3000, "seconds": 12.5}
    status["tasks"][0]["retrying"] = [{"operation": "delivery", "reason": "RetriableError: TOPIC_NOT_EXIST",
                                       "for_s": 12.4, "partitions": ['{"queue":0}']}]
    monkeypatch.setattr(worker, "status", lambda name: status)
    result = cli(worker, "status", "orders")
    assert result.exit_code == 0, result.output
    rows = table_rows(result.stdout)
    assert rows[1][-1] == "3,000" and rows[2][-1] == "3,000", rows
    assert "task 0: retrying delivery for 12.4 s" in result.stdout and "TOPIC_NOT_EXIST" in result.stdout


def test_status_table_with_failed_trace_and_metrics(worker):
    worker.add("orders", tasks=["RUNNING", "FAILED"],
               traces={1: "org.apache.kafka.connect.errors.ConnectException: broker gone\n\tat Runner.poll(runner.py:12)"})
    result = cli(worker, "status", "orders")
    assert result.exit_code == 0, result.output
    rows = table_rows(result.stdout)
    assert rows[0] == ["TASK", "STATE", "WORKER", "RECORDS", "RECORDS/S", "ACKED", "ACKED/S", "COMMITTED", "LAG"]
    assert rows[1] == ["connector", "RUNNING", "127.0.0.1:8083", "20", "-", "16", "-", "12", "5"]
    assert rows[2] == ["0", "RUNNING", "127.0.0.1:8083", "10", "-", "8", "-", "6", "5"]
    assert rows[3] == ["1", "FAILED", "127.0.0.1:8084", "10", "-", "8", "-", "6", "-"]  # no lag metric: "-"
    assert "task 1: org.apache.kafka.connect.errors.ConnectException: broker gone" in result.stdout
    assert "Runner.poll" not in result.stdout
    assert [r["path"] for r in worker.requests] == ["/connectors/orders/status", "/metrics"]


def test_status_without_metrics_shows_dashes(worker):
    worker.add("orders", tasks=["RUNNING"])
    worker.metrics_status = 404
    result = cli(worker, "status", "orders")
    assert result.exit_code == 0, result.output
    assert table_rows(result.stdout)[2] == ["0", "RUNNING", "127.0.0.1:8083", "-", "-", "-", "-", "-", "-"]


def test_status_json(worker):
    worker.add("orders", tasks=["RUNNING"])
    result = cli(worker, "status", "orders", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == worker.status("orders")


def test_status_unknown_connector(worker):
    result = cli(worker, "status", "nope")
    assert result.exit_code == 1
    assert "error 404: Connector nope not found" in result.stderr


def test_status_watch_computes_rates_between_refreshes(worker):
    worker.add("orders", tasks=["RUNNING", "RUNNING"])
    result = cli(worker, "status", "orders", "--watch", "--interval", "0.1", "--iterations", "3")
    assert result.exit_code == 0, result.output
    assert worker.scrapes == 3
    assert [r["path"] for r in worker.requests] == ["/connectors/orders/status", "/metrics"] * 3
    assert result.stdout.count("Ctrl-C to stop") == 3
    task0 = [row for row in table_rows(result.stdout) if row[0] == "0"]
    assert [row[3] for row in task0] == ["10", "20", "30"]
    assert task0[0][4] == "-" and task0[0][6] == "-"  # no rate before a second sample
    for row in task0[1:]:
        polled_rate, acked_rate = float(row[4].replace(",", "")), float(row[6].replace(",", ""))
        assert 0 < polled_rate <= 10 / 0.1 + 1 and 0 < acked_rate < polled_rate  # 10 and 8 more per >= 0.1 s


def test_status_watch_on_a_terminal_uses_live(worker):
    worker.add("orders", tasks=["FAILED"], traces={0: "boom: it broke\nmore"})
    result = cli(worker, "status", "orders", "--watch", "--interval", "0.1", "--iterations", "2", env={"TTY_COMPATIBLE": "1"})
    assert result.exit_code == 0, result.output
    assert worker.scrapes == 2
    assert "FAILED" in result.stdout and "task 0: boom: it broke" in result.stdout


def test_status_watch_json_prints_one_document_per_refresh(worker):
    worker.add("orders", tasks=["RUNNING"])
    result = cli(worker, "status", "orders", "--watch", "--json", "--interval", "0.1", "--iterations", "2")
    assert result.exit_code == 0, result.output
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    assert docs == [worker.status("orders")] * 2


# --- lifecycle ----------------------------------------------------------------------------------

@pytest.mark.parametrize("command, state", [("pause", "PAUSED"), ("resume", "RUNNING"), ("stop", "STOPPED")])
def test_pause_resume_stop(worker, command, state):
    worker.add("orders", state="FAILED", tasks=["RUNNING"])
    result = cli(worker, command, "orders")
    assert result.exit_code == 0, result.output
    assert f"{command} requested for orders" in result.stdout
    assert [(r["method"], r["path"]) for r in worker.requests] == [("PUT", f"/connectors/orders/{command}")]
    assert worker.connectors["orders"]["state"] == state


def test_delete(worker):
    worker.add("orders", tasks=["RUNNING"])
    result = cli(worker, "delete", "orders")
    assert result.exit_code == 0 and "deleted orders" in result.stdout
    assert [(r["method"], r["path"]) for r in worker.requests] == [("DELETE", "/connectors/orders")]
    assert "orders" not in worker.connectors
    again = cli(worker, "delete", "orders")
    assert again.exit_code == 1 and "error 404: Connector orders not found" in again.stderr


def test_restart_with_flags_prints_the_status(worker):
    worker.add("orders", tasks=["RUNNING", "FAILED"])
    result = cli(worker, "restart", "orders", "--include-tasks", "--only-failed")
    assert result.exit_code == 0, result.output
    req = worker.requests[0]
    assert (req["method"], req["path"]) == ("POST", "/connectors/orders/restart")
    assert req["query"] == {"includeTasks": ["true"], "onlyFailed": ["true"]}
    assert "connector: RESTARTING" in result.stdout
    assert "task 0: RUNNING" in result.stdout and "task 1: RESTARTING" in result.stdout


def test_restart_connector_only(worker):
    worker.add("orders", tasks=["RUNNING"])
    result = cli(worker, "restart", "orders")
    assert result.exit_code == 0, result.output
    assert worker.requests[0]["query"] == {}
    assert result.stdout.strip() == "restart requested for orders"


# --- offsets / plugins --------------------------------------------------------------------------

def test_offsets_table_and_json(worker):
    offsets = [{"partition": {"topic": "t", "partition": 1}, "offset": {"offset": 42}},
               {"partition": {"topic": "t", "partition": 0}, "offset": {"offset": 7}}]
    worker.add("orders", tasks=["RUNNING"], offsets=offsets)
    result = cli(worker, "offsets", "orders")
    assert result.exit_code == 0, result.output
    assert table_rows(result.stdout)[1:] == [['{"partition": 0, "topic": "t"}', '{"offset": 7}'],
                                             ['{"partition": 1, "topic": "t"}', '{"offset": 42}']]
    raw = cli(worker, "offsets", "orders", "--json")
    assert raw.exit_code == 0 and json.loads(raw.stdout) == {"offsets": offsets}
    worker.add("empty", tasks=[])
    assert "no committed offsets for empty" in cli(worker, "offsets", "empty").stdout


def test_plugins_table_and_json(worker):
    result = cli(worker, "plugins")
    assert result.exit_code == 0, result.output
    assert table_rows(result.stdout) == [["CLASS", "TYPE", "VERSION"], ["pulsar-sink", "sink", "0.1.0"],
                                         ["kafka-source", "source", "0.1.0"]]
    raw = cli(worker, "plugins", "--json")
    assert raw.exit_code == 0 and json.loads(raw.stdout) == worker.plugins
    assert worker.requests[0]["path"] == "/connector-plugins"


# --- auth, errors, unreachable ------------------------------------------------------------------

def test_bearer_token(worker):
    worker.auth = ("bearer", "s3cret-token")
    denied = cli(worker, "list")
    assert denied.exit_code == 1
    assert "error 401: Unauthorized: credentials required" in denied.stderr
    by_option = cli(worker, "list", "--token", "s3cret-token")
    by_env = cli(worker, "plugins", env={"CONNECT_TOKEN": "s3cret-token"})
    assert (by_option.exit_code, by_env.exit_code) == (0, 0), by_option.output + by_env.output
    assert [r["headers"].get("authorization") for r in worker.requests] == [None] + ["Bearer s3cret-token"] * 2
    assert "s3cret" not in by_option.output + by_env.output


def test_basic_auth(worker):
    worker.auth = ("basic", "alice", "pa:ss")
    result = cli(worker, "list", "--user", "alice", env={"CONNECT_PASSWORD": "pa:ss"})
    assert result.exit_code == 0, result.output
    assert worker.requests[0]["headers"]["authorization"] == "Basic " + base64.b64encode(b"alice:pa:ss").decode()
    wrong = cli(worker, "list", "--user", "alice", "--password", "nope")
    assert wrong.exit_code == 1 and "error 401" in wrong.stderr


@pytest.mark.parametrize("args, message", [
    (["--token", "t", "--user", "u", "--password", "p"], "either --token or --user/--password"),
    (["--user", "u"], "--user needs --password"),
    (["--url", "ftp://example.com"], "--url must be an http:// or https:// URL"),
    (["--insecure", "--cacert", "ca.pem"], "contradict"),
    (["--cacert", "/nonexistent/ca.pem"], "no such file"),
])
def test_bad_connection_options_exit_2(worker, args, message):
    result = cli(worker, "list", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert worker.requests == []


def test_cacert_that_is_not_pem_exits_2(worker, tmp_path):
    result = cli(worker, "list", "--cacert", str(write(tmp_path, "not a certificate", "ca.pem")))
    assert result.exit_code == 2 and "not a usable CA bundle" in result.stderr


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_tls_verification_cacert_and_insecure(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    tls_worker = FakeWorker()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(tls_worker))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        tls_worker.url = f"https://127.0.0.1:{httpd.server_address[1]}"
        untrusted = cli(tls_worker, "plugins")
        assert untrusted.exit_code == 3 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr and "--cacert" in untrusted.stderr
        assert cli(tls_worker, "plugins", "--cacert", str(cert)).exit_code == 0
        assert cli(tls_worker, "plugins", "--insecure").exit_code == 0
        assert len(tls_worker.requests) == 2
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_non_json_error_answer(worker):
    worker.fail_with = (502, "text/html", "<html><body>Bad Gateway</body></html>")
    result = cli(worker, "list")
    assert result.exit_code == 1
    assert "error 502: Bad Gateway" in result.stderr


def test_unreachable_worker_exits_3_without_leaking_a_password():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends: nothing listens there
    url = f"http://bob:topsecret@127.0.0.1:{port}"
    result = runner.invoke(app, ["status", "orders", "--url", url], env=CLEAN_ENV)
    assert result.exit_code == 3, result.output
    assert f"cannot reach the worker at http://bob:***@127.0.0.1:{port}:" in result.stderr
    assert "is it running? (connect worker start)" in result.stderr
    assert "topsecret" not in result.output


# --- metrics parsing ----------------------------------------------------------------------------

def test_parse_prometheus():
    text = "\n".join([
        "# HELP connect_records_polled_total x",
        'connect_records_polled_total{connector="a\\"b",task="0"} 1.5e3',
        'connect_records_polled_total{task="1", connector="c,d"} 7 1700000000000',
        "connect_source_lag_records 3",
        'other_metric{connector="a"} 9',
        "garbage line",
        'connect_source_lag_records{connector="x"} NaN',
    ])
    samples = parse_prometheus(text, {"connect_records_polled_total", "connect_source_lag_records"})
    assert samples[:3] == [("connect_records_polled_total", {"connector": 'a"b', "task": "0"}, 1500.0),
                           ("connect_records_polled_total", {"task": "1", "connector": "c,d"}, 7.0),
                           ("connect_source_lag_records", {}, 3.0)]
    assert len(samples) == 4 and samples[3][2] != samples[3][2]  # NaN parsed (and ignored by status)
    assert re.search(r"other_metric", str(samples)) is None
