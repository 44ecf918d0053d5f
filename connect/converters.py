"""Key/value converters: ``bytes`` (default, pass-through), ``string`` and ``json`` (orjson).

A source side's converter *decodes* what the source task emitted (``from_bytes``); a sink side's
converter *encodes* what the sink task receives (``to_bytes``). With ``bytes`` on both sides the
runner skips conversion entirely, so a broker-to-broker mirror copies payloads untouched.
"""

from __future__ import annotations

from typing import Any

import orjson

from connect.errors import ConversionError

__all__ = ["Converter", "BytesConverter", "StringConverter", "JsonConverter", "converter_for", "CONVERTERS"]


class Converter:
    name = "abstract"

    def from_bytes(self, data: Any) -> Any:
        """Decode a payload emitted by a source; None stays None."""
        raise NotImplementedError

    def to_bytes(self, obj: Any) -> bytes | None:
        """Encode a payload for a sink; None stays None."""
        raise NotImplementedError


class BytesConverter(Converter):
    name = "bytes"

    def from_bytes(self, data: Any) -> Any:
        return data

    def to_bytes(self, obj: Any) -> bytes | None:
        if obj is None or isinstance(obj, bytes):
            return obj
        if isinstance(obj, (bytearray, memoryview)):
            return bytes(obj)
        raise ConversionError(
            f"bytes converter got {type(obj).__name__}; set the sink's converter to 'string' or 'json'"
        )


class StringConverter(Converter):
    name = "string"

    def from_bytes(self, data: Any) -> Any:
        if data is None or isinstance(data, str):
            return data
        if isinstance(data, (bytes, bytearray, memoryview)):
            try:
                return bytes(data).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConversionError(f"not valid UTF-8 at byte {exc.start}") from None
        if isinstance(data, (int, float, bool)):
            return str(data)
        raise ConversionError(f"string converter cannot decode {type(data).__name__}; use the 'json' converter")

    def to_bytes(self, obj: Any) -> bytes | None:
        if obj is None or isinstance(obj, bytes):
            return obj
        if isinstance(obj, str):
            return obj.encode("utf-8")
        if isinstance(obj, (int, float, bool)):
            return str(obj).encode("utf-8")
        raise ConversionError(f"string converter got {type(obj).__name__}; use the 'json' converter")


class JsonConverter(Converter):
    name = "json"

    def from_bytes(self, data: Any) -> Any:
        if data is None or not isinstance(data, (bytes, bytearray, memoryview, str)):
            return data
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ConversionError(f"not valid JSON: {exc}") from None

    def to_bytes(self, obj: Any) -> bytes | None:
        if obj is None or isinstance(obj, bytes):
            return obj
        try:
            return orjson.dumps(obj)
        except TypeError as exc:
            raise ConversionError(f"cannot encode as JSON: {exc}") from None


CONVERTERS: dict[str, type[Converter]] = {
    "bytes": BytesConverter,
    "string": StringConverter,
    "json": JsonConverter,
}


def converter_for(name: str) -> Converter:
    try:
        return CONVERTERS[name.lower()]()
    except KeyError:
        raise ConversionError(f"unknown converter {name!r}; choose one of {', '.join(CONVERTERS)}") from None
