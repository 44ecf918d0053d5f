"""worker.pipeline: parsing pipeline documents, reporting every mistake at once."""

from __future__ import annotations

import copy

import orjson
import pytest

from connect.errors import ConfigError, ConfigIssue
from connect.testing import MemorySinkConnector, MemorySourceConnector
from worker.pipeline import PIPELINE_CONFIG, SIDE_CONFIG, PipelineConfig, load_pipeline_file, parse_pipeline

VALID = {
    "name": "orders-mirror",
    "config": {
        "source.connector.class": "memory",
        "source.partitions": 3,
        "source.records": "10",
        "source.value.converter": "string",
        "sink.connector.class": "memory",
        "sink.name": "out",
        "sink.topic.template": "copy.{topic}",
        "sink.value.converter": "json",
        "dlq.topic": "orders-dlq",
        "dlq.name": "dead",
        "tasks.max": "2",
        "epoch.max.ms": 500,
        "errors.tolerance": "all",
        "errors.log.enable": True,
        "errors.deadletterqueue.topic.name": "orders-dlq",
        "name": "orders-mirror",
        "ignored.null": None,
    },
}


def doc(**config):
    """A copy of VALID with config keys replaced (None value -> key removed)."""
    d = copy.deepcopy(VALID)
    for key, value in config.items():
        key = key.replace("__", ".")
        if value is None:
            d["config"].pop(key, None)
        else:
            d["config"][key] = value
    return d


def issues(document) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as exc_info:
        parse_pipeline(document)
    return exc_info.value.issues


def test_valid_document_parses():
    p = parse_pipeline(VALID)
    assert isinstance(p, PipelineConfig)
    assert p.name == "orders-mirror"
    assert p.source_class is MemorySourceConnector
    assert p.sink_class is MemorySinkConnector
    assert p.settings == {
        "tasks.max": 2,
        "epoch.max.ms": 500,
        "epoch.max.records": 1_000_000,
        "max.in.flight.records": 100_000,
        "errors.retry.timeout": 30_000,
        "errors.retry.delay.max.ms": 5_000,
        "errors.tolerance": "all",
        "errors.log.enable": True,
        "errors.deadletterqueue.topic.name": "orders-dlq",
        "errors.deadletterqueue.context.headers.enable": True,
    }
    assert set(p.settings) == {k.name for k in PIPELINE_CONFIG.keys()}
    assert p.source_config == {"connector.class": "memory", "partitions": "3", "records": "10",
                               "value.converter": "string"}
    assert p.sink_config == {"connector.class": "memory", "name": "out", "topic.template": "copy.{topic}",
                             "value.converter": "json"}
    assert p.dlq_overrides == {"topic": "orders-dlq", "name": "dead"}
    # numbers and booleans became strings; None values were dropped
    assert p.raw["source.partitions"] == "3"
    assert p.raw["errors.log.enable"] == "true"
    assert p.raw["epoch.max.ms"] == "500"
    assert "ignored.null" not in p.raw
    assert all(isinstance(v, str) for v in p.raw.values())


def test_minimal_document_gets_defaults():
    p = parse_pipeline({"name": " x ",
                        "config": {"source.connector.class": "memory", "sink.connector.class": "memory"}})
    assert p.name == "x"
    assert p.settings == PIPELINE_CONFIG.parse({})
    assert p.dlq_overrides == {}
    assert p.source_config == {"connector.class": "memory"}


def test_config_hash_is_stable_and_sensitive():
    a = parse_pipeline(VALID)
    reordered = {"name": VALID["name"], "config": dict(reversed(list(VALID["config"].items())))}
    assert parse_pipeline(reordered).config_hash() == a.config_hash()
    assert parse_pipeline(doc(tasks__max="3")).config_hash() != a.config_hash()
    assert len(a.config_hash()) == 16


def test_booleans_written_as_strings():
    p = parse_pipeline(doc(errors__log__enable=False))
    assert p.raw["errors.log.enable"] == "false"
    assert p.settings["errors.log.enable"] is False


# -- malformed documents ----------------------------------------------------------------------


@pytest.mark.parametrize("document", [None, [], "text", 5, [VALID]])
def test_not_an_object(document):
    [issue] = issues(document)
    assert issue.key == "$"
    assert "must be a JSON object" in issue.message


@pytest.mark.parametrize("name", [None, "", "   ", 5])
def test_bad_or_missing_name(name):
    d = copy.deepcopy(VALID)
    if name is None:
        del d["name"]
    else:
        d["name"] = name
    [issue] = issues(d)
    assert issue.key == "$.name"
    assert "non-empty string" in issue.message


@pytest.mark.parametrize("config", [None, "a=b", ["x"], 3])
def test_config_not_an_object(config):
    d = {"name": "n", "config": config}
    if config is None:
        del d["config"]
    [issue] = issues(d)
    assert issue.key == "$.config"
    assert "must be an object" in issue.message


def test_config_not_an_object_still_reports_the_name():
    found = issues({"config": "nope"})
    assert [i.key for i in found] == ["$.name", "$.config"]


