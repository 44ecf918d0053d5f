"""``connect mm2 import --worker``: an mm2.properties for two Kafka clusters becomes running
connectors on a real worker (real uvicorn, the session's Spark), and data flows A -> B under MM2's
names: the topic's records arrive in ``A.<topic>``, the heartbeats emitted into A arrive in
``A.heartbeats``, and MM2's client library could read the checkpoints (``A.checkpoints.internal``)."""

from __future__ import annotations

import pytest
from kafka_util import create_topic, produce
from service_util import Arrivals, wait_for
from typer.testing import CliRunner

from worker.cli import app

pytestmark = pytest.mark.timeout(400)


def test_imported_connectors_run_on_a_worker_and_mirror_a_to_b(worker_factory, kafka_pair, unique, tmp_path):
    a, b = kafka_pair
    topic, prefix = f"imp-{unique}", f"m{unique[-6:]}"
    create_topic(a.bootstrap, topic, 2)
    produce(a.bootstrap, topic, 300, 2)
    mm2 = tmp_path / "mm2.properties"
    mm2.write_text(f"""\
clusters = A, B
A.bootstrap.servers = {a.bootstrap}
B.bootstrap.servers = {b.bootstrap}
A->B.enabled = true
A->B.topics = {topic}
# one broker per cluster
replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
emit.checkpoints.interval.seconds = 1
# tansu has no ACLs (its CreateAcls answer aborts librdkafka): on Apache Kafka leave this out
sync.topic.acls.enabled = false
""")
    worker, client = worker_factory()
    run = CliRunner().invoke(app, ["mm2", "import", str(mm2), "--worker", f"http://127.0.0.1:{worker.port}",
                                   "--prefix", prefix])
    assert run.exit_code == 0, run.output
    names = sorted(client.get("/connectors").json())
    assert names == sorted(f"{prefix}-{n}" for n in ("A-B-mirror", "A-B-checkpoint", "A-B-metadata",
                                                      "A-heartbeat", "B-heartbeat")), names

    arrivals = Arrivals(b.bootstrap, f"A.{topic}", 2)
    wait_for(lambda: arrivals.count() >= 300, 180, "300 records in A.<topic> on B")
    assert arrivals.count(1.0) == 300  # once each
    beats = Arrivals(b.bootstrap, "A.heartbeats", 1)
    wait_for(lambda: beats.count() >= 1, 120, "heartbeats of A in A.heartbeats on B")
    for name in names:
        status = client.get(f"/connectors/{name}/status").json()
        assert status["connector"]["state"] == "RUNNING", status
        assert all(t["state"] == "RUNNING" for t in status["tasks"]), status
