"""Exactly-once to Kafka (``exactly.once.support``) over the wire, on Apache Kafka (tansu shows aborted
records to ``read_committed`` readers, so it cannot prove any of this).

Each epoch of a pair is one transaction holding its records and the pair's source offsets (records
of the offsets topic on the target); a restarted pair resumes from those offsets; a failed epoch
leaves nothing visible; an older attempt of the pair is fenced by the broker."""

from __future__ import annotations

import os
import socket
import time

import orjson
import pytest
from kafka_util import consume_committed

from connect.connector import ConnectorContext
from connect.errors import ConnectError, TransactionsUnavailableError
from connect.records import ConnectRecord
from connect.tasks.plan import PairPlan
from connect.tasks.policy import RunnerPolicy
from connect.tasks.results import FAILED, RUNNING
from connect.tasks.runner import TaskPairRunner
from connect.testing import MemorySourceTask
from connectors.kafka import KafkaSinkTask
from connectors.kafka.side import KafkaSideWriter
from connectors.kafka.sink import KafkaSinkConnector

N = 3000


def _read(bootstrap: str, topic: str, isolation: str, expected: int = 0, quiet_s: float = 2.0, timeout: float = 60):
    """Every record of partition 0, read with ``isolation``, until ``expected`` arrived and ``quiet_s`` of silence."""
    return consume_committed(bootstrap, topic, [0], expected, timeout, quiet_s, isolation)


def _runner(bootstrap: str, connector: str, topic: str, mode: str = "required", source=None, records: int = N,
            offsets=None, converter: str = "bytes", dlq_topic: str | None = None, sink_extra=None, task: int = 0,
            **policy) -> TaskPairRunner:
    dlq = (lambda: KafkaSideWriter({"bootstrap.servers": bootstrap, "topic": dlq_topic}, dlq_topic)) if dlq_topic else None
    return TaskPairRunner(PairPlan(
        connector=connector, task_id=task, source=source or MemorySourceTask(), sink=KafkaSinkTask(),
        source_config={"topic": "src", "records": str(records), "partitions": "1", "batch.size": "100",
                       "value.converter": converter},
        sink_config={"bootstrap.servers": bootstrap, "topic": topic, "value.converter": converter, **(sink_extra or {})},
        policy=RunnerPolicy(exactly_once=mode, **{"epoch_max_ms": 1500, "epoch_grace_ms": 5000, **policy}),
        offsets=offsets, dlq_factory=dlq))


def _until_done(runner: TaskPairRunner, records: int, epochs: int = 40) -> int:
    moved = 0
    for epoch in range(epochs):
        result = runner.run_epoch(epoch, max_records=700)
        assert result.state == RUNNING, result.trace
        assert result.stats["delivery"] == "exactly-once"
        moved += result.stats["records"]
        if result.offsets.get('{"partition":0,"topic":"src"}', {}).get("offset") == records - 1:
            return moved
    raise AssertionError(f"not done after {epochs} epochs: {moved} moved")


def _values(msgs) -> list[int]:
    return [int(m.key()) for m in msgs]


@pytest.fixture
def target(apache_kafka_pair):
    return apache_kafka_pair[1].bootstrap


def test_each_epoch_commits_records_and_offsets_together_and_a_restart_resumes_from_the_target(target, unique):
    topic = f"eos-{unique}"
    runner = _runner(target, unique, topic)
    try:
        _until_done(runner, N)
    finally:
        runner.stop()
    assert _values(_read(target, topic, "read_committed", N)) == list(range(N))
    # The offsets live in the target, in the offsets topic, keyed by [connector, source partition].
    stored = _read(target, f"connect-offsets.{unique}", "read_committed", 1, quiet_s=1)
    last = stored[-1]
    assert orjson.loads(last.key()) == [unique, {"partition": 0, "topic": "src"}]
    assert orjson.loads(last.value()) == {"offset": N - 1}
    assert dict(last.headers())["task"] == b"0"
    # A restart resumes from the target's offsets, not from the worker's store (here: stale offsets given).
    again = _runner(target, unique, topic, records=N + 500, offsets={'{"partition":0,"topic":"src"}': {"offset": 10}})
    try:
        assert _until_done(again, N + 500) == 500
    finally:
        again.stop()
    assert _values(_read(target, topic, "read_committed", N + 500)) == list(range(N + 500))


class _FailingSource(MemorySourceTask):
    """Fails (permanently) at its ``fail_at``-th poll, after records went out in the open transaction."""

    fail_at = 5

    def poll(self):
        self.fail_at -= 1
        if self.fail_at == 0:
            time.sleep(2)  # the epoch's records reach the broker first
            raise ConnectError("injected source failure")
        return super().poll()


