"""Connectors as Kafka Connect's REST API manages them: ``GET/POST /connectors`` (``?expand=status``
and ``info``), ``GET/DELETE /connectors/{name}``, ``GET/PUT/PATCH /connectors/{name}/config``.
A created connector answers 201 with its ``Location``; ``PUT .../config`` answers 201 when it
created the connector, 200 when it changed one."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from worker.api.jsonbody import STATE, STRINGS, body_schema, read_body
from worker.herder import BadRequest, ConnectorNotFound, Herder

__all__ = ["connector_routes"]

_CREATE = body_schema({"type": "object", "required": ["name", "config"], "properties": {
    "name": {"type": "string"}, "config": STRINGS, "initial_state": STATE}}, "A connector: name, config, initial state.")
_CONFIG = body_schema(STRINGS, "The connector's whole config (keys to string values).")
_PATCH = body_schema({"type": "object", "additionalProperties": {"type": ["string", "null"]}},
                     "Config keys to change; null removes a key.")


def connector_routes(app: FastAPI, herder: Herder) -> None:
    call = run_in_threadpool

    @app.get("/connectors")
    async def list_connectors(request: Request):
        expand = request.query_params.getlist("expand")
        bad = [e for e in expand if e not in ("status", "info")]
        if bad:
            raise BadRequest(f"query parameter expand: must be status or info, not {bad[0]!r}")
        return await call(_listing, herder, expand)

    @app.post("/connectors", status_code=201, openapi_extra=_CREATE)
    async def create_connector(request: Request):
        name, config, state = _creation(await read_body(request))
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
        body = await read_body(request)
        created, info = await call(herder.put_config, name, body)
        return JSONResponse(info, status_code=201 if created else 200)

    @app.patch("/connectors/{name}/config", openapi_extra=_PATCH)
    async def patch_config(name: str, request: Request):
        body = await read_body(request)
        return await call(herder.patch_config, name, body)


def _listing(herder: Herder, expand: list[str]):
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


def _creation(body: Any) -> tuple[Any, Any, Any]:
    """(name, config, initial state) of a ``POST /connectors`` body; the herder checks their values."""
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
    return name, config, state
