"""TaskPairRunner driven directly with the in-memory source and sink (no broker, no Spark)."""

from __future__ import annotations

import itertools
import time
from collections import defaultdict

import pytest

from connect.errors import ConnectError, RetriableError
from connect.records import ConnectRecord, partition_key
from connect.tasks.failures import DeadLetterQueue, FailedRecordHandler
from connect.tasks.plan import PairPlan
from connect.tasks.policy import RunnerPolicy
from connect.tasks.results import FAILED, RUNNING, EpochStats
from connect.tasks.runner import TaskPairRunner
from connect.testing import MemorySideWriter, MemorySinkConnector, MemorySinkTask, MemorySourceTask
from worker.settings import FrameworkSettings

_ids = itertools.count()


def pk(partition: int, topic: str = "memory") -> str:
    return partition_key({"topic": topic, "partition": partition})


def make_settings(**overrides) -> RunnerPolicy:
    """Runner policy tuned for fast tests, from framework keys; keyword names use '_' for '.'."""
    raw = {"epoch.max.ms": 300, "errors.retry.timeout": 500, "errors.retry.delay.max.ms": 200, "epoch.grace.ms": 500}
    raw.update({k.replace("_", "."): v for k, v in overrides.items()})
    return FrameworkSettings.parse(raw).runner


@pytest.fixture
def sink_name(request):
    name = f"unit-{request.node.name}-{next(_ids)}"
    MemorySinkTask.written.pop(name, None)
    yield name
    MemorySinkTask.written.pop(name, None)


@pytest.fixture
def runners():
    """Collects runners so each is stopped after the test."""
    made: list[TaskPairRunner] = []
    yield made
    for r in made:
        try:
            r.stop()
        except ConnectError:
            pass


@pytest.fixture
def make_runner(sink_name, runners):
    def build(*, source: dict | None = None, sink: dict | None = None, settings: RunnerPolicy | None = None,
              offsets=None, source_task=None, sink_task=None, **kw) -> TaskPairRunner:
        runner = TaskPairRunner(PairPlan(
            connector="unit", task_id=0,
            source=source_task if source_task is not None else MemorySourceTask(),
            sink=sink_task if sink_task is not None else MemorySinkTask(),
            source_config={k: str(v) for k, v in (source or {}).items()},
            sink_config={"name": sink_name, **{k: str(v) for k, v in (sink or {}).items()}},
            policy=settings if settings is not None else make_settings(),
            offsets=offsets, **kw))
        runners.append(runner)
        return runner

    return build


def written(sink_name) -> list[ConnectRecord]:
    return list(MemorySinkTask.written.get(sink_name, []))


def by_partition(records) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for r in records:
        out[r.source_partition["partition"]].append(r.source_offset["offset"])
    return dict(out)


# -- instrumented tasks -------------------------------------------------------------------------


class CountingSource(MemorySourceTask):
    def __init__(self):
        super().__init__()
        self.commits = 0
        self.stopped = 0

    def commit(self):
        self.commits += 1

    def stop(self):
        self.stopped += 1


class CommitRecordSource(MemorySourceTask):
    def __init__(self):
        super().__init__()
        self.acked: list[tuple[int, int, object]] = []

    def commit_record(self, record, metadata):
        self.acked.append((record.source_partition["partition"], record.source_offset["offset"], metadata))


class DismissingSource(MemorySourceTask):
    def __init__(self, dismiss: bool, customer: bool):
        super().__init__()
        self.dismiss, self.customer = dismiss, customer
        self.dismiss_calls: list[list[int]] = []
        self.customer_calls: list[list[int]] = []

    def dismiss_failed_msgs(self, records):
        self.dismiss_calls.append([r.source_offset["offset"] for r in records])
        return self.dismiss

    def customer_failed_msgs(self, records):
        self.customer_calls.append([r.source_offset["offset"] for r in records])
        return self.customer


class JsonValueSource(MemorySourceTask):
    """Values are JSON objects, except offsets listed in ``bad`` which are not JSON."""

    bad: set[int] = set()

    def poll(self):
        return [ConnectRecord(r.topic, r.key, b"not json" if r.source_offset["offset"] in self.bad
                              else b'{"i": %d}' % r.source_offset["offset"], r.headers, r.timestamp,
                              r.source_partition, r.source_offset, r.partition)
                for r in super().poll()]


class RecordingSink(MemorySinkTask):
    def __init__(self):
        super().__init__()
        self.opened: list[list[dict]] = []
        self.pre_commits = 0
        self.closed: list[list[dict]] = []
        self.stopped = 0

    def open(self, partitions):
        self.opened.append([dict(p) for p in partitions])

    def pre_commit(self, offsets):
        self.pre_commits += 1
        return super().pre_commit(offsets)

    def close(self, partitions):
        self.closed.append([dict(p) for p in partitions])

    def stop(self):
        self.stopped += 1
        super().stop()


