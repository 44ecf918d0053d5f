"""The transforms/predicates keys: every config error path (each names its full key, secrets are
never shown), type names (Kafka Connect's and short), plugins by entry point only, the pipeline
hook, and the authors' test kit."""

from __future__ import annotations

import sys
import textwrap

import pytest
from dist_util import forget, install_distribution
from typer.testing import CliRunner

from connect.errors import ConfigError, PluginError
from connect.records import ConnectRecord
from connect.secrets import MASK
from connect.testing import run_pair
from connect.transforms import (
    PREDICATE_GROUP,
    TRANSFORM_GROUP,
    list_transform_plugins,
    parse_transforms,
    resolve_predicate,
    resolve_transform,
)
from connect.transforms.registry import BUILTIN_TRANSFORMS
from worker.pipeline import parse_pipeline


def issues_of(config: dict) -> dict[str, str]:
    _, issues = parse_transforms(config)
    return {i.key: str(i) for i in issues}


def route(**extra) -> dict:
    return {"transforms": "route", "transforms.route.type": "RegexRouter", "transforms.route.regex": "a(.*)",
            "transforms.route.replacement": "b$1", **extra}


@pytest.mark.parametrize("name", ["RegexRouter", "org.apache.kafka.connect.transforms.RegexRouter", " RegexRouter "])
def test_type_by_kafka_class_name_or_short_name(name):
    assert resolve_transform(name) is BUILTIN_TRANSFORMS["RegexRouter"]
    assert resolve_transform("org.apache.kafka.connect.transforms.ReplaceField$Value") is \
        BUILTIN_TRANSFORMS["ReplaceField$Value"]
    assert resolve_predicate("org.apache.kafka.connect.transforms.predicates.HasHeaderKey").__name__ == "HasHeaderKey"


@pytest.mark.parametrize("config, key, message", [
    (route(**{"transforms.route.regex": "a("}), "transforms.route.regex", "not a valid regular expression"),
    (route(**{"transforms.route.replacement": "b$"}), "transforms.route.replacement", "'$' must be followed"),
    ({"transforms": "route", "transforms.route.type": "RegexRouter"}, "transforms.route.regex", "missing required"),
    (route(**{"transforms.route.regx": "x"}), "transforms.route.regx", "did you mean transforms.route.regex?"),
    (route(**{"transforms.rout.regex": "x"}), "transforms.rout.regex", "did you mean transforms.route?"),
    ({"transforms": "m"}, "transforms.m.type", "needs a type"),
    ({"transforms": "m", "transforms.m.type": "MaskField"}, "transforms.m.type", "MaskField$Key and MaskField$Value"),
    ({"transforms": "m", "transforms.m.type": "MaskFeild$Value"}, "transforms.m.type", "did you mean MaskField$Value?"),
    ({"transforms": "m", "transforms.m.type": "os:system"}, "transforms.m.type", "no module is imported from a config"),
    ({"transforms": "m", "transforms.m.type": "SetSchemaMetadata$Key", "transforms.m.schema.name": "x"},
     "transforms.m.type", "no key schemas"),
    (route(**{"transforms.route.negate": "maybe"}), "transforms.route.negate", "true or false"),
    (route(**{"transforms.route.negate": "true"}), "transforms.route.negate", "set transforms.route.predicate"),
    (route(**{"transforms.route.predicate": "isTomb", "predicates": "isTombstone",
              "predicates.isTombstone.type": "RecordIsTombstone"}),
     "transforms.route.predicate", "did you mean isTombstone?"),
    ({"predicates": "p"}, "predicates.p.type", "needs a type"),
    ({"predicates": "p", "predicates.p.type": "TopicNameMatches"}, "predicates.p.pattern", "missing required"),
    ({"predicates": "p", "predicates.p.type": "RegexRouter"}, "predicates.p.type", "unknown predicate 'RegexRouter'"),
    ({"predicates": "p", "predicates.p.type": "RecordIsTombstone", "predicates.p.negate": "true"},
     "predicates.p.negate", "unknown key"),
    ({"transforms": "a,a", "transforms.a.type": "Filter"}, "transforms", "listed twice"),
    ({"transforms": "a.b", "transforms.a.b.type": "Filter"}, "transforms", "may hold only letters"),
    ({"transforms": "c", "transforms.c.type": "Cast$Value", "transforms.c.spec": "n:int9"}, "transforms.c.spec",
     "the type must be one of int8"),
    ({"transforms": "c", "transforms.c.type": "Cast$Value", "transforms.c.spec": "int8,n:int8"}, "transforms.c.spec",
     "must be the only entry"),
    ({"transforms": "r", "transforms.r.type": "ReplaceField$Value", "transforms.r.renames": "a-b"},
     "transforms.r.renames", "old:new"),
    ({"transforms": "h", "transforms.h.type": "HeaderFrom$Value", "transforms.h.fields": "a,b",
      "transforms.h.headers": "x", "transforms.h.operation": "move"}, "transforms.h.headers", "one per field"),
    ({"transforms": "h", "transforms.h.type": "HeaderFrom$Value", "transforms.h.fields": "a",
      "transforms.h.headers": "x", "transforms.h.operation": "cut"}, "transforms.h.operation", "move, copy"),
    ({"transforms": "i", "transforms.i.type": "InsertField$Value"}, "transforms.i.topic.field", "at least one"),
    ({"transforms": "t", "transforms.t.type": "TimestampRouter", "transforms.t.timestamp.format": "yyyy EEE"},
     "transforms.t.timestamp.format", "'EEE' is not supported"),
    ({"transforms": "s", "transforms.s.type": "SetSchemaMetadata$Value", "transforms.s.schema.name": "x",
      "transforms.s.schema.version": "3"}, "transforms.s.schema.version", "cannot be set"),
    ({"transforms": "d", "transforms.d.type": "DropHeaders"}, "transforms.d.headers", "missing required"),
])
def test_every_config_error_names_its_key(config, key, message):
    found = issues_of(config)
    assert key in found, found
    assert message in found[key]


