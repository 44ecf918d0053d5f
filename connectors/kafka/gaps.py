"""Where a Kafka partition's committed position no longer exists: gaps (``connect.source.gaps``).

Checked whenever a task resumes a partition from a committed offset and whenever the consumer
reports a position out of range (``auto.offset.reset=error``, so librdkafka never moves it silently):

- the topic's identity (its topic ID, KIP-516): a topic deleted and created again under the same
  name has a new one. Its old offsets are never applied to it: the new topic is read from its
  start, and the records after the committed offset of the old topic are a gap of unknown count;
- the log start offset: a committed offset + 1 below it means retention or DeleteRecords removed
  ``log start - (committed + 1)`` records that were never copied;
- the high watermark: a position beyond it (the log was truncated under us) resumes at the end; it
  skips nothing that the broker holds.

The topic identity a connector last read is kept among its offsets under :func:`identity_key`.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping

from confluent_kafka import KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import OffsetSpec

from connect.errors import RetriableError
from connect.records import partition_key
from connect.source.gaps import IDENTITY_FIELD, LOG_START, RECREATED, SourceGap

__all__ = ["identity_key", "GapCheck", "Position"]

log = logging.getLogger(__name__)

_NO_ID = "AAAAAAAAAAAAAAAAAAAAAA"  # the zero UUID: a broker that has no topic IDs
Position = tuple[str, int, int]  # topic, partition, next offset to read


def identity_key(topic: str) -> str:
    """The offsets key that holds the identity (topic ID) of ``topic`` as last read."""
    return partition_key({IDENTITY_FIELD: topic})


class GapCheck:
    """One round of checks through an admin client (a few batched requests, not one per partition)."""

    def __init__(self, admin, policy: str, timeout: float = 10.0):
        self._admin = admin
        self._policy = policy
        self._timeout = timeout

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        names = sorted(set(topics))
        if not names:
            return {}
        try:
            found = self._admin.describe_topics(TopicCollection(names), request_timeout=self._timeout)
            ids = {name: str(future.result().topic_id) for name, future in found.items()}
        except KafkaException as exc:
            # A broker without topic IDs (KIP-516) cannot tell a re-created topic by identity; the
            # offset checks still hold. Said, not hidden.
            log.warning("cannot describe topics %s to check their identity (re-creation is then seen by offsets "
                        "only): %s", ", ".join(names), exc)
            return {}
        return {name: i for name, i in ids.items() if i and i != _NO_ID}

    def bounds(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """(log start offset, high watermark) per partition."""
        wanted = [TopicPartition(t, p) for t, p in tps]
        if not wanted:
            return {}
        out: dict[tuple[str, int], list[int]] = {(tp.topic, tp.partition): [0, 0] for tp in wanted}
        try:
            for index, spec in ((0, OffsetSpec.earliest()), (1, OffsetSpec.latest())):
                answers = self._admin.list_offsets({tp: spec for tp in wanted}, request_timeout=self._timeout)
                for tp, future in answers.items():
                    out[(tp.topic, tp.partition)][index] = future.result().offset
        except KafkaException as exc:
            raise RetriableError(f"cannot list the offsets of {len(wanted)} partition(s) to check for gaps: {exc}") from exc
        return {k: (v[0], v[1]) for k, v in out.items()}

    def check(self, positions: list[Position], known_ids: Mapping[str, str | None],
              partition_keys: Mapping[tuple[str, int], str]) -> tuple[list[Position], list[SourceGap], dict[str, str]]:
        """Where to read each partition from, the gaps found, and the topic IDs now (by topic).

        ``positions``: where each partition would resume; ``known_ids``: the topic IDs last read
        (None: never recorded, nothing to compare)."""
        ids = self.topic_ids(t for t, _, _ in positions)
        bounds = self.bounds((t, p) for t, p, _ in positions)
        out, gaps = [], []
        for topic, part, offset in positions:
            low, high = bounds[(topic, part)]
            key = partition_keys[(topic, part)]
            old, new = known_ids.get(topic), ids.get(topic)
            resume = {key: {"offset": low - 1}}
            if new is not None:
                resume[identity_key(topic)] = {"id": new}
            if old is not None and new is not None and old != new:
                gaps.append(SourceGap(topic, str(part), offset, None, None, RECREATED, self._policy, resume, old))
                out.append((topic, part, low))
            elif offset < low:
                gaps.append(SourceGap(topic, str(part), offset, low - 1, low - offset, LOG_START, self._policy,
                                      resume, new or ""))
                out.append((topic, part, low))
            elif offset > high:
                log.warning("%s[%d]: the committed position %d is beyond the end (%d): the log was truncated; "
                            "resuming at its end (no record it holds is skipped)", topic, part, offset, high)
                out.append((topic, part, high))
            else:
                out.append((topic, part, offset))
        return out, gaps, ids


def log_gap(owner: str, gap: SourceGap) -> None:
    """Where the gap was found (the worker logs it once, with its range, when it records it)."""
    log.debug("[%s] source gap: %s (source.gap.policy=%s)", owner, gap.describe(), gap.policy)


def known_ids(answers: Mapping[str, Any], topics: Iterable[str]) -> dict[str, str | None]:
    out = {}
    for topic in topics:
        value = answers.get(identity_key(topic))
        out[topic] = value.get("id") if isinstance(value, Mapping) else None
    return out
