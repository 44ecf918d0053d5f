"""What every ``connect connectors`` command shares (see :mod:`worker.api.restcli`): the worker's URL,
the HTTP client and its errors, the connection options, the exit codes, and :func:`_command`, which
registers a command with those options (also for ``connect replicators`` and ``connect mm2``)."""

from __future__ import annotations

import functools
import inspect
import json
import ssl
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
import typer
from rich.console import Console

__all__ = ["app", "DEFAULT_URL", "EXIT_OK", "EXIT_WORKER_ERROR", "EXIT_USAGE", "EXIT_UNREACHABLE"]


DEFAULT_URL = "http://127.0.0.1:8083"
EXIT_OK = 0
EXIT_WORKER_ERROR = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
TIMEOUT_S = 30.0

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


@contextmanager
def worker_errors_exit() -> Iterator[None]:
    """A worker's error answer or an unreachable worker: its message on stderr, then the CLI's exit
    code for it (:data:`EXIT_WORKER_ERROR`, :data:`EXIT_UNREACHABLE`)."""
    try:
        yield
    except _WorkerError as exc:
        typer.echo(str(exc), err=True)
        if exc.status == 401:
            typer.echo("the worker wants credentials: --token, or --user and --password", err=True)
        raise typer.Exit(EXIT_WORKER_ERROR) from None
    except _Unreachable as exc:
        typer.echo(exc.describe(), err=True)
        raise typer.Exit(EXIT_UNREACHABLE) from None


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
                with worker_errors_exit():
                    fn(client, **kwargs)
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


def _name_argument() -> Any:
    return typer.Argument(..., help="Connector name.", metavar="NAME", show_default=False)
