"""MirrorMaker 2's checkpoint record format, so MM2's client library reads our checkpoints.

A consumer that fails over with ``RemoteClusterUtils.translateOffsets`` / ``MirrorClient.
remoteConsumerOffsets`` reads partition 0 of ``<source alias>.checkpoints.internal`` in the target
cluster from the beginning and keeps, per (group, target topic partition), the last checkpoint.
The records are Kafka's struct serialisation (``org.apache.kafka.common.protocol.types``, big-endian):

- key: ``group`` STRING, ``topic`` STRING, ``partition`` INT32 - the *target* (downstream) topic
  partition, as MirrorCheckpointTask names it after the replication policy;
- value: a header struct ``version`` INT16 (0), then ``upstreamOffset`` INT64,
  ``downstreamOffset`` INT64, ``metadata`` STRING (Checkpoint's VALUE_SCHEMA_V0).

STRING is an INT16 byte length and UTF-8 bytes. ``downstreamOffset`` is where the consumer resumes
in the target (the next record it reads), as ``OffsetAndMetadata`` holds it.
"""

from __future__ import annotations

import struct

__all__ = ["CHECKPOINTS_SUFFIX", "VERSION", "checkpoints_topic", "decode_key", "decode_value", "encode_key",
           "encode_value"]

VERSION = 0
CHECKPOINTS_SUFFIX = ".checkpoints.internal"  # DefaultReplicationPolicy.checkpointsTopic (Identity inherits it)
_INT16, _INT32, _INT64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


def checkpoints_topic(source_alias: str) -> str:
    """The topic MM2's client reads the checkpoints of ``source_alias`` from (in the target)."""
    return source_alias + CHECKPOINTS_SUFFIX


def _string(text: str) -> bytes:
    data = text.encode()
    if len(data) > 0x7FFF:
        raise ValueError(f"a string of {len(data)} bytes does not fit Kafka's STRING type (32,767 at most)")
    return _INT16.pack(len(data)) + data


def encode_key(group: str, topic: str, partition: int) -> bytes:
    return _string(group) + _string(topic) + _INT32.pack(partition)


def encode_value(upstream_offset: int, downstream_offset: int, metadata: str = "") -> bytes:
    return _INT16.pack(VERSION) + _INT64.pack(upstream_offset) + _INT64.pack(downstream_offset) + _string(metadata)


def _read_string(data: bytes, at: int) -> tuple[str, int]:
    (size,) = _INT16.unpack_from(data, at)
    at += 2
    if size < 0 or at + size > len(data):
        raise ValueError("a STRING runs past the end of the record")
    return data[at:at + size].decode(), at + size


def decode_key(data: bytes) -> tuple[str, str, int]:
    """(group, topic, partition) of a checkpoint key; ValueError when it is not one."""
    try:
        group, at = _read_string(data, 0)
        topic, at = _read_string(data, at)
        (partition,) = _INT32.unpack_from(data, at)
    except struct.error:
        raise ValueError("a checkpoint key is two STRINGs and an INT32") from None
    return group, topic, partition


def decode_value(data: bytes) -> tuple[int, int, str]:
    """(upstream offset, downstream offset, metadata) of a version-0 checkpoint value."""
    try:
        (version,) = _INT16.unpack_from(data, 0)
        if version != VERSION:
            raise ValueError(f"checkpoint value version {version}: only {VERSION} is known")
        upstream, downstream = _INT64.unpack_from(data, 2)[0], _INT64.unpack_from(data, 10)[0]
        metadata, _ = _read_string(data, 18)
    except struct.error:
        raise ValueError("a checkpoint value is an INT16 version, two INT64 and a STRING") from None
    return upstream, downstream, metadata
