"""``connect connectors``: drive a running worker through its REST API (the Kafka Connect one).

Every command talks to the worker at ``--url`` (env ``CONNECT_URL``); without one, at the URL the
worker wrote into its data directory ``--data-dir`` (env ``CONNECT_DATA_DIR``, as ``connect worker
start`` reads it; ``worker.api.address``), else ``http://127.0.0.1:8083``. They share these connection
options:

- ``--token`` (env ``CONNECT_TOKEN``): sends ``Authorization: Bearer <token>``;
- ``--user`` / ``--password`` (env ``CONNECT_USER`` / ``CONNECT_PASSWORD``): HTTP basic auth;
- ``--insecure``: do not verify the worker's TLS certificate;
- ``--cacert PATH``: verify it against this CA bundle (PEM) instead of the system's.

Commands: ``create FILE.json [--state PAUSED|STOPPED]``, ``update FILE.json``, ``list``,
``status NAME [--watch] [--interval S]``, ``pause|resume|stop|delete NAME``,
``restart NAME [--include-tasks] [--only-failed]``, ``offsets NAME``, ``plugins``. The read
commands (``list``, ``status``, ``offsets``, ``plugins``) take ``--json`` to print the worker's
raw JSON instead of a table (``status --watch --json``: one JSON document per line and refresh).

Exit codes:

- ``0``: success;
- ``1``: the worker answered with an error; ``error <code>: <message>`` is printed on stderr
  (its ``error_code`` and ``message``: 400 bad request, 401 unauthorized, 404 unknown
  connector, 409 conflict, 500 internal error...);
- ``2``: bad usage or a bad connector file (missing, not JSON, not an object with ``name`` and
  ``config``); nothing is sent to the worker;
- ``3``: the worker could not be reached (refused, timed out, TLS failure...).

Nothing secret is printed: request bodies are never echoed or logged, a password given in
``--url`` is masked in messages, and the worker masks secret config values in what it returns.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import re
import ssl
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

__all__ = ["app", "DEFAULT_URL", "EXIT_OK", "EXIT_WORKER_ERROR", "EXIT_USAGE", "EXIT_UNREACHABLE", "parse_prometheus"]

DEFAULT_URL = "http://127.0.0.1:8083"
EXIT_OK = 0
EXIT_WORKER_ERROR = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
TIMEOUT_S = 30.0

POLLED = "connect_records_polled_total"
ACKED = "connect_records_acknowledged_total"
LAG = "connect_source_lag_records"
COMMITTED = "connect_records_committed_total"

app = typer.Typer(name="connectors", add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Manage the connectors of a running worker over its REST API (Kafka Connect's).")


# --- errors and the HTTP client --------------------------------------------------------------

class _WorkerError(Exception):
    """The worker answered with an HTTP error."""

    def __init__(self, status: int, code: int, message: str):
        super().__init__(f"error {code}: {message}")
        self.status, self.code, self.message = status, code, message


class _Unreachable(Exception):
    """No HTTP answer from the worker."""

    def __init__(self, url: str, reason: str):
        super().__init__(reason)
        self.url, self.reason = url, reason

    def describe(self) -> str:
        reason = self.reason.upper()
        if "CERTIFICATE" in reason:
            hint = "check its certificate (--cacert PATH, or --insecure to skip verification)"
        elif "SSL" in reason or "TLS" in reason:
            hint = "does it serve TLS? (check http:// against https:// in --url)"
        else:
            hint = "is it running? (connect worker start)"
        return f"cannot reach the worker at {self.url}: {self.reason}; {hint}"


def _usage_error(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(EXIT_USAGE)


def _display_url(url: str) -> str:
    """The URL without any password it carries (``http://user:***@host``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _seg(name: str) -> str:
    """A connector name as one URL path segment."""
    return quote(name, safe="")


def _worker_url(url: str | None, data_dir: Path | None) -> str:
    """``--url`` when given, else the URL the worker wrote into ``--data-dir`` (``worker.api.address``),
    else :data:`DEFAULT_URL`."""
    if url:
        return url
    if data_dir is None:
        return DEFAULT_URL
    from connect.errors import ConnectError
    from worker.api.address import UntrustedAddressFile, read_address

    try:
        return read_address(data_dir).url
    except UntrustedAddressFile as exc:  # nothing is sent to where it points
        raise _usage_error(str(exc)) from None
    except ConnectError as exc:
        typer.echo(f"cannot find the worker: {exc}", err=True)
        raise typer.Exit(EXIT_UNREACHABLE) from None


class _Client:
    def __init__(self, url: str | None, data_dir: Path | None, token: str | None, user: str | None,
                 password: str | None, insecure: bool, cacert: Path | None):
        url = _worker_url(url, data_dir).strip().rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _usage_error(f"--url must be an http:// or https:// URL, not {_display_url(url)!r}")
        if token and (user or password):
            raise _usage_error("give either --token or --user/--password, not both")
        if password and not user:
            raise _usage_error("--password needs --user (or CONNECT_USER)")
        if user and password is None:
            raise _usage_error("--user needs --password (or CONNECT_PASSWORD)")
        if insecure and cacert:
            raise _usage_error("--insecure and --cacert contradict each other: give one")
        verify: Any = True
        if insecure:
            verify = False
        elif cacert:
            try:
                verify = ssl.create_default_context(cafile=str(cacert))
            except FileNotFoundError:
                raise _usage_error(f"--cacert {cacert}: no such file") from None
            except (ssl.SSLError, OSError) as exc:
                raise _usage_error(f"--cacert {cacert}: not a usable CA bundle ({exc})") from None
        headers = {"Accept": "application/json", "User-Agent": "connect-cli"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.url = _display_url(url)
        self._http = httpx.Client(base_url=url, headers=headers, verify=verify, timeout=TIMEOUT_S,
                                  auth=httpx.BasicAuth(user, password) if user else None, follow_redirects=False)

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, *, params: Any = None, body: Any = None) -> httpx.Response:
        try:
            response = self._http.request(method, path, params=params, json=body)
        except httpx.TimeoutException:
            raise _Unreachable(self.url, f"no answer within {TIMEOUT_S:g}s") from None
        except httpx.TransportError as exc:
            raise _Unreachable(self.url, str(exc) or type(exc).__name__) from None
        if response.status_code >= 400:
            raise _error_of(response)
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise _WorkerError(response.status_code, response.status_code,
                               f"unexpected answer to {method} {path}: not JSON") from None


def _error_of(response: httpx.Response) -> _WorkerError:
    code, message = response.status_code, ""
    try:
        doc = response.json()
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        if isinstance(doc.get("error_code"), int):
            code = doc["error_code"]
        if doc.get("message") is not None:
            message = str(doc["message"])
    if not message:
        text = response.text.strip().splitlines()
        message = text[0][:200] if text and not text[0].lstrip().startswith("<") else response.reason_phrase
    return _WorkerError(response.status_code, code, message or "(no message)")


# --- the connection options, shared by every command -----------------------------------------

_KW = inspect.Parameter.KEYWORD_ONLY
_PANEL = "Connection"
_CONN_PARAMS = [
    inspect.Parameter("url", _KW, default=None, annotation=Annotated[str | None, typer.Option(
        "--url", envvar="CONNECT_URL", rich_help_panel=_PANEL,
        help=f"Base URL of the worker's REST API (default: the one in --data-dir's rest.json, else {DEFAULT_URL}).")]),
    inspect.Parameter("data_dir", _KW, default=None, annotation=Annotated[Path | None, typer.Option(
        "--data-dir", envvar="CONNECT_DATA_DIR", rich_help_panel=_PANEL,
        help="The worker's data directory: its URL is read from rest.json there when --url is not given.")]),
    inspect.Parameter("token", _KW, default=None, annotation=Annotated[str | None, typer.Option(
        "--token", envvar="CONNECT_TOKEN", show_envvar=True, rich_help_panel=_PANEL,
        help="Bearer token (sent as 'Authorization: Bearer').")]),
    inspect.Parameter("user", _KW, default=None, annotation=Annotated[str | None, typer.Option(
        "--user", envvar="CONNECT_USER", rich_help_panel=_PANEL, help="User name for HTTP basic auth.")]),
    inspect.Parameter("password", _KW, default=None, annotation=Annotated[str | None, typer.Option(
        "--password", envvar="CONNECT_PASSWORD", rich_help_panel=_PANEL, help="Password for HTTP basic auth.")]),
    inspect.Parameter("insecure", _KW, default=False, annotation=Annotated[bool, typer.Option(
        "--insecure", rich_help_panel=_PANEL, help="Do not verify the worker's TLS certificate.")]),
    inspect.Parameter("cacert", _KW, default=None, annotation=Annotated[Path | None, typer.Option(
        "--cacert", rich_help_panel=_PANEL, help="CA bundle (PEM) to verify the worker's certificate with.")]),
]
_CONN_NAMES = [p.name for p in _CONN_PARAMS]


def _command(name: str | None = None, on: typer.Typer | None = None) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register ``fn(client, ...)`` as a command (of ``on``, default ``connect connectors``) that also
    takes the connection options, and turn the worker's errors into exit codes (1: error answer,
    3: unreachable)."""

    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(fn, eval_str=True)
        params = [p for p in signature.parameters.values() if p.name != "client"]

        @functools.wraps(fn)
        def command(**kwargs: Any) -> None:
            client = _Client(**{key: kwargs.pop(key) for key in _CONN_NAMES})
            try:
                fn(client, **kwargs)
            except _WorkerError as exc:
                typer.echo(str(exc), err=True)
                if exc.status == 401:
                    typer.echo("the worker wants credentials: --token, or --user and --password", err=True)
                raise typer.Exit(EXIT_WORKER_ERROR) from None
            except _Unreachable as exc:
                typer.echo(exc.describe(), err=True)
                raise typer.Exit(EXIT_UNREACHABLE) from None
            finally:
                client.close()

        command.__signature__ = signature.replace(parameters=params + _CONN_PARAMS)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params + _CONN_PARAMS}
        return (on or app).command(name)(command)

    return decorate


def _console() -> Console:
    # Piped output is read by scripts and greps: never cut a name to a terminal's width.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 400)


def _print_json(doc: Any) -> None:
    typer.echo(json.dumps(doc, indent=2, sort_keys=False))


# --- connector files --------------------------------------------------------------------------

def _load_connector_file(path: Path) -> dict[str, Any]:
    """``{"name": ..., "config": {...}}`` from ``path``, or exit 2 saying what is wrong with it."""

    def bad(problem: str) -> typer.Exit:
        typer.echo(f"{path}: {problem}; nothing was sent", err=True)
        return typer.Exit(EXIT_USAGE)

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise bad("no such file") from None
    except IsADirectoryError:
        raise bad("is a directory, not a connector file") from None
    except UnicodeDecodeError:
        raise bad("is not UTF-8 text") from None
    except OSError as exc:
        raise bad(f"cannot be read ({exc.strerror or exc})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise bad(f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(doc, dict):
        raise bad(f'must hold a JSON object {{"name": ..., "config": {{...}}}}, not {_json_kind(doc)}')
    name = doc.get("name")
    if not isinstance(name, str) or not name.strip():
        raise bad('"name" is missing or is not a non-empty string')
    if not isinstance(doc.get("config"), dict):
        raise bad('"config" is missing or is not a JSON object')
    return doc


def _json_kind(doc: Any) -> str:
    if isinstance(doc, list):
        return "an array"
    if isinstance(doc, str):
        return "a string"
    if isinstance(doc, bool):
        return "a boolean"
    if isinstance(doc, (int, float)):
        return "a number"
    return "null"


def _tasks_summary(doc: Any, created: str | None = None) -> str:
    """``source, 2 tasks``. A connector just created (``created``: its initial state) has no tasks
    in the worker's answer yet - they start a moment later - so it says so instead of ``0 tasks``."""
    tasks = doc.get("tasks") if isinstance(doc, dict) else None
    count = len(tasks) if isinstance(tasks, list) else 0
    kind = doc.get("type") if isinstance(doc, dict) else None
    if count == 0 and created == "STOPPED":
        tasks_text = "no tasks until resumed"
    elif count == 0 and created is not None:
        tasks_text = "tasks starting"
    else:
        tasks_text = f"{count} task{'s' if count != 1 else ''}"
    return f"{kind or 'unknown type'}, {tasks_text}"


