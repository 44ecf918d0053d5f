"""Kafka client settings and a per-process client pool.

Client settings come from the connector config: ``bootstrap.servers``, then any
``client.override.<librdkafka key>`` (every client of the connector), then the role-specific
``consumer.override.*``, ``producer.override.*`` or ``admin.override.*`` keys, as Kafka Connect's
connector-level client overrides do.

The pool keeps clients alive across epochs in the reused Spark Python worker: a task that is
restarted in the same process (e.g. because Spark scheduled its pair on another worker in the
meantime) takes the same connected client back instead of reconnecting.
"""

from __future__ import annotations

import atexit
import logging
import threading
from typing import Any, Mapping

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

__all__ = ["client_config", "ClientPool", "POOL", "OVERRIDE_PREFIXES"]

OVERRIDE_PREFIXES = ("client.override.", "consumer.override.", "producer.override.", "admin.override.")


def client_config(config: Mapping[str, Any], role: str, defaults: Mapping[str, Any] = ()) -> dict[str, Any]:
    """librdkafka settings for ``role`` ("consumer", "producer" or "admin")."""
    conf: dict[str, Any] = dict(defaults)
    conf["bootstrap.servers"] = config["bootstrap.servers"]
    # librdkafka's own log lines (connection refused, ...) go to Python logging, not raw stderr.
    conf["logger"] = logging.getLogger(f"connectors.kafka.{role}")
    for prefix in ("client.override.", f"{role}.override."):
        conf.update({k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix)})
    return conf


def _key(role: str, owner: str, conf: Mapping[str, Any]) -> tuple:
    return (role, owner, tuple(sorted((k, str(v)) for k, v in conf.items() if k != "logger" and not callable(v))))


class ClientPool:
    """Idle clients by (role, owner, settings); ``acquire`` reuses one, ``release`` returns it.

    At most ``max_idle_per_role`` idle clients of each role are kept, least recently released
    closed first: a Python worker that has run every pair at some point does not keep a client
    of each of them forever.
    """

    def __init__(self, max_idle_per_role: int = 4) -> None:
        self._idle: dict[tuple, Any] = {}  # insertion order = release order
        self._max_idle = max_idle_per_role
        self._lock = threading.Lock()
        atexit.register(self.close_all)

    def acquire(self, role: str, owner: str, conf: Mapping[str, Any]):
        key = _key(role, owner, conf)
        with self._lock:
            client = self._idle.pop(key, None)
        if client is not None:
            return client
        factory = {"consumer": Consumer, "producer": Producer, "admin": AdminClient}[role]
        return factory(dict(conf))

    def release(self, role: str, owner: str, conf: Mapping[str, Any], client) -> None:
        key = _key(role, owner, conf)
        evicted = []
        with self._lock:
            previous = self._idle.pop(key, None)
            if previous is not None and previous is not client:
                evicted.append(previous)
            self._idle[key] = client
            same_role = [k for k in self._idle if k[0] == role]
            for old in same_role[: max(len(same_role) - self._max_idle, 0)]:
                evicted.append(self._idle.pop(old))
        for old in evicted:
            _close(role, old)

    def idle_count(self, role: str) -> int:
        with self._lock:
            return sum(1 for k in self._idle if k[0] == role)

    def close_all(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for (role, *_), client in idle.items():
            _close(role, client)


def _close(role: str, client) -> None:
    try:
        if role == "consumer":
            client.close()
        elif role == "producer":
            client.flush(5)
    except Exception:  # noqa: BLE001 - closing at exit is best effort
        pass


POOL = ClientPool()
