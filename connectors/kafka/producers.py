"""One Kafka producer per process and target settings, shared by the sink tasks the process runs.

A worker hosting many small connectors in a few Python processes would otherwise hold one
idempotent producer per task. At 50 msg/s a task's records come 20 ms apart, longer than
``linger.ms``, so every record goes out as a produce request of its own: 200 connectors make
10,000 requests/s to the target and keep 200 sets of librdkafka threads busy (measured with
``bench/many_connectors.py``: 0.35 of the worker's 0.41 cores were librdkafka broker threads).
Shared, a process sends one request per broker and linger for all its tasks, as one producer with
many partitions does.

How the sharing works:

- Sink tasks whose producer settings are equal share one :class:`SharedProducer`. A thread of its
  own serves its delivery reports (``poll``); a report is not handled there but queued to the
  :class:`Inbox` of the task that produced the record, and the task handles its reports in its own
  thread (``Inbox.serve``), so its accounting is never touched by another thread, and a task
  waiting for its outcomes waits on its inbox, not on the client.
- Order across an abandoned producer: a task that must abandon the producer (a record failed
  transiently, a fatal producer state) *retires* it: every queued and in-flight message of every
  task is purged, each task gets those records back as transient failures and re-sends them in
  order on a fresh shared producer. Produces run under :attr:`SharedProducer.lock` and a retired
  producer takes no new record, so no record produced after the purge can land ahead of an
  earlier one that was purged. With the default (no delivery timeout) librdkafka retries every
  transient error itself and reports none, so retiring is for fatal states; a task with a finite
  delivery timeout keeps a producer of its own (its timeout purges it alone).
- A producer with no task for ``idle_s`` is closed (a restarted task finds it connected meanwhile).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from typing import Any, Callable, Mapping

from confluent_kafka import KafkaException, Producer

from connect.sink.outcomes import OutcomeQueue

__all__ = ["Inbox", "SharedProducer", "SharedProducers", "PRODUCERS"]

log = logging.getLogger(__name__)


def _handle(item: tuple) -> None:
    handle, err, msg = item
    handle(err, msg)


class Inbox(OutcomeQueue):
    """One task's delivery reports from a shared producer, handled in the task's thread: each
    queued item is ``(handle, err, msg)``, handled as ``handle(err, msg)``."""

    __slots__ = ()

    def arrive(self, handle: Callable[[Any, Any], Any], err, msg) -> None:
        """The producer's callback (on its poll thread): queue ``handle(err, msg)`` for the task."""
        self.put((handle, err, msg))

    def serve(self) -> int:
        """Handle every queued report in this thread; how many there were."""
        return self.drain(_handle)

    def wait(self, timeout: float) -> int:  # type: ignore[override]
        """Handle what is queued; when nothing was, wait up to ``timeout`` s for a report and handle it."""
        n = self.serve()
        if n or timeout <= 0:
            return n
        super().wait(timeout)
        return self.serve()


class SharedProducer:
    """A librdkafka producer used by several sink tasks, with a thread serving its reports."""

    def __init__(self, conf: Mapping[str, Any], registry: SharedProducers, key: tuple) -> None:
        self.producer = Producer(dict(conf))
        # Held while a task produces; a retirement takes it too, so nothing is produced after the purge.
        self.lock = threading.Lock()
        self.retired: str | None = None  # why, once retired: it takes no new record
        self.users = 0
        self.idle_since: float | None = None
        self._registry, self._key = registry, key
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="kafka-shared-producer", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        producer = self.producer
        while not self._closed.is_set():
            try:
                producer.poll(0.1)
            except Exception as exc:  # noqa: BLE001 - the callbacks only queue: this is the client's
                self.retire(f"not confirmed: the shared producer failed ({exc})")
                self._closed.wait(0.1)
            if self.users == 0 and self._registry._unused(self):
                break
        self._close()

    def retire(self, why: str) -> None:
        """Take no new record and purge everything queued or in flight: each task gets its records
        back as transient failures (through its inbox) and re-sends them on a fresh producer."""
        with self.lock:
            if self.retired is not None:
                return
            self.retired = why
            self._registry._forget(self)
            try:
                self.producer.purge()
            except (KafkaException, SystemError, RuntimeError):
                pass
        log.warning("shared producer retired: %s; its tasks re-send their unconfirmed records on a fresh one", why)

    def _close(self) -> None:
        try:
            self.producer.flush(5)
        except (KafkaException, SystemError, RuntimeError):
            pass

    def close(self) -> None:
        self._closed.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(10)


class SharedProducers:
    """The process's shared producers, by settings."""

    def __init__(self, idle_s: float = 60.0) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[tuple, SharedProducer] = {}
        self._idle_s = idle_s

    @staticmethod
    def _key(conf: Mapping[str, Any]) -> tuple:
        return tuple(sorted((k, str(v)) for k, v in conf.items() if k != "logger" and not callable(v)))

    def acquire(self, conf: Mapping[str, Any]) -> SharedProducer:
        key = self._key(conf)
        with self._lock:
            shared = self._by_key.get(key)
            if shared is None:
                shared = self._by_key[key] = SharedProducer(conf, self, key)
            shared.users += 1
            shared.idle_since = None
        return shared

    def release(self, shared: SharedProducer) -> None:
        with self._lock:
            shared.users -= 1
            if shared.users == 0:
                shared.idle_since = time.monotonic()
                if shared.retired is not None:
                    shared._closed.set()  # retired and unused: its thread flushes what is left and ends

    def _forget(self, shared: SharedProducer) -> None:
        """A retired producer is never handed out again."""
        with self._lock:
            if self._by_key.get(shared._key) is shared:
                del self._by_key[shared._key]

    def _unused(self, shared: SharedProducer) -> bool:
        """True (and forgotten) when ``shared`` has had no task for ``idle_s``: its thread closes it."""
        with self._lock:
            if shared.users or shared.idle_since is None or time.monotonic() - shared.idle_since < self._idle_s:
                return False
            if self._by_key.get(shared._key) is shared:
                del self._by_key[shared._key]
            return True

    def close_all(self) -> None:
        with self._lock:
            shared, self._by_key = list(self._by_key.values()), {}
        for s in shared:
            s.close()


PRODUCERS = SharedProducers()
atexit.register(PRODUCERS.close_all)
