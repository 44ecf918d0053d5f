"""Failed delivery reports are matched back to records without ever missing the right one.

The Kafka sink gets the failed *message* back from librdkafka, not the record; these tests drive
its matching with message-shaped objects (the broker paths are covered in tests/integration).
"""

from __future__ import annotations

from connect.records import ConnectRecord
from connect.sink import ErrantRecordReporter, SinkTaskContext
from connectors.kafka.sink import KafkaSinkTask


class _Err:
    def fatal(self):
        return False

    def str(self):
        return "Local: Message timed out"


class _Msg:
    def __init__(self, topic, partition, key, value):
        self._t, self._p, self._k, self._v = topic, partition, key, value

    def topic(self):
        return self._t

    def partition(self):
        return self._p

    def key(self):
        return self._k

    def value(self):
        return self._v


def _sink(in_flight, counts):
    task = KafkaSinkTask()
    task.context = SinkTaskContext("t", {}, ErrantRecordReporter())
    task._cfg = {"partition.preserve": True}
    task._targets = {src: (src, n) for src, n in counts.items()}
    task._in_flight = list(in_flight)
    task._failures = []
    task._fatal = None
    return task


def _rec(sp, offset, value=b"{}", key=None, partition=None):
    return ConnectRecord("t", key, value, None, None, sp, {"offset": offset}, partition)


def test_identical_messages_from_two_source_partitions_report_both_partitions():
    p0, p5 = {"topic": "t", "partition": 0}, {"topic": "t", "partition": 5}
    a, b = _rec(p0, 1, partition=0), _rec(p5, 1, partition=5)
    task = _sink([a, b], {"t": 2})  # partition 5 does not exist in the target: b was key-partitioned
    task._failures = [(_Err(), _Msg("t", 1, None, b"{}"))]  # b failed (it went to partition 1)
    task._report_failures()
    reported = [r for r, _ in task.context.errant_record_reporter.take()]
    assert reported == [b]  # a was produced to partition 0 explicitly, so it cannot be the failed one


def test_ambiguous_identical_key_partitioned_messages_block_every_candidate_partition():
    p0, p1 = {"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}
    a, b = _rec(p0, 7), _rec(p1, 9)  # no partition hint: both key-partitioned
    task = _sink([a, b], {"t": 1})
    task._failures = [(_Err(), _Msg("t", 0, None, b"{}"))]
    task._report_failures()
    reported = [r for r, _ in task.context.errant_record_reporter.take()]
    assert sorted(r.source_offset["offset"] for r in reported) == [7, 9]


def test_identical_messages_of_one_partition_are_matched_one_failure_each():
    p0 = {"topic": "t", "partition": 0}
    recs = [_rec(p0, i, partition=0) for i in range(3)]
    task = _sink(recs, {"t": 1})
    task._failures = [(_Err(), _Msg("t", 0, None, b"{}")), (_Err(), _Msg("t", 0, None, b"{}"))]
    task._report_failures()
    reported = [r for r, _ in task.context.errant_record_reporter.take()]
    assert len(reported) == 2 and len({id(r) for r in reported}) == 2


def test_str_payloads_match_the_bytes_librdkafka_reports():
    p0 = {"topic": "t", "partition": 0}
    r = _rec(p0, 3, value="héllo", key="k", partition=0)
    task = _sink([r], {"t": 1})
    task._failures = [(_Err(), _Msg("t", 0, b"k", "héllo".encode()))]
    task._report_failures()
    assert [x for x, _ in task.context.errant_record_reporter.take()] == [r]
