"""Typed settings declared once: attrs fields that carry their config key.

A settings class (``RunnerPolicy``, the worker's ``FrameworkSettings``) is a frozen attrs class
whose fields are made with :func:`setting`: the field's default, type and doc *are* the config
key's (``epoch.max.ms``, INT, 10 000, "Longest epoch..."), written in one place. From the class:

- :func:`settings_def` generates the :class:`~connect.config.ConfigDef` that validates the keys
  (in field order; a field made with :func:`nested` contributes its class's keys at its place);
- :func:`settings_from` builds the object from the values that ``ConfigDef.parse`` returned,
  one parse for every key, with no default repeated anywhere.

A field that is not a setting (a cluster alias taken from a side's keys, the replication topology
the worker computes) is an ordinary attrs field: it has no key and is given explicitly.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import attrs

from connect.config import ConfigDef, ConfigKey, Importance, Type, Validator

__all__ = ["setting", "nested", "settings_def", "settings_from"]

_KEY = "connect.setting"  # field metadata: (ConfigKey, convert)
_NESTED = "connect.settings"  # field metadata: a settings class whose keys this field holds


def setting(key: str, type: Type, default: Any, doc: str, *, validator: Validator | None = None,
            importance: Importance = Importance.MEDIUM, convert: Callable[[Any], Any] | None = None) -> Any:
    """A field declaring the config key ``key``; its default is the key's default (through ``convert``
    when the field's value is derived from the key's, e.g. ``errors.tolerance=all`` -> True)."""
    config_key = ConfigKey(key, type, default, doc, importance, validator)
    return attrs.field(default=convert(default) if convert else default, metadata={_KEY: (config_key, convert)})


def nested(cls: type) -> Any:
    """A field holding another settings class (its keys belong to this one's definition)."""
    return attrs.field(factory=cls, metadata={_NESTED: cls})


def _keys(cls: type) -> list[ConfigKey]:
    keys: list[ConfigKey] = []
    for field in attrs.fields(cls):
        if _KEY in field.metadata:
            keys.append(field.metadata[_KEY][0])
        elif _NESTED in field.metadata:
            keys.extend(_keys(field.metadata[_NESTED]))
    return keys


def settings_def(cls: type) -> ConfigDef:
    """The ConfigDef of every key ``cls`` (and the settings classes it nests) declares."""
    return ConfigDef(_keys(cls))


def settings_from(cls: type, values: Mapping[str, Any], **given: Any) -> Any:
    """``cls`` from the typed values of ``settings_def(cls).parse`` (every key present); ``given``
    sets fields that are no setting, or replaces a nested one."""
    kwargs: dict[str, Any] = {}
    for field in attrs.fields(cls):
        if field.name in given:
            continue
        if _KEY in field.metadata:
            key, convert = field.metadata[_KEY]
            value = values[key.name]
            kwargs[field.name] = convert(value) if convert else value
        elif _NESTED in field.metadata:
            kwargs[field.name] = settings_from(field.metadata[_NESTED], values)
    return cls(**kwargs, **given)
