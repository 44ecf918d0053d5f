"""The RocketMQ remoting protocol: frames, commands, message properties, stored messages, batches.

Written here from the definitions in apache/rocketmq (each section names the class it follows) and
checked byte for byte against frames the Java classes and the C++ client 2.1.0 produce (see
``tests/unit/test_rocketmq_protocol.py``). Nothing here does IO.

Frame (``RemotingCommand.encode`` / ``NettyDecoder``)::

    int32 totalLength          4 + headerLength + bodyLength (not counting itself)
    int32 typeAndHeaderLength  serialize type in the high byte (0 JSON, 1 ROCKETMQ), length in the low 24 bits
    header                     JSON object, or RocketMQSerializable's binary layout
    body                       the rest

Every malformed input raises :class:`ProtocolError` naming what was wrong and where; no other
exception escapes the decoders.
"""

from __future__ import annotations

import struct
import zlib
from typing import Iterator, Mapping

import attrs
import orjson

__all__ = ["ProtocolError", "RemotingCommand", "FrameDecoder", "RequestCode", "ResponseCode", "MessageExt",
           "encode_properties", "decode_properties", "decode_messages", "encode_batch", "encode_stored_message",
           "body_crc", "offset_message_id", "JSON", "ROCKETMQ", "MAX_FRAME", "FLAG_COMMIT_OFFSET", "FLAG_SUSPEND",
           "FLAG_SUBSCRIPTION"]

JSON, ROCKETMQ = 0, 1  # SerializeType
MAX_FRAME = 16 * 1024 * 1024  # NettyDecoder's default frame limit (com.rocketmq.remoting.frameMaxLength)
RESPONSE_FLAG, ONEWAY_FLAG = 1, 2  # RemotingCommand RPC_TYPE / RPC_ONEWAY bits
FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION = 0x1, 0x2, 0x4  # PullSysFlag (the client's and the broker's)

# LanguageCode: the JSON header carries the name, the binary header the byte.
LANGUAGES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS",
             "RUST", "NODE_JS")
VERSION = 401  # MQVersion.Version.V4_9_4's ordinal: brokers answer routes in standard JSON from this version on


class ProtocolError(ValueError):
    """A frame, header or message that does not follow the protocol."""


class RequestCode:
    """apache/rocketmq ``RequestCode`` (the codes this project sends or serves)."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    GET_CONSUME_STATS = 208
    GET_CONSUMER_RUNNING_INFO = 307
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    GET_TOPIC_CONFIG = 351


class ResponseCode:
    """apache/rocketmq ``RemotingSysResponseCode`` + ``ResponseCode``."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    INVALID_PARAMETER = 29


