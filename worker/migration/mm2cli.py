"""``connect mm2 import mm2.properties``: a MirrorMaker 2 configuration as this project's connectors.

Prints ``{"connectors": [...], "skipped": [...], "secrets": [...]}`` (JSON), or with ``--worker URL``
creates the connectors there (POST /connectors, the REST client of ``connect connectors``), or with
``--out DIR`` writes one ``<name>.json`` per connector (for ``connect run``). Keys not carried over
go to stderr as ``skipped KEY (line N): reason``; the environment variables the secret references
name go to stderr too (names only, never a value). Exit codes: 0 ok, 1 the worker answered an
error, 2 bad input (each bad key named with its line), 3 the worker is unreachable.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from worker.api.restcli_client import EXIT_USAGE, _Client, worker_errors_exit
from worker.migration.mm2import import ImportResult, Mm2ImportError, import_mm2
from worker.migration.mm2properties import PropertiesError, read_properties

__all__ = ["app"]

app = typer.Typer(name="mm2", add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Coming from MirrorMaker 2: import an mm2.properties as connectors.")


def _fail(message: str) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(EXIT_USAGE)


def _load(path: Path, prefix: str, take_over: bool) -> ImportResult:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise _fail(f"{path}: no such file") from None
    except OSError as exc:
        raise _fail(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:  # Properties.load(InputStream) reads ISO-8859-1
        text = raw.decode("latin-1")
    try:
        return import_mm2(read_properties(text), prefix=prefix, take_over=take_over)
    except PropertiesError as exc:
        raise _fail(f"{path}: {exc}") from None
    except Mm2ImportError as exc:
        for key, line, why in exc.problems:
            typer.echo(f"{path}:{line}: {key}: {why}" if line else f"{path}: {key}: {why}", err=True)
        raise _fail(f"{path}: {len(exc.problems)} problem(s); nothing was imported") from None


def _report(result: ImportResult) -> None:
    for s in result.skipped:
        typer.echo(f"skipped {s.key} (line {s.line}): {s.reason}", err=True)
    files = sorted({str(v) for c in result.connectors for k, v in c["config"].items() if k.endswith(".location")})
    if files:
        typer.echo("the connectors name local files: the worker must allow their directories "
                   "(connector.client.config.allowed.paths, or --client-allowed-paths of connect run): "
                   + ", ".join(files), err=True)
    if result.secrets:
        typer.echo("secrets are referenced, not copied: set these environment variables for the worker "
                   "(or edit the references to another provider):", err=True)
        for name, key in sorted(result.secrets.items()):
            typer.echo(f"  {name}  <- {key}", err=True)


@app.command("import")
def import_(
    file: Path = typer.Argument(..., help="MirrorMaker 2 dedicated-mode configuration (mm2.properties).",
                                metavar="MM2.PROPERTIES", show_default=False),
    worker: str | None = typer.Option(None, "--worker", envvar="CONNECT_URL", show_default=False,
                                      help="Create the connectors on this worker (its REST API base URL) "
                                           "instead of printing them."),
    out: Path | None = typer.Option(None, "--out", show_default=False,
                                    help="Write one <name>.json per connector into this directory instead."),
    prefix: str = typer.Option("mm2", "--prefix", help="Connector names start with this."),
    take_over: bool = typer.Option(False, "--take-over", help="Mirrors start where MM2 committed (its "
                                   "mm2-offsets.<source>.internal): stop MM2 first, nothing is copied twice."),
    state: str | None = typer.Option(None, "--state", show_default=False,
                                     help="With --worker: initial state PAUSED or STOPPED (default RUNNING)."),
    token: str | None = typer.Option(None, "--token", envvar="CONNECT_TOKEN", show_default=False,
                                     help="With --worker: bearer token."),
) -> None:
    """Turn an mm2.properties into connectors: mirror, checkpoint, metadata and heartbeat per flow."""
    if worker and out:
        raise _fail("give --worker or --out, not both")
    if state is not None and state.upper() not in ("PAUSED", "STOPPED", "RUNNING"):
        raise _fail(f"--state must be PAUSED, STOPPED or RUNNING, not {state!r}")
    result = _load(file, prefix, take_over)
    _report(result)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for connector in result.connectors:
            (out / f"{connector['name']}.json").write_text(json.dumps(connector, indent=2) + "\n")
        typer.echo(f"wrote {len(result.connectors)} connector file(s) into {out}", err=True)
        return
    if not worker:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    client = _Client(worker, None, token, None, None, False, None)
    try:
        with worker_errors_exit():
            for connector in result.connectors:
                body = {**connector, **({"initial_state": state.upper()} if state else {})}
                client.json("POST", "/connectors", body=body)
                typer.echo(f"created connector {connector['name']}")
    finally:
        client.close()
