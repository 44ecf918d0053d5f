"""Target-topic routing shared by every sink: the ``topic`` and ``topic.template`` keys.

Every sink in this project honours these two keys so that the runner can point any sink at a
dead-letter topic by setting ``topic``.
"""

from __future__ import annotations

from typing import Any, Mapping

from connect.config import ConfigDef, Importance, Type

__all__ = ["TopicRouter", "ROUTING_CONFIG", "check_template"]


def check_template(value: Any) -> str | None:
    try:
        value.format(topic="t")
    except (KeyError, IndexError, ValueError) as exc:
        return f"may only use the placeholder {{topic}} ({exc!r} is not allowed)"
    return None


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
        self._cache: dict[str, str] = {}

    def __call__(self, topic: str) -> str:
        target = self._cache.get(topic)
        if target is None:
            target = self._fixed or self._template.format(topic=topic)
            self._cache[topic] = target
        return target
