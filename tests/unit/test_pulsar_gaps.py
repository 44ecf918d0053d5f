"""The Pulsar source's gap check (``connectors.pulsar.gaps.IndexCheck``) against indexes a test
decides: which discontinuities are gaps, which only re-anchor the count. Over the wire on Apache
Pulsar: tests/integration/test_source_gaps_pulsar.py."""

from __future__ import annotations

import types

import pytest

from connect.source.gaps import RECREATED
from connectors.pulsar.gaps import TRIMMED, IndexCheck


class _Check(IndexCheck):
    def __init__(self, indexes: dict, policy: str = "fail"):
        super().__init__("http://admin", {}, policy)
        self.indexes = indexes  # (ledger, entry) -> entry index; absent: its ledger is gone
        self.asked: list = []

    def index(self, entry, pos):
        self.asked.append(pos[:2])
        return self.indexes.get(pos[:2])


def _entry(index, at):
    return types.SimpleNamespace(index=index, at=at, recheck=0.0, name="persistent://t/n/x", topic="persistent://t/n/x",
                                 part=-1, sp={"topic": "persistent://t/n/x", "partition": -1})


def test_a_new_ledger_after_one_still_there_is_no_gap_whatever_the_indexes_say():
    # transaction markers take indexes a reader never sees: 7 -> 10 is not a gap while ledger 3 is there
    check, entry = _Check({(3, 4): 7, (5, 0): 10}), _entry(7, (3, 4, -1))
    assert check.check(entry, (5, 0, -1)) and entry.index == 9 and check.gaps == []


@pytest.mark.parametrize("found, gap", [(8, None), (20, (8, 19, 12, TRIMMED)), (0, (8, None, None, RECREATED))])
def test_the_previous_ledger_gone_the_indexes_decide(found, gap):
    check, entry = _Check({(5, 0): found}), _entry(7, (3, 4, -1))
    taken = check.check(entry, (5, 0, -1))
    if gap is None:
        assert taken and check.gaps == [] and entry.index == found - 1
        return
    assert not taken and check.error is check.gaps[0]  # fail: held, the pair stops here
    got = check.gaps[0]
    assert (got.first, got.last, got.records, got.cause) == gap
    assert list(got.resume.values()) == [{"ledger": 5, "entry": -1, "batch": -1, "index": found - 1}]


def test_report_takes_the_message_after_the_gap():
    check, entry = _Check({(5, 2): 30}, "report"), _entry(7, (3, 4, -1))
    assert check.check(entry, (5, 2, 1)) and check.error is None and entry.index == 29
    assert list(check.gaps[0].resume.values()) == [{"ledger": 5, "entry": 2, "batch": 0, "index": 29}]


def test_a_hole_inside_a_ledger_re_anchors_at_most_once_a_second():
    check, entry = _Check({(3, 9): 12, (3, 20): 30}), _entry(5, (3, 2, -1))
    assert check.check(entry, (3, 9, -1)) and entry.index == 11 and check.asked == [(3, 9)]
    entry.at = (3, 9, -1)
    assert check.check(entry, (3, 20, -1)) and entry.index is None  # not known until the next look-up
    assert check.asked == [(3, 9)] and check.gaps == []


def test_an_unknown_index_cannot_make_a_gap(caplog):
    check, entry = _Check({(5, 0): 50}), _entry(None, (3, 4, -1))  # committed before index tracking
    assert check.check(entry, (5, 0, -1)) and check.gaps == [] and entry.index == 49
    assert "cannot be told" in caplog.text
