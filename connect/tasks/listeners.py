"""Acknowledgement listeners: side parts of a pair that follow its acknowledgements.

The runner owns the loop, the accounting of acknowledgements, retries and failure routing; what
else wants to know about acknowledgements (offset syncs: where replicated records landed) is an
:class:`AckListener` registered with the runner. The runner calls it at fixed points and never
lets it hold the data up:

- ``attach(context)`` once, before the sink starts: the listener may hang what the sink feeds on
  the sink's context (``SinkTaskContext.positions``);
- ``resending(records)`` before records are sent again (a transient failure re-sent: they may
  land after records polled later);
- ``commit_point()`` after each commit point, once the acknowledged generations are accounted;
- ``metrics()`` with each epoch's result, ``close()`` when the pair stops.

A listener that raises is logged and otherwise ignored: listeners are advisory.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping

__all__ = ["AckListener", "AckListeners"]

log = logging.getLogger(__name__)


class AckListener:
    """Follows a pair's acknowledgements; every method is optional (see the module doc)."""

    def attach(self, context: Any) -> None:
        """Called once with the sink's context, before the sink starts."""

    def resending(self, records: list) -> None:
        """``records`` are about to be sent again."""

    def commit_point(self) -> None:
        """A commit point passed: the acknowledgements so far are accounted."""

    def source_gaps(self, gaps: list) -> None:
        """The source found ``gaps`` this epoch (``SourceGap.as_dict``: records it dropped before they were copied)."""

    def metrics(self) -> Mapping[str, float]:
        return {}

    def close(self) -> None:
        """The pair stops."""


class AckListeners(AckListener):
    """The listeners of one pair, called in turn; one failing does not stop the others."""

    def __init__(self, listeners: Iterable[AckListener | None] = (), name: str = ""):
        self.listeners = [x for x in listeners if x is not None]
        self.name = name

    def __bool__(self) -> bool:
        return bool(self.listeners)

    def _each(self, what: str, *args: Any) -> None:
        for listener in self.listeners:
            try:
                getattr(listener, what)(*args)
            except Exception as exc:  # noqa: BLE001 - advisory: the data flow goes on
                log.warning("[%s] %s.%s: %s", self.name, type(listener).__name__, what, exc)

    def attach(self, context: Any) -> None:
        for listener in self.listeners:  # a listener that cannot attach must fail the pair's start
            listener.attach(context)

    def resending(self, records: list) -> None:
        self._each("resending", records)

    def commit_point(self) -> None:
        self._each("commit_point")

    def source_gaps(self, gaps: list) -> None:
        self._each("source_gaps", gaps)

    def metrics(self) -> Mapping[str, float]:
        out: dict[str, float] = {}
        for listener in self.listeners:
            out.update(listener.metrics())
        return out

    def close(self) -> None:
        errors = []
        for listener in self.listeners:
            try:
                listener.close()
            except Exception as exc:  # noqa: BLE001 - close every one, report the first failure
                errors.append(exc)
        if errors:
            raise errors[0]
