"""A connector's source gaps (``connect.source.gaps``), kept durably among its offsets.

Each source partition with a gap has one entry in the offset store, under :func:`ledger_key`, next
to the partition's own offset: ``{"gaps": [gap, ...], "earlier_records": n}``. Keeping them in the
offset store (SQLite, or the offsets topic of the broker-backed stores) rather than beside it
means a gap and the offset that skips it are written in one transaction: the worker never holds
an offset past a gap it has not recorded, nor a gap counted twice (a gap found again - after a
restart, or grown while the pair was stopped - has the same first offset and replaces the one
recorded with its later end).

A gap is *open* until an operator acknowledges it (who and when are recorded). Acknowledging a
gap under ``source.gap.policy=fail`` also commits its ``resume`` offsets, so the restarted pair
reads on from the first record the source still holds.

Pure functions over the stored offsets (``partition key -> offset``): the driver applies them to
its copy, the herder to the store's when the connector runs no task pair.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping

import orjson

from connect.records import partition_key
from connect.source.gaps import FAIL, LEDGER_FIELD

__all__ = ["ledger_key", "is_ledger_key", "ledger_writes", "acknowledge_writes", "gaps_view", "gap_totals",
           "open_gaps"]

log = logging.getLogger("worker.gaps")

GAPS_KEPT = 100  # per partition; older ones are summed into "earlier_records"
_FIELD = LEDGER_FIELD


def ledger_key(topic: str, partition: str) -> str:
    return partition_key({_FIELD: topic, "partition": str(partition)})


def is_ledger_key(key: str) -> bool:
    return key.startswith('{"partition":') and f'"{_FIELD}":' in key


def _identity(gap: Mapping[str, Any]) -> tuple:
    return gap.get("topic"), str(gap.get("partition")), gap.get("first"), gap.get("cause"), gap.get("identity", "")


def _entries(stored: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
    for key, value in stored.items():
        if isinstance(value, Mapping) and is_ledger_key(key):
            yield key, value


def ledger_writes(stored: Mapping[str, Mapping[str, Any]], results: Iterable[tuple[list[dict] | None, Mapping[str, Any]]],
                  connector: str = "") -> dict[str, dict[str, Any]]:
    """What to write with an epoch's offsets for the gaps its results found: the ledger entries,
    and under ``report`` the offsets past each gap (unless the result already moved past it).

    ``results``: (gaps, offsets) of each result."""
    writes: dict[str, dict[str, Any]] = {}
    for gaps, offsets in results:
        for gap in gaps or ():
            key = ledger_key(gap["topic"], gap["partition"])
            entry = writes.get(key) or dict(stored.get(key) or {"gaps": [], "earlier_records": 0})
            kept = [dict(g) for g in entry.get("gaps", [])]
            same = next((g for g in kept if _identity(g) == _identity(gap)), None)
            if same is None:
                kept.append(dict(gap))
                log.error("connector %s: source gap: %s[%s] offsets %s..%s (%s records) were never copied: %s "
                          "(source.gap.policy=%s)", connector, gap["topic"], gap["partition"], gap["first"],
                          "?" if gap["last"] is None else gap["last"],
                          "unknown" if gap["records"] is None else gap["records"], gap["cause"], gap["policy"])
            elif gap["last"] is not None and (same["last"] is None or gap["last"] > same["last"]):
                grown = same["last"] is not None
                same.update(last=gap["last"], resume=gap["resume"], policy=gap["policy"])
                if same.get("records") is not None:
                    same["records"] = gap["last"] - same["first"] + 1
                if grown:
                    same["acknowledged"] = None  # more records are gone than were acknowledged
            if len(kept) > GAPS_KEPT:
                dropped = kept[: len(kept) - GAPS_KEPT]
                entry["earlier_records"] = entry.get("earlier_records", 0) + sum(g.get("records") or 0 for g in dropped)
                kept = kept[len(dropped):]
            entry["gaps"] = kept
            writes[key] = entry
            if gap["policy"] != FAIL:
                for resume_key, offset in gap["resume"].items():
                    if resume_key not in offsets:
                        writes[resume_key] = dict(offset)
    return writes


def acknowledge_writes(stored: Mapping[str, Mapping[str, Any]], by: str, at: float) -> tuple[dict[str, dict], int]:
    """Mark every open gap acknowledged by ``by`` at ``at``; commit the ``resume`` offsets of those
    the pair stopped at (``fail``). Returns the writes and how many gaps were acknowledged."""
    writes: dict[str, dict] = {}
    resumes: dict[str, dict] = {}
    count = 0
    for key, entry in _entries(stored):
        gaps = [dict(g) for g in entry.get("gaps", [])]
        changed = False
        for gap in sorted(gaps, key=lambda g: g.get("detected_at", 0)):
            if gap.get("acknowledged") is None:
                gap["acknowledged"] = {"by": by, "at": at}
                changed = True
                count += 1
                if gap.get("policy") == FAIL:
                    resumes.update({k: dict(v) for k, v in (gap.get("resume") or {}).items()})
        if changed:
            writes[key] = {**entry, "gaps": gaps}
    writes.update(resumes)
    return writes, count


def gaps_view(stored: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every recorded gap, oldest first, as status shows it (without its resume offsets)."""
    out = []
    for _, entry in _entries(stored):
        for gap in entry.get("gaps", []):
            out.append({k: v for k, v in gap.items() if k != "resume"} | {"open": gap.get("acknowledged") is None})
    return sorted(out, key=lambda g: (g.get("detected_at", 0), g.get("topic"), str(g.get("partition"))))


def open_gaps(stored: Mapping[str, Mapping[str, Any]]) -> int:
    return sum(1 for g in gaps_view(stored) if g["open"])


def gap_totals(stored: Mapping[str, Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """Records counted in gaps per (topic, partition), for ``connect_source_gap_records_total``."""
    out: dict[tuple[str, str], float] = {}
    for key, entry in _entries(stored):
        try:
            fields = orjson.loads(key)
        except orjson.JSONDecodeError:
            continue
        label = (str(fields.get(_FIELD)), str(fields.get("partition")))
        out[label] = float(entry.get("earlier_records", 0) + sum(g.get("records") or 0 for g in entry.get("gaps", [])))
    return out
