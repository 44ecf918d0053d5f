"""The worker itself: ``GET /`` (version and worker id, as Kafka Connect), ``GET /health``
(503 until the stored connectors are loaded) and ``GET /metrics`` (Prometheus text, masked)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from worker.herder import Herder

__all__ = ["admin_routes"]


def admin_routes(app: FastAPI, herder: Herder, metrics: Any, version: str) -> None:
    @app.get("/")
    async def root():
        return {"version": version, "commit": "", "kafka_cluster_id": None, "worker_id": herder.worker_id}

    @app.get("/health")
    async def health():
        if not herder.started.is_set():
            return JSONResponse({"status": "starting", "message": "Worker is still starting up."}, status_code=503)
        return {"status": "healthy", "message": "Worker has completed startup and is ready to handle requests."}

    @app.get("/metrics")
    async def prometheus():
        if metrics is None:
            return Response("", media_type="text/plain")
        body, content_type = await run_in_threadpool(metrics.render)
        # Label values (topics, connector names) may have come from a provider: mask them too.
        return Response(herder.redactor.redact(body.decode()).encode(), media_type=content_type)
