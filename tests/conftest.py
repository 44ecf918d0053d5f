"""Session-scoped fixtures: real brokers on free loopback ports and one Spark application.

``kafka_pair``, ``third_kafka`` and ``proxied_target`` run Apache Kafka, or tansu with
``CONNECT_TEST_KAFKA=tansu`` (``kafka_brokers.kafka_broker``); ``apache_kafka_pair`` is always
Apache Kafka (by default it is ``kafka_pair`` itself: one pair of JVMs per pytest-xdist worker).
``rocketmq_pair`` runs Apache RocketMQ (name server and broker in one JVM per cluster), or the
embedded broker with ``CONNECT_TEST_ROCKETMQ=embedded`` (``rocketmq_brokers.rocketmq_broker``);
``apache_rocketmq_pair`` is always Apache RocketMQ (likewise shared with ``rocketmq_pair``).
Likewise ``pulsar_pair`` runs pulsar-lite, or Apache Pulsar standalone with ``CONNECT_TEST_PULSAR=apache``
(``pulsar_brokers``); ``apache_pulsar_pair`` is always Apache Pulsar. Session fixtures start on
first use, so a worker whose files need no RocketMQ or Apache Pulsar starts none."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from kafka_brokers import kafka_broker, start_all, use_apache_kafka  # noqa: E402
from pulsar_brokers import use_apache_pulsar  # noqa: E402
from rocketmq_brokers import stop_all, use_apache_rocketmq  # noqa: E402

from connect.plugins import register_plugin  # noqa: E402
from worker.embedded import (  # noqa: E402
    ApacheKafka,
    ApachePulsar,
    ApacheRocketMQ,
    EmbeddedPulsar,
    EmbeddedRocketMQ,
)

# The in-memory test connectors are not production plugins (no entry point); tests use aliases.
register_plugin("memory-source", "connect.testing:MemorySourceConnector")
register_plugin("memory-sink", "connect.testing:MemorySinkConnector")


def _close_pooled_clients() -> None:
    from connectors.kafka.clients import POOL
    from connectors.kafka.producers import PRODUCERS

    POOL.close_all()  # clients pooled in this process (driver-side admins...) go before their brokers
    PRODUCERS.close_all()


@pytest.fixture(scope="session")
def apache_kafka_pair(tmp_path_factory):
    """Two independent Apache Kafka 4.x clusters (one KRaft node each, ACLs enforced): (source, target)."""
    logs = tmp_path_factory.mktemp("apache-kafka")
    a, b = start_all([ApacheKafka(log_path=logs / "a.log"), ApacheKafka(log_path=logs / "b.log")])
    yield a, b
    _close_pooled_clients()
    a.stop()
    b.stop()


@pytest.fixture(scope="session")
def kafka_pair(request, tmp_path_factory):
    """Two independent Kafka-compatible clusters: (source, target)."""
    if use_apache_kafka():
        yield request.getfixturevalue("apache_kafka_pair")
        return
    logs = tmp_path_factory.mktemp("tansu")
    a, b = start_all([kafka_broker(log_path=logs / "a.log"), kafka_broker(log_path=logs / "b.log")])
    yield a, b
    _close_pooled_clients()
    a.stop()
    b.stop()


@pytest.fixture(scope="session")
def third_kafka(tmp_path_factory):
    """A third Kafka-compatible cluster, for meshes and rings with ``kafka_pair`` (one per session:
    the mesh tests and the console's browser test share it)."""
    broker = kafka_broker(log_path=tmp_path_factory.mktemp("kafka3") / "c.log").start()
    yield broker
    broker.stop()


# Tests over real brokers, Spark and processes (integration/, e2e/) that fail are run once more
# (pytest-rerunfailures), as Apache Kafka's own build retries its integration tests: on the 2 cores
# CI has, a JVM's GC pause or Spark's scheduling now and then outlasts a timing bound. A retried
# test is listed in the summary (`-r R` in the Makefile) so a flake stays visible; unit tests are
# never retried. CONNECT_TEST_RERUNS=0 turns retries off (how to hunt one).
_RETRIED = re.compile(r"[/\\]tests[/\\](integration|e2e)[/\\]")


def pytest_collection_modifyitems(config, items):
    """Retries (above). A test that sets up Apache Pulsar standalones as session fixtures has its timeout count the
    test function only (pytest-timeout's ``func_only``, same limit): the first test of an xdist
    worker to need the pair pays its start (15-36 s, more under load), which a 120-300 s limit
    meant for the test's own work must not absorb. The start is bounded by itself:
    ``ApachePulsar.start`` gives up after 240 s naming its log."""
    apache_pulsar = use_apache_pulsar()
    reruns = int(os.environ.get("CONNECT_TEST_RERUNS", "1"))
    for item in items:
        if reruns and _RETRIED.search(str(item.path)) and not item.get_closest_marker("flaky"):
            item.add_marker(pytest.mark.flaky(reruns=reruns))
        names = getattr(item, "fixturenames", ())
        if "apache_pulsar_pair" not in names and not (apache_pulsar and "pulsar_pair" in names):
            continue
        marker = item.get_closest_marker("timeout")
        limit = (marker.args[0] if marker and marker.args else (marker.kwargs.get("timeout") if marker else None))
        item.add_marker(pytest.mark.timeout(limit or config.getini("timeout") or 600, func_only=True), append=False)


@pytest.fixture(scope="session")
def apache_pulsar_pair(tmp_path_factory):
    """Two independent Apache Pulsar standalone clusters, named ``a`` and ``b``: (source, target).
    Each knows only itself: tests that replicate register the other (``clusters``)."""
    root = tmp_path_factory.mktemp("apache-pulsar")
    a, b = start_all([ApachePulsar(root / "a", log_path=root / "a.log", cluster="a"),
                      ApachePulsar(root / "b", log_path=root / "b.log", cluster="b")])
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture(scope="session")
def pulsar_pair(request, tmp_path_factory):
    """Two independent Pulsar clusters: (source, target). Topics are not partitioned unless made so
    with ``create_partitioned_topics`` (see worker.embedded.EmbeddedPulsar)."""
    if use_apache_pulsar():
        yield request.getfixturevalue("apache_pulsar_pair")
        return
    root = tmp_path_factory.mktemp("pulsar")
    a = EmbeddedPulsar(root / "a", log_path=root / "a.log").start()
    b = EmbeddedPulsar(root / "b", log_path=root / "b.log").start()
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture(scope="session")
def apache_rocketmq_pair(tmp_path_factory):
    """Two independent Apache RocketMQ 5.x clusters (a name server and a broker each): (source, target)."""
    root = tmp_path_factory.mktemp("apache-rocketmq")
    a, b = start_all([ApacheRocketMQ(root / "a", log_path=root / "a.log"),
                      ApacheRocketMQ(root / "b", log_path=root / "b.log")])
    yield a, b
    stop_all([a, b])  # a broker's clean shutdown takes ~14 s


@pytest.fixture(scope="session")
def rocketmq_pair(request, tmp_path_factory):
    """Two independent RocketMQ clusters (name server + broker): (source, target)."""
    if use_apache_rocketmq():
        yield request.getfixturevalue("apache_rocketmq_pair")
        return
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
    """A Kafka broker behind a TcpProxy that tests can blackhole (``tests/netproxy.py``): (broker, proxy).
    It advertises the proxy's port, so every connection a client opens goes through the proxy."""
    from netproxy import TcpProxy

    from worker.embedded import free_port

    port = free_port()
    proxy = TcpProxy(port)
    broker = kafka_broker(port=port, advertised_port=proxy.port,
                          log_path=tmp_path_factory.mktemp("proxied") / "kafka.log").start()
    yield broker, proxy
    proxy.close()
    broker.stop()


@pytest.fixture
def unique(request):
    """A topic/connector name unique to the test, of the characters Kafka allows in topic names
    (a parametrized test's id may hold others: Apache Kafka refuses them, tansu did not), without
    ``-partition-`` (Apache Pulsar refuses it in a partitioned topic's name, pulsar-lite did not)."""
    name = re.sub(r"[^A-Za-z0-9.-]", "-", request.node.name.replace("[", "-").replace("]", ""))
    # Apache Pulsar refuses a partitioned topic whose name holds "-partition-" (a partition's suffix)
    return f"{name.replace('-partition-', '-part-')}-{os.getpid()}"


@pytest.fixture
def worker_factory(spark, tmp_path):
    """Start in-process workers (``start(**settings) -> (worker, httpx client)``); all closed at the end."""
    from service_util import worker_factory_for

    start, started = worker_factory_for(spark, tmp_path)
    yield start
    for w in started:
        w.close()
