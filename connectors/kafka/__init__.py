"""Kafka source and sink connectors (confluent-kafka / librdkafka)."""

from connectors.kafka.sink import KafkaSinkConnector, KafkaSinkTask
from connectors.kafka.source import KafkaSourceConnector, KafkaSourceTask

__all__ = ["KafkaSinkConnector", "KafkaSinkTask", "KafkaSourceConnector", "KafkaSourceTask"]
