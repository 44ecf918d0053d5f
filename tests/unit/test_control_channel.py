"""The driver's control channel against peers that do not know its secret (issue 20): nothing is
read before the secret, the secret must arrive whole within a deadline, and such peers cannot take
the places the executors need."""

from __future__ import annotations

import socket
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
