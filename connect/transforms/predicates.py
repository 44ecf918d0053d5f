"""Built-in predicates (KIP-585: TopicNameMatches, HasHeaderKey, RecordIsTombstone) and Filter,
the transform that drops every record it applies to (so it is used with a predicate)."""

from __future__ import annotations

from typing import Any, Mapping

from connect import patterns
from connect.config import ConfigDef, Type, non_empty, valid_regex
from connect.records import ConnectRecord
from connect.transforms.base import Predicate, Transformation

__all__ = ["TopicNameMatches", "HasHeaderKey", "RecordIsTombstone", "Filter"]


class TopicNameMatches(Predicate):
    """True for records whose topic matches ``pattern`` whole (Java's dialect, :mod:`connect.patterns`)."""

    @classmethod
    def config_def(cls) -> ConfigDef:
        return ConfigDef().define("pattern", Type.STRING, doc="Regular expression the whole topic name must match.",
                                  validator=lambda v: non_empty(v) or valid_regex(v))

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.pattern = patterns.compile(config["pattern"])
        self._answers: dict[str, bool] = {}  # topic -> match: a pair sees few topics, records see them often

    def test(self, record: ConnectRecord) -> bool:
        answer = self._answers.get(record.topic)
        if answer is None:
            answer = self.test_topic(record.topic)
            if len(self._answers) < 10_000:
                self._answers[record.topic] = answer
        return answer

    def test_topic(self, topic: str) -> bool:
        return self.pattern.fullmatch(topic) is not None


class HasHeaderKey(Predicate):
    """True for records with at least one header of that name."""

    @classmethod
    def config_def(cls) -> ConfigDef:
        return ConfigDef().define("name", Type.STRING, doc="The header name.", validator=non_empty)

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.name = config["name"]

    def test(self, record: ConnectRecord) -> bool:
        return any(name == self.name for name, _ in record.headers or ())


class RecordIsTombstone(Predicate):
    """True for records whose value is None (a tombstone)."""

    def test(self, record: ConnectRecord) -> bool:
        return record.value is None


class Filter(Transformation):
    """Drops every record it applies to: give it a predicate (``transforms.NAME.predicate``).
    A dropped record counts as ``filtered`` and its offset is committed."""

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        return None

    def topic_for(self, topic: str) -> None:
        return None
