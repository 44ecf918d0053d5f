"""RocketMQ source: the queues of the configured topics, divided across tasks, pulled by explicit
offset with this project's client.

- Topics: ``topics`` in the replicator's form ``topic[,tagExpression];topic2[,tagExpression]``
  (RIP-45's ``connect-topicname``), e.g. ``orders,TagA || TagB;audit`` (no expression: every
  tag); or ``topics.regex`` over the name server's topic list with ``topics.tags`` as the
  expression. RocketMQ's own topics are matched only when the regex spells out their prefix
  (:mod:`connectors.rocketmq.system`: ``orders.*|rmq_sys_replicator_heartbeat`` reads the
  replicator's heartbeats, ``.*`` no system topic). Topics and queues that appear later (a named
  topic created, a queue count grown) are read from their first message, within
  ``refresh.topics.interval.ms`` (:mod:`connect.source.partitioned`).
- Each queue (topic, broker, queue id) is a source partition ``{"topic", "broker", "queue"}``;
  the offset of a record is its queue offset ``{"offset": n}`` and a restart resumes after the
  last committed one. Offsets are framework-managed (committed only once the sink acknowledged,
  per queue the smallest unacknowledged offset - 1, as rocketmq-replicator commits the smallest
  unacknowledged offset). With ``consumer.group`` set, the committed positions are also written to
  the source broker as that group's consumer offsets (the next offset to read, RocketMQ's
  convention), after the framework persisted them, so ``mqadmin consumerProgress`` and lag
  monitors see the progress; the group is never read back (the framework's store is the truth).
- Starts (queues without a committed offset): ``earliest`` (the queue's min offset), ``latest``
  (its max offset) or ``timestamp`` (the first message stored at or after ``start.timestamp.ms``,
  found by the broker's SEARCH_OFFSET_BY_TIMESTAMP). The start is persisted before the first record,
  so a restart never resolves it again.
- Every queue has one pull in flight (pipelined across queues, prefetching across polls; the broker
  holds a pull on a queue with nothing new up to ``pull.suspend.ms``, RocketMQ's long polling). A
  poll returns at most ``context.poll_limit`` records; what a pull brought beyond it is kept on its
  queue and returned first, and the queue is pulled again once it is gone. A queue whose offset the
  broker reports as moved (retention deleted what was next) is a gap (``connect.source.gaps``):
  under ``source.gap.policy=fail`` the pair fails naming the queue and the offset range, under
  ``report`` it continues at the broker's offset and the gap is recorded. A queue resumed from a
  committed offset is checked against its min offset likewise (OFFSET_TOO_SMALL), and resumes at its
  max offset when the committed one is beyond it (OFFSET_OVERFLOW: nothing the broker holds is skipped).
- Tags are filtered by the broker (hash codes) and again here by the tag itself, as RocketMQ's
  clients do. Records carry what :mod:`connectors.rocketmq.mapping` says.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from typing import Any, Mapping, Sequence

import orjson

from connect import patterns
from connect.config import ConfigDef, Importance, Type, at_least, valid_regex
from connect.errors import ConfigIssue, ConnectError, RetriableError
from connect.records import ConnectRecord, make_record, partition_key
from connect.source import SourceTask
from connect.source.gaps import FAIL, GAP_POLICY_KEY, LOG_START, SourceGap, SourceGapError, gap_keys
from connect.source.partitioned import (
    ASSIGNMENT_KEY,
    EARLIEST_KEY,
    PartitionedSourceConnector,
    parse_assignment,
    source_keys,
)
from connectors.rocketmq.clients import CLIENT_CONFIG, CLIENTS, client_issues, client_settings
from connectors.rocketmq.mapping import record_fields
from connectors.rocketmq.names import topic_problem
from connectors.rocketmq.system import regex_selects, reserved_names

__all__ = ["RocketMQSourceConnector", "RocketMQSourceTask", "parse_topics"]

log = logging.getLogger(__name__)

_QUEUE_SEP = "@"  # "<topic>@<broker>" in assignments: neither topic nor broker names hold it
CONFIG = CLIENT_CONFIG.merge(
    ConfigDef()
    .define("topics", Type.STRING, "", "Topics and optional tag expressions: 'topic[,tagExpr];topic2[,tagExpr]' "
            "(the replicator's form), e.g. 'orders,TagA || TagB;audit'.", importance=Importance.HIGH)
    .define("topics.regex", Type.STRING, "", "Regex (full match) of topic names from the name server's topic list.",
            validator=valid_regex)
    .define("topics.tags", Type.STRING, "*", "With topics.regex: the tag expression of every matched topic.")
    .define("consumer.group", Type.STRING, "", "If set, committed positions are also written to the source broker "
            "as this group's consumer offsets (for monitoring tools); empty: not written.")
    .define("pull.batch.size", Type.INT, 512, "Most messages one pull asks for.", validator=at_least(1))
    .define("pull.suspend.ms", Type.INT, 1000, "How long the broker holds a pull on a queue with nothing new "
            "(long polling).", validator=at_least(0))
    .merge(gap_keys())
    .merge(source_keys(partitions="queues", time_kind="store time", refresh_ms=30_000, poll_batch=False,
                       refresh_why="a listing reads the name server's topic list and every topic's route, as "
                       "RocketMQ's own clients poll the name server every 30 s."))
)


def parse_topics(text: str) -> dict[str, str]:
    """``topic[,tagExpr];...`` -> {topic: tag expression ('*' when none)}; ValueError naming the
    entry that is wrong."""
    out: dict[str, str] = {}
    for n, entry in enumerate(text.split(";")):
        if not entry.strip():
            continue
        topic, _, tags = entry.partition(",")
        topic = topic.strip()
        problem = topic_problem(topic, sending=False)
        if problem:
            raise ValueError(f"entry {n} ({entry.strip()!r}): {topic!r} is not a RocketMQ topic name: {problem}")
        out[topic] = tags.strip() or "*"
    return out


def _tag_set(expression: str) -> frozenset[str] | None:
    tags = [t.strip() for t in expression.split("||") if t.strip()]
    return None if not tags or "*" in tags else frozenset(tags)


class RocketMQSourceConnector(PartitionedSourceConnector):
    separator = ":"

    client_pool = CLIENTS
    client_key = staticmethod(client_settings)

    @classmethod
    def config_def(cls) -> ConfigDef:
        return CONFIG

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().validate(config) + client_issues(config)
        if config.get("topics"):
            try:
                parse_topics(str(config["topics"]))
            except ValueError as exc:
                issues.append(ConfigIssue("topics", config["topics"], str(exc)))
        return issues

    @classmethod
    def task_class(cls) -> type:
        return RocketMQSourceTask

    @classmethod
    def named_topics(cls, config: Mapping[str, Any]) -> list[str] | None:
        try:
            return list(parse_topics(str(config.get("topics") or ""))) or None
        except ValueError:
            return None  # validate says why

    def _topics(self) -> list[str]:
        if self._cfg["topics"]:
            return sorted(parse_topics(self._cfg["topics"]))
        try:
            names = self._client.topic_list()
            reserved = reserved_names(self._client.cluster_info())
        except ConnectError as exc:
            raise RetriableError(f"cannot list the topics of {self._cfg['namesrv.addr']}: {exc}") from exc
        pattern = patterns.compile(self._cfg["topics.regex"])
        return sorted(t for t in names if regex_selects(pattern, t, reserved))

    def _list_partitions(self) -> list[tuple[str, int]]:
        from connectors.rocketmq.remoting import TopicNotFoundError

        out = []
        for topic in self._topics():
            try:
                route = self._client.topic_route(topic)
            except TopicNotFoundError:
                self._absent(topic, "has no route yet")
                continue
            except ConnectError as exc:
                raise RetriableError(f"cannot look up the route of {topic}: {exc}") from exc
            out.extend((f"{mq.topic}{_QUEUE_SEP}{mq.broker_name}", mq.queue_id) for mq in route.read_queues())
        return sorted(out)

    def committed_lag(self, committed: Mapping[str, Mapping[str, Any]]) -> dict[str, int] | None:
        """The queue's max offset - (committed offset + 1) per queue, asked of its master broker."""
        out: dict[str, int] = {}
        masters: dict[str, dict[str, str]] = {}
        try:
            for key, offset in committed.items():
                part = orjson.loads(key)
                if not offset or not isinstance(part, dict) or {"topic", "broker", "queue"} - part.keys():
                    continue
                topic = part["topic"]
                if topic not in masters:
                    route = self._client.topic_route(topic)
                    masters[topic] = {b.broker_name: b.master_addr for b in route.broker_datas if b.master_addr}
                addr = masters[topic].get(part["broker"])
                if addr is not None:
                    top = self._client.max_offset(addr, topic, int(part["queue"]))
                    out[key] = max(top - (int(offset["offset"]) + 1), 0)
        except ConnectError as exc:
            log.debug("lag of %s: %s", self._cfg["namesrv.addr"], exc)
            return None
        return out

    def source_topics(self) -> dict[str, int]:
        """Queue counts per topic (the largest queue id + 1 over its brokers)."""
        counts: dict[str, int] = {}
        for name, queues in super().source_topics().items():
            topic = name.rpartition(_QUEUE_SEP)[0]
            counts[topic] = max(counts.get(topic, 0), queues)
        return counts