# -- moving records -----------------------------------------------------------------------------


def test_moves_every_record_in_order_and_commits_last_offsets(make_runner, sink_name):
    source = CountingSource()
    sink = RecordingSink()
    runner = make_runner(source={"partitions": 3, "records": 10, "batch.size": 4},
                         sink={"topic.template": "copy.{topic}"}, source_task=source, sink_task=sink,
                         settings=make_settings(epoch_max_records=30, epoch_max_ms=5000))
    t0 = time.monotonic()
    result = runner.run_epoch(1)
    assert time.monotonic() - t0 < 2  # ended on epoch.max.records, not on the 5 s deadline
    assert result.state == RUNNING, result.trace
    assert result.trace is None
    assert (result.connector, result.task, result.epoch) == ("unit", 0, 1)
    assert result.offsets == {pk(0): {"offset": 9}, pk(1): {"offset": 9}, pk(2): {"offset": 9}}
    out = written(sink_name)
    assert by_partition(out) == {p: list(range(10)) for p in range(3)}
    assert {r.topic for r in out} == {"copy.memory"}
    first = next(r for r in out if r.source_partition["partition"] == 1 and r.source_offset["offset"] == 4)
    assert (first.key, first.value, first.headers, first.partition) == (b"4", b"memory-1-4", (("i", b"4"),), 1)
    stats = result.stats
    assert stats["records"] == 30
    assert stats["bytes"] == sum(len(r.value) + len(r.key) for r in out)
    assert stats["errors"] == stats["retries"] == stats["skipped"] == stats["dead_lettered"] == 0
    assert stats["flushes"] == 1 == sink.pre_commits
    assert stats["latency_samples"] > 0 and stats["latency_ms_max"] > 0
    assert source.commits == 0  # commit() waits until the driver persisted the offsets
    runner.offsets_persisted()
    assert source.commits == 1
    assert result.lag == 0
    # sink.open was told about each partition exactly once, before its records arrived
    opened = [p["partition"] for call in sink.opened for p in call]
    assert sorted(opened) == [0, 1, 2]


def test_idle_epoch_ends_on_time_and_commits_nothing_new(make_runner, sink_name):
    source = CountingSource()
    runner = make_runner(source={"records": 5}, source_task=source, settings=make_settings(epoch_max_ms=200))
    first = runner.run_epoch(1)
    assert first.offsets == {pk(0): {"offset": 4}}
    assert source.commits == 0  # not before the driver persisted the offsets
    runner.offsets_persisted()
    t0 = time.monotonic()
    second = runner.run_epoch(2)
    elapsed = time.monotonic() - t0
    assert 0.15 < elapsed < 1.5
    assert second.state == RUNNING
    assert second.offsets == {}
    assert second.stats["records"] == 0
    assert source.commits == 1  # commit() only when something was committed
    assert len(written(sink_name)) == 5


def test_resume_from_committed_offsets_without_duplicates_or_loss(make_runner, sink_name):
    cfg = {"partitions": 2, "records": 10, "batch.size": 1}
    first_runner = make_runner(source=cfg, settings=make_settings(epoch_max_records=6))
    first = first_runner.run_epoch(1)
    assert first.state == RUNNING
    assert first.offsets == {pk(0): {"offset": 2}, pk(1): {"offset": 2}}
    assert first.lag == 14
    first_runner.stop()
    second_runner = make_runner(source=cfg, settings=make_settings(epoch_max_records=14), offsets=first.offsets)
    second = second_runner.run_epoch(2)
    assert second.state == RUNNING
    assert second.stats["records"] == 14
    assert second.offsets == {pk(0): {"offset": 9}, pk(1): {"offset": 9}}
    assert by_partition(written(sink_name)) == {0: list(range(10)), 1: list(range(10))}


def test_consecutive_epochs_of_one_runner_continue(make_runner, sink_name):
    runner = make_runner(source={"records": 9, "batch.size": 3}, settings=make_settings(epoch_max_records=3))
    offsets = [runner.run_epoch(e).offsets for e in (1, 2, 3)]
    assert offsets == [{pk(0): {"offset": 2}}, {pk(0): {"offset": 5}}, {pk(0): {"offset": 8}}]
    assert by_partition(written(sink_name)) == {0: list(range(9))}


# -- retriable errors ---------------------------------------------------------------------------


def test_retriable_poll_failures_are_retried_and_counted(make_runner, sink_name):
    runner = make_runner(source={"records": 5, "fail.poll.times": 2},
                         settings=make_settings(epoch_max_records=5, epoch_max_ms=5000))
    result = runner.run_epoch(1)
    assert result.state == RUNNING, result.trace
    assert result.stats["retries"] == 2
    assert result.offsets == {pk(0): {"offset": 4}}
    assert by_partition(written(sink_name)) == {0: [0, 1, 2, 3, 4]}


