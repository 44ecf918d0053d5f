"""Storage of the embedded RocketMQ broker: a commit log, one consume queue per (topic, queue), and
the broker's metadata (topic configs, consumer offsets, subscription groups).

The layout follows RocketMQ's store (``CommitLog``, ``ConsumeQueue`` in apache/rocketmq's
``store`` module), simplified for a development broker:

- ``commitlog``: one append-only file of stored-message records in the wire format that
  PULL_MESSAGE returns (``MessageDecoder``'s v1 layout, IPv4 hosts), so a pull answers with the
  bytes as stored. A record's PHYSICALOFFSET is its position in this file.
- ``consumequeue/<topic>/<queueId>``: 20-byte entries (commit-log position, record size, tags hash
  code), one per logical offset, as RocketMQ's ``ConsumeQueue`` (CQ_STORE_UNIT_SIZE 20).
- ``topics.json``, ``offsets.json``, ``groups.json``: the topic configs
  (``TopicConfigManager``), consumer offsets (``ConsumerOffsetManager``) and subscription groups
  (``SubscriptionGroupManager``), each rewritten whole through a temporary file and a rename. A
  topic or group change that cannot be saved is undone in memory too and raises, so what the
  broker serves is what a restart finds.
- ``lock``: held with ``flock`` while a broker runs (:mod:`connectors.rocketmq.datadir`); the
  directory is created 0700 and every file 0600.

Open files. Consume-queue entries live in memory; their files are opened only to append, through
a cache of at most ``max_open_files`` descriptors (least recently used closed first), so thousands
of queues work under a low ``ulimit -n``.

Flush policy. Every record is written to the operating system (``write``) before its send is
answered, so a broker process that is killed loses nothing it acknowledged. ``fsync`` (power
loss) runs every ``flush_interval_ms`` (RocketMQ's default ASYNC_FLUSH with
``flushIntervalCommitLog`` 500 ms), or before each answer with ``sync_flush`` (SYNC_FLUSH).
Consumer offsets are written with the same tick when they changed (RocketMQ persists them every
5 s), so a killed broker can forget the offsets of the last tick: consumers then read a few
messages again (at-least-once), never skip.

Recovery. On start every consume queue is cut to whole entries that point inside the commit log,
and the commit log is scanned from the end of the last indexed record: a record cut short by a
crash is truncated away; complete records that have no consume-queue entry yet get one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import struct
import time
from array import array
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Iterable

from connectors.rocketmq.datadir import DataDirLock, make_private_dir, private_opener
from connectors.rocketmq.models import PERM_INHERIT, PERM_READ, PERM_WRITE  # PermName
from connectors.rocketmq.protocol import (
    MAGIC_V1,
    MAGIC_V2,
    MessageExt,
    ProtocolError,
    decode_messages,
    encode_stored_message,
)

__all__ = ["MessageStore", "TopicConfig", "java_hash", "tags_filter", "PERM_READ", "PERM_WRITE", "PERM_INHERIT"]

log = logging.getLogger(__name__)

_CQ_ENTRY = struct.Struct(">qiq")  # commit-log position, size, tags hash code (ConsumeQueue's unit)
_HEAD = struct.Struct(">iIiiiqq")  # TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET
_STORE_TS_AT = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8  # STORETIMESTAMP's position in a v1 (IPv4) record


def java_hash(text: str) -> int:
    """``String.hashCode`` (over UTF-16 code units, 32-bit signed): RocketMQ's tags code."""
    h = 0
    for unit in struct.unpack(f"<{len(text.encode('utf-16-le')) // 2}H", text.encode("utf-16-le")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def tags_filter(expression: str | None) -> frozenset[int] | None:
    """The tags hash codes a subscription expression (``TagA || TagB``) accepts; None: every message."""
    if expression is None:
        return None
    tags = [t.strip() for t in expression.split("||")]
    if not expression.strip() or "*" in tags:
        return None
    return frozenset(java_hash(t) for t in tags if t)


class TopicConfig(dict):
    """``TopicConfig`` as its JSON: topicName, readQueueNums, writeQueueNums, perm, topicFilterType,
    topicSysFlag, order."""

    @classmethod
    def make(cls, name: str, queues: int, perm: int = PERM_READ | PERM_WRITE, *, read: int | None = None,
             order: bool = False, sys_flag: int = 0, filter_type: str = "SINGLE_TAG") -> TopicConfig:
        return cls(topicName=name, readQueueNums=queues if read is None else read, writeQueueNums=queues, perm=perm,
                   topicFilterType=filter_type, topicSysFlag=sys_flag, order=order)

    @property
    def queues(self) -> int:
        return max(int(self["readQueueNums"]), int(self["writeQueueNums"]))


class _Queue:
    """One consume queue: its entries in memory (arrays); its file is written through the
    store's descriptor cache."""

    __slots__ = ("path", "positions", "sizes", "tags", "waiters")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.positions, self.sizes, self.tags = array("q"), array("i"), array("q")
        self.waiters: set[asyncio.Future] = set()  # long-polling pulls waiting for the next message

    def load(self, commit_log_end: int) -> None:
        make_private_dir(self.path.parent)
        with open(self.path, "a+b", opener=private_opener) as f:  # created when missing, closed at once
            f.seek(0)
            data = f.read()
            whole = len(data) - len(data) % _CQ_ENTRY.size
            for pos, size, tag in _CQ_ENTRY.iter_unpack(data[:whole]):
                if pos + size > commit_log_end:
                    break  # written after records the commit log lost: those are scanned again
                self.positions.append(pos)
                self.sizes.append(size)
                self.tags.append(tag)
            keep = len(self.positions) * _CQ_ENTRY.size
            if keep != len(data):
                f.truncate(keep)

    def append(self, pos: int, size: int, tag: int) -> bytes:
        """Adds the entry in memory; returns its bytes for the file."""
        self.positions.append(pos)
        self.sizes.append(size)
        self.tags.append(tag)
        return _CQ_ENTRY.pack(pos, size, tag)

    @property
    def end(self) -> int:
        """The next logical offset (the queue's max offset)."""
        return len(self.positions)


class MessageStore:
    """Commit log, consume queues and metadata under ``data_dir``. Not thread-safe: the broker
    calls it from its event loop only."""

    def __init__(self, data_dir: str | Path, *, sync_flush: bool = False, flush_interval_ms: int = 500,
                 max_open_files: int = 256) -> None:
        self.dir = Path(data_dir)
        make_private_dir(self.dir)
        self.lock = DataDirLock(self.dir)  # before anything is read: a second broker must not recover or write
        try:
            self._open(sync_flush, flush_interval_ms, max_open_files)
        except BaseException:
            self.lock.release()
            raise

    def _open(self, sync_flush: bool, flush_interval_ms: int, max_open_files: int) -> None:
        self.sync_flush = sync_flush
        self.flush_interval_ms = flush_interval_ms
        self.max_open_files = max(1, max_open_files)
        self._files: OrderedDict[tuple[str, int], int] = OrderedDict()  # queue -> append descriptor, LRU first
        self._log = open(self.dir / "commitlog", "a+b", opener=private_opener)  # noqa: SIM115 - kept open for the broker's life
        self._fd = self._log.fileno()
        self._queues: dict[tuple[str, int], _Queue] = {}
        self.topics: dict[str, TopicConfig] = {k: TopicConfig(v) for k, v in self._load_json("topics.json", {}).items()}
        # "group@topic" -> {"queueId": offset}, as ConsumerOffsetManager's offsetTable
        self.offsets: dict[str, dict[str, int]] = self._load_json("offsets.json", {})
        self.groups: dict[str, dict[str, Any]] = self._load_json("groups.json", {})
        # every group the broker keeps something for (config or offsets): what a cap on groups counts
        self.known_groups: set[str] = set(self.groups) | {key.split("@", 1)[0] for key in self.offsets}
        self._dirty_offsets = False
        self._unflushed = False
        self._recover()

    # -- files ------------------------------------------------------------------------------------
    def _load_json(self, name: str, default):
        path = self.dir / name
        if not path.exists():
            return default
        try:
            return json.loads(path.read_text())
        except ValueError as exc:
            raise ValueError(f"{path} is not valid JSON ({exc}): fix or remove it") from exc

    def _save_json(self, name: str, value) -> None:
        tmp = self.dir / f".{name}.tmp"
        try:
            tmp.unlink(missing_ok=True)  # a leftover keeps its mode through O_CREAT: start from none
            with open(tmp, "w", opener=private_opener) as f:
                json.dump(value, f, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.dir / name)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot save {name}: {exc.strerror or exc}") from None

    def save_topics(self) -> None:
        self._save_json("topics.json", self.topics)

    def save_groups(self) -> None:
        self._save_json("groups.json", self.groups)

    def _change(self, table: dict, name: str, value: Any, save: Callable[[], None]) -> None:
        """Sets (or with ``value`` None removes) ``table[name]`` and saves; a failed save undoes
        the change and raises, so nothing lives only in memory."""
        missing = object()
        old = table.get(name, missing)
        if value is None:
            table.pop(name, None)
        else:
            table[name] = value
        try:
            save()
        except OSError:
            if old is missing:
                table.pop(name, None)
            else:
                table[name] = old
            raise

    def set_topic(self, name: str, config: TopicConfig | None) -> None:
        """Creates, replaces or (None) deletes a topic config, saved before this returns."""
        self._change(self.topics, name, config, self.save_topics)

    def set_group(self, name: str, config: dict[str, Any] | None) -> None:
        """Creates, replaces or (None) deletes a subscription group, saved before this returns."""
        self._change(self.groups, name, config, self.save_groups)
        if config is not None:
            self.known_groups.add(name)
        elif not any(key.split("@", 1)[0] == name for key in self.offsets):
            self.known_groups.discard(name)

    def flush(self) -> None:
        """The periodic flush: fsync the commit log, write the offsets if they changed (consume
        queues are written to the OS at each put; recovery rebuilds what they miss)."""
        if self._unflushed:
            self._unflushed = False
            self._log.flush()
            os.fsync(self._fd)
        if self._dirty_offsets:
            self._save_json("offsets.json", self.offsets)
            self._dirty_offsets = False  # only once saved: a failed write is tried again at the next tick

    def close(self) -> None:
        try:
            self.flush()
        finally:
            while self._files:
                os.close(self._files.popitem()[1])
            self._log.close()
            self.lock.release()

    @property
    def open_queue_files(self) -> int:
        return len(self._files)

    @property
    def waiters(self) -> int:
        return sum(len(q.waiters) for q in self._queues.values())

    def _append_entries(self, key: tuple[str, int], q: _Queue, data: bytes) -> None:
        """Writes consume-queue entries through the descriptor cache (LRU: the queue written
        longest ago is closed when the cache is full)."""
        fd = self._files.get(key)
        if fd is None:
            while len(self._files) >= self.max_open_files:
                os.close(self._files.popitem(last=False)[1])
            fd = self._files[key] = os.open(q.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                                            | os.O_CLOEXEC, 0o600)
        else:
            self._files.move_to_end(key)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    # -- recovery -----------------------------------------------------------------------------------
    def _recover(self) -> None:
        size = self.end = os.fstat(self._fd).st_size
        cq_root = self.dir / "consumequeue"
        indexed_end = 0
        if cq_root.exists():
            for topic_dir in cq_root.iterdir():
                if not topic_dir.is_dir():
                    continue
                for qfile in topic_dir.iterdir():
                    if not qfile.name.isdigit():
                        continue
                    q = self._queue(topic_dir.name, int(qfile.name), load=size)
                    if q.positions:
                        indexed_end = max(indexed_end, q.positions[-1] + q.sizes[-1])
        pos, added = indexed_end, 0
        while pos < size:
            head = os.pread(self._fd, _HEAD.size, pos)
            total = _HEAD.unpack(head)[0] if len(head) == _HEAD.size else 0
            record = os.pread(self._fd, total, pos) if total >= _HEAD.size and pos + total <= size else b""
            try:
                (m,) = decode_messages(record, decompress=False) if record else (None,)
                if m is None or m.commit_log_offset != pos:
                    raise ProtocolError("not a whole record written at this position")
            except (ProtocolError, ValueError) as exc:
                log.warning("commit log: truncating %d byte(s) from %d (%s)", size - pos, pos, exc)
                self._log.truncate(pos)
                size = self.end = pos
                break
            q = self._queue(m.topic, m.queue_id)
            if m.queue_offset == q.end:
                self._append_entries((m.topic, m.queue_id), q, q.append(pos, total, java_hash(m.tags) if m.tags else 0))
                added += 1
            pos += total
        if added:
            log.info("commit log: %d record(s) indexed again after a crash", added)
        self._log.seek(0, os.SEEK_END)
        self.end = self._log.tell()

    def _queue(self, topic: str, queue_id: int, load: int | None = None) -> _Queue:
        q = self._queues.get((topic, queue_id))
        if q is None:
            q = self._queues[(topic, queue_id)] = _Queue(self.dir / "consumequeue" / topic / str(queue_id))
            q.load(self.end if load is None else load)
        return q

    # -- writing --------------------------------------------------------------------------------------
    def put(self, messages: Iterable[MessageExt]) -> list[MessageExt]:
        """Append messages (topic, queue id, body, properties, born fields set by the caller): each
        gets its queue offset, commit-log offset and store timestamp. Written to the OS before
        returning (and fsynced with ``sync_flush``)."""
        out = []
        chunks = []
        pos = self.end
        now = int(time.time() * 1000)
        next_offset: dict[tuple[str, int], int] = {}
        for m in messages:
            key = (m.topic, m.queue_id)
            offset = next_offset.get(key)
            if offset is None:
                offset = self._queue(*key).end
            m.queue_offset, next_offset[key] = offset, offset + 1
            m.commit_log_offset = pos
            m.store_timestamp = now
            record = encode_stored_message(m)
            chunks.append(record)
            out.append(m)
            pos += len(record)
        self._log.write(b"".join(chunks))
        self._log.flush()
        pos = self.end
        entries: dict[tuple[str, int], list[bytes]] = {}
        for m, record in zip(out, chunks, strict=True):
            tags = m.tags
            key = (m.topic, m.queue_id)
            entries.setdefault(key, []).append(self._queue(*key).append(pos, len(record), java_hash(tags) if tags else 0))
            pos += len(record)
        self.end = pos
        for key, parts in entries.items():
            q = self._queues[key]
            self._append_entries(key, q, b"".join(parts))
            self._wake(q)
        self._unflushed = True
        if self.sync_flush:
            self.flush()
        return out

    @staticmethod
    def _wake(q: _Queue) -> None:
        waiters, q.waiters = q.waiters, set()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait_message(self, topic: str, queue_id: int, timeout: float) -> None:
        """Returns when the queue gets a message or after ``timeout`` seconds (long polling). The
        waiter is dropped either way: a pull that timed out leaves nothing behind."""
        q = self._queue(topic, queue_id)
        fut = asyncio.get_running_loop().create_future()
        q.waiters.add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            q.waiters.discard(fut)

    # -- reading --------------------------------------------------------------------------------------
    def max_offset(self, topic: str, queue_id: int) -> int:
        q = self._queues.get((topic, queue_id))
        return q.end if q else 0

    def read(self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int,
             tags: frozenset[int] | None = None) -> tuple[bytes, int, int]:
        """(records, matched count, next offset) from ``offset``: up to ``max_count`` records and
        about ``max_bytes``, skipping those whose tags hash code ``tags`` does not hold."""
        q = self._queues.get((topic, queue_id))
        if q is None or offset >= q.end:
            return b"", 0, offset
        positions, sizes, codes = q.positions, q.sizes, q.tags
        end = min(q.end, offset + max(max_count, 1) * (1 if tags is None else 64))
        spans: list[tuple[int, int]] = []  # contiguous runs in the commit log
        taken = total = 0
        i = offset
        while i < end and taken < max_count:
            if tags is not None and codes[i] not in tags:
                i += 1
                continue
            pos, size = positions[i], sizes[i]
            if taken and total + size > max_bytes:
                break
            if spans and spans[-1][0] + spans[-1][1] == pos:
                spans[-1] = (spans[-1][0], spans[-1][1] + size)
            else:
                spans.append((pos, size))
            taken += 1
            total += size
            i += 1
        data = b"".join(os.pread(self._fd, size, pos) for pos, size in spans)
        return data, taken, i

    def record_at(self, physical_offset: int) -> bytes | None:
        """The whole record stored at a commit-log position, or None."""
        if physical_offset < 0 or physical_offset + _HEAD.size > self.end:
            return None
        head = os.pread(self._fd, _HEAD.size, physical_offset)
        total, magic = _HEAD.unpack(head)[:2]
        if magic not in (MAGIC_V1, MAGIC_V2) or total < _HEAD.size or physical_offset + total > self.end:
            return None
        record = os.pread(self._fd, total, physical_offset)
        return record if _HEAD.unpack_from(record)[6] == physical_offset else None

    def store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        q = self._queues[(topic, queue_id)]
        return struct.unpack(">q", os.pread(self._fd, 8, q.positions[offset] + _STORE_TS_AT))[0]

    def search_offset(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first offset stored at or after ``timestamp`` (the max offset if none)."""
        lo, hi = 0, self.max_offset(topic, queue_id)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.store_timestamp(topic, queue_id, mid) < timestamp:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # -- consumer offsets -----------------------------------------------------------------------------
    def consumer_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.offsets.get(f"{group}@{topic}", {}).get(str(queue_id))

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        table = self.offsets.setdefault(f"{group}@{topic}", {})
        self.known_groups.add(group)
        if table.get(str(queue_id)) != offset:
            table[str(queue_id)] = offset
            self._dirty_offsets = True

    def group_topics(self, group: str) -> list[str]:
        return sorted(key.split("@", 1)[1] for key in self.offsets if key.split("@", 1)[0] == group)
