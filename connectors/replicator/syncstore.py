"""The offset syncs a checkpoint connector knows, and offset translation with them.

Per (source partition, target partition) the store keeps a history of syncs ordered by source
position: the newest ones densely and older ones ever more sparsely (each thinning halves the
older part), plus the oldest one ever seen, so a consumer group far behind still translates,
only more conservatively (MirrorMaker 2 before 3.5 kept the newest sync only and could not
translate a group behind it).

Translation of a group's next position ``C`` in a source partition, per target partition it
feeds, with the newest sync ``(u, d)`` whose ``u <= C``:
- ``u == C``: the group resumes *at* ``d`` (the record at ``u`` is stored at ``d``);
- ``u < C``: the group consumed ``u``, so it resumes *after* ``d``; records between ``u`` and
  ``C`` are read again (the duplicates, bounded by the sync spacing), none is skipped;
- ``C`` before every known sync: not translated (the records before it may be in the target
  before any known position; guessing could skip some).
A target partition fed by several source partitions gets the lowest of their translations.
"""

from __future__ import annotations

import bisect
from typing import Any, Callable, Mapping

from connect.records import partition_key
from connect.tasks.offsetsync import OffsetSync

__all__ = ["SyncStore", "Translation"]

_DENSE = 32  # newest syncs kept as they are
_MAX = 128  # syncs per (source partition, target partition) before the older part is thinned


class Translation(tuple):
    """(position, inclusive): orders "at d" before "after d" (the conservative one is the lower)."""

    __slots__ = ()

    def __new__(cls, position: Any, inclusive: bool):
        return super().__new__(cls, (position, inclusive))

    @property
    def position(self) -> Any:
        return self[0]

    @property
    def inclusive(self) -> bool:
        return self[1]

    def sort_key(self) -> tuple:
        return (self[0], 0 if self[1] else 1)


class _History:
    __slots__ = ("keys", "positions", "first")

    def __init__(self) -> None:
        self.keys: list = []  # source order keys, ascending
        self.positions: list = []  # target position of each
        self.first: tuple | None = None  # (key, position) of the lowest source position ever seen

    def add(self, key: Any, position: Any) -> None:
        i = bisect.bisect_left(self.keys, key)
        if i < len(self.keys) and self.keys[i] == key:
            self.positions[i] = max(self.positions[i], position)  # a replayed copy: both are true
        else:
            self.keys.insert(i, key)
            self.positions.insert(i, position)
        if self.first is None or key < self.first[0]:
            self.first = (key, position)
        if len(self.keys) > _MAX:
            older = len(self.keys) - _DENSE
            keep = [j for j in range(len(self.keys)) if j >= older or j % 2 == 0]
            self.keys = [self.keys[j] for j in keep]
            self.positions = [self.positions[j] for j in keep]
            if self.keys[0] != self.first[0]:
                self.keys.insert(0, self.first[0])
                self.positions.insert(0, self.first[1])

    def translate(self, next_key: Any) -> Translation | None:
        i = bisect.bisect_right(self.keys, next_key) - 1
        if i < 0:
            return None
        return Translation(self.positions[i], self.keys[i] == next_key)


class SyncStore:
    """Offset syncs of one replication flow (source alias -> target alias)."""

    def __init__(self, order_key: Callable[[Mapping[str, Any]], Any]):
        self._order_key = order_key
        # partition_key(source partition) -> {(target topic, label): history}
        self._syncs: dict[str, dict[tuple, _History]] = {}
        self._topic_of: dict[str, str] = {}
        self.count = 0

    def add(self, sync: OffsetSync) -> None:
        key = self._order_key(sync.source_offset)
        source_key = partition_key(sync.source_partition)
        per_target = self._syncs.get(source_key)
        if per_target is None:
            per_target = self._syncs[source_key] = {}
            self._topic_of[source_key] = str(sync.source_partition.get("topic"))
        per_target.setdefault((sync.topic, sync.label), _History()).add(key, sync.position)
        self.count += 1

    def source_topics(self) -> set[str]:
        return set(self._topic_of.values())

    def translate(self, source_key: str, next_key: Any) -> dict[tuple, Translation]:
        """Target partition -> translation of a group's next position in one source partition."""
        out = {}
        for target, history in self._syncs.get(source_key, {}).items():
            t = history.translate(next_key)
            if t is not None:
                out[target] = t
        return out

    def knows(self, source_key: str) -> bool:
        return source_key in self._syncs

    def sources_of(self, target: tuple) -> set[str]:
        """Every source partition (key) known to feed ``target`` (topic, label)."""
        return {key for key, per_target in self._syncs.items() if target in per_target}
