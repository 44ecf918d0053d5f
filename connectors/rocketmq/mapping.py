"""How a record maps onto a RocketMQ message and back (documented in the README).

Message to record (the source):

- value <- body; key <- the ``KEYS`` property (as UTF-8 bytes; several keys stay one
  space-separated string); timestamp <- born timestamp; partition hint <- queue id;
- headers <- the user properties (system properties such as ``UNIQ_KEY``, ``WAIT``, ``KEYS`` and
  ``TAGS`` are not copied), plus ``rocketmq.tags`` (the tag) and ``rocketmq.msg.id`` (the
  producer's message id, ``UNIQ_KEY``, else the broker's offset id).

Record to message (the sink):

- body <- value. RocketMQ refuses empty bodies, so a record without value becomes the one-byte body
  :data:`PLACEHOLDER` with property ``CONNECT_NULL_VALUE=true`` (read back as a record without
  value), and an empty value the same body with ``CONNECT_EMPTY_VALUE=true`` (read back as ``b""``);
  ``KEYS`` <- key;
- ``TAGS`` <- header ``rocketmq.tags``, else the sink's ``tag`` setting; ``UNIQ_KEY`` <- header
  ``rocketmq.msg.id`` (a message keeps its id across clusters, so consumers that de-duplicate by
  id keep doing so after a failover), else a new id;
- other headers -> user properties. RocketMQ properties are text and may not hold the
  ``\\x01``/``\\x02`` separators: keys and values that are not UTF-8 or hold a separator are
  base64-encoded and marked (``CONNECT_KEY_BASE64``, ``CONNECT_BASE64_PROPERTIES``) so this
  project's source decodes them back to the same bytes; a header without value becomes ``""``.
"""

from __future__ import annotations

import base64
import os
import struct
import threading
import time
from typing import Any, Iterable

from connectors.rocketmq.protocol import MessageExt

__all__ = ["TAGS_HEADER", "MSG_ID_HEADER", "BORN_TIMESTAMP", "PLACEHOLDER", "SYSTEM_PROPERTIES", "message_body",
           "message_properties", "record_fields", "new_msg_id"]

TAGS_HEADER = "rocketmq.tags"
MSG_ID_HEADER = "rocketmq.msg.id"
NULL_VALUE = "CONNECT_NULL_VALUE"
EMPTY_VALUE = "CONNECT_EMPTY_VALUE"
PLACEHOLDER = b"\x00"  # the body of a record without value or with an empty one
BORN_TIMESTAMP = "CONNECT_BORN_TIMESTAMP"  # a record's own timestamp inside a batch born at another
BASE64_KEY = "CONNECT_KEY_BASE64"
BASE64_PROPERTIES = "CONNECT_BASE64_PROPERTIES"
# MessageConst's system property names: not copied to headers (and never written from them).
SYSTEM_PROPERTIES = frozenset({
    "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET",
    "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME",
    "MSG_REGION", "TRACE_ON", "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "__SHARDINGKEY",
    "TRAN_PREPARED_QUEUE_OFFSET", "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS", "INSTANCE_ID",
    "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE",
    "__STARTDELIVERTIME", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS",
    NULL_VALUE, EMPTY_VALUE, BASE64_KEY, BASE64_PROPERTIES, BORN_TIMESTAMP,
})
_SEPARATORS = ("\x01", "\x02")


def _text(value: Any) -> tuple[str, bool]:
    """(property-safe string, was base64-encoded)."""
    raw = value.encode() if value.__class__ is str else bytes(value)
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode(), True
    if _SEPARATORS[0] in text or _SEPARATORS[1] in text:
        return base64.b64encode(raw).decode(), True
    return text, False


def message_body(value: bytes | None) -> bytes:
    """The body of the message a record's (bytes) value becomes: :data:`PLACEHOLDER` for none or an
    empty one (marked by :func:`message_properties`)."""
    return value or PLACEHOLDER


def message_properties(key: Any, value: Any, headers: Iterable | None, tag: str | None,
                       msg_id: str | None = None) -> dict[str, str]:
    """The properties of the message a record becomes (see the module's doc)."""
    props: dict[str, str] = {}
    encoded = []
    if headers:
        for name, v in headers:
            if name == TAGS_HEADER:
                if v is not None:
                    tag = _text(v)[0]
                continue
            if name == MSG_ID_HEADER:
                if v is not None:
                    msg_id = _text(v)[0]
                continue
            if name in SYSTEM_PROPERTIES or not name or _SEPARATORS[0] in name or _SEPARATORS[1] in name:
                continue  # cannot be written as a user property
            if v is None:
                props[name] = ""
                continue
            text, was_encoded = _text(v)
            props[name] = text
            if was_encoded:
                encoded.append(name)
    if encoded:
        props[BASE64_PROPERTIES] = ",".join(encoded)
    if key is not None:
        text, was_encoded = _text(key)
        props["KEYS"] = text
        if was_encoded:
            props[BASE64_KEY] = "true"
    if tag:
        props["TAGS"] = tag
    if value is None:
        props[NULL_VALUE] = "true"
    elif not value:
        props[EMPTY_VALUE] = "true"
    props["UNIQ_KEY"] = msg_id or new_msg_id()
    return props


def record_fields(m: MessageExt) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]:
    """(key, value, headers, timestamp) of a stored message (see the module's doc)."""
    props = m.properties
    encoded = set(props.get(BASE64_PROPERTIES, "").split(",")) if BASE64_PROPERTIES in props else ()
    headers = []
    for name, v in props.items():
        if name in SYSTEM_PROPERTIES:
            continue
        headers.append((name, base64.b64decode(v) if name in encoded else v.encode()))
    tags = props.get("TAGS")
    if tags:
        headers.append((TAGS_HEADER, tags.encode()))
    headers.append((MSG_ID_HEADER, m.msg_id.encode()))
    keys = props.get("KEYS")
    key = None
    if keys:
        key = base64.b64decode(keys) if props.get(BASE64_KEY) == "true" else keys.encode()
    if props.get(NULL_VALUE) == "true":
        value = None
    elif props.get(EMPTY_VALUE) == "true":
        value = b""
    else:
        value = m.body
    born = props.get(BORN_TIMESTAMP)
    timestamp = int(born) if born and born.isdigit() else m.born_timestamp or m.store_timestamp
    return key, value, headers, timestamp


_ID_LOCK = threading.Lock()
_ID_PREFIX = struct.pack(">4sHi", bytes([127, 0, 0, 1]), os.getpid() & 0xFFFF, int.from_bytes(os.urandom(4), "big") >> 1)
_ID_EPOCH = int(time.mktime(time.strptime(time.strftime("%Y-%m-01"), "%Y-%m-%d")) * 1000)
_id_counter = 0


def new_msg_id() -> str:
    """A message id of ``MessageClientIDSetter``'s shape (32 hex: ip, pid, a random class hash,
    milliseconds since the start of the month, a counter): unique per process and time."""
    global _id_counter
    with _ID_LOCK:
        _id_counter = (_id_counter + 1) & 0xFFFF
        counter = _id_counter
    since = (int(time.time() * 1000) - _ID_EPOCH) & 0x7FFFFFFF
    return (_ID_PREFIX + struct.pack(">iH", since, counter)).hex().upper()
