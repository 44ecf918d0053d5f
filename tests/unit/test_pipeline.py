"""worker.pipeline: parsing pipeline documents, reporting every mistake at once."""

from __future__ import annotations

import copy

import orjson
import pytest

from connect.config import ConfigDef, Type
from connect.connector import SinkConnector
from connect.errors import ConfigError, ConfigIssue
from connect.plugins import register_plugin
from connect.tasks.policy import RunnerPolicy
from connect.testing import MemorySinkConnector, MemorySinkTask, MemorySourceConnector
from worker.pipeline import PIPELINE_CONFIG, SIDE_CONFIG, PipelineConfig, load_pipeline_file, parse_pipeline
from worker.settings import FrameworkSettings, RestartPolicy

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
    assert p.settings == FrameworkSettings(
        tasks_max=2,
        runner=RunnerPolicy(epoch_max_ms=500, epoch_max_records=1_000_000, epoch_grace_ms=2_000,
                            max_in_flight_records=100_000, retry_timeout_ms=30_000, retry_delay_max_ms=5_000,
                            tolerance_all=True, log_errors=True, dlq_context_headers=True),
        restart=RestartPolicy(backoff_ms=1_000, backoff_max_ms=60_000),
        dlq_topic="orders-dlq",
    )
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
    assert p.settings == FrameworkSettings.from_config(PIPELINE_CONFIG.parse({})) == FrameworkSettings()
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
    assert p.settings.runner.log_errors is False


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
    assert issue.value is None  # an unknown key's value is never shown (it may be a misplaced secret)
    assert "unknown pipeline key" in issue.message
    assert "did you mean" in issue.message
    assert "source.taskz.max" in issue.message and "sink.taskz.max" in issue.message


@pytest.mark.parametrize("value, message", [("zero", "must be an integer"), ("0", "must be between 1 and 1024"),
                                            ("-3", "must be between 1 and 1024"), ("1.5", "must be an integer")])
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


def test_side_config_declares_converters_and_the_cluster_alias():
    assert {k.name for k in SIDE_CONFIG.keys()} == {"connector.class", "key.converter", "value.converter",
                                                     "cluster.alias"}


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


# -- input hygiene: names, unknown keys, ranges, templates ------------------------------------


def named(name):
    d = copy.deepcopy(VALID)
    d["name"] = name
    return d


@pytest.mark.parametrize("name", ["team/orders", "/abs", "..", ".", "", "a" * 200, "a" * 129, ".hidden", "-x",
                                  "_x", "a b", "a\\b", "C:x", "naïve", "a\nb", "tab\tname", "orders/../../etc"])
def test_invalid_connector_names_are_rejected(name):
    [issue] = issues(named(name))
    assert issue.key == "$.name"
    for allowed in ("letters, digits, '.', '_' or '-'", "1 to 128", "starting with a letter or digit"):
        assert allowed in issue.message


@pytest.mark.parametrize("name", ["a", "7", "A.b_c-1", "orders-mirror", "a" * 128, "v1..2"])
def test_valid_connector_names(name):
    assert parse_pipeline(named(name)).name == name


def test_surrounding_blanks_of_a_name_are_trimmed_before_the_check():
    assert parse_pipeline(named("  orders  ")).name == "orders"


@pytest.mark.parametrize("key, suggestion", [
    ("source.recrods", "source.records"),
    ("source.batch.sise", "source.batch.size"),
    ("source.value.convertr", "source.value.converter"),  # side keys are suggested too
    ("sink.topic.templat", "sink.topic.template"),
    ("sink.nmae", "sink.name"),
    ("dlq.nam", "dlq.name"),
])
def test_unknown_side_keys_are_rejected_with_did_you_mean(key, suggestion):
    [issue] = issues(doc(**{key: "1"}))
    assert str(issue) == f"{key}: unknown key; did you mean {suggestion}?"
    assert issue.value is None


def test_unknown_side_key_without_close_match_says_what_is_declared():
    [issue] = issues(doc(**{"source.zzz": "1"}))
    assert issue.key == "source.zzz"
    assert "unknown key; the keys declared are source.topic, source.partitions" in issue.message


def test_unknown_keys_of_every_side_reported_at_once():
    found = issues(doc(**{"source.recrods": "1", "sink.nmae": "x", "dlq.nmae": "y", "taskz.max": "2"}))
    assert sorted(i.key for i in found) == ["dlq.nmae", "sink.nmae", "source.recrods", "taskz.max"]


