"""A loopback TCP proxy that tests can blackhole (a network partition) and restore.

``TcpProxy(upstream_port)`` listens on a free 127.0.0.1 port (``.port``) and relays bytes both ways
to ``127.0.0.1:upstream_port`` from one selector thread.

``blackhole()`` behaves like a partition that drops every packet, not like a crash:

- existing connections stay open, but no byte moves in either direction; bytes already read are
  held and bytes not yet read stay in the kernel buffers (the senders' writes block once those fill);
- new connections are not accepted: they sit in the listen backlog (Linux completes the handshake,
  so ``connect()`` returns, but no reply ever comes; once the backlog is full, SYNs are dropped);
- nothing is closed and nothing is dropped.

``restore()`` resumes: held bytes flow again in order (as TCP retransmission after a partition
heals) and the backlog is accepted and connected upstream. ``drop_connections()`` resets every
open connection (a crash or a middlebox reset, for contrast). ``close()`` stops everything.

Put a broker behind it by advertising the proxy's port (``EmbeddedKafka(advertised_port=...)``),
so that the connections clients open after metadata lookups go through the proxy too.
"""

from __future__ import annotations

import errno
import selectors
import socket
import struct
import threading

__all__ = ["TcpProxy"]

_CHUNK = 256 * 1024
_HIGH_WATER = 1024 * 1024  # per direction: stop reading a side while this much waits for the other


class _Conn:
    """One proxied connection: the accepted client socket and its upstream socket."""

    __slots__ = ("client", "upstream", "connecting", "to_up", "to_client", "client_eof", "up_eof",
                 "up_shut", "client_shut")

    def __init__(self, client: socket.socket, upstream: socket.socket):
        self.client = client
        self.upstream = upstream
        self.connecting = True
        self.to_up = bytearray()
        self.to_client = bytearray()
        self.client_eof = False  # the client sent FIN
        self.up_eof = False  # upstream sent FIN
        self.up_shut = False  # FIN forwarded to upstream
        self.client_shut = False  # FIN forwarded to the client

    def interest(self, sock: socket.socket) -> int:
        events = 0
        if sock is self.client:
            if not self.client_eof and len(self.to_up) < _HIGH_WATER:
                events |= selectors.EVENT_READ
            if self.to_client:
                events |= selectors.EVENT_WRITE
        elif self.connecting:
            events = selectors.EVENT_WRITE  # writable = connect() finished (or failed)
        else:
            if not self.up_eof and len(self.to_client) < _HIGH_WATER:
                events |= selectors.EVENT_READ
            if self.to_up:
                events |= selectors.EVENT_WRITE
        return events

    def done(self) -> bool:
        return self.up_shut and self.client_shut


