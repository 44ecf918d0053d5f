"""PIP-18 onboarding (``worker.replication.replicators``): ``/replicators`` add, list, inspect,
remove, per-topic start/stop and stats."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request, Response
from starlette.concurrency import run_in_threadpool

from worker.api.jsonbody import read_body
from worker.herder import ConnectorNotFound

__all__ = ["replicator_routes"]

_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_REPLICATOR = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["namespace", "type", "region", "topicMapping", "replicationProperties"],
    "properties": {"namespace": {"type": "string"}, "type": {"type": "string", "enum": ["kafka", "pulsar", "rocketmq"]},
                   "region": {"type": "string"}, "source": _MAP, "topicMapping": _MAP,
                   "replicationProperties": _MAP, "authPlugin": {"type": "string"}, "authParam": _MAP,
                   "config": _MAP}}}}}}


def replicator_routes(app: FastAPI, replicators: Any, metrics: Any) -> None:
    call = run_in_threadpool

    @app.post("/replicators", status_code=201, openapi_extra=_REPLICATOR)
    async def add_replicator(request: Request):
        return await call(replicators.add, await read_body(request))

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