def test_a_failed_epoch_leaves_nothing_visible_to_read_committed_readers(target, unique):
    topic = f"eos-fail-{unique}"
    runner = _runner(target, unique, topic, source=_FailingSource())
    try:
        first = runner.run_epoch(0, max_records=200)  # committed: records 0-199
        assert first.state == RUNNING, first.trace
        result = runner.run_epoch(1)
        assert result.state == FAILED and "injected source failure" in result.trace
        assert result.offsets == {} and result.stats["aborted"] == 1
    finally:
        runner.stop()
    # The failed epoch's records reached the broker (a read_uncommitted reader sees them) but were aborted.
    uncommitted = _read(target, topic, "read_uncommitted", 300)
    assert len(uncommitted) >= 300
    assert _values(_read(target, topic, "read_committed", 200)) == list(range(200))
    # The restarted pair resumes after record 199: nothing twice, nothing missing.
    again = _runner(target, unique, topic, records=1000)
    try:
        _until_done(again, 1000)
    finally:
        again.stop()
    assert _values(_read(target, topic, "read_committed", 1000)) == list(range(1000))


class _ZombieMaker(MemorySourceTask):
    """At its 3rd poll (records of the open transaction already sent) a newer attempt of the same pair starts."""

    newer = None
    make = None

    def poll(self):
        batch = super().poll()
        if self.make is not None and self.next[0] == 300:
            self.newer, self.make = self.make(), None
        return batch


def test_an_older_attempt_of_a_pair_is_fenced_and_commits_nothing(target, unique):
    topic = f"eos-zombie-{unique}"
    zombie_source = _ZombieMaker()
    zombie = _runner(target, unique, topic, source=zombie_source, records=2000)
    newer = None
    try:
        assert zombie.run_epoch(0, max_records=100).state == RUNNING  # committed: 0-99
        zombie_source.make = lambda: _runner(target, unique, topic, records=2000)
        fenced = zombie.run_epoch(1, max_records=600)
        newer = zombie_source.newer
        assert newer is not None
        assert fenced.state == FAILED, fenced.trace
        assert "ProducerFencedError" in fenced.trace and f"transactional.id connect-{unique}-0" in fenced.trace
        assert f"was fenced by the attempt on {socket.gethostname()} (pid {os.getpid()}, started" in fenced.trace
        assert fenced.offsets == {} and fenced.stats["fenced"] == 1
        _until_done(newer, 2000)
    finally:
        zombie.stop()
        if newer is not None:
            newer.stop()
    assert _values(_read(target, topic, "read_committed", 2000)) == list(range(2000))


class _SomeNotJson(_FailingSource):
    """JSON values, but every 10th record's is not JSON (the source-side json converter fails it: a dead
    letter); fails at its ``fail_at``-th poll."""

    fail_at = 4

    def poll(self):
        return [ConnectRecord(r.topic, r.key, b"not json" if int(r.key) % 10 == 3 else b'"ok"', r.headers, r.timestamp,
                              r.source_partition, r.source_offset, r.partition) for r in super().poll()]


def test_dead_letters_to_the_target_cluster_commit_and_abort_with_the_epoch(target, unique):
    topic, dlq = f"eos-dlq-{unique}", f"eos-dlq-letters-{unique}"
    runner = _runner(target, unique, topic, source=_SomeNotJson(), converter="json", dlq_topic=dlq,
                     max_in_flight_records=200)  # a commit point every 50 records: dead letters go out
    try:
        first = runner.run_epoch(0, max_records=180)  # records 0-199: 180 put, 20 dead letters
        assert first.state == RUNNING and first.stats["dead_lettered"] == 20, first.trace
        failed = runner.run_epoch(1)  # 100 more (10 dead letters), then the source fails: all aborted
        assert failed.state == FAILED and "injected source failure" in failed.trace
    finally:
        runner.stop()
    assert len(_read(target, dlq, "read_uncommitted", 30)) >= 30  # the aborted epoch's dead letters were sent
    assert sorted(_values(_read(target, dlq, "read_committed", 20))) == [i for i in range(200) if i % 10 == 3]
    assert _values(_read(target, topic, "read_committed", 180)) == [i for i in range(200) if i % 10 != 3]


