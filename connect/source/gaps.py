"""Records a source dropped before they were copied (retention, truncation, topic re-creation): gaps.

A source task positions each partition at its committed offset + 1. When the source no longer holds
that position (the log start moved past it, the topic was deleted and created again), the records
in between were never copied and never will be. The task then reports a :class:`SourceGap` instead
of silently reading on from what is left, and ``source.gap.policy`` decides what happens next:

- ``fail`` (default): the pair fails with :class:`SourceGapError`, naming the partition, the range
  and the cause. It stays failed until an operator acknowledges the gap (REST
  ``POST /connectors/{name}/gaps/acknowledge``, CLI ``connect connectors acknowledge-gaps NAME --by WHO``), which moves the
  partition to ``resume`` and records who acknowledged and when.
- ``report``: the task reads on from the first record the source still holds; the gap is recorded.

Either way the worker keeps the gap durably next to the connector's offsets, in the same write as
the offset that skips it (``worker.runtime.gapledger``), so a gap is counted once, whatever restarts.

A gap is identified by (topic, partition, first missing offset, cause, topic identity): found again
(after a restart, or because retention went on removing records while the pair was stopped), it
replaces the one recorded with its later end, so it is never counted twice.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import attrs

from connect.config import ConfigDef, Type, one_of
from connect.errors import ConnectError

__all__ = ["SourceGap", "SourceGapError", "GAP_POLICY_KEY", "FAIL", "REPORT", "gap_keys", "LOG_START", "RECREATED",
           "OUT_OF_RANGE", "IDENTITY_FIELD", "LEDGER_FIELD", "is_bookkeeping_key"]

GAP_POLICY_KEY = "source.gap.policy"
FAIL = "fail"
REPORT = "report"

# Fields that mark the worker's own entries among a connector's offsets (not source partitions): a
# topic's identity as last read (connectors.kafka.gaps) and a partition's gap ledger
# (worker.runtime.gapledger). The REST offsets view and its PATCH/DELETE leave them out.
IDENTITY_FIELD = "topic.identity"
LEDGER_FIELD = "source.gaps.of"


def is_bookkeeping_key(key: str) -> bool:
    """Whether an offsets key (a JSON source partition) is gap bookkeeping rather than a source partition."""
    return f'"{IDENTITY_FIELD}":' in key or f'"{LEDGER_FIELD}":' in key


# causes
LOG_START = "the source's log start moved past the committed position (retention or DeleteRecords)"
RECREATED = "the topic was deleted and created again (its identity changed)"
OUT_OF_RANGE = "the committed position is beyond the source's end (the log was truncated)"


def gap_keys() -> ConfigDef:
    """``source.gap.policy``, declared once for every broker source (merged into its ConfigDef)."""
    return ConfigDef().define(
        GAP_POLICY_KEY, Type.STRING, FAIL,
        "What a source does when records it was about to copy are gone from the source (retention, "
        "DeleteRecords, a re-created topic): fail (the pair fails, naming partition and range, until an operator "
        "acknowledges the gap through POST /connectors/{name}/gaps/acknowledge or `connect connectors acknowledge-gaps`) or "
        "report (read on from the first record left; the gap is recorded in the status, the "
        "connect_source_gap_records_total metric and the log).",
        validator=one_of(FAIL, REPORT))


@attrs.frozen
class SourceGap:
    """Records of one partition that were never copied.

    ``first``/``last``: the offsets missing, inclusive (``last`` None when not known: a re-created
    topic's old end). ``records``: how many, None when they cannot be counted. ``resume``: the
    offsets (partition key -> source offset) that move the partition past the gap; committed at
    once under ``report``, on acknowledgement under ``fail``.
    """

    topic: str
    partition: str
    first: int
    last: int | None
    records: int | None
    cause: str
    policy: str
    resume: Mapping[str, Mapping[str, Any]]
    identity: str = ""  # the topic identity the gap belongs to (Kafka topic ID), "" when the source has none
    detected_at: float = attrs.field(factory=time.time)

    @property
    def span(self) -> str:
        last = "?" if self.last is None else str(self.last)
        count = "an unknown number of records" if self.records is None else f"{self.records} record(s)"
        return f"{self.topic}[{self.partition}] offsets {self.first}..{last} ({count})"

    def describe(self) -> str:
        return f"{self.span} were never copied: {self.cause}"

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "first": self.first, "last": self.last,
                "records": self.records, "cause": self.cause, "policy": self.policy, "identity": self.identity,
                "detected_at": self.detected_at, "resume": {k: dict(v) for k, v in self.resume.items()},
                "acknowledged": None}


class SourceGapError(ConnectError):
    """The pair stops at a gap (``source.gap.policy=fail``): permanent until acknowledged."""

    def __init__(self, gap: SourceGap):
        super().__init__(f"{gap.describe()}. source.gap.policy=fail: acknowledge the gap to resume after it "
                         "(POST /connectors/<name>/gaps/acknowledge or `connect connectors acknowledge-gaps <name> "
                         "--by <who>`), or set source.gap.policy=report")
        self.gap = gap
