"""The console's history: a bounded, in-memory record of every connector's figures, sampled from the
worker's metrics every :data:`SAMPLE_S` seconds in a thread of its own. Per connector it keeps the
last :data:`WINDOW_S` seconds (at most :data:`SLOTS` samples of four numbers each, and at most
:data:`HEARTBEAT_SAMPLES` heartbeat latencies for each of at most :data:`HEARTBEAT_ALIASES`
origins); a deleted connector's history goes at the next sample, a restarted worker starts anew."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from typing import Any, Callable

__all__ = ["ConsoleHistory", "SAMPLE_S", "WINDOW_S", "SLOTS", "HEARTBEAT_SAMPLES", "HEARTBEAT_ALIASES", "RATE_SAMPLES"]

log = logging.getLogger(__name__)

SAMPLE_S = 2.0
WINDOW_S = 900.0
SLOTS = int(WINDOW_S / SAMPLE_S) + 1
HEARTBEAT_SAMPLES = 450
HEARTBEAT_ALIASES = 16
RATE_SAMPLES = 5  # the rates shown on the topology: over the last 5 samples (10 s)


class _History:
    """One connector's samples: (monotonic time, records, acknowledged, lag or NaN), oldest first."""

    __slots__ = ("samples", "heartbeats", "counts", "record_age", "record_age_mark")

    def __init__(self) -> None:
        self.samples: deque[tuple[float, float, float, float]] = deque(maxlen=SLOTS)
        self.heartbeats: dict[str, deque[tuple[float, float]]] = {}  # origin alias -> (time, latency ms)
        self.counts: dict[str, float] = {}  # origin alias -> heartbeats seen, at the last sample
        self.record_age: tuple[float, float] | None = None  # (time, oldest record age in s) of the last epochs that put
        self.record_age_mark: int | None = None  # the figures' latency_mark when record_age was taken

    def add_heartbeats(self, now: float, reported: dict[str, float]) -> None:
        """Keep a heartbeat latency when the monitor saw a new heartbeat since the last sample
        (its ``count`` grew), so a link's percentile is over heartbeats, not over samples."""
        for key, count in reported.items():
            if not (key.startswith("heartbeat.") and key.endswith(".count")):
                continue
            alias = key[len("heartbeat."):-len(".count")]
            latency = reported.get(f"heartbeat.{alias}.latency_ms")
            if latency is None or count == self.counts.get(alias):
                continue
            self.counts[alias] = count
            kept = self.heartbeats.get(alias)
            if kept is None:
                if len(self.heartbeats) >= HEARTBEAT_ALIASES:
                    continue
                kept = self.heartbeats[alias] = deque(maxlen=HEARTBEAT_SAMPLES)
            kept.append((now, float(latency)))


def _rates(samples: list[tuple[float, float, float, float]]) -> list[tuple[float, float | None, float | None]]:
    """(time, records/s, acknowledged/s) between consecutive samples; None where a counter went back
    (the connector was deleted and created again)."""
    out = []
    for (t0, r0, a0, _), (t1, r1, a1, _) in zip(samples, samples[1:], strict=False):
        dt = t1 - t0
        if dt <= 0:
            continue
        out.append((t1, (r1 - r0) / dt if r1 >= r0 else None, (a1 - a0) / dt if a1 >= a0 else None))
    return out


def _percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile ``q`` (0-100) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(q / 100 * len(ordered)) - 1, 0)]