# --- prometheus metrics -----------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = re.compile(r"\\(.)")


def parse_prometheus(text: str, names: set[str] | None = None) -> list[tuple[str, dict[str, str], float]]:
    """The samples ``(name, labels, value)`` of a Prometheus text exposition (only ``names`` if given)."""
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match or (names is not None and match.group(1) not in names):
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        labels = {key: _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), raw)
                  for key, raw in _LABEL.findall(match.group(2) or "")}
        samples.append((match.group(1), labels, value))
    return samples


@dataclass
class _Sample:
    """One connector's task metrics at one moment: ``values[metric][task id] = value``."""

    at: float
    values: dict[str, dict[str, float]] = field(default_factory=dict)

    def get(self, metric: str, task: str) -> float | None:
        return self.values.get(metric, {}).get(task)


def _sample_metrics(client: _Client, connector: str) -> _Sample | None:
    """The connector's task metrics, or None when ``/metrics`` cannot be read (shown as '-')."""
    try:
        text = client.request("GET", "/metrics").text
    except (_WorkerError, _Unreachable):
        return None
    sample = _Sample(at=time.monotonic())
    for name, labels, value in parse_prometheus(text, {POLLED, ACKED, COMMITTED, LAG}):
        if labels.get("connector") == connector and "task" in labels and math.isfinite(value):
            per_task = sample.values.setdefault(name, {})
            per_task[labels["task"]] = per_task.get(labels["task"], 0.0) + value
    return sample


