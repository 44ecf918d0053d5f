"""The parts of the worker's Herder (``worker.herding``) on their own, without Spark or brokers."""

from __future__ import annotations

import inspect

import pytest

from connect.errors import ConnectError
from connect.secrets import Redactor
from connect.tasks.results import FAILED
from worker.herding.control import ControlHandlers
from worker.herding.loop import ConnectorLoops
from worker.herding.model import PAUSED, HerdedConnector, no_providers
from worker.herding.registry import Registry
from worker.herding.status import StatusBoard
from worker.herding.validation import Validation
from worker.stores.kafkastore import KafkaStores
from worker.stores.store import SqliteStores, Stores
from worker.telemetry.topics import ActiveTopics


class _Statuses:
    def __init__(self):
        self.rows = []

    def put(self, status):
        self.rows.append(status)


class _FencedStores:
    """Stores another worker took over: every write would fail."""

    fenced = "another worker took over store topics (a, b, c)"
    statuses = _Statuses()
    offsets = None


def test_both_stores_declare_what_the_stores_protocol_declares_fencing_included():
    declared = {name for name, _ in inspect.getmembers(Stores) if not name.startswith("_")}
    declared |= set(Stores.__annotations__)
    assert "fenced" in declared
    for cls in (SqliteStores, KafkaStores):
        members = {name for name, _ in inspect.getmembers(cls)} | set(inspect.signature(cls).parameters)
        assert "fenced" in members and "close" in members, cls


def test_the_embedded_stores_are_never_fenced(tmp_path):
    stores = SqliteStores(tmp_path)
    try:
        assert stores.fenced is None
    finally:
        stores.close()


def test_a_connector_of_fenced_stores_stops_failed_with_the_reason_and_runs_no_step():
    registry = Registry()
    stores = _FencedStores()
    redactor = Redactor()
    board = StatusBoard(registry, stores.statuses, object(), worker_id="w", redactor=redactor, metrics=None,
                        active_topics=ActiveTopics())
    loops = ConnectorLoops(registry, board, Validation(no_providers, None, redactor), stores, object(),
                           metrics=None, run_id="r", idle_wait=0.1)
    c = HerdedConnector("c", {}, PAUSED, 0)
    loops._step = lambda _c: pytest.fail("a fenced worker must not run a step")
    with registry.lock:
        loops.launch(c)
    c.thread.join(10)
    assert not c.thread.is_alive()
    assert c.state == FAILED and c.trace == stores.fenced


def test_control_answers_stop_for_unknown_or_changing_connectors_and_no_offsets_for_unknown_ones():
    registry = Registry()
    handlers = ControlHandlers(registry)
    c = HerdedConnector("c", {}, "RUNNING", 0)
    registry.connectors["c"] = c
    assert handlers.stops({"connectors": ["c", "gone"]}) == ["gone"]
    c.restart_tasks.add(0)
    assert handlers.stop({"connector": "c"}) is True
    with pytest.raises(ConnectError, match="gone is not running here"):
        handlers.offsets({"connector": "gone", "keys": []})
    registry.stopping.set()
    assert handlers.stop({}) is True