def test_retriable_put_failures_are_retried_and_counted(make_runner, sink_name):
    runner = make_runner(source={"records": 5}, sink={"fail.put.times": 2},
                         settings=make_settings(epoch_max_records=5, epoch_max_ms=5000))
    result = runner.run_epoch(1)
    assert result.state == RUNNING, result.trace
    assert result.stats["retries"] == 2
    assert result.offsets == {pk(0): {"offset": 4}}
    assert by_partition(written(sink_name)) == {0: [0, 1, 2, 3, 4]}


@pytest.mark.parametrize("source, sink, what", [({"fail.poll.times": 1000}, {}, "source poll"),
                                                ({}, {"fail.put.times": 1000}, "sink put")])
def test_retries_exhausted_fails_the_task_without_advancing_offsets(make_runner, sink_name, source, sink, what):
    runner = make_runner(source={"records": 5, **source}, sink=sink,
                         settings=make_settings(errors_retry_timeout=300, epoch_max_ms=5000))
    t0 = time.monotonic()
    result = runner.run_epoch(1)
    assert time.monotonic() - t0 < 2
    assert result.state == FAILED
    assert result.offsets == {}
    assert f"{what} still failing after errors.retry.timeout=300 ms" in result.trace
    assert "RetriableError" in result.trace
    assert result.stats["retries"] >= 2
    assert written(sink_name) == []
    # a failed runner refuses further epochs
    again = runner.run_epoch(2)
    assert again.state == FAILED
    assert "task failed in an earlier epoch" in again.trace
    assert again.offsets == {}


def test_failure_in_later_epoch_keeps_earlier_commits(make_runner, sink_name):
    runner = make_runner(source={"records": 10, "batch.size": 5},
                         settings=make_settings(epoch_max_records=5, errors_retry_timeout=200, epoch_max_ms=5000))
    first = runner.run_epoch(1)
    assert first.offsets == {pk(0): {"offset": 4}}
    runner.sink.put_failures = 1000
    second = runner.run_epoch(2)
    assert second.state == FAILED
    assert second.offsets == {}  # nothing new: the driver keeps offset 4
    assert by_partition(written(sink_name)) == {0: [0, 1, 2, 3, 4]}


def test_retry_timeout_zero_fails_on_first_retriable_error(make_runner, sink_name):
    runner = make_runner(source={"fail.poll.times": 1}, settings=make_settings(errors_retry_timeout=0))
    result = runner.run_epoch(1)
    assert result.state == FAILED
    assert result.stats["retries"] == 0
    assert "errors.retry.timeout=0 ms" in result.trace


# -- records the destination rejects ------------------------------------------------------------


def test_transient_rejection_is_retried_and_succeeds(make_runner, sink_name):
    runner = make_runner(source={"records": 10}, sink={"reject.values": "^memory-0-3$", "reject.times": 1},
                         settings=make_settings(epoch_max_records=10))
    result = runner.run_epoch(1)
    assert result.state == RUNNING, result.trace
    assert result.stats["errors"] == 0
    assert result.stats["retries"] == 1
    assert result.offsets == {pk(0): {"offset": 9}}
    offsets = by_partition(written(sink_name))[0]
    assert sorted(offsets) == list(range(10))  # every record exactly once (the retried one arrives last)


PERMANENT = {"reject.values": "^memory-1-3$", "reject.times": -1}
TWO_PARTITIONS = {"partitions": 2, "records": 10}


def test_permanent_rejection_with_tolerance_none_fails_and_blocks_its_partition(make_runner, sink_name):
    runner = make_runner(source=TWO_PARTITIONS, sink=PERMANENT,
                         settings=make_settings(epoch_max_records=20, errors_retry_timeout=200))
    result = runner.run_epoch(1)
    assert result.state == FAILED
    assert "TaskFailedError" in result.trace
    assert "memory[1]@{'offset': 3}" in result.trace
    assert "memory sink rejected b'memory-1-3'" in result.trace
    assert result.offsets == {pk(0): {"offset": 9}}  # the failed partition keeps its previous offset
    assert result.stats["errors"] == 1
    assert result.stats["retries"] == 0  # a permanent failure is not re-sent
    assert result.stats["transient"] == 0
    assert result.stats["skipped"] == 0
    assert 3 not in by_partition(written(sink_name))[1]


def test_permanent_rejection_with_tolerance_all_skips_and_advances(make_runner, sink_name):
    runner = make_runner(source=TWO_PARTITIONS, sink=PERMANENT,
                         settings=make_settings(epoch_max_records=20, errors_retry_timeout=200,
                                                errors_tolerance="all", errors_log_enable=True))
    result = runner.run_epoch(1)
    assert result.state == RUNNING, result.trace
    assert result.stats["errors"] == 1
    assert result.stats["skipped"] == 1
    assert result.offsets == {pk(0): {"offset": 9}, pk(1): {"offset": 9}}
    got = by_partition(written(sink_name))
    assert got[0] == list(range(10))
    assert got[1] == [0, 1, 2, 4, 5, 6, 7, 8, 9]


