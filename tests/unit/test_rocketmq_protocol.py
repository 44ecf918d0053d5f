"""The RocketMQ remoting codec against golden bytes.

Golden frames: produced by running apache/rocketmq 4.9.4's own classes (RemotingCommand with
fastjson 1.2.83, RocketMQSerializable, MessageDecoder) and by the C++ client 2.1.0's encoder; the
hex is copied from those runs. The fuzz test feeds truncated and mutated frames and records:
only ProtocolError may come out.
"""

from __future__ import annotations

import random
import struct
import zlib

import pytest

from connectors.rocketmq.protocol import (
    JSON,
    ROCKETMQ,
    FrameDecoder,
    MessageExt,
    ProtocolError,
    RemotingCommand,
    body_crc,
    decode_batch,
    decode_messages,
    decode_properties,
    encode_batch,
    encode_properties,
    encode_stored_message,
    offset_message_id,
)

# RemotingCommand.createRequestCommand(105, {topic=T}), opaque 1, version 0 (Java, JSON header)
JAVA_ROUTE_JSON = bytes.fromhex(
    "0000007d000000797b22636f6465223a3130352c226578744669656c6473223a7b22746f706963223a2254227d2c22666c6167223a302c"
    "226c616e6775616765223a224a415641222c226f7061717565223a312c2273657269616c697a655479706543757272656e74525043223a"
    "224a534f4e222c2276657273696f6e223a307d")
# the same request, ROCKETMQ binary header (RocketMQSerializable)
JAVA_ROUTE_BINARY = bytes.fromhex("000000250100002100690000000000000100000000000000000000000c0005746f7069630000000154")
# the same request as the C++ client 2.1.0 encodes it (jsoncpp, signed, trailing newline, version 333)
CPP_ROUTE = bytes.fromhex(
    "000000ba000000b67b22636f6465223a3130352c226578744669656c6473223a7b224163636573734b6579223a22222c224f6e7343"
    "68616e6e656c223a22414c4959554e222c225369676e6174757265223a225064527174624b7a383838665a36576a5332656a65544f"
    "476747303d222c22746f706963223a2254227d2c22666c6167223a302c226c616e6775616765223a22435050222c226f7061717565"
    "223a312c2272656d61726b223a22222c2276657273696f6e223a3333337d0a")
# Java broker: SEND_MESSAGE response
JAVA_SEND_RESPONSE = bytes.fromhex(
    "000000e9000000e57b22636f6465223a302c226578744669656c6473223a7b2271756575654964223a2230222c2254524143455f4f4e22"
    "3a2274727565222c224d53475f524547494f4e223a2244656661756c74526567696f6e222c226d73674964223a22374630303030303130"
    "3030303241394630303030303030303030303030303030222c2271756575654f6666736574223a2230227d2c22666c6167223a312c226c"
    "616e6775616765223a224a415641222c226f7061717565223a372c2273657269616c697a655479706543757272656e74525043223a224a"
    "534f4e222c2276657273696f6e223a307d")
# MessageDecoder.encode: topic T, body hello, queue 1 offset 2, commit log 300, born 1700000000000 @127.0.0.1:54321,
# store 1700000000123 @127.0.0.1:10911, properties a=b, UNIQ_KEY=..., TAGS=TagA (4.9.4: no trailing separator)
JAVA_STORED = bytes.fromhex(
    "00000098daa320a73610a68600000001000000000000000000000002000000000000012c000000000000018bcfe568007f0000010000d431"
    "0000018bcfe5687b7f00000100002a9f0000000000000000000000000000000568656c6c6f0154003761016202554e49515f4b4559013746"
    "30303030303130303031303030303030303030303030303030303030414102544147530154616741")
# MessageDecoder.encodeMessage(new Message("T", "TagA", "k1", "hello")): a SEND_BATCH_MESSAGE item
JAVA_BATCH_ITEM = bytes.fromhex(
    "000000360000000000000000000000000000000568656c6c6f001b4b455953016b310257414954017472756502544147530154616741")


