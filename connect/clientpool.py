"""Broker clients shared by the tasks of one process.

A broker client (a ``pulsar.Client``, a RocketMQ client) owns threads and connections; readers,
producers and requests are cheap on top of it. Every task of a Python worker that talks to the
same cluster with the same settings shares one (reference counted), as Pulsar's own IO connectors
share theirs; the last user to release it closes it.
"""

from __future__ import annotations

import atexit
import logging
import threading
from typing import Any, Callable, Hashable

__all__ = ["SharedClients"]

log = logging.getLogger(__name__)


class SharedClients:
    """One client per settings key in this process, made by ``factory(settings)`` and closed by
    ``client.close()`` when its last user releases it."""

    def __init__(self, factory: Callable[[Any], Any], what: str = "client") -> None:
        self._factory = factory
        self._what = what
        self._lock = threading.Lock()
        self._clients: dict[Hashable, list] = {}  # settings -> [client, users]
        # A client still held when the interpreter exits is closed first: left to the garbage
        # collector, a pulsar.Client's C++ threads are destroyed while running, which aborts the
        # process ("terminate called without an active exception").
        atexit.register(self.close_all)

    def close_all(self) -> None:
        with self._lock:
            entries, self._clients = list(self._clients.values()), {}
        for client, users in entries:
            log.debug("closing a %s still held by %d user(s) at exit", self._what, users)
            try:
                client.close()
            except Exception as exc:  # noqa: BLE001
                log.debug("closing a %s: %s", self._what, exc)

    def acquire(self, settings: Hashable):
        with self._lock:
            entry = self._clients.get(settings)
            if entry is None:
                entry = self._clients[settings] = [self._factory(settings), 0]
            entry[1] += 1
            return entry[0]

    def release(self, settings: Hashable) -> None:
        with self._lock:
            entry = self._clients.get(settings)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            del self._clients[settings]
        try:
            entry[0].close()
        except Exception as exc:  # noqa: BLE001 - a client that cannot close cleanly is dropped anyway
            log.debug("closing a %s: %s", self._what, exc)
