"""Target-topic routing shared by every sink: the ``topic`` and ``topic.template`` keys.

Every sink in this project honours these two keys so that the runner can point any sink at a
dead-letter topic by setting ``topic``.

``topic.template`` is not a ``str.format`` string: the only substitution is the placeholder
``{topic}`` (the source topic's name). Any other ``{...}`` (another name, an attribute or index
access, a format spec, an empty pair) and any unpaired brace is rejected when the config is
validated, and :class:`TopicRouter` refuses such a template too, so no template can reach into
Python objects.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from connect.config import ConfigDef, Importance, Type
from connect.errors import ConfigError, ConfigIssue

__all__ = ["TopicRouter", "ROUTING_CONFIG", "PLACEHOLDERS", "check_template", "render_template"]

PLACEHOLDERS = ("topic",)
_FIELD = re.compile(r"\{([^{}]*)\}")


def check_template(value: Any) -> str | None:
    """None when ``value`` uses no placeholder but ``{topic}`` and no stray brace; else why not."""
    if not isinstance(value, str):
        return "must be a string"
    allowed = "may only use the placeholder {topic}"
    for match in _FIELD.finditer(value):
        if match.group(1) not in PLACEHOLDERS:
            return f"{allowed} ({match.group(0)!r} is not allowed)"
    rest = _FIELD.sub("", value)
    if "{" in rest or "}" in rest:
        return f"{allowed} (an unpaired brace is not allowed)"
    return None


def render_template(template: str, topic: str) -> str:
    """``template`` with every ``{topic}`` replaced by ``topic``; nothing else is substituted."""
    return _FIELD.sub(lambda match: topic if match.group(1) == "topic" else match.group(0), template)


ROUTING_CONFIG = (
    ConfigDef()
    .define("topic", Type.STRING, "", "Fixed target topic for every record (overrides topic.template).",
            importance=Importance.HIGH)
    .define("topic.template", Type.STRING, "{topic}",
            "Target topic name built from the source topic, e.g. 'backup.{topic}'.",
            importance=Importance.HIGH, validator=check_template)
)


class TopicRouter:
    """Maps a source topic to a target topic; caches the answer per source topic."""

    def __init__(self, config: Mapping[str, Any]):
        self._fixed = config.get("topic") or ""
        self._template = config.get("topic.template") or "{topic}"
        problem = check_template(self._template)
        if problem:
            raise ConfigError([ConfigIssue("topic.template", self._template, problem)])
        self._cache: dict[str, str] = {}

    def __call__(self, topic: str) -> str:
        target = self._cache.get(topic)
        if target is None:
            target = self._fixed or render_template(self._template, topic)
            self._cache[topic] = target
        return target