def test_errors_tolerance_is_case_insensitive_like_its_validator(make_runner, sink_name):
    settings = make_settings(epoch_max_records=20, errors_retry_timeout=200, errors_tolerance="ALL")
    assert settings.tolerance_all  # accepted and normalised by validation
    runner = make_runner(source=TWO_PARTITIONS, sink=PERMANENT, settings=settings)
    result = runner.run_epoch(1)
    # ...so it must behave like "all"; instead the task fails as with "none".
    assert result.state == RUNNING
    assert result.stats["skipped"] == 1


def test_dismiss_failed_msgs_accepts_and_offsets_advance(make_runner, sink_name):
    source = DismissingSource(dismiss=True, customer=True)
    runner = make_runner(source=TWO_PARTITIONS, sink=PERMANENT, source_task=source,
                         settings=make_settings(epoch_max_records=20, errors_retry_timeout=200))
    result = runner.run_epoch(1)
    assert result.state == RUNNING, result.trace
    assert source.dismiss_calls == [[3]]
    assert source.customer_calls == []  # dismissed first: customer hook never asked
    assert result.stats["dismissed"] == 1
    assert result.stats["errors"] == 1
    assert result.stats["customer_handled"] == result.stats["skipped"] == 0
    assert result.offsets == {pk(0): {"offset": 9}, pk(1): {"offset": 9}}


def test_customer_failed_msgs_accepts_and_offsets_advance(make_runner, sink_name):
    source = DismissingSource(dismiss=False, customer=True)
    runner = make_runner(source=TWO_PARTITIONS, sink=PERMANENT, source_task=source,
                         settings=make_settings(epoch_max_records=20, errors_retry_timeout=200))
    result = runner.run_epoch(1)
    assert result.state == RUNNING, result.trace
    assert source.dismiss_calls == [[3]]
    assert source.customer_calls == [[3]]
    assert result.stats["customer_handled"] == 1
    assert result.stats["dismissed"] == result.stats["skipped"] == result.stats["dead_lettered"] == 0
    assert result.offsets == {pk(0): {"offset": 9}, pk(1): {"offset": 9}}


def test_hooks_declining_falls_through_to_failure(make_runner, sink_name):
    source = DismissingSource(dismiss=False, customer=False)
    runner = make_runner(source=TWO_PARTITIONS, sink=PERMANENT, source_task=source,
                         settings=make_settings(epoch_max_records=20, errors_retry_timeout=200))
    result = runner.run_epoch(1)
    assert result.state == FAILED
    assert source.dismiss_calls == source.customer_calls == [[3]]
    assert result.offsets == {pk(0): {"offset": 9}}


# -- dead-letter queue --------------------------------------------------------------------------


@pytest.fixture
def dlq(request):
    name = f"unit-dlq-{request.node.name}-{next(_ids)}"
    built: list[MemorySideWriter] = []

    def factory(extra: dict | None = None):
        def build():
            writer = MemorySinkConnector.side_writer({"name": name, **(extra or {})}, "dlq-topic")
            built.append(writer)
            return writer

        return build

    MemorySinkTask.written.pop(name, None)
    yield name, factory, built
    MemorySinkTask.written.pop(name, None)


def test_failed_records_go_to_the_dead_letter_queue_with_headers(make_runner, sink_name, dlq):
    dlq_name, factory, built = dlq
    runner = make_runner(source=TWO_PARTITIONS, sink=PERMANENT, dlq_factory=factory(),
                         settings=make_settings(epoch_max_records=20, errors_retry_timeout=200))
    result = runner.run_epoch(1)
    assert result.state == RUNNING, result.trace
    assert result.stats["dead_lettered"] == 1
    assert result.stats["errors"] == 1
    assert result.stats["skipped"] == 0
    assert result.offsets == {pk(0): {"offset": 9}, pk(1): {"offset": 9}}
    [dead] = MemorySinkTask.written[dlq_name]
    assert dead.topic == "dlq-topic"
    assert (dead.key, dead.value) == (b"3", b"memory-1-3")
    headers = dict(dead.headers)
    assert dead.headers[0] == ("i", b"3")  # the record's own headers come first
    assert headers["__connect.errors.topic"] == b"memory"
    assert headers["__connect.errors.partition"] == b"1"
    assert headers["__connect.errors.offset"] == b"3"
    assert headers["__connect.errors.connector.name"] == b"unit"
    assert headers["__connect.errors.task.id"] == b"0"
    assert headers["__connect.errors.exception.class.name"] == b"RuntimeError"
    assert headers["__connect.errors.exception.message"] == b"memory sink rejected b'memory-1-3'"
    assert len(built) == 1 and built[0].closed == 0  # the DLQ writer is kept for the next epochs
    assert 3 not in by_partition(written(sink_name))[1]
    runner.stop()
    assert built[0].closed == 1  # and closed with the pair


