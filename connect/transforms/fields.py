"""Field transforms that change the fields of a key or value: MaskField, ReplaceField, InsertField.

Each exists as ``$Key`` and ``$Value`` (Kafka Connect's ``MaskField$Value``...). What they read
and how they write it back (decoded objects, JSON bytes or text, Pulsar AVRO/JSON-schema values)
is :mod:`connect.transforms.payload`'s; a tombstone (None) passes unchanged. With an Avro value the
transform also derives the new schema (fields dropped, renamed, added), once per schema.
"""

from __future__ import annotations

import copy
import datetime
import decimal
import uuid
from typing import Any, Mapping

import orjson

from connect.config import ConfigDef, Type, non_empty
from connect.errors import ConfigIssue
from connect.records import ConnectRecord, ValueSchema
from connect.transforms.base import Transformation, TransformError
from connect.transforms.payload import avro_schema, read_body, write_body

__all__ = ["FieldTransform", "MaskFieldKey", "MaskFieldValue", "ReplaceFieldKey", "ReplaceFieldValue",
           "InsertFieldKey", "InsertFieldValue", "record_fields", "kind_of", "key_and_value"]


def kind_of(data: Any) -> str:
    return {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(
        type(data), f"a {type(data).__name__}")


def record_fields(schema: dict) -> list[dict]:
    """The ``fields`` of an Avro record schema; TransformError for any other schema."""
    if not isinstance(schema, dict) or schema.get("type") != "record" or not isinstance(schema.get("fields"), list):
        raise TransformError("the value's schema is not an Avro record schema; field transforms need one")
    return schema["fields"]


def key_and_value(base: type) -> tuple[type, type]:
    """The ``$Key`` and ``$Value`` classes of a transform (``MaskFieldKey``, ``MaskFieldValue``),
    importable by name from ``base``'s module (assign them there under these names)."""
    return tuple(type(f"{base.__name__.lstrip('_')}{side.title()}", (base,),
                      {"side": side, "__module__": base.__module__, "__doc__": base.__doc__}) for side in ("key", "value"))


class FieldTransform(Transformation):
    """Base of the transforms that change fields: subclasses give :meth:`change` (the data) and,
    when fields are added, dropped, renamed or retyped, :meth:`change_schema` (the Avro schema)."""

    side = "value"  # or "key"
    keeps_topic = True
    needs_object = True  # the data must be an object with fields

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self._schemas: dict[str, ValueSchema] = {}

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        body = read_body(record, self.side)
        if body is None:
            return record
        if self.needs_object and not isinstance(body.data, dict):
            raise TransformError(f"the {self.side} is {kind_of(body.data)}, not an object with fields")
        data = self.change(body.data, record)
        schema = self.schema_for(body.schema) if body.schema is not None else None
        return write_body(record, self.side, body, data, schema)

    def change(self, data: Any, record: ConnectRecord) -> Any:
        raise NotImplementedError

    def change_schema(self, schema: dict) -> dict:
        """The Avro schema (JSON) of the changed value; ``schema`` is a copy, change it at will."""
        return schema

    def schema_for(self, schema: ValueSchema) -> ValueSchema:
        """The record's new value schema, derived once per schema."""
        found = self._schemas.get(schema.definition)
        if found is None:
            old, _ = avro_schema(schema.definition)
            new = self.change_schema(copy.deepcopy(old))
            found = schema if new == old else ValueSchema(schema.type, orjson.dumps(new).decode(), schema.name)
            if len(self._schemas) > 256:
                self._schemas.clear()
            self._schemas[schema.definition] = found
        return found


# -- MaskField -------------------------------------------------------------------------------------

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _empty(value: Any) -> Any:
    """The value Kafka Connect's MaskField puts in place of ``value``: its type's null equivalent."""
    if isinstance(value, bool):
        return False
    for kind, empty in ((int, 0), (float, 0.0), (str, ""), (bytes, b""), (list, []), (dict, {}),
                        (decimal.Decimal, decimal.Decimal(0)), (uuid.UUID, uuid.UUID(int=0))):
        if isinstance(value, kind):
            return empty
    if isinstance(value, datetime.datetime):
        return _EPOCH if value.tzinfo else _EPOCH.replace(tzinfo=None)
    if isinstance(value, datetime.date):
        return datetime.date(1970, 1, 1)
    if isinstance(value, datetime.time):
        return datetime.time(0)
    raise TransformError(f"cannot mask a value of type {type(value).__name__}")


def _replace(value: Any, replacement: str, field: str) -> Any:
    try:
        if isinstance(value, str):
            return replacement
        if isinstance(value, bool):
            raise TransformError(f"field {field!r} is a boolean: it cannot take a replacement (leave replacement unset)")
        if isinstance(value, int):
            return int(replacement)
        if isinstance(value, float):
            return float(replacement)
        if isinstance(value, decimal.Decimal):
            return decimal.Decimal(replacement)
    except (ValueError, decimal.InvalidOperation):
        raise TransformError(f"field {field!r} is a number and the replacement is not one") from None
    raise TransformError(f"field {field!r} is {kind_of(value)}: only strings and numbers take a replacement")


class MaskField(FieldTransform):
    """Replaces the named fields with their type's empty value (0, "", false, [], {}) or with
    ``replacement`` (strings and numbers only). Absent fields are left absent."""

    @classmethod
    def config_def(cls) -> ConfigDef:
        return (ConfigDef()
                .define("fields", Type.LIST, doc="Names of the fields to mask.", validator=non_empty)
                .define("replacement", Type.STRING, None, "What a masked string or number becomes "
                        "(default: the type's empty value)."))

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.fields = list(config["fields"])
        self.replacement = config["replacement"]

    def change(self, data: dict, record: ConnectRecord) -> dict:
        out = dict(data)
        for name in self.fields:
            if name in out and out[name] is not None:
                value = out[name]
                out[name] = _empty(value) if self.replacement is None else _replace(value, self.replacement, name)
        return out


MaskFieldKey, MaskFieldValue = key_and_value(MaskField)


# -- ReplaceField ----------------------------------------------------------------------------------

def _renames(items: list[str]) -> str | None:
    bad = [i for i in items if i.count(":") != 1 or not all(p.strip() for p in i.split(":"))]
    return f"each rename must be old:new, not {bad[0]!r}" if bad else None


class ReplaceField(FieldTransform):
    """Keeps, drops and renames fields: a field stays when it is not in ``exclude`` and ``include``
    is empty or names it; then ``renames`` (``old:new`` pairs) apply. ``blacklist`` and
    ``whitelist`` are Kafka Connect's old names of ``exclude`` and ``include``."""

    @classmethod
    def config_def(cls) -> ConfigDef:
        return (ConfigDef()
                .define("exclude", Type.LIST, [], "Fields to drop.")
                .define("include", Type.LIST, [], "Fields to keep (empty: all that are not excluded).")
                .define("renames", Type.LIST, [], "Field renames, old:new pairs.", validator=_renames)
                .define("blacklist", Type.LIST, [], "Old name of exclude.")
                .define("whitelist", Type.LIST, [], "Old name of include."))

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.exclude = set(config["exclude"]) | set(config["blacklist"])
        self.include = set(config["include"]) | set(config["whitelist"])
        self.renames = dict(tuple(p.strip() for p in item.split(":")) for item in config["renames"])

    def keeps(self, name: str) -> bool:
        return name not in self.exclude and (not self.include or name in self.include)

    def change(self, data: dict, record: ConnectRecord) -> dict:
        renames = self.renames
        return {renames.get(k, k): v for k, v in data.items() if self.keeps(k)}

    def change_schema(self, schema: dict) -> dict:
        fields = [f for f in record_fields(schema) if self.keeps(f["name"])]
        for f in fields:
            f["name"] = self.renames.get(f["name"], f["name"])
        schema["fields"] = fields
        return schema


ReplaceFieldKey, ReplaceFieldValue = key_and_value(ReplaceField)


# -- InsertField -----------------------------------------------------------------------------------

_INSERTED = {  # key -> Avro type of the field it inserts
    "topic.field": "string", "partition.field": "int", "offset.field": "long", "timestamp.field": "long",
    "static.field": "string",
}


def _spec(name: str) -> tuple[str, bool]:
    """Kafka Connect's field spec: ``name!`` required, ``name?`` or ``name`` optional."""
    if name.endswith("!"):
        return name[:-1], True
    return (name[:-1] if name.endswith("?") else name), False


class InsertField(FieldTransform):
    """Adds fields from the record's metadata: its topic, partition, source offset (the source
    offset's ``offset``), timestamp (epoch ms), and one static string. A field name ending in ``!``
    is required (a record without that metadata fails), ``?`` or nothing optional (left out)."""

    @classmethod
    def config_def(cls) -> ConfigDef:
        cdef = ConfigDef()
        for key, what in (("topic", "the topic"), ("partition", "the partition"),
                          ("offset", "the source offset ('offset' of the source offset)"),
                          ("timestamp", "the timestamp (epoch milliseconds)"), ("static", "static.value")):
            cdef.define(f"{key}.field", Type.STRING, "", f"Field that receives {what}; suffix ! required, ? optional.")
        return cdef.define("static.value", Type.STRING, "", "The value of static.field.")

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().validate(config)
        if not issues and not any(str(config.get(k, "")).strip() for k in _INSERTED):
            issues.append(ConfigIssue("topic.field", None, "InsertField needs at least one of " + ", ".join(_INSERTED)))
        return issues

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.specs = [(key, *_spec(config[key].strip())) for key in _INSERTED if config[key].strip()]
        self.static = config["static.value"]

    def _value(self, key: str, record: ConnectRecord) -> Any:
        if key == "topic.field":
            return record.topic
        if key == "partition.field":
            return record.partition
        if key == "offset.field":
            offset = record.source_offset.get("offset") if record.source_offset else None
            return offset if isinstance(offset, int) else None
        if key == "timestamp.field":
            return record.timestamp
        return self.static

    def change(self, data: dict, record: ConnectRecord) -> dict:
        out = dict(data)
        for key, name, required in self.specs:
            value = self._value(key, record)
            if value is None:
                if required:
                    raise TransformError(f"the record has no {key.partition('.')[0]} for required field {name!r}")
                continue
            out[name] = value
        return out

    def change_schema(self, schema: dict) -> dict:
        names = {name for _, name, _ in self.specs}
        fields = [f for f in record_fields(schema) if f["name"] not in names]
        for key, name, required in self.specs:
            kind = _INSERTED[key]
            fields.append({"name": name, "type": kind} if required else {"name": name, "type": ["null", kind],
                                                                         "default": None})
        schema["fields"] = fields
        return schema


InsertFieldKey, InsertFieldValue = key_and_value(InsertField)
