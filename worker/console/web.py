"""The console's HTTP surface: the page at ``/ui``, its assets, and the two JSON documents it polls.

Every asset ships in this package (``worker/console/assets``: one HTML page, one script, one style
sheet, all written for this project, no third-party code, nothing fetched from the internet) and is
read once, when the app is built. Only the files listed in :data:`ASSETS` are served: a path names
a file of that list or gets 404, so nothing else of the package or the disk can be reached.

Authentication is the REST API's (``worker.api.rest``): with basic credentials configured, ``/ui``
answers 401 with a ``Basic`` challenge, so a browser asks for them and sends them with every
request the page makes. With only a bearer token configured (a browser cannot be asked for one),
the page and its assets - which hold no data - load without credentials and the page asks for the
token, keeps it in the tab's ``sessionStorage`` and sends it as ``Authorization: Bearer``; every
JSON document and action still needs it.

The page is framed by nobody (``frame-ancestors 'none'``: a page elsewhere cannot overlay the
Pause button) and runs only its own script (``script-src 'self'``); the REST guard already refuses
cross-origin writes.
"""

from __future__ import annotations

from importlib import resources

import orjson
from fastapi import FastAPI, Response
from starlette.concurrency import run_in_threadpool

from worker.api.headers import SECURITY_HEADERS
from worker.console.model import ConsoleViews

__all__ = ["console_routes", "ASSETS", "UI_PREFIX", "CONSOLE_PREFIX"]

UI_PREFIX = "/ui"
CONSOLE_PREFIX = "/console/"  # the JSON documents the page polls
ASSETS = {"console.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8"}
_PAGE = "index.html"
_HEADERS = {**SECURITY_HEADERS, "Cache-Control": "no-cache"}  # the whole server's, see worker.api.headers


def _read(name: str) -> bytes:
    return resources.files("worker.console").joinpath("assets", name).read_bytes()


def console_routes(app: FastAPI, views: ConsoleViews, redact) -> None:
    """Add ``/ui``, ``/ui/assets/<file>``, ``GET /console/summary`` and ``GET /console/connectors/{name}``."""
    page = _read(_PAGE)
    assets = {name: _read(name) for name in ASSETS}

    def json_answer(doc) -> Response:
        # Masked again as a whole, as /metrics is: a trace or a reason may quote a provided value.
        body = redact(orjson.dumps(doc).decode())
        return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})

    @app.get(UI_PREFIX, include_in_schema=False)
    @app.get(f"{UI_PREFIX}/", include_in_schema=False)
    async def ui_page():
        return Response(page, media_type="text/html; charset=utf-8", headers=_HEADERS)

    @app.get(f"{UI_PREFIX}/assets/{{name}}", include_in_schema=False)
    async def ui_asset(name: str):
        if name not in assets:
            return Response(orjson.dumps({"error_code": 404, "message": f"no console asset {name!r}"}),
                            status_code=404, media_type="application/json")
        return Response(assets[name], media_type=ASSETS[name], headers=_HEADERS)

    @app.get(f"{CONSOLE_PREFIX}summary", summary="Every connector as a flow between clusters, for the console")
    async def console_summary():
        def build():
            views.history.sample_if_due()
            return views.summary()

        return json_answer(await run_in_threadpool(build))

    @app.get(f"{CONSOLE_PREFIX}connectors/{{name}}", summary="One connector in full, for the console's link page")
    async def console_connector(name: str):
        def build():
            views.history.sample_if_due()
            return views.detail(name)

        return json_answer(await run_in_threadpool(build))
