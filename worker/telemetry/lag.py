"""Lag as the operator means it: what is still to be delivered, whether or not the pairs run.

Task pairs report where their consumers stand, which runs ahead of what is delivered (records
moved but not acknowledged, a pair retrying a refused batch) and says nothing while a connector is
paused, stopped or failing. So the driver measures lag itself, from the offsets it committed and
the source's end (:meth:`connect.connector.SourceConnector.committed_lag`), after each epoch and,
while no epoch runs, every :data:`REFRESH_S` seconds.

Partitions without a committed offset are not measured (where their reading would start is the
tasks' business): while no partition of a connector has one, its lag is unknown (``?``), not 0.

Seconds behind are how long a partition has been behind without interruption: since the last
measurement that found it caught up (0 records), or since the first measurement of this process
that found it behind. They grow while nothing is delivered (a paused connector, a sink refusing
records) and drop to 0 once the committed offsets reach the end.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable, Iterable, Mapping

__all__ = ["CommittedLag", "REFRESH_S", "MEASURE_WAIT_S"]

log = logging.getLogger(__name__)

REFRESH_S = 5.0
MEASURE_WAIT_S = 2.0

# Questions about lag, for every connector of the process: a few threads, so one source that is
# away (its question pending) never queues another connector's behind it for long.
_ASKING = ThreadPoolExecutor(max_workers=4, thread_name_prefix="connect-lag")


class CommittedLag:
    """The last lag measured against committed offsets, per source partition key."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self._behind_since: dict[str, float] = {}  # key -> when it was first seen behind, in this streak
        self._records: dict[str, int] = {}  # key -> records behind, last measured
        self.known = False
        self.measured_at = 0.0  # monotonic
        self._pending: Future | None = None  # a question to the source not answered yet

    def measure(self, source_connector, committed: Mapping[str, Mapping]) -> None:
        """Ask the source how far its end is from ``committed``; unknown (``known`` False) when it
        cannot tell or fails (lag is informational: never an error of the connector).

        The question runs in a thread of its own and is waited for at most :data:`MEASURE_WAIT_S`:
        a source cluster that is away (lookups that time out per queue) must not hold the
        connector's loop, its epochs or its stop. A question still unanswered is not asked again
        until it is answered; its answer is then taken."""
        self.measured_at = time.monotonic()
        pending = self._pending
        if pending is None or pending.done():
            if pending is not None:
                self._take(pending)
            pending = self._pending = _ASKING.submit(source_connector.committed_lag, dict(committed))
        try:
            pending.result(MEASURE_WAIT_S)
        except FutureTimeout:
            self.known = False
            return
        except Exception:  # noqa: BLE001 - taken (as unknown) below
            pass
        self._take(pending)
        self._pending = None

    def _take(self, done: Future) -> None:
        try:
            behind = done.result(0)
        except Exception as exc:  # noqa: BLE001
            log.debug("lag not measured: %s", exc)
            behind = None
        self.update(behind)

    def update(self, behind: Mapping[str, int] | None) -> None:
        if behind is None:
            self.known = False
            return
        now = self._clock()
        since = {}
        for key, records in behind.items():
            if records > 0:
                since[key] = self._behind_since.get(key, now)
        self._behind_since = since
        self._records = {key: max(int(records), 0) for key, records in behind.items()}
        self.known = True

    @property
    def partitions(self) -> dict[str, tuple[int, float]]:
        """key -> (records, seconds behind), the seconds as of now. Safe from any thread: the
        measuring thread swaps whole dicts, this reads one snapshot of each."""
        now = self._clock()
        since, records = self._behind_since, self._records
        return {key: (n, now - since[key] if key in since else 0.0) for key, n in records.items()}

    def due(self) -> bool:
        return time.monotonic() - self.measured_at >= REFRESH_S

    def of(self, keys: Iterable[str] | None = None) -> tuple[int, float] | None:
        """(records, seconds) over ``keys`` (every partition when None): records summed, seconds the
        largest; None when unknown or none of the keys was measured."""
        if not self.known:
            return None
        parts = self.partitions
        wanted = parts if keys is None else {k: parts[k] for k in tuple(keys) if k in parts}
        if not wanted:  # nothing committed yet (or not these partitions): unknown, not 0
            return None
        return sum(r for r, _ in wanted.values()), max(s for _, s in wanted.values())
