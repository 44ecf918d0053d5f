"""The default RIP-45 hooks say once per task that they keep nothing, not once per failed record."""

from __future__ import annotations

import logging

from connect.records import ConnectRecord
from connect.source import SourceTask


class _Plain(SourceTask):
    def poll(self):
        return []


def test_default_hooks_log_once_per_task(caplog):
    record = ConnectRecord(topic="t", partition=0, key=None, value=b"v")
    first, second = _Plain(), _Plain()
    with caplog.at_level(logging.DEBUG, logger="connect.source"):
        for _ in range(50):
            assert first.dismiss_failed_msgs([record]) is False
            assert first.customer_failed_msgs([record]) is False
        second.dismiss_failed_msgs([record])
    said = [r.getMessage() for r in caplog.records if "does not override" in r.getMessage()]
    assert len(said) == 3, said  # two hooks of the first task, one of the second
    assert "_Plain does not override dismiss_failed_msgs" in said[0]
