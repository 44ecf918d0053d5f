"""More connectors than task slots. With ``worker.pair.hosting=job`` every connector still gets its
turn (SlotGate; Spark's FAIR scheduler alone breaks ties between idle pools by name, and the
connectors whose names sort last hardly ever ran: seen with 7 pipelines on local[4], 3-7 epochs
against ~60), and the worker says which connectors wait for slots. With ``shared`` hosting
(the default) none waits: they all run at once on a few hosts."""

from __future__ import annotations

import logging
import threading

import pytest
from pipeline_util import make_driver, pair_pipeline

pytestmark = pytest.mark.timeout(120)


def _run_twice_the_slots(spark, tmp_path, unique, hosting: str, seconds: float = 6.0, until_each: int = 0):
    """Twice as many idle pipelines as slots, run for ``seconds``; with ``until_each``, until every
    connector ran that many epochs instead (``seconds`` then bounds the wait: a starved one fails)."""
    slots = spark.sparkContext.defaultParallelism
    pipelines = [pair_pipeline(f"{unique}-{i}", {"connector.class": "memory-source", "records": "0"},
                               {"connector.class": "memory-sink", "name": f"{unique}-{i}"}, **{"epoch.max.ms": "300"})
                 for i in range(2 * slots)]
    driver = make_driver(spark, tmp_path, *pipelines, hosting=hosting)
    executor = driver.executor
    runtimes = list(driver.runtimes)
    stop = threading.Event()
    timer = threading.Timer(seconds, stop.set)
    timer.start()
    if until_each:
        def watch():
            while not stop.wait(0.05):
                if min(rt.epoch for rt in runtimes) >= until_each:
                    stop.set()
        threading.Thread(target=watch, daemon=True).start()
    driver.run(stop)
    epochs = {rt.name: rt.epoch for rt in runtimes}
    print(f"{hosting}: epochs per connector:", sorted(epochs.values()))
    return epochs, executor


def test_every_connector_gets_slots_when_there_are_more_connectors_than_slots_and_waits_are_reported(
        spark, tmp_path, unique, caplog, monkeypatch):
    from worker.runtime.spark import SlotGate

    monkeypatch.setattr(SlotGate, "WARN_AFTER_S", 0.1)  # the turns here are 300 ms epochs
    caplog.set_level(logging.WARNING, logger="worker.runtime.spark")
    # 2 pipelines per slot, 300 ms epochs: every one reaches 3 epochs (about 2 s when shared fairly;
    # a Spark job costs more on a loaded machine, so the bound is 60 s) and none runs far ahead
    epochs, executor = _run_twice_the_slots(spark, tmp_path, unique, "job", seconds=60.0, until_each=3)
    assert min(epochs.values()) >= 3, epochs
    assert max(epochs.values()) - min(epochs.values()) <= 3, epochs
    waited = executor.gate.waited_s
    assert sum(1 for name in epochs if waited.get(name, 0) > 0.5) >= len(epochs) // 2, waited
    warned = [r.getMessage() for r in caplog.records if "waits for task slots" in r.getMessage()]
    named = [name for name in epochs if any(f"connector {name} waits" in m for m in warned)]
    assert named and len(named) == len(warned), warned  # each waiting connector is named once
    assert "worker.pair.hosting=shared" in warned[0]


def test_with_shared_hosting_no_connector_waits_for_a_slot(spark, tmp_path, unique):
    epochs, executor = _run_twice_the_slots(spark, tmp_path, unique, "shared")
    # No turns: every connector runs epoch after epoch (about 15 in 6 s; job hosting gets about 8).
    assert min(epochs.values()) >= 10, epochs
    assert executor.gate.waited_s == {}
