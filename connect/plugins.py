"""Connector discovery: one mechanism for built-in and third-party connectors.

``connector.class`` (written ``source.connector.class`` / ``sink.connector.class`` /
``dlq.connector.class`` in a pipeline config) names, in this order:

1. the name of a declared plugin (``kafka-source``);
2. a short alias: ``kafka`` means ``kafka-source`` in a source slot and ``kafka-sink`` in a
   sink slot; a bare class name (``KafkaSourceConnector``) also matches its plugin;
3. a ``module:Class`` (or dotted ``module.Class``) path, only inside a module that is already
   declared: the module of an entry point of the ``connect.connectors`` group of an installed
   distribution (or of a built-in, or of a :func:`register_plugin` name), or a target the operator
   listed with :func:`allow_plugin_classes` (the worker setting ``plugin.classes``, the CLI's
   ``--plugin-classes``).

Nothing else: a config never makes the worker import a module that nobody declared (importing runs
the module's top-level code, and ``unittest.__main__`` would raise ``SystemExit``), the same rule as
``connect.transforms.registry``. Whatever a declared module raises while it is imported, even a
``BaseException``, comes back as a :class:`PluginError`.

Built-ins are declared as entry points in this project's ``pyproject.toml``, exactly as a
third-party package declares its own, and are also listed below so a source checkout that was
not pip-installed still finds them. Classes are imported lazily, on first use (PIP-41's
"load a handler by name at runtime" lifecycle).
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Iterable, NamedTuple

from connect.connector import Connector, SinkConnector, SourceConnector
from connect.errors import PluginError

__all__ = ["PluginInfo", "resolve_connector", "list_plugins", "register_plugin", "allow_plugin_classes",
           "ENTRY_POINT_GROUP", "ALLOW_SETTING"]

ENTRY_POINT_GROUP = "connect.connectors"
ALLOW_SETTING = "plugin.classes"  # the worker setting (and CLI option) naming extra module:Class targets

_BUILTINS = {
    "kafka-source": "connectors.kafka.source:KafkaSourceConnector",
    "kafka-sink": "connectors.kafka.sink:KafkaSinkConnector",
}

_KINDS = {"source": SourceConnector, "sink": SinkConnector}

_REGISTERED: dict[str, str] = {}
_ALLOWED: dict[str, str] = {}  # module:Class targets the operator listed


def register_plugin(name: str, target: str) -> None:
    """Make ``name`` resolve to ``target`` ("module:Class") in this process only.

    For tests and examples (e.g. the in-memory connectors of ``connect.testing``), which must not
    be listed as production plugins: nothing registered here is declared as an entry point.
    """
    _REGISTERED[name] = target


def allow_plugin_classes(targets: str | Iterable[str]) -> list[str]:
    """Let configs of this process name these ``module:Class`` targets (a comma list or an iterable):
    the operator's own list (``plugin.classes``), for classes no installed distribution declares.
    Returns the targets added; raises PluginError naming a malformed one."""
    items = targets.split(",") if isinstance(targets, str) else list(targets)
    added = []
    for item in (t.strip() for t in items):
        if not item:
            continue
        module, sep, attr = item.partition(":")
        if not (sep and module and attr and all(p.isidentifier() for p in module.split(".") + attr.split("."))):
            raise PluginError(f"{ALLOW_SETTING}: {item!r} is not a module:Class target")
        _ALLOWED[item] = item
        added.append(item)
    return added


class PluginInfo(NamedTuple):
    name: str
    target: str  # "module:Class"
    origin: str  # distribution name, "builtin", "registered" or the worker setting


def _entry_points() -> dict[str, PluginInfo]:
    found = {name: PluginInfo(name, target, "builtin") for name, target in _BUILTINS.items()}
    found.update((name, PluginInfo(name, target, "registered")) for name, target in _REGISTERED.items())
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        origin = dist.name if dist is not None else "entry point"
        found[ep.name] = PluginInfo(ep.name, ep.value, origin)
    return found


def list_plugins() -> list[PluginInfo]:
    """The declared plugins (built-ins, entry points, registered names): what ``connect plugins``
    and ``GET /connector-plugins`` show. The operator's ``plugin.classes`` are not listed."""
    return sorted(_entry_points().values())


def _split(target: str) -> tuple[str, str]:
    if ":" in target:
        module_name, _, attr = target.partition(":")
    else:
        module_name, _, attr = target.rpartition(".")
    return module_name, attr


def _import(target: str) -> type:
    module_name, attr = _split(target)
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt...: never through the caller
        raise PluginError(f"cannot import module {module_name!r} for connector {target!r}: "
                          f"{type(exc).__name__}: {exc}") from exc
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise PluginError(f"module {module_name!r} has no attribute {attr!r} (connector {target!r})") from None
        except BaseException as exc:  # noqa: BLE001 - a module __getattr__ of its own
            raise PluginError(f"module {module_name!r}: getting {attr!r} failed: {type(exc).__name__}") from None
    if not isinstance(obj, type):
        raise PluginError(f"{target!r} is not a class")
    return obj


def _find(name: str, kind: str) -> PluginInfo | None:
    plugins = _entry_points()
    for candidate in (name, f"{name}-{kind}"):
        if candidate in plugins:
            return plugins[candidate]
    if ":" not in name:
        by_class = [p for p in plugins.values() if p.target.rpartition(":")[2] == name]
        if by_class:  # a bare class name; the plugin of this kind first
            return sorted(by_class, key=lambda p: not p.name.endswith(f"-{kind}"))[0]
    if ":" not in name and "." not in name:
        return None
    module_name, attr = _split(name)
    target = f"{module_name}:{attr}"
    if target in _ALLOWED:
        return PluginInfo(name, target, ALLOW_SETTING)
    declared = {_split(p.target)[0]: p.origin for p in plugins.values()}
    if module_name in declared:  # a module a distribution declares: importing it is what its plugin does
        return PluginInfo(name, target, declared[module_name])
    return None


def _refusal(name: str, kind: str) -> PluginError:
    if ":" in name or "." in name:
        return PluginError(f"{name!r} is neither a declared {kind} connector nor in a module an installed distribution "
                           f"declares: a config may only name those (no module is imported because a config names it); "
                           f"declare the class as an entry point of the group {ENTRY_POINT_GROUP!r} in its "
                           f"distribution and install it, or have the operator list it in the worker setting "
                           f"{ALLOW_SETTING}")
    known = ", ".join(sorted({p.name.rsplit("-", 1)[0] for p in list_plugins()} | set(_entry_points())))
    return PluginError(f"unknown {kind} connector {name!r}; known: {known} (or a module:Class its distribution "
                       f"declares as an entry point, or one listed in {ALLOW_SETTING})")


def resolve_connector(name: str, kind: str) -> type[Connector]:
    """The connector class ``name`` designates for a ``kind`` ("source" or "sink") slot; a
    PluginError says why there is none, and nothing undeclared was imported to find out."""
    if kind not in _KINDS:
        raise ValueError(f"kind must be 'source' or 'sink', not {kind!r}")
    name = name.strip()
    if not name:
        raise PluginError("connector class is empty")
    info = _find(name, kind)
    if info is None:
        raise _refusal(name, kind)
    cls = _import(info.target)
    expected = _KINDS[kind]
    if not (isinstance(cls, type) and issubclass(cls, expected)):
        raise PluginError(f"{name!r} resolves to {cls.__module__}.{cls.__qualname__}, which is not a {expected.__name__}")
    return cls
