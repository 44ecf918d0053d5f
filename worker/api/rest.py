"""The worker's REST API: Kafka Connect's paths, methods, status codes and JSON shapes.

Served by uvicorn (``connect worker start``); the OpenAPI document is at ``/openapi.json`` (and
browsable at ``/docs`` when the operator turns it on: ``worker.api.docs``). Every answer carries the
console's security headers (``worker.api.headers``). Errors answer Kafka Connect's body ``{"error_code": N, "message": "..."}``:
400 for a malformed body (the message names the JSON path), 401 without valid credentials when
authentication is on, 404 for an unknown connector, task or plugin, 409 for a state conflict
(a connector that exists already, offsets changed while not STOPPED), 500 otherwise.

A connector here is a pipeline (``source.*`` and ``sink.*`` keys, see ``worker.pipeline``); its
``type`` is reported as ``source``, which is what it is to Kafka Connect tooling (it polls a
source cluster). Secrets never leave: declared-secret and credential-named keys are masked and
provider references are shown as written, never resolved.
"""

from __future__ import annotations

import base64
import secrets
from typing import Any, Callable, Iterable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from connect.errors import ConfigError, ConnectError, PluginError
from connect.secrets import MASK
from worker.api.docs import docs_routes, swagger_ui_files
from worker.api.headers import SecurityHeaders
from worker.api.jsonbody import error_response, read_body
from worker.api.requesterrors import request_error
from worker.api.restguard import DEFAULT_MAX_BODY, DEFAULT_MAX_DEPTH, RestGuard
from worker.api.routes_admin import admin_routes
from worker.api.routes_connectors import connector_routes
from worker.api.routes_gaps import gap_routes
from worker.api.routes_loggers import logger_routes
from worker.api.routes_plugins import plugin_routes
from worker.api.routes_replicators import replicator_routes
from worker.api.routes_state import state_routes
from worker.api.routes_topics import topic_routes
from worker.console.model import ConsoleHistory, ConsoleViews
from worker.console.web import CONSOLE_PREFIX, UI_PREFIX, console_routes
from worker.herder import BadRequest, ConnectorExists, ConnectorNotFound, Herder, StateConflict

__all__ = ["create_app", "RestAuth"]

VERSION = "0.1.0"


class RestAuth:
    """Optional authentication: a bearer token, or basic credentials (either or both)."""

    def __init__(self, token: str | None = None, user: str | None = None, password: str | None = None):
        self.token = token or None
        self.basic = (user, password or "") if user else None

    @property
    def enabled(self) -> bool:
        return self.token is not None or self.basic is not None

    def allows(self, header: str | None) -> bool:
        if not header:
            return False
        scheme, _, value = header.partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and self.token is not None:
            return secrets.compare_digest(value.encode(), self.token.encode())
        if scheme.lower() == "basic" and self.basic is not None:
            try:
                user, _, password = base64.b64decode(value, validate=True).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return False
            return (secrets.compare_digest(user.encode(), self.basic[0].encode())
                    & secrets.compare_digest(password.encode(), self.basic[1].encode()))
        return False


def _config_error_message(exc: ConfigError) -> str:
    issues = exc.issues
    lines = [f"{i.key}: {i.message}" + (f" (value {i.value!r})" if i.value not in (None, MASK) else "") for i in issues]
    return (f"Connector configuration is invalid and contains the following {len(issues)} error(s):\n"
            + "\n".join(lines))


