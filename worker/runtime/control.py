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
secret too. When the pending places are taken, a new connection takes the place of the oldest
pending one (of its own address first; see :class:`_Server`), so idle peers cannot lock the
executors out.

In cluster mode (``tls=True``) the whole exchange, the secret first, runs inside TLS 1.3 with a
certificate made for this run and pinned by the executors (:mod:`worker.runtime.controltls`).
"""

from __future__ import annotations

import collections
import logging
import secrets
import socket
import socketserver
import threading
import time
from typing import Any, Callable

import orjson

from worker.runtime.controltls import ServerTLS, client_wrap, handshake

__all__ = ["ControlServer", "ControlClient", "client_for", "ControlAddress", "hello", "MAX_LINE", "MAX_CONNECTIONS"]

log = logging.getLogger(__name__)

ControlAddress = tuple[str, int, str, str]  # host, port, secret, SHA-256 of the TLS certificate ("": plain)

Handler = Callable[[dict[str, Any]], Any]

MAX_CONNECTIONS = 512
MAX_UNAUTHENTICATED = 64
MAX_UNAUTHENTICATED_PER_PEER = 16
MAX_LINE = 64 << 20  # a delegated epoch's spec (pickled classes included) fits with room to spare
_HELLO_TIMEOUT_S = 3.0  # for the whole line: clients send it right after connecting


def _read_hello(sock: socket.socket, size: int, deadline: float) -> bytes | None:
    """The first ``size`` bytes of a connection, all by ``deadline`` (absolute: a peer trickling
    bytes cannot hold the connection longer); None if they do not come."""
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


class _Place:
    __slots__ = ("sock", "peer")

    def __init__(self, sock: socket.socket, peer: str):
        self.sock = sock  # the connection as its handler now holds it (plain, then TLS-wrapped)
        self.peer = peer


class _Server(socketserver.ThreadingTCPServer):
    """Counts the connections it serves: at most MAX_CONNECTIONS in all, of which at most
    MAX_UNAUTHENTICATED have not sent the secret yet, at most MAX_UNAUTHENTICATED_PER_PEER of them
    from one address. A new connection is never turned away for want of a pending place: the oldest
    pending connection of its own address goes when that address is at its cap, else the oldest of
    the address holding the most pending places. So idle or slow peers cannot lock the executors
    out, and a peer flooding connections only churns its own places."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # socketserver's 5 drops connections (1 s SYN retries) when many arrive at once

    def __init__(self, *args, **kwargs):
        self._lock = threading.Lock()
        self._open: dict[int, _Place] = {}  # id() of the accepted socket -> its place
        self.pending: dict[int, _Place] = {}  # the same, not authenticated yet, oldest first
        super().__init__(*args, **kwargs)

    def verify_request(self, request, client_address) -> bool:
        peer = str(client_address[0]) if isinstance(client_address, tuple) else str(client_address)
        with self._lock:
            mine = [key for key, place in self.pending.items() if place.peer == peer]
            victim = None
            if len(mine) >= MAX_UNAUTHENTICATED_PER_PEER:
                victim = mine[0]
            elif len(self.pending) >= MAX_UNAUTHENTICATED or (len(self._open) >= MAX_CONNECTIONS and self.pending):
                counts = collections.Counter(place.peer for place in self.pending.values())
                crowd = max(counts, key=lambda p: counts[p])
                victim = next(key for key, place in self.pending.items() if place.peer == crowd)
            if victim is not None:
                self._evict(victim)
            if len(self._open) >= MAX_CONNECTIONS:  # all authenticated: closed at once
                return False
            self._open[id(request)] = self.pending[id(request)] = _Place(request, peer)
            return True

    def _evict(self, key: int) -> None:
        """End a pending connection (the caller holds the lock): its handler wakes to a closed socket."""
        place = self._open.pop(key)
        self.pending.pop(key, None)
        try:  # the plain socket's shutdown, also under TLS: it wakes the handler, whatever it waits in
            socket.socket.shutdown(place.sock, socket.SHUT_RDWR)
        except OSError:
            pass

    def holds(self, request, sock: socket.socket) -> bool:
        """The handler of ``request`` now talks over ``sock``; False if it was evicted meanwhile."""
        with self._lock:
            place = self._open.get(id(request))
            if place is not None:
                place.sock = sock
            return place is not None

    def authenticated(self, request) -> bool:
        """The peer sent the secret; False if its place was taken from it meanwhile."""
        with self._lock:
            return self.pending.pop(id(request), None) is not None

    def shutdown_request(self, request) -> None:
        with self._lock:  # only a connection that took a place gives one back
            self._open.pop(id(request), None)
            self.pending.pop(id(request), None)
        super().shutdown_request(request)

    def handle_error(self, request, client_address) -> None:
        log.debug("control channel: connection from %s failed", client_address, exc_info=True)


