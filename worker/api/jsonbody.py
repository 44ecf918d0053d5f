"""What every route module reads and answers the same way: a request's JSON body (bounded in depth,
errors as 400 naming the JSON path), boolean query parameters, the OpenAPI description of a body a
route reads itself, and Kafka Connect's error body ``{"error_code": N, "message": "..."}``."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import JSONResponse

from worker.api.restguard import check_depth
from worker.herder import BadRequest

__all__ = ["error_response", "read_body", "bool_param", "body_schema", "STRINGS", "STATE"]

STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
STATE = {"type": "string", "enum": ["RUNNING", "PAUSED", "STOPPED"]}


def error_response(code: int, message: str) -> JSONResponse:
    return JSONResponse({"error_code": code, "message": message}, status_code=code)


async def read_body(request: Request) -> Any:
    """The request's JSON body; BadRequest when it is missing, not JSON or nested deeper than
    ``rest.max.json.depth`` (``app.state.max_json_depth``)."""
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


def bool_param(request: Request, name: str, default: str = "false") -> bool:
    value = request.query_params.get(name, default).lower()
    if value not in ("true", "false"):
        raise BadRequest(f"query parameter {name}: must be true or false, not {value!r}")
    return value == "true"


def body_schema(schema: dict[str, Any], description: str) -> dict[str, Any]:
    """OpenAPI ``requestBody`` of a route that reads its JSON body itself (to name JSON paths in errors)."""
    return {"requestBody": {"required": True, "description": description,
                            "content": {"application/json": {"schema": schema}}}}
