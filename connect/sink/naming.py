"""Target topic names a broker accepts: the checks behind a sink's ``validate`` and the
``topic.illegal.chars`` option (shared by the sinks whose broker restricts names: RocketMQ, Pulsar).

A sink routes each record with ``topic`` / ``topic.template`` (:mod:`connect.sink.routing`); the
name that gives may be one its broker refuses (Kafka's ``orders.created`` on RocketMQ). Such a name
is caught as early as it is known, always with one message shape naming the source topic, the
target name, the broker's rule and the fix:

- ``validate`` (the sink alone): a fixed ``topic``, and a ``topic.template`` that gives an illegal
  name whatever the source topic (e.g. a literal ``.`` for RocketMQ);
- :func:`naming_issues` with the source's topics (a pipeline whose source names its ``topics``):
  each source topic's target, and two source topics that would land in one target (a collision,
  refused: their records would mix in one topic);
- while running (topics found by a regex): the records of such a topic fail as permanent failures
  (hooks, dead-letter topic, ``errors.tolerance``) with the same message, never a bare broker refusal.

``topic.illegal.chars=replace`` makes every refused character of a target name
``topic.illegal.chars.replacement`` (``_``), as the metadata connectors do (the broker's rules say
how, e.g. RocketMQ first takes a Pulsar topic's local name). The sink announces the names it
changed when it starts and when new source topics appear (:meth:`TargetNames.announce`).
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping, Protocol, Sequence

from connect.config import ConfigDef, Type, one_of
from connect.errors import ConfigIssue, ConnectError
from connect.sink.routing import ROUTING_CONFIG, TopicRouter

__all__ = ["NAMING_CONFIG", "NameRules", "IllegalTopicName", "TargetNames", "naming_issues"]

NAMING_CONFIG = (
    ConfigDef()
    .define("topic.illegal.chars", Type.STRING, "fail",
            "A target topic name the broker refuses: fail (validate names the source topic, the target and the "
            "rule; at run time its records fail) or replace (each refused character becomes "
            "topic.illegal.chars.replacement, e.g. orders.created -> orders_created on RocketMQ).",
            validator=one_of("fail", "replace"))
    .define("topic.illegal.chars.replacement", Type.STRING, "_",
            "With topic.illegal.chars=replace: what a refused character becomes (characters the broker allows).")
)
_KEYS = ROUTING_CONFIG.merge(NAMING_CONFIG)
# Source names a template is tried with when no source topic is known: a plain name and a Pulsar one.
_SAMPLES = ("orders", "persistent://public/default/orders")


class NameRules(Protocol):
    """One broker's topic name rules."""

    broker: str  # "RocketMQ", as messages name it

    def complete(self, name: str) -> str:
        """The name the sink really uses for ``name`` (e.g. Pulsar's full name of a short one)."""

    def problem(self, name: str) -> str | None:
        """Why the broker refuses the completed ``name``; None when it accepts it."""

    def replace(self, source_topic: str, rendered: str, template: str | None, replacement: str) -> str:
        """``rendered`` (routed from ``source_topic`` by ``template``; None: a fixed ``topic``) with
        every refused character replaced; ValueError when no replacement can make it legal."""

    def replacement_problem(self, replacement: str) -> str | None:
        """Why ``replacement`` cannot stand in for refused characters; None when it can."""


class IllegalTopicName(ConnectError):
    """A source topic maps to a name the target broker refuses (permanent: it will not heal)."""


