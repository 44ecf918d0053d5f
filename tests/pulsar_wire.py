"""A schema registry on the Pulsar wire, in front of a real pulsar-lite broker (tests only).

pulsar-lite stores and serves messages but has no schema registry: it ignores the schema a
producer declares, assigns no schema version and does not answer GetSchema. ``SchemaRegistryProxy``
sits between pulsar-client and pulsar-lite, forwards every frame of the Pulsar binary protocol,
and plays the registry's part of the exchange the way a Pulsar broker does:

- PRODUCER with a schema (CommandProducer.schema): the schema is registered on the topic (a new
  version, or the version it already has) and the broker's PRODUCER_SUCCESS is given that
  version (CommandProducerSuccess.schema_version, 8 bytes big-endian), which pulsar-client then
  stamps on every message it publishes - so the messages pulsar-lite stores carry a real schema
  version. A schema the test marks incompatible is answered with ERROR IncompatibleSchema and
  never reaches pulsar-lite.
- GET_SCHEMA (topic, version): answered from the registry with GET_SCHEMA_RESPONSE.
- LOOKUP_RESPONSE: the broker URL is rewritten to the proxy's, so clients stay on the proxy.
- PARTITIONED_METADATA of a topic in ``missing``: answered TopicNotFound, as a broker with topic
  auto-creation off answers for a topic nobody created (pulsar-lite creates every topic asked for).

Everything else (SEND, MESSAGE, FLOW, ACK...) passes through unchanged. Field numbers follow
PulsarApi.proto (BaseCommand's field number for each command equals its type number).
"""

from __future__ import annotations

import socket
import struct
import threading

# BaseCommand types (= field numbers)
PRODUCER, ERROR, PRODUCER_SUCCESS, LOOKUP_RESPONSE, GET_SCHEMA, GET_SCHEMA_RESPONSE = 5, 14, 17, 24, 34, 35
PARTITIONED_METADATA, PARTITIONED_METADATA_RESPONSE, LOOKUP_FAILED = 21, 22, 1
SCHEMA_TYPES = {"NONE": 0, "STRING": 1, "JSON": 2, "PROTOBUF": 3, "AVRO": 4}
SCHEMA_NAMES = {v: k for k, v in SCHEMA_TYPES.items()}
INCOMPATIBLE_SCHEMA, TOPIC_NOT_FOUND = 18, 11  # ServerError


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def parse(buf: bytes) -> list[tuple[int, int, object]]:
    """Protobuf fields in order: (number, wire type, int or bytes)."""
    out, i = [], 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            size, i = _varint(buf, i)
            value, i = buf[i:i + size], i + size
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        out.append((number, wire, value))
    return out


def _put_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode(fields: list[tuple[int, int, object]]) -> bytes:
    out = bytearray()
    for number, wire, value in fields:
        out += _put_varint(number << 3 | wire)
        if wire == 0:
            out += _put_varint(value)
        elif wire == 2:
            out += _put_varint(len(value)) + value
        else:
            out += value
    return bytes(out)


def field(fields, number, default=None):
    return next((v for n, _, v in fields if n == number), default)


def command(kind: int, body: list) -> bytes:
    """A frame without payload: totalSize, commandSize, BaseCommand{type, <kind>: body}."""
    cmd = encode([(1, 0, kind), (kind, 2, encode(body))])
    return struct.pack(">II", len(cmd) + 4, len(cmd)) + cmd


