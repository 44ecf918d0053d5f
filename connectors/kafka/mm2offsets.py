"""MirrorMaker 2's committed source offsets, so a mirror can take over where MM2 stopped.

MM2 in dedicated mode keeps the progress of flow S -> T in Kafka Connect's offsets topic
``mm2-offsets.<S>.internal`` in the target cluster T: named after the *source*
(``MirrorMakerConfig.workerConfig``, checked by running it), compacted, Connect's JSON converter
without schemas: key ``["MirrorSourceConnector", {"cluster": S, "partition": p, "topic": t}]``, value
``{"offset": n}`` with ``n`` the offset of the last record MM2 copied (MirrorSourceTask resumes at
``n + 1``), or null (a tombstone: forgotten). The newest record of a key wins.

:func:`read_mm2_offsets` reads the whole topic once (every partition, from the start to the high
watermark at the time of the call) and returns ``{(topic, partition): next offset}`` for one
source alias. Records that are not of that shape are counted and skipped, never trusted.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from connect.config import ConfigDef, Type
from connect.errors import ConfigError, ConfigIssue, RetriableError

__all__ = ["CONNECTOR", "MM2_TAKEOVER_CONFIG", "read_mm2_offsets", "takeover_offsets"]

CONNECTOR = "MirrorSourceConnector"
_MAX_RECORDS = 10_000_000  # a bound on what one read may take from a topic that never ends
_CLIENT = "mm2.offsets.client."

MM2_TAKEOVER_CONFIG = (
    ConfigDef()
    .define("mm2.offsets.topic", Type.STRING, "", "Take over from MirrorMaker 2: its Connect offsets topic "
            "(mm2-offsets.<source alias>.internal, in the target cluster). A partition with no committed offset "
            "of this connector starts after the last record MM2 committed as copied. Empty: off.")
    .define("mm2.offsets.alias", Type.STRING, "", "The source cluster's alias in MM2's offsets (their 'cluster'); "
            "default: cluster.alias.")
    .define_prefix(_CLIENT, "librdkafka settings to read mm2.offsets.topic with (at least "
                   "mm2.offsets.client.bootstrap.servers: the target cluster).")
)


def _entry(key: bytes | None, value: bytes | None, alias: str) -> tuple[tuple[str, int], int | None] | None:
    try:
        name, partition = orjson.loads(key or b"")
        if name != CONNECTOR or not isinstance(partition, dict) or partition.get("cluster") != alias:
            return None
        tp = (str(partition["topic"]), int(partition["partition"]))
        if value is None:
            return tp, None
        offset = orjson.loads(value)["offset"]
        return tp, int(offset)
    except (ValueError, TypeError, KeyError):
        return None


def read_mm2_offsets(client: Mapping[str, Any], topic: str, alias: str, timeout_s: float = 60.0
                     ) -> dict[tuple[str, int], int]:
    """``{(topic, partition): next offset}`` of MM2's flow from ``alias``, read from ``topic``
    (``mm2-offsets.<source>.internal``) with the librdkafka settings ``client``."""
    consumer = Consumer({**client, "group.id": f"connect-mm2-offsets-{alias}", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            raise RetriableError(f"MM2's offsets topic {topic} cannot be read: "
                                 f"{meta.error if meta is not None else 'no such topic'}")
        ends = {}
        for p in meta.partitions:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > 0:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        found: dict[tuple[str, int], int | None] = {}
        deadline, taken = time.monotonic() + timeout_s, 0
        while ends and taken < _MAX_RECORDS:
            if time.monotonic() > deadline:
                raise RetriableError(f"MM2's offsets topic {topic} not read within {timeout_s:g}s")
            for m in consumer.consume(1000, 0.5):
                if m.error() is not None:
                    continue  # partition EOF and transient errors: the ends below decide
                taken += 1
                entry = _entry(m.key(), m.value(), alias)
                if entry is not None:
                    found[entry[0]] = entry[1]
                if m.offset() + 1 >= ends.get(m.partition(), 0):
                    ends.pop(m.partition(), None)
    except KafkaException as exc:
        raise RetriableError(f"reading MM2's offsets topic {topic}: {exc}") from exc
    finally:
        consumer.close()
    return {tp: offset + 1 for tp, offset in found.items() if offset is not None and offset >= 0}


def takeover_offsets(config: Mapping[str, Any], fresh: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Where MM2 stopped, for the partitions in ``fresh`` (those without an offset of our own);
    empty when ``mm2.offsets.topic`` is not set or nothing is fresh."""
    topic = str(config.get("mm2.offsets.topic", "") or "")
    if not topic or not fresh:
        return {}
    alias = str(config.get("mm2.offsets.alias") or config.get("cluster.alias") or "")
    if not alias:
        raise ConfigError([ConfigIssue("mm2.offsets.alias", None, "needed with mm2.offsets.topic (or cluster.alias)")])
    client = {k[len(_CLIENT):]: v for k, v in config.items() if k.startswith(_CLIENT)}
    found = read_mm2_offsets(client, topic, alias)
    return {tp: found[tp] for tp in fresh if tp in found}