@attrs.define(slots=True)
class RemotingCommand:
    """One request or response (``RemotingCommand``). ``ext_fields`` values are strings on the
    wire; numbers and booleans sent by other clients (the C++ client sends some) are read as
    their string form, as Java's decoder does."""

    code: int
    opaque: int = 0
    flag: int = 0
    ext_fields: dict[str, str] = attrs.field(factory=dict)
    body: bytes = b""
    remark: str | None = None
    language: str = "PYTHON"
    version: int = VERSION
    serialize_type: int = JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    def response(self, code: int, ext_fields: Mapping[str, object] | None = None, body: bytes = b"",
                 remark: str | None = None) -> RemotingCommand:
        """The answer to this request: same opaque, response flag set, answered in the request's
        serialize type; values become strings."""
        fields = {k: _text(v) for k, v in (ext_fields or {}).items() if v is not None}
        return RemotingCommand(code, self.opaque, RESPONSE_FLAG, fields, body, remark,
                               serialize_type=self.serialize_type)

    # -- encoding ---------------------------------------------------------------------------------
    def encode(self) -> bytes:
        header = self._json_header() if self.serialize_type == JSON else self._binary_header()
        if len(header) > 0xFFFFFF:
            raise ProtocolError(f"header of {len(header)} bytes does not fit the 24-bit header length")
        return struct.pack(">II", 4 + len(header) + len(self.body), (self.serialize_type << 24) | len(header)) \
            + header + self.body

    def _json_header(self) -> bytes:
        # Keys sorted and null values left out, as fastjson writes RemotingCommand.
        doc: dict[str, object] = {"code": self.code}
        if self.ext_fields:
            doc["extFields"] = {k: _text(v) for k, v in self.ext_fields.items()}
        doc.update(flag=self.flag, language=self.language, opaque=self.opaque)
        if self.remark is not None:
            doc["remark"] = self.remark
        doc.update(serializeTypeCurrentRPC="JSON", version=self.version)
        return orjson.dumps(doc)

    def _binary_header(self) -> bytes:
        # RocketMQSerializable.rocketMQProtocolEncode
        try:
            language = LANGUAGES.index(self.language)
        except ValueError:
            language = LANGUAGES.index("OTHER")
        remark = (self.remark or "").encode()
        fields = b"".join(_short_str(k) + _int_str(_text(v)) for k, v in self.ext_fields.items())
        return struct.pack(">hBhiii", _short(self.code), language, _short(self.version), self.opaque, self.flag,
                           len(remark)) + remark + struct.pack(">i", len(fields)) + fields

    # -- decoding ---------------------------------------------------------------------------------
    @classmethod
    def decode(cls, frame: bytes | memoryview) -> RemotingCommand:
        """One frame *without* its 4-byte total length (what :class:`FrameDecoder` yields)."""
        frame = bytes(frame)
        if len(frame) < 4:
            raise ProtocolError(f"frame of {len(frame)} bytes is shorter than its header length field")
        word = struct.unpack_from(">I", frame)[0]
        kind, size = word >> 24, word & 0xFFFFFF
        if size > len(frame) - 4:
            raise ProtocolError(f"header length {size} is beyond the frame ({len(frame) - 4} bytes after the field)")
        header, body = frame[4:4 + size], frame[4 + size:]
        if kind == JSON:
            cmd = cls._from_json(header)
        elif kind == ROCKETMQ:
            cmd = cls._from_binary(header)
        else:
            raise ProtocolError(f"unknown serialize type {kind} (0 JSON, 1 ROCKETMQ)")
        cmd.body = body
        return cmd

    @classmethod
    def _from_json(cls, header: bytes) -> RemotingCommand:
        try:
            doc = orjson.loads(header)
        except orjson.JSONDecodeError as exc:
            raise ProtocolError(f"JSON header is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ProtocolError(f"JSON header is a {type(doc).__name__}, not an object")
        fields = doc.get("extFields") or {}
        if not isinstance(fields, dict):
            raise ProtocolError(f"JSON header: extFields is a {type(fields).__name__}, not an object")
        out = {}
        for k, v in fields.items():
            if isinstance(v, (dict, list)):
                raise ProtocolError(f"JSON header: extFields.{k} is a {type(v).__name__}, not a string")
            if v is not None:
                out[k] = _text(v)
        try:
            # Java reads these as ints: a value beyond 32 bits is refused here, not left to fail when
            # the answer (which echoes code and opaque) is encoded.
            return cls(code=_int32(doc, "code"), opaque=_int32(doc, "opaque", 0), flag=_int32(doc, "flag", 0),
                       ext_fields=out, remark=_opt_str(doc, "remark"), language=str(doc.get("language") or "OTHER"),
                       version=_int32(doc, "version", 0), serialize_type=JSON)
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"JSON header: {exc}") from None

    @classmethod
    def _from_binary(cls, header: bytes) -> RemotingCommand:
        try:
            code, language, version, opaque, flag, remark_len = struct.unpack_from(">hBhiii", header)
        except struct.error:
            raise ProtocolError(f"binary header of {len(header)} bytes is shorter than its 17 fixed bytes") from None
        pos = 17
        remark, pos = _take(header, pos, remark_len, "remark")
        try:
            fields_len = struct.unpack_from(">i", header, pos)[0]
        except struct.error:
            raise ProtocolError("binary header ends before its extFields length") from None
        pos += 4
        if fields_len < 0 or pos + fields_len > len(header):
            raise ProtocolError(f"binary header: extFields length {fields_len} is beyond the header")
        end = pos + fields_len
        fields = {}
        while pos < end:
            try:
                key_len = struct.unpack_from(">h", header, pos)[0]
            except struct.error:
                raise ProtocolError("binary header: extFields entry cut in its key length") from None
            key, pos = _take(header, pos + 2, key_len, "extFields key", end)
            try:
                value_len = struct.unpack_from(">i", header, pos)[0]
            except struct.error:
                raise ProtocolError(f"binary header: extFields.{key} cut in its value length") from None
            value, pos = _take(header, pos + 4, value_len, f"extFields.{key}", end)
            if key:
                fields[key] = value
        lang = LANGUAGES[language] if language < len(LANGUAGES) else "OTHER"
        return cls(code=code, opaque=opaque, flag=flag, ext_fields=fields, remark=remark or None, language=lang,
                   version=version, serialize_type=ROCKETMQ)


