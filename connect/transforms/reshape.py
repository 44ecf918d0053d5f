"""Transforms that change a payload's shape or type: Cast, ValueToKey, ExtractField, SetSchemaMetadata.

``Cast``, ``ExtractField`` exist as ``$Key`` and ``$Value``; ``SetSchemaMetadata`` only as ``$Value``
(only values carry schemas here: Pulsar's). What they read is :mod:`connect.transforms.payload`'s.
"""

from __future__ import annotations

import base64
import datetime
from typing import Any, Mapping

import orjson

from connect.config import ConfigDef, Type, non_empty
from connect.records import ConnectRecord, ValueSchema, make_record
from connect.transforms.base import Transformation, TransformError
from connect.transforms.fields import FieldTransform, key_and_value, kind_of, record_fields
from connect.transforms.payload import avro_schema, read_body

__all__ = ["CastKey", "CastValue", "ValueToKey", "ExtractFieldKey", "ExtractFieldValue", "SetSchemaMetadataValue",
           "CAST_TYPES"]

_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
CAST_TYPES = {"int8": "int", "int16": "int", "int32": "int", "int64": "long", "float32": "float",
              "float64": "double", "boolean": "boolean", "string": "string"}  # -> Avro type


def _cast_spec(items: list[str]) -> str | None:
    if not items:
        return "must name a type (int8, ..., string) or field:type pairs"
    for item in items:
        field, sep, kind = item.rpartition(":")
        if sep and not field.strip():
            return f"{item!r}: the field name is empty"
        if kind.strip() not in CAST_TYPES:
            return f"{item!r}: the type must be one of {', '.join(CAST_TYPES)}"
        if not sep and len(items) > 1:
            return "a whole-value type (no field:) must be the only entry"
    return None


def cast(value: Any, kind: str) -> Any:
    """``value`` as ``kind`` (Kafka Connect's Cast types); None stays None."""
    if value is None:
        return None
    if kind == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, bytes):
            return base64.b64encode(value).decode()
        if isinstance(value, (dict, list)):
            return orjson.dumps(value).decode()
        if isinstance(value, (datetime.date, datetime.time)):
            return value.isoformat()
        return str(value)
    if isinstance(value, (dict, list, bytes)):
        raise TransformError(f"cannot cast {kind_of(value)} to {kind}")
    if kind == "boolean":
        if isinstance(value, str):
            text = value.strip().lower()
            if text not in ("true", "false"):
                raise TransformError("cannot cast a string other than true/false to boolean")
            return text == "true"
        return bool(value)
    try:
        number = float(value) if isinstance(value, str) else value
        if kind in ("float32", "float64"):
            return float(number)
        result = int(value) if isinstance(value, str) and value.strip().lstrip("+-").isdigit() else int(number)
    except (TypeError, ValueError, OverflowError):
        raise TransformError(f"cannot cast {kind_of(value)} to {kind}") from None
    bits = _INT_BITS[kind]
    if not -(2 ** (bits - 1)) <= result < 2 ** (bits - 1):
        raise TransformError(f"a number out of the range of {kind}")
    return result


class _Cast(FieldTransform):
    """Casts fields (``spec=field:type,...``) or the whole key/value (``spec=type``) to int8, int16,
    int32, int64, float32, float64, boolean or string."""

    needs_object = False

    @classmethod
    def config_def(cls) -> ConfigDef:
        return ConfigDef().define("spec", Type.LIST, doc="field:type pairs, or one type for the whole key/value.",
                                  validator=_cast_spec)

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        items = [i.rpartition(":") for i in config["spec"]]
        self.whole = None if items[0][1] else items[0][2].strip()
        self.fields = {f.strip(): k.strip() for f, _, k in items} if self.whole is None else {}

    def change(self, data: Any, record: ConnectRecord) -> Any:
        if self.whole is not None:
            return cast(data, self.whole)
        if not isinstance(data, dict):
            raise TransformError(f"the {self.side} is {kind_of(data)}, not an object with fields")
        out = dict(data)
        for name, kind in self.fields.items():
            if name in out:
                try:
                    out[name] = cast(out[name], kind)
                except TransformError as exc:
                    raise TransformError(f"field {name!r}: {exc}") from None
        return out

    def change_schema(self, schema: dict) -> dict:
        if self.whole is not None:
            raise TransformError("a value with an Avro record schema cannot be cast whole; cast its fields")
        for f in record_fields(schema):
            kind = self.fields.get(f["name"])
            if kind is not None:
                nullable = isinstance(f["type"], list) and "null" in f["type"]
                f["type"] = ["null", CAST_TYPES[kind]] if nullable else CAST_TYPES[kind]
                if not nullable:
                    f.pop("default", None)  # the old default may not fit the new type
        return schema


