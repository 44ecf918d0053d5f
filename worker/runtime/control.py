"""The control channel between the driver and the task pairs, wherever Spark runs them.

Executors cannot be assumed to share a disk or a process with the driver, but they can always
reach it over the network (Spark itself needs that). So the driver serves a tiny line protocol
on a TCP port, and each Python worker keeps one connection to it:

- ``stop``: has the worker been asked to stop? Runners poll it (every 0.2 s) so SIGTERM ends the
  running epoch early on a cluster too;
- ``claim``: which task pair should this Spark task run? (see ``worker.runtime.partition``);
- ``offsets``: the committed offsets of the partitions a starting task asks for - and only
  those, so no task ever receives another task's offsets.

A connection starts with the run's random secret (``AUTH <secret>``, exactly that many bytes,
all within :data:`_HELLO_TIMEOUT_S`): the server reads nothing more from a peer that does not
know it, so an unauthenticated peer can make it hold at most that line, for at most that long; at
most :data:`MAX_CONNECTIONS` connections are served at once, of which at most
:data:`MAX_UNAUTHENTICATED` have not authenticated yet. Then one JSON object per line
each way (orjson), a request line at most :data:`MAX_LINE` bytes; every request carries the
secret too.
"""

from __future__ import annotations

import logging
import secrets
import socket
import socketserver
import threading
import time
from typing import Any, Callable

import orjson

__all__ = ["ControlServer", "ControlClient", "client_for", "ControlAddress", "hello", "MAX_LINE", "MAX_CONNECTIONS"]

log = logging.getLogger(__name__)

ControlAddress = tuple[str, int, str]  # host, port, secret

Handler = Callable[[dict[str, Any]], Any]

MAX_CONNECTIONS = 512
MAX_UNAUTHENTICATED = 64
MAX_LINE = 64 << 20  # a delegated epoch's spec (pickled classes included) fits with room to spare
_HELLO_TIMEOUT_S = 3.0  # for the whole line: clients send it right after connecting


def _read_hello(sock: socket.socket, size: int) -> bytes | None:
    """The first ``size`` bytes of a connection, all within _HELLO_TIMEOUT_S (an absolute
    deadline: a peer trickling bytes cannot hold the connection longer); None if they do not come."""
    deadline = time.monotonic() + _HELLO_TIMEOUT_S
    data = b""
    try:
        while len(data) < size:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            sock.settimeout(left)
            chunk = sock.recv(size - len(data))
            if not chunk:
                return None
            data += chunk
    except OSError:
        return None
    return data


def hello(secret: str) -> bytes:
    """The first line a client sends on a new connection."""
    return f"AUTH {secret}\n".encode()


class _Server(socketserver.ThreadingTCPServer):
    """Counts the connections it serves: at most MAX_CONNECTIONS in all, of which at most
    MAX_UNAUTHENTICATED have not sent the secret yet (so peers without it cannot take the places
    the executors need)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, *args, **kwargs):
        self._lock = threading.Lock()
        self._open: set[int] = set()  # id() of the sockets holding a place
        self.unauthenticated: set[int] = set()
        super().__init__(*args, **kwargs)

    def verify_request(self, request, client_address) -> bool:
        with self._lock:  # over a cap: closed at once
            if len(self._open) >= MAX_CONNECTIONS or len(self.unauthenticated) >= MAX_UNAUTHENTICATED:
                return False
            self._open.add(id(request))
            self.unauthenticated.add(id(request))
            return True

    def authenticated(self, request) -> None:
        with self._lock:
            self.unauthenticated.discard(id(request))

    def shutdown_request(self, request) -> None:
        with self._lock:  # only a connection that took a place gives one back
            self._open.discard(id(request))
            self.unauthenticated.discard(id(request))
        super().shutdown_request(request)


class ControlServer:
    """Driver side: answers ``op`` requests with the registered handlers, on a background thread."""

    def __init__(self, host: str = "127.0.0.1"):
        self.secret = secrets.token_hex(16)
        self._handlers: dict[str, Handler] = {}
        outer = self

        class _RequestHandler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                first = _read_hello(self.connection, len(hello(outer.secret)))
                if first is None or not secrets.compare_digest(first, hello(outer.secret)):
                    if first is not None:
                        self.wfile.write(orjson.dumps({"error": "wrong secret"}) + b"\n")
                    return
                self.server.authenticated(self.request)
                self.connection.settimeout(None)
                while True:
                    line = self.rfile.readline(MAX_LINE + 1)
                    if not line:
                        return
                    if len(line) > MAX_LINE:
                        self.wfile.write(orjson.dumps({"error": f"request longer than {MAX_LINE} bytes"}) + b"\n")
                        return
                    try:
                        answer = outer._answer(orjson.loads(line))
                    except Exception as exc:  # noqa: BLE001 - report to the caller, keep serving
                        answer = {"error": f"{type(exc).__name__}: {exc}"}
                    self.wfile.write(orjson.dumps(answer) + b"\n")
                    self.wfile.flush()

        self._server = _Server((host, 0), _RequestHandler)
        self.address: ControlAddress = (host, self._server.server_address[1], self.secret)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="connect-control", daemon=True)
        self._thread.start()

    def register(self, op: str, handler: Handler) -> None:
        self._handlers[op] = handler

    def _answer(self, request: dict[str, Any]) -> Any:
        if not secrets.compare_digest(str(request.get("secret", "")), self.secret):
            return {"error": "wrong secret"}
        handler = self._handlers.get(request.get("op", ""))
        if handler is None:
            return {"error": f"unknown op {request.get('op')!r}"}
        return {"ok": handler(request)}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class ControlClient:
    """Executor side: one connection to the driver, reconnected once per request if it broke."""

    def __init__(self, address: ControlAddress, timeout: float = 10.0):
        self.host, self.port, self._secret = address
        self._timeout = timeout
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._file = None

    def _connect(self) -> None:
        self._sock = socket.create_connection((self.host, self.port), timeout=self._timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.sendall(hello(self._secret))
        self._file = self._sock.makefile("rb")

    def _close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        self._sock = self._file = None

    def close(self) -> None:
        with self._lock:
            self._close()

    def request(self, op: str, **fields: Any) -> Any:
        """The handler's answer; raises ConnectionError when the driver cannot be reached."""
        payload = orjson.dumps({"op": op, "secret": self._secret, **fields}) + b"\n"
        with self._lock:
            for attempt in (1, 2):
                try:
                    if self._sock is None:
                        self._connect()
                    self._sock.sendall(payload)
                    line = self._file.readline(MAX_LINE + 1)
                    if not line:
                        raise ConnectionError("the driver closed the control connection")
                    break
                except OSError as exc:
                    self._close()
                    if attempt == 2:
                        raise ConnectionError(f"driver control channel {self.host}:{self.port}: {exc}") from exc
        answer = orjson.loads(line)
        if "error" in answer:
            raise ConnectionError(f"driver control channel refused {op!r}: {answer['error']}")
        return answer["ok"]


_CLIENTS: dict[tuple[str, int], ControlClient] = {}
_CLIENTS_LOCK = threading.Lock()


def client_for(address: ControlAddress) -> ControlClient:
    """The process-wide client of a driver (one connection per Python worker and driver)."""
    key = (address[0], address[1])
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None or client._secret != address[2]:
            client = _CLIENTS[key] = ControlClient(address)
        return client
