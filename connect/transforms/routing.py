"""Topic routing transforms: RegexRouter and TimestampRouter (Kafka Connect's, same keys).

``RegexRouter``: a topic that matches ``regex`` *whole* (Java's ``Matcher.matches``) becomes
``replacement``, where ``$1``/``${name}`` are groups (Java's syntax; ``\\$`` is a literal dollar);
other topics are kept. The regex is Java's dialect, run in linear time (:mod:`connect.patterns`).
``TimestampRouter``: ``topic.format`` with ``${topic}`` and ``${timestamp}``, the record's
timestamp formatted in UTC with a Java ``SimpleDateFormat`` pattern (letters
``yyyy yy MM dd HH mm ss SSS``, text in quotes).
"""

from __future__ import annotations

import datetime
import re
from typing import Any, Callable, Mapping

from connect import patterns
from connect.config import ConfigDef, Type, non_empty, valid_regex
from connect.errors import ConfigIssue
from connect.patterns import JavaReplacement, PatternError
from connect.records import ConnectRecord, make_record
from connect.transforms.base import UNKNOWN, Transformation, TransformError

__all__ = ["RegexRouter", "TimestampRouter", "date_formatter", "with_topic"]


def with_topic(record: ConnectRecord, topic: str) -> ConnectRecord:
    return make_record(topic, record.key, record.value, record.headers, record.timestamp, record.source_partition,
                       record.source_offset, record.partition, record.value_schema)


def _refused_by(build: Callable[[str], Any]) -> Callable[[Any], str | None]:
    """A config validator: None when ``build(value)`` works, else its ValueError's text."""
    def check(value: Any) -> str | None:
        if not value:
            return "must not be empty"
        try:
            build(value)
        except ValueError as exc:
            return str(exc)
        return None

    return check


class RegexRouter(Transformation):
    """Renames topics that match ``regex`` (whole) to ``replacement`` (``$1`` = group 1)."""

    @classmethod
    def config_def(cls) -> ConfigDef:
        return (ConfigDef()
                .define("regex", Type.STRING, doc="Regular expression the whole topic name must match.",
                        validator=lambda v: non_empty(v) or valid_regex(v))
                .define("replacement", Type.STRING, doc="The new name; $1, ${name} are groups of the match.",
                        validator=_refused_by(JavaReplacement)))

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().validate(config)
        if not issues:  # both valid alone: every group the replacement names must be in the regex
            try:
                JavaReplacement(config["replacement"], patterns.compile(config["regex"]))
            except PatternError as exc:
                issues.append(ConfigIssue("replacement", config["replacement"], str(exc)))
        return issues

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.regex = patterns.compile(config["regex"])
        self.template = JavaReplacement(config["replacement"], self.regex)
        self._names: dict[str, str] = {}

    topic_key = "replacement"

    def topic_for(self, topic: str) -> str:
        """The topic's new name (the topic itself when ``regex`` does not match it whole)."""
        new = self._names.get(topic)
        if new is None:
            m = self.regex.fullmatch(topic)
            new = self.template.expand(m) if m else topic
            if len(self._names) < 10_000:
                self._names[topic] = new
        return new

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        topic = record.topic
        new = self.topic_for(topic)
        return record if new == topic else with_topic(record, new)


_DATE_LETTERS = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}
_DATE_TOKEN = re.compile(r"'([^']*)'|([A-Za-z])\2*|([^A-Za-z']+)")


def date_formatter(pattern: str) -> Callable[[datetime.datetime], str]:
    """A formatter for a Java SimpleDateFormat pattern (see the module doc); ValueError names
    the first letter run it does not support."""
    parts: list[str | None] = []  # strftime fragments; None: milliseconds
    pos = 0
    for m in _DATE_TOKEN.finditer(pattern):
        if m.start() != pos:
            break
        quoted, _, literal = m.groups()
        run = m.group(0)
        if quoted is not None:
            parts.append((quoted or "'").replace("%", "%%"))
        elif literal is not None:
            parts.append(literal.replace("%", "%%"))
        elif run == "SSS":
            parts.append(None)
        elif run in _DATE_LETTERS:
            parts.append(_DATE_LETTERS[run])
        else:
            raise ValueError(f"{run!r} is not supported (use yyyy, yy, MM, dd, HH, mm, ss, SSS, text in quotes)")
        pos = m.end()
    if pos != len(pattern):
        raise ValueError(f"unbalanced quote at character {pos}")

    def format_(ts: datetime.datetime) -> str:
        return "".join(f"{ts.microsecond // 1000:03d}" if p is None else ts.strftime(p) for p in parts)

    return format_


class TimestampRouter(Transformation):
    """Renames each record's topic by ``topic.format``: ``${topic}`` and ``${timestamp}`` (the
    record's timestamp, UTC, formatted by ``timestamp.format``). A record without a timestamp fails."""

    @classmethod
    def config_def(cls) -> ConfigDef:
        return (ConfigDef()
                .define("topic.format", Type.STRING, "${topic}-${timestamp}",
                        "The new topic: ${topic} and ${timestamp} are replaced.", validator=non_empty)
                .define("timestamp.format", Type.STRING, "yyyyMMdd",
                        "Java SimpleDateFormat pattern of ${timestamp} (UTC).", validator=_refused_by(date_formatter)))

    topic_key = "topic.format"

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.topic_format = config["topic.format"]
        self.format = date_formatter(config["timestamp.format"])

    def topic_for(self, topic: str) -> str | object:
        """UNKNOWN: each record's timestamp names its topic (unless the format has no ``${timestamp}``)."""
        if "${timestamp}" in self.topic_format:
            return UNKNOWN
        return self.topic_format.replace("${topic}", topic)

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        if record.timestamp is None:
            raise TransformError("the record has no timestamp")
        when = datetime.datetime.fromtimestamp(record.timestamp / 1000, tz=datetime.timezone.utc)
        topic = self.topic_format.replace("${topic}", record.topic).replace("${timestamp}", self.format(when))
        return with_topic(record, topic)
