"""Kafka Connect's active topics (KIP-558): ``GET /connectors/{name}/topics`` answers
``{"<name>": {"topics": [...]}}``, the topics the connector's task pairs have read records from
(:mod:`worker.telemetry.topics`); ``PUT /connectors/{name}/topics/reset`` empties that set (202).
Both answer 404 for an unknown connector."""

from __future__ import annotations

from fastapi import FastAPI, Response

from worker.herder import ConnectorNotFound, Herder

__all__ = ["topic_routes"]


def topic_routes(app: FastAPI, herder: Herder) -> None:
    def known(name: str) -> None:
        if name not in herder.connector_names():
            raise ConnectorNotFound(f"Connector {name} not found")

    @app.get("/connectors/{name}/topics")
    async def active_topics(name: str):
        known(name)
        return {name: {"topics": herder.active_topics.topics(name)}}

    @app.put("/connectors/{name}/topics/reset", status_code=202)
    async def reset_active_topics(name: str):
        known(name)
        herder.active_topics.reset(name)
        return Response(status_code=202)
