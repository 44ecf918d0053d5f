"""systemd's service watchdog for the worker: a worker whose REST API stopped answering is restarted.

A worker can be alive with its port open and still answer nothing: its event loop gone or blocked,
a thread holding the GIL. ``Restart=always`` does not see that; systemd's watchdog does. Under the
shipped unit (``Type=notify``, ``WatchdogSec=``), systemd gives the worker ``NOTIFY_SOCKET`` and
``WATCHDOG_USEC``, and this module's thread:

- probes the worker's own ``GET /health`` over its REST socket (the same path a client takes, so
  every layer that must work for an answer is checked, not just this thread);
- sends ``READY=1`` on the first 200 (the stored connectors are loaded), then ``WATCHDOG=1`` after
  every 200, at a third of the watchdog period;
- sends nothing when the probe fails or times out: systemd then kills the worker (SIGABRT) at the end
  of the period and ``Restart=always`` starts it again. Silence is the failure signal, so a process
  too stuck to run this thread is caught too.

Outside systemd (no ``NOTIFY_SOCKET``) nothing runs. The protocol is sd_notify(3): one datagram per
message on the ``AF_UNIX`` socket named by ``NOTIFY_SOCKET`` (``@`` for the abstract namespace).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Mapping

import httpx

__all__ = ["notify", "watchdog_period", "HealthWatchdog"]

log = logging.getLogger(__name__)


def notify(message: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Send one sd_notify message; False when there is no ``NOTIFY_SOCKET`` or it cannot be reached."""
    path = environ.get("NOTIFY_SOCKET", "")
    if not path:
        return False
    address = "\0" + path[1:] if path.startswith("@") else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(address)
            s.sendall(message.encode())
    except OSError as exc:
        log.warning("cannot notify the service manager (%s): %s", path, exc)
        return False
    return True


def watchdog_period(environ: Mapping[str, str] = os.environ) -> float | None:
    """The watchdog period in seconds systemd set for this process, or None."""
    usec, pid = environ.get("WATCHDOG_USEC", ""), environ.get("WATCHDOG_PID", "")
    try:
        if not usec or (pid and int(pid) != os.getpid()) or int(usec) <= 0:
            return None
        return int(usec) / 1e6
    except ValueError:
        return None


class HealthWatchdog:
    """The thread of the module docstring, probing ``url`` + ``/health``. Does nothing without a
    ``NOTIFY_SOCKET``; without a watchdog period it only sends ``READY=1``."""

    def __init__(self, url: str, environ: Mapping[str, str] = os.environ):
        self.url = url.rstrip("/") + "/health"
        self.environ = dict(environ)
        self.period = watchdog_period(self.environ)
        self.ready = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> HealthWatchdog:
        if self.environ.get("NOTIFY_SOCKET"):
            self._thread = threading.Thread(target=self._run, name="health-watchdog", daemon=True)
            self._thread.start()
        return self

    def _healthy(self, client: httpx.Client) -> bool:
        try:
            return client.get(self.url).status_code == 200
        except httpx.HTTPError:
            return False

    def _run(self) -> None:
        interval = self.period / 3 if self.period else 1.0
        # verify=False: a liveness probe of this process's own socket, not a check of its identity
        with httpx.Client(timeout=min(interval, 10.0), verify=False) as client:
            while not self._stop.is_set():
                if self._healthy(client):
                    if not self.ready:
                        self.ready = notify("READY=1", self.environ)
                    if self.period:
                        notify("WATCHDOG=1", self.environ)
                    elif self.ready:
                        return
                self._stop.wait(interval)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            notify("STOPPING=1", self.environ)
            self._thread.join(timeout=15)