class TcpProxy:
    """Relays 127.0.0.1:``port`` <-> ``upstream_host``:``upstream_port``; see the module doc."""

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1", port: int = 0, backlog: int = 64):
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(backlog)
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._registered: dict[socket.socket, int] = {}  # socket -> events currently registered
        self._conns: dict[socket.socket, _Conn] = {}  # both sockets of a connection -> it
        self._lock = threading.Lock()  # held while relaying; blackhole() takes it to stop at once
        self._blackholed = False
        self._drop: threading.Event | None = None
        self._stopping = False
        self._accepted = 0
        self._bytes_up = 0
        self._bytes_down = 0
        self._thread = threading.Thread(target=self._run, name=f"TcpProxy-{self.port}->{upstream_port}", daemon=True)
        self._thread.start()

    # ---- control (any thread) -------------------------------------------------------------------

    @property
    def blackholed(self) -> bool:
        return self._blackholed

    @property
    def accepted(self) -> int:
        """Connections accepted so far."""
        with self._lock:
            return self._accepted

    @property
    def bytes_up(self) -> int:
        """Bytes relayed client -> upstream so far."""
        with self._lock:
            return self._bytes_up

    @property
    def bytes_down(self) -> int:
        """Bytes relayed upstream -> client so far."""
        with self._lock:
            return self._bytes_down

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len({id(c) for c in self._conns.values()})

    def blackhole(self) -> None:
        """Stop relaying and accepting. When this returns, no further byte moves until restore()."""
        with self._lock:
            self._blackholed = True
        self._wake()

    def restore(self) -> None:
        with self._lock:
            self._blackholed = False
        self._wake()

    def drop_connections(self) -> None:
        """Reset (RST) every open connection, both sides; the proxy keeps listening."""
        dropped = threading.Event()
        with self._lock:
            self._drop = dropped
        self._wake()
        dropped.wait(5)

    def close(self) -> None:
        with self._lock:
            self._stopping = True
        self._wake()
        self._thread.join(10)
        for sock in list(self._conns):
            _close(sock)
        self._conns.clear()
        for sock in (self._listener, self._wake_r, self._wake_w):
            _close(sock)
        self._sel.close()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "blackholed" if self._blackholed else "relaying"
        return f"TcpProxy({self.address} -> {self.upstream[0]}:{self.upstream[1]}, {state})"

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, OSError):
            pass  # already awake (buffer full) or closed

    # ---- the relay thread -----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._sync_interest()
            events = self._sel.select(timeout=1.0)
            with self._lock:
                if self._stopping:
                    return
                if self._drop is not None:
                    for sock in list(self._conns):
                        self._reset(sock)
                    self._drop.set()
                    self._drop = None
                for key, mask in events:
                    sock = key.fileobj
                    if sock is self._wake_r:
                        _drain(self._wake_r)
                    elif self._blackholed:
                        continue  # events left from before blackhole(): ignored, the sockets keep them
                    elif sock is self._listener:
                        self._accept()
                    elif sock in self._conns:
                        self._service(self._conns[sock], sock, mask)

    def _sync_interest(self) -> None:
        with self._lock:
            wanted: dict[socket.socket, int] = {}
            if not self._blackholed and not self._stopping:
                wanted[self._listener] = selectors.EVENT_READ
                for sock, conn in self._conns.items():
                    events = conn.interest(sock)
                    if events:
                        wanted[sock] = events
            for sock in [s for s in self._registered if s not in wanted]:
                self._sel.unregister(sock)
                del self._registered[sock]
            for sock, events in wanted.items():
                current = self._registered.get(sock)
                if current is None:
                    self._sel.register(sock, events)
                elif current != events:
                    self._sel.modify(sock, events)
                self._registered[sock] = events

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # e.g. EMFILE: try again on the next wake-up
            self._accepted += 1
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            upstream.setblocking(False)
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(client, upstream)
            self._conns[client] = conn
            self._conns[upstream] = conn
            err = upstream.connect_ex(self.upstream)
            if err == 0:
                conn.connecting = False
            elif err not in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
                self._reset(client)  # upstream refused at once: the client sees a reset

    def _service(self, conn: _Conn, sock: socket.socket, mask: int) -> None:
        try:
            if sock is conn.upstream and conn.connecting:
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    self._reset(sock)
                    return
                conn.connecting = False
                self._flush(conn)
                return
            if mask & selectors.EVENT_READ:
                self._read(conn, sock)
            self._flush(conn)
        except OSError:
            self._reset(sock)  # reset by peer, broken pipe...: pass the reset on to the other side
            return
        if conn.done():
            self._forget(conn)

    def _read(self, conn: _Conn, sock: socket.socket) -> None:
        try:
            data = sock.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        if sock is conn.client:
            if data:
                conn.to_up += data
            else:
                conn.client_eof = True
        else:
            if data:
                conn.to_client += data
            else:
                conn.up_eof = True

    def _flush(self, conn: _Conn) -> None:
        if not conn.connecting:
            if conn.to_up:
                sent = _send(conn.upstream, conn.to_up)
                self._bytes_up += sent
                del conn.to_up[:sent]
            if conn.client_eof and not conn.to_up and not conn.up_shut:
                conn.upstream.shutdown(socket.SHUT_WR)
                conn.up_shut = True
        if conn.to_client:
            sent = _send(conn.client, conn.to_client)
            self._bytes_down += sent
            del conn.to_client[:sent]
        if conn.up_eof and not conn.to_client and not conn.client_shut:
            conn.client.shutdown(socket.SHUT_WR)
            conn.client_shut = True

    def _reset(self, sock: socket.socket) -> None:
        conn = self._conns.get(sock)
        if conn is None:
            return
        for s in (conn.client, conn.upstream):
            try:  # linger 0: close() sends RST, as a reset connection would
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        self._forget(conn)

    def _forget(self, conn: _Conn) -> None:
        for s in (conn.client, conn.upstream):
            self._conns.pop(s, None)
            if s in self._registered:
                self._sel.unregister(s)
                del self._registered[s]
            _close(s)


def _send(sock: socket.socket, buf: bytearray) -> int:
    try:
        return sock.send(buf)
    except (BlockingIOError, InterruptedError):
        return 0


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(4096):
            pass
    except (BlockingIOError, InterruptedError, OSError):
        pass


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass
