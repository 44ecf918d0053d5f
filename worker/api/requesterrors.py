"""Request validation errors (a path or query parameter FastAPI cannot convert) in Kafka Connect's
shape, ``{"error_code": N, "message": "..."}``, instead of FastAPI's 422 body.

A path parameter that does not parse (``/connectors/x/tasks/abc/status``) answers 404, as Kafka
Connect's JAX-RS resources do (no such resource); anything else 400. The message names the parameter
and the rule, not the value sent.
"""

from __future__ import annotations

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

__all__ = ["request_error"]

_WHERE = {"path": "path parameter", "query": "query parameter", "header": "header", "cookie": "cookie",
          "body": "body"}


def request_error(exc: RequestValidationError) -> JSONResponse:
    problems, code = [], 400
    for error in exc.errors():
        loc = [str(part) for part in error.get("loc", ())]
        where = _WHERE.get(loc[0], loc[0]) if loc else "request"
        if loc and loc[0] == "path":
            code = 404
        name = ".".join(loc[1:]) or "?"
        rule = str(error.get("msg", "invalid")).replace("Input should be", "must be")
        problems.append(f"{where} {name}: {rule}")
    return JSONResponse({"error_code": code, "message": "; ".join(problems) or "invalid request"}, status_code=code)