class TargetNames:
    """Source topic -> legal target name (``topic``, ``topic.template``, ``topic.illegal.chars``),
    cached per source topic; raises :class:`IllegalTopicName` for a name the broker refuses."""

    def __init__(self, config: Mapping[str, Any], rules: NameRules):
        self.rules = rules
        self._route = TopicRouter(config)
        self._fixed = config.get("topic") or ""
        self._template = config.get("topic.template") or "{topic}"
        self.replacing = config.get("topic.illegal.chars", "fail") == "replace"
        self._replacement = config.get("topic.illegal.chars.replacement", "_")
        self._cache: dict[str, tuple[str, bool]] = {}  # source topic -> (target, or why refused; legal)
        self._announced: dict[str, None] = {}  # ordered: messages list topics as they came

    @property
    def merges(self) -> bool:
        """Whether every source topic goes to one name on purpose (a fixed name, or a template
        without ``{topic}``): then several sources in one target is no collision."""
        return bool(self._fixed) or "{topic}" not in self._template

    def __call__(self, source_topic: str) -> str:
        known = self._cache.get(source_topic)
        if known is None:
            name, problem, fixed = self.check(source_topic)
            known = self._cache[source_topic] = (name, True) if problem is None else (
                illegal_message(self.rules.broker, f"source topic {source_topic!r}", name, problem, fixed), False)
        if not known[1]:
            raise IllegalTopicName(known[0])  # a new one each time: a raised instance keeps growing its traceback
        return known[0]

    def check(self, source_topic: str) -> tuple[str, str | None, str | None]:
        """(target name, why the broker refuses it or None, the legal name ``replace`` would give
        instead or None) for ``source_topic``, with ``topic.illegal.chars`` applied."""
        rules = self.rules
        rendered = self._route(source_topic)
        target = rules.complete(rendered)
        problem = rules.problem(target)
        if problem is None:
            return target, None, None
        try:
            fixed = rules.complete(rules.replace(source_topic, rendered, None if self._fixed else self._template,
                                                 self._replacement))
        except ValueError as exc:
            fixed, fixed_problem = "", f"{exc}, even with refused characters replaced"
        else:
            fixed_problem = rules.problem(fixed)
        if not self.replacing:
            return target, problem, None if fixed_problem else fixed
        if fixed_problem is None:
            return fixed, None, None
        return target, fixed_problem, None

    def plan(self, source_topics: Iterable[str]) -> tuple[dict[str, str], dict[str, str], dict[str, list[str]]]:
        """(source -> target, source -> why refused, target -> its source topics when several
        would land in it without the config merging them on purpose)."""
        targets: dict[str, str] = {}
        refused: dict[str, str] = {}
        for topic in dict.fromkeys(source_topics):
            try:
                targets[topic] = self(topic)
            except IllegalTopicName as exc:
                refused[topic] = str(exc)
        by_target: dict[str, list[str]] = {}
        for topic, target in targets.items():
            by_target.setdefault(target, []).append(topic)
        collisions = {} if self.merges else {t: s for t, s in by_target.items() if len(s) > 1}
        return targets, refused, collisions

    def announce(self, source_topics: Iterable[str], log: logging.Logger, who: str) -> None:
        """Log, once per source topic, the names ``replace`` changed, the refused ones and collisions."""
        new = [t for t in dict.fromkeys(source_topics) if t not in self._announced]
        if not new:
            return
        self._announced.update(dict.fromkeys(new))
        targets, refused, collisions = self.plan(self._announced)
        renamed = [f"{s} -> {t}" for s, t in targets.items() if s in new and t != self.rules.complete(self._route(s))]
        if renamed:
            log.info("%s: target topics renamed (topic.illegal.chars=replace): %s", who, ", ".join(renamed))
        for topic in new:
            if topic in refused:
                log.error("%s: %s", who, refused[topic])
        for target, sources in collisions.items():
            if set(sources) & set(new):
                log.error("%s: %s", who, collision_message(self.rules.broker, target, sources))


def illegal_message(broker: str, who: str, target: str, problem: str, fixed: str | None) -> str:
    """The one message shape for a target name the broker refuses (``who``: which source topic)."""
    fix = (f"set the sink's topic.illegal.chars=replace (it becomes {fixed!r}), or name a legal target with "
           "topic / topic.template" if fixed else "name a legal target with topic / topic.template")
    return f"{who} maps to {broker} topic {target!r}, which {broker} refuses: {problem}. Fix: {fix}"


def collision_message(broker: str, target: str, sources: Sequence[str]) -> str:
    listed = ", ".join(repr(s) for s in sources)
    return (f"source topics {listed} all map to {broker} topic {target!r}: their records would mix in one topic. "
            "Fix: give them distinct legal names with topic.template, or read only one of them")


def naming_issues(config: Mapping[str, Any], rules: NameRules,
                  source_topics: Sequence[str] | None = None) -> list[ConfigIssue]:
    """Issues with the target names of a sink config (raw values). Without ``source_topics``: the
    replacement, a fixed ``topic`` and a template that gives illegal names whatever the source. With
    them (the names as the sink receives them): each one's target and collisions, once the config
    alone is sound (its own issues are ``validate``'s)."""
    if _KEYS.validate(config):
        return []  # the key's own validator says what is wrong
    cfg = _KEYS.parse(config)
    alone = _config_issues(cfg, rules)
    if source_topics is None or alone:
        return alone
    names = TargetNames(cfg, rules)
    _, refused, collisions = names.plan(source_topics)
    key = "topic" if cfg["topic"] else "topic.template"
    issues = [ConfigIssue(key, None, message) for message in refused.values()]
    issues.extend(ConfigIssue("topic.illegal.chars", None, collision_message(rules.broker, target, sources))
                  for target, sources in collisions.items())
    return issues


def _config_issues(cfg: Mapping[str, Any], rules: NameRules) -> list[ConfigIssue]:
    replacement = cfg["topic.illegal.chars.replacement"]
    problem = rules.replacement_problem(replacement) if cfg["topic.illegal.chars"] == "replace" else None
    if problem:
        return [ConfigIssue("topic.illegal.chars.replacement", replacement, problem)]
    names = TargetNames(cfg, rules)
    if cfg["topic"]:
        target, problem, fixed = names.check(_SAMPLES[0])
        who = "every source topic"
        key = "topic"
    else:
        checks = [names.check(sample) for sample in _SAMPLES]
        if any(problem is None for _, problem, _ in checks):
            return []  # some source topic gets a legal name
        target, problem, fixed = checks[0]
        who = f"topic.template {cfg['topic.template']!r} (whatever the source topic, e.g. {_SAMPLES[0]!r})"
        key = "topic.template"
    if problem is None:
        return []
    return [ConfigIssue(key, None, illegal_message(rules.broker, who, target, problem, fixed))]
