"""Transformation and Predicate: what a transform author subclasses (Kafka Connect's KIP-66 / KIP-585).

Lifecycle, as in Kafka Connect: the worker validates the transform's own keys against
:meth:`Transformation.config_def` (the ``transforms.NAME.`` prefix removed; every issue names the
full key), instantiates the class once per task pair, calls :meth:`~Transformation.configure`
with the *parsed* values (typed, defaults filled in), then :meth:`~Transformation.apply` for each
record, and :meth:`~Transformation.close` when the pair stops.

``apply`` returns the record to pass on (a new one: records are immutable, use
``attrs.evolve(record, ...)`` or :func:`connect.records.make_record`), or ``None`` to drop it (it
is counted ``filtered`` and its offset is committed like a delivered record's). An exception fails
*that record only*: it goes to the source's failed-message hooks, then the dead-letter topic,
then ``errors.tolerance``, with the transform's name in the reason. A transform must not keep
records between calls.

A predicate's :meth:`Predicate.test` says whether the transform it guards applies to a record
(``transforms.NAME.predicate``; ``transforms.NAME.negate=true`` inverts it).

Target names before any record: :meth:`Transformation.topic_for` says where a topic's records go
when the topic alone decides it (a :class:`~connect.transforms.routing.RegexRouter`), else
:data:`UNKNOWN` (the default: a custom transform may rename per record); a transform that never
changes topics says so with ``keeps_topic = True``. :meth:`Predicate.test_topic` is the same for a
predicate. The worker validates and prepares (creates) target topics under these names
(:mod:`connect.transforms.topics`).

Custom transforms and predicates are plugins: declare them as entry points of the groups
``connect.transforms`` and ``connect.predicates`` (see :mod:`connect.transforms.registry`).
"""

from __future__ import annotations

from typing import Any, Mapping

from connect.config import Configurable
from connect.errors import ConnectError
from connect.records import ConnectRecord

__all__ = ["Transformation", "Predicate", "TransformError", "UNKNOWN"]


class _Unknown:
    """The type of :data:`UNKNOWN` (one instance: compare with ``is``)."""

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __reduce__(self) -> str:  # unpickled as the module's own instance
        return "UNKNOWN"


UNKNOWN = _Unknown()
"""What :meth:`Transformation.topic_for` / :meth:`Predicate.test_topic` answer when the topic
alone does not decide: it depends on each record (its timestamp, headers, value)."""


class TransformError(ConnectError):
    """A transform cannot handle one record (a value it cannot read, a field that is missing...).
    The record fails alone; the runner puts the transform's name in front of this text."""


class _Plugin(Configurable):
    """``config_def`` declares the keys without the ``transforms.NAME.`` / ``predicates.NAME.`` prefix."""

    def configure(self, config: Mapping[str, Any]) -> None:
        """Take the parsed values of :meth:`config_def` (types converted, defaults filled in)."""
        self.config = dict(config)

    def close(self) -> None:
        """Release what ``configure`` acquired; called once when the task pair stops."""


class Transformation(_Plugin):
    """Changes, replaces or drops one record at a time."""

    kind = "transformation"
    keeps_topic = False  # True: records leave with the topic they came with (topic_for says so)
    topic_key: str | None = None  # the key that names target topics (validation errors name it)

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        raise NotImplementedError

    def topic_for(self, topic: str) -> str | None | _Unknown:
        """Where records of ``topic`` go, known from the topic alone (called after ``configure``):
        the new name, the same name, None when every one of them is dropped, or :data:`UNKNOWN`
        when it depends on the record (the default, unless ``keeps_topic``)."""
        return topic if self.keeps_topic else UNKNOWN


class Predicate(_Plugin):
    """Says whether a transform applies to a record."""

    kind = "predicate"

    def test(self, record: ConnectRecord) -> bool:
        raise NotImplementedError

    def test_topic(self, topic: str) -> bool | _Unknown:
        """What :meth:`test` answers for every record of ``topic``, when the topic alone decides;
        :data:`UNKNOWN` (the default) when it depends on the record."""
        return UNKNOWN
