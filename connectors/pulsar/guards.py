"""Guards for pulsar-client readers that stall or deliver again, shared by everything in this project
that reads Pulsar partitions with readers: the Pulsar source, and checkers that read topics to their
end (the README demo, :class:`TopicReaders`).

Over pulsar-lite (and after broker restarts elsewhere) a reader whose consumer re-subscribes after a
reconnection may start again from a stale position, delivering messages it delivered before (a
store of 30,000 messages read twice gave 69,580 reads), or get no more messages at all although its
partition has more. Both are guarded in one place:

- messages at or before the last one delivered are dropped (message ids only grow within a
  partition) and such a reader is opened again just after the last one delivered;
- a reader that finds nothing for ``stall_s`` while the broker says its partition has messages
  after the last one delivered (or that is not connected any more) is opened again there;
- a reader whose read fails is opened again after the last message it delivered.

A new reader is opened asynchronously (a lookup waits up to the operation timeout while the broker
is away, and a poll must not) and swapped in by a later read; if it cannot be opened the old one
stays and is tried again later.
"""

from __future__ import annotations

import logging
import time
from typing import Iterable

from connect.errors import RetriableError

__all__ = ["GuardedPartition", "ReaderGuards", "TopicReaders"]

log = logging.getLogger(__name__)


class GuardedPartition:
    """One partition's reader and what the guards know of it."""

    __slots__ = ("reader", "name", "start", "last", "held", "idle_since", "check", "opening")

    def __init__(self, reader, name: str, start: tuple) -> None:
        self.reader = reader
        self.name = name  # the partition's full topic name, as readers are opened on it
        self.start = start  # (message id, inclusive): where the reader began
        self.last: tuple | None = None  # (ledger, entry, batch) of the last message delivered
        self.held = None  # a message ``_take`` could not take yet: read again first
        self.idle_since: float | None = None  # since when reads found nothing buffered
        self.check: list | None = None  # an asynchronous has-message-available question in flight
        self.opening: list | None = None  # a new reader being opened asynchronously (see _reopen)