def test_a_20_s_target_outage_keeps_the_transaction_open_and_nothing_doubles(proxied_target, unique):
    """The target blackholed for 20 s mid-stream: epochs end RUNNING with nothing committed (their
    transaction waits for acknowledgements and stays open), then everything commits once."""
    broker, proxy = proxied_target
    topic = f"eos-outage-{unique}"
    runner = _runner(broker.bootstrap, unique, topic, records=3000, epoch_max_ms=1000, epoch_grace_ms=2000)
    during = []
    try:
        assert runner.run_epoch(0, max_records=500).offsets == {'{"partition":0,"topic":"src"}': {"offset": 499}}
        proxy.blackhole()
        try:
            end, epoch = time.monotonic() + 20, 1
            while time.monotonic() < end:
                during.append(runner.run_epoch(epoch, max_records=500))
                epoch += 1
        finally:
            proxy.restore()
        _until_done_from(runner, epoch, 3000)
    finally:
        runner.stop()
    assert during and all(r.state == RUNNING and r.offsets == {} for r in during), [r.trace for r in during]
    assert sum(r.stats["records"] for r in during) > 0  # records were put during the outage
    assert _values(_read(broker.bootstrap, topic, "read_committed", 3000)) == list(range(3000))


def _until_done_from(runner: TaskPairRunner, first_epoch: int, records: int, epochs: int = 60) -> None:
    for epoch in range(first_epoch, first_epoch + epochs):
        result = runner.run_epoch(epoch, max_records=700)
        assert result.state == RUNNING, result.trace
        if result.offsets.get('{"partition":0,"topic":"src"}', {}).get("offset") == records - 1:
            return
    raise AssertionError(f"not done after {epochs} epochs")


def test_a_target_that_refuses_the_transactions_fails_required_and_requested_falls_back(target, unique):
    """The broker refuses a transaction timeout over its transaction.max.timeout.ms (15 min):
    init_transactions fails for good. required: the pair cannot start, the error names the key and the
    broker's reason; requested: at-least-once, and the status says why."""
    topic = f"eos-refused-{unique}"
    refused = {"producer.override.transaction.timeout.ms": "1000000"}
    with pytest.raises(TransactionsUnavailableError) as err:
        _runner(target, unique, topic, sink_extra=refused)
    assert "exactly.once.support=required, but the target refused transactions" in str(err.value)
    assert "INVALID_TRANSACTION_TIMEOUT" in str(err.value) or "transaction timeout" in str(err.value).lower()
    runner = _runner(target, unique, topic, mode="requested", records=300, sink_extra=refused)
    try:
        assert runner.delivery.startswith("at-least-once (exactly.once.support=requested: the target refused")
        result = runner.run_epoch(0, max_records=300)
        assert result.state == RUNNING and result.stats["delivery"] == runner.delivery
    finally:
        runner.stop()
    assert _values(_read(target, topic, "read_committed", 300)) == list(range(300))


def test_the_offsets_topic_can_be_named(target, unique):
    topic, offsets = f"eos-named-{unique}", f"my-offsets-{unique}"
    runner = _runner(target, unique, topic, records=300, sink_extra={"exactly.once.offsets.topic": offsets})
    try:
        assert runner.run_epoch(0, max_records=300).state == RUNNING
    finally:
        runner.stop()
    stored = [m for m in _read(target, offsets, "read_committed", 1, quiet_s=1) if b"attempt" not in m.key()]
    assert [orjson.loads(m.value()) for m in stored] == [{"offset": 299}]
    again = _runner(target, unique, topic, records=400, sink_extra={"exactly.once.offsets.topic": offsets})
    try:
        assert _until_done(again, 400) == 100
    finally:
        again.stop()


def test_a_removed_task_pair_is_fenced_when_the_task_count_shrinks(target, unique):
    """tasks.max 2 -> 1: the driver fences task 1's transactional.id (``fence_removed_tasks``), so a
    zombie of that removed pair cannot commit any more; task 0's id is left alone; once fenced, a later
    configuration does not fence it again."""
    topic = f"eos-removed-{unique}"
    removed = _runner(target, unique, topic, task=1, records=1000)
    try:
        assert removed.run_epoch(0, max_records=100).state == RUNNING  # its attempt record is committed
        sink = KafkaSinkConnector()
        sink.initialize(ConnectorContext(unique))
        sink.start({"bootstrap.servers": target, "topic": topic})
        assert sink.fence_removed_tasks(2) == [], "task 1 is still configured with 2 tasks"
        assert sink.fence_removed_tasks(1) == [1]
        zombie = removed.run_epoch(1, max_records=100)
        assert zombie.state == FAILED and "ProducerFencedError" in zombie.trace, zombie.trace
        assert sink.fence_removed_tasks(1) == [], "fenced once: its attempt record is gone"
    finally:
        removed.stop()
    assert _values(_read(target, topic, "read_committed", 100)) == list(range(100)), "only epoch 0 committed"
