"""The shipped RocketMQ disaster-recovery example (``conf/replication/rocketmq-dr-*.json``) as a new
user runs it: two fresh RocketMQ brokers (embedded, or Apache with CONNECT_TEST_ROCKETMQ=apache),
only ``ROCKETMQ_PRIMARY`` / ``ROCKETMQ_STANDBY`` set, the four files loaded as ``connect run`` loads
them, in the natural order (the replicator first, the application later). The mirror and the monitor
start with nothing to read and say so; then the heartbeats reach the standby and are reported
healthy within two heartbeat intervals, the orders an application writes to the primary arrive on
the standby, and the position of the application's consumer group is checkpointed to the standby
(translated through the mirror's offset syncs to where the group would resume there)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import orjson
import pytest
from rocketmq_brokers import rocketmq_broker
from rocketmq_util import consume_all
from service_util import wait_for

from connectors.rocketmq.models import ConsumerData
from connectors.rocketmq.remoting import TopicNotFoundError
from connectors.rocketmq.sync_client import SyncRocketMQClient
from worker.pipeline import load_pipeline_file
from worker.runtime.driver import Driver
from worker.runtime.spark import SparkExecutor
from worker.stores.store import OffsetStore

pytestmark = pytest.mark.timeout(240)

CONF = Path(__file__).resolve().parents[2] / "conf" / "replication"
FILES = ["mirror", "heartbeat-emit", "heartbeat-monitor", "checkpoint"]  # as the issue ran them
HEARTBEATS, ORDERS, GROUP = "rmq_sys_replicator_heartbeat", "orders_dr", "orders-app"
N, QUEUES = 1000, 2


def _stored(broker, topic: str) -> int:
    """Messages in ``topic`` (0 while it does not exist)."""
    with SyncRocketMQClient(broker.namesrv, timeout=30) as c:
        try:
            route = c.topic_route(topic)
        except TopicNotFoundError:
            return 0
        return sum(c.max_offset(route.master_addr(mq.broker_name), topic, mq.queue_id) for mq in route.read_queues())


def _write_orders(primary) -> None:
    with SyncRocketMQClient(primary.namesrv, timeout=30) as c:
        c.create_topic(primary.broker_addr, ORDERS, QUEUES, QUEUES)
        sends = [c.send(primary.broker_addr, ORDERS, i % QUEUES, f"order-{i}".encode(), {"KEYS": f"order-{i}"})
                 for i in range(N)]
        assert all(f.result(30).ok for f in sends)


def _consume_orders(primary) -> dict[int, int]:
    """A consumer group, registered by its heartbeat as a RocketMQ consumer is, reads every order
    of each queue and commits, then goes away; its next offset per queue."""
    with SyncRocketMQClient(primary.namesrv, timeout=30) as c:
        c.heartbeat(primary.broker_addr, "orders-app@1", consumer_groups=[ConsumerData(GROUP, (ORDERS,))])
        for q in range(QUEUES):
            offset = 0  # Apache answers at most 32 messages a pull (maxTransferCountOnMessageInMemory)
            while offset < N // QUEUES:
                pulled = c.pull(primary.broker_addr, GROUP, ORDERS, q, offset, N)
                assert pulled.status == "FOUND" and pulled.messages
                offset = pulled.next_begin_offset
            assert offset == N // QUEUES
            c.update_consumer_offset(primary.broker_addr, GROUP, ORDERS, q, N // QUEUES)
    return {q: N // QUEUES for q in range(QUEUES)}


def _group_on_standby(standby) -> dict[int, int]:
    """The group's offsets on the standby (0 where it has none: a broker answers 0 for a group
    without an offset on a queue that starts at 0)."""
    with SyncRocketMQClient(standby.namesrv, timeout=30) as c:
        route = c.topic_route(ORDERS)
        return {mq.queue_id: c.query_consumer_offset(route.master_addr(mq.broker_name), GROUP, ORDERS, mq.queue_id)
                for mq in route.read_queues()}


def _checkpoints(standby) -> list[dict]:
    if not _stored(standby, "rmq_sys_replicator_checkpoints"):
        return []
    return [orjson.loads(m.body) for msgs in consume_all(standby, "rmq_sys_replicator_checkpoints").values() for m in msgs]


def test_shipped_rocketmq_dr_example_on_fresh_brokers(spark, tmp_path, monkeypatch):
    with rocketmq_broker(tmp_path / "primary", log_path=tmp_path / "primary.log") as primary, \
            rocketmq_broker(tmp_path / "standby", log_path=tmp_path / "standby.log") as standby:
        monkeypatch.setenv("ROCKETMQ_PRIMARY", primary.namesrv)
        monkeypatch.setenv("ROCKETMQ_STANDBY", standby.namesrv)
        pipelines = [load_pipeline_file(CONF / f"rocketmq-dr-{name}.json") for name in FILES]
        interval_s = int(pipelines[1].source_config["interval.ms"]) / 1000
        healthy_at: list[float] = []

        def on_epoch(_epoch, results, _runtimes) -> None:
            for r in results:
                if r.connector == "rocketmq-dr-heartbeat-monitor" and (r.metrics or {}).get("heartbeat.primary.healthy"):
                    healthy_at.append(time.monotonic())

        driver = Driver(SparkExecutor(spark), OffsetStore(tmp_path / "data"), pipelines, on_epoch=on_epoch)
        mirror, _emit, monitor, _checkpoint = driver.runtimes
        assert mirror.tasks == [] and "waiting for topics matching 'orders.*|rmq_sys_replicator_heartbeat'" in mirror.waiting()
        assert monitor.tasks == [] and f"waiting for topic(s) '{HEARTBEATS}' to exist" in monitor.waiting()
        stop = threading.Event()
        runner = threading.Thread(target=driver.run, args=(stop,), name="driver")
        runner.start()
        try:
            started = time.monotonic()
            first_beat = wait_for(lambda: _stored(standby, HEARTBEATS) and time.monotonic(), 60,
                                  "the first heartbeat on the standby")
            _write_orders(primary)
            written = time.monotonic()
            wait_for(lambda: _stored(standby, ORDERS) >= N, 60, f"{N} orders on the standby")
            orders_s = time.monotonic() - written
            wait_for(lambda: healthy_at, 3 * interval_s, "the monitor reporting the link healthy")
            on_primary = _consume_orders(primary)
            consumed = time.monotonic()
            # The orders sit at the same offsets on the standby (a fresh topic, queue for queue): once the
            # mirror's offset sync for the last order is there, the group translates exactly.
            wait_for(lambda: _group_on_standby(standby) == on_primary, 60, f"group {GROUP} moved on the standby")
            checkpoints = wait_for(lambda: _checkpoints(standby), 30, "checkpoint records on the standby")
            checkpointed_s = time.monotonic() - consumed
        finally:
            stop.set()
            runner.join(60)
        print(f"first heartbeat on the standby {first_beat - started:.1f} s after the start, reported healthy "
              f"{healthy_at[0] - first_beat:.1f} s later (interval {interval_s:g} s); {N} orders on the standby "
              f"{orders_s:.1f} s after they were written; the group's position checkpointed {checkpointed_s:.1f} s "
              f"after it committed")
        assert healthy_at[0] - first_beat <= 2 * interval_s
        mirrored = consume_all(standby, ORDERS)
        assert sorted(int(m.body.decode().split("-")[1]) for msgs in mirrored.values() for m in msgs) == list(range(N))
        assert {(c["group"], c["source"]["alias"], c["target"]["alias"], c["target"]["topic"]) for c in checkpoints} == \
            {(GROUP, "primary", "standby", ORDERS)}
