"""What a Kafka Connect user trips over first on the worker's REST API (issue 36), over the wire
against a running worker (real uvicorn, the session's Spark, Apache Kafka brokers): plugin aliases in
every plugin path, validate answering what create answers, relative ``${file:...}`` paths under
conf/worker.json, Kafka Connect's error body for unparseable parameters, KIP-558's active topics
and KIP-495's loggers."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from kafka_util import create_topic, produce
from service_util import wait_for

pytestmark = pytest.mark.timeout(300)

WORKER_JSON = Path(__file__).resolve().parents[2] / "conf" / "worker.json"


def _pipeline(a, b, topic: str, **extra) -> dict[str, str]:
    return {"source.connector.class": "kafka", "source.bootstrap.servers": a.bootstrap, "source.topics": topic,
            "source.start.position": "earliest", "sink.connector.class": "kafka",
            "sink.bootstrap.servers": b.bootstrap, "sink.topic.template": "copy.{topic}", "epoch.max.ms": "1000",
            **extra}


def _errors(body: dict) -> dict[str, list[str]]:
    return {c["value"]["name"]: c["value"]["errors"] for c in body["configs"] if c["value"]["errors"]}


def test_plugin_aliases_work_in_every_plugin_path(worker_factory):
    _, c = worker_factory()
    pair = c.get("/connector-plugins/kafka/config")
    assert pair.status_code == 200, pair.text
    names = {d["name"] for d in pair.json()}
    assert {"source.bootstrap.servers", "source.topics", "sink.bootstrap.servers", "sink.topic.template"} <= names
    single = {d["name"] for d in c.get("/connector-plugins/kafka-source/config").json()}
    for alias in ("KafkaSource", "KafkaSourceConnector", "connectors.kafka.source.KafkaSourceConnector"):
        r = c.get(f"/connector-plugins/{alias}/config")
        assert r.status_code == 200 and {d["name"] for d in r.json()} == single, (alias, r.text)
    assert c.get("/connector-plugins/checkpoint/config").status_code == 200  # an alias of one plugin

    r = c.put("/connector-plugins/kafka/config/validate", json={
        "connector.class": "kafka", "source.bootstrap.servers": "127.0.0.1:1", "source.topics": "t",
        "source.start.position": "sideways", "sink.bootstrap.servers": "127.0.0.1:1", "sink.topcs": "x",
        "epoch.max.ms": "-5"})  # the pair is a pipeline: its framework keys are checked as at create
    assert r.status_code == 200, r.text
    body = r.json()
    errors = _errors(body)
    assert body["name"] == "kafka" and set(errors) == {"source.start.position", "sink.topcs", "epoch.max.ms"}, errors
    assert body["error_count"] == 3
    r = c.put("/connector-plugins/KafkaSource/config/validate", json={"bootstrap.servers": "x", "topics": "t"})
    assert r.status_code == 200 and r.json()["error_count"] == 0, r.text

    r = c.get("/connector-plugins/kafak/config")
    assert r.status_code == 404 and r.json()["error_code"] == 404
    assert "kafka" in r.json()["message"] and "pulsar" in r.json()["message"]


@pytest.mark.parametrize("reference, reason", [("${env:HOME}", "not allowed by allowlist.pattern"),
                                               ("${file:/etc/passwd:root}", "outside allowed.paths")],
                         ids=["env", "file"])
def test_validate_refuses_what_create_refuses(worker_factory, kafka_pair, unique, reference, reason):
    a, b = kafka_pair
    _, c = worker_factory()
    created = c.post("/connectors", json={"name": unique, "config": _pipeline(a, b, unique, **{
        "source.client.override.client.id": reference})})
    assert created.status_code == 400, created.text
    message = created.json()["message"]
    assert '$.config["source.client.override.client.id"]' in message and reason in message
    checked = c.put("/connector-plugins/kafka-source/config/validate", json={
        "bootstrap.servers": a.bootstrap, "topics": unique, "client.override.client.id": reference})
    assert checked.status_code == 200, checked.text
    body = checked.json()
    errors = _errors(body)
    assert body["error_count"] == 1 and list(errors) == ["client.override.client.id"], body
    (error,) = errors["client.override.client.id"]
    assert reason in error and error in message  # word for word what create says
    # through the pair alias, as the pipeline key
    pair = c.put("/connector-plugins/kafka/config/validate",
                 json={**_pipeline(a, b, unique), "source.client.override.client.id": reference})
    assert _errors(pair.json()) == {"source.client.override.client.id": [error]}, pair.text
    assert c.get("/connectors").json() == []


def test_relative_file_references_under_the_shipped_worker_config(spark, kafka_pair, unique, tmp_path):
    """conf/worker.json allows "secrets" for the file provider: ${file:secrets/x.properties:key}
    reads <data.dir>/secrets/x.properties, and a path outside says where it led and what is allowed."""
    from worker.service import Worker, load_worker_config

    a, b = kafka_pair
    data = tmp_path / "data"
    w = Worker(load_worker_config(WORKER_JSON, {"rest.port": 0, "data.dir": str(data)}), spark_app=spark)
    w.start()
    try:
        c = httpx.Client(base_url=f"http://127.0.0.1:{w.port}", timeout=60)
        (data / "secrets").mkdir(parents=True, exist_ok=True)
        (data / "secrets" / "db.properties").write_text("tasks=1\n")
        (data / "outside.properties").write_text("tasks=1\n")
        r = c.post("/connectors", json={"name": unique, "initial_state": "STOPPED", "config": _pipeline(
            a, b, unique, **{"tasks.max": "${file:secrets/db.properties:tasks}"})})
        assert r.status_code == 201, r.text
        r = c.post("/connectors", json={"name": f"{unique}-2", "config": _pipeline(
            a, b, unique, **{"tasks.max": "${file:secrets/../outside.properties:tasks}"})})
        assert r.status_code == 400, r.text
        message = r.json()["message"]
        allowed = str((data / "secrets").resolve())
        assert f"resolves to {(data / 'outside.properties').resolve()}" in message, message
        assert f"outside allowed.paths ({allowed})" in message, message
    finally:
        w.close()


def test_unparseable_parameters_answer_kafka_connects_error_body(worker_factory):
    _, c = worker_factory()
    for method, path in (("GET", "/connectors/nosuch/tasks/abc/status"), ("POST", "/connectors/x/tasks/1.5/restart")):
        r = c.request(method, path)
        assert r.status_code == 404, (path, r.text)
        body = r.json()
        assert set(body) == {"error_code", "message"} and body["error_code"] == 404, body
        assert body["message"].startswith("path parameter task: must be a valid integer"), body


def test_active_topics_kip_558(worker_factory, kafka_pair, unique):
    a, b = kafka_pair
    topic, idle = f"act-{unique}", f"idle-{unique}"
    create_topic(a.bootstrap, topic, 2)
    create_topic(a.bootstrap, idle, 1)
    produce(a.bootstrap, topic, 200, 2)
    _, c = worker_factory()
    assert c.get(f"/connectors/{unique}/topics").status_code == 404
    r = c.post("/connectors", json={"name": unique, "config": _pipeline(a, b, f"{topic},{idle}")})
    assert r.status_code == 201, r.text

    def topics():
        answer = c.get(f"/connectors/{unique}/topics")
        assert answer.status_code == 200, answer.text
        assert list(answer.json()) == [unique]
        return answer.json()[unique]["topics"]

    wait_for(lambda: topics() == [topic], 90, f"{topic} active")
    r = c.put(f"/connectors/{unique}/topics/reset")
    assert r.status_code == 202, r.text
    assert topics() == []
    produce(a.bootstrap, idle, 10, 1)
    wait_for(lambda: topics() == [idle], 90, f"{idle} active after the reset")
    assert c.put("/connectors/nosuch/topics/reset").status_code == 404
    assert c.delete(f"/connectors/{unique}").status_code == 204


def test_loggers_kip_495(worker_factory):
    name = "worker.herder"
    logger = logging.getLogger(name)
    saved = {k: v.level for k, v in logging.root.manager.loggerDict.items()
             if (k == "worker" or k.startswith("worker.")) and isinstance(v, logging.Logger)}
    _, c = worker_factory(**{"rest.auth.token": "tok-495"})
    try:
        listed = c.get("/admin/loggers").json()
        assert "root" in listed and set(listed["root"]) == {"level"}
        r = c.put(f"/admin/loggers/{name}", json={"level": "debug"})
        assert r.status_code == 200 and r.json() == [name], r.text
        assert logger.level == logging.DEBUG
        assert c.get(f"/admin/loggers/{name}").json() == {"level": "DEBUG"}
        assert c.get("/admin/loggers").json()[name] == {"level": "DEBUG"}
        r = c.put("/admin/loggers/worker", json={"level": "WARN"})  # an ancestor: every logger below it
        assert r.status_code == 200 and "worker" in r.json() and name in r.json(), r.text
        assert logger.level == logging.WARNING
        r = c.put(f"/admin/loggers/{name}", json={"level": "LOUD"})
        assert r.status_code == 400 and r.json()["error_code"] == 400 and "$.level" in r.json()["message"]
        r = c.put(f"/admin/loggers/{name}", json={})
        assert r.status_code == 400, r.text
        assert c.get("/admin/loggers/no.such.logger").status_code == 404
        assert c.put("/admin/loggers/no.such.logger", json={"level": "INFO"}).status_code == 404
        anonymous = httpx.Client(base_url=str(c.base_url), timeout=30)
        assert anonymous.put(f"/admin/loggers/{name}", json={"level": "INFO"}).status_code == 401
        assert anonymous.get("/admin/loggers").status_code == 401
        assert logger.level == logging.WARNING
    finally:
        for k, v in list(logging.root.manager.loggerDict.items()):
            if (k == "worker" or k.startswith("worker.")) and isinstance(v, logging.Logger):
                v.setLevel(saved.get(k, logging.NOTSET))
