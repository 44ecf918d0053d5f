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

import json
from pathlib import Path
from typing import Any, Callable

import typer
from rich.table import Table
from rich.text import Text

from worker.api.restcli_client import (
    EXIT_USAGE,
    _Client,
    _command,
    _console,
    _name_argument,
    _print_json,
    _seg,
    _usage_error,
    app,
)
from worker.api.restcli_status import _state
from worker.api.restcli_status import status as _status

__all__ = ["app"]


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


# --- commands ---------------------------------------------------------------------------------

_STATES = ("RUNNING", "PAUSED", "STOPPED")

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


status = _command()(_status)


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


# registered after the commands above, so `connect connectors --help` lists them in this order
from worker.api import restcli_gaps  # noqa: E402,F401