class FrameDecoder:
    """Splits a byte stream into frames (``NettyDecoder``: a 4-byte length, then that many bytes).

    ``feed`` returns the commands completed by the new bytes. A length beyond ``max_frame`` or
    below the 4-byte header length field raises ProtocolError: the connection cannot be resynced
    and should be closed, as the Java side does."""

    def __init__(self, max_frame: int = MAX_FRAME):
        self._buf = bytearray()
        self._max = max_frame

    @property
    def buffered(self) -> int:
        """Bytes held of a frame not yet complete (what a server charges to its memory budget)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[RemotingCommand]:
        self._buf += data
        return list(self._frames())

    def _frames(self) -> Iterator[RemotingCommand]:
        buf = self._buf
        pos = 0
        try:
            while len(buf) - pos >= 4:
                size = struct.unpack_from(">I", buf, pos)[0]
                if size < 4 or size > self._max:
                    raise ProtocolError(f"frame length {size} is outside 4..{self._max}")
                if len(buf) - pos - 4 < size:
                    break
                yield RemotingCommand.decode(bytes(buf[pos + 4:pos + 4 + size]))
                pos += 4 + size
        finally:
            del buf[:pos]


# -- message properties (MessageDecoder.messageProperties2String / string2messageProperties) ------
NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR = "\x01", "\x02"


def encode_properties(props: Mapping[str, str]) -> str:
    """``name \\x01 value \\x02`` per entry, with the trailing separator (as the C++ client and
    Java 5.x write it; every decoder accepts both)."""
    out = []
    for k, v in props.items():
        if v is None:
            continue
        if NAME_VALUE_SEPARATOR in k or PROPERTY_SEPARATOR in k or PROPERTY_SEPARATOR in str(v):
            raise ProtocolError(f"property {k!r} holds a \\x01 or \\x02 separator and cannot be encoded")
        out.append(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}")
    return "".join(out)


def decode_properties(text: str) -> dict[str, str]:
    """Entries with an empty name or value are skipped, as Java's decoder skips them."""
    out = {}
    for item in text.split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            out[name] = value
    return out


# -- stored messages (MessageDecoder.decode / CommitLog record layout) ------------------------------
MAGIC_V1, MAGIC_V2 = 0xDAA320A7, 0xDAA320AB
COMPRESSED_FLAG, BORNHOST_V6_FLAG, STOREHOST_V6_FLAG = 0x1, 0x10, 0x20
COMPRESSION_TYPE_MASK = 0x700  # 0 or 3: zlib, 1: lz4, 2: zstd


@attrs.define(slots=True)
class MessageExt:
    """A stored message as a broker returns it (``MessageExt``)."""

    topic: str
    body: bytes
    queue_id: int
    queue_offset: int
    commit_log_offset: int = 0
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("0.0.0.0", 0)
    store_timestamp: int = 0
    store_host: tuple[str, int] = ("0.0.0.0", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    properties: dict[str, str] = attrs.field(factory=dict)
    body_crc: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get("KEYS", "").split(" ") if k]

    @property
    def offset_msg_id(self) -> str:
        return offset_message_id(self.store_host, self.commit_log_offset)

    @property
    def msg_id(self) -> str:
        """The client's id (``UNIQ_KEY``) when the producer set one, else the offset id."""
        return self.properties.get("UNIQ_KEY") or self.offset_msg_id


_FIXED = struct.Struct(">iIiiiqqiq")  # TOTALSIZE..BORNTIMESTAMP (44 bytes)


def decode_messages(data: bytes, *, decompress: bool = True) -> list[MessageExt]:
    """Every record of a PULL_MESSAGE body. A record that is cut short or inconsistent raises
    ProtocolError naming its index and byte position."""
    out = []
    pos, n = 0, len(data)
    while pos < n:
        try:
            out.append(_decode_one(data, pos, decompress))
        except ProtocolError as exc:
            raise ProtocolError(f"message {len(out)} at byte {pos}: {exc}") from None
        pos += struct.unpack_from(">i", data, pos)[0]
    return out


