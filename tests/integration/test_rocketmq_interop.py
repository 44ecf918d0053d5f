"""Interop proof: the official RocketMQ C++ client (rocketmq-client-cpp 2.1.0 through
rocketmq-client-python 2.0.0, see tests/rocketmq_official.py) against the embedded broker, and
this project's client reading what the C++ client wrote and the other way round.

The C++ client only talks to a name server + broker, so these tests also prove route lookup,
heartbeats, the consumer list, consumer offsets and long-polling pulls as a real client uses them.
Each C++ client runs in its own process (its push consumer cannot shut down cleanly in this build).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rocketmq_official import ensure_lib

HELPER = str(Path(__file__).parents[1] / "rocketmq_official.py")


@pytest.fixture(scope="module")
def cpp_lib():
    return str(ensure_lib())


def official(mode: str, namesrv: str, topic: str, lib: str, tmp_path: Path, *args: str, timeout: float = 90):
    """Run the official client; its JSON lines and exit code."""
    proc = subprocess.run([sys.executable, HELPER, mode, namesrv, topic, "--lib", lib, "--log-dir", str(tmp_path / "cpp-logs"),
                           *args], capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return lines, proc.returncode, proc.stderr[-2000:]


def test_official_cpp_producer_and_push_consumer_round_trip_through_the_embedded_broker(rocketmq_pair, cpp_lib, tmp_path,
                                                                                         unique):
    """Produce with the C++ client to a topic that does not exist yet (the route of TBW102, then
    auto-creation on send), then consume with its push consumer (retry topic route, heartbeat,
    consumer list, offsets, long-polling pulls, tag filter): every message, identical."""
    broker, _ = rocketmq_pair
    topic = "Interop" + hashlib.sha1(unique.encode()).hexdigest()[:10]
    sent, rc, err = official("produce", broker.namesrv, topic, cpp_lib, tmp_path, "-n", "40", "--tag", "TagA")
    assert rc == 0 and len(sent) == 40 and all(r["ok"] for r in sent), (sent[:2], err)
    other, rc, err = official("produce", broker.namesrv, topic, cpp_lib, tmp_path, "-n", "10", "--tag", "TagB",
                              "--body", "not for the consumer")
    assert rc == 0, err
    got, rc, err = official("consume", broker.namesrv, topic, cpp_lib, tmp_path, "--expect", "40", "--expr", "TagA",
                            "--group", f"g-{unique}", "--timeout", "60")
    assert rc == 0, (len(got), err)
    assert sorted(m["body"] for m in got) == sorted(f"from the C++ client #{i}" for i in range(40))
    for m in got:
        i = int(m["props"]["seq"])
        assert (m["topic"], m["tags"], m["keys"], m["props"]["color"]) == (topic, "TagA", f"key-{i}", "red")
    assert {m["id"] for m in got} == {r["msg_id"] for r in sent}  # the producer's message ids (UNIQ_KEY) travel


def test_the_project_client_reads_what_the_cpp_client_wrote(rocketmq_pair, cpp_lib, tmp_path, unique):
    from connectors.rocketmq.sync_client import SyncRocketMQClient

    broker, _ = rocketmq_pair
    topic = "FromCpp" + hashlib.sha1(unique.encode()).hexdigest()[:10]
    sent, rc, err = official("produce", broker.namesrv, topic, cpp_lib, tmp_path, "-n", "30", "--tag", "TagC")
    assert rc == 0, err
    with SyncRocketMQClient(broker.namesrv) as client:
        route = client.topic_route(topic)
        got = []
        for mq in route.read_queues():
            addr = route.master_addr(mq.broker_name)
            result = client.pull(addr, "reader", topic, mq.queue_id, 0, 100)
            got += result.messages if result.status == "FOUND" else []
    assert len(got) == 30
    ids = {r["msg_id"] for r in sent}
    for m in got:
        i = int(m.properties["seq"])
        assert m.body == f"from the C++ client #{i}".encode() and m.tags == "TagC" and m.keys == [f"key-{i}"]
        assert m.properties["color"] == "red" and m.msg_id in ids
        assert m.topic == topic and m.born_timestamp > 0 and m.store_timestamp >= m.born_timestamp


def test_the_cpp_push_consumer_reads_what_the_project_client_wrote(rocketmq_pair, cpp_lib, tmp_path, unique):
    from connectors.rocketmq.sync_client import SyncRocketMQClient

    broker, _ = rocketmq_pair
    topic = "FromPy" + hashlib.sha1(unique.encode()).hexdigest()[:10]
    with SyncRocketMQClient(broker.namesrv) as client:
        client.create_topic(broker.broker_addr, topic, 4, 4)
        route = client.topic_route(topic)
        queues = route.write_queues()
        singles = [client.send(route.master_addr(q.broker_name), topic, q.queue_id, f"single #{i}".encode(),
                               {"TAGS": "TagP", "KEYS": f"key-{i}", "UNIQ_KEY": f"{i:032X}", "seq": str(i),
                                "origin": "python"})
                   for i, q in ((i, queues[i % len(queues)]) for i in range(20))]
        batch = client.send_batch(route.master_addr(queues[0].broker_name), topic, queues[0].queue_id,
                                  [(f"batched #{i}".encode(), {"TAGS": "TagP", "KEYS": f"key-{i}", "UNIQ_KEY": f"{i:032X}",
                                                               "seq": str(i), "origin": "python"}) for i in range(20, 30)])
        assert all(f.result(10).ok for f in singles) and batch.result(10).ok
    got, rc, err = official("consume", broker.namesrv, topic, cpp_lib, tmp_path, "--expect", "30", "--group",
                            f"cpp-{unique}", "--timeout", "60")
    assert rc == 0, (len(got), err)
    assert len(got) == 30
    for m in got:
        i = int(m["props"]["seq"])
        assert m["body"] == (f"single #{i}" if i < 20 else f"batched #{i}")
        assert (m["tags"], m["keys"], m["props"]["origin"], m["id"]) == ("TagP", f"key-{i}", "python", f"{i:032X}")
