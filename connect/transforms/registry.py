"""Finding transform and predicate classes by the name a config gives (``transforms.NAME.type``).

A type is, in this order:

1. a built-in, by Kafka Connect's class name (``org.apache.kafka.connect.transforms.RegexRouter``,
   ``org.apache.kafka.connect.transforms.predicates.HasHeaderKey``) or its short form
   (``RegexRouter``, ``MaskField$Value``);
2. an entry point of the group ``connect.transforms`` (or ``connect.predicates``) of an installed
   distribution, by its name, its class's name or its ``module:Class`` / ``module.Class`` target;
3. a name registered in this process with :func:`register_transform` / :func:`register_predicate`
   (tests, notebooks).

Nothing else: a config can never make the worker import a module that no installed distribution
declared (the security rule connector configs follow too); a ``module:Class`` that is not an entry
point is refused with the way to declare one.
"""

from __future__ import annotations

import difflib
import importlib
from importlib import metadata
from typing import NamedTuple

from connect.errors import PluginError
from connect.transforms import fields, headers, predicates, reshape, routing
from connect.transforms.base import Predicate, Transformation

__all__ = ["TRANSFORM_GROUP", "PREDICATE_GROUP", "TransformPluginInfo", "resolve_transform", "resolve_predicate",
           "list_transform_plugins", "resolve_plugin", "register_transform", "register_predicate", "BUILTIN_TRANSFORMS",
           "BUILTIN_PREDICATES"]

TRANSFORM_GROUP = "connect.transforms"
PREDICATE_GROUP = "connect.predicates"
_KAFKA_TRANSFORMS = "org.apache.kafka.connect.transforms."
_KAFKA_PREDICATES = "org.apache.kafka.connect.transforms.predicates."

BUILTIN_TRANSFORMS: dict[str, type[Transformation]] = {
    "RegexRouter": routing.RegexRouter,
    "TimestampRouter": routing.TimestampRouter,
    "InsertHeader": headers.InsertHeader,
    "DropHeaders": headers.DropHeaders,
    "HeaderFrom$Key": headers.HeaderFromKey,
    "HeaderFrom$Value": headers.HeaderFromValue,
    "InsertField$Key": fields.InsertFieldKey,
    "InsertField$Value": fields.InsertFieldValue,
    "ReplaceField$Key": fields.ReplaceFieldKey,
    "ReplaceField$Value": fields.ReplaceFieldValue,
    "MaskField$Key": fields.MaskFieldKey,
    "MaskField$Value": fields.MaskFieldValue,
    "Cast$Key": reshape.CastKey,
    "Cast$Value": reshape.CastValue,
    "ValueToKey": reshape.ValueToKey,
    "ExtractField$Key": reshape.ExtractFieldKey,
    "ExtractField$Value": reshape.ExtractFieldValue,
    "SetSchemaMetadata$Value": reshape.SetSchemaMetadataValue,
    "Filter": predicates.Filter,
}
BUILTIN_PREDICATES: dict[str, type[Predicate]] = {
    "TopicNameMatches": predicates.TopicNameMatches,
    "HasHeaderKey": predicates.HasHeaderKey,
    "RecordIsTombstone": predicates.RecordIsTombstone,
}
_NOT_HERE = {"SetSchemaMetadata$Key": "records carry no key schemas here (only Pulsar value schemas); "
                                      "use SetSchemaMetadata$Value"}

_KINDS = {"transformation": (TRANSFORM_GROUP, BUILTIN_TRANSFORMS, Transformation, _KAFKA_TRANSFORMS),
          "predicate": (PREDICATE_GROUP, BUILTIN_PREDICATES, Predicate, _KAFKA_PREDICATES)}
_REGISTERED: dict[str, dict[str, str]] = {"transformation": {}, "predicate": {}}


class TransformPluginInfo(NamedTuple):
    name: str  # what a config writes as the type
    target: str  # "module:Class"
    origin: str  # "builtin", "registered" or the distribution's name
    kind: str  # "transformation" or "predicate"


