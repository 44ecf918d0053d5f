"""Reading a record's key or value as a structure for a field transform, and writing it back.

Field transforms (``InsertField``, ``ReplaceField``, ``MaskField``, ``Cast``, ``ValueToKey``,
``ExtractField``, ``HeaderFrom``) work on top-level fields of an object. What they accept:

- a ``dict`` (or any object) that a ``json`` converter decoded: changed in place of the record,
  handed on as an object (the sink's converter encodes it);
- ``bytes`` or ``str`` holding JSON, when the converter is ``bytes`` or ``string``: decoded,
  changed and encoded back to the same form, so a bytes-to-bytes mirror can mask a field without
  changing converters;
- a value written with a Pulsar ``AVRO`` schema (``record.value_schema``): decoded and encoded with
  that schema (fastavro, Avro binary without header, as Pulsar writes it); a Pulsar ``JSON``
  schema's value is JSON. A transform that changes the fields (ReplaceField, InsertField, Cast...)
  derives the new schema from the old one and the record carries it (the destination registers it).

``None`` (a tombstone) is passed on unchanged. Anything else - bytes that are not JSON nor
Avro of their schema, a value with another schema type - fails that record only, with the
transform's name in the reason.
"""

from __future__ import annotations

import copy
import io
from functools import lru_cache
from typing import Any

import orjson

from connect.records import ConnectRecord, ValueSchema, make_record
from connect.transforms.base import TransformError

__all__ = ["Body", "read_body", "write_body", "SCHEMA_TYPES", "avro_schema"]

SCHEMA_TYPES = ("AVRO", "JSON")  # Pulsar schema types whose definition is an Avro record schema


class Body:
    """One key or value as read: ``data`` (the decoded structure), ``form`` (how it came:
    ``object``, ``bytes``, ``text`` or ``avro``) and, for a value with a Pulsar AVRO or JSON
    schema, ``schema`` (that :class:`ValueSchema`)."""

    __slots__ = ("data", "form", "schema")

    def __init__(self, data: Any, form: str, schema: ValueSchema | None = None):
        self.data = data
        self.form = form
        self.schema = schema


@lru_cache(maxsize=256)
def avro_schema(definition: str) -> tuple[dict, Any]:
    """(schema as JSON, fastavro's parsed schema) of an Avro schema definition; cached."""
    import fastavro

    try:
        schema = orjson.loads(definition)
    except orjson.JSONDecodeError as exc:
        raise TransformError(f"the value's schema is not valid JSON ({exc})") from None
    try:
        parsed = fastavro.parse_schema(copy.deepcopy(schema))
    except Exception as exc:  # noqa: BLE001 - fastavro raises several kinds
        raise TransformError(f"the value's schema is not a valid Avro schema ({exc})") from None
    return schema, parsed


def read_body(record: ConnectRecord, side: str) -> Body | None:
    """The record's ``side`` ("key" or "value") as a :class:`Body`; None for a None payload."""
    payload = record.key if side == "key" else record.value
    if payload is None:
        return None
    schema = record.value_schema if side == "value" else None
    if isinstance(payload, (bytes, bytearray, memoryview)):
        if schema is not None and schema.type not in SCHEMA_TYPES:
            raise TransformError(f"the value has a Pulsar {schema.type} schema; field transforms read values "
                                 f"with an AVRO or JSON schema, JSON bytes and decoded objects")
        if schema is not None and schema.type == "AVRO":
            return Body(_read_avro(bytes(payload), schema), "avro", schema)
        return Body(_read_json(payload, side, "bytes"), "bytes", schema)
    if isinstance(payload, str):
        return Body(_read_json(payload, side, "text"), "text", None)
    return Body(payload, "object", None)


def _read_avro(payload: bytes, schema: ValueSchema) -> Any:
    import fastavro

    _, parsed = avro_schema(schema.definition)
    try:
        return fastavro.schemaless_reader(io.BytesIO(payload), parsed, None)
    except Exception as exc:  # noqa: BLE001 - truncated or foreign data raises many kinds
        raise TransformError(f"the value is not Avro data of its schema {schema.name or '(unnamed)'} "
                             f"({type(exc).__name__}: {exc})") from None


def _read_json(payload: Any, side: str, form: str) -> Any:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise TransformError(f"the {side} is {form} that are not JSON ({exc}); field transforms read JSON "
                             "objects, decoded values and values with a Pulsar AVRO or JSON schema") from None


def encode(body: Body, data: Any, schema: ValueSchema | None) -> Any:
    """``data`` in ``body``'s form (with ``schema`` for an Avro value)."""
    if data is None:
        return None
    form = body.form
    if form == "object":
        return data
    if form == "avro":
        import fastavro

        _, parsed = avro_schema(schema.definition)
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, parsed, data)
        except Exception as exc:  # noqa: BLE001 - a value that does not fit the schema
            raise TransformError(f"the changed value does not fit its Avro schema ({type(exc).__name__}: {exc})") from None
        return out.getvalue()
    try:
        text = orjson.dumps(data)
    except TypeError as exc:
        raise TransformError(f"the changed {form} cannot be written as JSON ({exc})") from None
    return text if form == "bytes" else text.decode()


def write_body(record: ConnectRecord, side: str, body: Body, data: Any,
               schema: ValueSchema | None = None) -> ConnectRecord:
    """A copy of ``record`` whose ``side`` is ``data`` written back in the form it was read in;
    ``schema`` replaces the value's schema (default: the one it had)."""
    schema = body.schema if schema is None else schema
    payload = encode(body, data, schema)
    if side == "key":
        return make_record(record.topic, payload, record.value, record.headers, record.timestamp,
                           record.source_partition, record.source_offset, record.partition, record.value_schema)
    return make_record(record.topic, record.key, payload, record.headers, record.timestamp,
                       record.source_partition, record.source_offset, record.partition,
                       schema if body.schema is not None else record.value_schema)
