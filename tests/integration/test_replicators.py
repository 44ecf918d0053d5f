"""Replicator onboarding (PIP-18) through the worker service, over real brokers: one request puts
a namespace's topics under replication with a topic mapping; credentials go to the keystore plugin
(the directory provider) and only references reach the connector configs; one topic's replicator
stops and starts alone; stats show per-topic figures; removal takes the connectors and the
credentials away. The ``connect replicators`` CLI is driven against the same worker."""

from __future__ import annotations

import os
import stat

import pytest
from kafka_util import create_topic, produce
from service_util import Arrivals, state_of, wait_for
from typer.testing import CliRunner

from worker.cli import app as cli

pytestmark = pytest.mark.timeout(300)

SECRET = "pw-very-secret-4711"


def test_replicator_onboarding_per_topic_control_stats_and_keystore(worker_factory, kafka_pair, tmp_path, unique):
    a, b = kafka_pair
    ns = f"ns{unique.rsplit('-', 1)[1]}"
    topics = {f"{ns}-orders": f"{ns}-orders-copy", f"{ns}-payments": f"{ns}-payments-copy"}
    for t in list(topics) + list(topics.values()):
        create_topic((a if t in topics else b).bootstrap, t, 2)
    keystore = tmp_path / "keystore"
    _, c = worker_factory(**{"config.providers": "env,file,directory",
                             "config.providers.directory.param.allowed.paths": str(keystore),
                             "replicators.keystore.root": str(keystore)})
    body = {"namespace": ns, "type": "kafka", "region": "east",
            "source": {"type": "kafka", "bootstrap.servers": a.bootstrap, "alias": "west"}, "config": {"epoch.max.ms": "500"},
            "topicMapping": topics, "replicationProperties": {"bootstrap.servers": b.bootstrap},
            "authPlugin": "directory", "authParam": {"client.override.sasl.password": SECRET}}
    # bad input: a JSON path names what is wrong
    bad = c.post("/replicators", json={**body, "type": "kinesis"})
    assert bad.status_code == 400 and "$.type" in bad.json()["message"]
    bad = c.post("/replicators", json={**body, "authPlugin": "vault"})
    assert bad.status_code == 400 and "$.authPlugin" in bad.json()["message"]

    r = c.post("/replicators", json=body)
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    assert rid == f"kafka.east.{ns}" and len(r.json()["connectors"]) == 2
    # the credential lives in the keystore only: 0600 file, references in the configs
    secret_file = keystore / rid / "client.override.sasl.password"
    assert secret_file.read_text() == SECRET and stat.S_IMODE(os.stat(secret_file).st_mode) == 0o600
    for name in r.json()["connectors"]:
        config = c.get(f"/connectors/{name}/config").json()
        assert config["sink.client.override.sasl.password"] == f"${{directory:{keystore}/{rid}:client.override.sasl.password}}"
        assert config["replicator.id"] == rid and config["source.cluster.alias"] == "west"
        assert SECRET not in c.get(f"/connectors/{name}").text

    orders, payments = (Arrivals(b.bootstrap, t) for t in topics.values())
    produce(a.bootstrap, f"{ns}-orders", 500, 2)
    produce(a.bootstrap, f"{ns}-payments", 500, 2)
    wait_for(lambda: orders.count() >= 500 and payments.count() >= 500, 90, "both topics replicated")

    # stop one topic's replicator: the other goes on
    assert c.put(f"/replicators/{rid}/topics/{ns}-orders/stop").status_code == 202
    orders_connector = f"{rid}.{ns}-orders"
    wait_for(lambda: state_of(c, orders_connector) == "STOPPED", 60, "the orders replicator stopped")
    produce(a.bootstrap, f"{ns}-orders", 300, 2, start=500)
    produce(a.bootstrap, f"{ns}-payments", 300, 2, start=500)
    wait_for(lambda: payments.count() >= 800, 60, "payments still replicated")
    assert orders.count(wait=2) == 500  # nothing while stopped
    listed = c.get("/replicators").json()
    [mine] = [x for x in listed if x["id"] == rid]
    assert mine["topics"][f"{ns}-orders"]["state"] == "STOPPED" and mine["topics"][f"{ns}-payments"]["state"] == "RUNNING"
    assert c.put(f"/replicators/{rid}/topics/{ns}-orders/start").status_code == 202
    wait_for(lambda: orders.count() >= 800, 90, "orders replicated again after start")

    stats = wait_for(lambda: (t := c.get(f"/replicators/{rid}/stats").json()["topics"])[f"{ns}-orders"]["records"] >= 800
                     and t, 30, "the stats to count every record")  # reported at each epoch's end
    assert stats[f"{ns}-payments"]["records"] >= 800
    for figures in stats.values():  # failures: transient re-sends may happen on a loaded machine; all arrived
        assert figures["failures"] >= 0 and (figures["lag"] is None or figures["lag"] >= 0)
        assert "records_per_second" in figures and figures["state"] == "RUNNING"

    # the CLI over the same REST API
    url = str(c.base_url)
    runner = CliRunner()
    out = runner.invoke(cli, ["replicators", "stats", rid, "--url", url])
    assert out.exit_code == 0 and f"{ns}-orders" in out.output and "RUNNING" in out.output, out.output
    out = runner.invoke(cli, ["replicators", "stop", rid, "nope", "--url", url])
    assert out.exit_code == 1 and "no topic" in out.output
    out = runner.invoke(cli, ["replicators", "add", ns, "--type", "kafka", "--region", "x", "--topic-mapping", "{",
                              "--replication-properties", "{}", "--url", url])
    assert out.exit_code == 2 and "--topic-mapping" in out.output

    out = runner.invoke(cli, ["replicators", "remove", rid, "--url", url])
    assert out.exit_code == 0, out.output
    assert not (keystore / rid).exists()
    assert all(not n.startswith(rid) for n in c.get("/connectors").json())
    assert c.get(f"/replicators/{rid}").status_code == 404
    orders.close()
    payments.close()
