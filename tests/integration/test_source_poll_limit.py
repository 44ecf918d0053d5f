"""The Pulsar and RocketMQ sources take at most ``context.poll_limit`` records per poll (what is
left of ``epoch.max.records`` and ``max.in.flight.records``), over the real brokers: with a backlog
and batches far larger than the budget, every epoch moves exactly ``epoch.max.records``, and the next
one goes on from there (the records a RocketMQ pull brought beyond a poll's limit first), none lost
or doubled. (Kafka's equivalent is ``test_epoch_bridge``.) The runner alone, without Spark."""

from __future__ import annotations

import orjson
import pulsar_util
import pytest
import rocketmq_util

from connect.records import partition_key
from connect.tasks.plan import PairPlan
from connect.tasks.policy import RunnerPolicy
from connect.tasks.results import RUNNING
from connect.tasks.runner import TaskPairRunner
from connect.testing import MemorySinkTask
from connectors.pulsar.source import PulsarSourceConnector
from connectors.rocketmq.source import RocketMQSourceConnector

pytestmark = pytest.mark.timeout(180)

BUDGET = 70  # epoch.max.records: far below poll.batch.size (1,000) and a pull (512 per queue)
EPOCHS = 6
BACKLOG = 2_000


def _epochs(connector_class, config: dict, name: str) -> tuple[list[int], list, dict | None]:
    """Records counted by each epoch after the positioning one, what the sink received, and the
    source's lag per partition after the last epoch."""
    connector = connector_class()
    connector.start(config)
    [task_config] = connector.task_configs(1)
    connector.stop()
    runner = TaskPairRunner(PairPlan(connector=name, task_id=0, source=connector_class.task_class()(), sink=MemorySinkTask(),
                                     source_config=task_config, sink_config={"name": name},
                                     policy=RunnerPolicy(epoch_max_ms=5_000, epoch_max_records=BUDGET, epoch_bridge_ms=0),
                                     offsets={}))
    counts = []
    try:
        for epoch in range(EPOCHS + 1):
            result = runner.run_epoch(epoch)
            assert result.state == RUNNING, result.trace
            runner.offsets_persisted()
            if epoch:  # epoch 0 persists the start positions
                counts.append(result.stats["records"])
        lag = runner.source.lag_by_partition()
    finally:
        runner.stop()
    return counts, MemorySinkTask.written.pop(name), lag


def test_the_pulsar_source_takes_at_most_the_poll_limit(pulsar_pair, unique):
    broker = pulsar_pair[0]
    topic = f"persistent://public/default/limit-{unique}"
    pulsar_util.produce(broker, topic, BACKLOG, 0)
    counts, written, _ = _epochs(PulsarSourceConnector, {"service.url": broker.service_url, "topics": topic,
                                                      "start.position": "earliest"}, unique)
    assert counts == [BUDGET] * EPOCHS
    assert [r.value for r in written] == [f"value-{i}".encode() for i in range(BUDGET * EPOCHS)]


def test_the_rocketmq_source_takes_at_most_the_poll_limit(rocketmq_pair, unique):
    broker = rocketmq_pair[0]
    topic = f"limit-{unique}"[:120]
    rocketmq_util.produce(broker, topic, BACKLOG, 2)
    counts, written, lag = _epochs(RocketMQSourceConnector, {"namesrv.addr": broker.namesrv, "topics": topic,
                                                             "start.position": "earliest"}, unique)
    assert counts == [BUDGET] * EPOCHS
    by_queue: dict[str, list[int]] = {}
    for r in written:
        by_queue.setdefault(partition_key(r.source_partition), []).append(int(r.value.decode().split("-")[1]))
    # Each queue's records in order from its first, none skipped or doubled (queue q holds i % 2 == q).
    assert sum(map(len, by_queue.values())) == BUDGET * EPOCHS
    for key, values in by_queue.items():
        q = orjson.loads(key)["queue"]
        assert values == list(range(q, q + 2 * len(values), 2)), key
    # The lag counts the records kept beyond a poll's limit (0: a queue whose pull was not taken yet).
    for key, behind in lag.items():
        assert behind in (0, BACKLOG // 2 - len(by_queue.get(key, []))), (key, lag)
    assert any(lag.values()), lag
