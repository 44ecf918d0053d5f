"""How a record maps onto a Pulsar message and back (documented in the README).

Pulsar carries strings where Kafka carries bytes (partition key, property values). Bytes that are
valid UTF-8 travel as they are; others are base64-encoded and marked, so this project's Pulsar
source decodes them back to the same bytes:

- key -> partition key; a key that is not UTF-8 is base64-encoded and property ``pulsar.key.base64``
  is ``true``;
- headers -> properties (name -> UTF-8 value); values that are not UTF-8 are base64-encoded and
  listed in property ``pulsar.base64.properties``; a header without value becomes ``""``; of two
  headers with one name the later wins (Pulsar properties are a map);
- header ``pulsar.ordering.key`` -> the ordering key (and back);
- timestamp -> event time (and back: event time, else publish time).
"""

from __future__ import annotations

import base64
from typing import Any

__all__ = ["BASE64_KEY", "BASE64_PROPERTIES", "ORDERING_KEY_HEADER", "message_fields"]

BASE64_KEY = "pulsar.key.base64"
BASE64_PROPERTIES = "pulsar.base64.properties"
ORDERING_KEY_HEADER = "pulsar.ordering.key"


def _text(value: Any) -> tuple[str, bool]:
    """(string, was base64-encoded)."""
    if value.__class__ is str:
        return value, False
    raw = bytes(value)
    try:
        return raw.decode(), False
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode(), True


def message_fields(key: Any, headers) -> tuple[str | None, dict[str, str], bytes | None]:
    """(partition key, properties, ordering key) of a record's key and headers."""
    # The common case at C speed: a bytes key (or none) and headers whose values are all UTF-8
    # bytes, no ordering key; anything else takes the general path below.
    try:
        properties = {name: value.decode() for name, value in headers} if headers else {}
        if ORDERING_KEY_HEADER not in properties:
            if key is None:
                return None, properties, None
            if key.__class__ is bytes:
                return key.decode(), properties, None
    except (AttributeError, UnicodeDecodeError):  # a None or str value, text that is not UTF-8
        pass
    return _fields(key, headers)


def _fields(key: Any, headers) -> tuple[str | None, dict[str, str], bytes | None]:
    properties: dict[str, str] = {}
    ordering = None
    partition_key = None
    if key is not None:
        # An empty key ("") is returned as it is, but pulsar-client's public send_async sets a
        # partition key only when it is truthy: the message goes without key (has_key() false),
        # and a consumer reads it as a message without key.
        partition_key, encoded = _text(key)
        if encoded:
            properties[BASE64_KEY] = "true"
    if headers:
        encoded_names = []
        for name, value in headers:
            if name == ORDERING_KEY_HEADER and value is not None:
                ordering = value.encode() if value.__class__ is str else bytes(value)
                continue
            if value is None:
                properties[name] = ""
                continue
            text, encoded = _text(value)
            properties[name] = text
            if encoded:
                encoded_names.append(name)
        if encoded_names:
            properties[BASE64_PROPERTIES] = ",".join(encoded_names)
    return partition_key, properties, ordering
