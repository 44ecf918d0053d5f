"""The outcome queue: delivery outcomes a client reports on a thread of its own, served on the task's.

Clients report outcomes on their own threads (librdkafka's poll thread of a shared producer,
pulsar-client's IO thread, the RocketMQ client's loop). A sink's accounting must be touched by
one thread only, so a callback does nothing but :meth:`OutcomeQueue.put` its outcome; the task's
thread takes them (:meth:`OutcomeQueue.drain`, or its own loop over ``items``) and waits for the
next one with :meth:`OutcomeQueue.wait`. The sink tasks (:class:`connect.sink.QueuedOutcomes`),
the side writers (:class:`connect.sink.side.QueuedSideWriter`) and the Kafka sink's shared
producer (``connectors.kafka.producers.Inbox``) all use this one queue.

Guarantees: outcomes come out in the order they were put (one ``collections.deque``: ``append``
and ``popleft`` are atomic in CPython, so the callbacks take no lock); a ``wait`` that finds
nothing queued returns as soon as one is put, or after its timeout, never later - an outcome put
between the check and the wait is not missed (the event is cleared before the queue is looked at
again).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable

__all__ = ["OutcomeQueue"]


class OutcomeQueue:
    """Outcomes in arrival order: ``put`` from any thread, ``drain`` and ``wait`` on the task's."""

    __slots__ = ("items", "arrived")

    def __init__(self) -> None:
        self.items: deque = deque()
        self.arrived = threading.Event()

    def put(self, item: Any) -> None:
        """Queue one outcome (the client's thread); wakes a ``wait``."""
        self.items.append(item)
        if not self.arrived.is_set():
            self.arrived.set()

    def drain(self, handle: Callable[[Any], Any]) -> int:
        """``handle`` every queued outcome, oldest first, in this thread; how many there were."""
        items = self.items
        n = 0
        while items:
            handle(items.popleft())
            n += 1
        return n

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until an outcome is queued (at once when one is); whether
        one is."""
        if self.items:
            return True
        if timeout <= 0:
            return False
        self.arrived.clear()
        if not self.items:  # one put before the clear is not missed
            self.arrived.wait(timeout)
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)
