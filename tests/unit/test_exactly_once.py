"""The runner's side of exactly-once (``connect.tasks.exactlyonce``) with an in-memory transactional sink,
and the validation of ``exactly.once.support``. The Kafka side is proven over the wire in
tests/integration/test_exactly_once.py and tests/e2e/test_exactly_once_cli.py."""

from __future__ import annotations

import itertools

import pytest

from connect.errors import ConfigError, ConnectError, TransactionsUnavailableError
from connect.records import partition_key
from connect.tasks.plan import PairPlan
from connect.tasks.policy import RunnerPolicy
from connect.tasks.results import FAILED, RUNNING
from connect.tasks.runner import TaskPairRunner
from connect.testing import MemorySinkTask, MemorySourceTask
from worker.pipeline import parse_pipeline

_ids = itertools.count()
P0 = partition_key({"topic": "src", "partition": 0})


class _Transactions:
    """Records become visible (``committed``) only with a commit; the offsets stored are the last committed."""

    def __init__(self, sink: _TransactionalSink) -> None:
        self.sink = sink
        self.open = False
        self.stored: dict = {P0: {"offset": 9}}  # as if an earlier attempt had committed records 0-9
        self.log: list[str] = []

    def stored_offsets(self):
        self.log.append("stored_offsets")
        return dict(self.stored)

    def begin(self):
        if not self.open:
            self.open = True
            self.log.append("begin")

    def commit(self, offsets):
        self.sink.committed.extend(self.sink.pending)
        self.sink.pending = []
        self.stored.update(offsets)
        self.open = False
        self.log.append("commit")

    def abort(self):
        self.sink.pending = []
        self.open = False
        self.log.append("abort")


class _TransactionalSink(MemorySinkTask):
    def start(self, config, context):
        super().start(config, context)
        assert context.transactional_id == "connect-eos-unit-0" and context.pair == ("eos-unit", 0)
        self.pending, self.committed = [], []
        self.txns = _Transactions(self)

    def flush(self, offsets):
        self.pending.extend(self.buffer)
        self.buffer = []

    def transactions(self):
        return self.txns


class _FailAt(MemorySourceTask):
    fail_at = -1

    def poll(self):
        if self.next.get(0) == self.fail_at:
            raise ConnectError("injected")
        return super().poll()


def _runner(sink, source=None, mode="required", offsets=None):
    return TaskPairRunner(PairPlan(
        connector="eos-unit", task_id=0, source=source or MemorySourceTask(), sink=sink,
        source_config={"topic": "src", "records": "100", "partitions": "1", "batch.size": "10"},
        sink_config={"name": f"eos-{next(_ids)}"},
        policy=RunnerPolicy(exactly_once=mode, epoch_max_ms=300, epoch_grace_ms=500), offsets=offsets))


def test_each_epoch_commits_its_records_with_its_offsets_and_the_pair_starts_from_the_stored_ones():
    sink = _TransactionalSink()
    runner = _runner(sink, offsets={P0: {"offset": 50}})  # the worker's store is not asked
    try:
        result = runner.run_epoch(0, max_records=30)
        assert result.state == RUNNING, result.trace
        assert result.stats["delivery"] == "exactly-once" and result.stats["transactions"] == 1
        assert result.offsets == {P0: {"offset": 39}}
        assert [int(r.key) for r in sink.committed] == list(range(10, 40))
        assert sink.txns.stored == {P0: {"offset": 39}}
        assert sink.txns.log == ["stored_offsets", "begin", "commit"]
    finally:
        runner.stop()


def test_a_failed_epoch_aborts_and_returns_no_offsets():
    sink, source = _TransactionalSink(), _FailAt()
    source.fail_at = 30
    runner = _runner(sink, source=source)
    try:
        result = runner.run_epoch(0, max_records=100)
        assert result.state == FAILED and "injected" in result.trace
        assert result.offsets == {} and result.stats["aborted"] == 1
        assert sink.committed == [] and sink.txns.stored == {P0: {"offset": 9}}
    finally:
        runner.stop()


