"""Delivery callbacks bound to their message without an allocation per produce.

librdkafka calls a produce's ``on_delivery`` once, with (error, message); the callback must say
which message it was (a failure names its own record, never one found again by content) and
which checkpoint it counts down. A ``functools.partial`` per produce does that at about 0.2 us a
record (its allocation and the call through it). :class:`DeliverySlots` keeps reusable slots
instead: a slot is taken at produce time, given the batch, the index of the message in it and
the put it belongs to (which counts its records down, ``left``, and its checkpoint's, ``gen.left``),
passed as the callback (its ``report``, bound once when the slot was made), and goes back to the
pool when its report comes. Identity is the slot's: two byte-identical messages never share one.

A slot that never reports (its producer was dropped without serving its reports) is simply not
reused; the pool makes new slots when it runs out.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

__all__ = ["DeliverySlots", "Slot"]


class Slot:
    """One message in flight: ``batch[i]``, put with ``put``. ``report`` is its callback."""

    __slots__ = ("pool", "outcome", "batch", "i", "put", "report")

    def __init__(self, pool: list, outcome: Callable[[Any, int, Any, Any, Any], bool], inbox=None):
        self.pool = pool
        # (batch, i, put, err, msg) for a failure, or a success somebody follows; True: the outcome
        # is held (a transient failure counted down later), not counted now
        self.outcome = outcome
        self.batch: Any = None
        self.i = 0
        self.put: Any = None
        # a shared producer's report is queued to the task's inbox and handled in its thread
        self.report = self._report if inbox is None else partial(inbox.arrive, self._report)

    def _report(self, err, msg) -> None:
        put = self.put
        if err is None or not self.outcome(self.batch, self.i, put, err, msg):  # reported before counted
            put.left -= 1
            put.gen.left -= 1
        self.batch = self.put = None
        self.pool.append(self)


class FollowedSlot(Slot):
    """A slot whose successes are passed on too (offset syncs: where each record landed)."""

    __slots__ = ()

    def _report(self, err, msg) -> None:
        put = self.put
        if not self.outcome(self.batch, self.i, put, err, msg):
            put.left -= 1
            put.gen.left -= 1
        self.batch = self.put = None
        self.pool.append(self)


class DeliverySlots:
    """The pool of one producer's sink: ``take()`` a slot, fill ``batch``, ``i`` and ``put``, and
    produce with ``on_delivery=slot.report``; ``give_back(slot)`` if the produce did not happen."""

    def __init__(self, outcome: Callable[[Any, int, Any, Any, Any], bool], follow_successes: bool = False,
                 inbox=None):
        self.free: list[Slot] = []
        self._outcome = outcome
        self._cls = FollowedSlot if follow_successes else Slot
        self._inbox = inbox  # a shared producer's reports go through the task's inbox (connectors.kafka.producers)

    def take(self) -> Slot:
        try:
            return self.free.pop()
        except IndexError:
            return self._cls(self.free, self._outcome, self._inbox)

    def give_back(self, slot: Slot) -> None:
        slot.batch = slot.put = None
        self.free.append(slot)

    def clear(self) -> None:
        """Drop the free slots (they refer back to the pool and the sink)."""
        self.free.clear()
