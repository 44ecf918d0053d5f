"""Retrying transient failures: exponential backoff, bounded by the epoch and by ``errors.retry.timeout``.

A transient failure (a :class:`~connect.errors.RetriableError`) is retried for as long as it
keeps failing, across epochs: the clock of one operation ("source poll", "sink put",
"delivery"...) starts at its first failure and stops at its next success. Waits between attempts
never outlast the epoch (``time_left``): when the epoch runs out the wait raises
:class:`EpochOver` and the runner ends the epoch normally, committing what was acknowledged;
the next epoch carries on with the same clock. Only when one operation has been failing for
longer than ``errors.retry.timeout`` does :class:`~connect.errors.RetriesExhaustedError` fail
the pair - which the worker then restarts with backoff from its committed offsets.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, TypeVar

from connect.errors import RetriableError, RetriesExhaustedError
from connect.tasks.results import REASON_KEPT

__all__ = ["RetryPolicy", "EpochOver"]

T = TypeVar("T")
log = logging.getLogger(__name__)

_FIRST_DELAY = 0.1


class EpochOver(Exception):
    """A wait was cut short by the epoch deadline or the stop signal (not an error)."""


class RetryPolicy:
    def __init__(self, timeout_ms: int, max_delay_ms: int, *, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, on_retry: Callable[[], None] | None = None):
        self.timeout_ms = timeout_ms
        self.max_delay_ms = max_delay_ms
        self._sleep = sleep
        self._clock = clock
        self.on_retry = on_retry
        self._since: dict[str, float] = {}  # operation -> monotonic time of its first failure
        self._delay: dict[str, float] = {}  # operation -> next backoff
        self._reason: dict[str, str] = {}  # operation -> its latest error

    def failed(self, what: str, error: BaseException) -> float:
        """Record a failure of ``what``; return the backoff before the next attempt.

        Raises RetriesExhaustedError when ``what`` has been failing for longer than the timeout.
        """
        now = self._clock()
        if what not in self._since:  # the first failure of a streak is logged; its retries are counted
            log.warning("%s failed, retrying: %s", what, error)
        since = self._since.setdefault(what, now)
        self._reason[what] = f"{type(error).__name__}: {error}"[:REASON_KEPT]  # masked, then cut, when shown
        if self.timeout_ms >= 0 and (now - since) * 1000 >= self.timeout_ms:
            raise RetriesExhaustedError(
                f"{what} still failing after errors.retry.timeout={self.timeout_ms} ms "
                f"(failing for {now - since:.1f} s): {error}") from error
        delay = self._delay.get(what, _FIRST_DELAY)
        self._delay[what] = min(delay * 2, self.max_delay_ms / 1000)
        return min(delay, self.max_delay_ms / 1000)

    def succeeded(self, what: str) -> None:
        if self._since.pop(what, None) is not None:
            self._delay.pop(what, None)
            self._reason.pop(what, None)

    def streaks(self) -> list[tuple[str, float, str]]:
        """(operation, seconds it has been failing, its latest error) of every failing operation."""
        now = self._clock()
        return [(what, now - since, self._reason.get(what, "")) for what, since in self._since.items()]

    def failing(self, what: str) -> bool:
        return what in self._since

    def wait(self, seconds: float, time_left: Callable[[], float]) -> None:
        """Sleep ``seconds``, or raise EpochOver if the epoch ends first."""
        left = time_left()
        if left < seconds:
            self._sleep(max(left, 0.0))
            raise EpochOver
        self._sleep(seconds)

    def call(self, what: str, fn: Callable[[], T], time_left: Callable[[], float] = lambda: float("inf")) -> T:
        """``fn()``, retried on RetriableError with backoff while the epoch and the timeout allow."""
        while True:
            try:
                result = fn()
            except RetriableError as exc:
                delay = self.failed(what, exc)
                if self.on_retry is not None:
                    self.on_retry()
                self.wait(delay, time_left)
                continue
            if self._since:
                self.succeeded(what)
            return result
