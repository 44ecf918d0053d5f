"""Retry with exponential backoff for RetriableError, bounded by ``errors.retry.timeout``."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

from connect.errors import RetriableError

__all__ = ["RetryPolicy"]

T = TypeVar("T")


class RetryPolicy:
    """Retries a call that raises RetriableError: 100 ms, 200 ms, ... capped at ``max_delay_ms``."""

    def __init__(self, timeout_ms: int, max_delay_ms: int, *, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, on_retry: Callable[[], None] | None = None):
        self.timeout_ms = timeout_ms
        self.max_delay_ms = max_delay_ms
        self._sleep = sleep
        self._clock = clock
        self._on_retry = on_retry

    def delays(self):
        """Yield successive delays (seconds) until the timeout would be exceeded."""
        deadline = self._clock() + self.timeout_ms / 1000
        delay = 0.1
        while True:
            remaining = deadline - self._clock()
            if remaining <= 0:
                return
            yield min(delay, self.max_delay_ms / 1000, remaining)
            delay *= 2

    def call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except RetriableError as first:
            last: RetriableError = first
        for delay in self.delays():
            if self._on_retry:
                self._on_retry()
            self._sleep(delay)
            try:
                return fn()
            except RetriableError as exc:
                last = exc
        raise RetriableError(
            f"{what} still failing after errors.retry.timeout={self.timeout_ms} ms: {last}"
        ) from last
