"""Broker clients kept per process: one pool abstraction for every connector.

A broker client owns threads and connections; building one costs a connect (and for some, a
metadata round trip). PySpark reuses its Python workers, so a pool keeps clients across epochs and
across the tasks of a process, by a *settings key* (what two users must agree on to use the same
client). Two ways of sharing, chosen per pool:

- ``shared=True``: every user of a key gets the same client at the same time, reference counted
  (a ``pulsar.Client``, a RocketMQ client: readers, producers and requests are cheap on top of it),
  as Pulsar's own IO connectors share theirs.
- ``shared=False``: one user holds a client at a time (a Kafka consumer's assignment, a producer's
  delivery reports belong to one task); a released client waits idle for the next ``acquire`` of
  its key, so a task restarted in the same process takes its connected client back.

In both, a client nobody holds is kept idle up to ``max_idle`` per pool (least recently released
closed first) and closed beyond (a user never releases a broken or non-empty client: it drops
it). Every client still held or idle when the interpreter exits is closed first: left to the
garbage collector, a ``pulsar.Client``'s C++ threads are destroyed while running, which aborts
the process.
"""

from __future__ import annotations

import atexit
import logging
import threading
from typing import Any, Callable, Hashable

__all__ = ["ClientPool"]

log = logging.getLogger(__name__)


def _close(client: Any) -> None:
    client.close()


class ClientPool:
    """Clients by settings key, made by ``factory(key)`` (or the ``build`` given to ``acquire``)
    and closed by ``close(client)``."""

    def __init__(self, factory: Callable[[Hashable], Any] | None = None, *, close: Callable[[Any], None] = _close,
                 what: str = "client", shared: bool = False, max_idle: int = 0) -> None:
        self._factory = factory
        self._close_fn = close
        self._what = what
        self._shared = shared
        self._max_idle = max_idle
        self._lock = threading.Lock()
        self._held: dict[Hashable, list] = {}  # shared pools: key -> [client, users]
        self._idle: dict[tuple[Hashable, int], Any] = {}  # (key, id(client)) -> client; order = release order
        atexit.register(self.close_all)

    def acquire(self, key: Hashable, build: Callable[[], Any] | None = None):
        """A client for ``key``: the shared one, an idle one, or a new one."""
        with self._lock:
            if self._shared and key in self._held:
                entry = self._held[key]
                entry[1] += 1
                return entry[0]
            idle = next((k for k in self._idle if k[0] == key), None)
            client = self._idle.pop(idle) if idle is not None else None
            if client is None and self._shared:  # built under the lock: two users never build two
                client = (build or (lambda: self._factory(key)))()
            if self._shared:
                self._held[key] = [client, 1]
                return client
        return client if client is not None else (build or (lambda: self._factory(key)))()

    def release(self, key: Hashable, client: Any = None) -> None:
        """Give a client back (a shared pool's users may omit ``client``): kept idle, or closed now
        when ``max_idle`` idle clients are kept already (for a shared client: once its last user
        released it)."""
        with self._lock:
            if self._shared:
                entry = self._held.get(key)
                if entry is None:
                    return
                entry[1] -= 1
                if entry[1] > 0:
                    return
                del self._held[key]
                client = entry[0]
            evicted = []
            if self._max_idle > 0:
                self._idle[(key, id(client))] = client
                while len(self._idle) > self._max_idle:
                    evicted.append(self._idle.pop(next(iter(self._idle))))
            else:
                evicted.append(client)
        for old in evicted:
            self._discard(old)

    def close_all(self) -> None:
        with self._lock:
            clients = [entry[0] for entry in self._held.values()] + list(self._idle.values())
            self._held, self._idle = {}, {}
        for client in clients:
            log.debug("closing a %s still kept at exit", self._what)
            self._discard(client)

    def _discard(self, client: Any) -> None:
        try:
            self._close_fn(client)
        except Exception as exc:  # noqa: BLE001 - a client that cannot close cleanly is dropped anyway
            log.debug("closing a %s: %s", self._what, exc)
