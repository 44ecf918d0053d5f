"""Every built-in transform and predicate on its own: JSON objects, JSON bytes/text, Avro values
with their schema, tombstones, and the values each one cannot read (one record fails, named)."""

from __future__ import annotations

import datetime
import io

import fastavro
import orjson
import pytest

from connect.records import ConnectRecord, ValueSchema
from connect.transforms import TransformError, load_transforms
from connect.transforms.routing import date_formatter

ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "card", "type": "string"}, {"name": "qty", "type": "int"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "ship", "type": {"type": "record", "name": "Ship", "fields": [{"name": "city", "type": "string"}]}}]}
AVRO = ValueSchema("AVRO", orjson.dumps(ORDER).decode(), "shop.Order")


def avro(value: dict, schema: dict = ORDER) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def unavro(record: ConnectRecord) -> dict:
    schema = orjson.loads(record.value_schema.definition)
    return fastavro.schemaless_reader(io.BytesIO(record.value), fastavro.parse_schema(schema), None)


def rec(value=None, key=None, topic="orders", headers=None, schema=None, ts=1_700_000_000_123, offset=7, partition=2):
    return ConnectRecord(topic, key, value, headers, ts, {"topic": topic, "partition": partition}, {"offset": offset},
                         partition, schema)


def one(type_: str, record: ConnectRecord, **params) -> ConnectRecord | None:
    """Apply one transform configured with ``params`` (dots written as __)."""
    cfg = {"transforms": "t", "transforms.t.type": type_}
    cfg.update({f"transforms.t.{k.replace('__', '.')}": str(v) for k, v in params.items()})
    steps, _ = load_transforms(cfg).build()
    return steps[0][1](record)


ORDER_VALUE = {"id": 1, "card": "4111", "qty": 3, "note": "gift", "ship": {"city": "Oslo"}}


# -- routing -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("topic, expected", [("orders.eu", "dc1_orders_eu"), ("orders", "orders"),
                                              ("xorders.eu", "xorders.eu")])
def test_regex_router_matches_whole_topic(topic, expected):
    out = one("RegexRouter", rec(b"v", topic=topic), regex=r"orders\.(.*)", replacement="dc1_orders_$1")
    assert out.topic == expected and out.value == b"v" and out.source_offset == {"offset": 7}


def test_regex_router_takes_java_named_groups_and_replacements():
    out = one("RegexRouter", rec(b"v", topic="prod.orders"), regex=r"(?<env>\p{Alnum}+)\.(?<rest>.*)",
              replacement="dc1_${rest}_$1_\\$")
    assert out.topic == "dc1_orders_prod_$"


def test_timestamp_router_formats_utc_with_java_pattern():
    out = one("TimestampRouter", rec(b"v", ts=1_700_000_000_123), topic__format="${topic}_${timestamp}",
              timestamp__format="yyyy-MM-dd'T'HH.SSS")
    assert out.topic == "orders_2023-11-14T22.123"
    assert one("TimestampRouter", rec(b"v")).topic == "orders-20231114"  # Kafka's defaults
    with pytest.raises(TransformError, match="no timestamp"):
        one("TimestampRouter", rec(b"v", ts=None))
    with pytest.raises(ValueError, match="'EEE' is not supported"):
        date_formatter("EEE yyyy")
    assert date_formatter("yy''MM")(datetime.datetime(2024, 3, 5)) == "24'03"


# -- headers -----------------------------------------------------------------------------------------

def test_insert_header_appends_and_drop_headers_removes_every_copy():
    out = one("InsertHeader", rec(b"v", headers=[("a", b"1")]), header="origin", value__literal="dc1")
    assert out.headers == (("a", b"1"), ("origin", b"dc1"))
    r = rec(b"v", headers=[("a", b"1"), ("b", b"2"), ("a", None)])
    assert one("DropHeaders", r, headers="a,zz").headers == (("b", b"2"),)
    assert one("DropHeaders", rec(b"v"), headers="a").headers is None  # nothing to drop: unchanged


