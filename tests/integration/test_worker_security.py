"""Issue 20 over the wire: a REST caller can read no secret, file or environment variable of the
worker, load no code into it, and a browser page cannot drive it.

Each test reproduces one finding against a running worker (real uvicorn, the session's Spark):
every one of them failed on the main branch before the fix (values echoed in 400s, a 500 for a
number, a 201 for ``plugin.library.paths``, ``text/plain`` and foreign ``Host`` accepted...)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
from service_util import worker_factory_for

pytestmark = pytest.mark.timeout(300)

CANARY = "canary-Zq81-secret-value"
SHORT = "q7z"


def _source(a, topic: str, **extra) -> dict[str, str]:
    return {"source.connector.class": "kafka", "source.bootstrap.servers": a.bootstrap, "source.topics": topic,
            "sink.connector.class": "kafka", "sink.bootstrap.servers": a.bootstrap, "sink.topic.template": "copy-{topic}",
            **extra}


def _answers_everything(c: httpx.Client, name: str) -> str:
    paths = [f"/connectors/{name}", f"/connectors/{name}/config", f"/connectors/{name}/tasks",
             f"/connectors/{name}/status", "/connectors?expand=info&expand=status", "/metrics"]
    return " ".join(c.get(p).text for p in paths)


@pytest.fixture
def secrets_env(monkeypatch):
    monkeypatch.setenv("SOURCE_TEST_CANARY", CANARY)
    monkeypatch.setenv("SOURCE_TEST_SHORT", SHORT)
    monkeypatch.setenv("CONNECT_TOKEN", CANARY)


def test_provider_values_never_echoed_in_validation_errors(worker_factory, kafka_pair, unique, tmp_path, secrets_env,
                                                           caplog):
    a, _ = kafka_pair
    w, c = worker_factory()
    secrets_dir = Path(w.config.get("data.dir")).resolve() / "secrets"
    secrets_dir.mkdir(exist_ok=True)
    (secrets_dir / "s.properties").write_text(f"pw={CANARY}\nshort={SHORT}\n")
    cases = {
        "env": "x${env:SOURCE_TEST_CANARY}",
        "file": f"x${{file:{secrets_dir}/s.properties:pw}}",
        "short env": "${env:SOURCE_TEST_SHORT}",
        "short file": f"${{file:{secrets_dir}/s.properties:short}}",
        "default": "x${env:SOURCE_TEST_UNSET:-" + CANARY + "}",
    }
    for what, value in cases.items():
        r = c.post("/connectors", json={"name": f"{unique}-n", "config": _source(a, unique, **{"tasks.max": value})})
        assert r.status_code == 400, (what, r.text)
        message = r.json()["message"]
        assert '"tasks.max"' in message or "tasks.max" in message, (what, message)  # names the key...
        assert "must be an integer" in message, (what, message)  # ...and the rule
        assert CANARY not in r.text and f"'{SHORT}" not in r.text and f"x{SHORT}" not in r.text, (what, message)
    # fences: a file outside allowed.paths, a variable outside the allow-list: 400 naming the key
    r = c.post("/connectors", json={"name": f"{unique}-n", "config": _source(a, unique, **{
        "tasks.max": "x${file:/etc/passwd:root}"})})
    assert r.status_code == 400 and "outside allowed.paths" in r.text and "tasks.max" in r.text and ":0:0:" not in r.text
    r = c.post("/connectors", json={"name": f"{unique}-n", "config": _source(a, unique, **{
        "source.client.id": "${env:CONNECT_TOKEN}"})})
    assert r.status_code == 400 and "not allowed by allowlist.pattern" in r.text and "source.client.id" in r.text
    assert CANARY not in r.text
    r = c.post("/connectors", json={"name": f"{unique}-n", "config": _source(a, unique, **{  # no default papers over it
        "source.client.id": "${env:CONNECT_TOKEN:-fallback}"})})
    assert r.status_code == 400 and "not allowed by allowlist.pattern" in r.text, r.text
    # the plugin validate endpoint echoes no secret either
    r = c.put("/connector-plugins/kafka-source/config/validate", json={
        "bootstrap.servers": "x", "topics": "t", "client.override.sasl.password": CANARY})
    assert r.status_code == 200 and CANARY not in r.text
    assert CANARY not in caplog.text


def test_keystore_values_never_echoed_after_a_restart(spark, kafka_pair, unique, tmp_path):
    """The worker knows its provider values from what it resolves, not from what this process added:
    a restarted worker still never shows a keystore password."""
    a, b = kafka_pair
    start, started = worker_factory_for(spark, tmp_path)
    settings = {"config.providers": "env,file,directory"}
    try:
        w, c = start(**settings)
        body = {"namespace": "tenant/ns", "type": "kafka", "region": "east",
                "source": {"type": "kafka", "bootstrap.servers": a.bootstrap},
                "topicMapping": {unique: f"{unique}-copy"}, "replicationProperties": {"bootstrap.servers": b.bootstrap},
                "authPlugin": "directory", "authParam": {"client.override.sasl.password": CANARY}}
        r = c.post("/replicators", json=body)
        assert r.status_code == 201, r.text
        rid = r.json()["id"]
        for name in r.json()["connectors"]:
            c.put(f"/connectors/{name}/stop")
        w.close()
        w2, c2 = start(**settings)
        keystore = w2.keystore_root
        r = c2.post("/connectors", json={"name": f"{unique}-x", "config": _source(a, unique, **{
            "tasks.max": f"x${{directory:{keystore}/{rid}:client.override.sasl.password}}"})})
        assert r.status_code == 400 and "tasks.max" in r.text and CANARY not in r.text, r.text
        listed = c2.get("/replicators")
        assert listed.status_code == 200 and CANARY not in listed.text
    finally:
        for w in started:
            w.close()


def test_configs_are_stored_as_strings_and_secret_literals_stay_masked(worker_factory, kafka_pair, unique):
    a, _ = kafka_pair
    _, c = worker_factory()
    name = f"{unique}-num"
    config = {**_source(a, unique), "tasks.max": 2, "errors.log.enable": True,
              "sink.producer.override.sasl.password": "lit3ral-" + CANARY + "-${env:SOURCE_TEST_UNSET:-}",
              "source.client.override.sasl.password": "plain-" + CANARY + "-${notareference"}
    r = c.post("/connectors", json={"name": name, "config": config, "initial_state": "STOPPED"})
    assert r.status_code == 201, r.text
    shown = c.get(f"/connectors/{name}/config").json()
    assert shown["tasks.max"] == "2" and shown["errors.log.enable"] == "true"
    assert shown["sink.producer.override.sasl.password"] == "********${env:SOURCE_TEST_UNSET:-}"
    assert shown["source.client.override.sasl.password"] == "********"
    for path in (f"/connectors/{name}", "/connectors?expand=info", "/replicators", f"/connectors/{name}/status"):
        r = c.get(path)
        assert r.status_code == 200, (path, r.text)
        assert CANARY not in r.text
    r = c.patch(f"/connectors/{name}/config", json={"tasks.max": 3})
    assert r.status_code == 200 and c.get(f"/connectors/{name}/config").json()["tasks.max"] == "3"
    for bad in ({"tasks.max": [1]}, {"tasks.max": {"a": 1}}):
        r = c.patch(f"/connectors/{name}/config", json=bad)
        assert r.status_code == 400 and '$["tasks.max"]' in r.json()["message"], r.text
    r = c.post("/connectors", json={"name": f"{unique}-nested", "config": {**_source(a, unique), "tasks.max": None}})
    assert r.status_code == 400 and "tasks.max" in r.text


@pytest.fixture(scope="module")
def plugin_library(tmp_path_factory):
    """A shared library whose constructor writes a marker file: proof that something loaded it."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the trial library")
    work = tmp_path_factory.mktemp("plugin")
    marker = work / "loaded.marker"
    source = work / "evil.c"
    source.write_text(textwrap.dedent(f"""
        #include <stdio.h>
        __attribute__((constructor)) static void loaded(void) {{
            FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("loaded", f); fclose(f); }}
        }}
        int conf_init(void *conf, void **plug_opaquep, char *errstr, size_t errstr_size) {{ return 0; }}
    """))
    library = work / "libevil.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library, marker


