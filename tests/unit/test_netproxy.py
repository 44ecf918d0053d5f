"""tests/netproxy.py over plain loopback sockets: relaying, blackhole (hold, never drop), restore, resets."""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time

import pytest
from netproxy import TcpProxy

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def upstream():
    """A listening socket the test accepts from by hand, so it holds the server end itself."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(5)
    yield srv
    srv.close()


@pytest.fixture
def proxy(upstream):
    with TcpProxy(upstream.getsockname()[1]) as p:
        yield p


def _connect(proxy: TcpProxy) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    s.settimeout(5)
    return s


def _pair(proxy, upstream):
    client = _connect(proxy)
    server, _ = upstream.accept()
    server.settimeout(5)
    return client, server


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(1 << 20, n - len(buf)))
        assert chunk, f"EOF after {len(buf)} of {n} bytes"
        buf += chunk
    return bytes(buf)


def _nothing_arrives(sock: socket.socket, wait: float = 0.4) -> bool:
    sock.settimeout(wait)
    try:
        data = sock.recv(1)
    except TimeoutError:
        return True
    finally:
        sock.settimeout(5)
    raise AssertionError(f"expected silence, got {data!r}")


def test_relays_both_ways_and_counts(proxy, upstream):
    client, server = _pair(proxy, upstream)
    with client, server:
        client.sendall(b"ping")
        assert _recv_exactly(server, 4) == b"ping"
        server.sendall(b"pong!")
        assert _recv_exactly(client, 5) == b"pong!"
    assert proxy.accepted == 1
    assert (proxy.bytes_up, proxy.bytes_down) == (4, 5)


def test_large_transfer_keeps_every_byte_in_order(proxy, upstream):
    payload = os.urandom(8 << 20)
    client, server = _pair(proxy, upstream)
    with client, server:
        sender = threading.Thread(target=client.sendall, args=(payload,))
        sender.start()
        assert hashlib.sha256(_recv_exactly(server, len(payload))).digest() == hashlib.sha256(payload).digest()
        sender.join(5)
        back = threading.Thread(target=server.sendall, args=(payload[::-1],))
        back.start()
        assert _recv_exactly(client, len(payload)) == payload[::-1]
        back.join(5)


def test_blackhole_holds_bytes_both_ways_and_restore_delivers_them(proxy, upstream):
    client, server = _pair(proxy, upstream)
    with client, server:
        proxy.blackhole()
        assert proxy.blackholed
        client.sendall(b"held-up")
        server.sendall(b"held-down")
        assert _nothing_arrives(server)
        assert _nothing_arrives(client)
        assert proxy.open_connections == 1  # nothing was closed
        proxy.restore()
        assert _recv_exactly(server, 7) == b"held-up"
        assert _recv_exactly(client, 9) == b"held-down"
        client.sendall(b"after")  # the same connection carries on
        assert _recv_exactly(server, 5) == b"after"


def test_blackhole_stops_relaying_mid_stream_and_loses_nothing(proxy, upstream):
    payload = os.urandom(64 << 20)  # more than every socket buffer can hold (tcp_rmem max 32 MB here): the sender must block
    client, server = _pair(proxy, upstream)
    received = bytearray()
    with client, server:
        sender = threading.Thread(target=client.sendall, args=(payload,), daemon=True)
        sender.start()
        received += _recv_exactly(server, 1 << 20)
        proxy.blackhole()
        server.settimeout(0.2)
        try:  # what the proxy sent before blackhole() returned may still be in flight
            while True:
                chunk = server.recv(1 << 20)
                assert chunk
                received += chunk
        except TimeoutError:
            pass
        frozen = len(received)
        time.sleep(0.5)
        assert _nothing_arrives(server, 0.3)
        assert sender.is_alive(), "the sender should be blocked on full buffers"
        assert frozen < len(payload)
        proxy.restore()
        server.settimeout(5)
        received += _recv_exactly(server, len(payload) - len(received))
        sender.join(5)
        assert bytes(received) == payload


def test_blackhole_leaves_new_connections_unanswered_until_restore(proxy, upstream):
    proxy.blackhole()
    client = _connect(proxy)  # the kernel completes the handshake: the connection sits in the backlog
    with client:
        client.sendall(b"hello?")
        upstream.settimeout(0.5)
        with pytest.raises(TimeoutError):
            upstream.accept()  # the proxy did not connect upstream
        assert _nothing_arrives(client)
        assert proxy.accepted == 0
        proxy.restore()
        upstream.settimeout(5)
        server, _ = upstream.accept()
        with server:
            server.settimeout(5)
            assert _recv_exactly(server, 6) == b"hello?"
            server.sendall(b"hi")
            assert _recv_exactly(client, 2) == b"hi"


def test_half_close_is_forwarded_both_ways(proxy, upstream):
    client, server = _pair(proxy, upstream)
    with client, server:
        client.sendall(b"last words")
        client.shutdown(socket.SHUT_WR)
        assert _recv_exactly(server, 10) == b"last words"
        assert server.recv(10) == b""  # EOF forwarded
        server.sendall(b"reply")  # the other direction still works
        server.close()
        assert _recv_exactly(client, 5) == b"reply"
        assert client.recv(10) == b""
    deadline = time.monotonic() + 5
    while proxy.open_connections and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proxy.open_connections == 0


def test_upstream_down_resets_the_client():
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()  # nothing listens there: connects are refused
    with TcpProxy(port) as proxy:
        try:
            with _connect(proxy) as client:
                assert client.recv(10) == b""
        except ConnectionError:
            pass  # reset: during recv, or already during connect (the handshake races the proxy's reset)
        assert proxy.accepted == 1 and proxy.open_connections == 0


def test_drop_connections_resets_both_sides(proxy, upstream):
    client, server = _pair(proxy, upstream)
    with client, server:
        proxy.drop_connections()
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            assert client.recv(10) == b""  # a reset, not an orderly EOF
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            assert server.recv(10) == b""
    client2, server2 = _pair(proxy, upstream)  # still listening
    with client2, server2:
        client2.sendall(b"x")
        assert _recv_exactly(server2, 1) == b"x"


def test_close_stops_listening(upstream):
    proxy = TcpProxy(upstream.getsockname()[1])
    port = proxy.port
    client, server = _pair(proxy, upstream)
    proxy.close()
    with client, server:
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
