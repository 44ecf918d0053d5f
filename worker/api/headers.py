"""The security headers every answer of the worker's HTTP server carries, whatever the route.

The console (``/ui``) keeps the operator's token in the tab's ``sessionStorage``; every page of
the same origin could read it. So every answer - JSON, ``/docs``, ``/metrics``, a 404, a refusal of
the REST guard, a 401 - says the same as the console's page: scripts, styles and requests only
from this origin (``default-src 'self'``, no inline script), never framed, no MIME sniffing, no
referrer. A route may set its own ``Cache-Control``; the others get ``no-store`` (answers may hold
configs).
"""

from __future__ import annotations

__all__ = ["SECURITY_HEADERS", "SecurityHeaders"]

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_DEFAULTS = [(k.lower().encode(), v.encode()) for k, v in {**SECURITY_HEADERS, "Cache-Control": "no-store"}.items()]


class SecurityHeaders:
    """ASGI middleware adding :data:`SECURITY_HEADERS` (and a default ``Cache-Control``) to every
    HTTP answer that does not set them already. Outermost, so the guard's refusals get them too."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in _DEFAULTS if k not in present]
                message = {**message, "headers": headers}
            await send(message)

        return await self.app(scope, receive, send_with_headers)
