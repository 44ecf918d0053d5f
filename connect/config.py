"""Declared configuration keys and their validation.

Configs are flat maps of string keys to string values (Kafka Connect's convention); a
:class:`ConfigDef` declares each key once (type, default, validator, doc, importance, secret)
next to the class that reads it. :meth:`ConfigDef.validate` reports *every* problem at once, each
naming the key, the bad value and what is allowed; :meth:`ConfigDef.parse` returns typed values
or raises :class:`~connect.errors.ConfigError` carrying all of them.

Guarantees: ``Type.INT`` values fit a signed 32-bit integer and ``Type.LONG`` values a signed
64-bit one; ``Type.DOUBLE`` values are finite. A secret key (``Type.PASSWORD``, ``secret=True``,
or a name that looks like a credential, see :func:`connect.secrets.is_secret_name`) never has its
value shown in an issue. :meth:`ConfigDef.unknown_keys` reports keys that are neither declared nor
under a declared pass-through prefix (:meth:`ConfigDef.define_prefix`), with a did-you-mean, and
never shows their values.
"""

from __future__ import annotations

import difflib
import enum
import math
from typing import Any, Callable, Iterable, Mapping

import attrs

from connect import patterns
from connect.errors import ConfigError, ConfigIssue
from connect.secrets import MASK, is_secret_name

__all__ = [
    "Configurable",
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
    INT = "int"  # signed 32-bit
    LONG = "long"  # signed 64-bit, e.g. epoch milliseconds
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
    """A user regex in Java's dialect that the linear-time engine runs (:mod:`connect.patterns`)."""
    return patterns.problem(value)


_INT_BITS = {Type.INT: 32, Type.LONG: 64}
_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


def _convert(kind: Type, raw: Any) -> Any:
    """Convert a raw (usually string) value to ``kind``; raise ValueError with a reason."""
    if kind in (Type.STRING, Type.PASSWORD):
        if not isinstance(raw, str):
            raise ValueError("must be a string")
        return raw
    if kind in _INT_BITS:
        if isinstance(raw, bool):
            raise ValueError("must be an integer")
        try:
            value = raw if isinstance(raw, int) else int(str(raw).strip())
        except ValueError:
            raise ValueError("must be an integer") from None
        bits = _INT_BITS[kind]
        low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        if not low <= value <= high:
            raise ValueError(f"must be an integer between {low} and {high} (signed {bits}-bit)")
        return value
    if kind is Type.DOUBLE:
        try:
            value = float(str(raw).strip())
        except ValueError:
            raise ValueError("must be a number") from None
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value
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
        """Declared secret (PASSWORD type or ``secret=True``) or named like a credential."""
        return self.secret or self.type is Type.PASSWORD or is_secret_name(self.name)


class ConfigDef:
    """An ordered set of declared keys and pass-through prefixes. Chain :meth:`define` and
    :meth:`define_prefix` calls to build one."""

    def __init__(self, keys: Iterable[ConfigKey] = (), prefixes: Mapping[str, str] | None = None):
        self._keys: dict[str, ConfigKey] = {}
        self._prefixes: dict[str, str] = {}
        for key in keys:
            self._add(key)
        for prefix, doc in (prefixes or {}).items():
            self.define_prefix(prefix, doc)

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

    def define_prefix(self, prefix: str, doc: str = "") -> ConfigDef:
        """Accept every key starting with ``prefix`` unchecked (e.g. ``producer.override.``:
        client settings passed through). The empty prefix accepts every key."""
        if prefix in self._prefixes:
            raise ValueError(f"config prefix {prefix!r} declared twice")
        self._prefixes[prefix] = doc
        return self

    def merge(self, other: ConfigDef) -> ConfigDef:
        """A new ConfigDef holding this one's keys and prefixes, then ``other``'s."""
        merged = ConfigDef(self._keys.values(), self._prefixes)
        for key in other.keys():
            merged._add(key)
        for prefix, doc in other.prefixes().items():
            merged.define_prefix(prefix, doc)
        return merged

    def prefixes(self) -> dict[str, str]:
        """Declared pass-through prefixes and their docs, in declaration order."""
        return dict(self._prefixes)

    def passes_through(self, name: str) -> bool:
        return any(name.startswith(prefix) for prefix in self._prefixes)

    def is_secret(self, name: str) -> bool:
        """True for a key declared secret and for any key named like a credential."""
        key = self._keys.get(name)
        return (key is not None and key.is_secret) or is_secret_name(name)

    def unknown_keys(self, config: Mapping[str, Any], *, prefix: str = "",
                     also_known: Iterable[str] = ()) -> list[ConfigIssue]:
        """An issue (value never shown) for every key of ``config`` that is not declared, not in
        ``also_known`` and not under a pass-through prefix. Issue keys and suggestions are
        written with ``prefix`` in front, e.g. ``source.start.postion: unknown key; did you mean
        source.start.position?``; without a close match the message says what is accepted."""
        known = [*self._keys, *also_known]
        issues = []
        for name in config:
            if name in known or self.passes_through(name):
                continue
            match = self._suggest(name, known)
            if match is not None:
                message = f"unknown key; did you mean {prefix}{match}?"
            else:
                message = "unknown key; " + self._accepted(prefix)
            issues.append(ConfigIssue(f"{prefix}{name}", None, message))
        return issues

    def _suggest(self, name: str, known: list[str]) -> str | None:
        close = difflib.get_close_matches(name, known, n=1)
        if close:
            return close[0]
        parts = name.split(".")
        for prefix in self._prefixes:  # a misspelt pass-through prefix: producer.overide.acks
            n = prefix.count(".")
            if 0 < n < len(parts) and difflib.get_close_matches(".".join(parts[:n]) + ".", [prefix], n=1, cutoff=0.8):
                return prefix + ".".join(parts[n:])
        return None

    def _accepted(self, prefix: str) -> str:
        names = [f"{prefix}{k}" for k in self._keys]
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        text = f"the keys declared are {shown}" if names else "no keys are declared"
        if self._prefixes:
            text += "; keys under " + ", ".join(f"{prefix}{p}" for p in self._prefixes) + " are passed through"
        return text

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
        shown = MASK if key.is_secret else raw
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


def mask_secrets(config: Mapping[str, Any], secret_keys: Iterable[str] = ()) -> dict[str, Any]:
    """A copy of ``config`` safe to print: declared secrets and secret-looking keys masked."""
    declared = set(secret_keys)
    return {k: (MASK if (k in declared or is_secret_name(k)) and v else v) for k, v in config.items()}


class Configurable:
    """What every plugin (connector, transform, predicate) says about its configuration: its keys
    (:meth:`config_def`), how a raw config is checked (:meth:`validate`) and its version."""

    @classmethod
    def version(cls) -> str:
        return "0.1.0"

    @classmethod
    def config_def(cls) -> ConfigDef:
        return ConfigDef()

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        """Every issue with ``config``. Override to add cross-key checks (call super first)."""
        return cls.config_def().validate(config)