def test_a_valid_config_has_no_issue_and_keeps_order():
    config, issues = parse_transforms({**route(), "transforms": "route,drop", "transforms.drop.type": "Filter",
                                       "transforms.drop.predicate": "t", "transforms.drop.negate": "true",
                                       "predicates": "t", "predicates.t.type": "RecordIsTombstone", "other": "x"})
    assert issues == []
    assert [t.alias for t in config.transforms] == ["route", "drop"]
    assert config.transforms[1].negate and config.transforms[1].predicate == "t"
    assert config.transforms[0].label == "transforms.route (RegexRouter)"


def test_secret_values_never_shown():
    secret = "hunter2-very-secret"
    found = issues_of(route(**{"transforms.route.api.token": secret, "transforms.route.password": secret}))
    assert "transforms.route.api.token" in found and "transforms.route.password" in found
    assert secret not in " ".join(found.values())
    with pytest.raises(ConfigError) as exc_info:
        parse_pipeline({"name": "p", "config": {"source.connector.class": "memory", "sink.connector.class": "memory",
                                                **route(**{"transforms.route.replacement": secret + "$",
                                                           "transforms.route.token": secret})}})
    assert secret not in str(exc_info.value)
    assert "transforms.route.token" in str(exc_info.value) and MASK in str(exc_info.value)


def test_pipeline_accepts_transforms_and_names_misspelt_keys():
    p = parse_pipeline({"name": "p", "config": {"source.connector.class": "memory", "sink.connector.class": "memory",
                                                **route()}})
    assert [t.alias for t in p.transforms.transforms] == ["route"]
    with pytest.raises(ConfigError) as exc_info:
        parse_pipeline({"name": "p", "config": {"source.connector.class": "memory", "sink.connector.class": "memory",
                                                "transform": "route", "transforms.route.regx": "x"}})
    text = str(exc_info.value)
    assert "transform: unknown pipeline key" in text and "framework key transforms" in text
    assert "transforms.route.regx: 'route' is not listed in transforms" in text


