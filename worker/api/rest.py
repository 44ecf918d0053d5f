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

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from connect.errors import ConfigError, ConnectError, PluginError
from connect.secrets import MASK
from worker.api.docs import docs_routes, swagger_ui_files
from worker.api.headers import SecurityHeaders
from worker.api.requesterrors import request_error
from worker.api.restguard import DEFAULT_MAX_BODY, DEFAULT_MAX_DEPTH, RestGuard, check_depth
from worker.api.routes_loggers import logger_routes
from worker.api.routes_plugins import plugin_routes
from worker.api.routes_topics import topic_routes
from worker.console.model import ConsoleHistory, ConsoleViews
from worker.console.web import CONSOLE_PREFIX, UI_PREFIX, console_routes
from worker.herder import PAUSED, STOPPED, BadRequest, ConnectorExists, ConnectorNotFound, Herder, StateConflict

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


def _error(code: int, message: str) -> JSONResponse:
    return JSONResponse({"error_code": code, "message": message}, status_code=code)


def _config_error_message(exc: ConfigError) -> str:
    issues = exc.issues
    lines = [f"{i.key}: {i.message}" + (f" (value {i.value!r})" if i.value not in (None, MASK) else "") for i in issues]
    return (f"Connector configuration is invalid and contains the following {len(issues)} error(s):\n"
            + "\n".join(lines))


async def _body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        raise BadRequest("$: a JSON body is required")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"$: not valid JSON: {exc}") from None
    limit = request.app.state.max_json_depth
    where = check_depth(body, limit)
    if where is not None:
        raise BadRequest(f"{where}: nested deeper than {limit} levels (rest.max.json.depth)")
    return body


def _bool_param(request: Request, name: str, default: str = "false") -> bool:
    value = request.query_params.get(name, default).lower()
    if value not in ("true", "false"):
        raise BadRequest(f"query parameter {name}: must be true or false, not {value!r}")
    return value == "true"


_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_STATE = {"type": "string", "enum": ["RUNNING", "PAUSED", "STOPPED"]}


def _body_schema(schema: dict[str, Any], description: str) -> dict[str, Any]:
    """OpenAPI ``requestBody`` of a route that reads its JSON body itself (to name JSON paths in errors)."""
    return {"requestBody": {"required": True, "description": description,
                            "content": {"application/json": {"schema": schema}}}}


_CREATE = _body_schema({"type": "object", "required": ["name", "config"], "properties": {
    "name": {"type": "string"}, "config": _STRINGS, "initial_state": _STATE}}, "A connector: name, config, initial state.")
_CONFIG = _body_schema(_STRINGS, "The connector's whole config (keys to string values).")
_PATCH = _body_schema({"type": "object", "additionalProperties": {"type": ["string", "null"]}},
                      "Config keys to change; null removes a key.")
