"""The connector API: what a connector author imports. No broker client is imported here."""

from connect.config import ConfigDef, ConfigKey, Importance, Type
from connect.connector import Connector, ConnectorContext, SinkConnector, SourceConnector
from connect.converters import BytesConverter, Converter, JsonConverter, StringConverter
from connect.errors import (
    ConfigError,
    ConfigIssue,
    ConnectError,
    ConversionError,
    DeliveryError,
    PluginError,
    RetriableError,
    RetriesExhaustedError,
    TaskFailedError,
)
from connect.records import ConnectRecord
from connect.sink import ErrantRecordReporter, SinkTask, SinkTaskContext
from connect.sink.side import SideWriter
from connect.source import OffsetStorageReader, SourceTask, SourceTaskContext

__all__ = [
    "BytesConverter", "ConfigDef", "ConfigError", "ConfigIssue", "ConfigKey", "ConnectError", "ConnectRecord",
    "Connector", "ConnectorContext", "ConversionError", "Converter", "DeliveryError", "ErrantRecordReporter",
    "Importance", "JsonConverter", "OffsetStorageReader", "PluginError", "RetriableError",
    "RetriesExhaustedError", "SideWriter", "SinkConnector", "SinkTask", "SinkTaskContext", "SourceConnector",
    "SourceTask", "SourceTaskContext", "StringConverter", "TaskFailedError", "Type",
]
__version__ = "0.1.0"