# -- plugins ---------------------------------------------------------------------------------------

PLUGIN = textwrap.dedent("""
    from connect.config import ConfigDef, Type
    from connect.records import make_record
    from connect.transforms import Predicate, Transformation


    class Upper(Transformation):
        @classmethod
        def config_def(cls):
            return ConfigDef().define("suffix", Type.STRING, "", "Added after the value.")

        def configure(self, config):
            self.suffix = config["suffix"].encode()

        def apply(self, r):
            return make_record(r.topic, r.key, r.value.upper() + self.suffix, r.headers, r.timestamp,
                               r.source_partition, r.source_offset, r.partition, r.value_schema)


    class IsEven(Predicate):
        def test(self, r):
            return r.source_offset["offset"] % 2 == 0


    class NotATransform:
        pass
""")


@pytest.fixture
def plugin_dist(tmp_path, monkeypatch):
    """A distribution installed on sys.path that declares a transform and a predicate as entry points."""
    install_distribution(tmp_path, monkeypatch, "xf-plugin", {"xf_plugin": PLUGIN},
                         f"[{TRANSFORM_GROUP}]\nupper = xf_plugin:Upper\nbogus = xf_plugin:NotATransform\n"
                         f"[{PREDICATE_GROUP}]\neven = xf_plugin:IsEven\n")
    yield tmp_path
    forget("xf_plugin")


def test_custom_transform_and_predicate_from_entry_points(plugin_dist):
    assert resolve_transform("upper").__name__ == "Upper"
    assert resolve_transform("Upper") is resolve_transform("xf_plugin:Upper") is resolve_transform("xf_plugin.Upper")
    with pytest.raises(PluginError, match="not a connect.transforms.base.Transformation subclass"):
        resolve_transform("bogus")
    listed = {(p.name, p.kind): p for p in list_transform_plugins()}
    assert listed[("upper", "transformation")].origin == "xf-plugin"
    assert listed[("even", "predicate")].target == "xf_plugin:IsEven"
    run = run_pair({"transforms": "up", "transforms.up.type": "upper", "transforms.up.suffix": "!",
                    "transforms.up.predicate": "even", "predicates": "even", "predicates.even.type": "even"},
                   records=[b"a", b"b", b"c"])
    assert [r.value for r in run.delivered] == [b"A!", b"b", b"C!"]


def test_module_paths_that_are_not_entry_points_are_refused(plugin_dist):
    # declared in connect.predicates only: as a transform it is just a module path, and nothing is imported
    found = issues_of({"transforms": "x", "transforms.x.type": "xf_plugin:IsEven"})
    assert "neither a built-in transformation nor an installed entry point" in found["transforms.x.type"]
    assert "xf_plugin" not in sys.modules
    found = issues_of({"transforms": "x", "transforms.x.type": "connect.testing:MemorySinkTask"})
    assert "no module is imported from a config" in found["transforms.x.type"]
    assert "connect.testing" not in found["transforms.x.type"].split("'")[0]


def test_a_declared_transform_whose_import_exits_is_an_issue_naming_the_key(tmp_path, monkeypatch):
    install_distribution(tmp_path, monkeypatch, "xf-exit", {"xf_exit": "raise SystemExit(4)\n"},
                         f"[{TRANSFORM_GROUP}]\nexits = xf_exit:Gone\n")
    try:
        found = issues_of({"transforms": "x", "transforms.x.type": "exits"})
        assert "raised SystemExit" in found["transforms.x.type"]
    finally:
        forget("xf_exit")


def test_connect_plugins_cli_lists_transforms_and_predicates(plugin_dist):
    from worker.cli import app

    out = CliRunner().invoke(app, ["plugins"]).output
    for line in ("RegexRouter", "MaskField$Value", "RecordIsTombstone", "upper", "even"):
        assert line in out
    assert "[xf-plugin]" in out


