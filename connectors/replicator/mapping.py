"""Structure across brokers: Kafka partitions <-> RocketMQ queues <-> Pulsar partitions.

The unit of order is the same everywhere - a Kafka partition, a RocketMQ queue, a Pulsar partition -
and the data connectors keep it (a record goes to the target partition/queue with its source's
index), so a topic's structure maps one to one:

=====================  ======================  ==========================================
Kafka                  RocketMQ                Pulsar
=====================  ======================  ==========================================
N partitions           N write = N read queues  partitioned topic, N partitions
1 partition            1 queue                 non-partitioned topic (``partitions`` 0) *
=====================  ======================  ==========================================

\\* a Pulsar topic that is not partitioned is one ordered log: it maps to one partition or queue,
and a Kafka topic or RocketMQ topic with one partition or queue maps back to a non-partitioned
Pulsar topic only when the Pulsar side already has it so (a one-partition partitioned topic
otherwise). Counts only grow, as Kafka partitions can only be added (RocketMQ queues could shrink,
but records in the dropped queues would be stranded; Pulsar partitions cannot shrink either).

Topic configs do not map across brokers (retention, compaction, ACL models differ): a config
connector copies them only between clusters of the same broker and says so when they differ.
"""

from __future__ import annotations

__all__ = ["ordered_units", "target_units"]


def ordered_units(kind: str, partitions: int) -> int:
    """Ordered logs a topic of ``kind`` holds, given its ``partitions`` figure as metadata events
    carry it (Kafka partitions, RocketMQ write queues, Pulsar partitions with 0 = not partitioned)."""
    if kind not in ("kafka", "rocketmq", "pulsar"):
        raise ValueError(f"unknown broker {kind!r}")
    return max(int(partitions), 1) if kind == "pulsar" else int(partitions)


def target_units(source_kind: str, source_partitions: int, target_kind: str, current: int | None = None) -> int | None:
    """The ``partitions`` figure to give the target topic (Kafka partitions, RocketMQ queues,
    Pulsar partitions), or None when the target stays as it is. ``current`` is the target's figure
    now (None: the topic does not exist)."""
    wanted = ordered_units(source_kind, source_partitions)
    if current is None:
        return wanted
    have = ordered_units(target_kind, current)
    if wanted <= have:
        return None  # never shrink
    return wanted
