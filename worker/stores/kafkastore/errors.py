"""How the store reads a Kafka error: transient (a RetriableError, the same write may be taken later)
or not (a ConnectError)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from connect.errors import ConnectError, RetriableError

__all__ = ["kafka_error", "error_class"]

# errors librdkafka does not flag retriable that still are: the broker is away or slow
# errors librdkafka does not flag retriable that still are: the broker is away or slow
_TRANSIENT = {KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._TIMED_OUT_QUEUE, KafkaError._TRANSPORT,
              KafkaError._ALL_BROKERS_DOWN, KafkaError.REQUEST_TIMED_OUT, KafkaError.NOT_ENOUGH_REPLICAS,
              KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, KafkaError.LEADER_NOT_AVAILABLE,
              KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.NETWORK_EXCEPTION}


def kafka_error(exc: KafkaException) -> KafkaError:
    arg = exc.args[0] if exc.args else None
    return arg if isinstance(arg, KafkaError) else KafkaError(KafkaError._FAIL, str(exc))


def error_class(err: KafkaError | None) -> type[ConnectError]:
    """RetriableError for transient failures (the broker may take the same write later)."""
    if err is None or err.fatal():
        return ConnectError
    return RetriableError if err.retriable() or err.code() in _TRANSIENT else ConnectError
