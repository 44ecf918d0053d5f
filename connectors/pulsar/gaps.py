"""Where a Pulsar partition's committed position no longer exists: gaps (``connect.source.gaps``).

A message id is (ledger, entry, batch). Retention and truncation delete whole ledgers, oldest
first. Once the committed message's ledger is gone, its id alone cannot tell "the records after it
were deleted" from "it was the last entry of a ledger that rolled and was trimmed" (routine with
retention 0 for a reader, which holds no subscription). The exact answer is the broker's message
index: with ``brokerEntryMetadataInterceptors=org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor``
every entry carries the index of its last message (0, 1, 2... per partition, one per message, kept
across ledgers, trims and broker restarts), and the admin API answers it in the
``X-Pulsar-Broker-Entry-METADATA-index`` header of ``GET .../ledger/{L}/entry/{E}``.

The source keeps the index of each record in its offset (``"index"``): the first message of each
ledger it reads is looked up (one admin request per ledger, and per hole in entry ids within one:
transaction markers, aborted transactions and chunks take indexes the reader never sees); the
messages after it are counted. Where the next message read does not follow the last one (the first
message after a resume, a new ledger, a hole), :meth:`IndexCheck.check` compares:

- the previous position's ledger is still there: ledgers are deleted oldest first, so nothing after
  it was removed (and the topic is the same: ledger ids are unique in a cluster);
- it is gone: the message read has index ``J``, the previous one had ``I``. ``J == I + 1``: nothing
  was lost (the ledger rolled and was trimmed); ``J > I + 1``: indexes ``I + 1 .. J - 1`` were
  deleted before they were copied, a gap of exactly ``J - I - 1`` records; ``J <= I``: indexes went
  back, the topic was deleted and created again (its new messages are read from its start, the old
  topic's position is never applied to it; the old topic's unread records cannot be counted).

Without ``admin.url``, or on a broker without the interceptor (no index header), Pulsar gaps are
not detected: said once in the log, and nothing fails.
"""

from __future__ import annotations

import logging
import time
import urllib.error
import urllib.request
from typing import Any, Mapping

from connect.errors import RetriableError
from connect.records import partition_key
from connect.source.gaps import FAIL, RECREATED, SourceGap

__all__ = ["INDEX_HEADER", "INTERCEPTOR", "TRIMMED", "IndexCheck", "NoIndex", "admin_request", "message_index",
           "say_undetected"]

log = logging.getLogger(__name__)

INTERCEPTOR = "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor"
INDEX_HEADER = "X-Pulsar-Broker-Entry-METADATA-index"
BATCH_HEADER = "X-Pulsar-num-batch-message"
TRIMMED = "the ledgers holding the records after the committed position were deleted (retention or truncation)"
RECHECK_S = 1.0  # a hole inside a ledger is looked up at most this often per partition
_said: set[str] = set()


class NoIndex(Exception):
    """The broker answered a message without the entry index: it runs without the interceptor."""


def say_undetected(where: str, why: str) -> None:
    """One log line per ``where``: Pulsar gaps are not detected there, and why."""
    if where not in _said:
        _said.add(where)
        log.warning("source gaps on %s are not detected: %s (Pulsar gap detection needs the source's admin.url and "
                    "the broker setting brokerEntryMetadataInterceptors=%s)", where, why, INTERCEPTOR)


def admin_request(url: str, cfg: Mapping[str, Any]) -> urllib.request.Request:
    """A GET of a Pulsar admin REST URL with the source's bearer token (``auth.token``), if any."""
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if cfg.get("auth.plugin") == "token" and cfg.get("auth.token"):
        request.add_header("Authorization", f"Bearer {cfg['auth.token']}")
    return request