class _Queue:
    __slots__ = ("sp", "key", "topic", "broker", "queue", "tags", "filter", "next", "pull", "retry_at", "top", "left")

    def __init__(self, topic: str, broker: str, queue: int, tags: str) -> None:
        self.sp = {"topic": topic, "broker": broker, "queue": queue}
        self.key = partition_key(self.sp)
        self.topic, self.broker, self.queue = topic, broker, queue
        self.tags = tags  # the expression sent to the broker
        self.filter = _tag_set(tags)  # the tags kept here (None: all)
        self.next = 0  # the next offset to pull
        self.pull: concurrent.futures.Future | None = None
        self.retry_at = 0.0
        self.top = 0  # the queue's max offset, as the last pull saw it
        self.left: list[ConnectRecord] = []  # records a pull brought beyond a poll's limit, returned first

    def position(self) -> int:
        """The offset of the next record to return (what the lag counts from)."""
        return self.left[0].source_offset["offset"] if self.left else self.next


class RocketMQSourceTask(SourceTask):
    def start(self, config: Mapping[str, Any], context) -> None:
        cfg = CONFIG.parse(config)
        self.context = context
        self._cfg = cfg
        self._settings = client_settings(cfg)
        self._client = CLIENTS.acquire(self._settings)
        self._timeout_ms = cfg["poll.timeout.ms"]
        self._group = cfg["consumer.group"] or "connect-source"
        tags = parse_topics(cfg["topics"]) if cfg["topics"] else {}
        assignment = parse_assignment(config.get(ASSIGNMENT_KEY, ""), RocketMQSourceConnector.separator)
        discovered = set(parse_assignment(config.get(EARLIEST_KEY, ""), RocketMQSourceConnector.separator))
        self._queues: list[_Queue] = []
        self._start_offsets: dict[str, dict] = {}
        self._brokers: dict[str, str] = {}  # broker name -> master address
        self._gaps: list[SourceGap] = []
        self._gap_error: SourceGapError | None = None
        reader = context.offset_storage_reader
        for name, queue_id in assignment:
            topic, _, broker = name.rpartition(_QUEUE_SEP)
            q = _Queue(topic, broker, queue_id, tags.get(topic, cfg["topics.tags"]))
            committed = reader.offset(q.sp)
            if committed is not None:
                q.next = self._resumed(q, int(committed["offset"]) + 1)
            else:
                q.next = self._start(q, (name, queue_id) in discovered)
                self._start_offsets[q.key] = {"offset": q.next - 1}
            self._queues.append(q)
        self._by_key = {q.key: q for q in self._queues}
        self._committed_to_broker: dict[str, int] = {}

    def _address(self, broker: str, topic: str) -> str:
        addr = self._brokers.get(broker)
        if addr is None:
            try:
                route = self._client.topic_route(topic)
            except ConnectError as exc:
                raise RetriableError(f"cannot look up the route of {topic}: {exc}") from exc
            for b in route.broker_datas:
                if b.master_addr:
                    self._brokers[b.broker_name] = b.master_addr
            addr = self._brokers.get(broker)
            if addr is None:
                raise RetriableError(f"broker {broker} of topic {topic} has no master in the route")
        return addr

    def _start(self, q: _Queue, discovered_late: bool) -> int:
        cfg = self._cfg
        addr = self._address(q.broker, q.topic)
        try:
            if cfg["start.position"] == "latest" and not discovered_late:
                return self._client.max_offset(addr, q.topic, q.queue)
            if cfg["start.position"] == "timestamp" and not discovered_late:
                return self._client.search_offset(addr, q.topic, q.queue, cfg["start.timestamp.ms"])
            return self._client.min_offset(addr, q.topic, q.queue)
        except ConnectError as exc:
            raise RetriableError(f"cannot find where {q.topic}[{q.broker}:{q.queue}] starts: {exc}") from exc

    def start_offsets(self) -> dict[str, dict]:
        return self._start_offsets

    # -- gaps (connect.source.gaps) -------------------------------------------------------------------
    def _resumed(self, q: _Queue, position: int) -> int:
        """Where a queue resumed at ``position`` really starts: its min offset past a gap (report),
        its max offset when the position is beyond it (the queue was emptied or re-created smaller)."""
        addr = self._address(q.broker, q.topic)
        try:
            low = self._client.min_offset(addr, q.topic, q.queue)
            high = self._client.max_offset(addr, q.topic, q.queue)
        except ConnectError as exc:
            raise RetriableError(f"cannot read the offsets of {q.topic}[{q.broker}:{q.queue}]: {exc}") from exc
        if position < low:
            self._gap(q, position, low)
            return position if self._gap_error is not None else low
        if position > high:
            log.warning("%s[%s:%d]: the committed position %d is beyond the queue's max offset %d (OFFSET_OVERFLOW); "
                        "resuming there (no message the broker holds is skipped)", q.topic, q.broker, q.queue,
                        position, high)
            return high
        return position

    def _gap(self, q: _Queue, first: int, resume_at: int) -> None:
        gap = SourceGap(q.topic, f"{q.broker}:{q.queue}", first, resume_at - 1, resume_at - first, LOG_START,
                        self._cfg[GAP_POLICY_KEY], {q.key: {"offset": resume_at - 1}})
        self._gaps.append(gap)
        if gap.policy == FAIL and self._gap_error is None:
            self._gap_error = SourceGapError(gap)

    def _skipped_gone(self, q: _Queue, result) -> bool:
        """A pull that moves the queue on without messages: past what the broker removed (below its
        min offset, or - with no tag filter, so nothing was filtered out - past commit log that was
        being deleted, MESSAGE_WAS_REMOVING answered as PULL_RETRY_IMMEDIATELY) is a gap. True when
        the pair stops at it (fail)."""
        if q.next < result.min_offset:
            end = min(result.next_begin_offset, result.min_offset)
        elif q.filter is None and result.status == "NO_MATCHED_MSG":
            end = result.next_begin_offset
        else:
            return False
        self._gap(q, q.next, end)
        if self._gap_error is not None:
            q.retry_at = float("inf")
            return True
        return False

    def take_gaps(self) -> list[SourceGap]:
        gaps, self._gaps = self._gaps, []
        return gaps

    # -- reading ------------------------------------------------------------------------------------
    def _issue(self, q: _Queue) -> None:
        try:
            addr = self._address(q.broker, q.topic)
        except RetriableError as exc:
            log.warning("%s; retrying", exc)
            q.retry_at = time.monotonic() + 1.0
            return
        q.pull = self._client.submit(self._client.client.pull(
            addr, self._group, q.topic, q.queue, q.next, self._cfg["pull.batch.size"],
            suspend_timeout=self._cfg["pull.suspend.ms"] / 1000, subscription=q.tags, broker_name=q.broker))

    def poll(self) -> Sequence[ConnectRecord]:
        """What the pulls brought, at most ``context.poll_limit`` records (the runner's budget left:
        epoch, in flight); a pull's records beyond it are kept on its queue and returned first, and
        the queue is pulled again only once they are gone."""
        out: list[ConnectRecord] = []
        if self._gap_error is not None:
            raise self._gap_error  # source.gap.policy=fail: nothing is read past a gap until it is acknowledged
        most = self.context.poll_limit
        if most <= 0:
            return out
        now = time.monotonic()
        for q in self._queues:
            if q.left:
                self._give(q, out, most)
            elif q.pull is None and q.retry_at <= now:
                self._issue(q)
        if not out:  # nothing kept: wait for a pull
            pending = [q.pull for q in self._queues if q.pull is not None]
            if not pending:
                time.sleep(min(self._timeout_ms / 1000, self.context.time_left()))
                return []
            wait = min(self._timeout_ms / 1000, self.context.time_left())
            concurrent.futures.wait(pending, timeout=wait, return_when=concurrent.futures.FIRST_COMPLETED)
        for q in self._queues:
            if len(out) >= most:
                break
            if q.pull is not None and q.pull.done():
                fut, q.pull = q.pull, None
                self._take(q, fut, out)
                if len(out) > most:
                    q.left = out[most:]
                    del out[most:]
        return out

    @staticmethod
    def _give(q: _Queue, out: list, most: int) -> None:
        room = most - len(out)
        if room > 0:
            out.extend(q.left[:room])
            del q.left[:room]

    def _take(self, q: _Queue, fut: concurrent.futures.Future, out: list) -> None:
        where = f"{q.topic}[{q.broker}:{q.queue}]"
        try:
            result = fut.result()
        except RetriableError as exc:
            log.warning("pull of %s at %d failed, retrying in 1 s: %s", where, q.next, exc)
            q.retry_at = time.monotonic() + 1.0
            return
        except ConnectError as exc:
            raise ConnectError(f"pull of {where} at {q.next} failed: {exc}") from exc
        q.top = result.max_offset
        if result.status == "OFFSET_ILLEGAL":  # PULL_OFFSET_MOVED
            if result.next_begin_offset > q.next:
                self._gap(q, q.next, result.next_begin_offset)
                if self._gap_error is not None:
                    q.retry_at = float("inf")  # stopped at the gap: the next poll raises
                    return
            q.next = result.next_begin_offset
            return
        if result.status != "FOUND":
            if result.next_begin_offset > q.next and self._skipped_gone(q, result):
                return
            q.next = max(q.next, result.next_begin_offset)
            return
        keep = q.filter
        if keep is None and result.messages and result.messages[0].queue_offset > q.next:
            # no tag filter, so nothing was filtered out: the messages before the first one found were
            # removed from the commit log while the pull read (MESSAGE_WAS_REMOVING entries are skipped)
            self._gap(q, q.next, result.messages[0].queue_offset)
            if self._gap_error is not None:
                q.retry_at = float("inf")
                return
        sp, topic, hint = q.sp, q.topic, q.queue
        record = make_record
        append = out.append
        for m in result.messages:
            if keep is not None and m.tags not in keep:
                continue
            key, value, headers, timestamp = record_fields(m)
            append(record(topic, key, value, headers, timestamp, sp, {"offset": m.queue_offset}, hint))
        q.next = result.next_begin_offset

    def lag(self) -> int | None:
        return sum(max(q.top - q.position(), 0) for q in self._queues)

    def lag_by_partition(self) -> dict[str, int]:
        return {key: max(q.top - q.position(), 0) for key, q in self._by_key.items()}

    # -- progress on the source broker ----------------------------------------------------------------
    def offsets_committed(self, offsets: Mapping[str, Mapping[str, Any]]) -> None:
        """The framework persisted these offsets: with ``consumer.group``, write them to the source
        broker as that group's consumer offsets (the next offset to read)."""
        if not self._cfg["consumer.group"]:
            return
        for key, offset in offsets.items():
            q = self._by_key.get(key)
            if q is None or offset is None:
                continue
            position = int(offset["offset"]) + 1
            if self._committed_to_broker.get(key) == position:
                continue
            try:
                self._client.submit(self._client.client.update_consumer_offset(
                    self._address(q.broker, q.topic), self._cfg["consumer.group"], q.topic, q.queue, position))
                self._committed_to_broker[key] = position
            except ConnectError as exc:  # progress for tools only: the next commit writes it again
                log.warning("cannot write %s's offset of %s[%d] to the broker: %s", self._cfg["consumer.group"],
                            q.topic, q.queue, exc)

    def stop(self) -> None:
        for q in getattr(self, "_queues", []):
            if q.pull is not None:
                q.pull.cancel()
                q.pull = None
            q.left = []
        if getattr(self, "_client", None) is not None:
            CLIENTS.release(self._settings)
            self._client = None
