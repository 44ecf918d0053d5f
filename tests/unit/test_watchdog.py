"""worker.watchdog: sd_notify over a real AF_UNIX datagram socket, gated on a real HTTP /health.

The watchdog must stay silent while /health does not answer (systemd's watchdog then kills the
worker), and ping again once it answers."""

from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from worker.watchdog import HealthWatchdog, notify, watchdog_period


class _Health(http.server.BaseHTTPRequestHandler):
    hang = threading.Event()

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.hang.is_set():
            time.sleep(3)  # longer than the probe's timeout: no answer in time
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def health_server():
    _Health.hang.clear()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    _Health.hang.clear()
    server.shutdown()


@pytest.fixture
def notify_socket(tmp_path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        path = str(tmp_path / "notify")
        s.bind(path)
        s.settimeout(0.1)
        yield path, s


def _messages(s: socket.socket, seconds: float) -> list[str]:
    out, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            out.append(s.recv(4096).decode())
        except TimeoutError:
            pass
    return out


def test_pings_only_while_health_answers(health_server, notify_socket):
    path, s = notify_socket
    watchdog = HealthWatchdog(health_server, {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "900000"}).start()
    try:
        first = _messages(s, 1.5)
        assert first[0] == "READY=1" and first.count("WATCHDOG=1") >= 3, first
        _Health.hang.set()
        _messages(s, 0.5)  # a probe already answered may still be reported
        assert "WATCHDOG=1" not in _messages(s, 2.0)  # no answer: silence, so systemd would kill the worker
        _Health.hang.clear()
        assert "WATCHDOG=1" in _messages(s, 5.0)
    finally:
        watchdog.close()
    assert "STOPPING=1" in _messages(s, 0.5)


def test_ready_only_without_a_watchdog_period_and_nothing_outside_systemd(health_server, notify_socket):
    path, s = notify_socket
    watchdog = HealthWatchdog(health_server, {"NOTIFY_SOCKET": path}).start()
    assert _messages(s, 2.5) == ["READY=1"]
    watchdog.close()
    assert not notify("READY=1", {})
    assert HealthWatchdog(health_server, {}).start()._thread is None


def test_watchdog_period_is_for_this_process_only():
    assert watchdog_period({"WATCHDOG_USEC": "30000000"}) == 30.0
    assert watchdog_period({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}) is None
    assert watchdog_period({"WATCHDOG_USEC": "x"}) is None
    assert watchdog_period({}) is None
