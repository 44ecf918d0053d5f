"""Issue 35 over the wire: no user regex can freeze the worker, and Kafka Connect's Java regexes
work as in Kafka (``connect.patterns``).

The worker runs as ``connect worker start`` in a process of its own: before the fix a catastrophic
match held the GIL for hours, and in this process it would have frozen the test itself. Each test
failed on a2dbae7: the POST timed out with /health silent, the 3,000-deep regex answered 500, the
950 KB one 201, and ``(?<name>...)`` / ``\\p{Alnum}`` were refused as invalid.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import orjson
import pytest
from confluent_kafka import KafkaException
from kafka_util import consume_all, create_topic, produce

pytestmark = pytest.mark.timeout(400)

CATASTROPHIC = "(a+)+b"
VICTIM = "a" * 40  # 2^40 steps for a backtracking engine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    """The URL of a ``connect worker start`` process, killed (its whole group) at the end."""
    tmp = tmp_path_factory.mktemp("regex-worker")
    port = _free_port()
    conf = tmp / "worker.json"
    conf.write_bytes(orjson.dumps({"rest.port": port, "data.dir": str(tmp / "data"), "worker.task.slots": 2,
                                   "spark.conf.spark.ui.enabled": "false"}))
    log = tmp / "worker.log"
    proc = subprocess.Popen([sys.executable, "-m", "worker.cli", "worker", "start", "--config", str(conf)],
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"worker exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"worker not healthy:\n{log.read_text()[-3000:]}"
            time.sleep(0.3)
        yield url
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)


class HealthWatch:
    """Asks /health every 100 ms from a thread; ``longest_gap`` is the longest time without an answer."""

    def __init__(self, url: str):
        self.url = url
        self.answers: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=10) as c:
            while not self._stop.is_set():
                try:
                    if c.get(f"{self.url}/health").status_code == 200:
                        self.answers.append(time.monotonic())
                except httpx.HTTPError:
                    pass
                self._stop.wait(0.1)

    def __enter__(self) -> HealthWatch:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.answers:  # measured from a first answer: a client's own start-up is not the worker's
            assert time.monotonic() < deadline, "/health never answered"
            time.sleep(0.01)
        self.started = self.answers[0]
        return self

    def __exit__(self, *_exc) -> None:
        self.ended = time.monotonic()
        self._stop.set()
        self._thread.join(15)

    def __repr__(self) -> str:
        times = [self.started, *self.answers, self.ended]
        shown = ", ".join(f"{t - self.started:+.2f}" for t in times[1:-1])
        return f"answered at {shown}; ended {self.ended - self.started:+.2f}"

    @property
    def longest_gap(self) -> float:
        times = [self.started, *self.answers, self.ended]
        return max(b - a for a, b in zip(times, times[1:], strict=False))


def _pipeline(a, b, **extra) -> dict[str, str]:
    return {"source.connector.class": "kafka", "source.bootstrap.servers": a.bootstrap,
            "source.start.position": "earliest", "sink.connector.class": "kafka", "sink.bootstrap.servers": b.bootstrap,
            "epoch.max.ms": "1000", **extra}


def _create_topic(bootstrap: str, topic: str) -> None:
    try:
        create_topic(bootstrap, topic, 1)
    except KafkaException as exc:  # made by an earlier run of the session
        if "already exists" not in str(exc).lower() and "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise


def test_a_catastrophic_exclude_answers_within_a_second_while_health_keeps_answering(worker, kafka_pair, unique):
    a, b = kafka_pair

    def create(name: str, exclude: str) -> tuple[httpx.Response, float]:
        config = _pipeline(a, b, **{"source.topics": VICTIM, "source.topics.exclude": exclude})
        started = time.monotonic()
        try:
            r = httpx.post(f"{worker}/connectors", json={"name": name, "config": config, "initial_state": "STOPPED"},
                           timeout=10)
        except httpx.TimeoutException:
            pytest.fail("POST /connectors did not answer within 10 s")
        assert r.status_code == 201, r.text
        return r, time.monotonic() - started

    # what the same create costs with a harmless regex on this (shared, loaded) machine
    _, baseline = create(f"{unique}-plain", "b")
    with HealthWatch(worker) as health:
        _, took = create(unique, CATASTROPHIC)
        time.sleep(0.5)
    assert took < baseline + 1.0, f"answered after {took:.2f} s ({baseline:.2f} s with a harmless regex)"
    assert len(health.answers) >= 5 and health.longest_gap < 1.0, f"/health silent for {health.longest_gap:.2f} s: {health}"


def test_broker_supplied_topic_names_meet_the_catastrophic_exclude_in_linear_time(worker, kafka_pair, unique):
    """Anyone who can create a topic names it: the source lists the broker's topics and matches
    each against the operator's regexes in the driver, which must keep serving."""
    a, b = kafka_pair
    _create_topic(a.bootstrap, VICTIM)
    topic = f"x-{unique}"
    create_topic(a.bootstrap, topic, 1)
    produce(a.bootstrap, topic, 20, 1)
    config = _pipeline(a, b, **{"source.topics.regex": f"x-{unique}", "source.topics.exclude": CATASTROPHIC,
                                "source.refresh.topics.interval.ms": "500"})
    with HealthWatch(worker) as health:
        r = httpx.post(f"{worker}/connectors", json={"name": unique, "config": config}, timeout=30)
        assert r.status_code == 201, r.text
        got = consume_all(b.bootstrap, topic, [0], 20, timeout=120)
        time.sleep(1.5)  # a few more refreshes of the topic list
    assert len(got) == 20
    assert health.longest_gap < 1.0, f"/health silent for {health.longest_gap:.2f} s: {health}"
    httpx.delete(f"{worker}/connectors/{unique}", timeout=30)


