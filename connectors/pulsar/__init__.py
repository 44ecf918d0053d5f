"""Pulsar source and sink connectors (pulsar-client)."""

from connectors.pulsar.sink import PulsarSinkConnector
from connectors.pulsar.source import PulsarSourceConnector

__all__ = ["PulsarSourceConnector", "PulsarSinkConnector"]
