"""Kafka Connect's log levels at run time (KIP-495), over the worker's (the driver's) Python loggers.

- ``GET /admin/loggers``: ``{"<logger>": {"level": "INFO"}, ...}``, every logger whose level is set
  explicitly, and ``root``;
- ``GET /admin/loggers/{logger}``: ``{"level": ...}``, its effective level (404 for a logger this
  process never created);
- ``PUT /admin/loggers/{logger}`` with ``{"level": "DEBUG"}``: sets it on that logger and every
  existing logger below it (``root``: on all of them), and answers their names, sorted; 404 when
  no logger of that name or below it exists (Kafka Connect creates one: here a caller cannot make
  the worker hold loggers without bound).

Levels are Kafka Connect's (log4j) names: TRACE (Python's DEBUG), DEBUG, INFO, WARN, ERROR, FATAL,
OFF; Python's WARNING and CRITICAL are accepted too. The task pairs run in Spark's Python workers,
other processes: their loggers are not these. Authentication, where the worker has it, covers
these routes as every other (``worker.api.rest``).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request

from worker.herder import BadRequest, ConnectorNotFound

__all__ = ["logger_routes"]

ROOT = "root"
_OFF = logging.CRITICAL + 10
_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
           "WARNING": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL,
           "CRITICAL": logging.CRITICAL, "OFF": _OFF}
_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARN", logging.ERROR: "ERROR",
          logging.CRITICAL: "FATAL", _OFF: "OFF"}


def _level_name(level: int) -> str:
    return _NAMES.get(level) or logging.getLevelName(level)


def _loggers() -> dict[str, logging.Logger]:
    return {name: logger for name, logger in list(logging.root.manager.loggerDict.items())
            if isinstance(logger, logging.Logger)}


def _find(name: str) -> logging.Logger:
    if name.lower() == ROOT:
        return logging.getLogger()
    logger = _loggers().get(name)
    if logger is None:
        raise ConnectorNotFound(f"Logger {name} not found.")
    return logger


def list_levels() -> dict[str, dict[str, str]]:
    out = {name: {"level": _level_name(logger.level)} for name, logger in _loggers().items()
           if logger.level != logging.NOTSET}
    out[ROOT] = {"level": _level_name(logging.getLogger().level)}
    return dict(sorted(out.items()))


def set_level(name: str, body: Any) -> list[str]:
    if not isinstance(body, dict) or body.get("level") is None:
        raise BadRequest("$.level: the desired level was not specified in the request")
    text = body["level"]
    level = _LEVELS.get(text.upper()) if isinstance(text, str) else None
    if level is None:
        raise BadRequest(f"$.level: must be one of {', '.join(n for n in _LEVELS if n not in ('WARNING', 'CRITICAL'))}")
    if name.lower() == ROOT:
        targets = {ROOT: logging.getLogger(), **_loggers()}
    else:
        targets = {n: lg for n, lg in _loggers().items() if n == name or n.startswith(f"{name}.")}
        if not targets:  # names are bounded by what exists: a caller cannot make this process hold new loggers
            raise ConnectorNotFound(f"Logger {name} not found (no logger of that name or below it).")
        targets.setdefault(name, logging.getLogger(name))  # an ancestor of existing loggers
    for logger in targets.values():
        logger.setLevel(level)
    return sorted(targets)


_LEVEL = {"requestBody": {"required": True, "description": "The level to set.", "content": {"application/json": {
    "schema": {"type": "object", "required": ["level"], "properties": {"level": {"type": "string"}}}}}}}


def logger_routes(app: FastAPI, read_body) -> None:
    """Add the three routes; ``read_body`` reads a request's JSON body (bounded, errors as 400)."""

    @app.get("/admin/loggers")
    async def loggers():
        return list_levels()

    @app.get("/admin/loggers/{logger}")
    async def logger_level(logger: str):
        return {"level": _level_name(_find(logger).getEffectiveLevel())}

    @app.put("/admin/loggers/{logger}", openapi_extra=_LEVEL)
    async def put_logger_level(logger: str, request: Request):
        return set_level(logger, await read_body(request))
