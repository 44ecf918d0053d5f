"""Sources with nothing to read yet: which RocketMQ system topics a regex selects, what a
partitioned source says while it waits, and how ``connect run`` prints it."""

from __future__ import annotations

import io
import logging
import re
import threading
import time

import pytest

from connect.connector import ConnectorContext
from connect.errors import RetriableError
from connect.source.partitioned import PartitionedSourceConnector
from connectors.rocketmq.system import regex_selects
from worker.runtime.driver import connector_turn
from worker.telemetry.progress import ProgressPrinter

RESERVED = {"DefaultCluster", "broker-a"}


@pytest.mark.parametrize("regex, topic, selected", [
    ("orders.*|rmq_sys_replicator_heartbeat", "rmq_sys_replicator_heartbeat", True),  # the DR mirror's
    ("orders.*|rmq_sys_replicator_heartbeat", "rmq_sys_replicator_offset_syncs", False),
    ("orders.*|rmq_sys_replicator_heartbeat", "orders_dr", True),
    ("rmq_sys_.*", "rmq_sys_replicator_heartbeat", True),
    ("%RETRY%.*", "%RETRY%orders-app", True),
    (".*", "rmq_sys_replicator_heartbeat", False),  # a catch-all never reads system topics
    (".*heartbeat", "rmq_sys_replicator_heartbeat", False),
    (".*", "%DLQ%orders-app", False),
    (".*", "orders", True),
    ("T.*", "TBW102", False),  # fixed broker topics and cluster/broker names: never by a regex
    ("RMQ_SYS_.*", "RMQ_SYS_TRACE_TOPIC", False),
    ("broker-.*", "broker-a", False),
    ("Default.*", "DefaultCluster_REPLY_TOPIC", False),
])
def test_rocketmq_regex_reads_system_topics_only_when_it_spells_out_their_prefix(regex, topic, selected):
    assert regex_selects(re.compile(regex), topic, RESERVED) is selected


class _Listed(PartitionedSourceConnector):
    """A partitioned source over a list the test changes (the unit's own collaborator)."""

    answers: list = []

    def _list_partitions(self):
        answer = self.answers[0] if len(self.answers) == 1 else self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        if self.config.get("topics") and not answer:
            self._absent(self.config["topics"], "does not exist")
        return answer


def _start(config: dict, answers: list) -> tuple[_Listed, ConnectorContext]:
    connector = _Listed()
    connector.answers = answers
    context = ConnectorContext("c")
    connector.initialize(context)
    connector.start(config)
    connector._start_watching(int(config.get("refresh.topics.interval.ms", 50)))
    return connector, context


def _wait(predicate, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_a_source_without_partitions_says_what_it_waits_for_until_they_appear():
    connector, context = _start({"topics.regex": "orders.*"},
                                [[], RetriableError("cannot list topics: broker down"), [("orders1", 0)]])
    try:
        assert connector.task_configs(2) == []
        assert connector.waiting_for() == "waiting for topics matching 'orders.*' (looking every 0.05 s)"
        assert _wait(context.take_reconfiguration_request)
        assert connector.waiting_for() is None
        assert [c["task.assignment"] for c in connector.task_configs(2)] == ["orders1:0"]
        assert [c["task.assignment.earliest"] for c in connector.task_configs(2)] == ["orders1:0"]  # found late
    finally:
        connector.stop()


def test_a_failed_look_is_part_of_the_wait_and_a_disabled_refresh_says_so():
    connector, _ = _start({"topics.regex": "orders.*"}, [[], RetriableError("cannot list topics: broker down")])
    try:
        assert _wait(lambda: "the last look failed: cannot list topics: broker down" in connector.waiting_for())
    finally:
        connector.stop()
    connector, _ = _start({"topics": "named", "refresh.topics.interval.ms": "0"}, [[]])
    assert "refresh.topics.interval.ms=0 never looks again for topic(s) 'named' to exist" in connector.waiting_for()


def test_a_missing_named_topic_is_logged_once_not_at_every_refresh(caplog):
    with caplog.at_level(logging.WARNING, logger="connect.source.partitioned"):
        connector, _ = _start({"topics": "named"}, [[]])
        try:
            time.sleep(0.3)  # several refreshes
        finally:
            connector.stop()
    assert [r.getMessage() for r in caplog.records] == ["_Listed: topic named does not exist; it is read once it exists"]
    assert connector.waiting_for().startswith("waiting for topic(s) 'named' to exist")


class _Runtime:
    def __init__(self, name: str, waiting: str | None):
        self.name, self.text = name, waiting

    def waiting(self):
        return self.text


def test_connect_run_prints_what_an_idle_connector_waits_for_when_it_changes_and_every_interval():
    out = io.StringIO()
    printer = ProgressPrinter(out=out, redact=lambda text: text.replace("secret-host", "****"), waiting_every_s=0.2)
    rt = _Runtime("mirror", "waiting for topics matching 'orders.*' on secret-host")
    printer.idle(rt)
    printer.idle(rt)  # the same, too soon: not again
    assert out.getvalue() == "mirror: 0 task pairs, waiting for topics matching 'orders.*' on ****\n"
    rt.text = "waiting for topics matching 'orders.*' on secret-host; the last look failed: timeout"
    printer.idle(rt)  # changed: at once
    time.sleep(0.25)
    printer.idle(rt)  # the same, after the interval: again
    assert len(out.getvalue().splitlines()) == 3
    printer.idle(_Runtime("busy", None))  # it has pairs: nothing
    ProgressPrinter(out=out, quiet=True).idle(rt)
    assert len(out.getvalue().splitlines()) == 3


class _IdleRuntime:
    """A connector without task pairs, as connector_turn sees it."""

    name, tasks, last_job_error = "idle", [], None

    def __init__(self):
        self.context = ConnectorContext("idle")

    def run_epoch(self, executor):
        return []

    def alive(self):
        return True

    def next_restart_in(self):
        return None


def test_a_connector_without_pairs_starts_as_soon_as_its_source_asks_not_a_pause_later():
    rt, stop = _IdleRuntime(), threading.Event()
    threading.Timer(0.2, rt.context.request_task_reconfiguration).start()
    started = time.monotonic()
    assert connector_turn(rt, None, lambda done: None, stop.wait, idle_wait=5.0)
    assert 0.15 < time.monotonic() - started < 1.0
    started = time.monotonic()  # the request is still there: the next turn takes it at once
    connector_turn(rt, None, lambda done: None, stop.wait, idle_wait=5.0)
    assert time.monotonic() - started < 0.1
    rt.context.take_reconfiguration_request()
    threading.Timer(0.2, stop.set).start()  # a stop ends the wait too
    started = time.monotonic()
    connector_turn(rt, None, lambda done: None, stop.wait, idle_wait=5.0)
    assert time.monotonic() - started < 1.0