def test_header_from_copy_and_move():
    r = rec(orjson.dumps({"id": 1, "who": "ann", "tags": [1]}))
    copied = one("HeaderFrom$Value", r, fields="who,tags,missing", headers="h1,h2,h3", operation="copy")
    assert copied.headers == (("h1", b"ann"), ("h2", b"[1]"), ("h3", None))
    assert orjson.loads(copied.value) == {"id": 1, "who": "ann", "tags": [1]}
    moved = one("HeaderFrom$Value", r, fields="who", headers="h1", operation="move")
    assert orjson.loads(moved.value) == {"id": 1, "tags": [1]} and moved.headers == (("h1", b"ann"),)
    keyed = one("HeaderFrom$Key", rec(b"v", key={"k": 5}), fields="k", headers="hk", operation="move")
    assert keyed.key == {} and keyed.headers == (("hk", b"5"),)


def test_header_from_move_on_avro_drops_the_field_from_the_schema():
    out = one("HeaderFrom$Value", rec(avro(ORDER_VALUE), schema=AVRO), fields="card", headers="card", operation="move")
    assert ("card", b"4111") in out.headers
    assert "card" not in unavro(out) and [f["name"] for f in orjson.loads(out.value_schema.definition)["fields"]] == [
        "id", "qty", "note", "ship"]


# -- field transforms: JSON forms ------------------------------------------------------------------

@pytest.mark.parametrize("value, back", [
    ({"card": "4111", "n": 5, "f": 1.5, "b": True, "l": [1], "o": {"x": 1}, "z": None, "keep": "k"}, lambda v: v),
    (orjson.dumps({"card": "4111", "n": 5, "f": 1.5, "b": True, "l": [1], "o": {"x": 1}, "z": None, "keep": "k"}),
     orjson.loads),
    ('{"card": "4111", "n": 5, "f": 1.5, "b": true, "l": [1], "o": {"x": 1}, "z": null, "keep": "k"}', orjson.loads),
])
def test_mask_field_empties_each_type_in_each_form(value, back):
    out = one("MaskField$Value", rec(value), fields="card,n,f,b,l,o,z,absent")
    assert type(out.value) is type(value)  # written back in the form it came in
    assert back(out.value) == {"card": "", "n": 0, "f": 0.0, "b": False, "l": [], "o": {}, "z": None, "keep": "k"}


def test_mask_field_replacement_and_its_limits():
    out = one("MaskField$Value", rec({"card": "4111", "n": 5}), fields="card,n", replacement="9")
    assert out.value == {"card": "9", "n": 9}
    with pytest.raises(TransformError, match="'card' is a number and the replacement is not one"):
        one("MaskField$Value", rec({"card": 4111}), fields="card", replacement="xxx")
    with pytest.raises(TransformError, match="boolean"):
        one("MaskField$Value", rec({"ok": True}), fields="ok", replacement="1")
    assert one("MaskField$Key", rec(b"v", key=b'{"user": "ann"}'), fields="user").key == b'{"user":""}'


@pytest.mark.parametrize("value, match", [
    (b"\x00\x01binary", "bytes that are not JSON"), ("plain text", "text that are not JSON"),
    (b"[1, 2]", "a list, not an object"), ({1, 2}, "a set, not an object"), (b'"s"', "a string, not an object")])
def test_field_transform_fails_the_record_on_what_it_cannot_read(value, match):
    with pytest.raises(TransformError, match=match):
        one("MaskField$Value", rec(value), fields="card")


def test_field_transforms_pass_tombstones_and_refuse_other_schema_types():
    for type_, params in (("MaskField$Value", {"fields": "a"}), ("ReplaceField$Value", {"exclude": "a"}),
                          ("InsertField$Value", {"topic__field": "t"}), ("Cast$Value", {"spec": "a:int8"}),
                          ("ExtractField$Value", {"field": "a"}), ("ValueToKey", {"fields": "a"}),
                          ("HeaderFrom$Value", {"fields": "a", "headers": "h", "operation": "copy"})):
        tomb = rec(None, key=b"k")
        assert one(type_, tomb, **params) is tomb
    with pytest.raises(TransformError, match="Pulsar PROTOBUF schema"):
        one("MaskField$Value", rec(b"\x08\x01", schema=ValueSchema("PROTOBUF", "{}", "x")), fields="a")


