"""The Pulsar source takes at most ``context.poll_limit`` records per poll (what is left of
``epoch.max.records`` and ``max.in.flight.records``), over the real brokers: with a backlog and
batches far larger than the budget, every epoch moves exactly ``epoch.max.records``, and the next one
goes on from there, none lost or doubled. (Kafka's equivalent is
``test_epoch_bridge``.) The runner alone, without Spark."""

from __future__ import annotations

import pulsar_util
import pytest

from connect.tasks.policy import RunnerPolicy
from connect.tasks.results import RUNNING
from connect.tasks.runner import TaskPairRunner
from connect.testing import MemorySinkTask
from connectors.pulsar.source import PulsarSourceConnector

pytestmark = pytest.mark.timeout(180)

BUDGET = 70  # epoch.max.records: far below poll.batch.size (1,000)
EPOCHS = 6
BACKLOG = 2_000


def _epochs(connector_class, config: dict, name: str) -> tuple[list[int], list]:
    """Records counted by each epoch after the positioning one, and what the sink received."""
    connector = connector_class()
    connector.start(config)
    [task_config] = connector.task_configs(1)
    connector.stop()
    runner = TaskPairRunner(connector=name, task_id=0, source=connector_class.task_class()(), sink=MemorySinkTask(),
                            source_config=task_config, sink_config={"name": name},
                            policy=RunnerPolicy(epoch_max_ms=5_000, epoch_max_records=BUDGET, epoch_bridge_ms=0),
                            offsets={})
    counts = []
    try:
        for epoch in range(EPOCHS + 1):
            result = runner.run_epoch(epoch)
            assert result.state == RUNNING, result.trace
            runner.offsets_persisted()
            if epoch:  # epoch 0 persists the start positions
                counts.append(result.stats["records"])
    finally:
        runner.stop()
    return counts, MemorySinkTask.written.pop(name)


def test_the_pulsar_source_takes_at_most_the_poll_limit(pulsar_pair, unique):
    broker = pulsar_pair[0]
    topic = f"persistent://public/default/limit-{unique}"
    pulsar_util.produce(broker, topic, BACKLOG, 0)
    counts, written = _epochs(PulsarSourceConnector, {"service.url": broker.service_url, "topics": topic,
                                                      "start.position": "earliest"}, unique)
    assert counts == [BUDGET] * EPOCHS
    assert [r.value for r in written] == [f"value-{i}".encode() for i in range(BUDGET * EPOCHS)]

