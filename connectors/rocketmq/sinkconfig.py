"""What the RocketMQ sink and its side writers (:mod:`connectors.rocketmq.side`) share: the sink's
declared config, the message size limit and a target topic's writable queues (with the queue a
key goes to, and the route through ``TBW102`` a topic takes until its first send creates it). It
sits below both: the sink, its connector and the side writers import it, it imports neither."""

from __future__ import annotations

import itertools
import zlib

from connect.config import ConfigDef, Type, at_least, one_of
from connect.errors import RetriableError
from connect.sink.naming import NAMING_CONFIG
from connect.sink.routing import ROUTING_CONFIG
from connectors.rocketmq.clients import CLIENT_CONFIG

__all__ = ["CONFIG", "MAX_MESSAGE_SIZE", "Target"]

MAX_MESSAGE_SIZE = 4 * 1024 * 1024

CONFIG = ROUTING_CONFIG.merge(NAMING_CONFIG).merge(CLIENT_CONFIG).merge(
    ConfigDef()
    .define("queue.selection", Type.STRING, "source", "source (the source queue/partition id), key or round_robin.",
            validator=one_of("source", "key", "round_robin"))
    .define("tag", Type.STRING, "", "Tag of messages whose record has no rocketmq.tags header; empty: none.")
    .define("producer.group", Type.STRING, "connect-sink", "Producer group named in the sends.")
    .define("batch.size", Type.INT, 256, "Most messages per batch send.", validator=at_least(1))
    .define("batch.max.bytes", Type.INT, 1024 * 1024, "Most body bytes per batch send.", validator=at_least(1))
    .define("max.pending.messages", Type.INT, 20_000, "Most records of a task sent without an outcome.",
            validator=at_least(1))
    .define("max.in.flight.batches.per.queue", Type.INT, 1,
            "Most batches sent to one queue without an outcome. 1 keeps queue (key) order through transient "
            "failures; more pipelines sends to a queue, and a later batch may then land before a failed one "
            "is re-sent.", validator=at_least(1))
    .define("auto.create.topics", Type.BOOLEAN, False,
            "Create missing target topics with the source's queue count before the first epoch.")
)


class Target:
    """A target topic's writable queues and their brokers' addresses (the sink's and its side writer's)."""

    __slots__ = ("topic", "queues", "addrs", "names", "rr")

    def __init__(self, topic: str, route) -> None:
        queues = route.write_queues()
        if not queues:
            raise RetriableError(f"target topic {topic} has no writable queue")
        self.topic = topic
        self.queues = queues
        self.addrs = [route.master_addr(q.broker_name) for q in queues]
        self.names = [q.broker_name for q in queues]
        self.rr = itertools.count()

    @classmethod
    def through_default_topic(cls, topic: str, default_route) -> Target:
        """``topic``, which the name server does not route yet, sent to through the first writable
        queue of TBW102's route (``default_route``), as RocketMQ's producer does: the
        first send creates the topic from TBW102, on that one broker, at queue 0."""
        target = cls(topic, default_route)
        del target.queues[1:], target.addrs[1:], target.names[1:]
        return target

    def key_index(self, key) -> int:
        """The index of the queue a record key goes to: the CRC-32 of the key (``str(key)`` in
        UTF-8 unless it is bytes) modulo the queue count; round robin without a key."""
        n = len(self.queues)
        if key is None:
            return next(self.rr) % n
        return zlib.crc32(key if key.__class__ is bytes else str(key).encode()) % n