def _rate(metric: str, task: str, now: _Sample | None, before: _Sample | None) -> float | None:
    """Per-second increase of a counter between two samples (None: unknown, or the counter was reset)."""
    if now is None or before is None or now.at <= before.at:
        return None
    current, previous = now.get(metric, task), before.get(metric, task)
    if current is None or previous is None or current < previous:
        return None
    return (current - previous) / (now.at - before.at)


# --- rendering --------------------------------------------------------------------------------

_STATE_STYLES = {"RUNNING": "green", "FAILED": "bold red", "PAUSED": "yellow", "STOPPED": "yellow",
                 "UNASSIGNED": "cyan", "RESTARTING": "cyan"}


def _state(value: Any) -> Text:
    state = str(value or "-")
    return Text(state, style=_STATE_STYLES.get(state, ""))


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _per_second(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _first_line(trace: Any) -> str:
    for line in str(trace or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def _sum(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _render_status(status: dict[str, Any], now: _Sample | None, before: _Sample | None,
                   header: str = "") -> RenderableType:
    connector = status.get("connector") or {}
    tasks = sorted((t for t in status.get("tasks") or [] if isinstance(t, dict)),
                   key=lambda t: (0, t["id"], "") if isinstance(t.get("id"), int) else (1, 0, str(t.get("id"))))
    title = f"{status.get('name', '?')} ({status.get('type') or 'unknown type'})"
    table = Table(title=Text(title), title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("TASK")
    table.add_column("STATE")
    table.add_column("WORKER")
    for heading in ("RECORDS", "RECORDS/S", "ACKED", "ACKED/S", "COMMITTED", "LAG"):
        table.add_column(heading, justify="right")

    rows, traces = [], []
    for task in tasks:
        tid = str(task.get("id", "?"))
        lag = (task.get("lag") or {}).get("records")  # the driver's, from committed offsets (any state)
        values = [now.get(POLLED, tid) if now else None, _rate(POLLED, tid, now, before),
                  now.get(ACKED, tid) if now else None, _rate(ACKED, tid, now, before),
                  now.get(COMMITTED, tid) if now else None, lag if lag is not None else (now.get(LAG, tid) if now else None)]
        rows.append((tid, task, values))
        if task.get("state") == "FAILED" and _first_line(task.get("trace")):
            traces.append(f"task {tid}: {_first_line(task.get('trace'))}")
        for retry in task.get("retrying") or []:
            held = ", ".join(retry.get("partitions") or []) or "the whole pair"
            traces.append(f"task {tid}: retrying {retry.get('operation')} for {retry.get('for_s')} s "
                          f"(offsets held: {held}): {retry.get('reason')}")
    totals = [_sum([values[i] for _, _, values in rows]) for i in range(6)]
    connector_lag = (connector.get("lag") or {}).get("records")
    if connector_lag is not None:  # a STOPPED connector has no task rows, its lag is still known
        totals[5] = connector_lag
    formats = (_count, _per_second, _count, _per_second, _count, _count)
    table.add_row("connector", _state(connector.get("state")), Text(str(connector.get("worker_id") or "-")),
                  *(f(v) for f, v in zip(formats, totals, strict=True)))
    for tid, task, values in rows:
        table.add_row(Text(tid), _state(task.get("state")), Text(str(task.get("worker_id") or "-")),
                      *(f(v) for f, v in zip(formats, values, strict=True)))
    if connector.get("state") == "FAILED" and _first_line(connector.get("trace")):
        traces.insert(0, f"connector: {_first_line(connector.get('trace'))}")

    parts: list[RenderableType] = []
    if header:
        parts.append(Text(header, style="dim"))
    parts.append(table)
    if connector.get("waiting"):  # no task pair yet, and why (e.g. waiting for topics matching ...)
        parts.append(Text(f"connector: {connector['waiting']}", style="yellow"))
    for line in traces:
        parts.append(Text(line, style="red"))
    return Group(*parts)


# --- commands ---------------------------------------------------------------------------------

_STATES = ("RUNNING", "PAUSED", "STOPPED")


def _name_argument() -> Any:
    return typer.Argument(..., help="Connector name.", metavar="NAME", show_default=False)


@_command()
def create(
    client: _Client,
    file: Path = typer.Argument(..., help='Connector file: {"name": ..., "config": {...}}.',
                                metavar="FILE.json", show_default=False),
    state: str | None = typer.Option(None, "--state", help="Initial state: PAUSED or STOPPED (default RUNNING).",
                                        show_default=False),
) -> None:
    """Create a connector from a JSON file (POST /connectors)."""
    doc = _load_connector_file(file)
    body: dict[str, Any] = {"name": doc["name"], "config": doc["config"]}
    initial = state or doc.get("initial_state")
    if initial is not None:
        if not isinstance(initial, str) or initial.upper() not in _STATES:
            raise _usage_error(f"the initial state must be one of {', '.join(_STATES)}, not {initial!r}")
        body["initial_state"] = initial.upper()
    answer = client.json("POST", "/connectors", body=body)
    suffix = f", initial state {body['initial_state']}" if "initial_state" in body else ""
    typer.echo(f"created connector {doc['name']} ({_tasks_summary(answer, body.get('initial_state', 'RUNNING'))}{suffix})")


@_command()
def update(
    client: _Client,
    file: Path = typer.Argument(..., help='Connector file: {"name": ..., "config": {...}}.',
                                metavar="FILE.json", show_default=False),
) -> None:
    """Create or replace a connector's configuration from a JSON file (PUT /connectors/NAME/config)."""
    doc = _load_connector_file(file)
    response = client.request("PUT", f"/connectors/{_seg(doc['name'])}/config", body=doc["config"])
    try:
        answer = response.json()
    except ValueError:
        answer = None
    created = response.status_code == 201
    typer.echo(f"{'created' if created else 'updated'} connector {doc['name']} "
               f"({_tasks_summary(answer, 'RUNNING' if created else None)})")


@_command("list")
def list_(
    client: _Client,
    as_json: bool = typer.Option(False, "--json", help="Print the worker's raw JSON."),
) -> None:
    """List the connectors with their state, running tasks and type."""
    answer = client.json("GET", "/connectors", params=[("expand", "status"), ("expand", "info")])
    if as_json:
        _print_json(answer)
        return
    if isinstance(answer, list):  # a worker without ?expand: names only
        answer = {name: {} for name in answer}
    if not answer:
        typer.echo("no connectors")
        return
    table = Table(show_edge=False, pad_edge=False)
    for heading in ("NAME", "STATE", "TASKS", "TYPE"):
        table.add_column(heading, overflow="fold")
    for name in sorted(answer):
        entry = answer[name] if isinstance(answer[name], dict) else {}
        status, info = entry.get("status") or {}, entry.get("info") or {}
        tasks = [t for t in status.get("tasks") or [] if isinstance(t, dict)]
        running = sum(1 for t in tasks if t.get("state") == "RUNNING")
        table.add_row(Text(name), _state((status.get("connector") or {}).get("state")),
                      f"{running}/{len(tasks)}" if status else "-", Text(str(status.get("type") or info.get("type") or "-")))
    _console().print(table)


@_command()
def status(
    client: _Client,
    name: str = _name_argument(),
    watch: bool = typer.Option(False, "--watch", "-w", help="Refresh until Ctrl-C."),
    interval: float = typer.Option(2.0, "--interval", min=0.1, help="Seconds between refreshes (with --watch)."),
    as_json: bool = typer.Option(False, "--json", help="Print the worker's raw JSON (one line per refresh with --watch)."),
    iterations: int | None = typer.Option(None, "--iterations", min=1, hidden=True, help="Stop after N refreshes."),
) -> None:
    """Show a connector and its tasks: state, worker, records/s, acknowledged/s and lag (from /metrics).

    Rates are computed between two refreshes, so they show with --watch. FAILED tasks show the first line of their trace.
    """
    path = f"/connectors/{_seg(name)}/status"
    if as_json and not watch:
        _print_json(client.json("GET", path))
        return
    if not watch:
        _console().print(_render_status(client.json("GET", path), _sample_metrics(client, name), None))
        return

    console = _console()
    before: _Sample | None = None
    done = 0

    def refresh() -> RenderableType:
        nonlocal before
        stamp = time.strftime("%H:%M:%S")
        try:
            doc = client.json("GET", path)
        except _Unreachable as exc:
            if done == 0:
                raise  # the first look fails: most likely a wrong --url
            return Text(f"{stamp}  {exc.describe()}; retrying every {interval:g}s", style="red")
        if as_json:
            typer.echo(json.dumps(doc, separators=(",", ":")))
            return Text("")
        now = _sample_metrics(client, name)
        view = _render_status(doc, now, before, header=f"{stamp}  {client.url}  every {interval:g}s, Ctrl-C to stop")
        before = now if now is not None else before
        return view

    def finished() -> bool:
        return iterations is not None and done >= iterations

    try:
        if as_json or not console.is_terminal:  # a pipe or a file: one snapshot after the other
            while True:
                view = refresh()
                if not as_json:
                    console.print(view)
                    console.print()
                done += 1
                if finished():
                    break
                time.sleep(interval)
        else:
            with Live(Text("loading..."), console=console, auto_refresh=False) as live:
                while True:
                    live.update(refresh(), refresh=True)
                    done += 1
                    if finished():
                        break
                    time.sleep(interval)
    except KeyboardInterrupt:
        pass


def _state_change(action: str, done: str) -> Callable[..., None]:
    def change(client: _Client, name: str = _name_argument()) -> None:
        client.request("PUT", f"/connectors/{_seg(name)}/{action}")
        typer.echo(f"{done} {name}")

    change.__name__ = action
    change.__doc__ = f"{action.capitalize()} a connector and its tasks (PUT /connectors/NAME/{action})."
    return change


pause = _command("pause")(_state_change("pause", "pause requested for"))
resume = _command("resume")(_state_change("resume", "resume requested for"))
stop = _command("stop")(_state_change("stop", "stop requested for"))


@_command()
def delete(client: _Client, name: str = _name_argument()) -> None:
    """Delete a connector: stop its tasks and remove its configuration (DELETE /connectors/NAME)."""
    client.request("DELETE", f"/connectors/{_seg(name)}")
    typer.echo(f"deleted {name}")


@_command()
def restart(
    client: _Client,
    name: str = _name_argument(),
    include_tasks: bool = typer.Option(False, "--include-tasks", help="Restart its tasks too."),
    only_failed: bool = typer.Option(False, "--only-failed", help="Restart only the instances that are FAILED."),
) -> None:
    """Restart a connector, and with --include-tasks its tasks (POST /connectors/NAME/restart)."""
    params = {}
    if include_tasks:
        params["includeTasks"] = "true"
    if only_failed:
        params["onlyFailed"] = "true"
    answer = client.json("POST", f"/connectors/{_seg(name)}/restart", params=params or None)
    typer.echo(f"restart requested for {name}")
    if isinstance(answer, dict):
        typer.echo(f"  connector: {(answer.get('connector') or {}).get('state', '-')}")
        for task in answer.get("tasks") or []:
            if isinstance(task, dict):
                typer.echo(f"  task {task.get('id', '?')}: {task.get('state', '-')}")


@_command()
def offsets(
    client: _Client,
    name: str = _name_argument(),
    as_json: bool = typer.Option(False, "--json", help="Print the worker's raw JSON."),
) -> None:
    """Show a connector's committed offsets, one row per partition."""
    answer = client.json("GET", f"/connectors/{_seg(name)}/offsets")
    if as_json:
        _print_json(answer)
        return
    entries = [e for e in (answer or {}).get("offsets") or [] if isinstance(e, dict)]
    if not entries:
        typer.echo(f"no committed offsets for {name}")
        return
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("PARTITION")
    table.add_column("OFFSET")
    rows = [(json.dumps(e.get("partition"), sort_keys=True), json.dumps(e.get("offset"), sort_keys=True)) for e in entries]
    for partition, offset in sorted(rows):
        table.add_row(Text(partition), Text(offset))
    _console().print(table)


@_command()
def plugins(
    client: _Client,
    as_json: bool = typer.Option(False, "--json", help="Print the worker's raw JSON."),
) -> None:
    """List the connector plugins the worker can run (GET /connector-plugins)."""
    answer = client.json("GET", "/connector-plugins")
    if as_json:
        _print_json(answer)
        return
    entries = [e for e in answer or [] if isinstance(e, dict)]
    if not entries:
        typer.echo("no connector plugins")
        return
    table = Table(show_edge=False, pad_edge=False)
    for heading in ("CLASS", "TYPE", "VERSION"):
        table.add_column(heading)
    for entry in sorted(entries, key=lambda e: (str(e.get("type")), str(e.get("class")))):
        table.add_row(Text(str(entry.get("class", "-"))), Text(str(entry.get("type", "-"))), Text(str(entry.get("version", "-"))))
    _console().print(table)