def register_transform(name: str, target: str) -> None:
    """Make ``name`` resolve to ``target`` ("module:Class") in this process only (tests, notebooks);
    nothing registered here is listed as an installed plugin to other processes."""
    _REGISTERED["transformation"][name] = target


def register_predicate(name: str, target: str) -> None:
    """:func:`register_transform` for predicates."""
    _REGISTERED["predicate"][name] = target


def _target(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _plugins(kind: str) -> dict[str, TransformPluginInfo]:
    group, builtins, _, _ = _KINDS[kind]
    found = {name: TransformPluginInfo(name, _target(cls), "builtin", kind) for name, cls in builtins.items()}
    found.update((n, TransformPluginInfo(n, t, "registered", kind)) for n, t in _REGISTERED[kind].items())
    for ep in metadata.entry_points(group=group):
        dist = getattr(ep, "dist", None)
        found[ep.name] = TransformPluginInfo(ep.name, ep.value, dist.name if dist is not None else "entry point", kind)
    return found


def list_transform_plugins() -> list[TransformPluginInfo]:
    """Every transform and predicate a config can name, built-ins first."""
    out = []
    for kind in _KINDS:
        plugins = _plugins(kind).values()
        out += sorted(plugins, key=lambda p: (p.origin != "builtin", p.name))
    return out


def _load(info: TransformPluginInfo) -> type:
    module_name, _, attr = info.target.partition(":")
    try:
        obj = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except ImportError as exc:
        raise PluginError(f"{info.kind} {info.name!r} ({info.origin}): cannot import {module_name!r}: {exc}") from exc
    except AttributeError:
        raise PluginError(f"{info.kind} {info.name!r} ({info.origin}): {module_name!r} has no {attr!r}") from None
    except BaseException as exc:  # noqa: BLE001 - SystemExit and the like: a 400, never through the herder
        raise PluginError(f"{info.kind} {info.name!r} ({info.origin}): importing {module_name!r} raised "
                          f"{type(exc).__name__}: {exc}") from None
    return obj


def _resolve(name: str, kind: str) -> type:
    group, builtins, base, kafka_prefix = _KINDS[kind]
    name = name.strip()
    if not name:
        raise PluginError(f"the {kind}'s type is empty")
    short = name[len(kafka_prefix):] if name.startswith(kafka_prefix) else name
    if short in _NOT_HERE:
        raise PluginError(f"{short} is not available: {_NOT_HERE[short]}")
    if short in builtins:
        return builtins[short]
    if f"{short}$Value" in builtins:
        variants = " and ".join(n for n in (f"{short}$Key", f"{short}$Value") if n in builtins)
        raise PluginError(f"{short} comes as {variants}: say which part of the record it changes")
    plugins = _plugins(kind)
    info = plugins.get(name)
    if info is None:
        dotted = name.replace(":", ".")
        info = next((p for p in plugins.values() if p.origin != "builtin" and (
            p.target.replace(":", ".") == dotted or p.target.rpartition(":")[2] == name)), None)
    if info is None:
        if ":" in name or "." in name:
            raise PluginError(f"{name!r} is neither a built-in {kind} nor an installed entry point: a config may only "
                              f"name those (no module is imported from a config); declare the class as an entry point "
                              f"of the group {group!r} in its distribution and install it")
        close = difflib.get_close_matches(short, list(plugins), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        raise PluginError(f"unknown {kind} {name!r}; {hint}known: {', '.join(plugins)}")
    cls = _load(info)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise PluginError(f"{kind} {name!r} ({info.target}) is not a {base.__module__}.{base.__name__} subclass")
    return cls


def resolve_transform(name: str) -> type[Transformation]:
    """The transform class a ``transforms.NAME.type`` value designates; PluginError says why not."""
    return _resolve(name, "transformation")


def resolve_plugin(kind: str, name: str) -> type:
    """:func:`resolve_transform` for ``kind`` "transformation", :func:`resolve_predicate` for "predicate"."""
    return _resolve(name, kind)


def resolve_predicate(name: str) -> type[Predicate]:
    """The predicate class a ``predicates.NAME.type`` value designates; PluginError says why not."""
    return _resolve(name, "predicate")
