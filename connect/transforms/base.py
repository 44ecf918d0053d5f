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

Custom transforms and predicates are plugins: declare them as entry points of the groups
``connect.transforms`` and ``connect.predicates`` (see :mod:`connect.transforms.registry`).
"""

from __future__ import annotations

from typing import Any, Mapping

from connect.config import ConfigDef
from connect.errors import ConfigIssue, ConnectError
from connect.records import ConnectRecord

__all__ = ["Transformation", "Predicate", "TransformError"]


class TransformError(ConnectError):
    """A transform cannot handle one record (a value it cannot read, a field that is missing...).
    The record fails alone; the runner puts the transform's name in front of this text."""


class _Plugin:
    @classmethod
    def version(cls) -> str:
        from connect import __version__

        return __version__

    @classmethod
    def config_def(cls) -> ConfigDef:
        """The keys this plugin takes (without the ``transforms.NAME.`` prefix)."""
        return ConfigDef()

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        """Every issue with the raw ``config``; override to add cross-key checks (call super first)."""
        return cls.config_def().validate(config)

    def configure(self, config: Mapping[str, Any]) -> None:
        """Take the parsed values of :meth:`config_def` (types converted, defaults filled in)."""
        self.config = dict(config)

    def close(self) -> None:
        """Release what ``configure`` acquired; called once when the task pair stops."""


class Transformation(_Plugin):
    """Changes, replaces or drops one record at a time."""

    kind = "transformation"

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        raise NotImplementedError


class Predicate(_Plugin):
    """Says whether a transform applies to a record."""

    kind = "predicate"

    def test(self, record: ConnectRecord) -> bool:
        raise NotImplementedError
