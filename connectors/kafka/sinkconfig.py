"""What the Kafka sink and its side writers (:mod:`connectors.kafka.side`) share: the sink's
declared config, the producer defaults, the delivery timeout the sink enforces and which errors
are permanent. It sits below both: the sink, its connector and the side writers import it, it
imports neither."""

from __future__ import annotations

import re
from typing import Any, Mapping

from confluent_kafka import KafkaError

from connect.config import ConfigDef, Importance, Type, non_empty
from connect.errors import ConfigError, ConfigIssue
from connect.sink.routing import ROUTING_CONFIG

__all__ = ["CONFIG", "PRODUCER_DEFAULTS", "OWN_PRODUCER_RATE", "BROKEN_PRODUCER", "timeout_issues",
           "delivery_timeout", "is_permanent"]

# A task putting more than this many records/s through a shared producer (over a quarter of a
# second) gets a producer of its own: the shared one's report hand-over costs it per record.
OWN_PRODUCER_RATE = 2000

CONFIG = ROUTING_CONFIG.merge(
    ConfigDef()
    .define("bootstrap.servers", Type.STRING, doc="Target cluster bootstrap servers, host:port[,host:port].",
            importance=Importance.HIGH, validator=non_empty)
    .define("partition.preserve", Type.BOOLEAN, True,
            "Write each record to its source partition number when the target topic has it.")
    .define("topic.creation.enable", Type.BOOLEAN, True, "Create missing target topics.")
    .define("topic.creation.partitions", Type.INT, -1,
            "Partitions of created topics; -1: highest source partition seen + 1.")
    .define("topic.creation.replication.factor", Type.INT, -1, "Replication factor of created topics; -1: broker default.")
    .define("producer.shared", Type.BOOLEAN, True,
            "Write through one producer per worker process and producer settings, shared by the sink tasks "
            "the process hosts: one produce request per broker and linger for all of them instead of one per "
            "task (see connectors.kafka.producers). A task with a delivery timeout, or putting more than "
            f"{OWN_PRODUCER_RATE} records/s, keeps one of its own. false: a producer of the task's own, as "
            "Kafka Connect does.")
    .define("exactly.once.offsets.topic", Type.STRING, "",
            "exactly.once.support: the compacted topic of the target cluster holding the pairs' source offsets, "
            "written in each epoch's transaction; empty: connect-offsets.<connector>.")
    .define_prefix("client.override.", "librdkafka settings for every client of the connector (e.g. security).")
    .define_prefix("producer.override.", "librdkafka settings for the producers only.")
    .define_prefix("admin.override.", "librdkafka settings for the admin client only.")
)

PRODUCER_DEFAULTS = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "partitioner": "murmur2_random",
    # Success reports too: they count checkpoints down (measured: about 0.2 us per record).
    "delivery.report.only.error": False,
    "queue.buffering.max.messages": 200_000,
    # No delivery timeout: an outage delays records, it never fails them (Kafka Connect sets
    # delivery.timeout.ms=MAX for the same reason). Epochs stay bounded by the runner, not by this.
    # Always 0 for librdkafka: a timeout the user sets is enforced by the sink (see the module doc).
    "message.timeout.ms": 0,
}

# librdkafka's delivery timeout and its alias, as the user may set them (the producer's own key wins).
_TIMEOUT_NAMES = ("message.timeout.ms", "delivery.timeout.ms")
_TIMEOUT_KEYS = tuple(p + n for p in ("client.override.", "producer.override.") for n in _TIMEOUT_NAMES)
_WHOLE = re.compile(r"\s*\d+\s*")

# Broker/local errors that will not go away by sending the same record again.
_PERMANENT = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG, KafkaError.INVALID_RECORD,
              KafkaError._INVALID_TYPE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.TOPIC_AUTHORIZATION_FAILED,
              KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.INVALID_TIMESTAMP, KafkaError._INVALID_ARG,
              KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT, KafkaError.TOPIC_EXCEPTION, KafkaError._BAD_MSG,
              KafkaError.POLICY_VIOLATION, KafkaError.INVALID_REQUIRED_ACKS}


# The producer's idempotence state is broken (e.g. a broker fenced it after an epoch bump on
# timed-out messages): this producer will never deliver again, a fresh one will.
BROKEN_PRODUCER = {KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH, KafkaError.UNKNOWN_PRODUCER_ID,
                    KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, KafkaError._FATAL}


def timeout_issues(config: Mapping[str, Any]) -> list[ConfigIssue]:
    """A delivery timeout override that is not a whole number of milliseconds >= 0."""
    issues = []
    for key in _TIMEOUT_KEYS:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and _WHOLE.fullmatch(value))) \
                or int(value) < 0:
            issues.append(ConfigIssue(key, value, "the delivery timeout must be a whole number of milliseconds, "
                                      ">= 0 (0: none, an outage only delays)"))
    return issues


def delivery_timeout(config: Mapping[str, Any]) -> tuple[int, str]:
    """(timeout in ms the user set, 0: none; the key it came from). Raises ConfigError naming the key."""
    issues = timeout_issues(config)
    if issues:
        raise ConfigError(issues, source="kafka sink")
    found = (0, "producer.override.message.timeout.ms")
    for key in _TIMEOUT_KEYS:  # client.override. first: producer.override. wins, as in client_config
        if config.get(key) is not None:
            found = (int(config[key]), key)
    return found


def is_permanent(err: KafkaError) -> bool:
    """True when sending the same record again cannot succeed. Anything unknown counts as
    transient: a wrong guess then costs retries (and, past errors.retry.timeout, a restart),
    never a skipped record."""
    return not err.fatal() and err.code() in _PERMANENT