def test_dead_letter_headers_can_be_disabled(make_runner, sink_name, dlq):
    dlq_name, factory, _ = dlq
    runner = make_runner(source={"records": 5}, sink={"reject.values": "^memory-0-1$"}, dlq_factory=factory(),
                         settings=make_settings(epoch_max_records=5, errors_retry_timeout=100,
                                                errors_deadletterqueue_context_headers_enable=False))
    result = runner.run_epoch(1)
    assert result.state == RUNNING, result.trace
    [dead] = MemorySinkTask.written[dlq_name]
    assert list(dead.headers) == [("i", b"1")]


def test_one_dead_letter_writer_serves_every_epoch_of_a_pair(make_runner, sink_name, dlq):
    dlq_name, factory, built = dlq
    runner = make_runner(source={"records": 10, "batch.size": 5}, sink={"reject.values": "^memory-0-[16]$"},
                         dlq_factory=factory(), settings=make_settings(epoch_max_records=5, errors_retry_timeout=100))
    for epoch in (1, 2):
        result = runner.run_epoch(epoch)
        assert result.state == RUNNING, result.trace
        assert result.stats["dead_lettered"] == 1
    assert [r.value for r in MemorySinkTask.written[dlq_name]] == [b"memory-0-1", b"memory-0-6"]
    assert len(built) == 1 and built[0].closed == 0
    runner.stop()
    assert built[0].closed == 1


def test_dead_letter_queue_rejecting_fails_the_task(make_runner, sink_name, dlq):
    _, factory, _ = dlq
    runner = make_runner(source=TWO_PARTITIONS, sink=PERMANENT, dlq_factory=factory({"reject.values": "."}),
                         settings=make_settings(epoch_max_records=20, errors_retry_timeout=100, errors_tolerance="all"))
    result = runner.run_epoch(1)
    assert result.state == FAILED
    assert "dead-letter topic rejected 1 record(s), first memory[1]@{'offset': 3}" in result.trace


def test_dead_letter_queue_not_built_when_nothing_fails(make_runner, sink_name, dlq):
    _, factory, built = dlq
    runner = make_runner(source={"records": 5}, dlq_factory=factory(), settings=make_settings(epoch_max_records=5))
    assert runner.run_epoch(1).state == RUNNING
    assert built == []


class _FailsFirstSend(MemorySideWriter):
    """A memory side writer whose first ``send`` raises (as a writer that cannot reach its
    cluster yet may), then writes."""

    def __init__(self, config, topic):
        super().__init__(config, topic)
        self.raised = 0

    def send(self, records, deadline):
        if not self.raised:
            self.raised += 1
            raise RetriableError("cluster unreachable")
        super().send(records, deadline)


def test_a_dead_letter_writer_that_raised_gets_the_letters_again(dlq):
    """A send that raised took nothing: the retry writes every letter, and only then are the
    records counted as dead-lettered."""
    dlq_name, _, _ = dlq
    writer = _FailsFirstSend({"name": dlq_name}, "dlq-topic")
    stats = EpochStats()
    handler = FailedRecordHandler(source=MemorySourceTask(), stats=stats, tolerance_all=False, log_errors=False,
                                  dlq=DeadLetterQueue(lambda: writer), connector="unit", task="0", dlq_headers=False)
    failures = [(ConnectRecord("memory", b"k", f"v{i}".encode(), None, 0, {"partition": 0}, {"offset": i}, 0),
                 RuntimeError("refused")) for i in range(2)]
    with pytest.raises(RetriableError):
        handler.handle(failures)
    assert stats.dead_lettered == 0
    assert handler.handle(failures) == []
    assert stats.dead_lettered == 2
    assert [r.value for r in MemorySinkTask.written[dlq_name]] == [b"v0", b"v1"]


# -- conversion ---------------------------------------------------------------------------------


def test_string_source_to_json_sink(make_runner, sink_name):
    runner = make_runner(source={"records": 3, "value.converter": "string", "key.converter": "string"},
                         sink={"value.converter": "json", "key.converter": "string"},
                         settings=make_settings(epoch_max_records=3))
    result = runner.run_epoch(1)
    assert result.state == RUNNING, result.trace
    out = written(sink_name)
    assert [r.value for r in out] == [b'"memory-0-0"', b'"memory-0-1"', b'"memory-0-2"']
    assert [r.key for r in out] == [b"0", b"1", b"2"]
    assert out[0].headers == (("i", b"0"),)
    assert result.offsets == {pk(0): {"offset": 2}}


def test_json_source_on_non_json_values_fails_naming_the_record(make_runner, sink_name):
    runner = make_runner(source={"records": 3, "value.converter": "json"}, sink={"value.converter": "json"},
                         settings=make_settings(epoch_max_ms=200))
    result = runner.run_epoch(1)
    assert result.state == FAILED
    assert "value of record memory[0]@{'offset': 0}: not valid JSON" in result.trace
    assert result.stats["errors"] == 3
    assert result.offsets == {}
    assert written(sink_name) == []