# -- the test kit ----------------------------------------------------------------------------------

def test_run_pair_tombstones_dlq_and_offsets():
    records = [(b"k0", b'{"card": "1"}'), (b"k1", None), (b"k2", b"not json"), (b"k3", b'{"card": "2"}')]
    run = run_pair({"transforms": "skip,mask", "transforms.skip.type": "Filter", "transforms.skip.predicate": "tomb",
                    "predicates": "tomb", "predicates.tomb.type": "RecordIsTombstone",
                    "transforms.mask.type": "MaskField$Value", "transforms.mask.fields": "card",
                    "errors.deadletterqueue.topic.name": "dlq"}, records=records)
    assert run.state == "RUNNING", run.trace
    assert [r.key for r in run.delivered] == [b"k0", b"k3"]
    assert [r.key for r in run.dead_letters] == [b"k2"]
    reason = dict(run.dead_letters[0].headers)["__connect.errors.exception.message"].decode()
    assert reason.startswith("transforms.mask (MaskField$Value) failed on record")
    assert list(run.committed.values()) == [{"offset": 3}]
    stats = run.stats
    assert (stats["filtered"], stats["dead_lettered"], stats["records"]) == (1, 1, 2)


def test_run_pair_without_dlq_fails_and_commits_nothing_after_the_bad_record():
    run = run_pair({"transforms": "mask", "transforms.mask.type": "MaskField$Value", "transforms.mask.fields": "a"},
                   records=[b'{"a": 1}', b"bad"])
    assert run.state == "FAILED" and "transforms.mask (MaskField$Value)" in run.trace
    run = run_pair({"transforms": "mask", "transforms.mask.type": "MaskField$Value", "transforms.mask.fields": "a",
                    "errors.tolerance": "all"}, records=[b'{"a": 1}', b"bad", b'{"a": 2}'])
    assert run.state == "RUNNING" and run.stats["skipped"] == 1 and len(run.delivered) == 2


def test_run_pair_refuses_bad_config_and_resumes_from_offsets():
    with pytest.raises(ConfigError, match="epoch.max.msx: unknown key; did you mean epoch.max.ms"):
        run_pair({"epoch.max.msx": "5"}, records=[b"x"])
    with pytest.raises(ConfigError, match="transforms.r.regex"):
        run_pair({"transforms": "r", "transforms.r.type": "RegexRouter"}, records=[b"x"])
    first = run_pair({}, records=[b"a", b"b"])
    again = run_pair({}, records=[b"a", b"b", b"c"], offsets=first.committed)
    assert [r.value for r in again.delivered] == [b"c"]


def test_run_pair_with_connector_classes_and_the_sink_as_dlq_writer():
    from connect.testing import MemorySinkConnector, MemorySinkTask, MemorySourceConnector

    MemorySinkTask.written.pop("kit", None)
    MemorySinkTask.written.pop("kit-dlq", None)
    run = run_pair({"source.records": "4", "sink.name": "kit", "dlq.name": "kit-dlq", "dlq.reject.values": "",
                    "sink.reject.values": "memory-0-2", "errors.deadletterqueue.topic.name": "dead",
                    "transforms": "r", "transforms.r.type": "RegexRouter", "transforms.r.regex": "memory",
                    "transforms.r.replacement": "renamed"},
                   source=MemorySourceConnector, sink=MemorySinkConnector, dead_letters="sink", epochs=2)
    assert run.state == "RUNNING", run.trace
    assert [r.topic for r in MemorySinkTask.written["kit"]] == ["renamed"] * 3
    assert [r.value for r in MemorySinkTask.written["kit-dlq"]] == [b"memory-0-2"]
    assert list(run.committed.values()) == [{"offset": 3}]


def test_records_are_connect_records_with_their_own_partition():
    run = run_pair({}, records=[ConnectRecord("t", b"k", b"v", (("h", b"1"),), 5)])
    assert run.delivered[0].headers == (("h", b"1"),) and run.delivered[0].source_offset == {"offset": 0}
