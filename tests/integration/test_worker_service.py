"""The worker service over its real REST API (uvicorn on a loopback port), with the session's Spark
application and real Apache Kafka brokers: the Kafka Connect contract (paths, status codes, JSON shapes,
400/404/409), the connector lifecycle (create, pause, resume, stop, offsets, update, restart,
delete), isolation of a failing connector, secrets masking and authentication."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from kafka_util import create_topic, produce
from service_util import Arrivals, state_of, wait_for

pytestmark = pytest.mark.timeout(300)


def kafka_config(a, b, topic: str, **extra) -> dict[str, str]:
    return {"source.connector.class": "kafka", "source.bootstrap.servers": a.bootstrap, "source.topics": topic,
            "source.start.position": "earliest", "sink.connector.class": "kafka", "sink.bootstrap.servers": b.bootstrap,
            "sink.topic.template": "copy.{topic}", "epoch.max.ms": "1000", **extra}


def test_worker_root_health_openapi_and_plugins(worker_factory):
    _, c = worker_factory()
    root = c.get("/").json()
    assert root["version"] and "worker_id" in root
    assert c.get("/health").json()["status"] == "healthy"
    paths = c.get("/openapi.json").json()["paths"]
    for path in ("/connectors", "/connectors/{name}/offsets", "/connector-plugins/{plugin}/config/validate"):
        assert path in paths
    plugins = c.get("/connector-plugins").json()
    kinds = {p["alias"]: p["type"] for p in plugins}
    assert kinds["kafka-source"] == "source" and kinds["pulsar-sink"] == "sink" and kinds["rocketmq-source"] == "source"
    config = c.get("/connector-plugins/kafka-source/config").json()
    names = {d["name"] for d in config}
    assert {"bootstrap.servers", "topics"} <= names
    r = c.put("/connector-plugins/kafka-source/config/validate",
              json={"bootstrap.servers": "127.0.0.1:1", "start.position": "sideways", "topcs": "x"})
    assert r.status_code == 200
    body = r.json()
    assert body["error_count"] >= 2
    errors = {v["value"]["name"]: v["value"]["errors"] for v in body["configs"] if v["value"]["errors"]}
    assert "start.position" in errors and "topcs" in errors
    assert c.get("/connector-plugins/no-such-plugin/config").status_code == 404


def test_malformed_requests_answer_400_naming_the_json_path_and_404_409(worker_factory, kafka_pair, unique):
    a, b = kafka_pair
    _, c = worker_factory()
    r = c.post("/connectors", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error_code"] == 400 and r.json()["message"].startswith("$: not valid JSON")
    r = c.post("/connectors", json={"name": "x"})
    assert r.status_code == 400 and "$.config" in r.json()["message"]
    r = c.post("/connectors", json={"name": "x", "config": ["a"]})
    assert r.status_code == 400 and "$.config" in r.json()["message"]
    r = c.post("/connectors", json={"name": "bad name/..", "config": {}})
    assert r.status_code == 400 and "$.name" in r.json()["message"]
    r = c.post("/connectors", json={"name": "x", "config": kafka_config(a, b, "t"), "initial_state": "ASLEEP"})
    assert r.status_code == 400 and "$.initial_state" in r.json()["message"]
    bad = {**kafka_config(a, b, "t"), "source.topcs": "t", "epoch.max.ms": "-5"}
    r = c.post("/connectors", json={"name": "x", "config": bad})
    assert r.status_code == 400
    message = r.json()["message"]
    assert '$.config["source.topcs"]' in message and '$.config["epoch.max.ms"]' in message
    assert c.get("/connectors").json() == []
    for method, path in (("GET", "/connectors/nope"), ("GET", "/connectors/nope/status"),
                         ("PUT", "/connectors/nope/pause"), ("DELETE", "/connectors/nope"),
                         ("GET", "/connectors/nope/offsets"), ("POST", "/connectors/nope/restart")):
        r = c.request(method, path)
        assert r.status_code == 404, (method, path)
        assert r.json() == {"error_code": 404, "message": "Connector nope not found"}
    name = f"dup-{unique}"
    assert c.post("/connectors", json={"name": name, "config": kafka_config(a, b, unique),
                                       "initial_state": "STOPPED"}).status_code == 201
    r = c.post("/connectors", json={"name": name, "config": kafka_config(a, b, unique)})
    assert r.status_code == 409 and r.json()["error_code"] == 409
    r = c.put(f"/connectors/{name}/resume")
    assert r.status_code == 202
    wait_for(lambda: state_of(c, name) == "RUNNING", what="RUNNING")
    r = c.patch(f"/connectors/{name}/offsets", json={"offsets": []})
    assert r.status_code == 409 and "STOPPED" in r.json()["message"]
    assert c.delete(f"/connectors/{name}/offsets").status_code == 409
    r = c.post(f"/connectors/{name}/restart?includeTasks=maybe")
    assert r.status_code == 400 and "includeTasks" in r.json()["message"]
    assert c.get(f"/connectors/{name}/tasks/7/status").status_code == 404
    assert c.delete(f"/connectors/{name}").status_code == 204


def test_lifecycle_pause_resume_stop_offsets_update_delete(worker_factory, kafka_pair, unique):
    a, b = kafka_pair
    topic = f"svc-{unique}"
    create_topic(a.bootstrap, topic, 2)
    produce(a.bootstrap, topic, 2000, 2)
    copy, copy2 = Arrivals(b.bootstrap, f"copy.{topic}"), Arrivals(b.bootstrap, f"copy2.{topic}")
    w, c = worker_factory()
    name = f"life-{unique}"
    r = c.post("/connectors", json={"name": name, "config": {**kafka_config(a, b, topic), "tasks.max": "2"}})
    assert r.status_code == 201, r.text
    info = r.json()
    assert info["name"] == name and info["type"] == "source" and info["config"]["source.topics"] == topic
    assert r.headers["location"] == f"/connectors/{name}"
    wait_for(lambda: copy.count() >= 2000, 90, "the first 2000 records")
    status = c.get(f"/connectors/{name}/status").json()
    assert status["connector"]["state"] == "RUNNING" and status["type"] == "source"
    assert [t["state"] for t in status["tasks"]] == ["RUNNING", "RUNNING"]
    assert c.get(f"/connectors/{name}/tasks/1/status").json()["id"] == 1
    tasks = c.get(f"/connectors/{name}/tasks").json()
    assert [t["id"] for t in tasks] == [{"connector": name, "task": 0}, {"connector": name, "task": 1}]
    assert tasks[0]["config"]["source.bootstrap.servers"] == a.bootstrap
    expanded = c.get("/connectors", params=[("expand", "status"), ("expand", "info")]).json()
    assert expanded[name]["status"]["connector"]["state"] == "RUNNING" and expanded[name]["info"]["name"] == name

    def acked():  # per pair; the figures follow epoch results, which may come after the records arrive
        return [float(line.rsplit(" ", 1)[1]) for line in c.get("/metrics").text.splitlines()
                if line.startswith(f'connect_records_acknowledged_total{{connector="{name}"')]

    wait_for(lambda: len(acked()) == 2 and sum(acked()) >= 2000, 30, "both pairs reporting acknowledgements")
    metrics = c.get("/metrics").text
    assert f'connect_records_polled_total{{connector="{name}"' in metrics
    assert f'connect_task_state{{connector="{name}",state="RUNNING",task="0"}} 1.0' in metrics
    hosts = [line for line in metrics.splitlines() if line.startswith("connect_pair_hosts ")]
    assert hosts and float(hosts[0].split()[1]) >= 1  # shared hosting (the default): its hosts are reported
    assert "connect_pair_host_load_cores{host=" in metrics
    lagging = {line.split("partition=")[1].split(",")[0] for line in metrics.splitlines()
               if line.startswith(f'connect_partition_lag_records{{connector="{name}"')}
    assert lagging == {f'"{topic}/0"', f'"{topic}/1"'}  # one series per source partition

    # pause: nothing moves; resume: everything produced meanwhile arrives
    assert c.put(f"/connectors/{name}/pause").status_code == 202
    wait_for(lambda: c.get(f"/connectors/{name}/status").json()["tasks"][0]["state"] == "PAUSED", what="PAUSED")
    assert state_of(c, name) == "PAUSED"
    time.sleep(1.5)  # an epoch that was ending has committed
    produce(a.bootstrap, topic, 1000, 2, start=2000)
    assert copy.count(4) == 2000
    assert c.put(f"/connectors/{name}/resume").status_code == 202
    wait_for(lambda: copy.count() >= 3000, 90, "3000 records after resume")

    # stop: tasks shut down; offsets readable, alterable and resettable
    assert c.put(f"/connectors/{name}/stop").status_code == 204
    wait_for(lambda: state_of(c, name) == "STOPPED", what="STOPPED")
    assert c.get(f"/connectors/{name}/status").json()["tasks"] == []
    offsets = c.get(f"/connectors/{name}/offsets").json()["offsets"]
    assert sorted(o["partition"]["partition"] for o in offsets) == [0, 1]
    assert sum(o["offset"]["offset"] + 1 for o in offsets) == 3000
    p0 = next(o["partition"] for o in offsets if o["partition"]["partition"] == 0)
    r = c.patch(f"/connectors/{name}/offsets", json={"offsets": [{"partition": p0, "offset": {"offset": 99}}]})
    assert r.status_code == 200 and "altered" in r.json()["message"]
    r = c.patch(f"/connectors/{name}/offsets", json={"offsets": [{"partition": p0, "offset": 7}]})
    assert r.status_code == 400 and "$.offsets[0].offset" in r.json()["message"]
    r = c.patch(f"/connectors/{name}/offsets", json={"offsets": [{"offset": {"offset": 1}}]})
    assert r.status_code == 400 and "$.offsets[0].partition" in r.json()["message"]
    r = c.patch(f"/connectors/{name}/offsets", json={"offsets": []})
    assert r.status_code == 400 and "$.offsets" in r.json()["message"]
    moved = {o["partition"]["partition"]: o["offset"]["offset"] for o in c.get(f"/connectors/{name}/offsets").json()["offsets"]}
    assert moved[0] == 99
    before = copy.count(1)
    assert before == 3000
    replay = next(o["offset"]["offset"] for o in offsets if o["partition"]["partition"] == 0) - 99

    # resume from STOPPED: partition 0 replays from offset 100 (fresh task pairs, altered offsets)
    assert c.put(f"/connectors/{name}/resume").status_code == 202
    wait_for(lambda: copy.count() >= before + replay, 90, "the replay")
    assert copy.count(2) == before + replay

    # update: PUT config routes to a new target topic; 200 (updated), tasks rebuilt
    new_config = {**kafka_config(a, b, topic), "tasks.max": "2", "sink.topic.template": "copy2.{topic}"}
    r = c.put(f"/connectors/{name}/config", json=new_config)
    assert r.status_code == 200 and r.json()["config"]["sink.topic.template"] == "copy2.{topic}"
    produce(a.bootstrap, topic, 500, 2, start=3000)
    wait_for(lambda: copy2.count() >= 500, 90, "records under the new config")
    assert c.get(f"/connectors/{name}/config").json()["sink.topic.template"] == "copy2.{topic}"
    r = c.patch(f"/connectors/{name}/config", json={"errors.log.enable": "true", "epoch.max.ms": None})
    assert r.status_code == 200 and "epoch.max.ms" not in r.json()["config"]

    # stop, reset offsets, delete: offsets survive a delete only until reset
    assert c.put(f"/connectors/{name}/stop").status_code == 204
    wait_for(lambda: state_of(c, name) == "STOPPED", what="STOPPED again")
    r = c.delete(f"/connectors/{name}/offsets")
    assert r.status_code == 200 and "reset" in r.json()["message"]
    assert c.get(f"/connectors/{name}/offsets").json() == {"offsets": []}
    assert c.delete(f"/connectors/{name}").status_code == 204
    assert c.get(f"/connectors/{name}").status_code == 404
    assert name not in c.get("/connectors").json()
    assert f'connector="{name}"' not in c.get("/metrics").text
    assert w.stores.configs.connectors() == {}
    copy.close()
    copy2.close()


def test_a_failing_task_is_failed_with_its_trace_others_run_and_restart_revives_it(worker_factory, unique):
    _, c = worker_factory()
    bad, good = f"bad-{unique}", f"good-{unique}"
    failing = {"source.connector.class": "memory-source", "source.partitions": "2", "source.records": "50",
               "sink.connector.class": "memory-sink", "sink.name": bad, "sink.reject.values": "^memory-1-5$",
               "tasks.max": "2", "epoch.max.ms": "500"}
    healthy = {**failing, "sink.name": good, "sink.reject.values": ""}
    assert c.post("/connectors", json={"name": bad, "config": failing}).status_code == 201
    assert c.post("/connectors", json={"name": good, "config": healthy}).status_code == 201

    def task_states():
        return [t["state"] for t in c.get(f"/connectors/{bad}/status").json()["tasks"]]

    wait_for(lambda: task_states() == ["RUNNING", "FAILED"], 60, "task 1 FAILED, task 0 RUNNING")
    failed = c.get(f"/connectors/{bad}/tasks/1/status").json()
    assert failed["state"] == "FAILED" and "memory sink rejected" in failed["trace"]
    assert state_of(c, bad) == "RUNNING" and state_of(c, good) == "RUNNING"
    assert [t["state"] for t in c.get(f"/connectors/{good}/status").json()["tasks"]] == ["RUNNING", "RUNNING"]
    r = c.post(f"/connectors/{bad}/restart", params={"includeTasks": "true", "onlyFailed": "true"})
    assert r.status_code == 202
    body = r.json()
    assert [t["state"] for t in body["tasks"]] == ["RUNNING", "RESTARTING"] and body["connector"]["state"] == "RUNNING"
    # it fails again on the same record (permanent), which shows it really ran again
    wait_for(lambda: c.get(f"/connectors/{bad}/tasks/1/status").json().get("trace") is not None
             and task_states() == ["RUNNING", "FAILED"], 60, "the restarted task to fail again")
    assert c.post(f"/connectors/{bad}/tasks/1/restart").status_code == 204
    assert c.post(f"/connectors/{bad}/restart").status_code == 204
    assert state_of(c, good) == "RUNNING"


def test_secrets_are_masked_and_provider_references_resolved_only_at_start(worker_factory, kafka_pair, unique, tmp_path,
                                                                          caplog):
    a, b = kafka_pair
    secrets_file = Path(tmp_path) / "worker" / "secrets" / "secrets.properties"  # the worker's default fence
    secrets_file.parent.mkdir(parents=True)
    secrets_file.write_text(f"bootstrap={a.bootstrap}\nsasl.password=hunter2-very-secret\n")
    _, c = worker_factory()
    name = f"sec-{unique}"
    config = {**kafka_config(a, b, unique), "source.bootstrap.servers": f"${{file:{secrets_file}:bootstrap}}",
              "sink.producer.override.sasl.password": f"${{file:{secrets_file}:sasl.password}}"}
    r = c.post("/connectors", json={"name": name, "config": config, "initial_state": "PAUSED"})
    if r.status_code == 400 and "producer.override" in r.text:
        config.pop("sink.producer.override.sasl.password")
        r = c.post("/connectors", json={"name": name, "config": config, "initial_state": "PAUSED"})
    assert r.status_code == 201, r.text
    shown = c.get(f"/connectors/{name}/config").json()
    assert shown["source.bootstrap.servers"] == f"${{file:{secrets_file}:bootstrap}}"
    wait_for(lambda: state_of(c, name) == "PAUSED", what="PAUSED")
    everything = " ".join(c.get(p).text for p in (f"/connectors/{name}/config", f"/connectors/{name}/tasks",
                                                  f"/connectors/{name}/status", "/connectors?expand=info"))
    assert "hunter2-very-secret" not in everything
    r = c.post("/connectors", json={"name": f"{name}-2", "config": {
        **kafka_config(a, b, unique), "source.bootstrap.servers": f"${{file:{secrets_file}:nope}}"}})
    assert r.status_code == 400 and 'source.bootstrap.servers' in r.json()["message"]
    # a connector that fails with the secret in its error: trace and logs masked
    leaky = {**kafka_config(a, b, unique), "source.start.position": "timestamp",
             "source.start.timestamp.ms": f"${{file:{secrets_file}:sasl.password}}"}
    r = c.post("/connectors", json={"name": f"{name}-3", "config": leaky})
    assert r.status_code == 400 and "hunter2-very-secret" not in r.text
    assert c.delete(f"/connectors/{name}").status_code == 204
    assert "hunter2-very-secret" not in caplog.text


def test_rest_authentication(worker_factory):
    w, c = worker_factory(**{"rest.auth.token": "s3cret-token-xyz"})
    assert c.get("/connectors").status_code == 200
    anonymous = httpx.get(f"http://127.0.0.1:{w.port}/connectors")
    assert anonymous.status_code == 401 and anonymous.json()["error_code"] == 401
    wrong = httpx.get(f"http://127.0.0.1:{w.port}/connectors", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert httpx.get(f"http://127.0.0.1:{w.port}/health").status_code == 200


def test_load_50_connectors_created_listed_deleted_while_2_mirrors_run(worker_factory, kafka_pair, unique):
    """No 5xx, p99 of every REST answer within 1 s, and the two running mirrors lose nothing."""
    a, b = kafka_pair
    _, c = worker_factory()
    n = 20_000
    mirrors = [f"m{i}-{unique}" for i in range(2)]
    arrivals = []
    for topic in mirrors:
        create_topic(a.bootstrap, topic, 2)
        arrivals.append(Arrivals(b.bootstrap, f"copy.{topic}"))
        assert c.post("/connectors", json={"name": topic, "config": kafka_config(a, b, topic)}).status_code == 201
    times: list[float] = []
    statuses: list[int] = []

    def timed(method: str, path: str, **kw) -> httpx.Response:
        started = time.perf_counter()
        r = c.request(method, path, **kw)
        times.append(time.perf_counter() - started)
        statuses.append(r.status_code)
        return r

    memory = {"source.connector.class": "memory-source", "source.records": "10", "sink.connector.class": "memory-sink",
              "epoch.max.ms": "500"}
    names = [f"load{i}-{unique}" for i in range(50)]
    for i, name in enumerate(names):
        if i == 10:
            for topic in mirrors:  # records flow while the load goes on
                produce(a.bootstrap, topic, n, 2)
        state = ("PAUSED", "STOPPED", "RUNNING")[i % 3] if i % 5 else "RUNNING"
        r = timed("POST", "/connectors", json={"name": name, "config": {**memory, "sink.name": name},
                                               "initial_state": state})
        assert r.status_code == 201, r.text
        timed("GET", "/connectors")
    listed = timed("GET", "/connectors", params=[("expand", "status"), ("expand", "info")]).json()
    assert set(names) <= set(listed)
    for name in names:
        timed("GET", f"/connectors/{name}/status")
    for name in names:
        assert timed("DELETE", f"/connectors/{name}").status_code == 204
    assert sorted(timed("GET", "/connectors").json()) == sorted(mirrors)
    assert not [s for s in statuses if s >= 500]
    times.sort()
    p99 = times[int(len(times) * 0.99) - 1]
    print(f"load: {len(times)} requests, p50 {times[len(times) // 2] * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
          f"max {times[-1] * 1000:.0f} ms")
    assert p99 < 1.0, f"p99 {p99:.3f} s over {len(times)} requests (max {times[-1]:.3f} s)"
    for topic, arrived in zip(mirrors, arrivals, strict=True):
        wait_for(lambda arrived=arrived: arrived.count() >= n, 120, f"{topic}: all {n} records")
        arrived.close()


def test_kafka_backed_stores_carry_connectors_states_and_offsets_across_a_worker_restart(worker_factory, kafka_pair,
                                                                                       unique):
    a, b = kafka_pair
    store = {"store": "kafka", "store.kafka.bootstrap.servers": b.bootstrap,
             "store.kafka.config.topic": f"cfg-{unique}", "store.kafka.offset.topic": f"off-{unique}",
             "store.kafka.status.topic": f"st-{unique}"}
    topic = f"ks-{unique}"
    create_topic(a.bootstrap, topic, 2)
    produce(a.bootstrap, topic, 3000, 2)
    arrived = Arrivals(b.bootstrap, f"copy.{topic}")
    w, c = worker_factory(**store)
    assert c.post("/connectors", json={"name": topic, "config": kafka_config(a, b, topic)}).status_code == 201
    assert c.post("/connectors", json={"name": f"{topic}-p", "config": kafka_config(a, b, topic),
                                       "initial_state": "PAUSED"}).status_code == 201
    wait_for(lambda: arrived.count() >= 3000, 90, "3000 records")
    wait_for(lambda: sum(o["offset"]["offset"] + 1 for o in c.get(f"/connectors/{topic}/offsets").json()["offsets"])
             == 3000, 60, "offsets of all 3000 committed")
    w.close()
    w2, c2 = worker_factory(**store)
    assert sorted(c2.get("/connectors").json()) == sorted([topic, f"{topic}-p"])
    wait_for(lambda: state_of(c2, f"{topic}-p") == "PAUSED", what="PAUSED kept")
    wait_for(lambda: state_of(c2, topic) == "RUNNING", what="RUNNING kept")
    assert sum(o["offset"]["offset"] + 1 for o in c2.get(f"/connectors/{topic}/offsets").json()["offsets"]) == 3000
    produce(a.bootstrap, topic, 1000, 2, start=3000)
    wait_for(lambda: arrived.count() >= 4000, 90, "the next 1000 records")
    assert arrived.count(2) == 4000  # resumed from the stored offsets: nothing again
    arrived.close()


def test_rest_over_tls(worker_factory, tmp_path):
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    w, _ = worker_factory(**{"rest.tls.certfile": str(cert), "rest.tls.keyfile": str(key)})
    assert httpx.get(f"https://127.0.0.1:{w.port}/connectors", verify=str(cert)).json() == []
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{w.port}/connectors", timeout=5)
