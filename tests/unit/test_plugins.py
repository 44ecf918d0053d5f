"""connect.plugins: aliases, entry points, module paths, errors and real third-party discovery."""

from __future__ import annotations

import importlib
import sys
import textwrap
from importlib import metadata

import pytest

from connect import plugins
from connect.connector import SinkConnector, SourceConnector
from connect.errors import PluginError
from connect.plugins import ENTRY_POINT_GROUP, PluginInfo, allow_plugin_classes, list_plugins, register_plugin, resolve_connector
from connect.testing import MemorySinkConnector, MemorySourceConnector


class TestResolveBuiltins:
    @pytest.mark.parametrize(
        "name, kind, expected",
        [
            ("memory", "source", MemorySourceConnector),
            ("memory", "sink", MemorySinkConnector),
            ("memory-source", "source", MemorySourceConnector),
            ("memory-sink", "sink", MemorySinkConnector),
            ("connect.testing:MemorySourceConnector", "source", MemorySourceConnector),
            ("connect.testing:MemorySinkConnector", "sink", MemorySinkConnector),
            ("connect.testing.MemorySourceConnector", "source", MemorySourceConnector),
            ("connect.testing.MemorySinkConnector", "sink", MemorySinkConnector),
            ("MemorySinkConnector", "sink", MemorySinkConnector),
            ("MemorySourceConnector", "source", MemorySourceConnector),
            ("  memory  ", "source", MemorySourceConnector),
        ],
    )
    def test_memory(self, name, kind, expected):
        assert resolve_connector(name, kind) is expected

    def test_kafka_alias_in_each_slot(self):
        source = resolve_connector("kafka", "source")
        sink = resolve_connector("kafka", "sink")
        assert (source.__module__, source.__name__) == ("connectors.kafka.source", "KafkaSourceConnector")
        assert (sink.__module__, sink.__name__) == ("connectors.kafka.sink", "KafkaSinkConnector")
        assert issubclass(source, SourceConnector) and issubclass(sink, SinkConnector)
        assert resolve_connector("kafka-source", "source") is source
        assert resolve_connector("KafkaSinkConnector", "sink") is sink


class TestResolveErrors:
    def test_unknown_name_lists_known_ones(self):
        with pytest.raises(PluginError) as exc_info:
            resolve_connector("nope", "source")
        message = str(exc_info.value)
        assert message.startswith("unknown source connector 'nope'; known: ")
        for known in ("kafka", "memory", "memory-source", "memory-sink", "kafka-source", "kafka-sink"):
            assert known in message
        assert "module:Class" in message and "plugin.classes" in message

    @pytest.mark.parametrize("name", ["memory-sink", "MemorySinkConnector", "connect.testing:MemorySinkConnector",
                                      "connect.testing.MemorySinkConnector"])
    def test_sink_class_in_source_slot(self, name):
        with pytest.raises(PluginError, match=r"connect\.testing\.MemorySinkConnector, which is not a SourceConnector"):
            resolve_connector(name, "source")

    def test_source_class_in_sink_slot(self):
        with pytest.raises(PluginError, match="which is not a SinkConnector"):
            resolve_connector("memory-source", "sink")

    def test_non_connector_class(self):
        with pytest.raises(PluginError, match="not a SourceConnector"):
            resolve_connector("connect.testing:MemoryCodec", "source")  # a declared module, not a connector

    @pytest.mark.parametrize("name", ["no_such_module_xyz:Thing", "no_such_pkg_xyz.mod.Thing", "connect.records:ConnectRecord",
                                      "this:Nope", "unittest.__main__:Nope", "os.system", "connect.testing"])
    def test_an_undeclared_module_is_refused_without_being_imported(self, name, monkeypatch):
        for module in ("this", "unittest.__main__"):
            monkeypatch.delitem(sys.modules, module, raising=False)
        with pytest.raises(PluginError, match="neither a declared source connector nor in a module an installed "
                                              "distribution declares.*connect.connectors.*plugin.classes"):
            resolve_connector(name, "source")
        assert "this" not in sys.modules and "unittest.__main__" not in sys.modules

    def test_missing_attribute(self):
        with pytest.raises(PluginError, match=r"module 'connect.testing' has no attribute 'Nope'"):
            resolve_connector("connect.testing:Nope", "source")

    def test_not_a_class(self):
        with pytest.raises(PluginError, match="is not a class"):
            resolve_connector("connect.testing:_renamed", "source")

    @pytest.mark.parametrize("name", ["", "   "])
    def test_empty(self, name):
        with pytest.raises(PluginError, match="connector class is empty"):
            resolve_connector(name, "sink")

    def test_bad_kind(self):
        with pytest.raises(ValueError, match="kind must be 'source' or 'sink'"):
            resolve_connector("memory", "both")


def test_list_plugins_includes_builtins_sorted():
    plugins = list_plugins()
    assert plugins == sorted(plugins)
    by_name = {p.name: p for p in plugins}
    assert by_name["memory-source"].target == "connect.testing:MemorySourceConnector"
    assert by_name["memory-sink"].target == "connect.testing:MemorySinkConnector"
    assert by_name["kafka-source"].target == "connectors.kafka.source:KafkaSourceConnector"
    assert by_name["kafka-sink"].target == "connectors.kafka.sink:KafkaSinkConnector"
    for p in plugins:
        assert isinstance(p, PluginInfo)
        assert p.origin  # "builtin" or the installed distribution


