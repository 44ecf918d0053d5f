"""A connector's state, task pairs and offsets: ``GET .../status``, ``GET .../tasks``,
``GET .../tasks/{task}/status``, restarts (KIP-745: ``?includeTasks``, ``?onlyFailed``; 202 with
the status, or 204), ``PUT .../pause`` / ``resume`` (202) / ``stop`` (204), and KIP-875's
``GET/PATCH/DELETE .../offsets`` (altered or reset only while STOPPED: 409 otherwise)."""

from __future__ import annotations

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from worker.api.jsonbody import body_schema, bool_param, read_body
from worker.herder import PAUSED, STOPPED, Herder

__all__ = ["state_routes"]

_OFFSETS = body_schema({"type": "object", "required": ["offsets"], "properties": {"offsets": {
    "type": "array", "items": {"type": "object", "required": ["partition", "offset"], "properties": {
        "partition": {"type": "object"}, "offset": {"type": ["object", "null"]}}}}}},
    "Offsets to set (an object) or remove (null), per source partition as GET .../offsets shows them.")


def state_routes(app: FastAPI, herder: Herder) -> None:
    call = run_in_threadpool

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
        include_tasks = bool_param(request, "includeTasks")
        only_failed = bool_param(request, "onlyFailed")
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

    @app.get("/connectors/{name}/offsets")
    async def get_offsets(name: str):
        return await call(herder.offsets, name)

    @app.patch("/connectors/{name}/offsets", openapi_extra=_OFFSETS)
    async def alter_offsets(name: str, request: Request):
        body = await read_body(request)
        return await call(herder.alter_offsets, name, body)

    @app.delete("/connectors/{name}/offsets")
    async def reset_offsets(name: str):
        return await call(herder.reset_offsets, name)
