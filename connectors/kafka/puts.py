"""The puts of a Kafka sink task whose records may still lack an outcome, and the sink's delivery timeout.

Each ``put`` (records or a native batch) that hands messages to the producer is a :class:`Put`: its
place in put order (``seq``; each produce also carries its index in the batch, so held transient
failures are reported in put order), how many of its messages still have no outcome (``left``,
counted down by their delivery reports, ``connectors.kafka.delivery``), the checkpoint they count
down too (``gen``) and when it was put (``at``). :class:`PutLog` keeps them oldest first: the age of
the oldest put with a record that has no outcome is what the sink's delivery timeout
(``message.timeout.ms`` / ``delivery.timeout.ms``, enforced by the sink, see ``connectors.kafka.sink``)
is measured against.
"""

from __future__ import annotations

import time
from collections import deque

from connect.sink import Outstanding

__all__ = ["Put", "PutLog"]


class Put:
    """The records one ``put`` handed to the producer."""

    __slots__ = ("seq", "at", "left", "gen")

    def __init__(self, seq: int, gen: Outstanding) -> None:
        self.seq = seq
        self.at = time.monotonic()
        self.left = 0
        self.gen = gen


class PutLog:
    """Puts whose records may lack an outcome, oldest first. ``timeout``: the delivery timeout in
    seconds (0: none)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._puts: deque[Put] = deque()
        self._seq = 0  # put order

    def new(self, gen: Outstanding) -> Put:
        """The next put, counting down ``gen`` (the current checkpoint)."""
        put = Put(self._seq, gen)
        self._seq += 1
        self._puts.append(put)
        return put

    def oldest(self) -> Put | None:
        """The oldest put with a record that has no outcome yet."""
        puts = self._puts
        while puts and puts[0].left <= 0:
            puts.popleft()
        return puts[0] if puts else None

    def unsettled(self) -> int:
        """Records put that have no outcome counted yet (held transient failures included)."""
        self.oldest()  # drops the settled puts in front
        return sum(p.left for p in self._puts)

    def expired(self) -> bool:
        """True when the oldest record without an outcome was put more than the timeout ago."""
        if not self.timeout:
            return False
        oldest = self.oldest()
        return oldest is not None and time.monotonic() - oldest.at > self.timeout

    def clear(self) -> None:
        """Every record has an outcome (reported after an abandoned producer)."""
        self._puts.clear()