def test_replace_field_include_exclude_renames_and_old_names():
    v = {"a": 1, "b": 2, "c": 3, "d": 4}
    assert one("ReplaceField$Value", rec(v), exclude="b", renames="a:alpha,c:gamma").value == {"alpha": 1, "gamma": 3,
                                                                                              "d": 4}
    assert one("ReplaceField$Value", rec(v), include="a,b", exclude="b").value == {"a": 1}
    assert one("ReplaceField$Value", rec(v), blacklist="a,b", whitelist="a,c").value == {"c": 3}
    assert one("ReplaceField$Key", rec(b"v", key=b'{"a":1,"b":2}'), exclude="a").key == b'{"b":2}'


def test_insert_field_metadata_required_and_optional():
    r = rec({"x": 1}, topic="t1", offset=41, partition=3, ts=1_700_000_000_000)
    out = one("InsertField$Value", r, topic__field="topic!", partition__field="p", offset__field="off?",
              timestamp__field="ts", static__field="dc", static__value="dc1")
    assert out.value == {"x": 1, "topic": "t1", "p": 3, "off": 41, "ts": 1_700_000_000_000, "dc": "dc1"}
    no_ts = rec({"x": 1}, ts=None)
    assert one("InsertField$Value", no_ts, timestamp__field="ts").value == {"x": 1}  # optional: left out
    with pytest.raises(TransformError, match="no timestamp for required field 'ts'"):
        one("InsertField$Value", no_ts, timestamp__field="ts!")
    assert one("InsertField$Key", rec(b"v", key={"k": 1}), topic__field="t").key == {"k": 1, "t": "orders"}


@pytest.mark.parametrize("spec, value, expected", [
    ("n:int8,f:int64,s:float64,b:string,t:boolean", {"n": "12", "f": 3.9, "s": "2.5", "b": True, "t": "TRUE"},
     {"n": 12, "f": 3, "s": 2.5, "b": "true", "t": True}),
    ("o:string,z:int32", {"o": {"a": [1]}, "z": None}, {"o": '{"a":[1]}', "z": None}),
])
def test_cast_fields(spec, value, expected):
    assert one("Cast$Value", rec(value), spec=spec).value == expected


def test_cast_whole_value_and_failures():
    assert one("Cast$Value", rec('"42"'), spec="int32").value == "42"  # JSON text "42" -> 42, written as text
    assert one("Cast$Value", rec(42.7), spec="int64").value == 42  # a decoded value stays an object
    assert one("Cast$Key", rec(b"v", key=b"7"), spec="string").key == b'"7"'
    with pytest.raises(TransformError, match="a number out of the range of int8"):  # no record value in reasons
        one("Cast$Value", rec({"n": 300}), spec="n:int8")
    with pytest.raises(TransformError, match="field 'n': cannot cast a string to int16"):
        one("Cast$Value", rec({"n": "abc"}), spec="n:int16")
    with pytest.raises(TransformError, match="cannot cast a list to boolean"):
        one("Cast$Value", rec({"n": [1]}), spec="n:boolean")


def test_value_to_key_and_extract_field():
    assert one("ValueToKey", rec({"id": 1, "x": 2}), fields="id").key == {"id": 1}
    assert one("ValueToKey", rec(b'{"id": 1, "x": 2}'), fields="id,x").key == b'{"id":1,"x":2}'
    with pytest.raises(TransformError, match="no field 'nope'"):
        one("ValueToKey", rec({"id": 1}), fields="nope")
    assert one("ExtractField$Value", rec({"id": 1, "o": {"a": 2}}), field="o").value == {"a": 2}
    assert one("ExtractField$Value", rec(b'{"id": 1}'), field="id").value == b"1"
    assert one("ExtractField$Value", rec({"id": 1}), field="nope").value is None  # Kafka's: a missing field is null
    assert one("ExtractField$Key", rec(b"v", key={"id": 9}), field="id").key == 9


# -- Avro values ------------------------------------------------------------------------------------

def test_mask_field_on_avro_keeps_the_schema():
    out = one("MaskField$Value", rec(avro(ORDER_VALUE), schema=AVRO), fields="card,qty,note")
    assert out.value_schema is AVRO
    assert unavro(out) == {**ORDER_VALUE, "card": "", "qty": 0, "note": ""}