def test_unknown_top_level_field():
    d = copy.deepcopy(VALID)
    d["tasks"] = []
    d["extra"] = 1
    found = issues(d)
    assert [i.key for i in found] == ["$.extra", "$.tasks"]
    assert all("unknown field" in i.message for i in found)


@pytest.mark.parametrize("value, type_name", [({"a": 1}, "dict"), ([1, 2], "list")])
def test_nested_value(value, type_name):
    [issue] = issues(doc(**{"source.nested": value}))
    assert issue.key == '$.config["source.nested"]'
    assert f"must be a string, number or boolean, not {type_name}" in issue.message


def test_unknown_pipeline_key_has_hint():
    [issue] = issues(doc(**{"taskz.max": "2"}))
    assert issue.key == "taskz.max"
    assert issue.value == "2"
    assert "unknown pipeline key" in issue.message
    assert "did you mean" in issue.message
    assert "source.taskz.max" in issue.message and "sink.taskz.max" in issue.message


@pytest.mark.parametrize("value, message", [("zero", "must be an integer"), ("0", "must be at least 1"),
                                            ("-3", "must be at least 1"), ("1.5", "must be an integer")])
def test_bad_tasks_max(value, message):
    [issue] = issues(doc(tasks__max=value))
    assert issue.key == "tasks.max"
    assert issue.value == value
    assert message in issue.message


@pytest.mark.parametrize("value", ["some", "", "never"])
def test_bad_errors_tolerance(value):
    [issue] = issues(doc(errors__tolerance=value))
    assert issue.key == "errors.tolerance"
    assert issue.value == value
    assert issue.message == "must be one of none, all"


def test_unknown_connector_class():
    [issue] = issues(doc(**{"sink.connector.class": "nosuch"}))
    assert issue.key == "sink.connector.class"
    assert issue.value == "nosuch"
    assert "unknown sink connector 'nosuch'" in issue.message


def test_wrong_kind_connector_class():
    [issue] = issues(doc(**{"source.connector.class": "memory-sink"}))
    assert issue.key == "source.connector.class"
    assert "not a SourceConnector" in issue.message


def test_missing_and_empty_connector_class():
    found = issues(doc(**{"source.connector.class": None, "sink.connector.class": ""}))
    by_key = {i.key: i for i in found}
    assert set(by_key) == {"source.connector.class", "sink.connector.class"}
    assert "missing required value" in by_key["source.connector.class"].message
    assert by_key["sink.connector.class"].message == "must not be empty"


def test_bad_side_converter_is_prefixed():
    [issue] = issues(doc(**{"source.key.converter": "avro"}))
    assert issue.key == "source.key.converter"
    assert issue.value == "avro"
    assert "must be one of bytes, string, json" in issue.message


def test_connector_own_keys_validated_and_prefixed():
    found = issues(doc(**{"source.partitions": "many", "sink.reject.times": "x"}))
    assert sorted(i.key for i in found) == ["sink.reject.times", "source.partitions"]


def test_four_mistakes_yield_four_issues_in_one_error():
    d = doc(**{"taskz.max": "2", "tasks.max": "zero", "errors.tolerance": "sometimes",
               "sink.connector.class": "nosuch"})
    with pytest.raises(ConfigError) as exc_info:
        parse_pipeline(d, source="orders.json")
    err = exc_info.value
    assert sorted(i.key for i in err.issues) == ["errors.tolerance", "sink.connector.class", "tasks.max",
                                                 "taskz.max"]
    text = str(err)
    assert text.startswith("orders.json: 4 configuration errors:")
    for key in ("taskz.max", "tasks.max: invalid value 'zero'", "errors.tolerance: invalid value 'sometimes'",
                "sink.connector.class: invalid value 'nosuch'"):
        assert key in text


def test_side_config_declares_converters():
    assert {k.name for k in SIDE_CONFIG.keys()} == {"connector.class", "key.converter", "value.converter"}


# -- files ------------------------------------------------------------------------------------


def test_load_pipeline_file(tmp_path):
    path = tmp_path / "p.json"
    path.write_bytes(orjson.dumps(VALID))
    p = load_pipeline_file(path)
    assert p.name == "orders-mirror"
    assert load_pipeline_file(str(path)).raw == p.raw


def test_load_pipeline_file_invalid_json_names_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"name": "x", "config": {')
    with pytest.raises(ConfigError) as exc_info:
        load_pipeline_file(path)
    err = exc_info.value
    assert err.source == str(path)
    assert str(err).startswith(f"{path}: 1 configuration error")
    assert "not valid JSON" in str(err)


def test_load_pipeline_file_missing(tmp_path):
    path = tmp_path / "absent.json"
    with pytest.raises(ConfigError, match="cannot read") as exc_info:
        load_pipeline_file(path)
    assert exc_info.value.source == str(path)


def test_load_pipeline_file_invalid_config_names_the_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_bytes(orjson.dumps(doc(tasks__max="0")))
    with pytest.raises(ConfigError) as exc_info:
        load_pipeline_file(path)
    assert exc_info.value.source == str(path)
    assert str(exc_info.value).startswith(f"{path}: 1 configuration error")
    assert "tasks.max" in str(exc_info.value)