CastKey, CastValue = key_and_value(_Cast)


class ValueToKey(Transformation):
    """Replaces the key with an object of the named fields of the value. The key is an object when
    the value was one (a json converter decoded it), else JSON bytes."""

    keeps_topic = True

    @classmethod
    def config_def(cls) -> ConfigDef:
        return ConfigDef().define("fields", Type.LIST, doc="Fields of the value that make the key.", validator=non_empty)

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.fields = list(config["fields"])

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        body = read_body(record, "value")
        if body is None:
            return record
        if not isinstance(body.data, dict):
            raise TransformError(f"the value is {kind_of(body.data)}, not an object with fields")
        missing = [f for f in self.fields if f not in body.data]
        if missing:
            raise TransformError(f"the value has no field {missing[0]!r}")
        key = {f: body.data[f] for f in self.fields}
        if body.form != "object":
            try:
                key = orjson.dumps(key)
            except TypeError as exc:
                raise TransformError(f"the key cannot be written as JSON ({exc})") from None
        return make_record(record.topic, key, record.value, record.headers, record.timestamp, record.source_partition,
                           record.source_offset, record.partition, record.value_schema)


class _ExtractField(FieldTransform):
    """Replaces the key/value with one of its fields (None when it has no such field). An Avro
    value can give only a record field (it keeps an Avro schema: the field's)."""

    @classmethod
    def config_def(cls) -> ConfigDef:
        return ConfigDef().define("field", Type.STRING, doc="The field to extract.", validator=non_empty)

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.field = config["field"]

    def change(self, data: dict, record: ConnectRecord) -> Any:
        return data.get(self.field)

    def change_schema(self, schema: dict) -> dict:
        for f in record_fields(schema):
            if f["name"] == self.field:
                kinds = f["type"] if isinstance(f["type"], list) else [f["type"]]
                records = [k for k in kinds if isinstance(k, dict) and k.get("type") == "record"]
                if records:
                    return records[0]
                raise TransformError(f"field {self.field!r} of the Avro value is not a record: an Avro value "
                                     "keeps a record schema (extract a record field, or decode it with a converter)")
        raise TransformError(f"the value's Avro schema has no field {self.field!r}")


ExtractFieldKey, ExtractFieldValue = key_and_value(_ExtractField)


class SetSchemaMetadataValue(Transformation):
    """Renames the value's schema (a Pulsar schema's name; for AVRO and JSON schemas also the Avro
    record's full name). Records without a schema pass unchanged. Versions are not settable: each
    cluster's registry numbers its own (PIP-87)."""

    keeps_topic = True

    @classmethod
    def config_def(cls) -> ConfigDef:
        return (ConfigDef()
                .define("schema.name", Type.STRING, doc="The schema's new (full) name.", validator=non_empty)
                .define("schema.version", Type.STRING, "", "Not settable here: each cluster's schema registry "
                        "numbers its own versions.",
                        validator=lambda v: "cannot be set: each cluster's schema registry numbers its own versions"
                        if v else None))

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.name = config["schema.name"]
        self._schemas: dict[ValueSchema, ValueSchema] = {}

    def _renamed(self, schema: ValueSchema) -> ValueSchema:
        found = self._schemas.get(schema)
        if found is None:
            definition = schema.definition
            if schema.type in ("AVRO", "JSON"):
                avro, _ = avro_schema(definition)
                if isinstance(avro, dict) and avro.get("type") == "record":
                    namespace, _, name = self.name.rpartition(".")
                    avro = {**avro, "name": name}
                    avro.pop("namespace", None)
                    if namespace:
                        avro["namespace"] = namespace
                    definition = orjson.dumps(avro).decode()
            found = self._schemas[schema] = ValueSchema(schema.type, definition, self.name)
        return found

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        if record.value_schema is None:
            return record
        schema = self._renamed(record.value_schema)
        return make_record(record.topic, record.key, record.value, record.headers, record.timestamp,
                           record.source_partition, record.source_offset, record.partition, schema)



