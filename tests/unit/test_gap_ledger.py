"""The gap ledger (worker.runtime.gapledger): a gap found again is not counted twice, report moves
the partition past it with the gap, fail only on acknowledgement, and who acknowledged is kept."""

from __future__ import annotations

from connect.records import partition_key
from connect.source.gaps import FAIL, LOG_START, RECREATED, REPORT, SourceGap
from worker.runtime.gapledger import acknowledge_writes, gap_totals, gaps_view, ledger_key, ledger_writes, open_gaps

KEY = partition_key({"topic": "t", "partition": 0})


def _gap(first: int, last: int | None, policy: str, cause: str = LOG_START) -> dict:
    records = None if last is None else last - first + 1
    return SourceGap("t", "0", first, last, records, cause, policy, {KEY: {"offset": (last or first)}}).as_dict()


def _apply(stored: dict, gaps: list[dict], offsets: dict | None = None) -> dict:
    stored.update(ledger_writes(stored, [(gaps, offsets or {})]))
    return stored


def test_a_gap_found_again_with_a_later_end_replaces_the_first_and_is_counted_once():
    stored = _apply({}, [_gap(100, 149, REPORT)])
    _apply(stored, [_gap(100, 179, REPORT)])  # retention went on while the pair was stopped
    assert gap_totals(stored) == {("t", "0"): 80.0}
    assert [(g["first"], g["last"], g["records"]) for g in gaps_view(stored)] == [(100, 179, 80)]


def test_report_moves_the_partition_past_the_gap_unless_the_result_already_did():
    stored = _apply({}, [_gap(100, 149, REPORT)])
    assert stored[KEY] == {"offset": 149}
    stored = _apply({KEY: {"offset": 10}}, [_gap(11, 20, REPORT)], offsets={KEY: {"offset": 500}})
    assert stored[KEY] == {"offset": 10}  # the result's own offset (500) is committed by the caller


def test_fail_moves_nothing_until_acknowledged_and_keeps_who_and_when():
    stored = _apply({KEY: {"offset": 99}}, [_gap(100, 149, FAIL)])
    assert stored[KEY] == {"offset": 99} and open_gaps(stored) == 1
    writes, count = acknowledge_writes(stored, "alice", 1234.5)
    stored.update(writes)
    assert count == 1 and stored[KEY] == {"offset": 149} and open_gaps(stored) == 0
    assert gaps_view(stored)[0]["acknowledged"] == {"by": "alice", "at": 1234.5}
    assert acknowledge_writes(stored, "bob", 2.0) == ({}, 0)  # nothing open: nothing changes


def test_a_re_created_topic_is_a_gap_of_unknown_count():
    stored = _apply({}, [_gap(100, None, REPORT, RECREATED)])
    assert gaps_view(stored)[0]["records"] is None and gap_totals(stored) == {("t", "0"): 0.0}
    assert ledger_key("t", "0") in stored


def test_gap_bookkeeping_is_not_a_source_partition_to_show_or_alter():
    """GET /connectors/{name}/offsets lists source partitions only (Kafka Connect's shape), and PATCH
    refuses to write the worker's topic identities or gap ledgers."""
    import pytest

    from connect.source.gaps import is_bookkeeping_key
    from connectors.kafka.gaps import identity_key
    from worker.herding.bodies import offset_changes
    from worker.herding.model import BadRequest

    assert is_bookkeeping_key(identity_key("t")) and is_bookkeeping_key(ledger_key("t", "0"))
    assert not is_bookkeeping_key(KEY)
    assert not is_bookkeeping_key(partition_key({"topic": "topic.identity", "partition": 0}))  # a topic so named
    assert offset_changes({"offsets": [{"partition": {"topic": "t", "partition": 0}, "offset": {"offset": 3}}]}) == {
        KEY: {"offset": 3}}
    with pytest.raises(BadRequest, match=r"\$\.offsets\[0\]\.partition: names the worker's source-gap bookkeeping"):
        offset_changes({"offsets": [{"partition": {"topic.identity": "t"}, "offset": {"id": "x"}}]})