class ControlServer:
    """Driver side: answers ``op`` requests with the registered handlers, on a background thread.

    ``tls`` (cluster mode): the channel is TLS 1.3 with a key and certificate made for this server
    (:mod:`worker.runtime.controltls`), pinned by the clients through the address's fourth field."""

    def __init__(self, host: str = "127.0.0.1", *, tls: bool = False):
        self.secret = secrets.token_hex(16)
        self._handlers: dict[str, Handler] = {}
        self._tls = ServerTLS() if tls else None
        outer = self

        class _RequestHandler(socketserver.BaseRequestHandler):
            def setup(self) -> None:
                self.sock: socket.socket = self.request
                self.rfile = self.wfile = None

            def handle(self) -> None:
                deadline = time.monotonic() + _HELLO_TIMEOUT_S
                if outer._tls is not None:
                    try:
                        self.sock = outer._tls.context.wrap_socket(self.request, server_side=True,
                                                                   do_handshake_on_connect=False)
                        if not self.server.holds(self.request, self.sock):
                            return
                        handshake(self.sock, deadline)
                    except OSError:  # not TLS, a failed handshake, too slow, or evicted
                        return
                expected = hello(outer.secret)
                first = _read_hello(self.sock, len(expected), deadline)
                if first is None or not secrets.compare_digest(first, expected):
                    if first is not None:
                        self._send({"error": "wrong secret"})
                    return
                if not self.server.authenticated(self.request):
                    return
                self.sock.settimeout(None)
                self.rfile, self.wfile = self.sock.makefile("rb"), self.sock.makefile("wb")
                while True:
                    line = self.rfile.readline(MAX_LINE + 1)
                    if not line:
                        return
                    if len(line) > MAX_LINE:
                        self._send({"error": f"request longer than {MAX_LINE} bytes"})
                        return
                    try:
                        answer = outer._answer(orjson.loads(line))
                    except Exception as exc:  # noqa: BLE001 - report to the caller, keep serving
                        answer = {"error": f"{type(exc).__name__}: {exc}"}
                    self._send(answer)

            def _send(self, answer: Any) -> None:
                self.sock.sendall(orjson.dumps(answer) + b"\n")

            def finish(self) -> None:
                for f in (self.rfile, self.wfile):
                    if f is not None:
                        try:
                            f.close()
                        except OSError:
                            pass
                if self.sock is not self.request:
                    self.sock.close()

        self._server = _Server((host, 0), _RequestHandler)
        self.address: ControlAddress = (host, self._server.server_address[1], self.secret,
                                        self._tls.pin if self._tls is not None else "")
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="connect-control", daemon=True)
        self._thread.start()

    @property
    def tls(self) -> bool:
        return self._tls is not None

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
        self.host, self.port, self._secret = address[:3]
        self._pin = address[3] if len(address) > 3 else ""
        self._timeout = timeout
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._file = None

    def _connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), timeout=self._timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = client_wrap(sock, self._pin, self._timeout) if self._pin else sock
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
        if client is None or (client._secret, client._pin) != (address[2], address[3] if len(address) > 3 else ""):
            client = _CLIENTS[key] = ControlClient(address)
        return client