def test_avro_schema_follows_replace_insert_and_cast():
    r = rec(avro(ORDER_VALUE), schema=AVRO)
    out = one("ReplaceField$Value", r, exclude="note", renames="card:pan")
    assert unavro(out) == {"id": 1, "pan": "4111", "qty": 3, "ship": {"city": "Oslo"}}
    assert out.value_schema.name == "shop.Order" and out.value_schema.type == "AVRO"
    out = one("InsertField$Value", r, topic__field="topic!", offset__field="off")
    assert unavro(out) == {**ORDER_VALUE, "topic": "orders", "off": 7}
    fields = {f["name"]: f["type"] for f in orjson.loads(out.value_schema.definition)["fields"]}
    assert fields["topic"] == "string" and fields["off"] == ["null", "long"]
    out = one("Cast$Value", r, spec="qty:string,id:float64")
    assert unavro(out) == {**ORDER_VALUE, "qty": "3", "id": 1.0}
    ship = one("ExtractField$Value", r, field="ship")
    assert unavro(ship) == {"city": "Oslo"} and orjson.loads(ship.value_schema.definition)["name"] == "Ship"
    with pytest.raises(TransformError, match="'card' of the Avro value is not a record"):
        one("ExtractField$Value", r, field="card")
    with pytest.raises(TransformError, match="cannot be cast whole"):
        one("Cast$Value", r, spec="string")


def test_avro_derived_schema_is_built_once_per_schema():
    steps, _ = load_transforms({"transforms": "t", "transforms.t.type": "ReplaceField$Value",
                                "transforms.t.exclude": "note"}).build()
    a = steps[0][1](rec(avro(ORDER_VALUE), schema=AVRO))
    b = steps[0][1](rec(avro({**ORDER_VALUE, "id": 2}), schema=AVRO))
    assert a.value_schema is b.value_schema


def test_avro_value_that_does_not_decode_fails_the_record():
    with pytest.raises(TransformError, match="not Avro data of its schema shop.Order"):
        one("MaskField$Value", rec(b"\x02", schema=AVRO), fields="card")


def test_set_schema_metadata_renames_pulsar_schema_and_avro_record():
    out = one("SetSchemaMetadata$Value", rec(avro(ORDER_VALUE), schema=AVRO), schema__name="dc1.shop.Order2")
    assert out.value_schema.name == "dc1.shop.Order2" and out.value == avro(ORDER_VALUE)
    definition = orjson.loads(out.value_schema.definition)
    assert (definition["namespace"], definition["name"]) == ("dc1.shop", "Order2")
    plain = rec(b"v")
    assert one("SetSchemaMetadata$Value", plain, schema__name="x") is plain


# -- predicates and Filter -------------------------------------------------------------------------

def _with_predicate(ptype: str, negate: bool, **pparams) -> list:
    cfg = {"transforms": "drop", "transforms.drop.type": "Filter", "transforms.drop.predicate": "p",
           "transforms.drop.negate": str(negate).lower(), "predicates": "p", "predicates.p.type": ptype}
    cfg.update({f"predicates.p.{k}": v for k, v in pparams.items()})
    steps, _ = load_transforms(cfg).build()
    return steps[0][1]


@pytest.mark.parametrize("ptype, params, hit, miss", [
    ("TopicNameMatches", {"pattern": "orders\\..*"}, rec(b"v", topic="orders.eu"), rec(b"v", topic="xorders.eu")),
    ("HasHeaderKey", {"name": "skip"}, rec(b"v", headers=[("skip", None)]), rec(b"v", headers=[("other", b"")])),
    ("RecordIsTombstone", {}, rec(None), rec(b"")),
    ("org.apache.kafka.connect.transforms.predicates.RecordIsTombstone", {}, rec(None), rec(b"v")),
])
def test_predicates_with_and_without_negate(ptype, params, hit, miss):
    step = _with_predicate(ptype, False, **params)
    assert step(hit) is None and step(miss) is miss
    step = _with_predicate(ptype, True, **params)
    assert step(hit) is hit and step(miss) is None


def test_filter_alone_drops_everything():
    assert one("Filter", rec(b"v")) is None
