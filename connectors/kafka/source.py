"""Kafka source: topics by list or regex, partitions divided across tasks and assigned explicitly.

Offsets are framework-managed, as in MirrorMaker 2's MirrorSourceTask: the consumer never joins a
group nor commits; each task ``assign``s its partitions at the committed offset + 1. A partition
without a committed offset starts at ``start.position`` (earliest, latest or the first record at
or after ``start.timestamp.ms``) - except partitions discovered after the connector started,
which start at earliest so nothing written to a new topic is missed. Start positions are resolved
to concrete offsets and persisted before the first record moves, so a restart never resolves
them again.

Every record keeps key, value, headers and timestamp, carries
``source_partition={"topic", "partition"}`` and ``source_offset={"offset"}``, and hints its own
partition number to the sink (``ConnectRecord.partition``).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping, Sequence

import orjson
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from connect import patterns
from connect.batch import NativeBatch
from connect.config import ConfigDef, Importance, Type, non_empty, valid_regex
from connect.errors import ConnectError, RetriableError
from connect.records import ConnectRecord, make_record, partition_key
from connect.source import SourceTask
from connect.source.gaps import FAIL, GAP_POLICY_KEY, SourceGap, SourceGapError, gap_keys
from connect.source.partitioned import (
    ASSIGNMENT_KEY,
    EARLIEST_KEY,
    PartitionedSourceConnector,
    parse_assignment,
    source_keys,
)
from connectors.kafka.clients import POOL, client_config
from connectors.kafka.gaps import GapCheck, identity_key, known_ids, log_gap
from connectors.kafka.mm2offsets import MM2_TAKEOVER_CONFIG, takeover_offsets
from connectors.kafka.native import KIND, KafkaCodec
from connectors.kafka.shared import SHARED

__all__ = ["KafkaSourceConnector", "KafkaSourceTask"]

log = logging.getLogger(__name__)

# A task taking more than this many records/s through a shared consumer (over a quarter of a second:
# a backlog shows at once) gets a consumer of its own.
OWN_CONSUMER_RATE = 2000
TIMESTAMP_FLOOR = "start.timestamp.ms"  # in a persisted start offset: drop older records until one is not

CONFIG = (
    ConfigDef()
    .define("bootstrap.servers", Type.STRING, doc="Source cluster bootstrap servers, host:port[,host:port].",
            importance=Importance.HIGH, validator=non_empty)
    .define("topics", Type.LIST, [], "Topics to read (comma-separated); or use topics.regex.",
            importance=Importance.HIGH)
    .define("topics.regex", Type.STRING, "", "Regex of topics to read (full match).", validator=valid_regex)
    .define("topics.exclude", Type.STRING, r"__.*|.*\.internal", "Regex of topics topics.regex never picks (full "
            "match); a topic named in topics is read as named.", validator=valid_regex)
    .merge(source_keys(partitions="partitions", time_kind="record timestamp", refresh_ms=10_000,
                       refresh_why="a metadata request to one broker lists every topic and partition, cheaply.",
                       batch_size=5000,
                       batch_why="A poll returns what has been fetched at once, so a larger batch waits for "
                                 "nothing; 5,000 (the raw loop's) spends 6% less CPU per record than 1,000 "
                                 "(bench/e2e.py --only cpu) and its p99 at 20,000 msg/s was lower."))
    .merge(gap_keys())
    .define("consumer.shared", Type.BOOLEAN, True,
            "Read through one consumer per worker process and consumer settings, shared by the source "
            "tasks the process hosts: one fetch request per broker for all of them instead of one per task "
            "(see connectors.kafka.shared). false: a consumer of the task's own, as Kafka Connect does.")
    .define_prefix("client.override.", "librdkafka settings for every client of the connector (e.g. security).")
    .define_prefix("consumer.override.", "librdkafka settings for the consumers only.")
    .define_prefix("admin.override.", "librdkafka settings for the admin client only.")
    .merge(MM2_TAKEOVER_CONFIG)
)

CONSUMER_DEFAULTS = {
    # A position the log no longer holds (retention, DeleteRecords, a re-created topic) is an error the
    # task sees (a gap, connectors.kafka.gaps), never a silent jump to the earliest record left.
    "auto.offset.reset": "error",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
    "queued.max.messages.kbytes": 32768,
    "fetch.wait.max.ms": 100,
    # librdkafka postpones fetching a partition whose local queue is over its thresholds by this
    # much (default 1000 ms): a consumer that keeps up then waits for data in bursts. Measured with
    # bench/e2e.py (1 pair, tansu): 10 ms took the pair from ~130k to 170-240k msg/s.
    "fetch.queue.backoff.ms": 10,
}


class KafkaSourceConnector(PartitionedSourceConnector):
    separator = ":"

    @classmethod
    def config_def(cls) -> ConfigDef:
        return CONFIG

    @classmethod
    def task_class(cls) -> type:
        return KafkaSourceTask

    @classmethod
    def named_topics(cls, config: Mapping[str, Any]) -> list[str] | None:
        if CONFIG.validate(config):
            return None
        cfg = CONFIG.parse(config)
        return list(cfg["topics"]) or None  # read as named: topics.exclude filters topics.regex only

    def start(self, config: Mapping[str, Any]) -> None:
        super().start(config)
        self._cfg = CONFIG.parse(config)
        self._admin = POOL.acquire("admin", "connector", client_config(config, "admin"))
        self._start_watching(self._cfg["refresh.topics.interval.ms"])

    def _matches(self, topic: str) -> bool:
        # A named topic is read whatever topics.exclude says: the exclusion keeps internal topics
        # out of what a regex picks up, it must not drop a topic named on purpose (the README's
        # offset-syncs topic, "offset-syncs.A.internal", was never read by the checkpoint connector).
        if self._cfg["topics"]:
            return topic in self._cfg["topics"]
        if patterns.fullmatch(self._cfg["topics.exclude"], topic):
            return False
        return patterns.fullmatch(self._cfg["topics.regex"], topic)

    def _list_partitions(self) -> list[tuple[str, int]]:
        try:
            metadata = self._admin.list_topics(timeout=10)
        except KafkaException as exc:
            raise RetriableError(f"cannot list topics on {self.config['bootstrap.servers']}: {exc}") from exc
        return sorted((t, p) for t, md in metadata.topics.items() if md.error is None and self._matches(t)
                      for p in md.partitions)

    def committed_lag(self, committed: Mapping[str, Mapping[str, Any]]) -> dict[str, int] | None:
        """High watermark - (committed offset + 1) per partition; a lower bound on brokers whose
        watermarks lag (tansu reports the base offset of the last batch + 1)."""
        wanted = {}
        for key, offset in committed.items():
            part = orjson.loads(key)
            if offset and isinstance(part, dict) and {"topic", "partition"} <= part.keys() and "offset" in offset:
                wanted[TopicPartition(part["topic"], int(part["partition"]))] = (key, int(offset["offset"]) + 1)
        if not wanted:
            return {}
        try:
            ends = self._admin.list_offsets({tp: OffsetSpec.latest() for tp in wanted}, request_timeout=5)
            return {wanted[tp][0]: max(future.result().offset - wanted[tp][1], 0) for tp, future in ends.items()}
        except (KafkaException, ValueError) as exc:
            log.debug("lag of %s: %s", self.config.get("bootstrap.servers"), exc)
            return None

    def stop(self) -> None:
        self._stop_watching()
        if getattr(self, "_admin", None) is not None:
            POOL.release("admin", "connector", client_config(self.config, "admin"), self._admin)
            self._admin = None


class KafkaSourceTask(SourceTask):
    native_kind = KIND

    def start(self, config: Mapping[str, Any], context) -> None:
        cfg = CONFIG.parse(config)
        self.context = context
        self._batch = cfg["poll.batch.size"]
        self._timeout = cfg["poll.timeout.ms"] / 1000
        self._conf = client_config(config, "consumer", {**CONSUMER_DEFAULTS, "group.id": f"connect-{context.task_id}"})
        self._owner = context.task_id
        assignment = parse_assignment(config.get(ASSIGNMENT_KEY, ""), KafkaSourceConnector.separator)
        earliest = set(parse_assignment(config.get(EARLIEST_KEY, ""), KafkaSourceConnector.separator))
        self._sp: dict[str, dict[int, dict]] = {}
        for topic, part in assignment:
            self._sp.setdefault(topic, {})[part] = {"topic": topic, "partition": part}
        self._sub = None  # the task's partitions on a shared consumer (consumer.shared)
        self._taken, self._since = 0, time.monotonic()  # records taken through it since (its rate)
        self._shared = SHARED.get(self._conf, assignment) if cfg["consumer.shared"] else None
        # shared: every call under the fetch lock (see connectors.kafka.shared)
        self._consumer = (self._shared.locked if self._shared is not None
                          else POOL.acquire("consumer", self._owner, self._conf))
        self._ts_floor: dict[tuple[str, int], int] = {}
        self._start_offsets: dict[str, dict] = {}
        self._deferred_error: ConnectError | None = None
        self._gap_policy = cfg[GAP_POLICY_KEY]
        self._gaps: list[SourceGap] = []
        self._seen_ids: dict[str, str] = {}  # topic IDs checked while running
        self._admin_conf = client_config(config, "admin")
        reader = context.offset_storage_reader
        tps, by_time, resumed = [], [], []
        mm2 = takeover_offsets(config, [tp for tp in assignment if reader.offset(self._sp[tp[0]][tp[1]]) is None])
        for topic, part in assignment:
            committed = reader.offset(self._sp[topic][part])
            if committed is None and (topic, part) in mm2:  # where MirrorMaker 2 stopped (mm2.offsets.topic)
                resumed.append((topic, part, mm2[(topic, part)]))  # checked for gaps like our own offsets
            elif committed is not None:
                resumed.append((topic, part, int(committed["offset"]) + 1))
                if TIMESTAMP_FLOOR in committed:  # resumed from a persisted timestamp start
                    self._ts_floor[(topic, part)] = int(committed[TIMESTAMP_FLOOR])
            elif (topic, part) in earliest or cfg["start.position"] == "earliest":
                tps.append(self._resolved(TopicPartition(topic, part, self._watermark(topic, part, 0))))
            elif cfg["start.position"] == "latest":
                tps.append(self._resolved(TopicPartition(topic, part, self._watermark(topic, part, 1))))
            else:
                by_time.append(TopicPartition(topic, part, cfg["start.timestamp.ms"]))
        if by_time:
            tps.extend(self._offsets_for_times(by_time, cfg["start.timestamp.ms"]))
        tps.extend(self._check_resumed(resumed, {t for t, _ in assignment}))
        self._assigned = [TopicPartition(t, p) for t, p in assignment]
        if self._shared is not None:
            # paused at this many records waiting for the task: at most 1,000 per idle task
            self._sub = self._shared.subscribe(tps, max(min(self._batch, 1000), 100))
        else:
            self._consumer.assign(tps)
        # native batches (``connectors.kafka.native``) when the runner allows them
        self._codec = KafkaCodec(self._sp) if context.native_batches and self._sp else None

    def _check_resumed(self, resumed: list[tuple[str, int, int]], topics: set[str]) -> list[TopicPartition]:
        """Where resumed partitions really start: past a gap under ``report``; the topics' identities
        remembered (persisted with the start offsets where none was yet)."""
        reader = self.context.offset_storage_reader
        known = known_ids(reader.offsets_by_key([identity_key(t) for t in topics]), topics)
        admin = POOL.acquire("admin", self._owner, self._admin_conf)
        try:
            check = GapCheck(admin, self._gap_policy)
            if resumed:
                positions, gaps, ids = check.check(resumed, known, self._keys())
            else:
                positions, gaps, ids = [], [], check.topic_ids(t for t, k in known.items() if k is None)
        finally:
            POOL.release("admin", self._owner, self._admin_conf, admin)
        self._seen_ids.update(ids)
        for topic, topic_id in ids.items():
            if known.get(topic) is None:
                self._start_offsets[identity_key(topic)] = {"id": topic_id}
        self._found(gaps)
        return [TopicPartition(t, p, o) for t, p, o in positions]

    def _keys(self) -> dict[tuple[str, int], str]:
        return {(t, p): partition_key(sp) for t, parts in self._sp.items() for p, sp in parts.items()}

    def _found(self, gaps: list[SourceGap]) -> None:
        for gap in gaps:
            log_gap(self._owner, gap)
            self._gaps.append(gap)
            if gap.policy == FAIL and self._deferred_error is None:
                self._deferred_error = SourceGapError(gap)

    def take_gaps(self) -> list[SourceGap]:
        gaps, self._gaps = self._gaps, []
        return gaps

    def _out_of_range(self, topic: str, part: int, offset: int) -> None:
        """The consumer's position is gone from the log (``auto.offset.reset=error``): check, then
        move past the gap under ``report`` or stop at it under ``fail``."""
        if offset < 0 and self._sub is not None:
            offset = self._sub.positions.get((topic, part), -1)
        elif offset < 0:
            offset = self._consumer.position([TopicPartition(topic, part)])[0].offset
        known = known_ids(self.context.offset_storage_reader.offsets_by_key([identity_key(topic)]), [topic])
        known[topic] = self._seen_ids.get(topic, known[topic])
        admin = POOL.acquire("admin", self._owner, self._admin_conf)
        try:
            positions, gaps, ids = GapCheck(admin, self._gap_policy).check([(topic, part, offset)], known, self._keys())
        finally:
            POOL.release("admin", self._owner, self._admin_conf, admin)
        self._seen_ids.update(ids)
        self._found(gaps)
        if self._deferred_error is not None:
            return
        _, _, resume_at = positions[0]
        # librdkafka refuses to seek a partition its reset stopped ("erroneous state"): assign it anew
        consumer = self._shared.locked if self._sub is not None else self._consumer
        consumer.incremental_unassign([TopicPartition(topic, part)])
        consumer.incremental_assign([TopicPartition(topic, part, resume_at)])
        if self._sub is not None:
            self._sub.positions[(topic, part)] = resume_at

    def _offsets_for_times(self, tps: list[TopicPartition], ts: int) -> list[TopicPartition]:
        try:
            found = self._consumer.offsets_for_times(tps, timeout=10)
        except KafkaException as exc:
            raise RetriableError(f"offsets_for_times failed: {exc}") from exc
        out = []
        for tp in found:
            # Some brokers answer an earlier offset than asked; records older than the start
            # timestamp are dropped client-side until the first one at or after it.
            self._ts_floor[(tp.topic, tp.partition)] = ts
            offset = tp.offset if tp.offset >= 0 else self._watermark(tp.topic, tp.partition, 1)
            out.append(self._resolved(TopicPartition(tp.topic, tp.partition, offset), ts))
        return out

    def _watermark(self, topic: str, part: int, which: int) -> int:
        """Low (``which=0``) or high (``1``) watermark: the start positions are made concrete so
        they can be persisted before the first record (see ``start_offsets``)."""
        try:
            return self._consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=10)[which]
        except KafkaException as exc:
            raise RetriableError(f"cannot read the watermarks of {topic}[{part}]: {exc}") from exc

    def _resolved(self, tp: TopicPartition, timestamp_floor: int | None = None) -> TopicPartition:
        """Remember a concrete start so it is persisted before any record is read.

        A timestamp start keeps its timestamp in the persisted offset: the broker's answer may be
        earlier than asked, and the client-side filter must survive a restart too.
        """
        offset = {"offset": tp.offset - 1}
        if timestamp_floor is not None:
            offset[TIMESTAMP_FLOOR] = timestamp_floor
        self._start_offsets[partition_key(self._sp[tp.topic][tp.partition])] = offset
        return tp

    def start_offsets(self) -> dict[str, dict]:
        return self._start_offsets

    def _consume(self) -> list:
        """What has been fetched, up to ``poll.batch.size`` messages, without waiting; when nothing
        has, the first message to arrive within ``poll.timeout.ms`` and what came with it. As a
        Kafka consumer's ``poll`` (``max.poll.records`` is a most, not a quota): librdkafka's batch
        consume waits until it has the whole count or its timeout passed, which at 50 msg/s kept
        every record waiting for the timeout, and under a backlog made a larger batch cost latency."""
        most = min(self._batch, self.context.poll_limit)  # the runner's budget left (epoch, in flight)
        if self._sub is not None:
            msgs = self._sub.take(most, max(min(self._timeout, self.context.time_left()), 0))
            self._taken += len(msgs)
            now = time.monotonic()
            # busy: a quarter of a second's worth at the rate, taken within a quarter of a second (a
            # backlog shows at its first polls)
            busy = self._taken > OWN_CONSUMER_RATE / 4
            if busy or now - self._since >= 0.25:
                if busy:
                    self._own_consumer()
                self._taken, self._since = 0, now
            return msgs
        consume = self._consumer.consume
        msgs = consume(most, 0)
        if msgs:
            return msgs
        wait = min(self._timeout, self.context.time_left())
        if wait <= 0:
            return msgs
        msgs = consume(1, wait)
        if msgs and most > 1:
            msgs.extend(consume(most - 1, 0))
        return msgs

    def _own_consumer(self) -> None:
        """Leave the shared consumer for one of the task's own, at the positions taken so far
        (what was fetched for it and not taken is fetched again). A busy task on a shared
        consumer has its records fetched and handed over by its idle neighbours and its partitions
        paused whenever it falls behind their fetches: one connector copying a backlog beside 50
        idle ones ran at 0.04x its speed alone."""
        sub, self._sub, self._shared = self._sub, None, None
        tps = [TopicPartition(t, p, sub.positions[(t, p)]) for t, p in sub.partitions]
        sub.close()
        self._consumer = POOL.acquire("consumer", self._owner, self._conf)
        self._consumer.assign(tps)
        log.info("[%s] reads more than %d records/s: left the shared consumer for one of its own",
                 self._owner, OWN_CONSUMER_RATE)

    def poll(self) -> Sequence[ConnectRecord] | NativeBatch:
        if self._deferred_error is not None:
            error, self._deferred_error = self._deferred_error, None
            raise error
        try:
            msgs = self._consume()
        except KafkaException as exc:
            raise RetriableError(f"consume failed: {exc}") from exc
        if not msgs:
            return msgs
        if self._codec is not None and not self._ts_floor:
            batch = self._codec.batch(msgs)
            if batch is not None:
                return batch
        out = []
        append = out.append
        sp_by_topic = self._sp
        record = make_record
        for m in msgs:
            if m.error() is not None:
                try:
                    self._message_error(m)
                except ConnectError as exc:
                    # An error event takes no offset: keep every good record of this batch
                    # (dropping them would skip them) and raise at the next poll.
                    self._deferred_error = self._deferred_error or exc
                continue
            part = m.partition()
            topic = m.topic()
            append(record(topic, m.key(), m.value(), m.headers(), m.timestamp()[1],
                          sp_by_topic[topic][part], {"offset": m.offset()}, part))
        if self._ts_floor:
            out = self._drop_before_start(out)
        if self._deferred_error is not None and not out:
            error, self._deferred_error = self._deferred_error, None
            raise error
        return out

    def _drop_before_start(self, records: list[ConnectRecord]) -> list[ConnectRecord]:
        kept = []
        for r in records:
            tp = (r.topic, r.partition)
            floor = self._ts_floor.get(tp)
            if floor is not None:
                if r.timestamp is not None and r.timestamp < floor:
                    continue
                del self._ts_floor[tp]
            kept.append(r)
        return kept

    def _message_error(self, m) -> None:
        err = m.error()
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if err.code() == KafkaError._AUTO_OFFSET_RESET and m.topic() in self._sp:
            self._out_of_range(m.topic(), m.partition(), m.offset() if m.offset() is not None else -1)
            return
        if err.retriable() or err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
            raise RetriableError(f"consuming {m.topic()}[{m.partition()}]: {err.str()}")
        raise ConnectError(f"consuming {m.topic()}[{m.partition()}]: {err.str()}")

    def lag(self) -> int | None:
        """Sum of (high watermark - position); a lower bound on brokers whose watermarks lag (tansu)."""
        behind = self.lag_by_partition()
        return None if behind is None else sum(behind.values())

    def lag_by_partition(self) -> dict[str, int] | None:
        out = {}
        try:
            if self._sub is not None:  # the task's own positions; the watermarks in one short hold of the lock
                positions = self._sub.positions
                with self._shared.exclusive(timeout=1.0) as consumer:
                    ends = [(tp, positions.get((tp.topic, tp.partition), -1),
                             consumer.get_watermark_offsets(tp, cached=True)[1]) for tp in self._assigned]
            else:
                ends = [(tp, tp.offset, self._consumer.get_watermark_offsets(tp, cached=True)[1])
                        for tp in self._consumer.position(self._assigned)]
            for tp, position, high in ends:
                if high >= 0 and position >= 0:
                    out[partition_key(self._sp[tp.topic][tp.partition])] = max(high - position, 0)
        except (KafkaException, KeyError, TimeoutError):
            return None
        return out

    def stop(self) -> None:
        if getattr(self, "_shared", None) is not None:
            if self._sub is not None:
                self._sub.close()
            self._sub = self._shared = self._consumer = None
            return
        consumer = getattr(self, "_consumer", None)
        if consumer is not None:
            try:
                consumer.unassign()
            except KafkaException:
                consumer.close()
                return
            POOL.release("consumer", self._owner, self._conf, consumer)
            self._consumer = None
