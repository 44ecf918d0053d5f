"""Pulsar brokers: pulsar-lite (:class:`EmbeddedPulsar`) and Apache Pulsar 4.0 standalone (:class:`ApachePulsar`)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from worker.embedded.process import (
    _Broker,
    _data_dir,
    _launch,
    _packaged_binary,
    free_port,
)

__all__ = ["EmbeddedPulsar", "ApachePulsar", "pulsar_lite_binary", "PULSAR_LITE_TOML"]


# pulsar-lite's configuration: ``default_partitions`` is the partition count of topics it creates
# on first use (0: not partitioned); its metrics endpoint is not needed.
PULSAR_LITE_TOML = """default_partitions = {partitions}
[metrics]
enabled = false
"""


def pulsar_lite_binary() -> str:
    return _packaged_binary("pulsar_lite", "pulsar-lite", "pulsar-lite")


class EmbeddedPulsar(_Broker):
    """A pulsar-lite broker on a free loopback port, storing under ``data_dir``; ``service_url``
    is its ``pulsar://`` address. ``stop`` then ``start`` again keeps the port and the data (a
    broker outage, as the tests need). ``partitions`` is the partition count pulsar-lite gives
    topics it auto-creates as partitioned (its ``default_partitions``; 0: not partitioned)."""

    def __init__(self, data_dir: str | Path, port: int | None = None, log_path: str | Path | None = None,
                 partitions: int = 0):
        self.port = port or free_port()
        self.service_url = f"pulsar://127.0.0.1:{self.port}"
        self.data_dir = Path(data_dir)
        self.log_path = log_path
        self.partitions = partitions
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 20.0) -> EmbeddedPulsar:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "pulsar-lite.toml"
        config.write_text(PULSAR_LITE_TOML.format(partitions=self.partitions))
        self.proc = _launch([pulsar_lite_binary(), "--addr", f"127.0.0.1:{self.port}", "--db-path",
                             str(self.data_dir / "db"), "--config", str(config), "--log-level", "warn"],
                            self.port, "pulsar-lite", timeout, self.log_path)
        return self

    def create_partitioned_topics(self, topics: dict[str, int]) -> None:
        """Make each topic partitioned with its count. pulsar-lite has no admin API: a topic becomes
        partitioned when first looked up while ``default_partitions`` is set, and keeps it. So the
        broker is restarted with that setting for each count, the topics are looked up, and it
        comes back with ``partitions``. Only with ``partitions=0`` can a single partition
        (``topic-partition-N``) be read or written by name on pulsar-lite: otherwise that name is
        itself made a partitioned topic."""
        import pulsar

        saved = self.partitions
        try:
            for count in sorted(set(topics.values())):
                self.stop()
                self.partitions = count
                self.start()
                client = pulsar.Client(self.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
                try:
                    for topic, n in topics.items():
                        if n == count:  # a producer makes pulsar-lite persist the partitioned metadata
                            client.create_producer(topic).close()
                finally:
                    client.close()
        finally:
            self.stop()
            self.partitions = saved
            self.start()
        client = pulsar.Client(self.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        try:
            for topic, n in topics.items():
                if len(client.get_topic_partitions(topic)) != n:
                    raise RuntimeError(f"pulsar-lite did not keep {topic} as a topic of {n} partitions")
        finally:
            client.close()


class ApachePulsar(_Broker):
    """Apache Pulsar 4.0 standalone (broker + bookie, metadata in RocksDB, no functions worker) on
    free loopback ports, from the pinned Maven Central jars (:mod:`worker.brokers.pulsar`). Same
    interface as :class:`EmbeddedPulsar` (``service_url``, ``partitions``, start/stop/freeze/thaw,
    ``create_partitioned_topics``), plus ``admin_url``: the real admin REST API (and schema registry).

    ``cluster`` is its cluster name. ``stop`` then ``start`` again keeps the ports and the data
    (under ``data_dir``; default: a temporary folder removed with this object). ``extra``: more
    standalone.conf settings."""

    stop_timeout = 30.0  # the broker, then the bookie

    JVM_FLAGS = ("-Xms64m", "-XX:+UseSerialGC", "-XX:ActiveProcessorCount=2", "-XX:TieredStopAtLevel=1",
                 "-XX:MaxMetaspaceSize=256m", "-XX:ReservedCodeCacheSize=96m", "-Djava.awt.headless=true")

    def __init__(self, data_dir: str | Path | None = None, port: int | None = None, log_path: str | Path | None = None,
                 partitions: int = 0, cluster: str = "standalone", heap: str = "512m", direct: str = "256m",
                 extra: dict[str, str] | None = None):
        self.port, self.web_port, self.bookie_port = port or free_port(), free_port(), free_port()
        self.service_url = f"pulsar://127.0.0.1:{self.port}"
        self.admin_url = f"http://127.0.0.1:{self.web_port}"
        self.cluster, self.partitions, self.log_path = cluster, partitions, log_path
        self.heap, self.direct, self.extra = heap, direct, dict(extra or {})
        self._temp, self.data_dir = _data_dir(data_dir, "apache-pulsar-")
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 240.0) -> ApachePulsar:
        """Start and wait until the admin API lists ``public/default`` (the standalone made it) and a
        message written there is stored."""
        from worker.brokers import pulsar as bundle

        started = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log_file = Path(self.log_path) if self.log_path else self.data_dir / "pulsar.log"
        (self.data_dir / "log4j2.xml").write_text(bundle.log4j2_xml(log_file))
        config = self.data_dir / "standalone.conf"
        config.write_text(bundle.standalone_conf(cluster=self.cluster, broker_port=self.port, web_port=self.web_port,
                                                 partitions=self.partitions, extra=self.extra))
        argv = bundle.java_argv(bundle.standalone_args(config, self.data_dir, self.bookie_port), heap=self.heap,
                                direct=self.direct, flags=self.JVM_FLAGS, log4j2_config=self.data_dir / "log4j2.xml")
        self.proc = _launch(argv, self.port, "Apache Pulsar", timeout, self.log_path, cwd=self.data_dir)
        try:
            bundle.wait_ready(self.admin_url, self.service_url, lambda: self.proc.poll() is None,
                              max(1.0, timeout - (time.monotonic() - started)), f"Apache Pulsar (log: {log_file})")
        except RuntimeError:
            self.kill()
            raise
        self.started_in = time.monotonic() - started
        return self

    def create_partitioned_topics(self, topics: dict[str, int]) -> None:
        """Each topic created partitioned with its count, through the admin API."""
        from worker.brokers.pulsar import create_partitioned_topics

        create_partitioned_topics(self.admin_url, topics)
