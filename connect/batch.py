"""NativeBatch: a polled batch of a client's own messages, records built only on demand.

The record path builds a :class:`~connect.records.ConnectRecord` per message, scans the batch for
offsets and byte counts, and hands the records on. When nothing between the source and the sink
needs a record object (no transform, no non-identity converter, no ``commit_record``, no offset
syncs; the replication stages read and write headers only), a source may return a
:class:`NativeBatch` from ``poll`` instead and a sink that reads that kind (its ``native_kinds``: the
Kafka and the Pulsar sinks read Kafka's) produces straight from the client's messages. The runner
says when the path allows it: ``SourceTaskContext.native_batches`` is True (framework key
``native.batches``, default true) only if the source's ``native_kind`` is one of the sink's
``native_kinds`` and the pair's stages need no records.

What the runner needs per batch comes from the source, cheaply:

- ``last``: ``id(source_partition) -> ConnectRecord`` of the last message of each source
  partition in the batch (a record built for those few only): offsets per batch, not per record;
- ``payload_bytes()``: the byte count (the first and last timestamps come from the records of
  ``batch[0]`` and ``batch[-1]``, built for those two).

Header-only stages (the replication stages) leave the messages alone and set per-message
*overlays*: ``headers[i]`` and ``topics[i]`` (the target name the sink routes by). A record is
built, with its overlays, only where one is asked for (:meth:`record`): a delivery failure names
its own record, a record that goes to the hooks or the dead-letter topic, a batch the sink did
not take in time (queued for re-sending, in order). Building it is the source's business
(``codec.record(message)``).
"""

from __future__ import annotations

from itertools import repeat
from typing import Any, Callable, Iterator, Mapping

from connect.records import ConnectRecord, make_record

__all__ = ["NativeBatch", "NativeCodec", "native_allowed"]


class NativeCodec:
    """What a source knows about its client's messages: how to build the record of one, its
    topic and headers, and the byte count of a list of them. The getters read one field of a
    message as plain callables (e.g. the client's own methods), for passes over a whole batch: a
    sink of another broker reads the messages through them, never through the client's types."""

    topic_getter: Callable[[Any], str]
    header_getter: Callable[[Any], list | None]
    partition_getter: Callable[[Any], int | None]
    key_getter: Callable[[Any], Any]
    value_getter: Callable[[Any], Any]

    def timestamps(self, messages: list) -> Iterator[int]:
        """The timestamp (epoch milliseconds, 0 if none) of each message, in order."""
        raise NotImplementedError

    def record(self, message: Any) -> ConnectRecord:
        raise NotImplementedError

    def topic(self, message: Any) -> str:
        raise NotImplementedError

    def headers(self, message: Any) -> list | None:
        raise NotImplementedError

    def payload_bytes(self, messages: list) -> int:
        raise NotImplementedError


class NativeBatch:
    """Messages of one poll, in poll order, with what the runner and the sink need (module doc).

    ``topic``: the topic of every message when they share one (the source's, or the name a stage
    gave them all; the sink then routes once per batch), else None. ``topics`` / ``headers``: per-message overlays set by
    header-only stages (None: the message's own)."""

    __slots__ = ("kind", "items", "codec", "last", "topic", "topics", "headers")

    def __init__(self, kind: str, items: list, codec: NativeCodec, last: dict[int, ConnectRecord],
                 topic: str | None = None, topics: list[str] | None = None, headers: list | None = None):
        self.kind = kind
        self.items = items
        self.codec = codec
        self.last = last
        self.topic = topic
        self.topics = topics
        self.headers = headers

    def __len__(self) -> int:
        return len(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)

    def topic_of(self, i: int) -> str:
        if self.topics is not None:
            return self.topics[i]
        return self.topic if self.topic is not None else self.codec.topic(self.items[i])

    def headers_of(self, i: int) -> list | None:
        return self.headers[i] if self.headers is not None else self.codec.headers(self.items[i])

    def record(self, i: int) -> ConnectRecord:
        """The record of message ``i``, with its overlays (what the record path would have put)."""
        r = self.codec.record(self.items[i])
        topic = self.topics[i] if self.topics is not None else (self.topic or r.topic)
        if self.headers is None and topic == r.topic:
            return r
        headers = self.headers[i] if self.headers is not None else r.headers
        return make_record(topic, r.key, r.value,
                           list(headers) if headers is not None else None, r.timestamp, r.source_partition,
                           r.source_offset, r.partition, r.value_schema)

    def __getitem__(self, i: int) -> ConnectRecord:
        """The record of message ``i`` (negative: from the end), built now."""
        return self.record(i if i >= 0 else len(self.items) + i)

    def records(self, start: int = 0) -> list[ConnectRecord]:
        """The records of messages ``start``..., in order."""
        return [self.record(i) for i in range(start, len(self.items))]

    def __iter__(self) -> Iterator[ConnectRecord]:
        return iter(self.records())

    def payload_bytes(self) -> int:
        return self.codec.payload_bytes(self.items)

    def columns(self) -> tuple[Iterator, Iterator, Iterator, Iterator, Iterator, Iterator]:
        """(topics, partition hints, keys, headers, values, timestamps) of the messages, in order,
        the overlays applied: one iterator per field, read with the codec's getters."""
        items, codec = self.items, self.codec
        topics = self.topics if self.topics is not None else \
            repeat(self.topic, len(items)) if self.topic is not None else map(codec.topic_getter, items)
        headers = self.headers if self.headers is not None else map(codec.header_getter, items)
        return (iter(topics), map(codec.partition_getter, items), map(codec.key_getter, items), iter(headers),
                map(codec.value_getter, items), codec.timestamps(items))


def native_allowed(source: Any, sink: Any, chain_native: Callable | None | bool, wanted: bool,
                   needs_records: Mapping[str, bool]) -> tuple[bool, str]:
    """Whether a pair may move native batches, and if not why (for the log): ``wanted`` is the
    ``native.batches`` key, ``chain_native`` False when a stage needs records, ``needs_records``
    the other reasons (``commit_record``, offset syncs...) that hold."""
    kind = getattr(source, "native_kind", None)
    if not wanted:
        return False, "native.batches=false"
    if kind is None or kind not in getattr(sink, "native_kinds", ()):
        return False, f"source kind {kind!r} is not one the sink produces from"
    if chain_native is False:
        return False, "a stage (transform, converter) needs records"
    for reason, holds in needs_records.items():
        if holds:
            return False, reason
    return True, ""
