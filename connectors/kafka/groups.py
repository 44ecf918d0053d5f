"""Kafka consumer groups for the checkpoint connector (see ``connectors.replicator.groups``).

Committed offsets are read with the admin API (OffsetFetch: no group membership needed, so an
active group is read as it runs) and written with AlterConsumerGroupOffsets, which the broker only
accepts for a group without members - MirrorMaker 2's rule for ``sync.group.offsets`` too.
A position is the next offset the group consumes; a record's order key is its offset. A parked
partition (position None: the group cannot be translated there) gets the earliest offset stored,
only where the group has no committed offset.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from connect.errors import RetriableError
from connect.records import partition_key
from connectors.kafka.clients import POOL, client_config
from connectors.replicator.groups import GroupPositions, TargetPartition

__all__ = ["KafkaGroups"]

log = logging.getLogger(__name__)

_INACTIVE = {ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD}


class KafkaGroups(GroupPositions):
    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self._timeout = int(config.get("request.timeout.ms", 10_000)) / 1000
        self._conf = client_config(config, "admin")
        self._owner = f"groups-{id(self)}"
        self._admin = POOL.acquire("admin", self._owner, self._conf)

    def _result(self, what: str, futures: Mapping[Any, Any]) -> list:
        try:
            return [f.result(timeout=self._timeout) for f in futures.values()]
        except KafkaException as exc:
            raise RetriableError(f"{what}: {exc.args[0].str() if exc.args else exc}") from exc
        except Exception as exc:  # noqa: BLE001 - timeouts of concurrent futures
            raise RetriableError(f"{what}: {type(exc).__name__}: {exc}") from exc

    def list_groups(self) -> list[str] | None:
        try:
            listed = self._admin.list_consumer_groups(request_timeout=self._timeout).result(timeout=self._timeout)
        except Exception as exc:  # noqa: BLE001
            raise RetriableError(f"cannot list consumer groups at {self._conf['bootstrap.servers']}: {exc}") from exc
        return sorted(g.group_id for g in listed.valid)

    def _committed(self, group: str) -> list[TopicPartition]:
        """The group's partitions as OffsetFetch answered them, each with its offset (negative:
        none committed) or its error."""
        [answer] = self._result(f"committed offsets of group {group}", self._admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=self._timeout))
        return list(answer.topic_partitions or ())

    def positions(self, group: str, topics: Sequence[str]) -> dict[str, tuple[dict, Any]] | None:
        wanted = set(topics)
        out: dict[str, tuple[dict, Any]] = {}
        for tp in self._committed(group):
            if tp.topic in wanted and tp.offset >= 0 and tp.error is None:
                sp = {"topic": tp.topic, "partition": tp.partition}
                out[partition_key(sp)] = (sp, tp.offset)
        return out

    @staticmethod
    def order_key(offset: Mapping[str, Any]) -> Any:
        return int(offset["offset"])

    def active(self, group: str) -> bool:
        [description] = self._result(f"state of group {group}", self._admin.describe_consumer_groups(
            [group], request_timeout=self._timeout))
        return description.state not in _INACTIVE

    def apply(self, group: str, targets: Mapping[TargetPartition, tuple[Any, bool]]) -> list[TargetPartition]:
        if not targets or self.active(group):
            return []
        committed = self._committed(group)
        # A partition answered with an error has an offset nobody knows: taken as none, parking
        # would overwrite a real one with the earliest, and a move could go backwards.
        wanted = {(topic, int(part)) for topic, part in targets}
        failed = [tp for tp in committed if tp.error is not None and (tp.topic, tp.partition) in wanted]
        if failed:
            tp = failed[0]
            raise RetriableError(f"committed offsets of group {group}: {len(failed)} partition(s) not read, first "
                                 f"{tp.topic}[{tp.partition}]: {tp.error.str()}")
        current = {(tp.topic, tp.partition): tp.offset for tp in committed if tp.offset >= 0}
        earliest = self._earliest([t for t, (position, _i) in targets.items()
                                   if position is None and (t[0], int(t[1])) not in current])
        moves = []
        for (topic, part), (position, inclusive) in targets.items():
            if position is None:  # parked: the earliest offset, only where the group has none
                if (topic, int(part)) in current:
                    continue
                position = earliest[(topic, int(part))]
            new = int(position) + (0 if inclusive else 1)
            if current.get((topic, int(part)), -1) < new:
                moves.append(TopicPartition(topic, int(part), new))
        if not moves:
            return []
        self._result(f"altering offsets of group {group}", self._admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, moves)], request_timeout=self._timeout))
        return [(tp.topic, tp.partition) for tp in moves]

    def _earliest(self, targets: Sequence[TargetPartition]) -> dict[tuple[str, int], int]:
        """The earliest offset still stored of each partition (ListOffsets: earliest)."""
        if not targets:
            return {}
        tps = [TopicPartition(topic, int(part)) for topic, part in targets]
        found = self._result("earliest offsets", self._admin.list_offsets(
            {tp: OffsetSpec.earliest() for tp in tps}, request_timeout=self._timeout))
        return {(tp.topic, tp.partition): max(int(info.offset), 0) for tp, info in zip(tps, found, strict=True)}

    def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            POOL.release("admin", self._owner, self._conf, admin)
