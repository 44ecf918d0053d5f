"""Connections of the embedded RocketMQ broker: framing, limits, backpressure and timeouts.

Each limit bounds what a hostile or broken client can make the broker hold (defaults in
:class:`Limits`; the README's RocketMQ section lists them):

- **connections**: at most ``max_connections``; one more is closed as soon as it is accepted. The
  default is derived from the open-file limit, so connections and queue files together stay under
  ``ulimit -n``.
- **incoming bytes**: a frame is at most ``max_frame_bytes`` (NettyDecoder's 16 MiB); a frame begun
  must be complete within ``frame_timeout``; the partial frames of all connections together, with
  the unsent answers, count against ``max_buffered_bytes``: while that is spent, a connection in the
  middle of a frame is not read (its frame timeout still runs); connections read at the same time can
  each take one more read (256 KiB) beyond it.
- **outgoing bytes**: every answer, before it is produced, waits until its connection has at most
  ``out_high_bytes`` unsent (none at all while the broker-wide budget is spent), so a connection
  holds at most that plus one answer. Requests are read one at a time behind the same check, and
  asynchronous answers (pulls) pass it just before they read their messages: a client that does not
  read its answers is no longer read, and what it asked for is never produced.
- **pending answers**: at most ``max_pending`` asynchronous answers (pulls, long polls included) per
  connection, past which the connection is not read; at most ``max_pending_total`` for the broker,
  past which a new pull is answered SYSTEM_BUSY (clients retry it later).
- **idle**: a connection that sent nothing for ``idle_timeout`` and waits for no answer, or whose
  unsent answers stayed above ``out_high_bytes`` that long, is closed (RocketMQ closes idle channels
  after 120 s too: ``serverChannelMaxIdleTimeSeconds``).

Connections closed for a limit are aborted: what they had buffered is freed at once. Warnings about
them are rate-limited, so a flood of bad connections cannot flood the log either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import struct
import time
from typing import Callable, Iterator

import attrs

from connectors.rocketmq.protocol import FrameDecoder, ProtocolError, RemotingCommand

__all__ = ["Limits", "Connection", "ConnectionServer", "fd_budget"]

log = logging.getLogger(__name__)

_CHUNK = 256 * 1024  # one read; the stream reader buffers at most twice its limit (64 KiB) beyond it
READER_LIMIT = 64 * 1024
MiB = 1024 * 1024


def fd_budget() -> tuple[int, int]:
    """(connections, open queue files) that fit the process's soft open-file limit: 64 kept for
    the commit log, metadata writes, the listening socket and the runtime; of the rest half to
    connections (16..1024) and a quarter to queue files (8..256)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    usable = max(0, (soft if soft != resource.RLIM_INFINITY else 1 << 20) - 64)
    return min(1024, max(16, usable // 2)), min(256, max(8, usable // 4))


@attrs.frozen
class Limits:
    max_connections: int = attrs.field(factory=lambda: fd_budget()[0])
    max_frame_bytes: int = 16 * MiB
    max_buffered_bytes: int = 64 * MiB
    out_high_bytes: int = 1 * MiB
    max_pending: int = 1024
    max_pending_total: int = 8192
    idle_timeout: float = 120.0
    frame_timeout: float = 30.0

    @property
    def tick(self) -> float:
        """How often timeouts and the buffered total are checked."""
        return min(1.0, max(0.05, min(self.idle_timeout, self.frame_timeout) / 4))


class _Warnings:
    """At most ``most`` warnings per ``window`` seconds; the rest are counted and summed up."""

    def __init__(self, most: int = 20, window: float = 10.0) -> None:
        self.most, self.window = most, window
        self._start, self._count, self._dropped = 0.0, 0, 0

    def __call__(self, msg: str, *args) -> None:
        now = time.monotonic()
        if now - self._start > self.window:
            if self._dropped:
                log.warning("%d more connection warning(s) not shown in the last %gs", self._dropped, self.window)
            self._start, self._count, self._dropped = now, 0, 0
        self._count += 1
        if self._count <= self.most:
            log.warning(msg, *args)
        else:
            self._dropped += 1


class Connection:
    """One client connection: its framing, what it holds against the limits, its pending answers,
    and what its heartbeats registered (``client_ids``, ``groups``: the broker's)."""

    def __init__(self, server: ConnectionServer, writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.limits = server.limits
        self.writer = writer
        self.transport = writer.transport
        self.transport.set_write_buffer_limits(high=self.limits.out_high_bytes)
        peer = writer.get_extra_info("peername") or ("0.0.0.0", 0)
        self.peer = (str(peer[0]), int(peer[1]))
        self.client_ids: set[str] = set()
        self.groups: set[str] = set()
        self.decoder = FrameDecoder(self.limits.max_frame_bytes)
        self.held = 0  # bytes of a partial frame, charged to the broker-wide budget
        now = time.monotonic()
        self.frame_since: float | None = None  # when the partial frame held began
        self.busy_since: float | None = None  # the broker stopped reading for its own reasons (not the peer's time)
        self.last_rx = now
        self.out_ok_since = now  # last time the unsent answers were at most out_high_bytes
        self.tasks: set[asyncio.Task] = set()
        self.closed = False
        self._slot = asyncio.Event()
        self._drain_lock = asyncio.Lock()  # one drain waiter at a time (older asyncio allows no more)

    @property
    def pending(self) -> int:
        return len(self.tasks)

    @contextlib.contextmanager
    def not_reading(self) -> Iterator[None]:
        """While the broker works through what it read (and waits for the peer to read answers), the
        peer's clocks stop: ``frame_timeout`` bounds
        the peer's time to complete a frame and idleness its silence, not the broker's own time.
        Unread answers keep their own bound (``idle_timeout`` on ``out_ok_since``)."""
        self.busy_since = time.monotonic()
        try:
            yield
        finally:
            now = time.monotonic()
            if self.frame_since is not None:
                self.frame_since += now - self.busy_since
            self.last_rx = max(self.last_rx, now)  # idle is the peer's silence while the broker reads
            self.busy_since = None

    def unsent(self) -> int:
        return self.transport.get_write_buffer_size()

    def send(self, cmd: RemotingCommand) -> None:
        if self.closed or self.transport.is_closing():
            return
        try:
            data = cmd.encode()
        except (ProtocolError, ValueError, TypeError, OverflowError, struct.error) as exc:
            self.close(f"an answer cannot be encoded ({exc})")
            return
        before = self.unsent()
        self.transport.write(data)
        # Only what the socket did not take at once stays in memory; the tick sums it again exactly.
        self.server.out_bytes += self.unsent() - before

    def notify(self, cmd: RemotingCommand) -> None:
        """A request of the broker's own (NOTIFY_CONSUMER_IDS_CHANGED): advisory, so dropped
        for a client not reading what it was sent (clients rebalance on a timer as well)."""
        if self.unsent() <= self.limits.out_high_bytes:
            self.send(cmd)

    def start_async(self, coro) -> bool:
        """Runs an asynchronous answer, counted as pending; False when the broker-wide cap is
        reached (the caller answers SYSTEM_BUSY)."""
        if self.server.pending_total >= self.limits.max_pending_total or self.closed:
            return False
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        self.server.pending_total += 1
        task.add_done_callback(self._done)
        return True

    def _done(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        self.server.pending_total -= 1
        self._slot.set()

    async def wait_slot(self) -> None:
        """Returns when fewer than ``max_pending`` answers are pending (or the connection closed)."""
        while self.pending >= self.limits.max_pending and not self.closed:
            self._slot.clear()
            await self._slot.wait()

    async def writable(self) -> None:
        """Returns when an answer may be produced: at most ``out_high_bytes`` unsent, and none
        while the broker-wide budget is spent (or the connection closed: its answer is dropped)."""
        high = self.limits.out_high_bytes
        while not self.closed:
            out = self.unsent()
            if out <= high and (out == 0 or not self.server.over_budget):
                self.out_ok_since = time.monotonic()
                return
            if out > high:
                async with self._drain_lock:
                    try:
                        await self.writer.drain()
                    except (ConnectionError, OSError):
                        self.close()
            else:
                await self.server.next_tick()

    def close(self, why: str | None = None) -> None:
        """Aborts the connection (what it buffered is freed now) and cancels its pending answers."""
        if self.closed:
            return
        self.closed = True
        if why:
            self.server.warn("closing the connection from %s:%d: %s", *self.peer, why)
        self.transport.abort()
        for task in list(self.tasks):
            task.cancel()
        self._slot.set()


class ConnectionServer:
    """Serves connections for ``dispatch(conn, cmd)`` (called for every request, in order);
    ``forget(conn)`` is called once a connection is gone."""

    def __init__(self, limits: Limits, dispatch: Callable[[Connection, RemotingCommand], None],
                 forget: Callable[[Connection], None]) -> None:
        self.limits = limits
        self.dispatch = dispatch
        self.forget = forget
        self.conns: set[Connection] = set()
        self.in_bytes = 0  # partial frames held, exact
        self.out_bytes = 0  # unsent answers: summed at each tick, plus what was left unsent by writes since
        self.pending_total = 0
        self.refused = 0
        self.warn = _Warnings()
        self._tick = asyncio.Event()

    @property
    def over_budget(self) -> bool:
        return self.in_bytes + self.out_bytes > self.limits.max_buffered_bytes

    async def next_tick(self) -> None:
        await self._tick.wait()

    def stats(self) -> dict[str, int]:
        return {"connections": len(self.conns), "pendingAnswers": self.pending_total,
                "bufferedBytesIn": self.in_bytes, "bufferedBytesOut": sum(c.unsent() for c in self.conns),
                "refusedConnections": self.refused}

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self.conns) >= self.limits.max_connections:
            self.refused += 1
            self.warn("refusing a connection from %s: %d connections open (max_connections)",
                      writer.get_extra_info("peername"), len(self.conns))
            writer.transport.abort()
            return
        conn = Connection(self, writer)
        self.conns.add(conn)
        try:
            await self._read(conn, reader)
        except (ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            conn.close()  # the broker is stopping; returning quietly spares asyncio's "exception in callback"
        finally:
            self._drop(conn)

    async def _read(self, conn: Connection, reader: asyncio.StreamReader) -> None:
        while not conn.closed:
            if conn.held and self.over_budget:
                # a partial frame grows only when the budget has room; its clock runs on: frames held
                # incomplete are what spends the budget, and the frame timeout is what frees it
                await self.next_tick()
                continue
            data = await reader.read(_CHUNK)
            if not data:
                return
            conn.last_rx = time.monotonic()
            try:
                commands = conn.decoder.feed(data)
            except ProtocolError as exc:
                conn.close(f"malformed frame ({exc})")  # the stream cannot be resynced, as NettyDecoder
                return
            finally:
                self._charge(conn, data)
            with conn.not_reading():  # the commands of one read can take the broker seconds on a loaded host
                for cmd in commands:
                    if cmd.is_response:
                        continue  # answers to the broker's NOTIFY_CONSUMER_IDS_CHANGED: nothing to do
                    await conn.writable()
                    await conn.wait_slot()
                    if conn.closed:
                        return
                    self.dispatch(conn, cmd)

    def _charge(self, conn: Connection, data: bytes) -> None:
        held = conn.decoder.buffered
        self.in_bytes += held - conn.held
        if not held:
            conn.frame_since = None
        elif conn.frame_since is None or held <= len(data):  # a frame began within this read
            conn.frame_since = conn.last_rx
        conn.held = held

    def _drop(self, conn: Connection) -> None:
        self.conns.discard(conn)
        self.in_bytes -= conn.held
        conn.held = 0
        for task in list(conn.tasks):
            task.cancel()
        if not conn.closed:
            conn.closed = True
            conn.writer.close()  # what was written still goes out to a client that half-closed
            if conn.unsent():  # ... unless it never reads it
                asyncio.get_running_loop().call_later(self.limits.idle_timeout, conn.transport.abort)
        try:
            self.forget(conn)
        except Exception:  # noqa: BLE001 - a bug here must not leave the connection counted
            log.exception("forgetting the connection from %s:%d failed", *conn.peer)

    async def run(self) -> None:
        """Every tick: timeouts enforced, unsent bytes summed, waiters for room woken."""
        limits = self.limits
        while True:
            await asyncio.sleep(limits.tick)
            now = time.monotonic()
            out = 0
            for conn in list(self.conns):
                unsent = conn.unsent()
                if unsent <= limits.out_high_bytes:
                    conn.out_ok_since = now
                if (conn.frame_since is not None and conn.busy_since is None
                        and now - conn.frame_since > limits.frame_timeout):
                    conn.close(f"a frame begun {now - conn.frame_since:.1f}s ago is still not complete "
                               f"({conn.held} bytes so far; frame_timeout {limits.frame_timeout:g}s)")
                elif now - conn.out_ok_since > limits.idle_timeout:
                    conn.close(f"{unsent} bytes of answers not read for {limits.idle_timeout:g}s")
                elif conn.busy_since is None and not conn.pending and now - conn.last_rx > limits.idle_timeout:
                    conn.close(f"idle for {limits.idle_timeout:g}s")
                else:
                    out += unsent
            self.out_bytes = out
            tick, self._tick = self._tick, asyncio.Event()
            tick.set()

    def close_all(self) -> None:
        for conn in list(self.conns):
            conn.close()
