"""Lenient JSON: what a Java broker or name server writes with fastjson
(``RemotingSerializable.encode``). Besides standard JSON, fastjson writes map keys bare when they
are numbers (``{0:"a"}``) and uses JSON objects as keys (``ConsumeStats.offsetTable`` keyed by
``MessageQueue``): :func:`parse_fastjson` reads all three, trying orjson first."""

from __future__ import annotations

import re
from json.decoder import scanstring
from typing import Any, Mapping

import orjson

from connectors.rocketmq.protocol import ProtocolError

__all__ = ["parse_fastjson", "json_object", "json_list"]

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_SPACE = re.compile(r"[ \t\r\n]*")


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted(((k, _freeze(v)) for k, v in value.items()), key=lambda kv: str(kv[0])))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


class _FastjsonParser:
    """Standard JSON plus what fastjson writes by default: bare number keys (``{0:"a"}``, read as
    the key ``"0"``), objects as keys (read as a sorted tuple of ``(key, value)`` pairs) and bare
    identifier keys."""

    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def error(self, what: str) -> ProtocolError:
        snippet = self.text[max(0, self.pos - 20):self.pos + 20]
        return ProtocolError(f"JSON body: {what} at character {self.pos} (near {snippet!r})")

    def skip(self) -> None:
        self.pos = _SPACE.match(self.text, self.pos).end()

    def document(self) -> Any:
        value = self.value()
        self.skip()
        if self.pos != len(self.text):
            raise self.error("text after the JSON value")
        return value

    def value(self) -> Any:
        self.skip()
        if self.pos >= len(self.text):
            raise self.error("unexpected end")
        c = self.text[self.pos]
        if c == "{":
            return self.obj()
        if c == "[":
            return self.array()
        if c == '"':
            return self.string()
        for word, val in (("true", True), ("false", False), ("null", None)):
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return val
        m = _NUMBER.match(self.text, self.pos)
        if m:
            self.pos = m.end()
            return float(m.group()) if m.group(1) or m.group(2) else int(m.group())
        raise self.error(f"unexpected {c!r}")

    def string(self) -> str:
        try:
            s, self.pos = scanstring(self.text, self.pos + 1, False)
        except ValueError as exc:
            raise self.error(f"bad string ({exc})") from None
        return s

    def key(self) -> Any:
        self.skip()
        c = self.text[self.pos:self.pos + 1]
        if c == '"':
            return self.string()
        if c in ("{", "["):
            return _freeze(self.value())
        m = _NUMBER.match(self.text, self.pos) or _IDENT.match(self.text, self.pos)
        if not m:
            raise self.error("expected a key")
        self.pos = m.end()
        return m.group()

    def obj(self) -> dict:
        self.pos += 1
        out: dict = {}
        self.skip()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return out
        while True:
            k = self.key()
            self.skip()
            if not self.text.startswith(":", self.pos):
                raise self.error("expected ':'")
            self.pos += 1
            out[k] = self.value()
            self.skip()
            c = self.text[self.pos:self.pos + 1]
            self.pos += 1
            if c == "}":
                return out
            if c != ",":
                self.pos -= 1
                raise self.error("expected ',' or '}'")

    def array(self) -> list:
        self.pos += 1
        out: list = []
        self.skip()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return out
        while True:
            out.append(self.value())
            self.skip()
            c = self.text[self.pos:self.pos + 1]
            self.pos += 1
            if c == "]":
                return out
            if c != ",":
                self.pos -= 1
                raise self.error("expected ',' or ']'")


def parse_fastjson(data: bytes | str) -> Any:
    """A JSON body as a Java broker or name server writes it (``RemotingSerializable.encode``,
    fastjson): standard JSON, or fastjson's form with bare number keys and object keys. Raises
    ProtocolError when it is neither."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else data
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"JSON body is not UTF-8: {exc}") from None
    return _FastjsonParser(text).document()


def json_object(doc: Any, where: str) -> dict:
    """``doc`` if it is a JSON object; else a ProtocolError naming ``where``."""
    if not isinstance(doc, dict):
        raise ProtocolError(f"{where} is a {type(doc).__name__}, not an object")
    return doc


def json_list(doc: Mapping, key: str, where: str) -> list:
    """``doc[key]`` if it is a JSON array ([] when absent or null); else a ProtocolError naming ``where``."""
    v = doc.get(key)
    if v is None:
        return []
    if not isinstance(v, list):
        raise ProtocolError(f"{where}: {key} is a {type(v).__name__}, not an array")
    return v
