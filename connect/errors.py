"""One exception root for the framework and its small family.

Every error the framework raises on purpose derives from :class:`ConnectError`, so callers can
catch one class. Leaves say what went wrong; their messages name the config key, JSON path or
record position involved.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

__all__ = [
    "ConnectError",
    "ConfigError",
    "ConfigIssue",
    "RetriableError",
    "NotSentError",
    "DeliveryError",
    "ConversionError",
    "PluginError",
    "TaskFailedError",
    "RetriesExhaustedError",
    "TransactionAbortedError",
    "ProducerFencedError",
    "TransactionsUnavailableError",
]


class ConnectError(Exception):
    """Root of every error the framework raises deliberately."""


class RetriableError(ConnectError):
    """The operation may succeed if retried unchanged (Kafka Connect's RetriableException).

    Raised from ``SourceTask.poll`` or ``SinkTask.put``: the runner retries the same call with
    exponential backoff until ``errors.retry.timeout`` elapses, then fails the task (and the
    worker restarts it). Reported for one record through the errant-record reporter, it marks a
    *transient* delivery failure: the record is re-sent, never skipped.
    """


class NotSentError(RetriableError):
    """Reported for records a sink's ``put`` did not hand to its client (no room until the
    deadline, a target it could not look up, a failure served during the put): transient, and
    later than every record the sink still holds for the pair. The runner re-sends them only once
    every record put before them has an outcome, behind any of those that failed, so a failure
    reported after them cannot make them overtake it (per-partition order).

    ``backpressure=True``: nothing failed, the client had no room until the deadline; the records
    wait their turn without counting as a failing delivery (``errors.retry.timeout``)."""

    def __init__(self, message: str, *, backpressure: bool = False) -> None:
        super().__init__(message)
        self.backpressure = backpressure


class DeliveryError(ConnectError):
    """The destination refused one record for good (too large, invalid, not authorized, a payload
    it cannot carry): a *permanent* failure of that record, reported by a sink (or a side writer)
    through the errant-record reporter, so it goes to the failed-message hooks, the dead-letter
    topic, then ``errors.tolerance``. Never used for transient trouble (:class:`RetriableError`)."""


class ConversionError(ConnectError):
    """A key, value or header could not be converted; the message names the record position."""


class PluginError(ConnectError):
    """A connector class could not be found or loaded."""


class TaskFailedError(ConnectError):
    """A task pair stopped because of an error nothing was allowed to tolerate."""


class RetriesExhaustedError(TaskFailedError):
    """A transient failure lasted longer than ``errors.retry.timeout``.

    Nothing was skipped: the pair's offsets stay where its last acknowledged records put them,
    and the worker restarts the pair with backoff (the restart policy), from those offsets.
    """


class TransactionAbortedError(RetriesExhaustedError):
    """Exactly-once delivery: the epoch's transaction was aborted (a record failed, the target was
    unreachable at commit, the transaction timed out). Nothing of it is visible to ``read_committed``
    readers; the worker restarts the pair with backoff, from the offsets committed in the target."""


class ProducerFencedError(TaskFailedError):
    """Exactly-once delivery: a newer attempt of the same task pair took over its ``transactional.id``
    (a replayed Spark attempt, a restarted driver's pair). This attempt is a zombie: its runner commits
    nothing and is never used again; the newer attempt goes on. (The driver discards the zombie's result
    by its fencing token; if it still took the zombie for the current attempt, it restarts the pair.)"""


class TransactionsUnavailableError(ConnectError):
    """Exactly-once delivery: the sink, or its target, cannot write transactions; the message says why."""


class ConfigIssue(NamedTuple):
    """One problem with one config key."""

    key: str
    value: object
    message: str

    def __str__(self) -> str:
        if self.value is None:
            return f"{self.key}: {self.message}"
        return f"{self.key}: invalid value {self.value!r}: {self.message}"


class ConfigError(ConnectError):
    """A configuration is invalid. Carries every issue found, not just the first."""

    def __init__(self, issues: Iterable[ConfigIssue] | str, *, source: str | None = None):
        if isinstance(issues, str):
            issues = [ConfigIssue("<config>", None, issues)]
        self.issues: list[ConfigIssue] = list(issues)
        self.source = source
        head = f"{source}: " if source else ""
        lines = "\n".join(f"  - {issue}" for issue in self.issues)
        count = len(self.issues)
        super().__init__(f"{head}{count} configuration error{'s' if count != 1 else ''}:\n{lines}")
