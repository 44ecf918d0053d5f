"""A source connector whose work is a set of (topic, partition) pairs: what the broker sources share.

``PartitionedSourceConnector`` lists the partitions at start (``_list_partitions``, written by each
broker's connector), divides them across tasks round robin, and re-lists them every
``refresh.topics.interval.ms`` in a background thread, asking the worker for new task configs
when they change (new topics, added partitions). Partitions found after the connector started are
marked so that their tasks read them from the earliest position, whatever ``start.position`` says
(they were created after the connector was told where to start, so all their data is new).

A connector may start with nothing to read (no topic matches yet, the named ones do not exist):
it then has no task pair, keeps looking, and says what it waits for (``waiting_for``), so status
and progress show "waiting for topics matching ..." instead of a silent 0.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Mapping

from connect.config import ConfigDef, Type, at_least, one_of
from connect.connector import SourceConnector
from connect.errors import ConfigIssue, ConnectError

__all__ = ["PartitionedSourceConnector", "parse_assignment", "topic_selection_issues", "source_keys", "ASSIGNMENT_KEY",
           "EARLIEST_KEY"]

log = logging.getLogger(__name__)

ASSIGNMENT_KEY = "task.assignment"  # "<topic><sep><partition>,..." written by the connector
EARLIEST_KEY = "task.assignment.earliest"  # partitions found after the connector started: begin at earliest


def parse_assignment(text: str, separator: str) -> list[tuple[str, int]]:
    """``task.assignment``'s pairs (the partition is after the last separator)."""
    out = []
    for item in text.split(","):
        if item.strip():
            topic, _, part = item.strip().rpartition(separator)
            out.append((topic, int(part)))
    return out


def source_keys(*, partitions: str, time_kind: str, refresh_ms: int, refresh_why: str = "",
                poll_batch: bool = True, batch_size: int = 1000, batch_why: str = "") -> ConfigDef:
    """The keys every broker source declares alike, declared once (each source merges them into its
    ConfigDef): ``start.position`` / ``start.timestamp.ms``, ``poll.timeout.ms``,
    ``refresh.topics.interval.ms`` and (unless the broker batches by pull instead)
    ``poll.batch.size``. Names and defaults are the ones users rely on; ``refresh_ms`` differs per
    broker, and ``refresh_why`` says why in its doc (``batch_size`` and ``batch_why`` likewise).
    ``partitions`` names the broker's unit (partitions, queues); ``time_kind`` what ``timestamp``
    compares (publish time, store time)."""
    keys = (
        ConfigDef()
        .define("start.position", Type.STRING, "earliest",
                f"Where {partitions} without a committed position start: earliest, latest or timestamp "
                f"({time_kind}).", validator=one_of("earliest", "latest", "timestamp"))
        .define("start.timestamp.ms", Type.LONG, -1, f"With start.position=timestamp: epoch milliseconds of {time_kind}.")
    )
    if poll_batch:
        keys.define("poll.batch.size", Type.INT, batch_size, "Most records per poll." + (f" {batch_why}" if batch_why else ""),
                    validator=at_least(1))
    return (keys
            .define("poll.timeout.ms", Type.INT, 100, "Longest a poll waits for records.", validator=at_least(1))
            .define("refresh.topics.interval.ms", Type.INT, refresh_ms,
                    f"How often the connector looks for new topics and {partitions}; 0 disables."
                    + (f" Default {refresh_ms // 1000} s: {refresh_why}" if refresh_why else ""),
                    validator=at_least(0)))


def topic_selection_issues(config: Mapping[str, Any]) -> list[ConfigIssue]:
    """``topics`` or ``topics.regex``, exactly one of them."""
    if not config.get("topics") and not config.get("topics.regex"):
        return [ConfigIssue("topics", None, "set topics (a list) or topics.regex")]
    if config.get("topics") and config.get("topics.regex"):
        return [ConfigIssue("topics.regex", config["topics.regex"], "set topics or topics.regex, not both")]
    return []