def test_the_override_policy_refuses_a_library_and_it_is_never_loaded(worker_factory, kafka_pair, unique, tmp_path,
                                                                      plugin_library):
    library, marker = plugin_library
    # control: the library really is loadable by librdkafka (so its marker's absence below means something)
    probe = subprocess.run([sys.executable, "-c", "import sys, confluent_kafka; "
                            "confluent_kafka.Producer({'plugin.library.paths': sys.argv[1]})", str(library)],
                           capture_output=True, text=True, timeout=60)
    assert marker.exists(), probe.stderr
    marker.unlink()
    a, _ = kafka_pair
    _, c = worker_factory()
    evil = {"source.client.override.plugin.library.paths": str(library)}
    r = c.post("/connectors", json={"name": f"{unique}-evil", "config": _source(a, unique, **evil)})
    assert r.status_code == 400, r.text
    assert "source.client.override.plugin.library.paths" in r.text and "override policy" in r.text
    r = c.put("/connector-plugins/kafka-source/config/validate", json={
        "bootstrap.servers": a.bootstrap, "topics": unique, "client.override.plugin.library.paths": str(library)})
    assert r.json()["error_count"] >= 1 and "override policy" in r.text
    for key, value in {"sink.producer.override.ssl.ca.location": "/etc/passwd",
                       "source.consumer.override.sasl.kerberos.kinit.cmd": "touch /tmp/x",
                       "source.client.override.debug": "all",
                       "sink.admin.override.sasl.oauthbearer.token.endpoint.url": "file:///etc/passwd"}.items():
        r = c.post("/connectors", json={"name": f"{unique}-evil", "config": _source(a, unique, **{key: value})})
        assert r.status_code == 400 and key in r.text, (key, r.text)
    # connect validate and connect run refuse it too (before anything starts)
    config = tmp_path / "evil.json"
    config.write_text(httpx.Request("POST", "http://x", json={"name": "evil", "config": _source(a, unique, **evil)}).content
                      .decode())
    for command in (["validate", str(config)], ["run", str(config), "--data-dir", str(tmp_path / "data"),
                                                "--max-epochs", "1"]):
        done = subprocess.run([sys.executable, "-m", "worker.cli", *command], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        assert done.returncode != 0 and "plugin.library.paths" in done.stderr, (command, done.stdout, done.stderr)
    assert not marker.exists(), "the worker loaded the library"


def test_rest_refuses_browsers_floods_and_odd_bodies(worker_factory, kafka_pair, unique):
    a, _ = kafka_pair
    w, c = worker_factory(**{"rest.max.body.bytes": 4096})
    body = {"name": f"{unique}-b", "config": _source(a, unique), "initial_state": "STOPPED"}
    import orjson

    raw = orjson.dumps(body)
    r = c.post("/connectors", content=raw, headers={"Content-Type": "text/plain"})
    assert r.status_code == 415 and r.json()["error_code"] == 415
    r = c.post("/connectors", content=raw, headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415
    r = c.post("/connectors", json=body, headers={"Host": "evil.example:8083"})
    assert r.status_code == 421 and r.json()["error_code"] == 421
    r = c.post("/connectors", json=body, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403
    r = c.delete(f"/connectors/{unique}-b", headers={"Origin": "null"})
    assert r.status_code == 403
    r = c.post("/connectors", content=b'{"name": "' + b"x" * 5000 + b'"}', headers={"Content-Type": "application/json"})
    assert r.status_code == 413

    def chunks():
        for _ in range(10):
            yield b" " * 1000

    r = c.post("/connectors", content=chunks(), headers={"Content-Type": "application/json"})  # no Content-Length
    assert r.status_code == 413
    deep = {"partition": {}, "offset": {"o": 1}}
    inner = deep["partition"]
    for _ in range(300):
        inner["p"] = {}
        inner = inner["p"]
    assert c.post("/connectors", json=body).status_code == 201
    assert c.put(f"/connectors/{unique}-b/stop").status_code == 204
    r = c.patch(f"/connectors/{unique}-b/offsets", json={"offsets": [deep]})  # was a 500 (orjson's recursion limit)
    assert r.status_code == 400 and "nested deeper" in r.json()["message"], r.text
    # same-origin (a page the worker itself serves) and IP-literal hosts are answered
    own = f"http://127.0.0.1:{w.port}"
    assert c.get("/connectors", headers={"Origin": own}).status_code == 200
    assert c.get("/connectors", headers={"Host": "localhost"}).status_code == 200


def test_files_at_rest_are_owner_only_and_the_lock_follows_no_symlink(tmp_path):
    from worker.stores.store import SqliteStores

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    data = tmp_path / "a" / "b" / "data"
    data.mkdir(parents=True)
    os.chmod(data, 0o755)
    (data / "worker.lock").symlink_to(victim)
    with pytest.raises(OSError, match="symlink"):
        SqliteStores(data)
    assert victim.read_text() == "keep me"
    (data / "worker.lock").unlink()
    fresh = tmp_path / "x" / "y" / "data"
    stores = SqliteStores(fresh)
    try:
        stores.configs.put("c", {"k": "v"})
        for path in (fresh, fresh.parent, fresh.parent.parent):
            assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
        for name in ("offsets.sqlite", "worker.lock"):
            assert stat.S_IMODE((fresh / name).stat().st_mode) == 0o600, name
        for side in fresh.glob("offsets.sqlite-*"):
            assert stat.S_IMODE(side.stat().st_mode) == 0o600, side
    finally:
        stores.close()
    stores = SqliteStores(data)
    try:
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
    finally:
        stores.close()


def _fuzz_value(rng, secrets_dir: Path, keystore: str):
    return rng.choice([
        "x${env:SOURCE_TEST_CANARY}", "${env:SOURCE_TEST_CANARY}", f"${{file:{secrets_dir}/s.properties:pw}}",
        f"a${{file:{secrets_dir}/s.properties:pw}}b", f"${{directory:{secrets_dir}:pw}}", f"${{directory:{keystore}:pw}}",
        "${env:HOME}", "${file:/etc/passwd:root}", "${nope:x:y}", "${env:}", "$${env:SOURCE_TEST_CANARY}",
        "${env:SOURCE_TEST_UNSET:-" + CANARY + "}", 7, -1, 2 ** 70, 1.5, True, None, [], {}, {"a": CANARY}, "",
        "\u0000\ud7ff\n", "x" * 300, "kafka", "none", "all", "earliest", "1",
    ])


def _fuzz_config(rng, a, secrets_dir: Path, keystore: str) -> dict:
    config = _source(a, "fuzz-none") if rng.random() < 0.5 else {}
    keys = ["tasks.max", "epoch.max.ms", "errors.tolerance", "source.topics", "source.client.id", "sink.topic.template",
            "source.connector.class", "sink.connector.class", "source.start.position", "replication.policy",
            "source.cluster.alias", "sink.cluster.alias", "errors.deadletterqueue.topic.name", "source.topcs", "",
            "sink.producer.override.sasl.password", "source.client.override.sasl.jaas.config", "dlq.secret.key",
            "source.client.override.plugin.library.paths", "sink.producer.override.ssl.key.location", "name",
            "source.auth.token", "sink.access.key", "db.password", "api_key", "${env:SOURCE_TEST_CANARY}"]
    for _ in range(rng.randint(0, 6)):
        key = rng.choice(keys)
        if "passw" in key or "secret" in key or "jaas" in key or "token" in key or "api_key" in key:
            config[key] = rng.choice([CANARY, f"pre-{CANARY}", f"{CANARY}-${{env:SOURCE_TEST_UNSET:-}}",
                                      _fuzz_value(rng, secrets_dir, keystore)])
        else:
            config[key] = _fuzz_value(rng, secrets_dir, keystore)
    return config


def test_rest_fuzz_no_5xx_and_the_canary_never_appears(worker_factory, kafka_pair, unique, secrets_env, caplog):
    """At least 300 generated bodies across every operation, with provider references and
    secret-named keys holding a known canary: no answer is a 5xx, each error is Kafka Connect's
    body, and the canary is in no answer, no metric and no log line."""
    import json
    import random

    a, b = kafka_pair
    w, c = worker_factory(**{"config.providers": "env,file,directory"})
    secrets_dir = Path(w.config.get("data.dir")).resolve() / "secrets"
    secrets_dir.mkdir(exist_ok=True)
    (secrets_dir / "s.properties").write_text(f"pw={CANARY}\n")
    (secrets_dir / "pw").write_text(CANARY)
    keystore = w.keystore_root
    rng = random.Random(20)
    names = [f"{unique}-{i}" for i in range(4)] + ["", "..", "a/b", "x" * 200, "%2e%2e"]
    calls: list[tuple[str, str, int]] = []

    def check(method: str, path: str, response: httpx.Response) -> None:
        calls.append((method, path, response.status_code))
        assert response.status_code < 500, (method, path, response.status_code, response.text[:300])
        assert CANARY not in response.text, (method, path, response.text[:500])
        if response.status_code >= 400 and response.status_code != 405:
            body = response.json()
            assert set(body) == {"error_code", "message"} and body["error_code"] == response.status_code, body

    def send(method: str, path: str, body=None, *, raw: bytes | None = None, content_type="application/json"):
        content = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        headers = {"Content-Type": content_type} if content is not None else {}
        check(method, path, c.request(method, path, content=content, headers=headers))

    for _ in range(330):
        name = rng.choice(names)
        kind = rng.randrange(10)
        config = _fuzz_config(rng, a, secrets_dir, keystore)
        if kind == 0:
            state = rng.choice(["STOPPED", "STOPPED", "PAUSED", "stopped", "bogus", 3])
            send("POST", "/connectors", rng.choice([{"name": name, "config": config, "initial_state": state},
                                                    {"config": {**config, "name": name}, "initial_state": "STOPPED"},
                                                    {"name": name}, [config], config, "x", None, {"name": 5, "config": 1}]))
        elif kind == 1:
            send("PUT", f"/connectors/{name}/config", rng.choice([config, [], "s", {"name": "other"}]))
        elif kind == 2:
            send("PATCH", f"/connectors/{name}/config", rng.choice([config, {k: None for k in config}, [1], 3]))
        elif kind == 3:
            offsets = rng.choice([{"offsets": [{"partition": config, "offset": {"o": 1}}]},
                                  {"offsets": [{"partition": {"p": CANARY}, "offset": None}]}, {"offsets": []},
                                  {"offsets": "x"}, {"offsets": [{"partition": {"a": [[[[[{"b": 1}]]]]]}, "offset": {}}]}])
            send("PATCH", f"/connectors/{name}/offsets", offsets)
        elif kind == 4:
            plugin = rng.choice(["kafka-source", "kafka-sink", "pulsar-source", "rocketmq-sink", "nope"])
            send("PUT", f"/connector-plugins/{plugin}/config/validate",
                 {k.removeprefix("source.").removeprefix("sink."): v for k, v in config.items()})
        elif kind == 5:
            body = {"namespace": rng.choice(["t/ns", "", CANARY[:3], 5]), "type": rng.choice(["kafka", "pulsar", "x"]),
                    "region": "r", "source": rng.choice([{"type": "kafka", "bootstrap.servers": a.bootstrap}, {}, "x"]),
                    "topicMapping": rng.choice([{"fuzz-none": "fuzz-copy"}, {}, {"a": 1}]),
                    "replicationProperties": rng.choice([{"bootstrap.servers": b.bootstrap}, {}, config]),
                    "authPlugin": rng.choice(["directory", "env", "", "vault", 1]),
                    "authParam": rng.choice([{"client.override.sasl.password": CANARY}, {"../x": CANARY}, {}, [CANARY]]),
                    "config": rng.choice([{}, {"tasks.max": "x${env:SOURCE_TEST_CANARY}"}, config])}
            send("POST", "/replicators", body)
            for rid in [r["id"] for r in c.get("/replicators").json()]:
                check("DELETE", "/replicators", c.delete(f"/replicators/{rid}"))
        elif kind == 6:
            method, path = rng.choice([("PUT", f"/connectors/{name}/pause"), ("PUT", f"/connectors/{name}/stop"),
                                       ("POST", f"/connectors/{name}/restart?includeTasks=true&onlyFailed=x"),
                                       ("POST", f"/connectors/{name}/tasks/0/restart"), ("DELETE", f"/connectors/{name}"),
                                       ("DELETE", f"/connectors/{name}/offsets"), ("GET", f"/connectors/{name}/tasks/-1/status")])
            check(method, path, c.request(method, path))
        elif kind == 7:
            send("POST", "/connectors", raw=rng.choice([b"{", b"\xff\xfe", b"[]" * 1000, b'{"name": 1e999}', b"null",
                                                        json.dumps({"name": name, "config": config}).encode()]),
                 content_type=rng.choice(["application/json", "text/plain", "application/json; charset=latin-1"]))
        else:
            for path in (f"/connectors/{name}", f"/connectors/{name}/config", f"/connectors/{name}/status",
                         f"/connectors/{name}/tasks", f"/connectors/{name}/offsets", "/connectors?expand=info&expand=status"):
                check("GET", path, c.get(path))
    assert len(calls) >= 300, len(calls)
    assert {m for m, _, _ in calls} >= {"GET", "POST", "PUT", "PATCH", "DELETE"}
    metrics = c.get("/metrics")
    assert metrics.status_code == 200 and CANARY not in metrics.text
    assert CANARY not in caplog.text
    for name in c.get("/connectors").json():
        c.delete(f"/connectors/{name}")


def test_the_shipped_worker_config_fences_follow_its_data_dir(spark, kafka_pair, unique, tmp_path):
    """conf/worker.json's relative fences are taken from data.dir, so --data-dir moves them too."""
    from worker.service import Worker, load_worker_config

    a, _ = kafka_pair
    conf = Path(__file__).resolve().parents[2] / "conf" / "worker.json"
    data = tmp_path / "elsewhere"
    w = Worker(load_worker_config(conf, {"rest.port": 0, "data.dir": str(data)}), spark_app=spark)
    w.start()
    try:
        c = httpx.Client(base_url=f"http://127.0.0.1:{w.port}", timeout=60)
        (data / "secrets").mkdir(parents=True, exist_ok=True)
        (data / "secrets" / "s.properties").write_text(f"pw={CANARY}\n")
        r = c.post("/connectors", json={"name": f"{unique}-f", "config": _source(a, unique, **{
            "tasks.max": f"${{file:{data}/secrets/s.properties:pw}}"})})
        assert r.status_code == 400 and "must be an integer" in r.text and CANARY not in r.text, r.text
        r = c.post("/connectors", json={"name": f"{unique}-f", "config": _source(a, unique, **{
            "tasks.max": "${file:" + str(Path.cwd() / "data" / "worker" / "secrets" / "s.properties") + ":pw}"})})
        assert r.status_code == 400 and "outside allowed.paths" in r.text, r.text
        assert w.keystore_root == str(data.resolve() / "keystore") or w.keystore_root == str(data / "keystore")
    finally:
        w.close()