class ConsoleHistory:
    """Samples the metrics of every connector every ``interval`` seconds (a daemon thread)."""

    def __init__(self, metrics: Any, names: Callable[[], list[str]], *, interval: float = SAMPLE_S,
                 clock: Callable[[], float] = time.monotonic):
        self._metrics = metrics
        self._names = names
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._series: dict[str, _History] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sampled_at = -math.inf

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="console-history", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - the history is informational: never end the thread
                log.exception("console history: sample failed")
            self._stop.wait(self.interval)

    def sample_if_due(self) -> None:
        """A sample when the last one is an interval old (a history without its thread, in tests and
        embedders, is then sampled by the console's own requests)."""
        if self._clock() - self._sampled_at >= self.interval:
            self.sample()

    def sample(self) -> None:
        """Take one sample of every connector (and forget connectors that are gone)."""
        names = set(self._names())
        figures = self._metrics.figures(names) if self._metrics is not None else {}
        now = self._clock()
        with self._lock:
            previous, self._sampled_at = self._sampled_at, now
            for gone in [n for n in self._series if n not in names]:
                del self._series[gone]
            for name in names:
                f = figures.get(name)
                if f is None:
                    continue
                h = self._series.get(name)
                if h is None:
                    h = self._series[name] = _History()
                    if previous > -math.inf:
                        # It had no figures at the last sample, so nothing moved yet then: what it
                        # moved since counts as its first rate (an epoch's records arrive at once).
                        h.samples.append((previous, 0.0, 0.0, math.nan))
                lag = f["lag"]
                h.samples.append((now, f["records"], f["acknowledged"], math.nan if lag is None else float(lag)))
                if f.get("latency_max") is not None and f.get("latency_mark") != h.record_age_mark:
                    # an epoch timed records since the last sample (even if idle epochs followed it)
                    h.record_age, h.record_age_mark = (now, float(f["latency_max"])), f.get("latency_mark")
                for task in f["tasks"].values():
                    h.add_heartbeats(now, task["reported"])

    def rates(self, name: str, last: int | None = None) -> list[tuple[float, float | None, float | None]]:
        with self._lock:
            h = self._series.get(name)
            samples = list(h.samples) if h is not None else []
        if last is not None:
            samples = samples[-(last + 1):]
        return _rates(samples)

    def recent_rate(self, name: str) -> tuple[float | None, float | None]:
        """(records/s, acknowledged/s) over the last :data:`RATE_SAMPLES` samples; None when unknown."""
        with self._lock:
            h = self._series.get(name)
            samples = list(h.samples)[-(RATE_SAMPLES + 1):] if h is not None else []
        if len(samples) < 2:
            return None, None
        (t0, r0, a0, _), (t1, r1, a1, _) = samples[0], samples[-1]
        dt = t1 - t0
        if dt <= 0:
            return None, None
        return ((r1 - r0) / dt if r1 >= r0 else None), ((a1 - a0) / dt if a1 >= a0 else None)

    def chart(self, name: str) -> dict[str, list]:
        """The last :data:`WINDOW_S` seconds: seconds before now, records/s, acknowledged/s, lag."""
        now = self._clock()
        with self._lock:
            h = self._series.get(name)
            samples = list(h.samples) if h is not None else []
        rates = _rates(samples)
        lag = {t: None if math.isnan(v) else v for t, _, _, v in samples}
        return {"ago_s": [round(now - t, 1) for t, _, _ in rates],
                "records_per_second": [None if r is None else round(r, 2) for _, r, _ in rates],
                "acknowledged_per_second": [None if a is None else round(a, 2) for _, _, a in rates],
                "lag": [lag.get(t) for t, _, _ in rates]}

    def heartbeat_latency(self, name: str) -> dict[str, dict[str, Any]]:
        """Per origin alias: p50 and p99 of the heartbeat latencies seen in the window, and their count."""
        cutoff = self._clock() - WINDOW_S
        with self._lock:
            h = self._series.get(name)
            kept = {a: [ms for t, ms in d if t >= cutoff] for a, d in h.heartbeats.items()} if h is not None else {}
        return {alias: {"p50_ms": _percentile(v, 50), "p99_ms": _percentile(v, 99), "heartbeats": len(v)}
                for alias, v in sorted(kept.items())}

    def record_age(self, name: str) -> dict[str, float] | None:
        """The oldest record age the connector's last epochs that put records reported (seconds), and
        how long ago that was seen: kept while its epochs put nothing (paused, idle)."""
        with self._lock:
            h = self._series.get(name)
            seen = h.record_age if h is not None else None
        return None if seen is None else {"max_s": seen[1], "seen_s_ago": round(self._clock() - seen[0], 1)}

    def size(self) -> tuple[int, int]:
        """(connectors, samples) held: what the bound in the module docstring limits."""
        with self._lock:
            return len(self._series), sum(len(h.samples) + sum(len(d) for d in h.heartbeats.values())
                                          for h in self._series.values())