class ReaderGuards:
    """The guards, for a class that reads :class:`GuardedPartition` entries with ``_read_guarded``.

    That class sets ``_pulsar`` (the pulsar module), ``_client`` (a ``pulsar.Client``), ``_queue``
    (the readers' receiver queue size), ``_stall_s`` (the stall check; 0 disables it) and the
    counters ``duplicates_dropped`` and ``readers_reopened``, and implements ``_take(entry, m, pos,
    out) -> bool``: what to do with one message not delivered before (``m`` the extension's
    message, ``pos`` its (ledger, entry, batch)); False leaves it held, to be read again first. The
    Pulsar source's ``_take`` builds a record; :class:`TopicReaders`' keeps the message.
    """

    def _read(self, entry: GuardedPartition, most: int, wait_ms: int, out: list) -> int:
        """Up to ``most`` messages of one reader to ``_take``; the first read waits ``wait_ms``
        (``pulsar.Timeout`` when nothing came). Returns how many messages were dropped as at or
        before the last one delivered."""
        # The extension's reader directly: pulsar.Reader.read_next wraps each message in a Python
        # object and type-checks its argument, on the hot path (and a reader swapped in by _swap
        # has no schema for the wrapper).
        read = entry.reader._reader.read_next
        take = self._take
        last = entry.last
        dropped = 0
        if entry.held is not None:
            m, entry.held = entry.held, None
        else:
            m = read(wait_ms)
        taken = 0
        try:
            while True:
                taken += 1
                mid = m.message_id()
                pos = (mid.ledger_id(), mid.entry_id(), mid.batch_index())
                if last is not None and pos <= last:
                    dropped += 1  # delivered already (message ids only grow within a partition)
                elif take(entry, m, pos, out):
                    last = pos
                else:
                    entry.held = m  # read again first, next time; what was taken before it goes now
                    return dropped
                if taken >= most:
                    return dropped
                try:
                    m = read(0)  # raises Timeout when nothing is buffered: the caller moves on
                except self._pulsar.Timeout:
                    return dropped
        finally:
            entry.last = last

    def _read_guarded(self, entry: GuardedPartition, most: int, wait_ms: int, out: list) -> None:
        """``_read`` one partition into ``out``, then the guards: a replacement reader ready is
        swapped in first; a reader that failed, delivered again or stalled is opened again."""
        if entry.opening is not None and entry.opening[0] is not None:
            self._swap(entry)
        before = len(out)
        try:
            dropped = self._read(entry, most, wait_ms, out)
        except self._pulsar.Timeout:
            dropped = 0
        except Exception as exc:  # noqa: BLE001 - pulsar raises its own exception types
            # The reader has moved past whatever it handed over, delivered or not: a new one is
            # opened after the last message delivered. What this poll read before the failure (from
            # this partition or others, whose positions moved already) goes out; with nothing read,
            # the poll fails and is retried.
            self._reopen(entry, f"failed to read: {exc}")
            if len(out) == 0:
                raise RetriableError(f"reading {entry.name} failed: {exc}") from exc
            return
        if dropped:
            # A reader that delivers what it delivered before has re-subscribed from a stale
            # position after a reconnection: its subscription is not trusted any more.
            self.duplicates_dropped += dropped
            self._reopen(entry, f"delivered {dropped} message(s) at or before the last one it delivered")
        elif len(out) > before:
            entry.idle_since = entry.check = None
        else:
            self._check_idle(entry)

    def _check_idle(self, entry: GuardedPartition) -> None:
        """A reader with nothing buffered for ``reader.stall.check.ms`` while the broker says its
        partition has messages after the last one delivered has stalled (seen after broker
        restarts: the re-subscribed consumer gets no more messages): it is opened again.

        The broker is asked asynchronously (``has_message_available`` blocks without a timeout
        while the broker is away); the answer is looked at by a later poll, and only counts if
        the reader delivered nothing meanwhile."""
        if not self._stall_s:
            return
        now = time.monotonic()
        if entry.idle_since is None:
            entry.idle_since = now
            return
        check = entry.check
        if check is not None:
            if check[2] is None:  # not answered yet
                if now - check[1] > max(2 * self._stall_s, 10.0):
                    entry.check = None  # unanswered: ask again later (a late answer is ignored)
                    entry.idle_since = now
                return
            entry.check = None
            entry.idle_since = now
            if check[2] and check[0] == entry.last:
                self._reopen(entry, f"delivered nothing for {self._stall_s:g} s while the broker has more messages")
            return
        if now - entry.idle_since < self._stall_s:
            return
        if not entry.reader.is_connected():  # gave up reconnecting (seen after broker restarts): a fresh lookup
            entry.idle_since = now
            self._reopen(entry, f"delivered nothing for {self._stall_s:g} s and is not connected")
            return
        check = entry.check = [entry.last, now, None]  # [last delivered when asked, asked at, answer]
        ok = self._pulsar.Result.Ok

        def answered(result, available, check=check) -> None:  # on the client's IO thread
            check[2] = result == ok and bool(available)

        try:
            entry.reader._reader.has_message_available_async(answered)
        except Exception as exc:  # noqa: BLE001 - the reader is closing or the broker unreachable: ask later
            log.debug("checking %s for messages: %s", entry.name, exc)
            entry.check = None
            entry.idle_since = now

    def _reopen(self, entry: GuardedPartition, why: str) -> None:
        """Open a new reader just after the last message delivered, asynchronously (a lookup waits
        up to operation.timeout.ms while the broker is away; a poll must not); a later poll swaps it
        in and closes the old one. If it cannot be opened, the old one stays and is tried again later."""
        if entry.opening is not None:
            return  # one at a time
        if entry.last is not None:
            start_id, inclusive = self._pulsar.MessageId(-1, *entry.last), False
        else:
            start_id, inclusive = entry.start
        opening = entry.opening = [None, None, why]  # [result, extension reader, why]

        def opened(result, reader, opening=opening) -> None:  # on the client's IO thread
            opening[1] = reader
            opening[0] = result

        try:
            self._open_async(entry.name, start_id, inclusive, opened)
        except Exception as exc:  # noqa: BLE001 - the client refused at once: ask again later
            opening[0] = exc
        if opening[0] is not None:
            self._swap(entry)

    def _open_async(self, name: str, start_id, inclusive: bool, callback) -> None:
        # No public API: pulsar-client 3.x has no asynchronous reader creation (Client.create_reader
        # blocks up to operation.timeout.ms, which would hold the epoch) and no asynchronous
        # has_message_available; both exist only in the ``_pulsar`` extension, used here and in
        # _check_idle; the hot-path read in _read does the same for speed (issue 25: the sink, side
        # writer and groups use only the public API).
        import _pulsar

        conf = _pulsar.ReaderConfiguration()
        conf.receiver_queue_size(self._queue)
        conf.start_message_id_inclusive(inclusive)
        self._client._client.create_reader_async(name, getattr(start_id, "_msg_id", start_id), conf, callback)

    def _swap(self, entry: GuardedPartition) -> None:
        """A new reader's opening has an outcome: swap it in (closing the old one), or keep the old."""
        result, raw, why = entry.opening
        entry.opening = None
        if result != self._pulsar.Result.Ok:
            log.warning("reader on %s %s; opening a new one failed, trying again later: %s", entry.name, why, result)
            entry.idle_since = time.monotonic()
            entry.check = None
            return
        reader = self._pulsar.Reader()  # the extension's reader, in the wrapper the rest of the task uses
        reader._reader, reader._client = raw, self._client
        consumers = getattr(self._client, "_consumers", None)
        if consumers is not None:
            consumers.append(reader)  # as pulsar.Client.create_reader registers its readers (closed with it)
        log.warning("reader on %s %s: opened again after %s", entry.name, why, entry.last or "its start")
        old, entry.reader = entry.reader, reader
        try:
            old.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
        entry.idle_since = entry.check = None
        self.readers_reopened += 1