def test_conversion_failure_in_the_middle_blocks_only_its_partition(make_runner, sink_name, monkeypatch):
    monkeypatch.setattr(JsonValueSource, "bad", {4})
    runner = make_runner(source={"partitions": 2, "records": 6, "value.converter": "json"},
                         sink={"value.converter": "json"}, source_task=JsonValueSource(),
                         settings=make_settings(epoch_max_ms=200))
    result = runner.run_epoch(1)
    assert result.state == FAILED
    assert "value of record memory[0]@{'offset': 4}: not valid JSON" in result.trace
    assert result.stats["errors"] == 2  # offset 4 of both partitions
    assert result.offsets == {}  # both partitions hold a failed record


def test_conversion_failure_skipped_with_tolerance_all(make_runner, sink_name, monkeypatch):
    monkeypatch.setattr(JsonValueSource, "bad", {2})
    runner = make_runner(source={"records": 6, "value.converter": "json"}, sink={"value.converter": "json"},
                         source_task=JsonValueSource(),
                         settings=make_settings(epoch_max_ms=200, errors_tolerance="all"))
    result = runner.run_epoch(1)
    assert result.state == RUNNING, result.trace
    assert result.stats["skipped"] == 1
    assert result.stats["records"] == 5
    assert result.offsets == {pk(0): {"offset": 5}}
    assert [r.value for r in written(sink_name)] == [b'{"i":%d}' % i for i in (0, 1, 3, 4, 5)]


def test_tolerated_conversion_failure_at_partition_end_advances_offset(make_runner, sink_name, monkeypatch):
    # Same as a sink rejection of the last record (whose offset does advance under
    # errors.tolerance=all / DLQ / RIP-45 hooks): the skipped record must not be re-read and
    # re-skipped (or re-dead-lettered) after a restart.
    monkeypatch.setattr(JsonValueSource, "bad", {5})
    runner = make_runner(source={"records": 6, "value.converter": "json"}, sink={"value.converter": "json"},
                         source_task=JsonValueSource(),
                         settings=make_settings(epoch_max_ms=200, errors_tolerance="all"))
    result = runner.run_epoch(1)
    assert result.state == RUNNING
    assert result.stats["skipped"] == 1
    assert result.offsets == {pk(0): {"offset": 5}}


# -- flow control -------------------------------------------------------------------------------


def test_max_in_flight_records_forces_intermediate_commit_points(make_runner, sink_name):
    sink = RecordingSink()
    runner = make_runner(source={"records": 20, "batch.size": 2}, sink_task=sink,
                         settings=make_settings(epoch_max_records=20, max_in_flight_records=5))
    result = runner.run_epoch(1)
    assert result.state == RUNNING, result.trace
    # 2 records per poll, a commit point at every 6 in flight -> 3 backpressure flushes + the final one
    assert result.stats["flushes"] == 4 == sink.pre_commits
    assert result.offsets == {pk(0): {"offset": 19}}
    assert by_partition(written(sink_name)) == {0: list(range(20))}


def test_epoch_max_records_bounds_records_per_epoch(make_runner, sink_name):
    runner = make_runner(source={"records": 100, "batch.size": 1},
                         settings=make_settings(epoch_max_records=7, epoch_max_ms=5000))
    t0 = time.monotonic()
    result = runner.run_epoch(1)
    assert time.monotonic() - t0 < 2
    assert result.stats["records"] == 7
    assert result.offsets == {pk(0): {"offset": 6}}
    assert result.lag == 93
    # run_epoch arguments override the settings
    result = runner.run_epoch(2, max_records=3)
    assert result.stats["records"] == 3
    assert result.offsets == {pk(0): {"offset": 9}}


def test_epoch_max_records_ends_the_epoch_after_the_batch_that_reaches_it(make_runner, sink_name):
    # Documented: the epoch ends once the bound is reached; the last poll's batch is completed
    # (a polled batch cannot be handed back to the source).
    runner = make_runner(source={"records": 100, "batch.size": 50},
                         settings=make_settings(epoch_max_records=5, epoch_max_ms=5000))
    result = runner.run_epoch(1)
    assert result.stats["records"] == 50
    assert result.offsets == {pk(0): {"offset": 49}}


def test_max_ms_argument_overrides_settings(make_runner, sink_name):
    runner = make_runner(source={"records": 1}, settings=make_settings(epoch_max_ms=10_000))
    t0 = time.monotonic()
    result = runner.run_epoch(1, max_ms=100)
    assert time.monotonic() - t0 < 1
    assert result.state == RUNNING
    assert result.offsets == {pk(0): {"offset": 0}}


