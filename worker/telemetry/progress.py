"""Live progress lines for ``connect run``: one line per task pair per epoch that did something,
plus failures, then the run's cumulative total (``total N records committed since start``); and
for a connector without task pairs what it waits for ("waiting for topics matching ..."), when
that changes and then every ``waiting_every_s``, so a connector with nothing to read is never a
silent 0.

An idle epoch (no pair moved, acknowledged, committed, failed or retried anything, nothing in
flight) prints nothing: the first one of a stretch prints one ``idle`` line, then one every
``idle_every_s`` while it lasts.

Failure traces pass through the printer's ``redact`` callable (when given) before they are
printed, so secret config values echoed in an exception never reach the terminal.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

from connect.tasks.results import FAILED, EpochResult

__all__ = ["ProgressPrinter", "format_result", "is_idle"]


def _rate(n: float, seconds: float) -> str:
    return f"{n / seconds:,.0f}"


def is_idle(r: EpochResult) -> bool:
    """Nothing happened in this pair's epoch that an operator would want to see."""
    s = r.stats
    return (r.state != FAILED and not r.restarted and not s.get("records") and not s.get("acknowledged")
            and not s.get("committed") and not s.get("errors") and not s.get("transient")
            and not s.get("in_flight") and not s.get("retrying"))


def format_result(r: EpochResult) -> str:
    """One pair's epoch: records moved (put to the sink), acknowledged by the destination and
    committed (their offsets persisted), lag against the committed offsets, and what is retried."""
    s = r.stats
    lag = "?" if r.lag is None else f"{r.lag:,}"
    line = (f"epoch {r.epoch:>4}  {r.connector}/{r.task}  {r.state:<7} moved {s.get('records', 0):>9,} "
            f"{_rate(s.get('records', 0), r.duration):>9} rec/s {_rate(s.get('bytes', 0) / 1e6, r.duration):>5} MB/s "
            f"acked {s.get('acknowledged', 0):,} committed {s.get('committed', 0):,}  "
            f"lag {lag}  errors {s.get('errors', 0)}  age max {s.get('latency_ms_max', 0):,.0f} ms")
    delivery = s.get("delivery")
    if delivery and delivery != "at-least-once":  # exactly-once, or why not (exactly.once.support=requested)
        line += f"  {delivery}"
    if s.get("in_flight"):  # put, not acknowledged yet: they stay with the pair into its next epoch
        line += f"  in flight {s['in_flight']:,}"
    gap = getattr(r, "gap_s", None)
    if gap is not None:
        line += f"  gap {gap:.2f} s"
    if r.restarted:
        line += f"  (started in pid {r.pid})"
    for retry in s.get("retrying") or ():
        held = ", ".join(retry["partitions"]) or "every partition of the pair"
        line += (f"\n    retrying {retry['operation']} for {retry['for_s']:,.1f} s (offsets held: {held}): "
                 f"{retry['reason']}")
    return line


class ProgressPrinter:
    def __init__(self, out: TextIO = sys.stderr, quiet: bool = False, redact: Callable[[str], str] | None = None,
                 waiting_every_s: float = 30.0, idle_every_s: float = 60.0):
        self.out = out
        self.quiet = quiet
        self.redact = redact or (lambda text: text)
        self.waiting_every_s = waiting_every_s
        self.idle_every_s = idle_every_s
        self._waiting: dict[str, tuple[str, float]] = {}  # connector -> (what it waits for, printed at)
        self._idle: dict[str, tuple[int, float]] = {}  # connector -> (first idle epoch, idle line printed at)

    def idle(self, runtime) -> None:
        """The driver's ``on_idle`` hook: a connector's turn ran nothing because it has no task pair."""
        what = runtime.waiting()
        if self.quiet or what is None:
            return
        now = time.monotonic()
        last = self._waiting.get(runtime.name)
        if last is not None and last[0] == what and now - last[1] < self.waiting_every_s:
            return
        self._waiting[runtime.name] = (what, now)
        print(self.redact(f"{runtime.name}: 0 task pairs, {what}"), file=self.out, flush=True)

    def __call__(self, epoch: int, results: list[EpochResult], runtimes) -> None:
        for r in results:
            self._waiting.pop(r.connector, None)  # it runs: a later wait is news again
        for r in sorted(results, key=lambda r: (r.connector, r.task)):
            if (not self.quiet and not is_idle(r)) or r.state == FAILED:
                print(self.redact(format_result(r)), file=self.out)
            if r.state == FAILED and r.trace:
                print(self.redact(f"task {r.connector}/{r.task} FAILED:\n{r.trace}"), file=self.out)
        if self.quiet or not results:
            return
        committed = sum(rt.committed_total for rt in runtimes)
        moved = sum(rt.records_total for rt in runtimes)
        total = f"total {committed:,} records committed since start ({moved:,} moved)"
        connector = results[0].connector
        if not all(is_idle(r) for r in results):
            self._idle.pop(connector, None)
            print(f"epoch {epoch:>4}  {total}", file=self.out, flush=True)
            return
        now = time.monotonic()
        since, printed = self._idle.get(connector, (epoch, None))
        if printed is not None and now - printed < self.idle_every_s:
            return
        self._idle[connector] = (since, now)
        print(self.redact(f"epoch {epoch:>4}  {connector}: idle since epoch {since} (nothing moved or pending); "
                          f"{total}"), file=self.out, flush=True)