def test_encodes_a_route_request_byte_for_byte_as_java_does():
    cmd = RemotingCommand(105, opaque=1, ext_fields={"topic": "T"}, language="JAVA", version=0)
    assert cmd.encode() == JAVA_ROUTE_JSON
    cmd.serialize_type = ROCKETMQ
    assert cmd.encode() == JAVA_ROUTE_BINARY


@pytest.mark.parametrize("frame, language, version, kind", [
    (JAVA_ROUTE_JSON, "JAVA", 0, JSON), (JAVA_ROUTE_BINARY, "JAVA", 0, ROCKETMQ), (CPP_ROUTE, "CPP", 333, JSON)])
def test_decodes_route_requests_from_java_and_the_cpp_client(frame, language, version, kind):
    (cmd,) = FrameDecoder().feed(frame)
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.language, cmd.version, cmd.serialize_type) == (105, 1, 0, language,
                                                                                                version, kind)
    assert cmd.ext_fields["topic"] == "T" and not cmd.is_response and cmd.body == b""


def test_decodes_a_java_send_response_and_answers_in_the_requests_serialize_type():
    (resp,) = FrameDecoder().feed(JAVA_SEND_RESPONSE)
    assert resp.is_response and resp.opaque == 7 and resp.code == 0
    assert resp.ext_fields == {"queueId": "0", "TRACE_ON": "true", "MSG_REGION": "DefaultRegion",
                               "msgId": "7F00000100002A9F0000000000000000", "queueOffset": "0"}
    (req,) = FrameDecoder().feed(JAVA_ROUTE_BINARY)
    answer = req.response(0, {"queueOffset": 12, "flag": True}, body=b"{}")
    again = RemotingCommand.decode(answer.encode()[4:])
    assert (again.serialize_type, again.opaque, again.is_response, again.ext_fields, again.body) == (
        ROCKETMQ, 1, True, {"queueOffset": "12", "flag": "true"}, b"{}")


def test_numbers_in_ext_fields_read_as_strings_as_java_reads_the_cpp_clients_headers():
    header = b'{"code":11,"extFields":{"queueId":0,"sysFlag":6,"topic":"T"},"flag":0,"language":"CPP","opaque":5,"version":333}'
    cmd = RemotingCommand.decode(struct.pack(">I", len(header)) + header)
    assert cmd.ext_fields == {"queueId": "0", "sysFlag": "6", "topic": "T"}


def test_frames_split_anywhere_in_a_stream_come_out_whole_and_in_order():
    stream = JAVA_ROUTE_JSON + CPP_ROUTE + JAVA_SEND_RESPONSE + JAVA_ROUTE_BINARY
    for cut in range(1, 40):
        decoder, got = FrameDecoder(), []
        for i in range(0, len(stream), cut):
            got += decoder.feed(stream[i:i + cut])
        assert [(c.code, c.opaque) for c in got] == [(105, 1), (105, 1), (0, 7), (105, 1)]


def test_decodes_a_stored_message_written_by_java_and_encodes_it_back():
    (m,) = decode_messages(JAVA_STORED)
    assert (m.topic, m.body, m.queue_id, m.queue_offset, m.commit_log_offset) == ("T", b"hello", 1, 2, 300)
    assert (m.born_timestamp, m.born_host, m.store_timestamp, m.store_host) == (
        1_700_000_000_000, ("127.0.0.1", 54321), 1_700_000_000_123, ("127.0.0.1", 10911))
    assert m.properties == {"a": "b", "UNIQ_KEY": "7F0000010001000000000000000000AA", "TAGS": "TagA"}
    assert m.body_crc == body_crc(b"hello") == 0x3610A686
    assert m.offset_msg_id == "7F00000100002A9F000000000000012C" == offset_message_id(("127.0.0.1", 10911), 300)
    assert m.msg_id == "7F0000010001000000000000000000AA" and m.tags == "TagA"
    # Ours writes the trailing property separator (as C++ and Java 5 do): same record otherwise.
    expected = bytearray(JAVA_STORED)
    expected[0:4] = struct.pack(">i", len(JAVA_STORED) + 1)
    expected[-2 - 0x37:-0x37] = struct.pack(">h", 0x38)
    ours = encode_stored_message(m)
    assert ours == bytes(expected) + b"\x02"
    assert decode_messages(ours) == [m]


