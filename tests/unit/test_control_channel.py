"""The driver's control channel against peers that do not know its secret (issue 20): nothing is
read before the secret, the secret must arrive whole within a deadline, and such peers cannot take
the places the executors need."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from worker.runtime import control
from worker.runtime.control import ControlClient, ControlServer


@pytest.fixture
def server():
    s = ControlServer("127.0.0.1")
    s.register("echo", lambda request: request.get("x"))
    yield s
    s.close()


def _closed(sock: socket.socket, wait: float = 2.0) -> bool:
    sock.settimeout(wait)
    try:
        sock.recv(1024)  # an error answer or EOF: the server let it go
        return True
    except TimeoutError:
        return False
    except OSError:
        return True


def test_the_secret_comes_first_and_a_wrong_one_is_refused(server):
    assert ControlClient(server.address).request("echo", x=5) == 5
    wrong = ControlClient((server.address[0], server.address[1], "0" * 32))
    with pytest.raises(ConnectionError, match="wrong secret|closed"):
        wrong.request("echo", x=5)


def test_a_peer_trickling_its_hello_is_closed_at_the_deadline(server, monkeypatch):
    monkeypatch.setattr(control, "_HELLO_TIMEOUT_S", 1.0)
    sock = socket.create_connection(server.address[:2])
    started = time.monotonic()
    sock.settimeout(0.3)
    closed = False
    while time.monotonic() - started < 4:
        try:
            sock.send(b"A")
            if sock.recv(1, socket.MSG_PEEK) == b"":
                closed = True
                break
        except TimeoutError:
            continue
        except OSError:
            closed = True
            break
    assert closed and time.monotonic() - started < 2.5, "a byte every 0.3 s kept the connection past the deadline"


def test_unauthenticated_peers_cannot_take_every_place(server, monkeypatch):
    monkeypatch.setattr(control, "MAX_UNAUTHENTICATED", 2)
    monkeypatch.setattr(control, "_HELLO_TIMEOUT_S", 5.0)
    idle = [socket.create_connection(server.address[:2]) for _ in range(8)]
    time.sleep(0.5)
    still_open = [s for s in idle if not _closed(s, 0.3)]
    assert len(still_open) <= 2, f"{len(still_open)} unauthenticated connections held (cap 2)"
    for s in idle:
        s.close()
    time.sleep(0.3)
    assert ControlClient(server.address).request("echo", x="ok") == "ok"  # places were given back


def _idle(address, count: int, source: str = "127.0.0.1") -> list[socket.socket]:
    """``count`` connections that never say anything, from ``source`` (any 127/8 address on Linux)."""
    socks = []
    for _ in range(count):
        s = socket.socket()
        s.bind((source, 0))
        s.connect(address[:2])
        socks.append(s)
    return socks


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_65_idle_connections_do_not_keep_an_executor_out(monkeypatch, tls):
    """Issue 35: 64 unauthenticated places and a 65th connection closed before its hello. Now the
    newcomer takes the oldest pending place: an executor's client connects while they idle on."""
    monkeypatch.setattr(control, "_HELLO_TIMEOUT_S", 30.0)  # the idle ones outlive the test
    server = ControlServer("127.0.0.1", tls=tls)
    server.register("echo", lambda request: request.get("x"))
    idle = _idle(server.address, 65)
    try:
        time.sleep(0.5)
        started = time.monotonic()
        client = ControlClient(server.address)
        assert client.request("echo", x="executor") == "executor"
        assert time.monotonic() - started < 10
        client.close()
        assert len(server._server.pending) <= control.MAX_UNAUTHENTICATED
    finally:
        for s in idle:
            s.close()
        server.close()


def test_a_flooding_address_churns_only_its_own_pending_places(monkeypatch):
    monkeypatch.setattr(control, "_HELLO_TIMEOUT_S", 30.0)
    monkeypatch.setattr(control, "MAX_UNAUTHENTICATED", 8)
    monkeypatch.setattr(control, "MAX_UNAUTHENTICATED_PER_PEER", 4)
    server = ControlServer("127.0.0.1")
    try:
        slow = _idle(server.address, 1, "127.0.0.3")[0]  # an executor still starting its hello
        time.sleep(0.2)
        flood = _idle(server.address, 40, "127.0.0.2")
        time.sleep(0.5)
        assert not _closed(slow, 0.5), "another address's flood evicted a pending connection"
        assert sum(not _closed(s, 0.05) for s in flood) <= 4
        slow.sendall(control.hello(server.secret) + b'{"op": "nope", "secret": "' + server.secret.encode() + b'"}\n')
        slow.settimeout(5)
        assert b"unknown op" in slow.recv(1024)  # it authenticated in the place it kept
        for s in [slow, *flood]:
            s.close()
    finally:
        server.close()


def test_in_cluster_mode_the_channel_is_tls_pinned_and_plain_text_gets_nothing():
    server = ControlServer("127.0.0.1", tls=True)
    server.register("echo", lambda request: request.get("x"))
    try:
        host, port, secret, pin = server.address
        assert len(pin) == 64
        # What crosses the wire between a real client and the server: TLS records, no secret, no value.
        seen = bytearray()
        relay = socket.create_server(("127.0.0.1", 0))

        def pump(a, b):
            try:
                while data := a.recv(65536):
                    seen.extend(data)
                    b.sendall(data)
            except OSError:
                pass
            finally:
                for s in (a, b):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        def accept():
            inner, _ = relay.accept()
            outer = socket.create_connection((host, port))
            threading.Thread(target=pump, args=(inner, outer), daemon=True).start()
            threading.Thread(target=pump, args=(outer, inner), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        via_relay = ControlClient(("127.0.0.1", relay.getsockname()[1], secret, pin))
        assert via_relay.request("echo", x="sasl.password=canary-8d2f") == "sasl.password=canary-8d2f"
        via_relay.close()
        assert seen[:1] == b"\x16"  # a TLS handshake record
        assert secret.encode() not in seen and b"canary-8d2f" not in seen and b"AUTH" not in seen
        # A plain-text client with the right secret (as before this change) gets no answer.
        plain = socket.create_connection((host, port))
        plain.sendall(control.hello(secret) + b'{"op": "echo", "x": 1, "secret": "' + secret.encode() + b'"}\n')
        plain.settimeout(5)
        try:
            answer = plain.recv(4096)
        except OSError:
            answer = b""
        assert b"ok" not in answer and (not answer or answer[:1] == b"\x15")  # closed, or a TLS alert
        plain.close()
        # A client pinning another certificate does not send its secret to this server.
        with pytest.raises(ConnectionError, match="pinned"):
            ControlClient((host, port, secret, "0" * 64)).request("echo", x=1)
    finally:
        server.close()
