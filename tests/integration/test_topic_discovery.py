"""Sources that start before their topics exist, over the wire: a Kafka, a Pulsar and a RocketMQ
mirror start with no matching topic (0 task pairs, saying what they wait for) - by regex, and a
Pulsar one by name on a broker that does not create topics on lookup - the topics are created 10 s
later with records, and every record is mirrored within
``refresh.topics.interval.ms`` + one epoch; then the RocketMQ topic's queue count grows while it is
mirrored, and the new queues are mirrored too, into a target grown to match.

The connectors run side by side in one driver (each in its own thread, as ``connect run``
runs them), so the 10 s wait is paid once. The worker's REST status says what a connector without
task pairs waits for."""

from __future__ import annotations

import hashlib
import threading
import time

import pulsar_util
import pytest
from kafka_util import consume_all as kafka_consume_all
from kafka_util import create_topic as kafka_create_topic
from kafka_util import produce as kafka_produce
from pipeline_util import assert_delivered_in_order, make_driver, pair_pipeline
from pulsar_admin import FakePulsarAdmin
from pulsar_wire import SchemaRegistryProxy
from rocketmq_util import consume_all as rocketmq_consume_all
from rocketmq_util import produce as rocketmq_produce
from service_util import wait_for

from connectors.rocketmq.sync_client import SyncRocketMQClient

pytestmark = pytest.mark.timeout(240)

REFRESH_MS, EPOCH_MS = 2000, 1500
# Beyond refresh + one epoch: the reconfiguration, the scheduling of the new pair's Spark job and
# its result reaching the driver, on a shared 2-core machine.
SLACK_S = 4.0
N = 1000


def _index(value: bytes) -> int:
    return int(value.decode().rsplit("-", 1)[1])


def _committed(runtime) -> int:
    return runtime.records_total


def _wait_committed(runtimes: dict, wanted: dict, since: float, timeout: float) -> dict:
    """Seconds from ``since`` until each connector had committed its wanted count (acknowledged by
    the target broker)."""
    took: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(took) < len(wanted) and time.monotonic() < deadline:
        for kind, rt in runtimes.items():
            if kind not in took and kind in wanted and _committed(rt) >= wanted[kind]:
                took[kind] = time.monotonic() - since
        time.sleep(0.05)
    missing = {k: f"{_committed(runtimes[k])} of {n}" for k, n in wanted.items() if k not in took}
    assert not missing, f"not mirrored within {timeout:.0f} s: {missing}"
    return took


