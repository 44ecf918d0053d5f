"""The lease of a task pair's bridge: how long it may keep moving records between two epochs.

:meth:`~connect.tasks.runner.TaskPairRunner.bridge` runs while the driver schedules the next epoch,
until its lease ends or it is halted. The lease is set when the bridge starts and may be extended
from another thread (``renew``), also before the bridge starts; ``halt`` (another thread) gives
the pair back at the next batch. While the bridge runs, its lease is the runner's deadline.
"""

from __future__ import annotations

import threading
from typing import Callable

__all__ = ["BridgeLease"]


class BridgeLease:
    def __init__(self, set_deadline: Callable[[float], None], deadline: Callable[[], float],
                 halted: threading.Event) -> None:
        self.halted = halted  # set by ``halt``: the mover stops at the next batch
        self._lock = threading.Lock()  # ``renew`` (another thread) against ``begin``/``end``
        self._until = 0.0  # the latest lease asked for the bridge after the last epoch (monotonic)
        self._running = False
        self._set_deadline = set_deadline
        self._deadline = deadline

    def reset(self) -> None:
        """An epoch starts: a lease asked before it and a halt are forgotten."""
        self.halted.clear()
        self._until = 0.0

    def begin(self, until: float) -> None:
        """The bridge starts: it may run until ``until`` or a later renewal (one that came first counts too)."""
        with self._lock:
            self._until = max(self._until, until)
            self._running = True
            self._set_deadline(self._until)

    def end(self) -> None:
        with self._lock:
            self._running = False
            self._set_deadline(float("inf"))

    def renew(self, until: float) -> None:
        """Let the bridge run until ``until`` if that is later than its lease."""
        with self._lock:
            self._until = max(self._until, until)
            if self._running and until > self._deadline():
                self._set_deadline(until)

    def halt(self) -> None:
        self.halted.set()