class PartitionedSourceConnector(SourceConnector):
    """Subclasses set ``separator`` (a character topic names cannot end with before the partition
    number), implement ``_list_partitions`` and call ``_start_watching`` from ``start``."""

    separator = ":"

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().validate(config) + topic_selection_issues(config)
        if str(config.get("start.position", "")).lower() == "timestamp":
            raw = config.get("start.timestamp.ms")
            if raw is None or not str(raw).strip().isdigit():
                issues.append(ConfigIssue("start.timestamp.ms", raw,
                                          "must be epoch milliseconds >= 0 when start.position=timestamp"))
        return issues

    # Connectors that list partitions through a pooled client (connect.clientpool.ClientPool)
    # set these two and get ``start``/``stop``: the parsed config in ``_cfg``, the client in ``_client``.
    client_pool = None
    client_key: Any = None  # staticmethod: parsed config -> the pool's key for its client

    def start(self, config: Mapping[str, Any]) -> None:
        super().start(config)
        if self.client_pool is None:
            return
        self._cfg = self.config_def().parse(config)
        self._client_key = self.client_key(self._cfg)
        self._client = self.client_pool.acquire(self._client_key)
        self._start_watching(self._cfg["refresh.topics.interval.ms"])

    def stop(self) -> None:
        self._stop_watching()
        if getattr(self, "_client", None) is not None:
            self.client_pool.release(self._client_key)
            self._client = None

    def _list_partitions(self) -> list[tuple[str, int]]:
        """Every (topic, partition) the connector reads now, sorted; RetriableError when the
        cluster cannot be asked."""
        raise NotImplementedError

    def _absent(self, topic: str, why: str) -> None:
        """``_list_partitions`` skips a named topic that does not exist (yet): it is read once it
        does. Logged when it goes missing, not at every refresh."""
        self._absent_now.add(topic)
        if topic not in self._absent_before:
            log.warning("%s: topic %s %s; it is read once it exists", type(self).__name__, topic, why)

    def _listed(self) -> list[tuple[str, int]]:
        self._absent_now: set[str] = set()
        try:
            return self._list_partitions()
        finally:
            self._absent_before = self._absent_now

    def _start_watching(self, interval_ms: int) -> None:
        self._lock = threading.Lock()
        self._interval_ms = interval_ms
        self._refresh_error: str | None = None
        self._absent_before: set[str] = set()
        self._initial: set[tuple[str, int]] | None = None
        self._partitions = self._listed()
        self._initial = set(self._partitions)
        self._stop = threading.Event()
        self._thread = None
        if interval_ms > 0:
            self._thread = threading.Thread(target=self._watch, args=(interval_ms / 1000,), daemon=True,
                                            name=f"{type(self).__name__}-topic-watch")
            self._thread.start()

    def _watch(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                current = self._listed()
            except ConnectError as exc:
                log.warning("topic refresh failed: %s", exc)
                with self._lock:
                    self._refresh_error = str(exc)
                continue
            with self._lock:
                changed = current != self._partitions
                self._partitions = current
                self._refresh_error = None
            if changed and self.context is not None:
                log.info("%s: source partitions changed (%d now); requesting task reconfiguration",
                         type(self).__name__, len(current))
                self.context.request_task_reconfiguration()

    def waiting_for(self) -> str | None:
        """While no partition is there to read: what the connector waits for; else None."""
        lock = getattr(self, "_lock", None)
        if lock is None:
            return None
        with lock:
            if self._partitions:
                return None
            error = self._refresh_error
        regex = self.config.get("topics.regex")
        what = f"topics matching '{regex}'" if regex else f"topic(s) '{self.config.get('topics')}' to exist"
        if not self._interval_ms:
            return f"nothing to read, and refresh.topics.interval.ms=0 never looks again for {what}: " \
                   "restart the connector once they exist"
        text = f"waiting for {what} (looking every {self._interval_ms / 1000:g} s)"
        return f"{text}; the last look failed: {error}" if error else text

    def source_topics(self) -> dict[str, int]:
        with self._lock:
            partitions = list(self._partitions)
        counts: dict[str, int] = {}
        for topic, part in partitions:
            counts[topic] = max(counts.get(topic, 0), part + 1)
        return counts

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        with self._lock:
            partitions = list(self._partitions)
        if not partitions:
            return []
        groups = [partitions[i::max_tasks] for i in range(min(max_tasks, len(partitions)))]
        initial = self._initial or set()
        sep = self.separator
        return [{**self.config,
                 ASSIGNMENT_KEY: ",".join(f"{t}{sep}{p}" for t, p in group),
                 EARLIEST_KEY: ",".join(f"{t}{sep}{p}" for t, p in group if (t, p) not in initial)}
                for group in groups]

    def _stop_watching(self) -> None:
        if getattr(self, "_thread", None) is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None
