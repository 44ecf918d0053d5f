"""MM2's Connect offsets records (mm2-offsets.<source>.internal) as the take-over reads them."""

from __future__ import annotations

from connectors.kafka.mm2offsets import _entry


def test_mm2_source_offset_records_are_read_for_their_alias_only():
    key = b'["MirrorSourceConnector",{"cluster":"A","partition":1,"topic":"orders"}]'
    assert _entry(key, b'{"offset":41}', "A") == (("orders", 1), 41)
    assert _entry(key, None, "A") == (("orders", 1), None)  # a tombstone forgets the partition
    assert _entry(key, b'{"offset":41}', "B") is None  # another flow's
    assert _entry(b'["MirrorCheckpointConnector",{"cluster":"A"}]', b'{"offset":1}', "A") is None


def test_malformed_records_are_skipped_not_trusted():
    key = b'["MirrorSourceConnector",{"cluster":"A","partition":1,"topic":"orders"}]'
    for bad_key, bad_value in [(b"not json", b'{"offset":1}'), (key, b"[]"), (key, b'{"offset":"x"}'),
                               (b'["MirrorSourceConnector",{"cluster":"A","topic":"t"}]', b'{"offset":1}'), (None, None)]:
        assert _entry(bad_key, bad_value, "A") is None
