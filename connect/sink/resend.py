"""The in-order re-send rule, once for every asynchronous sink and side writer.

The runner re-sends what a sink reports transient (:mod:`connect.sink`), in the order the reports
come, and a record a put never handed to its client (:class:`~connect.errors.NotSentError`) only
once every record put before it has an outcome, behind those of them that failed. What a sink must
do for per-partition order to survive a failure is therefore small, and :class:`InOrderReports`
does it:

- **Sent and failed transiently** while the client may still send records put after it (librdkafka
  after a timed-out message, a Pulsar producer after a failed send): :meth:`InOrderReports.hold` it,
  *abandon* the client (purge or close it: everything it still holds fails back and is held too),
  then :meth:`InOrderReports.report_held` reports them all in put order (each held with its place
  in put order: a purge or a close reports in no useful order).
- **Never handed to the client** (no room until the deadline, a target that cannot be looked up, a
  put that comes after an abandonment, the rest of a batch behind a refused record):
  :meth:`InOrderReports.not_sent`. The sink needs no abandonment for them: the runner keeps them
  behind every earlier record.
- **Sent and failed, nothing later sent behind it** (a queue the sink holds itself, as the RocketMQ
  sink's lanes): :meth:`InOrderReports.transient`.

So writing an asynchronous sink is: a send that binds each record to its callback, a callback that
queues its outcome (:class:`connect.sink.outcomes.OutcomeQueue`), and these reports.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Sequence

from connect.errors import NotSentError
from connect.records import ConnectRecord

__all__ = ["InOrderReports"]

_ORDER = operator.itemgetter(0)


class InOrderReports:
    """Transient failures reported so that the runner re-sends them in put order. ``report`` is
    where a failure goes: a sink task's ``context.errant_record_reporter.report``, a side writer's
    ``_fail``."""

    __slots__ = ("_report", "_held")

    def __init__(self, report: Callable[[ConnectRecord, BaseException], Any]) -> None:
        self._report = report
        self._held: list[tuple[Any, ConnectRecord, BaseException, Any]] = []

    def hold(self, order: Any, record: ConnectRecord, error: BaseException, token: Any = None) -> None:
        """A transient failure of a record sent at ``order`` (anything that sorts in put order),
        kept until the client is abandoned; ``token`` is handed back by :meth:`report_held`."""
        self._held.append((order, record, error, token))

    def __len__(self) -> int:
        """How many failures are held."""
        return len(self._held)

    def report_held(self) -> list[Any]:
        """Report every held failure, in put order (call once the client was abandoned: nothing it
        held can still land after them); their tokens, in that order."""
        held, self._held = self._held, []
        held.sort(key=_ORDER)
        report = self._report
        for _order, record, error, _token in held:
            report(record, error)
        return [token for _o, _r, _e, token in held]

    def transient(self, records: Sequence[ConnectRecord], error: BaseException) -> None:
        """``records``, sent and failed with nothing sent behind them: reported now, in order."""
        report = self._report
        for r in records:
            report(r, error)

    def not_sent(self, records: Sequence[ConnectRecord], why: str, *, backpressure: bool = False) -> None:
        """``records`` were never handed to the client: reported with one
        :class:`~connect.errors.NotSentError` (``backpressure``: only no room until the deadline,
        which does not count as a failing delivery)."""
        if records:
            self.transient(records, NotSentError(why, backpressure=backpressure))