def _decode_one(data: bytes, start: int, decompress: bool) -> MessageExt:
    if len(data) - start < _FIXED.size:
        raise ProtocolError(f"{len(data) - start} bytes left, a record needs at least {_FIXED.size}")
    total, magic, crc, queue_id, flag, queue_offset, physical, sys_flag, born_ts = _FIXED.unpack_from(data, start)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise ProtocolError(f"magic code {magic:#010x} is neither {MAGIC_V1:#x} (v1) nor {MAGIC_V2:#x} (v2)")
    if total < _FIXED.size or start + total > len(data):
        raise ProtocolError(f"total size {total} is outside the {len(data) - start} bytes left")
    end = start + total
    pos = start + _FIXED.size
    born_host, pos = _host(data, pos, end, sys_flag & BORNHOST_V6_FLAG, "born host")
    store_ts, pos = _unpack(">q", data, pos, end, "store timestamp")
    store_host, pos = _host(data, pos, end, sys_flag & STOREHOST_V6_FLAG, "store host")
    reconsume, pos = _unpack(">i", data, pos, end, "reconsume times")
    prepared, pos = _unpack(">q", data, pos, end, "prepared transaction offset")
    body_len, pos = _unpack(">i", data, pos, end, "body length")
    body, pos = _bytes(data, pos, body_len, end, "body")
    topic_len, pos = _unpack(">B" if magic == MAGIC_V1 else ">H", data, pos, end, "topic length")
    topic, pos = _bytes(data, pos, topic_len, end, "topic")
    props_len, pos = _unpack(">h", data, pos, end, "properties length")
    props, pos = _bytes(data, pos, props_len, end, "properties")
    if pos != end:
        raise ProtocolError(f"total size {total} but the fields end after {pos - start} bytes")
    if decompress and sys_flag & COMPRESSED_FLAG:
        kind = (sys_flag & COMPRESSION_TYPE_MASK) >> 8
        if kind not in (0, 3):
            raise ProtocolError(f"body compressed with {'lz4' if kind == 1 else 'zstd'}: only zlib is supported")
        try:
            body = zlib.decompress(body)
        except zlib.error as exc:
            raise ProtocolError(f"compressed body does not inflate: {exc}") from None
    try:
        topic_text, props_text = topic.decode(), props.decode()
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"topic or properties not UTF-8: {exc}") from None
    return MessageExt(topic_text, body, queue_id, queue_offset, physical, flag, sys_flag, born_ts, born_host, store_ts,
                      store_host, reconsume, prepared, decode_properties(props_text), crc)


def encode_stored_message(m: MessageExt) -> bytes:
    """The v1 record of ``m`` (IPv4 hosts; ``body`` stored as given; the body CRC computed), as
    the embedded broker stores and returns it."""
    topic, props = m.topic.encode(), encode_properties(m.properties).encode()
    if len(topic) > 127:
        raise ProtocolError(f"topic of {len(topic)} bytes: a v1 record holds at most 127")
    if len(props) > 32767:
        raise ProtocolError(f"properties of {len(props)} bytes: a record holds at most 32767")
    total = _FIXED.size + 8 + 8 + 8 + 4 + 8 + 4 + len(m.body) + 1 + len(topic) + 2 + len(props)
    return (_FIXED.pack(total, MAGIC_V1, body_crc(m.body), m.queue_id, m.flag, m.queue_offset, m.commit_log_offset,
                        m.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG), m.born_timestamp)
            + _ipv4(m.born_host) + struct.pack(">q", m.store_timestamp) + _ipv4(m.store_host)
            + struct.pack(">iqi", m.reconsume_times, m.prepared_transaction_offset, len(m.body)) + m.body
            + bytes([len(topic)]) + topic + struct.pack(">h", len(props)) + props)


def encode_batch(messages: list[tuple[bytes, Mapping[str, str], int]]) -> bytes:
    """SEND_BATCH_MESSAGE body (``MessageDecoder.encodeMessages``): per message (body, properties,
    flag): total size, magic 0, CRC 0, flag, body, properties."""
    out = bytearray()
    for body, props, flag in messages:
        text = encode_properties(props).encode()
        if len(text) > 32767:
            raise ProtocolError(f"properties of {len(text)} bytes: a message holds at most 32767")
        out += struct.pack(">iiiii", 20 + len(body) + 2 + len(text), 0, 0, flag, len(body)) + body
        out += struct.pack(">h", len(text)) + text
    return bytes(out)


