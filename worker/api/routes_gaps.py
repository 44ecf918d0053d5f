"""A connector's source gaps (``worker.herding.gaps``): ``GET /connectors/{name}/gaps`` and
``POST /connectors/{name}/gaps/acknowledge`` with ``{"by": "<who>"}`` (200 with the gaps)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.concurrency import run_in_threadpool

from worker.api.jsonbody import body_schema, read_body
from worker.herder import Herder

__all__ = ["gap_routes"]

_ACK = body_schema({"type": "object", "required": ["by"], "properties": {"by": {"type": "string"}}},
                   "Who acknowledges the connector's open source gaps (recorded with the time).")


def gap_routes(app: FastAPI, herder: Herder) -> None:
    call = run_in_threadpool

    @app.get("/connectors/{name}/gaps")
    async def connector_gaps(name: str):
        return await call(herder.gaps, name)

    @app.post("/connectors/{name}/gaps/acknowledge", openapi_extra=_ACK)
    async def acknowledge_gaps(name: str, request: Request):
        body = await read_body(request)
        return await call(herder.acknowledge_gaps, name, body)