def test_a_3000_deep_or_950_kb_regex_is_a_400_naming_the_key(worker, kafka_pair, unique):
    a, b = kafka_pair
    deep = "(" * 3000 + ")" * 3000
    r = httpx.post(f"{worker}/connectors", json={"name": unique, "config": _pipeline(a, b, **{
        "source.topics.regex": deep})}, timeout=30)
    assert r.status_code == 400, r.text
    assert "source.topics.regex" in r.text and "nests groups deeper than 100" in r.text
    with HealthWatch(worker) as health:
        r = httpx.post(f"{worker}/connectors", json={"name": unique, "config": _pipeline(a, b, **{
            "source.topics.regex": "a" * 950_000})}, timeout=30)
        v = httpx.put(f"{worker}/connector-plugins/kafka-source/config/validate",
                      json={"bootstrap.servers": a.bootstrap, "topics.regex": "a" * 950_000}, timeout=30)
    assert r.status_code == 400 and "source.topics.regex" in r.text and "at most 32,768" in r.text, r.text[:300]
    assert v.status_code == 200, v.text[:300]
    errors = {c["value"]["name"]: c["value"]["errors"] for c in v.json()["configs"]}
    assert any("at most 32,768" in e for e in errors["topics.regex"]), errors["topics.regex"]
    assert health.longest_gap < 1.0, f"/health silent for {health.longest_gap:.2f} s: {health}"
    r = httpx.put(f"{worker}/connector-plugins/kafka-source/config/validate",
                  json={"bootstrap.servers": a.bootstrap, "topics.regex": deep}, timeout=30)
    assert r.status_code == 200
    errors = {c["value"]["name"]: c["value"]["errors"] for c in r.json()["configs"]}
    assert any("nests groups deeper" in e for e in errors["topics.regex"])


def test_kafka_connect_java_regexes_validate_and_route_as_in_kafka(worker, kafka_pair, unique):
    a, b = kafka_pair
    prod, test = f"prod.{unique}", f"test.{unique}"
    for topic in (prod, test):
        create_topic(a.bootstrap, topic, 1)
        produce(a.bootstrap, topic, 30, 1)
    config = _pipeline(a, b, **{
        # MM2 / Kafka Connect spellings: \p{Alnum} (POSIX class), \Q..\E, (?<name>...), ${name} and $1
        "source.topics.regex": rf"\p{{Alnum}}+\.\Q{unique}\E",
        "transforms": "route", "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": r"(?<env>\p{Lower}+)\.(?<rest>.*)",
        "transforms.route.replacement": "${rest}_from_$1",
        "transforms.route.predicate": "isProd",
        "predicates": "isProd", "predicates.isProd.type": "TopicNameMatches",
        "predicates.isProd.pattern": r"prod\.\p{Graph}+"})
    r = httpx.post(f"{worker}/connectors", json={"name": unique, "config": config}, timeout=30)
    assert r.status_code == 201, r.text
    routed = consume_all(b.bootstrap, f"{unique}_from_prod", [0], 30, timeout=120)
    kept = consume_all(b.bootstrap, test, [0], 30, timeout=120)  # the predicate is false for test.*
    assert len(routed) == 30 and len(kept) == 30
    httpx.delete(f"{worker}/connectors/{unique}", timeout=30)

    # what RE2 cannot run, or a group the regex lacks: a 400 naming the key and the construct
    for key, value, says in (("transforms.route.regex", r"(\p{Alnum}+)\.\1", "a backreference (\\1)"),
                             ("transforms.route.regex", r"(?<!x)y.*", "a negative lookbehind"),
                             ("source.topics.regex", r"\p{Alnum}++", "a possessive quantifier (++)"),
                             ("transforms.route.replacement", "${nope}", "group {nope}, which the regex does not have")):
        r = httpx.post(f"{worker}/connectors", json={"name": f"{unique}-bad", "config": {**config, key: value}},
                       timeout=30)
        assert r.status_code == 400, (key, r.text)
        assert key in r.text and says in r.json()["message"], (key, r.text)
