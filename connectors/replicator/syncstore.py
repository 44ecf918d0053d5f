"""The offset syncs a checkpoint connector knows, and offset translation with them.

Per (source partition, target partition) the store keeps a history of syncs ordered by source
position, thinned by age so that memory grows with the logarithm of the history while a group far
behind still translates (MirrorMaker 2 before 3.5 kept the newest sync only and could not
translate a group behind it). Counting syncs by their arrival (the age of a sync: how many arrived
after it), the newest ``_DENSE`` (256) are all kept; older ones at level ``j`` (age in
``[256 (2^j - 1), 256 (2^(j+1) - 1))``) are kept one in ``2^j``; the oldest sync ever seen is kept
too. So at most ``256 x (levels + 1)`` syncs per (source partition, target partition): about 4,100
after 10^9 records copied at ``offset.syncs.max.lag=100``
(16 levels).

Translation of a group's next position ``C`` in a source partition, per target partition it
feeds, with the newest sync ``(u, d)`` whose ``u <= C``:
- ``u == C``: the group resumes *at* ``d`` (the record at ``u`` is stored at ``d``);
- ``u < C``: the group consumed ``u``, so it resumes *after* ``d``; records between ``u`` and
  ``C`` are read again (the duplicates), none is skipped;
- ``C`` before every known sync: not translated (the records before it may be in the target
  before any known position; guessing could skip some). The checkpoint connector reports it.
A target partition fed by several source partitions gets the lowest of their translations.

Error bound. The mirror writes a sync at least every ``offset.syncs.max.lag`` (``L``) records
per (source partition, target partition) (``connect.tasks.offsetsync``), so a group whose position
is behind a sync of age ``r`` re-reads at most ``L x 2^j`` records there, ``j`` the level of that
age: at most ``L`` while it is within the newest 256 syncs (256 x L records: 25,600 at the
default, fewer where interval syncs add some), ``2L`` for the next 512, ``4L`` for the next 1,024...
- under ``L x (1 + r / 256)`` in all, about ``L`` plus 0.4 % of how far behind the newest sync the
group is. A Pulsar target adds up to one batch of the mirror's producer (a subscription resumes at
the start of a batched entry). Syncs no longer in the offset-syncs topic (its retention) are not
known: a group behind all that remain is not translated.
"""

from __future__ import annotations

import bisect
from typing import Any, Callable, Mapping

from connect.records import partition_key
from connect.tasks.offsetsync import OffsetSync

__all__ = ["SyncStore", "Translation"]

_DENSE = 256  # newest syncs kept as they are; each older level keeps as many, one in 2^level


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
    __slots__ = ("keys", "positions", "seqs", "first", "added", "_thin_at")

    def __init__(self) -> None:
        self.keys: list = []  # source order keys, ascending
        self.positions: list = []  # target position of each
        self.seqs: list[int] = []  # arrival number of each (0 for the first sync seen)
        self.first: tuple | None = None  # (key, position, seq) of the lowest source position ever seen
        self.added = 0
        self._thin_at = 2 * _DENSE

    def add(self, key: Any, position: Any) -> None:
        i = bisect.bisect_left(self.keys, key)
        if i < len(self.keys) and self.keys[i] == key:
            self.positions[i] = max(self.positions[i], position)  # a replayed copy: both are true
            return
        seq = self.added
        self.added += 1
        self.keys.insert(i, key)
        self.positions.insert(i, position)
        self.seqs.insert(i, seq)
        if self.first is None or key < self.first[0]:
            self.first = (key, position, seq)
        if len(self.keys) >= self._thin_at:
            self._thin()
            self._thin_at = len(self.keys) + _DENSE // 2  # amortised: one pass per 128 syncs

    def _thin(self) -> None:
        """Keep the syncs of age < _DENSE, and at level j (age in [_DENSE (2^j - 1), _DENSE (2^(j+1) - 1)))
        those whose arrival number is a multiple of 2^j; and the first. A sync dropped at one level would
        be dropped at every later one (a multiple of 2^(j+1) is one of 2^j), so each level keeps exactly
        one in 2^j of the syncs of its ages."""
        newest = self.added - 1
        first = self.first[2] if self.first is not None else -1
        keep = []
        for j, seq in enumerate(self.seqs):
            age = newest - seq
            if age < _DENSE or seq == first or not seq & ((1 << ((age // _DENSE + 1).bit_length() - 1)) - 1):
                keep.append(j)
        if len(keep) < len(self.keys):
            self.keys = [self.keys[j] for j in keep]
            self.positions = [self.positions[j] for j in keep]
            self.seqs = [self.seqs[j] for j in keep]

    def translate(self, next_key: Any) -> Translation | None:
        i = bisect.bisect_right(self.keys, next_key) - 1
        if i < 0:
            return None
        return Translation(self.positions[i], self.keys[i] == next_key)

    def oldest(self) -> Any:
        """Order key of the oldest sync known."""
        return self.keys[0] if self.keys else None


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

    def oldest(self, source_key: str) -> Any:
        """Order key of the oldest sync known of a source partition (over its target partitions)."""
        keys = [h.oldest() for h in self._syncs.get(source_key, {}).values() if h.keys]
        return min(keys) if keys else None

    def targets_of(self, source_key: str) -> list[tuple]:
        """The target partitions (topic, label) a source partition is known to feed."""
        return list(self._syncs.get(source_key, {}))

    def knows(self, source_key: str) -> bool:
        return source_key in self._syncs

    def sources_of(self, target: tuple) -> set[str]:
        """Every source partition (key) known to feed ``target`` (topic, label)."""
        return {key for key, per_target in self._syncs.items() if target in per_target}
