"""Kafka client settings and the per-process Kafka clients (:mod:`connect.clientpool`).

Client settings come from the connector config: ``bootstrap.servers``, then any
``client.override.<librdkafka key>`` (every client of the connector), then the role-specific
``consumer.override.*``, ``producer.override.*`` or ``admin.override.*`` keys, as Kafka Connect's
connector-level client overrides do.

The pool keeps clients alive across epochs in the reused Spark Python worker: a task that is
restarted in the same process (e.g. because Spark scheduled its pair on another worker in the
meantime) takes the same connected client back instead of reconnecting.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any, Mapping

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from connect.clientpool import ClientPool

__all__ = ["client_config", "KafkaClients", "POOL", "OVERRIDE_PREFIXES"]

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


def _key(owner: str, conf: Mapping[str, Any]) -> tuple:
    return (owner, tuple(sorted((k, str(v)) for k, v in conf.items() if k != "logger" and not callable(v))))


def _close(role: str, client) -> None:
    if role == "consumer":
        client.close()
    elif role == "producer":
        client.flush(5)


class KafkaClients:
    """The per-process Kafka clients: one :class:`connect.clientpool.ClientPool` per role (consumer,
    producer, admin), each held by one user at a time and keyed by (owner, settings); at most
    ``max_idle_per_role`` idle clients of each role are kept, least recently released closed first,
    so a Python worker that has run every pair at some point does not keep a client of each."""

    _FACTORIES = {"consumer": Consumer, "producer": Producer, "admin": AdminClient}

    def __init__(self, max_idle_per_role: int = 4) -> None:
        self._pools = {role: ClientPool(close=partial(_close, role), what=f"Kafka {role}", max_idle=max_idle_per_role)
                       for role in self._FACTORIES}

    def acquire(self, role: str, owner: str, conf: Mapping[str, Any]):
        return self._pools[role].acquire(_key(owner, conf), lambda: self._FACTORIES[role](dict(conf)))

    def release(self, role: str, owner: str, conf: Mapping[str, Any], client) -> None:
        self._pools[role].release(_key(owner, conf), client)

    def close_all(self) -> None:
        for pool in self._pools.values():
            pool.close_all()


POOL = KafkaClients()