def create_app(herder: Herder, *, auth: RestAuth | None = None, metrics: Any = None, replicators: Any = None,
               allowed_hosts: Iterable[str] = ("localhost", "localhost.localdomain"),
               allowed_origins: Iterable[str] = (), max_body: int = DEFAULT_MAX_BODY,
               max_json_depth: int = DEFAULT_MAX_DEPTH, console: Any = None, docs: bool = False) -> FastAPI:
    """The ASGI application over ``herder``, behind :class:`worker.api.restguard.RestGuard`, with the
    operator console (``worker.console.web``) over ``console`` (a :class:`worker.console.model.ConsoleViews`;
    None: one whose history is sampled by the console's own requests); ``/docs`` only with ``docs``."""
    app = FastAPI(title="connect-bridge worker", version=VERSION, docs_url=None, redoc_url=None,
                  description="Kafka Connect's REST API over a Spark-based cross-broker connector worker.")
    app.state.max_json_depth = max_json_depth
    _authenticate(app, herder, auth or RestAuth())
    _error_handlers(app, herder)
    admin_routes(app, herder, metrics, VERSION)
    connector_routes(app, herder)
    state_routes(app, herder)
    gap_routes(app, herder)
    # plugins, active topics (KIP-558), loggers (KIP-495)
    plugin_routes(app, herder, read_body)
    topic_routes(app, herder)
    logger_routes(app, read_body)
    if replicators is not None:
        replicator_routes(app, replicators, metrics)
    if console is None:
        console = ConsoleViews(herder, metrics, ConsoleHistory(metrics, herder.connector_names),
                               lambda: {"worker_id": herder.worker_id, "version": VERSION})
    console_routes(app, console, herder.redactor.redact)
    if docs:
        docs_routes(app, swagger_ui_files())
    # Added last, so it runs first: nothing (authentication included) sees a refused request.
    app.add_middleware(RestGuard, allowed_hosts=allowed_hosts, allowed_origins=allowed_origins, max_body=max_body)
    app.add_middleware(SecurityHeaders)  # outermost: the guard's refusals carry the headers too
    return app


def _authenticate(app: FastAPI, herder: Herder, auth: RestAuth) -> None:
    """Credentials on every path but ``/health`` (and the console's page with only a token); 503
    until the herder has loaded the stored connectors."""

    @app.middleware("http")
    async def authenticate(request: Request, call_next: Callable):
        path = request.url.path
        ui = path == UI_PREFIX or path.startswith(f"{UI_PREFIX}/")
        console = ui or path.startswith(CONSOLE_PREFIX)
        # The console's page holds no data; with only a token (a browser cannot be asked for one)
        # it loads without credentials and asks for the token itself (``worker.console.web``).
        open_page = ui and auth.basic is None
        if auth.enabled and path != "/health" and not open_page and not auth.allows(request.headers.get("authorization")):
            response = error_response(401, "Authentication required: send Authorization: Bearer <token> or Basic credentials")
            # The console's page and documents, with basic credentials configured: Basic alone is the
            # challenge, which a browser answers by asking for them (and then sends them itself).
            response.headers["WWW-Authenticate"] = ('Basic realm="connect", charset="UTF-8"'
                                                    if console and auth.basic is not None
                                                    else 'Bearer, Basic realm="connect"')
            return response
        if not herder.started.is_set() and not ui and path not in ("/", "/health", "/openapi.json", "/docs"):
            # Until the stored connectors are loaded, a request could create a second copy of one.
            return error_response(503, "The worker is still starting: its stored connectors are not loaded yet; retry shortly")
        return await call_next(request)


def _error_handlers(app: FastAPI, herder: Herder) -> None:
    """Every error in Kafka Connect's body, its text masked."""

    @app.exception_handler(ConnectError)
    async def connect_error(_request: Request, exc: ConnectError):
        if isinstance(exc, ConnectorNotFound):
            return error_response(404, str(exc))
        if isinstance(exc, (ConnectorExists, StateConflict)):
            return error_response(409, str(exc))
        if isinstance(exc, ConfigError):
            return error_response(400, herder.redactor.redact(_config_error_message(exc)))
        if isinstance(exc, (BadRequest, PluginError)):
            return error_response(400, herder.redactor.redact(str(exc)))
        return error_response(500, herder.redactor.redact(str(exc)))

    @app.exception_handler(RequestValidationError)  # FastAPI's 422, in Kafka Connect's shape
    async def request_invalid(_request: Request, exc: RequestValidationError):
        return request_error(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException):
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def internal_error(_request: Request, exc: Exception):
        return error_response(500, herder.redactor.redact(f"{type(exc).__name__}: {exc}"))