def test_side_keys_are_not_accepted_as_dlq_overrides():
    [issue] = issues(doc(**{"dlq.key.converter": "string"}))
    assert issue.key == "dlq.key.converter"
    assert "unknown key" in issue.message


class FileLikeSink(SinkConnector):
    """A user's sink with no cluster of its own: it defines no side writer."""

    @classmethod
    def config_def(cls):
        return ConfigDef().define("path", Type.STRING, "out.txt", "File.")

    @classmethod
    def task_class(cls):
        return MemorySinkTask


@pytest.fixture
def file_sink():
    register_plugin("file-like-sink", f"{__name__}:FileLikeSink")
    return {"sink.connector.class": "file-like-sink", "sink.name": None, "sink.topic.template": None,
            "dlq.topic": None, "dlq.name": None}


def test_a_sink_without_side_writer_cannot_have_a_dead_letter_topic(file_sink):
    [issue] = issues(doc(**file_sink))
    assert issue.key == "errors.deadletterqueue.topic.name"
    assert "FileLikeSink writes no side outputs" in issue.message and "dlq.connector.class" in issue.message


def test_a_sink_without_side_writer_cannot_have_an_offset_syncs_topic(file_sink):
    found = issues(doc(**file_sink, **{"errors.deadletterqueue.topic.name": None, "offset.syncs.topic": "syncs"}))
    assert [i.key for i in found] == ["offset.syncs.topic"]
    assert "writes no side outputs" in found[0].message


def test_dlq_connector_class_names_the_broker_keeping_dead_letters(file_sink):
    p = parse_pipeline(doc(**{**file_sink, "dlq.connector.class": "memory", "dlq.name": "dead"}))
    assert p.dlq_class is MemorySinkConnector and p.dlq_overrides == {"name": "dead"}
    [issue] = issues(doc(**file_sink, **{"dlq.connector.class": "file-like-sink"}))
    assert issue.key == "dlq.connector.class" and "writes no side outputs" in issue.message
    [issue] = issues(doc(**file_sink, **{"dlq.connector.class": "memory", "dlq.zzz": "x"}))
    assert issue.key == "dlq.zzz" and "unknown key" in issue.message


def test_internal_task_keys_are_not_user_keys():
    """Keys connectors add to their task configs (task.partitions) are not accepted from users, and
    the unknown-key check never runs on the generated task configs."""
    [issue] = issues(doc(**{"source.task.partitions": "0"}))
    assert issue.key == "source.task.partitions"
    connector = MemorySourceConnector()
    connector.start({"partitions": "2"})
    [task_config] = connector.task_configs(1)
    assert task_config["task.partitions"] == "0,1"
    assert MemorySourceConnector.validate(task_config) == []


def test_unknown_pipeline_key_suggests_a_close_framework_key():
    [issue] = issues(doc(**{"epoch.max.msec": "10"}))
    assert issue.message == ("unknown pipeline key; did you mean source.epoch.max.msec or sink.epoch.max.msec "
                             "(connector keys take their side's prefix) or the framework key epoch.max.ms?")


def test_unknown_pipeline_key_suggests_only_the_side_that_declares_it():
    [issue] = issues(doc(**{"partitions": "3"}))
    assert issue.message == "unknown pipeline key; did you mean source.partitions?"


KAFKA = {"name": "k", "config": {
    "source.connector.class": "kafka", "source.bootstrap.servers": "a:9092", "source.topics": "t",
    "sink.connector.class": "kafka", "sink.bootstrap.servers": "b:9092"}}


def kafka_doc(**extra):
    d = copy.deepcopy(KAFKA)
    d["config"].update(extra)
    return d


def test_kafka_misspelt_key_line():
    with pytest.raises(ConfigError) as exc_info:
        parse_pipeline(kafka_doc(**{"source.start.postion": "latest"}))
    assert "  - source.start.postion: unknown key; did you mean source.start.position?" in str(exc_info.value)


def test_kafka_pass_through_prefixes_accepted():
    p = parse_pipeline(kafka_doc(**{
        "source.client.override.security.protocol": "SASL_SSL",
        "source.consumer.override.fetch.min.bytes": "1",
        "source.admin.override.request.timeout.ms": "1000",
        "sink.client.override.security.protocol": "SASL_SSL",
        "sink.producer.override.linger.ms": "20",
        "sink.admin.override.request.timeout.ms": "1000",
        "dlq.producer.override.message.max.bytes": "1000000",
    }))
    assert p.source_config["consumer.override.fetch.min.bytes"] == "1"
    assert p.dlq_overrides == {"producer.override.message.max.bytes": "1000000"}


