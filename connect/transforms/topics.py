"""Where a topic's records go through the transforms, known before any record: the names the
worker validates and prepares (creates) target topics under.

Each transform says what it does to a topic alone (:meth:`Transformation.topic_for`: a new name,
the same one, None when it drops every record, or UNKNOWN when each record decides), and each
predicate whether it holds for a topic alone (:meth:`Predicate.test_topic`). A guarded transform
whose predicate the topic decides is applied or not; one whose predicate depends on the record
may do either, so both names are possible. The first transform that decides per record (a
``TimestampRouter``, a custom transform that does not say) ends what can be known:
:attr:`TopicRoute.unknown` names it, and :attr:`TopicRoute.names` holds the names it receives -
what the worker falls back to validating and preparing, as it did before transforms were known.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

import attrs

from connect.errors import ConfigIssue
from connect.transforms.base import UNKNOWN, Predicate, Transformation
from connect.transforms.chain import TransformsConfig, TransformSpec

__all__ = ["TopicRoute", "topic_routes", "routed_issues", "unknown_note"]


@attrs.frozen
class TopicRoute:
    """Where the records of one topic go: ``names`` maps each possible name to the transform that
    gave it (None: the name the transforms received); empty when every record is dropped."""

    names: Mapping[str, TransformSpec | None]
    unknown: str | None = None  # the transform that decides per record (its label), if any


DROPPED = TopicRoute({})


def _overrides(cls: type, base: type, method: str) -> bool:
    return getattr(cls, method) is not getattr(base, method)


def _deciders(config: TransformsConfig) -> tuple[list, list[Callable[[], None]]]:
    """Per transform: (spec, topic_for or None when it decides per record, test_topic or None).
    Only plugins that can answer for a topic are instantiated (and configured); one whose
    ``configure`` fails here counts as deciding per record (running it will say what is wrong)."""
    closers: list[Callable[[], None]] = []

    def make(spec, base: type, method: str):
        cls = spec.cls
        if base is Transformation and cls.keeps_topic and not _overrides(cls, base, method):
            return lambda topic: topic
        if not _overrides(cls, base, method):
            return None
        try:
            plugin = cls()
            plugin.configure(spec.params)
        except Exception:  # noqa: BLE001 - a plugin that cannot tell from here
            return None
        closers.append(plugin.close)
        return getattr(plugin, method)

    preds = {p.alias: make(p, Predicate, "test_topic") for p in config.predicates
             if any(t.predicate == p.alias for t in config.transforms)}
    steps = [(t, make(t, Transformation, "topic_for"), preds.get(t.predicate)) for t in config.transforms]
    return steps, closers


def _close(closers: list[Callable[[], None]]) -> None:
    for close in closers:
        try:
            close()
        except Exception:  # noqa: BLE001 - best effort, as the chain closes
            pass


def _answer(decide, topic: str):
    try:
        return UNKNOWN if decide is None else decide(topic)
    except Exception:  # noqa: BLE001 - a plugin that cannot tell from the topic alone
        return UNKNOWN


def _route(steps: list, topic: str) -> TopicRoute:
    names: dict[str, TransformSpec | None] = {topic: None}
    for spec, topic_for, test_topic in steps:
        out: dict[str, TransformSpec | None] = {}
        for name, by in names.items():
            applies = True
            if spec.predicate is not None:
                held = _answer(test_topic, name)
                applies = held if held is UNKNOWN else bool(held) != spec.negate
            if applies is not True:  # not applied, or perhaps not: the name stays possible
                out.setdefault(name, by)
            if applies is False:
                continue
            new = _answer(topic_for, name)
            if new is UNKNOWN:
                return TopicRoute(names, unknown=spec.label)
            if new is not None:
                out.setdefault(new, by if new == name else spec)
        names = out
    return TopicRoute(names)


def topic_routes(config: TransformsConfig, topics: Iterable[str]) -> dict[str, TopicRoute]:
    """Topic (as the transforms receive it) -> where its records go."""
    topics = list(dict.fromkeys(topics))
    if not config:
        return {t: TopicRoute({t: None}) for t in topics}
    steps, closers = _deciders(config)
    try:
        return {t: _route(steps, t) for t in topics}
    finally:
        _close(closers)


def _key(spec: TransformSpec) -> str:
    return f"transforms.{spec.alias}.{spec.cls.topic_key}" if spec.cls.topic_key else f"transforms.{spec.alias}"


def routed_issues(routes: Mapping[str, TopicRoute],
                  check: Callable[[list[str]], list[ConfigIssue]]) -> list[ConfigIssue]:
    """``check`` (a sink's target check) over every name of ``routes`` (source topic -> route), with
    each issue about one name a transform gave keyed by that transform's key
    (``transforms.route.replacement``) and saying which source topic it renamed; an issue about a
    name received by a transform that decides per record says the name is a fallback."""
    names = list(dict.fromkeys(n for r in routes.values() for n in r.names))
    issues = check(names) if names else []
    done: set[str] = set()
    for source, route in routes.items():
        for name, spec in route.names.items():
            if name in done or (spec is None and route.unknown is None):
                continue
            done.add(name)
            for issue in check([name]):
                if issue in issues:
                    issues.remove(issue)
                if spec is not None:
                    issue = ConfigIssue(_key(spec), None, f"{spec.label} renames the records of source topic "
                                                          f"{source!r} to {name!r}; {issue.message}")
                if route.unknown is not None:
                    issue = issue._replace(message=f"{issue.message} (checked under the name {route.unknown} "
                                                   "receives: it names each record's topic itself)")
                issues.append(issue)
    return issues


def unknown_note(routes: Mapping[str, TopicRoute]) -> str | None:
    """In words, the topics whose target names only their records decide; None when there are none."""
    by: dict[str, list[str]] = {}
    for topic, route in routes.items():
        if route.unknown is not None:
            by.setdefault(route.unknown, []).append(topic)
    if not by:
        return None
    parts = [f"{label} names the target of each record of {', '.join(map(repr, topics))} from the record itself"
             for label, topics in by.items()]
    return ("; ".join(parts) + ": their targets are checked and prepared under the names that transform receives; "
            "a name the target broker refuses fails its records at run time")
