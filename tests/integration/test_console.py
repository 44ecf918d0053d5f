"""The console's HTTP surface over the wire (uvicorn on a loopback port, the session's Spark, Apache Kafka):
its page asks for credentials where the API does, its assets are the package's own, and the one
summary document carries every connector as a flow with the figures the page draws - a refused
record's reason and dead letters included, a secret nowhere. ``connect connectors --data-dir``
finds the worker from the address it wrote. The browser's view of all this is
``tests/e2e/test_console_browser.py``."""

from __future__ import annotations

import base64
import time

import httpx
import pytest
from kafka_util import create_topic, produce
from service_util import wait_for
from typer.testing import CliRunner

from integration.test_kafka_mirror import produce_with_one_oversized
from worker.cli import app as cli

pytestmark = pytest.mark.timeout(300)

BASIC = {"rest.auth.user": "ops", "rest.auth.password": "console-pw-7f3a"}


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_with_basic_auth_the_console_asks_for_credentials_and_the_api_answers_401_without_them(worker_factory):
    w, _ = worker_factory(**BASIC)
    url = f"http://127.0.0.1:{w.port}"
    page = httpx.get(f"{url}/ui", timeout=10)
    assert page.status_code == 401
    assert page.headers["WWW-Authenticate"].startswith("Basic "), "a browser asks for credentials only for Basic"
    for path in ("/ui/", "/ui/assets/console.js", "/console/summary", "/connectors", "/metrics"):
        assert httpx.get(f"{url}{path}", timeout=10).status_code == 401, path
    # the documents the page polls challenge as the page does, so the browser answers with what it was given
    assert httpx.get(f"{url}/console/summary", timeout=10).headers["WWW-Authenticate"].startswith("Basic ")
    assert httpx.get(f"{url}/connectors", timeout=10).headers["WWW-Authenticate"].startswith("Bearer, Basic")
    assert httpx.get(f"{url}/ui", headers=_basic("ops", "wrong"), timeout=10).status_code == 401
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200  # probes need no credentials

    ok = httpx.Client(base_url=url, headers=_basic(*BASIC.values()), timeout=10)
    page = ok.get("/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    assert "/ui/assets/console.js" in page.text and "http" not in page.text.split("<body>")[1], "no asset from outside"
    script = ok.get("/ui/assets/console.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert "/console/summary" in script.text and "innerHTML" not in script.text
    assert ok.get("/ui/assets/console.css").status_code == 200
    for name in ("nope.js", "..%2Fconsole.py", "index.html"):
        assert ok.get(f"/ui/assets/{name}").status_code == 404, name
    summary = ok.get("/console/summary").json()
    assert summary["worker"]["generation"] == 1 and summary["worker"]["uptime_s"] >= 0
    assert summary["flows"] == [] and summary["clusters"] == []
    assert ok.get("/console/connectors/nope").status_code == 404


def test_with_only_a_token_the_page_loads_and_asks_for_it_while_every_document_needs_it(worker_factory):
    w, _ = worker_factory(**{"rest.auth.token": "console-token-91c2"})
    url = f"http://127.0.0.1:{w.port}"
    page = httpx.get(f"{url}/ui", timeout=10)
    assert page.status_code == 200 and 'id="login"' in page.text  # holds no data; it asks for the token
    assert httpx.get(f"{url}/console/summary", timeout=10).status_code == 401
    assert httpx.put(f"{url}/connectors/x/pause", timeout=10).status_code == 401
    got = httpx.get(f"{url}/console/summary", headers={"Authorization": "Bearer console-token-91c2"}, timeout=10)
    assert got.status_code == 200 and got.json()["flows"] == []


def test_summary_and_link_documents_carry_flows_figures_failures_and_no_secret(worker_factory, kafka_pair, unique,
                                                                                tmp_path, monkeypatch):
    a, b = kafka_pair
    w, c = worker_factory()
    topic = f"console-{unique}"
    create_topic(a.bootstrap, topic, 2)
    produce(a.bootstrap, topic, 2000, 2)
    secret = "s3cret-console-9d1e"
    name = f"flow-{unique}"
    config = {"source.connector.class": "kafka", "source.bootstrap.servers": a.bootstrap, "source.topics": topic,
              "source.start.position": "earliest", "source.cluster.alias": "east",
              "sink.connector.class": "kafka", "sink.bootstrap.servers": b.bootstrap, "sink.cluster.alias": "west",
              "sink.topic.template": "west.{topic}", "sink.producer.override.sasl.password": secret,
              "epoch.max.ms": "1000", "tasks.max": "2"}
    assert c.post("/connectors", json={"name": name, "config": config}).status_code == 201
    paused = f"paused-{unique}"
    plain = {k: v for k, v in config.items() if "cluster.alias" not in k and "sasl" not in k}
    # no alias, and the source by another name of the same broker: the cluster's id says it is east
    plain["source.bootstrap.servers"] = a.bootstrap.replace("127.0.0.1", "localhost")
    assert c.post("/connectors", json={"name": paused, "config": plain, "initial_state": "PAUSED"}).status_code == 201

    def committed_all():
        doc = c.get(f"/console/connectors/{name}").json()
        return doc if doc["counts"]["committed"] >= 2000 and len(doc["chart"]["ago_s"]) >= 2 else None

    doc = wait_for(committed_all, 90, "every record committed and two history samples")
    assert doc["source"] == "east" and doc["target"] == "west" and doc["source_kind"] == "kafka"
    assert doc["status"]["connector"]["state"] == "RUNNING" and len(doc["status"]["tasks"]) == 2
    assert doc["actions"] == {"pause": True, "resume": False, "restart": True, "stop": True}
    # the age of the records (old timestamps, backlog) is not the link's replication latency
    # records made with 2023 timestamps: years old, and not the link's latency (no heartbeat monitor here)
    assert doc["record_age"]["max_s"] > 365 * 86400 and doc["replication_latency"] is None, doc["record_age"]
    assert {p["partition"] for p in doc["partitions"]} == {f"{topic}/0", f"{topic}/1"}
    assert sum(p["offset"]["offset"] + 1 for p in doc["partitions"]) == 2000  # the committed offsets
    assert max(v for v in doc["chart"]["records_per_second"] if v is not None) > 0
    assert doc["config"]["sink.producer.override.sasl.password"] == "********"

    summary = c.get("/console/summary")
    assert secret not in summary.text and secret not in c.get(f"/console/connectors/{name}").text
    flows = {f["name"]: f for f in summary.json()["flows"]}
    assert flows[name]["source"] == "east" and flows[name]["target"] == "west"
    assert flows[name]["health"] in ("running", "lagging") and flows[name]["tasks"]["total"] == 2
    assert flows[paused]["health"] == "paused" and flows[paused]["state"] == "PAUSED"
    # one node per cluster: the flow naming them by address only is drawn between east and west
    assert flows[paused]["source"] == "east" and flows[paused]["target"] == "west", flows[paused]
    nodes = {cl["id"]: cl for cl in summary.json()["clusters"]}
    assert set(nodes) == {"east", "west"}, nodes
    assert nodes["east"]["cluster_id"] == a.cluster_id and nodes["west"]["cluster_id"] == b.cluster_id
    assert set(nodes["east"]["addresses"]) == {a.bootstrap, a.bootstrap.replace("127.0.0.1", "localhost")}
    assert not flows[paused]["draining"] and flows[name]["draining"] is False
    # how the pairs are hosted: shared hosts carry the running flow's two pairs, nobody waits for a slot
    hosts = summary.json()["worker"]["hosts"]
    assert hosts and sum(h["pairs"] for h in hosts) >= 2 and all(h["load_cores"] >= 0 for h in hosts), hosts
    assert summary.json()["worker"]["slot_waits_s"] == {} and flows[name]["slot_wait_s"] is None

    # the CLI finds the worker from the address it wrote into its data directory
    monkeypatch.delenv("CONNECT_URL", raising=False)
    out = CliRunner().invoke(cli, ["connectors", "list", "--data-dir", str(w.config.get("data.dir"))])
    assert out.exit_code == 0 and name in out.output, out.output
    missing = CliRunner().invoke(cli, ["connectors", "list", "--data-dir", str(tmp_path / "nowhere")])
    assert missing.exit_code == 3 and "no worker has started with data directory" in missing.output


def test_a_refused_record_shows_its_reason_dead_letter_count_and_trace_on_the_link_page(worker_factory, kafka_pair,
                                                                                      unique):
    a, b = kafka_pair
    _, c = worker_factory()
    topic = f"big-{unique}"
    produce_with_one_oversized(a.bootstrap, topic, 10, oversized=4)
    name = f"dlq-{unique}"
    config = {"source.connector.class": "kafka", "source.bootstrap.servers": a.bootstrap, "source.topics": topic,
              "source.start.position": "earliest", "sink.connector.class": "kafka",
              "sink.bootstrap.servers": b.bootstrap, "sink.topic.template": "dlqc.{topic}",
              "sink.producer.override.message.max.bytes": "2000",  # the 5000-byte record is refused
              "dlq.producer.override.message.max.bytes": "1000000",
              "errors.deadletterqueue.topic.name": f"dlq-{unique}", "epoch.max.ms": "1000"}
    assert c.post("/connectors", json={"name": name, "config": config}).status_code == 201

    def dead_lettered():
        doc = c.get(f"/console/connectors/{name}").json()
        return doc if doc["counts"]["dead_lettered"] >= 1 else None

    doc = wait_for(dead_lettered, 90, "the refused record dead-lettered")
    assert doc["dead_letter_topic"] == f"dlq-{unique}"
    assert doc["counts"]["errors"] >= 1 and doc["failure_reasons"], doc["counts"]
    assert any("MSG_SIZE_TOO_LARGE" in r["reason"] for r in doc["failure_reasons"]), doc["failure_reasons"]
    readable = [r["text"] for r in doc["failure_reasons"] if "MSG_SIZE_TOO_LARGE" in r["reason"]]
    # said as a sentence: the position in words, not a Python dict
    assert readable and all("at offset" in t and "{'" not in t and t.endswith("Broker: Message size too large "
                                                                          "(DeliveryError)") for t in readable), readable
    flows = {f["name"]: f for f in c.get("/console/summary").json()["flows"]}
    assert flows[name]["dead_lettered"] >= 1


def test_one_summary_request_answers_for_100_connectors(worker_factory):
    """The topology page polls one document whatever the number of connectors: with 100 (PAUSED, on
    in-memory test connectors) it lists them all, and quickly."""
    _, c = worker_factory()
    for i in range(100):
        config = {"source.connector.class": "memory-source", "source.records": "0", "sink.connector.class": "memory-sink"}
        r = c.post("/connectors", json={"name": f"m{i:03d}", "config": config, "initial_state": "PAUSED"})
        assert r.status_code == 201, r.text
    wait_for(lambda: all(f["state"] == "PAUSED" for f in c.get("/console/summary").json()["flows"]), 60,
             "100 connectors PAUSED")
    timings = []
    for _ in range(5):
        started = time.monotonic()
        summary = c.get("/console/summary")
        timings.append(time.monotonic() - started)
        assert summary.status_code == 200 and len(summary.json()["flows"]) == 100
    assert max(timings) < 1.0, f"GET /console/summary took {max(timings):.2f} s with 100 connectors"
