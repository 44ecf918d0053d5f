"""MM2's checkpoint record bytes (Checkpoint.recordKey / recordValue), written and read back."""

from __future__ import annotations

import pytest

from connectors.replicator import mm2format


def test_key_and_value_bytes_follow_kafka_struct_serialisation():
    key = mm2format.encode_key("g", "S.t", 3)
    assert key == b"\x00\x01g\x00\x03S.t\x00\x00\x00\x03"
    value = mm2format.encode_value(65, 60, "")
    assert value == b"\x00\x00" + (65).to_bytes(8, "big") + (60).to_bytes(8, "big") + b"\x00\x00"
    assert mm2format.decode_key(key) == ("g", "S.t", 3)
    assert mm2format.decode_value(value) == (65, 60, "")
    assert mm2format.checkpoints_topic("us-west") == "us-west.checkpoints.internal"


def test_malformed_records_are_refused_not_misread():
    with pytest.raises(ValueError):
        mm2format.decode_key(b"\x00\x05ab")
    with pytest.raises(ValueError, match="version 1"):
        mm2format.decode_value(b"\x00\x01" + bytes(18))
    with pytest.raises(ValueError):
        mm2format.encode_key("x" * 40_000, "t", 0)