def test_stop_requested_ends_the_epoch_early(make_runner, sink_name):
    checks = []

    def stop_requested():
        checks.append(1)
        return len(checks) > 3

    runner = make_runner(source={"records": 1000, "batch.size": 1}, stop_requested=stop_requested,
                         settings=make_settings(epoch_max_ms=10_000))
    t0 = time.monotonic()
    result = runner.run_epoch(1)
    assert time.monotonic() - t0 < 1
    assert result.state == RUNNING
    assert result.stats["records"] == 3
    assert result.offsets == {pk(0): {"offset": 2}}
    assert by_partition(written(sink_name)) == {0: [0, 1, 2]}


def test_commit_record_called_once_per_acknowledged_record(make_runner, sink_name):
    source = CommitRecordSource()
    runner = make_runner(source={"partitions": 2, "records": 10, "batch.size": 3}, source_task=source,
                         settings=make_settings(epoch_max_records=20, max_in_flight_records=4))
    result = runner.run_epoch(1)
    assert result.state == RUNNING, result.trace
    assert result.stats["flushes"] > 1
    assert len(source.acked) == 20
    assert sorted(source.acked) == [(p, i, None) for p in (0, 1) for i in range(10)]


def test_commit_record_not_called_for_failed_records(make_runner, sink_name):
    source = CommitRecordSource()
    runner = make_runner(source=TWO_PARTITIONS, sink={"reject.values": "^memory-1-3$", "reject.times": 1},
                         source_task=source, settings=make_settings(epoch_max_records=20))
    assert runner.run_epoch(1).state == RUNNING
    assert sorted(source.acked) == [(p, i, None) for p in (0, 1) for i in range(10)]  # retried one acked once

    source = CommitRecordSource()
    runner = make_runner(source=TWO_PARTITIONS, sink=PERMANENT, source_task=source,
                         settings=make_settings(epoch_max_records=20, errors_retry_timeout=100, errors_tolerance="all"))
    assert runner.run_epoch(1).state == RUNNING
    assert (1, 3, None) not in source.acked
    assert len(source.acked) == 19


# -- lifecycle ----------------------------------------------------------------------------------


def test_stop_closes_opened_partitions_then_stops_both_tasks(make_runner, sink_name):
    source, sink = CountingSource(), RecordingSink()
    runner = make_runner(source={"partitions": 2, "records": 2}, source_task=source, sink_task=sink,
                         settings=make_settings(epoch_max_records=4))
    runner.run_epoch(1)
    runner.stop()
    assert [sorted(p["partition"] for p in call) for call in sink.closed] == [[0, 1]]
    assert sink.stopped == 1 and source.stopped == 1


def test_stop_reports_first_failure_but_stops_everything(make_runner):
    class BadCloseSink(RecordingSink):
        def close(self, partitions):
            raise RuntimeError("close broke")

    source, sink = CountingSource(), BadCloseSink()
    runner = make_runner(source={"records": 1}, source_task=source, sink_task=sink)
    with pytest.raises(ConnectError, match="task unit-0 did not stop cleanly: close broke"):
        runner.stop()
    assert sink.stopped == 1 and source.stopped == 1


def test_sink_start_failure_stops_the_source(sink_name):
    source = CountingSource()
    with pytest.raises(Exception, match="configuration error"):
        TaskPairRunner(PairPlan(connector="unit", task_id=0, source=source, sink=MemorySinkTask(), source_config={},
                                sink_config={"name": sink_name, "reject.times": "many"}, policy=make_settings()))
    assert source.stopped == 1


def test_tasks_receive_contexts(make_runner, sink_name):
    source, sink = CountingSource(), RecordingSink()
    make_runner(source={"records": 1}, source_task=source, sink_task=sink, offsets={pk(0): {"offset": 0}})
    assert source.context.task_id == sink.context.task_id == "unit-0"
    assert source.context.configs == {"records": "1"}
    assert source.context.offset_storage_reader.offset({"topic": "memory", "partition": 0}) == {"offset": 0}
    assert sink.context.configs["name"] == sink_name
    assert source.next == {0: 1}  # resumed after the committed offset


# -- between epochs (epoch.bridge.ms) -------------------------------------------------------------


def test_a_bridge_between_epochs_moves_records_the_next_epoch_counts_and_commits(make_runner, sink_name):
    runner = make_runner(source={"records": 100, "batch.size": 10}, settings=make_settings(epoch_max_records=30))
    first = runner.run_epoch(1)
    assert first.stats["records"] == 30 and first.offsets == {pk(0): {"offset": 29}}
    runner.bridge(time.monotonic() + 5)  # stops at the next epoch's budget, long before the lease
    assert len(runner.sink.buffer) == 30, "the pair kept moving between the epochs (put, flushed by the next)"
    second = runner.run_epoch(2)
    assert second.state == RUNNING, second.trace
    assert second.stats["records"] == 30, "what the bridge moved is the next epoch's (and its budget)"
    assert second.offsets == {pk(0): {"offset": 59}}, "and its offsets are committed with that epoch"
    third = runner.run_epoch(3)
    assert third.offsets == {pk(0): {"offset": 89}}
    assert by_partition(written(sink_name)) == {0: list(range(90))}  # in order, none twice


