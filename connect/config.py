"""Declared configuration keys and their validation.

Configs are flat maps of string keys to string values (Kafka Connect's convention); a
:class:`ConfigDef` declares each key once (type, default, validator, doc, importance, secret)
next to the class that reads it. :meth:`ConfigDef.validate` reports *every* problem at once, each
naming the key, the bad value and what is allowed; :meth:`ConfigDef.parse` returns typed values
or raises :class:`~connect.errors.ConfigError` carrying all of them.
"""

from __future__ import annotations

import enum
import re
from typing import Any, Callable, Iterable, Mapping

import attrs

from connect.errors import ConfigError, ConfigIssue

__all__ = [
    "ConfigDef",
    "ConfigKey",
    "Importance",
    "Type",
    "Validator",
    "NO_DEFAULT",
    "one_of",
    "at_least",
    "in_range",
    "non_empty",
    "valid_regex",
    "mask_secrets",
]


class Type(enum.Enum):
    STRING = "string"
    INT = "int"
    DOUBLE = "double"
    BOOLEAN = "boolean"
    LIST = "list"  # comma-separated, blanks trimmed, empties dropped
    PASSWORD = "password"  # a string that is always masked when shown


class Importance(enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class _NoDefault:
    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()
"""Marks a required key."""

Validator = Callable[[Any], "str | None"]
"""Takes the parsed value, returns None when valid or a sentence saying what is allowed."""


def one_of(*allowed: str, case_sensitive: bool = False) -> Validator:
    """Value must be one of ``allowed``; parsing returns the allowed spelling (``ALL`` -> ``all``)."""
    canonical = {(a if case_sensitive else a.lower()): a for a in allowed}

    def check(value: Any) -> str | None:
        v = value if case_sensitive else str(value).lower()
        return None if v in canonical else f"must be one of {', '.join(allowed)}"

    check.canonical = lambda value: canonical[value if case_sensitive else str(value).lower()]  # type: ignore[attr-defined]
    return check


def at_least(minimum: float) -> Validator:
    def check(value: Any) -> str | None:
        return None if value >= minimum else f"must be at least {minimum}"

    return check


def in_range(minimum: float, maximum: float) -> Validator:
    def check(value: Any) -> str | None:
        return None if minimum <= value <= maximum else f"must be between {minimum} and {maximum}"

    return check


def non_empty(value: Any) -> str | None:
    return None if value else "must not be empty"


def valid_regex(value: Any) -> str | None:
    if not value:
        return None
    try:
        re.compile(value)
    except re.error as exc:
        return f"is not a valid regular expression ({exc})"
    return None


_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


def _convert(kind: Type, raw: Any) -> Any:
    """Convert a raw (usually string) value to ``kind``; raise ValueError with a reason."""
    if kind in (Type.STRING, Type.PASSWORD):
        if not isinstance(raw, str):
            raise ValueError("must be a string")
        return raw
    if kind is Type.INT:
        if isinstance(raw, bool):
            raise ValueError("must be an integer")
        if isinstance(raw, int):
            return raw
        try:
            return int(str(raw).strip())
        except ValueError:
            raise ValueError("must be an integer") from None
    if kind is Type.DOUBLE:
        try:
            return float(str(raw).strip())
        except ValueError:
            raise ValueError("must be a number") from None
    if kind is Type.BOOLEAN:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError("must be true or false")
    if kind is Type.LIST:
        if isinstance(raw, (list, tuple)):
            return [str(x).strip() for x in raw if str(x).strip()]
        if not isinstance(raw, str):
            raise ValueError("must be a comma-separated list")
        return [part.strip() for part in raw.split(",") if part.strip()]
    raise AssertionError(kind)  # pragma: no cover


@attrs.frozen
class ConfigKey:
    name: str
    type: Type
    default: Any = NO_DEFAULT
    doc: str = ""
    importance: Importance = Importance.MEDIUM
    validator: Validator | None = None
    secret: bool = False

    @property
    def required(self) -> bool:
        return self.default is NO_DEFAULT

    @property
    def is_secret(self) -> bool:
        return self.secret or self.type is Type.PASSWORD


class ConfigDef:
    """An ordered set of declared keys. Chain :meth:`define` calls to build one."""

    def __init__(self, keys: Iterable[ConfigKey] = ()):
        self._keys: dict[str, ConfigKey] = {}
        for key in keys:
            self._add(key)

    def _add(self, key: ConfigKey) -> None:
        if key.name in self._keys:
            raise ValueError(f"config key {key.name!r} declared twice")
        self._keys[key.name] = key

    def define(
        self,
        name: str,
        type: Type,
        default: Any = NO_DEFAULT,
        doc: str = "",
        *,
        importance: Importance = Importance.MEDIUM,
        validator: Validator | None = None,
        secret: bool = False,
    ) -> ConfigDef:
        self._add(ConfigKey(name, type, default, doc, importance, validator, secret))
        return self

    def merge(self, other: ConfigDef) -> ConfigDef:
        """A new ConfigDef holding this one's keys and then ``other``'s."""
        merged = ConfigDef(self._keys.values())
        for key in other.keys():
            merged._add(key)
        return merged

    def keys(self) -> list[ConfigKey]:
        return list(self._keys.values())

    def __contains__(self, name: str) -> bool:
        return name in self._keys

    def __getitem__(self, name: str) -> ConfigKey:
        return self._keys[name]

    def _parse_one(self, key: ConfigKey, config: Mapping[str, Any]) -> tuple[Any, ConfigIssue | None]:
        if key.name not in config or config[key.name] is None:
            if key.required:
                return None, ConfigIssue(key.name, None, f"missing required value ({key.doc})")
            return key.default, None
        raw = config[key.name]
        shown = "********" if key.is_secret else raw
        try:
            value = _convert(key.type, raw)
        except ValueError as exc:
            return None, ConfigIssue(key.name, shown, f"{exc} ({key.doc})")
        if key.validator is not None:
            problem = key.validator(value)
            if problem:
                return None, ConfigIssue(key.name, shown, problem)
            canonical = getattr(key.validator, "canonical", None)
            if canonical is not None:
                value = canonical(value)
        return value, None

    def validate(self, config: Mapping[str, Any]) -> list[ConfigIssue]:
        """Every issue with ``config``; an empty list means it is valid."""
        return [issue for key in self._keys.values() if (issue := self._parse_one(key, config)[1])]

    def parse(self, config: Mapping[str, Any], *, source: str | None = None) -> dict[str, Any]:
        """Typed values for every declared key (defaults filled in); raises ConfigError."""
        values: dict[str, Any] = {}
        issues: list[ConfigIssue] = []
        for key in self._keys.values():
            value, issue = self._parse_one(key, config)
            if issue:
                issues.append(issue)
            else:
                values[key.name] = value
        if issues:
            raise ConfigError(issues, source=source)
        return values

    def secret_names(self) -> set[str]:
        return {k.name for k in self._keys.values() if k.is_secret}


_SECRET_HINT = re.compile(r"(password|secret|token|sasl\.jaas|credentials?)", re.IGNORECASE)


def mask_secrets(config: Mapping[str, Any], secret_keys: Iterable[str] = ()) -> dict[str, Any]:
    """A copy of ``config`` safe to print: declared secrets and secret-looking keys masked."""
    declared = set(secret_keys)
    return {
        k: ("********" if (k in declared or _SECRET_HINT.search(k)) and v else v)
        for k, v in config.items()
    }
