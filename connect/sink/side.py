"""Side outputs: what a task pair writes besides its data - dead letters and offset syncs.

Kafka Connect writes its dead-letter topic with a producer of its own, to the Kafka cluster the
worker runs on. Here a pair's sink may write to any broker, so a side output goes to *the sink's
cluster*, through a :class:`SideWriter` that the sink's connector builds for one named topic
(:meth:`connect.connector.SinkConnector.side_writer`) - never through another instance of the
sink task: a sink task is written for the data (its routing, its topic creation, its record
format) and states no contract for being pointed at another topic.

The contract a side writer keeps:

- **One topic, its own client.** It writes every record to ``topic`` of the sink's cluster,
  whatever the record's own topic says, with a client of its own built from the config it was
  given (the sink connector's keys, with the ``dlq.*`` overrides for the dead-letter topic). It
  may create the topic when it is missing, as Kafka Connect creates its dead-letter topic.
- **Every record gets exactly one outcome,** tied to that record (a per-message callback or
  future, never found again by content): acknowledged by the broker, or a failure reported as
  ``(record, error)`` by :meth:`SideWriter.take_failures` - a
  :class:`~connect.errors.RetriableError` for transient trouble (no answer in time, a lost
  connection, a full queue), any other error (:class:`~connect.errors.DeliveryError`) when the
  broker refused that record for good. A record is never dropped silently.
- **Bounded waits.** ``send`` blocks at most until its ``deadline`` (a ``time.monotonic()``
  value) for room and reports what it could not hand over as transient failures; ``flush``
  waits at most until its deadline and says whether every record sent has an outcome
  (``flush(time.monotonic())`` serves what arrived without waiting).
- ``close()`` releases the client, waiting briefly for nothing; it may be called more than once.

What the framework does with the outcomes: a dead letter counts as written only once the broker
acknowledged it (:meth:`SideWriter.write` returned no failure and was complete); until then its
record stays unresolved and its source partition's offset does not move (at least once). Offset
syncs are best effort: they are sent without waiting, their failures are counted and logged.

A sink connector without a side writer (a file, a database, a user's sink) has no cluster to
keep side outputs in: the pipeline's validation refuses ``offset.syncs.topic`` for it, and
``errors.deadletterqueue.topic.name`` unless ``dlq.connector.class`` names a broker sink whose side
writer keeps the dead letters (its keys then given as ``dlq.*``) - :func:`side_output_issues`.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

from connect.errors import ConfigIssue, ConnectError, RetriableError
from connect.records import ConnectRecord
from connect.sink.outcomes import OutcomeQueue
from connect.sink.resend import InOrderReports

__all__ = ["SideWriter", "AsyncSideWriter", "QueuedSideWriter", "Failure", "writes_side_outputs", "side_output_issues",
           "side_output_config", "time_left"]

Failure = tuple[ConnectRecord, BaseException]


class SideWriter:
    """Writes records to one named topic of a sink's cluster with a client of its own (see the
    module's doc for the contract). Implement ``send``, ``flush`` and ``close``; report each
    failure with ``self._fail(record, error)``."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._failures: list[Failure] = []

    def send(self, records: Sequence[ConnectRecord], deadline: float) -> None:
        """Hand every record to the client, in order, waiting at most until ``deadline`` for room;
        what cannot be handed over in time is failed as transient."""
        raise NotImplementedError

    def flush(self, deadline: float) -> bool:
        """Serve outcomes until every record sent has one, at most until ``deadline``; False if
        some have none yet."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the client. Records without an outcome by now have none."""

    def take_failures(self) -> list[Failure]:
        """The failures served since the last call, in the order they were reported."""
        failures, self._failures = self._failures, []
        return failures

    def _fail(self, record: ConnectRecord, error: BaseException) -> None:
        self._failures.append((record, error))

    def write(self, records: Sequence[ConnectRecord], deadline: float) -> tuple[list[Failure], bool]:
        """Send ``records`` and wait for their outcomes until ``deadline``: (the failures, whether
        every record sent has an outcome). Complete with no failure: the broker acknowledged all."""
        self.send(records, deadline)
        complete = self.flush(deadline)
        return self.take_failures(), complete


