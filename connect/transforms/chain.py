"""The ``transforms`` and ``predicates`` keys of a connector config, parsed and built into steps.

Kafka Connect's keys, with the same meaning::

    transforms=route,skipTombstones
    transforms.route.type=RegexRouter               (or org.apache.kafka.connect.transforms.RegexRouter)
    transforms.route.regex=orders\\.(.*)
    transforms.route.replacement=dc1_orders_$1
    transforms.skipTombstones.type=Filter
    transforms.skipTombstones.predicate=isTombstone
    transforms.skipTombstones.negate=false
    predicates=isTombstone
    predicates.isTombstone.type=RecordIsTombstone

Guarantees of :func:`parse_transforms`: every key under ``transforms.``/``predicates.`` is checked -
it belongs to a listed alias, and is ``type``, ``predicate``, ``negate`` or a key the plugin
declares (else a did-you-mean); every value is validated by the plugin's ``config_def``; each issue
names the full key (``transforms.route.regex: ...``) and never shows the value of a secret key
(declared secret by the plugin, or named like a credential). Transforms run in the listed order,
between the source's converters and the sink's (``connect.tasks.stages.build_chain``).
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Callable, Mapping

import attrs

from connect.errors import ConfigError, ConfigIssue, PluginError
from connect.records import ConnectRecord
from connect.secrets import MASK, is_secret_name
from connect.transforms.registry import resolve_predicate, resolve_transform

__all__ = ["TransformSpec", "PredicateSpec", "TransformsConfig", "parse_transforms", "is_transforms_key"]

_OWN = ("type", "predicate", "negate")  # keys of every transform; predicates take only ``type``
_ALIAS = re.compile(r"[A-Za-z0-9_-]+")
_TRUE, _FALSE = {"true"}, {"false"}

Step = Callable[[ConnectRecord], "ConnectRecord | None"]


def is_transforms_key(key: str) -> bool:
    """True for the keys :func:`parse_transforms` reads (``transforms``, ``predicates`` and below)."""
    return key in ("transforms", "predicates") or key.startswith(("transforms.", "predicates."))


@attrs.frozen
class PredicateSpec:
    alias: str
    type: str  # as written
    cls: type
    params: dict[str, Any]  # parsed values of the plugin's config_def


@attrs.frozen
class TransformSpec:
    alias: str
    type: str
    cls: type
    params: dict[str, Any]
    predicate: str | None = None
    negate: bool = False

    @property
    def label(self) -> str:
        """How failures name it: ``transforms.mask (MaskField$Value)``."""
        return f"transforms.{self.alias} ({self.type})"


@attrs.frozen
class TransformsConfig:
    """The parsed transforms of one connector; picklable (it travels to the executors), and
    :meth:`build` makes the per-record steps of one task pair."""

    transforms: tuple[TransformSpec, ...] = ()
    predicates: tuple[PredicateSpec, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.transforms)

    def build(self) -> tuple[list[tuple[str, Step]], list[Callable[[], None]]]:
        """``(steps, closers)`` for ``connect.tasks.stages.build_chain``: fresh, configured
        plugin instances (a predicate shared by the transforms that name it)."""
        closers: list[Callable[[], None]] = []
        tests: dict[str, Callable[[ConnectRecord], bool]] = {}
        try:
            for spec in self.predicates:
                if any(t.predicate == spec.alias for t in self.transforms):
                    pred = spec.cls()
                    pred.configure(spec.params)
                    closers.append(pred.close)
                    tests[spec.alias] = pred.test
            steps = []
            for spec in self.transforms:
                transform = spec.cls()
                transform.configure(spec.params)
                closers.append(transform.close)
                steps.append((spec.label, _guarded(transform.apply, tests.get(spec.predicate), spec.negate)))
        except BaseException:
            for close in closers:
                close()
            raise
        return steps, closers


def _guarded(apply: Step, test: Callable[[ConnectRecord], bool] | None, negate: bool) -> Step:
    if test is None:
        return apply

    def step(record: ConnectRecord) -> ConnectRecord | None:
        return apply(record) if test(record) != negate else record

    return step


def _aliases(flat: Mapping[str, Any], key: str, issues: list[ConfigIssue]) -> list[str]:
    raw = flat.get(key, "")
    items = [a.strip() for a in str(raw).split(",") if a.strip()]
    seen: set[str] = set()
    for alias in items:
        if not _ALIAS.fullmatch(alias):
            issues.append(ConfigIssue(key, None, f"alias {alias!r} may hold only letters, digits, '_' and '-'"))
        elif alias in seen:
            issues.append(ConfigIssue(key, None, f"alias {alias!r} is listed twice"))
        seen.add(alias)
    return [a for a in dict.fromkeys(items) if _ALIAS.fullmatch(a)]


def _params(flat: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    return {k[len(prefix):]: v for k, v in flat.items() if k.startswith(prefix)}


def _plugin(kind: str, alias: str, params: dict[str, Any], own: tuple[str, ...], issues: list[ConfigIssue]):
    """(type, class, parsed params) of one alias, or None after adding its issues."""
    section = "transforms" if kind == "transformation" else "predicates"
    prefix = f"{section}.{alias}."
    type_name = str(params.get("type", "")).strip()
    if not type_name:
        issues.append(ConfigIssue(f"{prefix}type", None, f"missing: every {kind} listed in {section} needs a type"))
        return None
    try:
        cls = (resolve_transform if kind == "transformation" else resolve_predicate)(type_name)
    except PluginError as exc:
        issues.append(ConfigIssue(f"{prefix}type", None, str(exc)))
        return None
    cdef = cls.config_def()
    mine = {k: v for k, v in params.items() if k not in own}
    problems = list(cls.validate(mine))
    for issue in problems:
        secret = cdef.is_secret(issue.key) or is_secret_name(issue.key)
        issues.append(ConfigIssue(f"{prefix}{issue.key}", MASK if secret and issue.value is not None else issue.value,
                                  issue.message))
    unknown = cdef.unknown_keys(mine, prefix=prefix, also_known=own)
    issues.extend(unknown)
    if problems or unknown:
        return None
    return type_name, cls, cdef.parse(mine)


def _strays(flat: Mapping[str, Any], section: str, listed: list[str], issues: list[ConfigIssue]) -> None:
    """Keys under ``section.`` whose alias is not listed."""
    for key in flat:
        if not key.startswith(f"{section}."):
            continue
        alias = key[len(section) + 1:].split(".", 1)[0]
        if alias in listed and "." in key[len(section) + 1:]:
            continue
        close = difflib.get_close_matches(alias, listed, n=1)
        hint = f"; did you mean {section}.{close[0]}?" if close else ""
        where = ", ".join(listed) or "none"
        issues.append(ConfigIssue(key, None, f"{alias!r} is not listed in {section} (listed: {where}){hint}"))


def parse_transforms(flat: Mapping[str, Any]) -> tuple[TransformsConfig, list[ConfigIssue]]:
    """The transforms of a flat connector config (other keys ignored) and every issue with them;
    the config is usable only when the list is empty."""
    issues: list[ConfigIssue] = []
    t_aliases = _aliases(flat, "transforms", issues)
    p_aliases = _aliases(flat, "predicates", issues)
    _strays(flat, "transforms", t_aliases, issues)
    _strays(flat, "predicates", p_aliases, issues)
    preds = []
    for alias in p_aliases:
        found = _plugin("predicate", alias, _params(flat, f"predicates.{alias}."), ("type",), issues)
        if found:
            preds.append(PredicateSpec(alias, *found))
    specs = []
    for alias in t_aliases:
        params = _params(flat, f"transforms.{alias}.")
        predicate = str(params.get("predicate", "")).strip() or None
        negate_raw = str(params.get("negate", "false")).strip().lower()
        if negate_raw not in _TRUE | _FALSE:
            issues.append(ConfigIssue(f"transforms.{alias}.negate", params.get("negate"), "must be true or false"))
        elif negate_raw == "true" and predicate is None:
            issues.append(ConfigIssue(f"transforms.{alias}.negate", None,
                                      f"negates a predicate: set transforms.{alias}.predicate too"))
        if predicate is not None and predicate not in p_aliases:
            close = difflib.get_close_matches(predicate, p_aliases, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            issues.append(ConfigIssue(f"transforms.{alias}.predicate", None, f"names {predicate!r}, which is not listed "
                                      f"in predicates (listed: {', '.join(p_aliases) or 'none'}){hint}"))
        found = _plugin("transformation", alias, params, ("type", "predicate", "negate"), issues)
        if found:
            specs.append(TransformSpec(alias, *found, predicate=predicate, negate=negate_raw == "true"))
    if issues:
        return TransformsConfig(), issues
    return TransformsConfig(tuple(specs), tuple(preds)), []


def load_transforms(flat: Mapping[str, Any], *, source: str | None = None) -> TransformsConfig:
    """:func:`parse_transforms`, raising ConfigError with every issue."""
    config, issues = parse_transforms(flat)
    if issues:
        raise ConfigError(issues, source=source)
    return config


def secret_keys(flat: Mapping[str, Any]) -> set[str]:
    """Keys of ``flat`` under ``transforms.``/``predicates.`` that hold credentials: declared
    secret by their plugin (whatever else is wrong with the config), or named like one."""
    out = {k for k in flat if is_transforms_key(k) and is_secret_name(k)}
    for section, resolve in (("transforms", resolve_transform), ("predicates", resolve_predicate)):
        for alias in _aliases(flat, section, []):
            try:
                cls = resolve(str(flat.get(f"{section}.{alias}.type", "")))
            except PluginError:
                continue
            out |= {f"{section}.{alias}.{name}" for name in cls.config_def().secret_names()} & set(flat)
    return out


__all__ += ["load_transforms", "secret_keys"]
