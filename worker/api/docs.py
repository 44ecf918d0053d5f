"""``/docs``: the API's browsable documentation, off unless the operator turns it on.

Off by default (``rest.docs.enabled``): the API is driven by tools (the CLI, Kafka Connect's
tooling, ``curl``), which read ``/openapi.json`` (always served); a browsable page is a convenience
whose price is a megabyte of third-party script running on the origin where the console keeps the
operator's token. FastAPI's own ``/docs`` (and ``/redoc``) would load that script from a CDN, with no
version pin and no integrity check; it is never served.

On, Swagger UI comes from an installed distribution (``swagger-ui-bundle-v2``, the ``docs`` extra:
Swagger UI 5, which reads OpenAPI 3.1), a version pinned by the installer and served from this
origin under the same security headers as every answer (``worker.api.headers``): no inline script
(the start-up script is a file of its own), nothing loaded from elsewhere. Only the three files the
page needs are served.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI, Response

from connect.errors import ConfigError, ConfigIssue

__all__ = ["DOCS_PATH", "docs_routes", "swagger_ui_files"]

DOCS_PATH = "/docs"
_TYPES = {"swagger-ui-bundle.js": "text/javascript; charset=utf-8", "swagger-ui.css": "text/css; charset=utf-8"}
_INIT = (b'window.ui = SwaggerUIBundle({url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: false,\n'
         b'  queryConfigEnabled: false, persistAuthorization: false});\n')
_PAGE = (b'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>connect-bridge worker API</title>\n'
         b'<link rel="stylesheet" href="/docs/assets/swagger-ui.css"></head>\n<body><div id="swagger-ui"></div>\n'
         b'<script src="/docs/assets/swagger-ui-bundle.js"></script>\n'
         b'<script src="/docs/assets/init.js"></script></body></html>\n')


def swagger_ui_files() -> dict[str, bytes]:
    """The Swagger UI files the page uses, read from the installed ``swagger-ui-bundle-v2`` (module
    ``swagger_ui_bundle``); ConfigError naming ``rest.docs.enabled`` and the install command when it is
    not installed."""
    try:
        root = resources.files("swagger_ui_bundle") / "vendor"
        versions = sorted((p for p in root.iterdir() if p.name.startswith("swagger-ui-")), key=lambda p: p.name)
        return {name: (versions[-1] / name).read_bytes() for name in _TYPES}
    except (ImportError, OSError, IndexError):
        raise ConfigError([ConfigIssue("rest.docs.enabled", None, "needs Swagger UI from the swagger-ui-bundle-v2 "
                                       "package: pip install 'connect-bridge[docs]' (or set it to false)")]) from None


def docs_routes(app: FastAPI, files: dict[str, bytes]) -> None:
    """Add ``/docs`` and ``/docs/assets/<file>`` serving ``files`` (:func:`swagger_ui_files`)."""
    assets = {**{n: (files[n], t) for n, t in _TYPES.items()}, "init.js": (_INIT, "text/javascript; charset=utf-8")}

    @app.get(DOCS_PATH, include_in_schema=False)
    async def docs_page():
        return Response(_PAGE, media_type="text/html; charset=utf-8", headers={"Cache-Control": "no-cache"})

    @app.get(f"{DOCS_PATH}/assets/{{name}}", include_in_schema=False)
    async def docs_asset(name: str):
        if name not in assets:
            return Response(b'{"error_code": 404, "message": "no such documentation asset"}', status_code=404,
                            media_type="application/json")
        body, media_type = assets[name]
        return Response(body, media_type=media_type, headers={"Cache-Control": "no-cache"})