# -- a real third-party distribution on sys.path --------------------------------------------------

THIRDPARTY_MODULE = textwrap.dedent(
    """
    from connect.connector import SourceConnector, SinkConnector
    from connect.records import ConnectRecord
    from connect.source import SourceTask


    class UpperTask(SourceTask):
        def start(self, config, context):
            self.done = False

        def poll(self):
            if self.done:
                return []
            self.done = True
            return [ConnectRecord("up", None, b"HELLO", source_partition={"p": 0}, source_offset={"o": 0})]


    class UpperSource(SourceConnector):
        @classmethod
        def task_class(cls):
            return UpperTask


    class UpperSink(SinkConnector):
        pass
    """
)


@pytest.fixture
def thirdparty(tmp_path, monkeypatch):
    (tmp_path / "thirdparty_conn.py").write_text(THIRDPARTY_MODULE)
    dist_info = tmp_path / "thirdparty_conn-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-conn\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nupper-source = thirdparty_conn:UpperSource\nupper-sink = thirdparty_conn:UpperSink\n"
        "broken-source = thirdparty_missing_module:Whatever\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "thirdparty_conn", raising=False)
    importlib.invalidate_caches()
    yield tmp_path
    sys.modules.pop("thirdparty_conn", None)
    importlib.invalidate_caches()


def test_thirdparty_distribution_is_visible_to_importlib_metadata(thirdparty):
    eps = {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    assert eps["upper-source"].value == "thirdparty_conn:UpperSource"
    assert eps["upper-source"].dist.name == "thirdparty-conn"


def test_thirdparty_entry_point_resolves(thirdparty):
    assert "thirdparty_conn" not in sys.modules  # imported lazily, on first use
    cls = resolve_connector("upper", "source")
    assert cls.__name__ == "UpperSource" and cls.__module__ == "thirdparty_conn"
    assert issubclass(cls, SourceConnector)
    assert resolve_connector("upper-source", "source") is cls
    assert resolve_connector("UpperSource", "source") is cls  # bare class name
    assert resolve_connector("upper", "sink").__name__ == "UpperSink"
    # the class is usable: its task polls a record
    task = cls.task_class()()
    task.start({}, None)
    assert [r.value for r in task.poll()] == [b"HELLO"]


def test_thirdparty_listed_with_its_distribution_as_origin(thirdparty):
    by_name = {p.name: p for p in list_plugins()}
    assert by_name["upper-source"] == PluginInfo("upper-source", "thirdparty_conn:UpperSource", "thirdparty-conn")
    assert by_name["upper-sink"].origin == "thirdparty-conn"
    assert "memory-source" in by_name  # built-ins still there


def test_thirdparty_wrong_kind_and_broken_entry_point(thirdparty):
    with pytest.raises(PluginError, match="not a SinkConnector"):
        resolve_connector("upper-source", "sink")
    with pytest.raises(PluginError, match="cannot import module 'thirdparty_missing_module'") as exc_info:
        resolve_connector("broken", "source")
    assert isinstance(exc_info.value.__cause__, ImportError)


def test_a_declared_module_is_reachable_by_its_path(thirdparty):
    assert resolve_connector("thirdparty_conn:UpperSource", "source").__name__ == "UpperSource"
    assert resolve_connector("thirdparty_conn.UpperSink", "sink").__name__ == "UpperSink"


def test_a_plugin_raising_system_exit_on_import_is_a_plugin_error(tmp_path, monkeypatch):
    (tmp_path / "exits_on_import.py").write_text("raise SystemExit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    register_plugin("exits-source", "exits_on_import:Source")
    try:
        with pytest.raises(PluginError, match="cannot import module 'exits_on_import'.*SystemExit"):
            resolve_connector("exits", "source")
    finally:
        plugins._REGISTERED.pop("exits-source")
        sys.modules.pop("exits_on_import", None)


def test_operator_listed_targets(tmp_path, monkeypatch):
    (tmp_path / "listed_conn.py").write_text("from connect.testing import MemorySourceConnector as Listed\n"
                                             "from connect.testing import MemorySinkConnector as Other\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match="plugin.classes"):
        resolve_connector("listed_conn:Listed", "source")
    try:
        assert allow_plugin_classes(" listed_conn:Listed , ") == ["listed_conn:Listed"]
        assert resolve_connector("listed_conn:Listed", "source") is MemorySourceConnector
        assert resolve_connector("listed_conn.Listed", "source") is MemorySourceConnector
        with pytest.raises(PluginError, match="plugin.classes"):  # only the class listed, not its module
            resolve_connector("listed_conn:Other", "sink")
        assert "listed_conn:Listed" not in {p.target for p in list_plugins()}
    finally:
        plugins._ALLOWED.clear()
        sys.modules.pop("listed_conn", None)
    with pytest.raises(PluginError, match="'os.system' is not a module:Class target"):
        allow_plugin_classes("os.system")


def test_unknown_lists_thirdparty_names(thirdparty):
    with pytest.raises(PluginError) as exc_info:
        resolve_connector("lower", "source")
    assert "upper" in str(exc_info.value)
    assert "upper-source" in str(exc_info.value)


def test_thirdparty_gone_after_fixture():
    # runs without the fixture: nothing leaked into sys.path / metadata
    assert "upper-source" not in {p.name for p in list_plugins()}
    with pytest.raises(PluginError, match="unknown source connector 'upper'"):
        resolve_connector("upper", "source")
