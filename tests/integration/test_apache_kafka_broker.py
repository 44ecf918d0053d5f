"""Apache Kafka from Maven Central, as the tests and the demo run it: the pinned jars are fetched
once into the project's cache (then used offline, one fetch for concurrent callers, a failure naming
the artifact), and :class:`worker.embedded.ApacheKafka` is a KRaft node that answers, keeps its data
across a restart, and enforces ACLs."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import Producer
from kafka_util import consume_all, create_topic

from worker.brokers.maven import Bundle, FetchError, classpath
from worker.embedded import ApacheKafka

# small, and already in any local Maven repository that fetched Kafka: quick to fetch again
TINY = Bundle("tiny", ("org.slf4j:slf4j-api:1.7.36",))


def test_a_bundle_is_fetched_once_for_concurrent_callers_then_used_without_mvn(tmp_path, monkeypatch):
    monkeypatch.setenv("CONNECT_BROKERS_DIR", str(tmp_path))
    lines, results = [], []

    def fetch():
        results.append(classpath(TINY, progress=lines.append))

    threads = [threading.Thread(target=fetch) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert len(results) == 2 and results[0] == results[1]
    assert [p.name for p in results[0]] == ["slf4j-api-1.7.36.jar"]
    assert sum(line.startswith("fetching ") for line in lines) == 1, lines  # the second caller waited, then reused

    monkeypatch.setenv("PATH", "/nonexistent")  # no mvn: the cache alone must do
    assert classpath(TINY, progress=lines.append) == results[0]


def test_a_failed_fetch_names_the_artifact_and_shows_what_mvn_said(tmp_path, monkeypatch):
    monkeypatch.setenv("CONNECT_BROKERS_DIR", str(tmp_path))
    missing = Bundle("missing", ("org.apache.kafka:kafka_2.13:0.0.404",))
    with pytest.raises(FetchError) as failed:
        classpath(missing, progress=lambda line: None)
    text = str(failed.value)
    assert "org.apache.kafka:kafka_2.13:0.0.404" in text and "mvn exit" in text
    assert "kafka_2.13" in text.split("mvn said:", 1)[1]  # mvn's own words about the artifact
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(FetchError, match=r"org\.apache\.kafka:kafka_2\.13:0\.0\.404: Apache Maven \(mvn\) is not on PATH"):
        classpath(missing)


def test_apache_kafka_keeps_its_records_across_a_restart(tmp_path):
    broker = ApacheKafka(log_path=tmp_path / "kafka.log", data_dir=tmp_path / "data").start()
    try:
        create_topic(broker.bootstrap, "kept", 2)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(10):
            producer.produce("kept", key=f"k{i}".encode(), value=b"v", partition=i % 2)
        assert producer.flush(30) == 0
        assert 50 * 2**20 < broker.rss_bytes() < 1024 * 2**20
        broker.stop()
        broker.start()  # same ports, same storage: not formatted again
        got = consume_all(broker.bootstrap, "kept", [0, 1], 10)
        assert sorted(m.key() for m in got) == sorted(f"k{i}".encode() for i in range(10))
    finally:
        broker.stop()
