"""Connector discovery: one mechanism for built-in and third-party connectors.

``connector.class`` (written ``source.connector.class`` / ``sink.connector.class`` in a pipeline
config) accepts, in this order:

1. a ``module:Class`` or dotted ``module.Class`` path;
2. the name of an entry point in the ``connect.connectors`` group (``kafka-source``);
3. a short alias: ``kafka`` means ``kafka-source`` in a source slot and ``kafka-sink`` in a
   sink slot; a bare class name (``KafkaSourceConnector``) also matches its entry point.

Built-ins are declared as entry points in this project's ``pyproject.toml``, exactly as a
third-party package declares its own, and are also listed below so a source checkout that was
not pip-installed still finds them. Classes are imported lazily, on first use (PIP-41's
"load a handler by name at runtime" lifecycle).
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Iterator, NamedTuple

from connect.connector import Connector, SinkConnector, SourceConnector
from connect.errors import PluginError

__all__ = ["PluginInfo", "resolve_connector", "list_plugins", "register_plugin", "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "connect.connectors"

_BUILTINS = {
    "kafka-source": "connectors.kafka.source:KafkaSourceConnector",
    "kafka-sink": "connectors.kafka.sink:KafkaSinkConnector",
}

_KINDS = {"source": SourceConnector, "sink": SinkConnector}

_REGISTERED: dict[str, str] = {}


def register_plugin(name: str, target: str) -> None:
    """Make ``name`` resolve to ``target`` ("module:Class") in this process only.

    For tests and examples (e.g. the in-memory connectors of ``connect.testing``), which must not
    be listed as production plugins: nothing registered here is declared as an entry point.
    """
    _REGISTERED[name] = target


class PluginInfo(NamedTuple):
    name: str
    target: str  # "module:Class"
    origin: str  # distribution name, or "builtin"


def _entry_points() -> dict[str, PluginInfo]:
    found = {name: PluginInfo(name, target, "builtin") for name, target in _BUILTINS.items()}
    found.update((name, PluginInfo(name, target, "registered")) for name, target in _REGISTERED.items())
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        origin = dist.name if dist is not None else "entry point"
        found[ep.name] = PluginInfo(ep.name, ep.value, origin)
    return found


def list_plugins() -> list[PluginInfo]:
    return sorted(_entry_points().values())


def _import(target: str) -> type:
    if ":" in target:
        module_name, _, attr = target.partition(":")
    else:
        module_name, _, attr = target.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginError(f"cannot import module {module_name!r} for connector {target!r}: {exc}") from exc
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise PluginError(f"module {module_name!r} has no attribute {attr!r} (connector {target!r})") from None
    if not isinstance(obj, type):
        raise PluginError(f"{target!r} is not a class")
    return obj


def _candidates(name: str, kind: str) -> Iterator[str]:
    plugins = _entry_points()
    if name in plugins:
        yield plugins[name].target
    if f"{name}-{kind}" in plugins:
        yield plugins[f"{name}-{kind}"].target
    for info in plugins.values():
        if info.target.rpartition(":")[2] == name:
            yield info.target


def resolve_connector(name: str, kind: str) -> type[Connector]:
    """The connector class ``name`` designates for a ``kind`` ("source" or "sink") slot."""
    if kind not in _KINDS:
        raise ValueError(f"kind must be 'source' or 'sink', not {kind!r}")
    name = name.strip()
    if not name:
        raise PluginError("connector class is empty")
    if ":" in name or ("." in name and name not in _entry_points()):
        cls = _import(name)
    else:
        target = next(iter(_candidates(name, kind)), None)
        if target is None:
            known = ", ".join(sorted({p.name.rsplit("-", 1)[0] for p in list_plugins()} | set(_entry_points())))
            raise PluginError(f"unknown {kind} connector {name!r}; known: {known} (or give 'module:Class')")
        cls = _import(target)
    expected = _KINDS[kind]
    if not (isinstance(cls, type) and issubclass(cls, expected)):
        raise PluginError(f"{name!r} resolves to {cls.__module__}.{cls.__qualname__}, which is not a {expected.__name__}")
    return cls