class AsyncSideWriter(SideWriter):
    """A side writer over a client that sends without waiting: ``send`` gets the client ready
    (``_ready``, optional) and hands records over one by one (``_send_one``), at most
    ``max_pending`` without an outcome; each outcome is settled with ``_settled(record, error or
    None)`` on the caller's thread. Subclasses implement ``_send_one`` (raise what the client
    raised), ``_refusal`` (that exception as the record's error: a
    :class:`~connect.errors.RetriableError` stops the batch, in order) and ``_serve(timeout)``
    (settle the outcomes that arrived, waiting at most ``timeout`` seconds for some)."""

    #: After ``_ready`` failed, sends fail at once with that error for this many seconds before it
    #: is tried again: an outage costs one bounded wait per pause, not one per commit point.
    ready_pause_s = 2.0

    def __init__(self, topic: str, max_pending: int) -> None:
        super().__init__(topic)
        self._pending = 0  # records sent whose outcome was not settled yet
        self._max_pending = max_pending
        self._unready: ConnectError | None = None  # what the last ``_ready`` raised
        self._ready_again_at = 0.0
        self._reports = InOrderReports(self._fail)

    def _ready(self, deadline: float) -> None:
        """Get ready to send (open the client, look the topic up or create it), waiting at most until
        ``deadline``; raise a :class:`~connect.errors.ConnectError` when it cannot (a
        :class:`~connect.errors.RetriableError`: not now), which becomes every record's outcome.
        Called before each ``send`` of records (after a failure, not before ``ready_pause_s``):
        cheap once ready."""

    def _send_one(self, record: ConnectRecord) -> None:
        raise NotImplementedError

    def _refusal(self, record: ConnectRecord, exc: Exception) -> BaseException:
        raise NotImplementedError

    def _serve(self, timeout: float) -> None:
        raise NotImplementedError

    def _settled(self, record: ConnectRecord, error: BaseException | None) -> None:
        self._pending -= 1
        if error is not None:
            self._fail(record, error)

    def send(self, records: Sequence[ConnectRecord], deadline: float) -> None:
        if not records:
            return
        if self._unready is None or time.monotonic() >= self._ready_again_at:
            try:
                self._ready(deadline)
                self._unready = None
            except ConnectError as exc:
                self._unready, self._ready_again_at = exc, time.monotonic() + self.ready_pause_s
        if self._unready is not None:
            self._reports.transient(records, self._unready)
            return
        for i, r in enumerate(records):
            while self._pending >= self._max_pending:
                left = time_left(deadline)
                if left <= 0:
                    break
                self._serve(min(left, 0.05))
            if self._pending >= self._max_pending:
                error: BaseException = RetriableError(
                    f"{self._pending} records to {self.topic} without an outcome until the deadline; "
                    f"{len(records) - i} not sent yet")
            else:
                try:
                    self._send_one(r)
                    self._pending += 1
                    continue
                except Exception as exc:  # noqa: BLE001 - classified by the broker's writer
                    error = self._refusal(r, exc)
            if isinstance(error, RetriableError):  # this record and the rest wait, in order
                self._reports.transient(records[i:], error)
                return
            self._fail(r, error)

    def flush(self, deadline: float) -> bool:
        self._serve(0)
        while self._pending > 0:
            left = time_left(deadline)
            if left <= 0:
                return False
            self._serve(min(left, 0.2))
        return True


class QueuedSideWriter(AsyncSideWriter):
    """An :class:`AsyncSideWriter` whose client reports outcomes on a thread of its own (callbacks,
    futures): they only queue them (``_arrive``); ``_serve`` settles them on the caller's thread."""

    def __init__(self, topic: str, max_pending: int) -> None:
        super().__init__(topic, max_pending)
        self._outcome_queue = OutcomeQueue()

    def _arrive(self, record: ConnectRecord, error: BaseException | None) -> None:
        self._outcome_queue.put((record, error))

    def _serve(self, timeout: float) -> None:
        self._outcome_queue.wait(timeout)
        self._outcome_queue.drain(self._settle_item)

    def _settle_item(self, item: tuple) -> None:
        self._settled(*item)


def time_left(deadline: float) -> float:
    """Seconds until ``deadline`` (a ``time.monotonic()`` value), never negative."""
    return max(deadline - time.monotonic(), 0.0)


def writes_side_outputs(sink_connector_class: type) -> bool:
    """Whether the sink connector builds side writers (overrides ``SinkConnector.side_writer``)."""
    from connect.connector import SinkConnector

    own = getattr(sink_connector_class, "side_writer", None)
    return own is not None and getattr(own, "__func__", own) is not SinkConnector.side_writer.__func__


def side_output_issues(sink_connector_class: type, topics: Mapping[str, str]) -> list[ConfigIssue]:
    """An issue for each side output configured (``topics``: key -> topic, empty when unset) that
    the sink connector cannot write, saying what to do instead."""
    if writes_side_outputs(sink_connector_class):
        return []
    name = getattr(sink_connector_class, "__name__", str(sink_connector_class))
    issues = []
    for key, topic in topics.items():
        if not topic:
            continue
        if key == "errors.deadletterqueue.topic.name":
            instead = ("name the broker that keeps the dead letters with dlq.connector.class and its keys as dlq.* "
                       "(e.g. dlq.connector.class=kafka and dlq.bootstrap.servers), or remove the key and let the "
                       "source's failed-message hooks or errors.tolerance=all decide about refused records")
        else:
            instead = "remove it (offset syncs are written to the target cluster of a replication flow)"
        issues.append(ConfigIssue(key, None, (
            f"the sink connector {name} writes no side outputs (it defines no SinkConnector.side_writer): a "
            f"dead-letter or offset-syncs topic lives in a broker sink's cluster (kafka, pulsar, rocketmq), "
            f"written with that connector's own client and the dlq.* overrides; {instead}")))
    return issues


def side_output_config(sink_config: Mapping[str, Any], overrides: Mapping[str, Any], topic: str, *,
                       own_connector: bool = False) -> dict[str, Any]:
    """The keys a side writer of ``topic`` gets: the sink's keys with ``overrides`` (``dlq.*``) on
    top - or, when the ``dlq.*`` keys name a connector of their own (``dlq.connector.class``), those
    alone - and every record going to ``topic`` itself."""
    base = {} if own_connector else {k: v for k, v in sink_config.items() if k != "connector.class"}
    return {**base, **overrides, "topic": topic, "topic.template": "{topic}"}