_OFFSETS = _body_schema({"type": "object", "required": ["offsets"], "properties": {"offsets": {
    "type": "array", "items": {"type": "object", "required": ["partition", "offset"], "properties": {
        "partition": {"type": "object"}, "offset": {"type": ["object", "null"]}}}}}},
    "Offsets to set (an object) or remove (null), per source partition as GET .../offsets shows them.")


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
    auth = auth or RestAuth()

    @app.middleware("http")
    async def authenticate(request: Request, call_next: Callable):
        path = request.url.path
        ui = path == UI_PREFIX or path.startswith(f"{UI_PREFIX}/")
        console = ui or path.startswith(CONSOLE_PREFIX)
        # The console's page holds no data; with only a token (a browser cannot be asked for one)
        # it loads without credentials and asks for the token itself (``worker.console.web``).
        open_page = ui and auth.basic is None
        if auth.enabled and path != "/health" and not open_page and not auth.allows(request.headers.get("authorization")):
            response = _error(401, "Authentication required: send Authorization: Bearer <token> or Basic credentials")
            # The console's page and documents, with basic credentials configured: Basic alone is the
            # challenge, which a browser answers by asking for them (and then sends them itself).
            response.headers["WWW-Authenticate"] = ('Basic realm="connect", charset="UTF-8"'
                                                    if console and auth.basic is not None
                                                    else 'Bearer, Basic realm="connect"')
            return response
        if not herder.started.is_set() and not ui and path not in ("/", "/health", "/openapi.json", "/docs"):
            # Until the stored connectors are loaded, a request could create a second copy of one.
            return _error(503, "The worker is still starting: its stored connectors are not loaded yet; retry shortly")
        return await call_next(request)

    @app.exception_handler(ConnectError)
    async def connect_error(_request: Request, exc: ConnectError):
        if isinstance(exc, ConnectorNotFound):
            return _error(404, str(exc))
        if isinstance(exc, (ConnectorExists, StateConflict)):
            return _error(409, str(exc))
        if isinstance(exc, ConfigError):
            return _error(400, herder.redactor.redact(_config_error_message(exc)))
        if isinstance(exc, (BadRequest, PluginError)):
            return _error(400, herder.redactor.redact(str(exc)))
        return _error(500, herder.redactor.redact(str(exc)))

    @app.exception_handler(RequestValidationError)  # FastAPI's 422, in Kafka Connect's shape
    async def request_invalid(_request: Request, exc: RequestValidationError):
        return request_error(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException):
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def internal_error(_request: Request, exc: Exception):
        return _error(500, herder.redactor.redact(f"{type(exc).__name__}: {exc}"))

    call = run_in_threadpool

    # -- worker -----------------------------------------------------------------------------
    @app.get("/")
    async def root():
        return {"version": VERSION, "commit": "", "kafka_cluster_id": None, "worker_id": herder.worker_id}

    @app.get("/health")
    async def health():
        if not herder.started.is_set():
            return JSONResponse({"status": "starting", "message": "Worker is still starting up."}, status_code=503)
        return {"status": "healthy", "message": "Worker has completed startup and is ready to handle requests."}

    @app.get("/metrics")
    async def prometheus():
        if metrics is None:
            return Response("", media_type="text/plain")
        body, content_type = await call(metrics.render)
        # Label values (topics, connector names) may have come from a provider: mask them too.
        return Response(herder.redactor.redact(body.decode()).encode(), media_type=content_type)

    # -- connectors -------------------------------------------------------------------------
    @app.get("/connectors")
    async def list_connectors(request: Request):
        expand = request.query_params.getlist("expand")
        bad = [e for e in expand if e not in ("status", "info")]
        if bad:
            raise BadRequest(f"query parameter expand: must be status or info, not {bad[0]!r}")
        return await call(_listing, expand)

    def _listing(expand: list[str]):
        names = herder.connector_names()
        if not expand:
            return names
        out: dict[str, dict[str, Any]] = {}
        for name in names:
            entry = {}
            try:
                if "status" in expand:
                    entry["status"] = herder.status(name)
                if "info" in expand:
                    entry["info"] = herder.info(name)
            except ConnectorNotFound:  # deleted meanwhile
                continue
            out[name] = entry
        return out

    @app.post("/connectors", status_code=201, openapi_extra=_CREATE)
    async def create_connector(request: Request):
        body = await _body(request)
        if not isinstance(body, dict):
            raise BadRequest('$: must be an object {"name": ..., "config": {...}, "initial_state"?: ...}')
        unknown = sorted(set(body) - {"name", "config", "initial_state"})
        if unknown:
            raise BadRequest(f"$.{unknown[0]}: unknown field")
        if "config" not in body:
            raise BadRequest("$.config: missing")
        name = body.get("name")
        config = body.get("config")
        if isinstance(config, dict) and name is None:
            name = config.get("name")
        state = body.get("initial_state", "RUNNING")
        if isinstance(state, str):
            state = state.upper()
        info = await call(herder.create, name, config, state)
        return JSONResponse(info, status_code=201, headers={"Location": f"/connectors/{info['name']}"})

    @app.get("/connectors/{name}")
    async def get_connector(name: str):
        return await call(herder.info, name)

    @app.delete("/connectors/{name}", status_code=204)
    async def delete_connector(name: str):
        await call(herder.delete, name)
        return Response(status_code=204)

    @app.get("/connectors/{name}/config")
    async def get_config(name: str):
        return (await call(herder.info, name))["config"]

    @app.put("/connectors/{name}/config", openapi_extra=_CONFIG)
    async def put_config(name: str, request: Request):
        body = await _body(request)
        created, info = await call(herder.put_config, name, body)
        return JSONResponse(info, status_code=201 if created else 200)

    @app.patch("/connectors/{name}/config", openapi_extra=_PATCH)
    async def patch_config(name: str, request: Request):
        body = await _body(request)
        return await call(herder.patch_config, name, body)

    @app.get("/connectors/{name}/status")
    async def connector_status(name: str):
        return await call(herder.status, name)

    @app.get("/connectors/{name}/tasks")
    async def connector_tasks(name: str):
        return await call(herder.task_configs, name)

    @app.get("/connectors/{name}/tasks/{task}/status")
    async def task_status(name: str, task: int):
        return await call(herder.task_status, name, task)

    @app.post("/connectors/{name}/tasks/{task}/restart", status_code=204)
    async def restart_task(name: str, task: int):
        await call(herder.restart_task, name, task)
        return Response(status_code=204)

    @app.post("/connectors/{name}/restart")
    async def restart_connector(name: str, request: Request):
        include_tasks = _bool_param(request, "includeTasks")
        only_failed = _bool_param(request, "onlyFailed")
        status = await call(herder.restart, name, include_tasks, only_failed)
        if status is None:
            return Response(status_code=204)
        return JSONResponse(status, status_code=202)

    def _target(state: str, code: int):
        async def change(name: str):
            await call(herder.set_target, name, state)
            return Response(status_code=code)

        return change

    # As Kafka Connect: pause and resume answer 202, stop 204.
    app.put("/connectors/{name}/pause", status_code=202)(_target(PAUSED, 202))
    app.put("/connectors/{name}/resume", status_code=202)(_target("RUNNING", 202))
    app.put("/connectors/{name}/stop", status_code=204)(_target(STOPPED, 204))

    # -- offsets ----------------------------------------------------------------------------
    @app.get("/connectors/{name}/offsets")
    async def get_offsets(name: str):
        return await call(herder.offsets, name)

    @app.patch("/connectors/{name}/offsets", openapi_extra=_OFFSETS)
    async def alter_offsets(name: str, request: Request):
        body = await _body(request)
        return await call(herder.alter_offsets, name, body)

    @app.delete("/connectors/{name}/offsets")
    async def reset_offsets(name: str):
        return await call(herder.reset_offsets, name)

    # -- plugins, active topics (KIP-558), loggers (KIP-495) -----------------------------------
    plugin_routes(app, herder, _body)
    topic_routes(app, herder)
    logger_routes(app, _body)

    if replicators is not None:
        _replicator_routes(app, replicators, metrics)
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