def message_index(admin_url: str, topic: str, pos: tuple, cfg: Mapping[str, Any], timeout_s: float) -> int | None:
    """The broker index of the message at ``pos`` (ledger, entry, batch) of partition ``topic``; None
    when its ledger is gone (404). :class:`NoIndex` when the broker has no index interceptor;
    RetriableError for any other failure."""
    url = f"{admin_url.rstrip('/')}/admin/v2/{topic.replace('://', '/', 1)}/ledger/{pos[0]}/entry/{pos[1]}"
    try:
        with urllib.request.urlopen(admin_request(url, cfg), timeout=timeout_s) as response:
            index, batch = response.headers.get(INDEX_HEADER), response.headers.get(BATCH_HEADER)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise RetriableError(f"cannot read the index of message {pos[0]}:{pos[1]} of {topic} at {url}: "
                             f"HTTP {exc.code}") from exc
    except OSError as exc:
        raise RetriableError(f"cannot read the index of message {pos[0]}:{pos[1]} of {topic} at {url}: {exc}") from exc
    if index is None:
        raise NoIndex(topic)
    try:
        # the entry's index is its last message's; a batch's messages precede it one by one
        return int(index) - (int(batch or 1) - 1) + max(pos[2], 0)
    except ValueError as exc:
        raise RetriableError(f"{url} answered an index header that is not a number") from exc


def _before(pos: tuple) -> tuple:
    """The position a reader (start exclusive) resumes from to read ``pos`` next."""
    ledger, entry, batch = pos
    return (ledger, entry, batch - 1) if batch > 0 else (ledger, entry - 1, -1)


class IndexCheck:
    """The checks of one source task. Each partition (``connectors.pulsar.source._Partition``) holds
    ``index`` (of its last message, read or committed; None: not known), ``at`` (that message's
    position) and ``recheck`` (when a hole may be looked up again)."""

    def __init__(self, admin_url: str, cfg: Mapping[str, Any], policy: str, time_left=lambda: float("inf")):
        self._admin, self._cfg, self._policy = admin_url, cfg, policy
        self._timeout = min(cfg.get("operation.timeout.ms", 30_000) / 1000, 5.0)
        self._time_left = time_left  # the epoch's: a look-up waits no longer (at least 0.2 s)
        self.gaps: list[SourceGap] = []
        self.error: SourceGap | None = None  # the first gap under ``fail``: the pair stops at it

    def index(self, entry, pos: tuple) -> int | None:
        return message_index(self._admin, entry.name, pos, self._cfg, max(min(self._timeout, self._time_left()), 0.2))

    def check(self, entry, pos: tuple) -> bool:
        """``pos`` is read next on ``entry`` and does not follow the last message: look up where it
        stands (``entry.index`` becomes its index - 1). False: the pair stops here (a gap under
        ``fail``). Raises RetriableError when the admin API does not answer, NoIndex without the
        interceptor."""
        at = entry.at
        if at is not None and at[0] == pos[0]:  # a hole inside one ledger: nothing deleted, only the count is off
            now = time.monotonic()
            if now < entry.recheck:
                entry.index = None  # not known until the next look-up
                return True
            entry.recheck = now + RECHECK_S
            found = self.index(entry, pos)
            entry.index = None if found is None else found - 1
            return True
        found = self.index(entry, pos)
        if found is None:  # deleted since it was read: where it stands is not known
            entry.index = None
            return True
        if at is not None and at[1] >= 0 and self.index(entry, at) is not None:
            entry.index = found - 1  # the previous message's ledger is still there: nothing after it was deleted
            return True
        expected = None if entry.index is None else entry.index + 1
        entry.index = found - 1
        if expected is None:
            if at is not None:
                log.warning("%s: the ledger of position %s is gone and its index is not known (committed before "
                            "index tracking, or not looked up yet): whether records were deleted after it cannot be "
                            "told", entry.name, ":".join(map(str, at)))
            return True
        if found == expected:
            return True  # its ledger rolled and was trimmed: nothing after it was deleted
        ledger, before, batch = _before(pos)
        resume = {partition_key(entry.sp): {"ledger": ledger, "entry": before, "batch": batch, "index": found - 1}}
        if found > expected:
            gap = SourceGap(entry.topic, str(entry.part), expected, found - 1, found - expected, TRIMMED,
                            self._policy, resume)
        else:  # indexes went back: another topic under the same name
            gap = SourceGap(entry.topic, str(entry.part), expected, None, None, RECREATED, self._policy, resume)
        self.gaps.append(gap)
        if self._policy == FAIL:
            self.error = self.error or gap
            entry.index = expected - 1  # stays where it stopped
            return False
        return True