def test_requested_falls_back_to_at_least_once_and_says_so(caplog):
    runner = _runner(MemorySinkTask(), mode="requested")
    try:
        assert runner.delivery.startswith("at-least-once (exactly.once.support=requested: MemorySinkTask cannot")
        result = runner.run_epoch(0, max_records=20)
        assert result.state == RUNNING and result.stats["delivery"] == runner.delivery
        assert result.offsets == {P0: {"offset": 19}}
    finally:
        runner.stop()
    assert "delivery is at-least-once" in caplog.text


def test_required_with_a_sink_that_cannot_fails_naming_the_key():
    with pytest.raises(TransactionsUnavailableError, match="exactly.once.support=required, but MemorySinkTask cannot"):
        _runner(MemorySinkTask())


def _pipeline(**config):
    base = {"source.connector.class": "kafka", "source.bootstrap.servers": "localhost:1", "source.topics": "t",
            "sink.connector.class": "kafka", "sink.bootstrap.servers": "localhost:1"}
    merged = {k: v for k, v in {**base, **config}.items() if v is not None}  # None: the key left out
    return parse_pipeline({"name": "eos", "config": merged})


@pytest.mark.parametrize("config, key, words", [
    ({"exactly.once.support": "always"}, "exactly.once.support", "must be one of required, requested, disabled"),
    ({"exactly.once.support": "required", "sink.connector.class": "pulsar", "sink.service.url": "pulsar://h:1",
      "sink.bootstrap.servers": None},
     "exactly.once.support", "PulsarSinkConnector cannot write transactions"),
    ({"exactly.once.support": "requested", "source.consumer.override.isolation.level": "read_uncommitted"},
     "source.consumer.override.isolation.level", "must not be read_uncommitted"),
    ({"exactly.once.support": "required", "epoch.max.ms": "40000"}, "epoch.max.ms", "transaction timeout (60000 ms"),
])
def test_validation_names_the_key_and_the_reason(config, key, words):
    with pytest.raises(ConfigError) as err:
        _pipeline(**config)
    assert any(i.key == key and words in i.message for i in err.value.issues), str(err.value)


def test_valid_exactly_once_configs_pass():
    assert _pipeline(**{"exactly.once.support": "required"}).settings.runner.exactly_once == "required"
    assert _pipeline(**{"exactly.once.support": "required", "epoch.max.ms": "40000",
                        "sink.producer.override.transaction.timeout.ms": "120000"}).settings.runner.epoch_max_ms == 40000
    assert _pipeline().settings.runner.exactly_once == "disabled"


class _SomeNotJson(MemorySourceTask):
    def poll(self):
        from connect.records import ConnectRecord

        return [ConnectRecord(r.topic, r.key, b"not json" if int(r.key) % 10 == 3 else b'"ok"', r.headers, r.timestamp,
                              r.source_partition, r.source_offset, r.partition) for r in super().poll()]


@pytest.mark.parametrize("mode", ["disabled", "required"])
def test_records_a_stage_failed_after_a_commit_point_inside_the_epoch_are_all_handled(mode):
    """A commit point in the middle of an epoch (backpressure) used to leave the stage failures of later
    batches in a list the runner no longer read: they were neither dead-lettered, skipped nor counted,
    and their offsets moved on (found with exactly-once's dead letters; at-least-once lost them too)."""
    sink = _TransactionalSink() if mode == "required" else MemorySinkTask()
    runner = TaskPairRunner(PairPlan(
        connector="eos-unit", task_id=0, source=_SomeNotJson(), sink=sink,
        source_config={"topic": "src", "records": "100", "partitions": "1", "batch.size": "10",
                       "value.converter": "json"},
        sink_config={"name": f"eos-{next(_ids)}", "value.converter": "json"},
        policy=RunnerPolicy(exactly_once=mode, epoch_max_ms=300, epoch_grace_ms=500, max_in_flight_records=20,
                            tolerance_all=True), offsets={P0: {"offset": -1}} if mode == "disabled" else None))
    try:
        result = runner.run_epoch(0, max_records=10_000)
        assert result.state == RUNNING, result.trace
        first = 10 if mode == "required" else 0  # the transactional sink's stored offsets start at 10
        assert result.stats["errors"] == result.stats["skipped"] == len([i for i in range(first, 100) if i % 10 == 3])
    finally:
        runner.stop()
