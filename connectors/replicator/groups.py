"""Consumer-group positions of one cluster, as the checkpoint connector reads and writes them.

One implementation per broker (``connectors.kafka.groups``, ``connectors.rocketmq.groups``,
``connectors.pulsar.groups``), chosen by ``cluster_groups(type, config)``. Positions are opaque
per broker; what the checkpoint connector needs is that they compare within one partition:

- *source side*: ``positions(group, topics)`` gives, per partition the group has a committed
  position in, the source partition dict exactly as that broker's SourceTask builds it and the
  order key of the *next* record the group will consume; ``order_key(source_offset)`` gives the
  order key of one replicated record (its source offset dict), so the two compare.
- *target side*: a target partition is ``(topic, label)`` with the label a sink reports with each
  acknowledgement (Kafka: partition number; Pulsar: partition index, -1 when not partitioned;
  RocketMQ: ``(broker name, queue id)``), and a target position is what that sink reports too
  (Kafka offset, RocketMQ queue offset, Pulsar ``(ledger, entry, batch)``). ``apply`` moves a
  group to translated positions: ``(position, inclusive)`` - inclusive: the next record the group
  consumes is the one at ``position``; not inclusive: the one after it. ``position`` None *parks*
  the partition: the group gets the partition's earliest position if it has none there (a group
  that cannot be translated must not leave a fail-over consumer to a reset policy that skips).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

__all__ = ["GroupPositions", "TargetPartition", "cluster_groups", "GROUP_BACKENDS"]

TargetPartition = tuple[str, Any]  # (topic, label)

GROUP_BACKENDS = {
    "kafka": "connectors.kafka.groups:KafkaGroups",
    "rocketmq": "connectors.rocketmq.groups:RocketMQGroups",
    "pulsar": "connectors.pulsar.groups:PulsarGroups",
}


class GroupPositions:
    """A cluster's consumer groups (Kafka groups, RocketMQ consumer groups, Pulsar subscriptions)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = dict(config)

    def list_groups(self) -> list[str] | None:
        """Every group the cluster can list; None when it cannot (the groups must be named)."""
        return None

    def positions(self, group: str, topics: Sequence[str]) -> dict[str, tuple[dict, Any]] | None:
        """partition_key(sp) -> (sp, order key of the next record ``group`` consumes), for each
        partition of ``topics`` where the group has a committed position. None: the positions
        cannot be read now (e.g. the group is active and the broker cannot be asked without
        joining it)."""
        raise NotImplementedError

    @staticmethod
    def order_key(offset: Mapping[str, Any]) -> Any:
        """Order key of a record from its source offset dict (comparable with ``positions``)."""
        raise NotImplementedError

    def apply(self, group: str, targets: Mapping[TargetPartition, tuple[Any, bool]]) -> list[TargetPartition]:
        """Move ``group`` to these positions where that is forward and the group is inactive;
        the partitions moved (none when the group is active)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release clients."""


def cluster_groups(kind: str, config: Mapping[str, Any]) -> GroupPositions:
    """The ``GroupPositions`` of a ``kafka``, ``rocketmq`` or ``pulsar`` cluster."""
    import importlib

    try:
        module, _, name = GROUP_BACKENDS[kind].partition(":")
    except KeyError:
        raise ValueError(f"unknown cluster type {kind!r} (one of {', '.join(GROUP_BACKENDS)})") from None
    return getattr(importlib.import_module(module), name)(config)