def test_compressed_bodies_inflate_and_several_records_decode_in_order():
    big = b"x" * 10_000
    records = [MessageExt("T", zlib.compress(big), 0, 5, 1000, sys_flag=1, properties={"KEYS": "a b"}),
               MessageExt("T", b"plain", 0, 6, 2000)]
    data = b"".join(encode_stored_message(r) for r in records)
    out = decode_messages(data)
    assert [m.body for m in out] == [big, b"plain"] and out[0].keys == ["a", "b"]
    assert [m.queue_offset for m in out] == [5, 6]


def test_batch_items_match_java_and_round_trip():
    props = {"KEYS": "k1", "WAIT": "true", "TAGS": "TagA"}
    ours = encode_batch([(b"hello", props, 0)])
    expected = bytearray(JAVA_BATCH_ITEM)  # ours adds the trailing separator: sizes one more
    expected[0:4] = struct.pack(">i", len(JAVA_BATCH_ITEM) + 1)
    expected[25:27] = struct.pack(">h", 0x1C)
    assert ours == bytes(expected) + b"\x02"
    assert decode_batch(JAVA_BATCH_ITEM) == [(b"hello", props, 0)]
    assert decode_batch(ours + ours) == [(b"hello", props, 0)] * 2


def test_properties_accept_both_trailing_forms_and_refuse_separators_inside():
    assert decode_properties("a\x01b\x02c\x01d") == decode_properties("a\x01b\x02c\x01d\x02") == {"a": "b", "c": "d"}
    assert encode_properties({"a": "b"}) == "a\x01b\x02"
    with pytest.raises(ProtocolError, match="separator"):
        encode_properties({"a": "b\x02c"})


@pytest.mark.parametrize("frame, words", [
    (struct.pack(">I", 2) + b"ab", "frame length 2 is outside"),
    (struct.pack(">II", 6, 50) + b"{}", "header length 50 is beyond"),
    (struct.pack(">II", 6, 2) + b"[]", "not an object"),
    (struct.pack(">II", 6, 2) + b"{x", "not valid JSON"),
    (struct.pack(">II", 10, 0x05000006) + b"{}{}{}", "unknown serialize type 5"),
    (struct.pack(">II", 8, 4) + b'{"a"', "not valid JSON"),
])
def test_malformed_frames_say_what_is_wrong(frame, words):
    with pytest.raises(ProtocolError, match=words):
        FrameDecoder().feed(frame)


def test_a_frame_length_beyond_the_limit_is_refused_before_buffering_it():
    with pytest.raises(ProtocolError, match="outside 4.."):
        FrameDecoder(max_frame=1024).feed(struct.pack(">I", 1 << 30))


def test_fuzz_truncated_and_mutated_frames_and_records_raise_only_protocol_errors():
    rng = random.Random(20261122)
    samples = [JAVA_ROUTE_JSON, JAVA_ROUTE_BINARY, CPP_ROUTE, JAVA_SEND_RESPONSE]
    for _ in range(3000):
        base = bytearray(rng.choice(samples))
        for _ in range(rng.randint(1, 4)):
            base[rng.randrange(len(base))] = rng.randrange(256)
        data = bytes(base[:rng.randint(0, len(base))])
        try:
            FrameDecoder(max_frame=1 << 20).feed(data)
        except ProtocolError:
            pass
        try:
            RemotingCommand.decode(data[4:])
        except ProtocolError:
            pass
    for _ in range(3000):
        rec = bytearray(JAVA_STORED if rng.random() < 0.5 else JAVA_BATCH_ITEM)
        for _ in range(rng.randint(1, 3)):
            rec[rng.randrange(len(rec))] = rng.randrange(256)
        data = bytes(rec[:rng.randint(0, len(rec))])
        for decode in (decode_messages, decode_batch):
            try:
                decode(data)
            except ProtocolError:
                pass