_REPLICATOR = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["namespace", "type", "region", "topicMapping", "replicationProperties"],
    "properties": {"namespace": {"type": "string"}, "type": {"type": "string", "enum": ["kafka", "pulsar", "rocketmq"]},
                   "region": {"type": "string"}, "source": {"type": "object", "additionalProperties": {"type": "string"}},
                   "topicMapping": {"type": "object", "additionalProperties": {"type": "string"}},
                   "replicationProperties": {"type": "object", "additionalProperties": {"type": "string"}},
                   "authPlugin": {"type": "string"},
                   "authParam": {"type": "object", "additionalProperties": {"type": "string"}},
                   "config": {"type": "object", "additionalProperties": {"type": "string"}}}}}}}}


def _replicator_routes(app: FastAPI, replicators: Any, metrics: Any) -> None:
    """PIP-18 onboarding (``worker.replication.replicators``): add, list, inspect, remove, per-topic start/stop, stats."""
    call = run_in_threadpool

    @app.post("/replicators", status_code=201, openapi_extra=_REPLICATOR)
    async def add_replicator(request: Request):
        return await call(replicators.add, await _body(request))

    @app.get("/replicators")
    async def list_replicators():
        return await call(replicators.list)

    @app.get("/replicators/{rid}")
    async def get_replicator(rid: str):
        return await call(replicators.get, rid)

    @app.delete("/replicators/{rid}", status_code=204)
    async def remove_replicator(rid: str):
        await call(replicators.remove, rid)
        return Response(status_code=204)

    @app.get("/replicators/{rid}/stats")
    async def replicator_stats(rid: str):
        return await call(replicators.stats, rid, metrics)

    @app.put("/replicators/{rid}/topics/{topic}/{action}", status_code=202)
    async def replicator_topic(rid: str, topic: str, action: str):
        if action not in ("start", "stop"):
            raise ConnectorNotFound(f"No action {action!r} (start or stop)")
        return await call(replicators.set_topic, rid, topic, action)