def decode_batch(data: bytes) -> list[tuple[bytes, dict[str, str], int]]:
    """The inverse of :func:`encode_batch` (what a broker does with a batch body)."""
    out, pos = [], 0
    while pos < len(data):
        start = pos
        try:
            total, _magic, _crc, flag, body_len = struct.unpack_from(">iiiii", data, pos)
        except struct.error:
            raise ProtocolError(f"batch message {len(out)} at byte {start}: cut in its header") from None
        end = start + total
        if total < 22 or end > len(data):
            raise ProtocolError(f"batch message {len(out)} at byte {start}: total size {total} is outside the body")
        body, pos = _bytes(data, pos + 20, body_len, end, "body")
        props_len, pos = _unpack(">h", data, pos, end, "properties length")
        props, pos = _bytes(data, pos, props_len, end, "properties")
        if pos != end:
            raise ProtocolError(f"batch message {len(out)} at byte {start}: total size {total} but fields end at {pos - start}")
        try:
            out.append((body, decode_properties(props.decode()), flag))
        except UnicodeDecodeError:
            raise ProtocolError(f"batch message {len(out)} at byte {start}: properties not UTF-8") from None
    return out


def body_crc(body: bytes) -> int:
    """``UtilAll.crc32``: CRC-32 with the top bit cleared."""
    return zlib.crc32(body) & 0x7FFFFFFF


def offset_message_id(store_host: tuple[str, int], commit_log_offset: int) -> str:
    """``MessageDecoder.createMessageId``: hex of store IP, port and commit-log offset."""
    return (_ipv4(store_host) + struct.pack(">q", commit_log_offset)).hex().upper()


# -- helpers --------------------------------------------------------------------------------------
def _text(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return v if isinstance(v, str) else str(v)


def _short(v: int) -> int:
    return ((v + 0x8000) & 0xFFFF) - 0x8000


def _short_str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _int_str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">i", len(b)) + b


def _int(doc: dict, key: str, default: int | None = None) -> int:
    v = doc.get(key, default)
    if v is None:
        raise ProtocolError(f"JSON header has no {key}")
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ProtocolError(f"JSON header: {key} is {v!r}, not an integer")
    try:
        return int(v)
    except ValueError:
        raise ProtocolError(f"JSON header: {key} is {v!r}, not an integer") from None


def _int32(doc: dict, key: str, default: int | None = None) -> int:
    v = _int(doc, key, default)
    if not -(1 << 31) <= v < (1 << 31):
        raise ProtocolError(f"JSON header: {key} {v} does not fit 32 bits")
    return v


def _opt_str(doc: dict, key: str) -> str | None:
    v = doc.get(key)
    return None if v is None else _text(v)


def _take(buf: bytes, pos: int, size: int, what: str, end: int | None = None) -> tuple[str, int]:
    limit = len(buf) if end is None else end
    if size < 0 or pos + size > limit:
        raise ProtocolError(f"binary header: {what} length {size} is beyond the header")
    try:
        return buf[pos:pos + size].decode(), pos + size
    except UnicodeDecodeError:
        raise ProtocolError(f"binary header: {what} is not UTF-8") from None


def _unpack(fmt: str, data: bytes, pos: int, end: int, what: str):
    size = struct.calcsize(fmt)
    if pos + size > end:
        raise ProtocolError(f"record ends inside its {what}")
    return struct.unpack_from(fmt, data, pos)[0], pos + size


def _bytes(data: bytes, pos: int, size: int, end: int, what: str) -> tuple[bytes, int]:
    if size < 0 or pos + size > end:
        raise ProtocolError(f"{what} length {size} is beyond the record")
    return bytes(data[pos:pos + size]), pos + size


def _host(data: bytes, pos: int, end: int, v6: int, what: str) -> tuple[tuple[str, int], int]:
    import ipaddress

    size = 16 if v6 else 4
    if pos + size + 4 > end:
        raise ProtocolError(f"record ends inside its {what}")
    address = str(ipaddress.ip_address(bytes(data[pos:pos + size])))
    return (address, struct.unpack_from(">i", data, pos + size)[0]), pos + size + 4


def _ipv4(host: tuple[str, int]) -> bytes:
    import socket

    try:
        packed = socket.inet_aton(host[0])
    except OSError:
        packed = b"\x00\x00\x00\x00"  # a v1 record carries IPv4 hosts only
    return packed + struct.pack(">i", host[1])