class TopicReaders(ReaderGuards):
    """Every message of some topics (non-partitioned, or single partitions by name), from the
    earliest, each once: for whoever checks what landed on a topic, guarded as the source's readers
    are. ``read`` returns ``(topic, message)`` pairs; the messages are the extension's
    (``data()``, ``partition_key()``, ``properties()``, ``message_id()`` as ``pulsar.Message``)."""

    def __init__(self, client, topics: Iterable[str], *, stall_ms: int = 5000, queue: int = 5000) -> None:
        import pulsar

        self._pulsar, self._client, self._queue, self._stall_s = pulsar, client, queue, stall_ms / 1000
        self.duplicates_dropped = self.readers_reopened = 0
        start = (pulsar.MessageId.earliest, False)  # never inclusive: see PulsarSourceTask._start
        self._entries = [GuardedPartition(client.create_reader(t, start[0], receiver_queue_size=queue), t, start)
                         for t in topics]

    def read(self, most: int = 5000, wait_ms: int = 100) -> list:
        """Up to ``most`` messages of each topic that its reader has buffered or receives within
        ``wait_ms``. A reader that failed is being opened again: it is read again next time."""
        out: list = []
        for entry in self._entries:
            try:
                self._read_guarded(entry, most, wait_ms, out)
            except RetriableError as exc:
                log.warning("%s", exc)
        return out

    def _take(self, entry: GuardedPartition, m, pos: tuple, out: list) -> bool:
        out.append((entry.name, m))
        return True

    def close(self) -> None:
        for entry in self._entries:
            try:
                entry.reader.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        self._entries = []