@pytest.mark.parametrize("key", ["source.producer.override.linger.ms", "sink.consumer.override.fetch.min.bytes",
                                 "source.sasl.mechanism", "dlq.consumer.override.x"])
def test_kafka_prefix_of_the_other_role_or_bare_client_key_rejected(key):
    [issue] = issues(kafka_doc(**{key: "1"}))
    assert issue.key == key
    assert "unknown key" in issue.message


def test_kafka_bare_client_key_hint_names_the_pass_through_prefixes():
    [issue] = issues(kafka_doc(**{"sink.sasl.mechanism": "PLAIN"}))
    assert ("keys under sink.client.override., sink.producer.override., sink.admin.override. are passed through"
            in issue.message)


def test_kafka_misspelt_prefix_gets_the_right_prefix_suggested():
    [issue] = issues(kafka_doc(**{"sink.producer.overide.linger.ms": "5"}))
    assert issue.message == "unknown key; did you mean sink.producer.override.linger.ms?"


def test_top_level_connector_key_suggests_both_kafka_sides():
    [issue] = issues(kafka_doc(**{"bootstrap.servers": "x:1"}))
    assert issue.message == "unknown pipeline key; did you mean source.bootstrap.servers or sink.bootstrap.servers?"


@pytest.mark.parametrize("value", ["2147483648", "99999999999999999999", "-2147483649"])
def test_tasks_max_beyond_32_bits_rejected(value):
    [issue] = issues(doc(tasks__max=value))
    assert issue.key == "tasks.max"
    assert "must be an integer between -2147483648 and 2147483647 (signed 32-bit)" in issue.message


@pytest.mark.parametrize("key, value, message", [
    ("tasks.max", "1025", "must be between 1 and 1024"),
    ("epoch.max.ms", "3600001", "must be between 10 and 3600000"),
    ("epoch.max.ms", "9", "must be between 10 and 3600000"),
    ("epoch.max.records", "1000000001", "must be between 1 and 1000000000"),
    ("max.in.flight.records", "10000001", "must be between 1 and 10000000"),
    ("errors.retry.delay.max.ms", "3600001", "must be between 1 and 3600000"),
])
def test_framework_keys_have_upper_bounds(key, value, message):
    [issue] = issues(doc(**{key: value}))
    assert (issue.key, issue.message) == (key, message)


def test_framework_upper_bounds_are_accepted():
    p = parse_pipeline(doc(**{"tasks.max": "1024", "epoch.max.ms": "3600000"}))
    assert p.raw["tasks.max"] == "1024"


def test_kafka_start_timestamp_is_64_bit():
    parse_pipeline(kafka_doc(**{"source.start.position": "timestamp", "source.start.timestamp.ms": "1700000000000"}))
    found = issues(kafka_doc(**{"source.start.timestamp.ms": "9223372036854775808"}))
    assert [i.key for i in found] == ["source.start.timestamp.ms"]
    assert "signed 64-bit" in found[0].message


@pytest.mark.parametrize("template", ["{topic.__class__}", "{topic[0]}", "{0}", "{}", "{name}", "x.{topic!r}",
                                      "{topic:>10}", "a}b", "{topic", "{{topic}}"])
def test_bad_topic_template_rejected_naming_the_placeholder(template):
    [issue] = issues(doc(**{"sink.topic.template": template}))
    assert issue.key == "sink.topic.template"
    assert issue.message.startswith("may only use the placeholder {topic}")


def test_connector_files_resolve_file_references_and_their_values_count_as_secrets(tmp_path):
    secrets = tmp_path / "s.properties"
    secrets.write_text("bootstrap=10.0.0.7:9092\n")
    path = tmp_path / "c.json"
    path.write_bytes(orjson.dumps({"name": "f", "config": {
        "source.connector.class": "memory-source", "sink.connector.class": "memory-sink",
        "sink.name": f"${{file:{secrets}:bootstrap}}"}}))
    pipeline = load_pipeline_file(path)
    assert pipeline.sink_config["name"] == "10.0.0.7:9092"
    assert "10.0.0.7:9092" in pipeline.secret_values()  # masked in `connect run`'s logs and errors
    path.write_bytes(orjson.dumps({"name": "f", "config": {
        "source.connector.class": "memory-source", "sink.connector.class": "memory-sink",
        "sink.name": f"${{file:{secrets}:missing}}"}}))
    with pytest.raises(ConfigError, match='sink.name'):
        load_pipeline_file(path)
