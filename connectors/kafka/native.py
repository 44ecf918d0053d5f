"""Kafka's native batches (``connect.batch``): the consumer's own ``Message`` list, moved as it is.

The source wraps what ``Consumer.consume`` returned (when the runner allows it and the batch holds
no error event); the sink produces straight from the messages (``KafkaSinkTask.put_native``).
Per batch, the runner needs the last message of each source partition (offsets per batch) - one
pass over the partition numbers at C speed, a record built for those few messages only - the byte
count (``len(message)`` is the value's length).
"""

from __future__ import annotations

import operator
from typing import Any, Iterator

from confluent_kafka import Message

from connect.batch import NativeBatch, NativeCodec
from connect.records import ConnectRecord, make_record

__all__ = ["KIND", "KafkaCodec"]

KIND = "kafka"
_PARTITION = Message.partition
_TOPIC = Message.topic
_KEY = Message.key
_ERROR = Message.error
_TIMESTAMP = Message.timestamp
_MS = operator.itemgetter(1)  # Message.timestamp() is (type, milliseconds)


class KafkaCodec(NativeCodec):
    """Records of consumed messages, with the source task's partition objects (one per partition,
    shared by every record of it, as the runner expects)."""

    def __init__(self, source_partitions: dict[str, dict[int, dict]]):
        self.topic_getter = _TOPIC
        self.header_getter = Message.headers
        self.partition_getter = _PARTITION
        self.key_getter = _KEY
        self.value_getter = Message.value
        self.sp = source_partitions  # topic -> partition -> source partition
        topics = list(source_partitions)
        self.single = topics[0] if len(topics) == 1 else None  # the one topic assigned, if so

    def record(self, m: Any) -> ConnectRecord:
        topic, part = m.topic(), m.partition()
        return make_record(topic, m.key(), m.value(), m.headers(), m.timestamp()[1], self.sp[topic][part],
                           {"offset": m.offset()}, part)

    def topic(self, m: Any) -> str:
        return m.topic()

    def headers(self, m: Any) -> list | None:
        return m.headers()

    def timestamps(self, messages: list) -> Iterator[int]:
        return map(_MS, map(_TIMESTAMP, messages))

    def payload_bytes(self, messages: list) -> int:
        return sum(map(len, messages)) + sum(map(len, filter(None, map(_KEY, messages))))

    def batch(self, messages: list) -> NativeBatch | None:
        """``messages`` as a native batch; None if one of them is an error event (the record path
        handles those)."""
        if any(map(_ERROR, messages)):
            return None
        # index of the last message of each (topic,) partition: dict keeps the last one written
        single = self.single
        if single is not None:
            where = dict(zip(map(_PARTITION, messages), range(len(messages)), strict=True))
        else:
            keys = zip(map(_TOPIC, messages), map(_PARTITION, messages), strict=True)
            where = dict(zip(keys, range(len(messages)), strict=True))
        record = self.record
        last = {}
        for i in where.values():
            r = record(messages[i])
            last[id(r.source_partition)] = r
        return NativeBatch(KIND, messages, self, last, single)