def test_halt_gives_the_pair_back_at_once_and_a_stop_or_failure_means_no_bridge(make_runner, sink_name):
    import threading

    runner = make_runner(source={"records": 5}, settings=make_settings(epoch_max_records=1000))
    runner.run_epoch(1)
    bridging = threading.Thread(target=runner.bridge, args=(time.monotonic() + 10,))
    t0 = time.monotonic()
    bridging.start()
    time.sleep(0.1)
    runner.halt()
    bridging.join(5)
    # well under the bridge's 10 s (at load 10 on 2 cores the thread took 1.08 s to be scheduled and end)
    assert not bridging.is_alive() and time.monotonic() - t0 < 4, "halt ends a bridge that would last 10 s"
    assert runner.run_epoch(2).state == RUNNING

    stopping = make_runner(source={"records": 50, "batch.size": 10}, stop_requested=lambda: True)
    stopping.run_epoch(1)
    stopping.bridge(time.monotonic() + 5)
    assert stopping.sink.buffer == [], "a stop drains in an epoch of its own: no bridge after it"


def test_a_failure_in_a_bridge_fails_the_next_epoch_with_its_trace(make_runner, sink_name):
    runner = make_runner(source={"records": 100, "batch.size": 10}, settings=make_settings(epoch_max_records=20))
    runner.run_epoch(1)

    def broken():
        raise ConnectError("source exploded between epochs")

    runner.source.poll = broken
    runner.bridge(time.monotonic() + 1)
    result = runner.run_epoch(2)
    assert result.state == FAILED and "source exploded between epochs" in result.trace


def test_a_renewed_bridge_outlives_its_lease_and_ends_once_renewals_stop(make_runner, sink_name):
    """The driver renews a pair's bridge while a sibling of its epoch still runs (issue 36: a pair that
    ended early stood idle until its slowest sibling ended)."""
    import threading

    class SlowSource(MemorySourceTask):
        def poll(self):
            time.sleep(0.005)
            return super().poll()

    runner = make_runner(source={"records": 1_000_000, "batch.size": 1}, source_task=SlowSource(),
                         settings=make_settings(epoch_max_records=1_000_000))
    assert runner.run_epoch(1, max_records=5).state == RUNNING  # ended early, on its record budget
    t0 = time.monotonic()
    runner.renew_bridge(t0 + 1.0)  # a renewal may come before the bridge starts: it counts
    bridging = threading.Thread(target=runner.bridge, args=(t0 + 0.2,))
    bridging.start()
    while time.monotonic() < t0 + 2.5:
        runner.renew_bridge(time.monotonic() + 1.0)
        time.sleep(0.05)
    assert bridging.is_alive(), "renewed, the bridge goes on past its 0.2 s lease"
    moved = len(runner.sink.buffer)
    bridging.join(5)
    assert not bridging.is_alive(), "without renewals it ends at the last lease"
    bridged = len(runner.sink.buffer)
    assert bridged > moved > 0
    second = runner.run_epoch(2, max_records=bridged + 5)
    assert second.state == RUNNING and second.stats["records"] == bridged + 5, "the bridge's records are the next epoch's"


class _SomeNotJson(MemorySourceTask):
    """Every record whose key ends in 3 has a value the JSON converter cannot read."""

    def poll(self):
        return [ConnectRecord(r.topic, r.key, b"not json" if int(r.key) % 10 == 3 else b'"ok"', r.headers, r.timestamp,
                              r.source_partition, r.source_offset, r.partition) for r in super().poll()]


def test_records_a_stage_failed_after_a_commit_point_inside_the_epoch_are_all_handled():
    """A commit point in the middle of an epoch (max.in.flight.records reached) used to leave the stage
    failures of later batches in a list the runner no longer read: they were neither dead-lettered,
    skipped nor counted, and their offsets moved on (silent loss). Found by the exactly-once work."""
    name = f"stage-failures-{next(_ids)}"
    runner = TaskPairRunner(PairPlan(
        connector="stage-failures", task_id=0, source=_SomeNotJson(), sink=MemorySinkTask(),
        source_config={"topic": "src", "records": "100", "partitions": "1", "batch.size": "10",
                       "value.converter": "json"},
        sink_config={"name": name, "value.converter": "json"},
        policy=RunnerPolicy(epoch_max_ms=300, epoch_grace_ms=500, max_in_flight_records=20, tolerance_all=True)))
    try:
        result = runner.run_epoch(0, max_records=10_000)
        assert result.state == RUNNING, result.trace
        bad = len([i for i in range(100) if i % 10 == 3])
        assert result.stats["errors"] == result.stats["skipped"] == bad
        assert len(MemorySinkTask.written[name]) == 100 - bad
    finally:
        runner.stop()
        MemorySinkTask.written.pop(name, None)