class SchemaRegistryProxy:
    """See the module docstring. ``first_version``: the version the registry gives a topic's first
    schema (different registries number differently). ``incompatible``: definitions of schemas to refuse.
    ``producers``: every (topic, schema type, name, definition) a producer declared, in order.
    ``lookups``: every (topic, version) GetSchema asked for."""

    def __init__(self, upstream_port: int, *, first_version: int = 0, incompatible: set[str] | None = None):
        self.upstream = ("127.0.0.1", upstream_port)
        self.first_version = first_version
        self.incompatible = incompatible or set()
        self.registry: dict[str, list[tuple[str, str, str]]] = {}  # topic -> [(type, name, definition)]
        self.producers: list[tuple[str, str, str, str]] = []
        self.lookups: list[tuple[str, int]] = []
        self.answer_lookups = True  # False: GetSchema requests are swallowed (a registry that does not answer)
        self.missing: set[str] = set()  # full topic names the broker says do not exist
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self.service_url = f"pulsar://127.0.0.1:{self.port}"
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    # -- registry ------------------------------------------------------------------------------
    def _register(self, topic: str, schema: tuple[str, str, str]) -> int:
        with self._lock:
            versions = self.registry.setdefault(_base(topic), [])
            if schema not in versions:
                versions.append(schema)
            return self.first_version + versions.index(schema)

    def _lookup(self, topic: str, version: int):
        with self._lock:
            self.lookups.append((topic, version))
            versions = self.registry.get(_base(topic), [])
            i = version - self.first_version
            return versions[i] if 0 <= i < len(versions) else None

    # -- wire ----------------------------------------------------------------------------------
    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            self._socks += [client, upstream]
            pending: dict[int, tuple[str, int]] = {}  # producer request id -> (topic, version)
            threading.Thread(target=self._pump, args=(client, upstream, client, pending, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, client, pending, False), daemon=True).start()

    def _pump(self, src, dst, client, pending, from_client: bool) -> None:
        buf = b""
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                buf += chunk
                out = bytearray()
                while len(buf) >= 4:
                    total = struct.unpack(">I", buf[:4])[0]
                    if len(buf) < 4 + total:
                        break
                    frame, buf = buf[:4 + total], buf[4 + total:]
                    frame = self._frame(frame, client, pending, from_client)
                    if frame:
                        out += frame
                if out:
                    dst.sendall(out)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def _frame(self, frame: bytes, client, pending, from_client: bool) -> bytes | None:
        size = struct.unpack(">I", frame[4:8])[0]
        cmd, rest = parse(frame[8:8 + size]), frame[8 + size:]
        kind = field(cmd, 1)
        body = parse(field(cmd, kind, b""))
        if from_client and kind == PRODUCER:
            topic, request = field(body, 1).decode(), field(body, 3)
            schema = field(body, 7)
            if schema is not None:
                s = parse(schema)
                declared = (SCHEMA_NAMES.get(field(s, 4, 0), str(field(s, 4, 0))), field(s, 1, b"").decode(),
                            field(s, 3, b"").decode())
                self.producers.append((topic, *declared))
                if declared[2] in self.incompatible:
                    client.sendall(command(ERROR, [(1, 0, request), (2, 0, INCOMPATIBLE_SCHEMA),
                                                   (3, 2, f"schema {declared[1]} is incompatible".encode())]))
                    return None
                pending[request] = (topic, self._register(topic, declared))
        elif from_client and kind == GET_SCHEMA:
            request, topic = field(body, 1), field(body, 2).decode()
            version = struct.unpack(">q", field(body, 3))[0]
            if not self.answer_lookups:
                self.lookups.append((topic, version))
                return None
            found = self._lookup(topic, version)
            if found is None:
                reply = [(1, 0, request), (2, 0, TOPIC_NOT_FOUND), (3, 2, b"Schema not found")]
            else:
                schema = encode([(1, 2, found[1].encode()), (3, 2, found[2].encode()), (4, 0, SCHEMA_TYPES[found[0]])])
                reply = [(1, 0, request), (4, 2, schema), (5, 2, struct.pack(">q", version))]
            client.sendall(command(GET_SCHEMA_RESPONSE, reply))
            return None
        elif from_client and kind == PARTITIONED_METADATA and field(body, 1).decode() in self.missing:
            client.sendall(command(PARTITIONED_METADATA_RESPONSE, [(2, 0, field(body, 2)), (3, 0, LOOKUP_FAILED),
                                                                   (4, 0, TOPIC_NOT_FOUND), (5, 2, b"Topic not found")]))
            return None
        elif not from_client and kind == PRODUCER_SUCCESS:
            assigned = pending.pop(field(body, 1), None)
            if assigned is not None:
                body = [f for f in body if f[0] != 4] + [(4, 2, struct.pack(">q", assigned[1]))]
                return _rebuild(kind, body, rest)
        elif not from_client and kind == LOOKUP_RESPONSE:
            body = [(n, w, self.service_url.encode()) if n == 1 else (n, w, v) for n, w, v in body]
            return _rebuild(kind, body, rest)
        return frame

    def close(self) -> None:
        self._server.close()
        for s in self._socks:
            try:
                s.close()
            except OSError:
                pass


def _rebuild(kind: int, body: list, rest: bytes) -> bytes:
    cmd = encode([(1, 0, kind), (kind, 2, encode(body))])
    return struct.pack(">II", 4 + len(cmd) + len(rest), len(cmd)) + cmd + rest


def _base(topic: str) -> str:
    """Schemas belong to the topic, not to one partition of it."""
    head, sep, tail = topic.rpartition("-partition-")
    return head if sep and tail.isdigit() else topic
