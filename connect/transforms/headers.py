"""Header transforms: InsertHeader, DropHeaders, HeaderFrom (``$Key`` / ``$Value``).

Headers are ``(name, bytes | None)`` pairs (:class:`connect.records.ConnectRecord`); a header a
transform writes is UTF-8 text for a string, the bytes themselves for bytes, JSON for anything else.
"""

from __future__ import annotations

from typing import Any, Mapping

import orjson

from connect.config import ConfigDef, Type, non_empty, one_of
from connect.errors import ConfigIssue
from connect.records import ConnectRecord, make_record
from connect.transforms.base import Transformation, TransformError
from connect.transforms.fields import FieldTransform, key_and_value, record_fields
from connect.transforms.payload import read_body, write_body

__all__ = ["InsertHeader", "DropHeaders", "HeaderFromKey", "HeaderFromValue", "header_bytes", "with_headers"]


def header_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    try:
        return orjson.dumps(value)
    except TypeError as exc:
        raise TransformError(f"a {type(value).__name__} cannot be written as a header ({exc})") from None


def with_headers(record: ConnectRecord, headers: list) -> ConnectRecord:
    return make_record(record.topic, record.key, record.value, tuple(headers), record.timestamp,
                       record.source_partition, record.source_offset, record.partition, record.value_schema)


class InsertHeader(Transformation):
    """Adds a header with a literal value (UTF-8) to every record; existing ones are kept."""

    keeps_topic = True

    @classmethod
    def config_def(cls) -> ConfigDef:
        return (ConfigDef()
                .define("header", Type.STRING, doc="Name of the header to add.", validator=non_empty)
                .define("value.literal", Type.STRING, doc="Its value (written as UTF-8)."))

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.header = (config["header"], config["value.literal"].encode())

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        return with_headers(record, [*(record.headers or ()), self.header])


class DropHeaders(Transformation):
    """Removes every header with one of the given names."""

    keeps_topic = True

    @classmethod
    def config_def(cls) -> ConfigDef:
        return ConfigDef().define("headers", Type.LIST, doc="Names of the headers to remove.", validator=non_empty)

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.names = frozenset(config["headers"])

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        headers = record.headers
        if not headers or not any(name in self.names for name, _ in headers):
            return record
        return with_headers(record, [h for h in headers if h[0] not in self.names])


class HeaderFrom(FieldTransform):
    """Copies or moves fields of the key/value into headers (``fields[i]`` into ``headers[i]``);
    a missing field gives a None header. ``move`` drops the fields (and from an Avro schema)."""

    @classmethod
    def config_def(cls) -> ConfigDef:
        return (ConfigDef()
                .define("fields", Type.LIST, doc="Fields to copy or move into headers.", validator=non_empty)
                .define("headers", Type.LIST, doc="Header names, one per field, in the same order.", validator=non_empty)
                .define("operation", Type.STRING, doc="move or copy.", validator=one_of("move", "copy")))

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().validate(config)
        if not issues:
            values = cls.config_def().parse(config)
            if len(values["fields"]) != len(values["headers"]):
                issues.append(ConfigIssue("headers", None, f"names {len(values['headers'])} header(s) for "
                                                           f"{len(values['fields'])} field(s); give one per field"))
        return issues

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.pairs = list(zip(config["fields"], config["headers"], strict=True))  # same length: validate()
        self.move = config["operation"] == "move"

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        body = read_body(record, self.side)
        if body is None:
            return record
        if not isinstance(body.data, dict):
            return super().apply(record)  # the base explains what the payload is
        added = [(header, header_bytes(body.data.get(field))) for field, header in self.pairs]
        if self.move:
            data = {k: v for k, v in body.data.items() if k not in {f for f, _ in self.pairs}}
            schema = self.schema_for(body.schema) if body.schema is not None else None
            record = write_body(record, self.side, body, data, schema)
        return with_headers(record, [*(record.headers or ()), *added])

    def change_schema(self, schema: dict) -> dict:
        moved = {f for f, _ in self.pairs}
        schema["fields"] = [f for f in record_fields(schema) if f["name"] not in moved]
        return schema


HeaderFromKey, HeaderFromValue = key_and_value(HeaderFrom)
