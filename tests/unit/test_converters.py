"""connect.converters: bytes/string/json round trips, None passthrough, error messages."""

from __future__ import annotations

import pytest

from connect.converters import CONVERTERS, BytesConverter, JsonConverter, StringConverter, converter_for
from connect.errors import ConnectError, ConversionError

ALL = [BytesConverter, StringConverter, JsonConverter]


@pytest.mark.parametrize("cls", ALL)
def test_none_passes_through_both_ways(cls):
    conv = cls()
    assert conv.from_bytes(None) is None
    assert conv.to_bytes(None) is None


@pytest.mark.parametrize("cls", ALL)
def test_bytes_pass_through_to_bytes_unchanged(cls):
    payload = b"\x00\xff raw"
    assert cls().to_bytes(payload) is payload


# -- bytes --------------------------------------------------------------------------------------


class TestBytes:
    def test_from_bytes_is_identity(self):
        conv = BytesConverter()
        for data in (b"abc", "text", 5, {"a": 1}):
            assert conv.from_bytes(data) is data

    def test_round_trip(self):
        conv = BytesConverter()
        payload = bytes(range(256))
        assert conv.to_bytes(conv.from_bytes(payload)) == payload

    def test_bytearray_and_memoryview_become_bytes(self):
        conv = BytesConverter()
        out = conv.to_bytes(bytearray(b"ab"))
        assert out == b"ab" and type(out) is bytes
        out = conv.to_bytes(memoryview(b"cd"))
        assert out == b"cd" and type(out) is bytes

    @pytest.mark.parametrize("obj, type_name", [("text", "str"), ({"a": 1}, "dict"), (5, "int")])
    def test_non_bytes_rejected_with_advice(self, obj, type_name):
        with pytest.raises(ConversionError) as exc_info:
            BytesConverter().to_bytes(obj)
        message = str(exc_info.value)
        assert f"bytes converter got {type_name}" in message
        assert "'string' or 'json'" in message
        assert isinstance(exc_info.value, ConnectError)


# -- string -------------------------------------------------------------------------------------


class TestString:
    def test_round_trip_utf8(self):
        conv = StringConverter()
        payload = "héllo wörld ✓".encode()
        text = conv.from_bytes(payload)
        assert text == "héllo wörld ✓"
        assert conv.to_bytes(text) == payload

    def test_from_bytes_accepts_str_bytearray_memoryview(self):
        conv = StringConverter()
        assert conv.from_bytes("already") == "already"
        assert conv.from_bytes(bytearray(b"ba")) == "ba"
        assert conv.from_bytes(memoryview(b"mv")) == "mv"

    def test_bad_utf8_names_the_byte(self):
        with pytest.raises(ConversionError, match=r"not valid UTF-8 at byte 2"):
            StringConverter().from_bytes(b"ok\xff\xfe")

    @pytest.mark.parametrize("obj, expected", [(5, b"5"), (1.5, b"1.5"), (True, b"True"), ("é", "é".encode())])
    def test_to_bytes_scalars(self, obj, expected):
        assert StringConverter().to_bytes(obj) == expected

    @pytest.mark.parametrize("obj, type_name", [({"a": 1}, "dict"), ([1], "list")])
    def test_to_bytes_structured_rejected(self, obj, type_name):
        with pytest.raises(ConversionError) as exc_info:
            StringConverter().to_bytes(obj)
        assert str(exc_info.value) == f"string converter got {type_name}; use the 'json' converter"

    def test_from_bytes_int_is_not_silently_turned_into_nul_bytes(self):
        # bytes(5) is five zero bytes, so a source emitting an int value 5 is decoded to
        # "\x00\x00\x00\x00\x00": silent corruption. Expected: "5" or a ConversionError.
        try:
            result = StringConverter().from_bytes(5)
        except ConversionError:
            return
        assert result == "5"

    def test_from_bytes_unconvertible_object_raises_conversion_error(self):
        # The runner only turns ConversionError into a per-record failure (with position,
        # DLQ, errors.tolerance); a TypeError escapes and fails the whole task instead.
        with pytest.raises(ConversionError):
            StringConverter().from_bytes({"a": 1})


# -- json ---------------------------------------------------------------------------------------


class TestJson:
    @pytest.mark.parametrize("obj", [{"a": 1, "b": [1, 2.5, None, True], "c": {"d": "é"}}, [1, "x"], "s", 3, 2.5,
                                     True, False])
    def test_round_trip(self, obj):
        conv = JsonConverter()
        data = conv.to_bytes(obj)
        assert isinstance(data, bytes)
        assert conv.from_bytes(data) == obj

    def test_decodes_bytes_str_bytearray(self):
        conv = JsonConverter()
        assert conv.from_bytes(b'{"k": [1, 2]}') == {"k": [1, 2]}
        assert conv.from_bytes('{"k": null}') == {"k": None}
        assert conv.from_bytes(bytearray(b"[true]")) == [True]
        assert conv.from_bytes(memoryview(b"7")) == 7

    def test_compact_encoding(self):
        assert JsonConverter().to_bytes({"a": [1, 2]}) == b'{"a":[1,2]}'
        assert JsonConverter().to_bytes("x") == b'"x"'

    def test_non_payload_objects_pass_through_decode(self):
        obj = {"already": "decoded"}
        assert JsonConverter().from_bytes(obj) is obj
        assert JsonConverter().from_bytes(5) == 5

    @pytest.mark.parametrize("data", [b"not json", b'{"a": ', b"\xff", "{'single': 1}"])
    def test_bad_json(self, data):
        with pytest.raises(ConversionError, match=r"^not valid JSON: "):
            JsonConverter().from_bytes(data)

    def test_unencodable_object(self):
        with pytest.raises(ConversionError, match=r"^cannot encode as JSON: "):
            JsonConverter().to_bytes({"s": {1, 2}})
        with pytest.raises(ConversionError, match=r"^cannot encode as JSON: "):
            JsonConverter().to_bytes(object())


# -- cross-converter pipelines (what the runner does: source.from_bytes -> sink.to_bytes) ------


def test_string_source_to_json_sink():
    value = StringConverter().from_bytes(b"plain")
    assert JsonConverter().to_bytes(value) == b'"plain"'


def test_json_source_to_string_sink_rejects_objects():
    obj = JsonConverter().from_bytes(b'{"a": 1}')
    with pytest.raises(ConversionError, match="use the 'json' converter"):
        StringConverter().to_bytes(obj)


# -- registry -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, cls", [("bytes", BytesConverter), ("string", StringConverter), ("json", JsonConverter),
                                       ("JSON", JsonConverter), ("String", StringConverter)])
def test_converter_for(name, cls):
    conv = converter_for(name)
    assert type(conv) is cls
    assert conv.name == name.lower()


def test_converter_for_returns_fresh_instances():
    assert converter_for("json") is not converter_for("json")


def test_converter_for_unknown_lists_choices():
    with pytest.raises(ConversionError) as exc_info:
        converter_for("avro")
    assert str(exc_info.value) == "unknown converter 'avro'; choose one of bytes, string, json"


def test_registry_names_match_classes():
    assert {name: cls.name for name, cls in CONVERTERS.items()} == {
        "bytes": "bytes", "string": "string", "json": "json"}
