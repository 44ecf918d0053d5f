"""Live progress lines for ``connect run``: one line per task pair per epoch, plus failures, and
for a connector without task pairs what it waits for ("waiting for topics matching ..."), when
that changes and then every ``waiting_every_s``, so a connector with nothing to read is never a
silent 0.

Failure traces pass through the printer's ``redact`` callable (when given) before they are
printed, so secret config values echoed in an exception never reach the terminal.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

from connect.tasks.results import FAILED, EpochResult

__all__ = ["ProgressPrinter", "format_result"]


def _rate(n: float, seconds: float) -> str:
    return f"{n / seconds:,.0f}"


def format_result(r: EpochResult) -> str:
    """One pair's epoch: records moved (put to the sink), acknowledged by the destination and
    committed (their offsets persisted), lag against the committed offsets, and what is retried."""
    s = r.stats
    lag = "?" if r.lag is None else f"{r.lag:,}"
    line = (f"epoch {r.epoch:>4}  {r.connector}/{r.task}  {r.state:<7} moved {s.get('records', 0):>9,} "
            f"{_rate(s.get('records', 0), r.duration):>9} rec/s {_rate(s.get('bytes', 0) / 1e6, r.duration):>5} MB/s "
            f"acked {s.get('acknowledged', 0):,} committed {s.get('committed', 0):,}  "
            f"lag {lag}  errors {s.get('errors', 0)}  age max {s.get('latency_ms_max', 0):,.0f} ms")
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
                 waiting_every_s: float = 30.0):
        self.out = out
        self.quiet = quiet
        self.redact = redact or (lambda text: text)
        self.waiting_every_s = waiting_every_s
        self._waiting: dict[str, tuple[str, float]] = {}  # connector -> (what it waits for, printed at)

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
            if not self.quiet or r.state == FAILED:
                print(self.redact(format_result(r)), file=self.out)
            if r.state == FAILED and r.trace:
                print(self.redact(f"task {r.connector}/{r.task} FAILED:\n{r.trace}"), file=self.out)
        if not self.quiet:
            committed = sum(rt.committed_total for rt in runtimes)
            moved = sum(rt.records_total for rt in runtimes)
            print(f"epoch {epoch:>4}  total {committed:,} records committed ({moved:,} moved)", file=self.out, flush=True)