def test_sources_started_before_their_topics_pick_them_up_and_a_growing_queue_count(
        kafka_pair, pulsar_pair, rocketmq_pair, spark, tmp_path, unique):
    (ksrc, kdst), (psrc, pdst), (rsrc, rdst) = kafka_pair, pulsar_pair, rocketmq_pair
    tag = hashlib.sha1(unique.encode()).hexdigest()[:8]
    kafka_topic, pulsar_topic, rocketmq_topic = f"late.k{tag}", f"persistent://public/default/late-p{tag}", f"LateR{tag}"
    named_topic = f"persistent://public/default/named-p{tag}"
    admin = FakePulsarAdmin().start()  # pulsar-lite cannot list a namespace's topics (see tests/pulsar_admin.py)
    strict = SchemaRegistryProxy(psrc.port)  # pulsar-lite creates every topic asked for; this broker does not
    strict.missing.add(named_topic)
    admin.tenants["public"] = {"allowedClusters": ["standalone"]}
    admin.namespaces["public/default"] = {}
    fast = {"epoch.max.ms": EPOCH_MS}
    refresh = {"refresh.topics.interval.ms": REFRESH_MS}
    pipelines = {
        "kafka": pair_pipeline(f"{unique}-k", {"connector.class": "kafka", "bootstrap.servers": ksrc.bootstrap,
                                                "topics.regex": rf"late\.k{tag}.*", **refresh},
                               {"connector.class": "kafka", "bootstrap.servers": kdst.bootstrap}, **fast),
        "pulsar": pair_pipeline(f"{unique}-p", {"connector.class": "pulsar", "service.url": psrc.service_url,
                                                 "topics.regex": f"persistent://public/default/late-p{tag}.*",
                                                 "admin.url": admin.url, **refresh},
                                {"connector.class": "pulsar", "service.url": pdst.service_url}, **fast),
        "pulsar-named": pair_pipeline(f"{unique}-n", {"connector.class": "pulsar", "service.url": strict.service_url,
                                                       "topics": named_topic, **refresh},
                                      {"connector.class": "pulsar", "service.url": pdst.service_url}, **fast),
        "rocketmq": pair_pipeline(f"{unique}-r", {"connector.class": "rocketmq", "namesrv.addr": rsrc.namesrv,
                                                   "topics.regex": f"LateR{tag}.*", **refresh},
                                  {"connector.class": "rocketmq", "namesrv.addr": rdst.namesrv,
                                   "auto.create.topics": "true"}, **fast),
    }
    driver = make_driver(spark, tmp_path, *pipelines.values())
    runtimes = dict(zip(pipelines, driver.runtimes, strict=True))
    stop = threading.Event()
    runner = threading.Thread(target=driver.run, args=(stop,), name="driver")
    try:
        for kind, rt in runtimes.items():  # nothing to read yet, and they say so
            assert rt.tasks == [], kind
            assert rt.waiting().startswith(f"waiting for topic(s) '{named_topic}' to exist" if kind == "pulsar-named"
                                           else "waiting for topics matching '"), rt.waiting()
        runner.start()
        time.sleep(10)

        created = time.monotonic()
        kafka_create_topic(ksrc.bootstrap, kafka_topic, 2)
        kafka_produce(ksrc.bootstrap, kafka_topic, N, 2)
        assert admin.dispatch("PUT", f"/admin/v2/persistent/public/default/late-p{tag}", None, None)[0] == 204
        pulsar_util.produce(psrc, pulsar_topic, N, 0)
        strict.missing.clear()
        pulsar_util.produce(psrc, named_topic, N, 0)
        rocketmq_produce(rsrc, rocketmq_topic, N, 2)
        produced = time.monotonic() - created
        took = _wait_committed(runtimes, {k: N for k in runtimes}, created, 60)
        bound = (REFRESH_MS + EPOCH_MS) / 1000 + SLACK_S
        print(f"created + {N} records each in {produced:.1f} s; all committed after (s): "
              + ", ".join(f"{k} {v:.1f}" for k, v in took.items()) + f"; bound {bound:.1f} s")
        for kind, seconds in took.items():
            assert seconds <= produced + bound, f"{kind}: {seconds:.1f} s from creation to every record mirrored"
            assert runtimes[kind].waiting() is None

        # The RocketMQ topic grows from 2 to 4 queues while it is mirrored: the new queues are read
        # from their first message and the target grows with it.
        grown = time.monotonic()
        with SyncRocketMQClient(rsrc.namesrv) as c:
            c.create_topic(rsrc.broker_addr, rocketmq_topic, 4, 4)
        rocketmq_produce(rsrc, rocketmq_topic, N, 4, start=N)
        produced = time.monotonic() - grown
        took_grown = _wait_committed(runtimes, {"rocketmq": 2 * N}, grown, 60)["rocketmq"]
        print(f"queues 2 -> 4: {N} more records committed after {took_grown:.1f} s (bound {produced + bound:.1f} s)")
        assert took_grown <= produced + bound
    finally:
        stop.set()
        if runner.is_alive():
            runner.join(60)
        else:
            driver.close()
        admin.stop()
        strict.close()

    got = kafka_consume_all(kdst.bootstrap, kafka_topic, range(2), N)
    assert sorted(_index(m.value()) for m in got) == list(range(N))
    for topic in (pulsar_topic, named_topic):
        got = pulsar_util.consume_all(pdst, topic, 0, N)[-1]
        assert_delivered_in_order([_index(m.data()) for m in got], list(range(N)), topic)
    mirrored = rocketmq_consume_all(rdst, rocketmq_topic)
    assert sorted(mirrored) == [0, 1, 2, 3]  # the target grew with its source
    for q, msgs in mirrored.items():
        # queues 0-1 hold the first N round robin over 2, then every queue the next N over 4
        expected = [i for i in range(N) if i % 2 == q] + [i for i in range(N, 2 * N) if i % 4 == q]
        assert_delivered_in_order([_index(m.body) for m in msgs], expected, f"queue {q}")



def test_the_rest_status_says_what_a_connector_without_task_pairs_waits_for(worker_factory, kafka_pair, unique):
    src, dst = kafka_pair
    regex = rf"none\.{hashlib.sha1(unique.encode()).hexdigest()[:8]}.*"
    _, c = worker_factory()
    config = {"source.connector.class": "kafka", "source.bootstrap.servers": src.bootstrap, "source.topics.regex": regex,
              "sink.connector.class": "kafka", "sink.bootstrap.servers": dst.bootstrap}
    assert c.post("/connectors", json={"name": unique, "config": config}).status_code == 201
    status = wait_for(lambda: (s := c.get(f"/connectors/{unique}/status").json())["connector"].get("waiting") and s, 30,
                      "a status that says what the connector waits for")
    assert status["connector"]["state"] == "RUNNING" and status["tasks"] == []
    assert status["connector"]["waiting"] == f"waiting for topics matching '{regex}' (looking every 10 s)"
