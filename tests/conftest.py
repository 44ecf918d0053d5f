"""Session-scoped fixtures: real tansu brokers on free loopback ports and one Spark application."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from connect.plugins import register_plugin  # noqa: E402
from worker.embedded import EmbeddedKafka, EmbeddedPulsar, EmbeddedRocketMQ  # noqa: E402

# The in-memory test connectors are not production plugins (no entry point); tests use aliases.
register_plugin("memory-source", "connect.testing:MemorySourceConnector")
register_plugin("memory-sink", "connect.testing:MemorySinkConnector")


@pytest.fixture(scope="session")
def kafka_pair(tmp_path_factory):
    """Two independent Kafka-compatible clusters: (source, target)."""
    logs = tmp_path_factory.mktemp("tansu")
    a = EmbeddedKafka(log_path=logs / "a.log").start()
    b = EmbeddedKafka(log_path=logs / "b.log").start()
    yield a, b
    from connectors.kafka.clients import POOL
    from connectors.kafka.producers import PRODUCERS

    POOL.close_all()  # clients pooled in this process (driver-side admins...) go before their brokers
    PRODUCERS.close_all()
    a.stop()
    b.stop()


@pytest.fixture(scope="session")
def third_kafka(tmp_path_factory):
    """A third Kafka-compatible cluster, for meshes and rings with ``kafka_pair`` (one per session:
    the mesh tests and the console's browser test share it)."""
    broker = EmbeddedKafka(log_path=tmp_path_factory.mktemp("kafka3") / "c.log").start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def pulsar_pair(tmp_path_factory):
    """Two independent pulsar-lite clusters: (source, target). Topics are not partitioned unless
    made so with ``create_partitioned_topics`` (see worker.embedded.EmbeddedPulsar)."""
    root = tmp_path_factory.mktemp("pulsar")
    a = EmbeddedPulsar(root / "a", log_path=root / "a.log").start()
    b = EmbeddedPulsar(root / "b", log_path=root / "b.log").start()
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture(scope="session")
def rocketmq_pair(tmp_path_factory):
    """Two independent embedded RocketMQ name server + broker processes: (source, target)."""
    root = tmp_path_factory.mktemp("rocketmq")
    a = EmbeddedRocketMQ(root / "a", log_path=root / "a.log").start()
    b = EmbeddedRocketMQ(root / "b", log_path=root / "b.log").start()
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture(scope="session")
def spark():
    from worker.runtime.spark import build_spark

    session = build_spark("local[4]", {"spark.ui.enabled": "false", "spark.driver.memory": "1g"}, app_name="tests")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def proxied_target(tmp_path_factory):
    """A tansu broker behind a TcpProxy that tests can blackhole (``tests/netproxy.py``): (broker, proxy).
    It advertises the proxy's port, so every connection a client opens goes through the proxy."""
    from netproxy import TcpProxy

    from worker.embedded import EmbeddedKafka, free_port

    port = free_port()
    proxy = TcpProxy(port)
    broker = EmbeddedKafka(port=port, advertised_port=proxy.port,
                           log_path=tmp_path_factory.mktemp("proxied") / "tansu.log").start()
    yield broker, proxy
    proxy.close()
    broker.stop()


@pytest.fixture
def unique(request):
    """A topic/connector name unique to the test."""
    name = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")
    return f"{name}-{os.getpid()}"


@pytest.fixture
def worker_factory(spark, tmp_path):
    """Start in-process workers (``start(**settings) -> (worker, httpx client)``); all closed at the end."""
    from service_util import worker_factory_for

    start, started = worker_factory_for(spark, tmp_path)
    yield start
    for w in started:
        w.close()
