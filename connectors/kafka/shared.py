"""One Kafka consumer per process and cluster, shared by every source task the process runs.

A worker that hosts many small connectors in a few Python processes (``worker.pair.hosting=shared``)
would otherwise hold one consumer per task, and every idle consumer sends its own fetch request
every ``fetch.wait.max.ms``: 200 connectors make 2,000 fetches/s that answer nothing, enough to
overload a broker (measured with ``bench/many_connectors.py`` on the embedded broker: p99 latency
12 s at 200 connectors of 50 msg/s). Shared, a process sends one fetch per broker for the
partitions of all its tasks, as a single consumer with many partitions does, so fetch load grows
with processes and traffic, not with connectors.

How the sharing works:

- Tasks whose consumer settings are equal (bootstrap servers and every librdkafka key, the
  task-specific ``group.id`` aside: sources assign partitions and never commit to a group) share
  one :class:`SharedConsumer`. Each task holds a :class:`Subscription` to its own partitions.
- No extra thread: whichever task polls while nothing is buffered for it takes the consumer
  ("leader"), fetches for everyone and hands each task its messages; the others wait on a
  condition and take theirs when they arrive. One subscription alone on a consumer gets the
  batch as it comes, without routing.
- Assignments change under the same lock as a fetch, so a task that re-subscribes from an earlier
  offset (a restart from committed offsets) never gets a message fetched for its previous
  position: its buffer is dropped and librdkafka discards outdated fetches after the
  (re)assignment.
- Memory stays bounded per task: a task that stops polling (its target is down, it is between
  epochs) has its partitions paused once ``high`` messages wait for it, and resumed when it has
  taken them below ``low``; others keep flowing.
- Errors of a partition go to the task that owns it; errors of the client (all brokers down) go
  to every task.
- Every other call on the consumer (watermarks, offsets for times) goes through :attr:`locked`,
  under the fetch lock: with confluent-kafka 2.16 a ``position`` or ``get_watermark_offsets`` call
  from one thread while another loops in ``consume`` waits until the loop stops (measured: forever;
  in a host, epochs that ended in ``lag()`` stalled for up to a minute). A task's position is its
  own (:attr:`Subscription.positions`), not the consumer's, which runs ahead by what is buffered.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from contextlib import contextmanager
from typing import Any, Iterable, Mapping

from confluent_kafka import Consumer, KafkaException, TopicPartition

__all__ = ["SharedConsumer", "Subscription", "SHARED", "SharedConsumers"]


class Subscription:
    """One task's partitions on a :class:`SharedConsumer`."""

    def __init__(self, owner: SharedConsumer, tps: list[TopicPartition], high: int) -> None:
        self._owner = owner
        self.partitions = [(tp.topic, tp.partition) for tp in tps]
        # next offset to hand out, per partition: the start, then after each message taken
        self.positions = {(tp.topic, tp.partition): tp.offset for tp in tps}
        self.buffer: deque = deque()
        self.high, self.low = high, max(high // 4, 1)
        self.paused = False
        self.resume_wanted = False
        self.closed = False

    @property
    def consumer(self) -> _Locked:
        """The consumer for calls that read and never fetch (watermarks, offsets for times), each
        under the fetch lock."""
        return self._owner.locked

    def take(self, most: int, wait: float) -> list:
        """Up to ``most`` messages for this task: what waits for it at once, else the first to
        arrive within ``wait`` seconds and what came with it."""
        return self._owner.take(self, most, wait)

    def close(self) -> None:
        self._owner.unsubscribe(self)


class SharedConsumer:
    """A librdkafka consumer whose partitions belong to several subscriptions (see the module doc)."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self.consumer = Consumer(dict(conf))
        self._lock = threading.Lock()  # held by the leader for a fetch, for (un)assignments and other calls
        self.locked = _Locked(self)
        self._arrived = threading.Condition(threading.Lock())  # notified when messages were handed out
        self._routes: dict[tuple[str, int], Subscription] = {}
        self._subs: list[Subscription] = []
        self.idle_since: float | None = time.monotonic()  # no subscription since
        self.reserved: set[tuple[str, int]] = set()  # handed out by SharedConsumers.get, not subscribed yet
        self._closed = False

    # -- subscriptions ------------------------------------------------------------------------
    def partitions(self) -> set[tuple[str, int]]:
        """Partitions read or reserved through this consumer."""
        with self._lock:
            return set(self._routes) | self.reserved

    def subscribe(self, tps: list[TopicPartition], high: int) -> Subscription:
        """A subscription reading ``tps`` from their offsets. A partition another subscription
        holds is an error: one task per partition is the connector's contract."""
        sub = Subscription(self, tps, high)
        with self._lock:
            taken = [p for p in sub.partitions if p in self._routes]
            if taken:
                raise ValueError(f"partitions already read through this consumer: {taken}")
            if tps:
                self.consumer.incremental_assign(tps)
            for p in sub.partitions:
                self._routes[p] = sub
            self.reserved.difference_update(sub.partitions)
            self._subs.append(sub)
            self.idle_since = None
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            if sub.closed:
                return
            sub.closed = True
            mine = [TopicPartition(t, p) for t, p in sub.partitions if self._routes.get((t, p)) is sub]
            for t, p in sub.partitions:
                if self._routes.get((t, p)) is sub:
                    del self._routes[(t, p)]
            self._subs.remove(sub)
            sub.buffer.clear()
            if not self._subs:
                self.idle_since = time.monotonic()
            if mine and not self._closed:
                try:
                    self.consumer.incremental_unassign(mine)
                except KafkaException:
                    pass  # the consumer is closing or broken: nothing more is fetched for them anyway
        with self._arrived:
            self._arrived.notify_all()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self.consumer.close()

    @contextmanager
    def exclusive(self, timeout: float = -1):
        """The consumer to oneself: no fetch runs meanwhile (waits for the current one, at most
        ``timeout`` seconds if given: then TimeoutError)."""
        if not self._lock.acquire(timeout=timeout):
            raise TimeoutError("the shared consumer stayed busy")
        try:
            yield self.consumer
        finally:
            self._lock.release()

    # -- fetching -----------------------------------------------------------------------------
    def take(self, sub: Subscription, most: int, wait: float) -> list:
        deadline = time.monotonic() + wait
        while True:
            if sub.buffer or sub.closed:
                return self._pop(sub, most)
            left = deadline - time.monotonic()
            with self._arrived:
                # Tried under the condition: a leader notifies under it after releasing the lock,
                # so a task that finds the lock taken is waiting before that notification.
                if not sub.buffer and not self._lock.acquire(blocking=False):
                    if left <= 0:
                        return self._pop(sub, most)
                    self._arrived.wait(left)  # for what the leader hands out, or for the lock
                    continue
                if sub.buffer:
                    continue
            try:
                self._lead(sub, most, max(left, 0.0))
            finally:
                self._lock.release()
                with self._arrived:
                    self._arrived.notify_all()
            if sub.buffer or left <= 0:
                return self._pop(sub, most)

    def _pop(self, sub: Subscription, most: int) -> list:
        buf = sub.buffer
        n = min(most, len(buf))
        out = [buf.popleft() for _ in range(n)]
        if out:  # the last offset taken per partition (from the end: one message for one partition)
            positions = sub.positions
            left = len(positions)
            seen = set()
            for m in reversed(out):
                if m.error() is None:
                    tp = (m.topic(), m.partition())
                    if tp not in seen:
                        seen.add(tp)
                        positions[tp] = m.offset() + 1
                        if len(seen) == left:
                            break
        if sub.paused and len(buf) <= sub.low:
            sub.resume_wanted = True
        return out

    def _lead(self, sub: Subscription, most: int, wait: float) -> None:
        """Fetch (the lock is held): the messages on hand, else the first within ``wait``."""
        self._apply_resumes()
        consume = self.consumer.consume
        msgs = consume(most, 0)
        if not msgs and wait > 0:
            msgs = consume(1, wait)
            if msgs and most > 1:
                msgs.extend(consume(most - 1, 0))
        if not msgs:
            return
        if len(self._subs) == 1 and self._subs[0] is sub:
            sub.buffer.extend(msgs)
            return
        routes, touched = self._routes, set()
        for m in msgs:
            topic = m.topic()
            target = routes.get((topic, m.partition())) if topic is not None else None
            if target is not None:
                target.buffer.append(m)
                touched.add(target)
            elif m.error() is not None and (topic is None or m.partition() is None or m.partition() < 0):
                for s in self._subs:  # a client-wide error: every task hears of it
                    s.buffer.append(m)
            # else: a message of a partition no longer assigned (fetched before its unassignment)
        for target in touched:
            if target is not sub and not target.paused and len(target.buffer) >= target.high:
                self._pause(target)

    def _pause(self, sub: Subscription) -> None:
        try:
            self.consumer.pause([TopicPartition(t, p) for t, p in sub.partitions])
            sub.paused, sub.resume_wanted = True, False
        except KafkaException:
            pass

    def _apply_resumes(self) -> None:
        for s in self._subs:
            if s.resume_wanted:
                s.resume_wanted = False
                try:
                    self.consumer.resume([TopicPartition(t, p) for t, p in s.partitions])
                    s.paused = False
                except KafkaException:
                    s.resume_wanted = True


class _Locked:
    """The shared consumer's methods, each called under its fetch lock."""

    def __init__(self, shared: SharedConsumer) -> None:
        self._shared = shared

    def __getattr__(self, name: str):
        def call(*args, **kwargs):
            with self._shared.exclusive() as consumer:
                return getattr(consumer, name)(*args, **kwargs)

        return call


class SharedConsumers:
    """The process's shared consumers, by settings. One with no subscription for ``idle_s`` is
    closed when another is asked for (a restarted task finds its connected consumer meanwhile)."""

    def __init__(self, idle_s: float = 60.0) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[tuple, list[SharedConsumer]] = {}
        self._idle_s = idle_s

    @staticmethod
    def _key(conf: Mapping[str, Any]) -> tuple:
        return tuple(sorted((k, str(v)) for k, v in conf.items() if k not in ("logger", "group.id") and not callable(v)))

    def get(self, conf: Mapping[str, Any], partitions: Iterable[tuple[str, int]] = ()) -> SharedConsumer:
        """A shared consumer for these settings that reads none of ``partitions`` yet (connected
        once, then reused); subscribe to it within ``idle_s``. Two connectors may read the same
        partition (a mirror and a monitor of one topic): each gets it through a consumer of its own."""
        key = self._key(conf)
        wanted = set(partitions)
        with self._lock:
            self._close_idle(keep=key)
            consumers = self._by_key.setdefault(key, [])
            shared = next((c for c in consumers if not wanted & c.partitions()), None)
            if shared is None:
                shared = SharedConsumer({**conf, "group.id": "connect-shared-source"})
                consumers.append(shared)
            with shared._lock:
                shared.reserved |= wanted
            if shared.idle_since is not None:
                shared.idle_since = time.monotonic()
        return shared

    def _close_idle(self, keep: tuple) -> None:
        now = time.monotonic()
        for key, consumers in list(self._by_key.items()):
            for shared in list(consumers):
                if key != keep and shared.idle_since is not None and now - shared.idle_since > self._idle_s:
                    consumers.remove(shared)
                    shared.close()
            if not consumers:
                del self._by_key[key]

    def close_all(self) -> None:
        with self._lock:
            for consumers in self._by_key.values():
                for shared in consumers:
                    shared.close()
            self._by_key.clear()


SHARED = SharedConsumers()
