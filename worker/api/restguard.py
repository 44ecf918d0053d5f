"""What the REST API refuses before any route sees a request: browsers driving it, floods, odd bodies.

The worker's API changes what the worker runs and where data goes, so a web page the operator
happens to visit must not be able to use it through the operator's browser, with or without
authentication turned on:

- **DNS rebinding**: a page served from ``evil.example`` whose name later resolves to 127.0.0.1
  sends its requests with ``Host: evil.example``. Only IP literals and the names in
  ``rest.allowed.hosts`` (loopback names by default) are answered; others get 421.
- **Cross-site requests** (CSRF): a browser adds ``Origin`` to every cross-origin POST, PUT,
  PATCH and DELETE (``fetch`` in ``no-cors`` mode and HTML forms included). A request whose
  ``Origin`` is neither the worker's own nor listed in ``rest.allowed.origins`` gets 403. Non-browser
  clients (curl, the CLI, Kafka Connect tooling) send no ``Origin`` and are not affected.
- **Bodies**: a request that carries a body must say ``Content-Type: application/json`` (415
  otherwise, so an HTML form's ``text/plain`` cannot smuggle JSON); at most ``rest.max.body.bytes``
  are read, whatever ``Content-Length`` claims (413 beyond). JSON nesting is bounded by
  :func:`check_depth` where bodies are parsed.

Every refusal is Kafka Connect's error body ``{"error_code": N, "message": "..."}``.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Iterable
from urllib.parse import urlsplit

import orjson

__all__ = ["RestGuard", "check_depth", "DEFAULT_MAX_BODY", "DEFAULT_MAX_DEPTH"]

DEFAULT_MAX_BODY = 1 << 20
DEFAULT_MAX_DEPTH = 32
_WRITES = {b"POST", b"PUT", b"PATCH", b"DELETE"}


def _host_name(host: str) -> str:
    """The name part of a Host header value (port and IPv6 brackets removed), lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host[1:]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def check_depth(value: Any, limit: int) -> str | None:
    """None when ``value`` nests at most ``limit`` objects/arrays deep, else the JSON path where
    the limit is crossed (iterative: a hostile body cannot exhaust the stack)."""
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth + 1 > limit:
                return path
            children = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in children:
                if isinstance(child, (dict, list)):
                    where = f"{path}.{key}" if isinstance(key, str) else f"{path}[{key}]"
                    stack.append((child, where, depth + 1))
    return None


class RestGuard:
    """ASGI middleware enforcing the module's rules before the application runs."""

    def __init__(self, app, *, allowed_hosts: Iterable[str] = ("localhost",), allowed_origins: Iterable[str] = (),
                 max_body: int = DEFAULT_MAX_BODY):
        self.app = app
        hosts = {h.strip().lower() for h in allowed_hosts if h.strip()}
        self.any_host = "*" in hosts
        self.hosts = hosts - {"*"}
        self.origins = {o.strip().rstrip("/").lower() for o in allowed_origins if o.strip()}
        self.max_body = max_body

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        host = headers.get(b"host", b"").decode("latin-1")
        refusal = self._refusal(scope, headers, host)
        if refusal is not None:
            return await _answer(send, *refusal)
        if scope["method"].encode() not in _WRITES:
            return await self.app(scope, receive, send)
        body, refusal = await self._read_body(headers, receive)
        if refusal is not None:
            return await _answer(send, *refusal)
        if body and not _is_json(headers.get(b"content-type", b"")):
            return await _answer(send, 415, "request bodies must be JSON: send Content-Type: application/json")
        return await self.app(scope, _replay(body, receive), send)

    def _refusal(self, scope, headers: dict[bytes, bytes], host: str) -> tuple[int, str] | None:
        name = _host_name(host)
        if not name:
            return 400, "a Host header is required"
        if not (self.any_host or _is_ip(name) or name in self.hosts):
            return 421, ("this worker does not answer for that Host name; an operator can add it to "
                         "rest.allowed.hosts")
        origin = headers.get(b"origin")
        if origin is not None:
            text = origin.decode("latin-1").strip().rstrip("/").lower()
            parts = urlsplit(text)
            same = parts.scheme in ("http", "https") and parts.netloc == host.strip().lower()
            if not same and text not in self.origins:
                return 403, ("cross-origin requests are refused (the Origin is not this worker's own); an operator "
                             "can allow an origin with rest.allowed.origins")
        return None

    async def _read_body(self, headers: dict[bytes, bytes], receive) -> tuple[bytes, tuple[int, str] | None]:
        too_big = (413, f"request body larger than {self.max_body} bytes (rest.max.body.bytes)")
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                if int(declared) > self.max_body:
                    return b"", too_big
            except ValueError:
                return b"", (400, "Content-Length is not a number")
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return b"", too_big
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks), None


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def _replay(body: bytes, receive):
    """A ``receive`` that gives the body read already, then waits on the connection as before
    (a disconnect is still seen by whoever listens for one)."""
    sent = False

    async def replayed():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _answer(send, status: int, message: str) -> None:
    body = orjson.dumps({"error_code": status, "message": message})
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
