"""Kafka sink: idempotent producer, target topic by name/template/fixed, partitions kept.

- Target topic: ``topic`` (fixed) or ``topic.template`` (default ``{topic}``: same name).
- Partition: the record's partition hint (the source partition number) when the target topic
  has that partition, otherwise librdkafka's murmur2 partitioner on the key (Java-compatible).
- Missing target topics are created (``topic.creation.enable``) before the tasks start, with the
  source topic's partition count (or ``topic.creation.partitions``), and grown when the source
  grows (where the broker supports CreatePartitions); a topic first seen in a batch is created
  with the highest partition hint seen + 1.
- Every delivery report is tied to its own record: each ``produce`` binds its callback to the
  message it sends by a reusable delivery slot (``connectors.kafka.delivery``: the put, the
  message's index in it), so a failed delivery names exactly that record, never one found again
  by content, and to the *checkpoint* it was put after (an asynchronous sink, see
  :mod:`connect.sink`): every report, success or failure, counts its checkpoint's records down, so
  the runner commits up to the last checkpoint with nothing in flight, and an epoch ends without
  draining the producer. ``flush`` (final drains, the dead-letter topic) waits until librdkafka
  holds no message or the epoch's time is up.
- Records (``put``) and native batches (``put_native``, ``connect.batch``: a Kafka source's
  consumed messages, produced as they are) meet in one loop (``_produce``); a native message's
  record is built only when it fails or is not handed over.
- Failures are sorted as the runner needs them: transient ones (timeouts, transport, leader
  changes, a full queue, fatal producer states - see :func:`is_permanent`) are reported as
  :class:`~connect.errors.RetriableError` and re-sent; only errors that will never succeed for
  that record (too large, invalid, not authorized) are permanent.
- Outages only delay: like Kafka Connect's source-task producers (``delivery.timeout.ms`` =
  max), the producer's ``message.timeout.ms`` defaults to 0 (no timeout), so librdkafka keeps
  retrying in order, idempotently, until the target is back.
- A transient failure holds its partition: nothing put after a record that failed transiently is
  delivered before that record's re-send. The sink owns the delivery timeout (a ``message.timeout.ms``
  or ``delivery.timeout.ms`` set through ``producer.override.`` / ``client.override.`` is enforced
  here, librdkafka getting 0: :mod:`connectors.kafka.puts`), and abandons its producer when a record
  fails transiently, times out, or the producer is in a fatal state (:mod:`connectors.kafka.abandon`):
  every failed record is reported transient in put order and the runner re-sends them before it puts
  anything new. Records a put could not hand to the producer (no room until the deadline, a target
  that cannot be looked up, a put after an abandonment) are reported not sent
  (:class:`~connect.errors.NotSentError`): the runner re-sends them behind every earlier record.
"""

from __future__ import annotations

import logging
import operator
import threading
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

from confluent_kafka import KafkaError, KafkaException

from connect.batch import NativeBatch
from connect.config import ConfigDef
from connect.connector import SinkConnector
from connect.errors import (
    ConfigIssue,
    DeliveryError,
    NotSentError,
    RetriableError,
)
from connect.records import ConnectRecord
from connect.sink import Outstanding, SinkTask
from connect.sink.resend import InOrderReports
from connect.sink.routing import TopicRouter
from connectors.kafka.abandon import ProducerAbandonment
from connectors.kafka.clients import POOL, client_config
from connectors.kafka.delivery import DeliverySlots
from connectors.kafka.native import KIND
from connectors.kafka.producers import PRODUCERS, Inbox
from connectors.kafka.puts import Put, PutLog
from connectors.kafka.sinkconfig import (
    BROKEN_PRODUCER,
    CONFIG,
    OWN_PRODUCER_RATE,
    PRODUCER_DEFAULTS,
    delivery_timeout,
    is_permanent,
    timeout_issues,
)
from connectors.kafka.topics import TargetTopics
from connectors.kafka.transactions import (
    KafkaTransactions,
    fence_tasks_from,
    is_fenced,
    rewrite_target_offsets,
    transaction_timeout_ms,
    transactional_producer,
)

__all__ = ["KafkaSinkConnector", "KafkaSinkTask"]


log = logging.getLogger(__name__)

_PURGED = {KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT}
# What ``_produce`` reads of a record (a native batch's messages: ``NativeBatch.columns``).
_RECORD_FIELDS = operator.attrgetter("topic", "partition", "key", "value", "headers", "timestamp")


class KafkaSinkConnector(SinkConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return CONFIG

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        return super().validate(config) + timeout_issues(config)

    def prepare_topics(self, source_topics: Mapping[str, int]) -> None:
        """Create each target topic with its source's partition count (or grow it), as MM2 does."""
        cfg = CONFIG.parse(self.config)
        route = TopicRouter(cfg)
        admin_conf = client_config(self.config, "admin")
        admin = POOL.acquire("admin", "connector", admin_conf)
        try:
            topics = TargetTopics(admin, cfg)
            existing = topics.partition_counts()
            for topic, partitions in source_topics.items():
                topics.ensure(route(topic), partitions, existing)
        finally:
            POOL.release("admin", "connector", admin_conf, admin)

    @classmethod
    def transaction_timeout_ms(cls, config: Mapping[str, Any]) -> int | None:
        return transaction_timeout_ms(config)

    @classmethod
    def alter_target_offsets(cls, config: Mapping[str, Any], connector: str, changes: Mapping[str, Any] | None,
                             tasks: int) -> bool:
        conf = client_config(config, "producer", PRODUCER_DEFAULTS)
        conf.pop("delivery.timeout.ms", None)
        rewrite_target_offsets(conf, config, connector, changes, tasks)
        return True

    def fence_removed_tasks(self, tasks: int) -> list[int]:
        conf = client_config(self.config, "producer", PRODUCER_DEFAULTS)
        conf.pop("delivery.timeout.ms", None)
        return fence_tasks_from(conf, self.config, self.context.name, tasks)

    @classmethod
    def task_class(cls) -> type:
        return KafkaSinkTask

    @classmethod
    def side_writer(cls, config: Mapping[str, Any], topic: str):
        from connectors.kafka.side import KafkaSideWriter

        return KafkaSideWriter(config, topic)


class KafkaSinkTask(ProducerAbandonment, SinkTask):
    def start(self, config: Mapping[str, Any], context) -> None:
        cfg = CONFIG.parse(config)
        self._cfg = cfg
        self._route = TopicRouter(cfg)
        self._owner = context.task_id
        # The delivery timeout is the sink's (see the module doc): librdkafka gets none.
        self._timeout_ms, self._timeout_key = delivery_timeout(config)
        self._timeout = self._timeout_ms / 1000
        self._broken: str | None = None  # why the producer must be abandoned (fatal state, a transient failure)
        self._purging: str | None = None  # while abandoning: why (the error text of the records purged)
        self._tainted = False  # a producer that saw a failed delivery is never pooled for reuse
        self._conf = client_config(config, "producer", PRODUCER_DEFAULTS)
        self._conf["delivery.report.only.error"] = False  # checkpoints count every outcome
        self._conf.pop("delivery.timeout.ms", None)
        self._conf["message.timeout.ms"] = 0
        self._gen = Outstanding()
        self._txns: KafkaTransactions | None = None
        txn_id = getattr(context, "transactional_id", None)
        if txn_id is not None:  # exactly-once (connectors.kafka.transactions): a transactional producer of its own
            producer = transactional_producer(self._conf, txn_id, 30.0)
            connector, task = context.pair
            self._txns = KafkaTransactions(producer, config, connector, task, context.time_left)
            self._timeout = 0  # the transaction's timeout bounds a delivery (see transactional_producer)
        self._fenced = False
        self._puts = PutLog(self._timeout)  # puts whose records may lack an outcome, oldest first
        # transient failures served, held until the producer is abandoned, then reported in put order
        # ((put sequence, index in the put)); records never handed over are reported not sent
        self._reports = InOrderReports(context.errant_record_reporter.report)
        # A shared producer's reports come through the task's inbox (connectors.kafka.producers); a
        # delivery timeout purges a producer, so a task with one keeps its own.
        self._shared = PRODUCERS.acquire(self._conf) if cfg["producer.shared"] and not self._timeout and \
            self._txns is None else None
        self._inbox = Inbox() if self._shared is not None else None
        self._wrap = self._inbox.arrive if self._inbox is not None else None
        self._rate_n, self._rate_since = 0, time.monotonic()
        self._producer = self._shared.producer if self._shared is not None else \
            producer if self._txns is not None else POOL.acquire("producer", self._owner, self._conf)
        self._admin_conf = client_config(config, "admin")
        self._admin = POOL.acquire("admin", self._owner, self._admin_conf)
        self._topics = TargetTopics(self._admin, cfg, context.time_left)
        self._targets: dict[str, tuple[str, int]] = {}  # source topic -> (target topic, partitions)
        self._warned_small: set[str] = set()
        self._positions = context.positions

    def _on_outcome(self, batch, i: int, put: Put, err: KafkaError | None, msg) -> bool:
        """The report of message ``i`` of ``batch`` (a put's records, or a native batch), through its
        delivery slot: a failure, or a success that offset syncs follow. A failure is reported before
        its checkpoint counts it; True: a transient failure, held (and counted) until the producer is
        abandoned."""
        record = batch[i]  # a native batch builds it now, for this message only
        if err is not None:
            return self._failed_delivery(record, put, i, err, msg)
        if self._positions is not None:  # offset syncs: where it landed
            self._positions.ack(record, msg.topic(), msg.partition(), msg.offset())
        return False

    def _failed_delivery(self, record: ConnectRecord, put: Put, i: int, err: KafkaError, msg) -> bool:
        """Report a permanent failure now (False); hold a transient one for ``_abandon`` (True):
        the producer may still send records put after it, so it is abandoned first."""
        self._tainted = True
        self._fenced = self._fenced or is_fenced(err)
        where = f"{msg.topic()}[{msg.partition()}]"
        if is_permanent(err):
            self.context.errant_record_reporter.report(
                record, DeliveryError(f"{where} refused the record: {err.name()}: {err.str()}"))
            return False
        purging = self._purging or (self._shared.retired if self._shared is not None else None)
        if purging is not None and err.code() in _PURGED:
            text = f"delivery to {where} {purging}; re-sent in order"
            if self._broken is None:
                self._broken = purging
        else:
            text = f"delivery to {where} failed: {err.name()}: {err.str()}"
            if self._broken is None:
                state = "fatal producer state" if err.fatal() or err.code() in BROKEN_PRODUCER else "transient failure"
                self._broken = f"not confirmed: the producer was abandoned after a {state} ({err.name()} on {where})"
        self._reports.hold((put.seq, i), record, RetriableError(text), put)
        return True

    # -- topics ---------------------------------------------------------------------------
    def _target(self, source_topic: str, hint: Callable[[str], int]) -> tuple[str, int]:
        """(target topic, its partition count), creating it if needed (with ``hint(source_topic)`` + 1
        partitions at least: the highest partition hint of the put); cached per source topic."""
        topic = self._route(source_topic)
        target = self._targets[source_topic] = (topic, self._topics.ensure(topic, hint(source_topic) + 1))
        return target

    # -- data: records and native batches meet in one loop (``_produce``) ------------------------
    def put(self, records: Sequence[ConnectRecord]) -> None:
        def hint(topic: str) -> int:
            return max((r.partition for r in records if r.topic == topic and r.partition is not None), default=0)

        self._produce(records, map(_RECORD_FIELDS, records), len(records), lambda: {r.topic for r in records},
                      hint, lambda i: records[i:])

    # Kafka's native batches (``connectors.kafka.native``): produced straight from the consumed
    # messages, a record built only for a message that fails or is not handed over.
    native_kinds = frozenset({KIND})
    _slots: DeliverySlots | None = None

    def put_native(self, batch: NativeBatch) -> None:
        """``put`` for a batch of consumed Kafka messages: the same fields as ``put`` takes from
        records (value, key, headers or a stage's overlay, timestamp, partition hint, topic or a
        stage's overlay), read with ``NativeBatch.columns``, through the same loop."""
        items = batch.items

        def topics() -> set:
            names = batch.topics
            return {batch.topic} if names is None and batch.topic is not None else \
                set(names) if names is not None else {m.topic() for m in items}

        def hint(topic: str) -> int:
            return max((m.partition() for i, m in enumerate(items) if batch.topic_of(i) == topic), default=0)

        topic, part, key, headers, value, ts = batch.columns()
        self._produce(batch, zip(topic, part, key, value, headers, ts, strict=True), len(items), topics, hint, batch.records)

    def _produce(self, batch, fields: Iterator[tuple], total: int, topics: Callable[[], set],
                 hint: Callable[[str], int], rest: Callable[[int], Sequence[ConnectRecord]]) -> None:
        """Hand ``total`` messages to the producer, in order, each from its ``fields`` (source topic,
        partition hint, key, value, headers, timestamp): a ``Put`` in put order, each report tied to
        its message by a delivery slot (``connectors.kafka.delivery``: ``batch[i]`` is the record of
        message ``i``, built only when a report needs it), a transient failure held until the
        producer is abandoned. ``rest(i)``: the records from ``i`` on (reported not sent)."""
        go, lock = self._begin_put(total, topics, hint, rest)
        if not go:
            return
        produce = self._producer.produce
        slots = self._slots or self._new_slots()
        free, take = slots.free, slots.take
        targets = self._targets
        preserve = self._cfg["partition.preserve"]
        gen = self._gen
        put = self._puts.new(gen)
        name = topic = None
        partitions = 0
        sent = 0  # handed to the producer: each one's report counts its put and checkpoint down
        fail: tuple[int, RetriableError] | None = None  # from this message on, nothing is handed over
        try:
            for i, (source_topic, part, key, value, headers, ts) in enumerate(fields):
                if source_topic is not name:  # routed as the previous message when its topic is the same object
                    target = targets.get(source_topic)
                    if target is None:
                        try:
                            target = self._target(source_topic, hint)
                        except RetriableError as exc:  # target metadata unreachable: the rest waits, in order
                            fail = (i, exc)
                            break
                        if not sent:
                            put.at = time.monotonic()  # its age counts from the first produce, not the lookup
                    name = source_topic
                    topic, partitions = target
                if part is None or not preserve:
                    part = -1
                elif part >= partitions:
                    self._warn_fewer_partitions(topic, partitions)
                    part = -1
                if headers is not None and headers.__class__ is not list:
                    headers = list(headers)
                try:
                    slot = free.pop()
                except IndexError:
                    slot = take()
                slot.batch = batch
                slot.i = i
                slot.put = put
                try:
                    produce(topic, value, key, partition=part, on_delivery=slot.report, timestamp=ts or 0,
                            headers=headers)
                    sent += 1
                except (BufferError, KafkaException, TypeError, ValueError) as exc:
                    slots.give_back(slot)
                    put.left += sent  # counted before a wait for room serves their reports
                    gen.left += sent
                    sent = 0
                    try:
                        sent = self._produce_refused(topic, batch, part, headers, exc, put, i, total)
                    except RetriableError as again:
                        fail = (i, again)
                        break
        finally:
            put.left += sent
            gen.left += sent
            if lock is not None:
                lock.release()
        if fail is not None:
            self._fail_rest(rest(fail[0]), fail[1])
            return
        self._serve_now()
        if self._broken is not None:  # a report just served: abandon now, the runner takes it after this put
            self._abandon()

    def _begin_put(self, total: int, topics: Callable[[], set], hint: Callable[[str], int],
                   rest: Callable[[int], Sequence[ConnectRecord]]) -> tuple[bool, threading.Lock | None]:
        """Before a put: a shared producer's lock (``_enter_shared``), or None. (False, None) when the
        producer must be abandoned first: earlier records fail now, this put goes behind them, as a whole."""
        lock = None
        if self._shared is not None and not self._must_abandon():
            lock = self._enter_shared(total, topics(), lambda t: self._target(t, hint))
        if not self._must_abandon():
            return True, lock
        if lock is not None:
            lock.release()
        why = self._abandon()
        self._reports.not_sent(rest(0), f"not sent: earlier records are re-sent first ({why})")
        return False, None

    def _new_slots(self) -> DeliverySlots:
        self._slots = DeliverySlots(self._on_outcome, follow_successes=self._positions is not None,
                                    inbox=self._inbox)
        return self._slots

    def _fail_rest(self, rest: Sequence[ConnectRecord], error: RetriableError) -> None:
        """Records that could not be handed to the producer: reported not sent (the runner re-sends
        them once every earlier record has an outcome, behind those that fail), after the failures
        of an abandoned producer."""
        if self._must_abandon():
            self._abandon()
        self._reports.not_sent(rest, str(error), backpressure=getattr(error, "backpressure", False))

    def _produce_refused(self, topic: str, batch, part: int, headers, exc: Exception, put: Put, i: int,
                         total: int) -> bool:
        """Message ``i`` of the ``total`` of a put, whose produce raised ``exc``: a full queue is
        waited on until the epoch's time is up, any other refusal takes the rare paths
        (``_produce_odd``). True if the record was handed to the producer after all; raises
        RetriableError when it and the rest of the put wait, in order."""
        if not isinstance(exc, BufferError):
            return self._produce_odd(topic, batch, part, headers, exc, put, i)
        if not self._produce_when_room(topic, batch, part, headers, put, i):
            raise NotSentError(f"producer queue full (queue.buffering.max.messages) until the epoch deadline; "
                               f"{total - i} record(s) not sent yet", backpressure=True)
        return True

    def _produce_odd(self, topic: str, batch, part: int, headers, exc: Exception, put: Put, i: int) -> bool:
        """The rare paths: bytes-like payloads librdkafka does not take as they are, or a record
        refused before sending (larger than message.max.bytes, a payload that is no bytes).
        True if the record was handed to the producer after all; raises RetriableError when it
        was refused for a reason that may pass (it and the rest of its batch wait, in order)."""
        r = batch[i]
        key, value = r.key, r.value
        if isinstance(key, (bytearray, memoryview)) or isinstance(value, (bytearray, memoryview)):
            key = bytes(key) if isinstance(key, (bytearray, memoryview)) else key
            value = bytes(value) if isinstance(value, (bytearray, memoryview)) else value
            try:
                self._produce_bound(topic, value, key, part, headers, batch, put, i)
                return True
            except (KafkaException, TypeError, ValueError) as again:
                exc = again
        if isinstance(exc, KafkaException):
            err = exc.args[0]
            if not is_permanent(err):
                raise RetriableError(f"record {r.position()} not produced: {err.name()}: {err.str()}")
            error: Exception = DeliveryError(f"record {r.position()} cannot be produced: {err.name()}: {err.str()}")
        else:
            error = DeliveryError(f"record {r.position()} cannot be produced: {exc} "
                                  "(keys and values must be bytes, str or None: set the sink's key/value.converter)")
        self.context.errant_record_reporter.report(r, error)
        return False

    def _produce_bound(self, topic: str, value, key, part: int, headers, batch, put: Put, i: int) -> None:
        """One produce off the hot path (``_produce`` inlines the same call), its report bound to
        message ``i`` of ``batch`` and ``put`` by a delivery slot."""
        slots = self._slots or self._new_slots()
        slot = slots.take()
        slot.batch, slot.i, slot.put = batch, i, put
        try:
            self._producer.produce(topic, value, key, partition=part, on_delivery=slot.report,
                                   timestamp=batch[i].timestamp or 0, headers=headers)
        except BaseException:
            slots.give_back(slot)
            raise

    def _produce_when_room(self, topic: str, batch, part: int, headers, put: Put, i: int) -> bool:
        """False at the epoch deadline, or when the producer must be abandoned meanwhile."""
        r = batch[i]
        while True:
            left = self.context.time_left()
            if self._shared is not None:  # room is made by the producer's thread: wait without its lock
                self._shared.lock.release()
                try:
                    self._inbox.wait(min(0.05, left))
                finally:
                    self._shared.lock.acquire()
            else:
                self._producer.poll(min(0.05, left))
            if self._must_abandon():
                return False
            try:
                self._produce_bound(topic, r.value, r.key, part, headers, batch, put, i)
                return True
            except BufferError:
                if left <= 0:
                    return False

    def _warn_fewer_partitions(self, topic: str, count: int) -> None:
        if topic not in self._warned_small:
            self._warned_small.add(topic)
            log.warning("target topic %s has %d partition(s), fewer than the source; "
                        "records beyond them are partitioned by key", topic, count)

    def checkpoint(self):
        gen, self._gen = self._gen, Outstanding()
        return gen.done

    def _serve(self, call):
        """``call`` (the producer's poll or flush), which serves delivery reports; a producer that
        fails there is reported transient (the runner retries) and never pooled again."""
        try:
            return call()
        except (KafkaException, SystemError) as exc:  # fatal producer errors surface here
            self._tainted = True
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if self._txns is not None and err is not None and is_fenced(err):  # exactly-once: a zombie
                raise self._txns.fenced_error(err.str()) from None
            raise RetriableError(f"producer failed: {exc}") from exc

    def wait_outcomes(self, timeout: float) -> None:
        if not self._must_abandon():
            if self._inbox is not None:
                self._inbox.wait(timeout)
            else:
                self._serve(lambda: self._producer.poll(timeout))
        if self._must_abandon():
            self._abandon()

    def flush(self, offsets) -> bool:
        """Wait for every acknowledgement, at most ``context.time_left()``; False if time ran out."""
        while True:
            if self._inbox is not None:  # a shared producer: the task's own records
                self._inbox.wait(min(self.context.time_left(), 0.5))
                remaining = self._puts.unsettled()
            else:
                remaining = self._serve(lambda: self._producer.flush(min(self.context.time_left(), 0.5)))
            if self._must_abandon():
                self._abandon()  # its records were reported transient: an outcome for each
                return True
            if remaining == 0:
                return True
            if self.context.time_left() <= 0:
                return False

    # -- the shared producer (connectors.kafka.producers) ----------------------------------------
    def _enter_shared(self, n: int, topics, resolve) -> threading.Lock | None:
        """Before a put of ``n`` records on a shared producer: count them (a busy task moves to a
        producer of its own), resolve the put's target topics outside the lock (an admin request;
        a RetriableError then means nothing of the batch was taken) and take the producer's lock,
        which the put holds while it produces. None when the task now has a producer of its own."""
        self._rate_n += n
        now = time.monotonic()
        # busy: a quarter of a second's worth at the rate, put within a quarter of a second (a backlog
        # shows at its first puts)
        busy = self._rate_n > OWN_PRODUCER_RATE / 4
        if busy or now - self._rate_since >= 0.25:
            self._rate_n, self._rate_since = 0, now
            if busy and self._own_producer():
                return None
        targets = self._targets
        for topic in topics:
            if topic not in targets:
                resolve(topic)
        lock = self._shared.lock
        lock.acquire()
        return lock

    def _own_producer(self) -> bool:
        """Leave the shared producer for one of the task's own, once every record put on the shared
        one has its outcome (else a later record could land first); False if they did not come
        within a second (tried again at the next rate check)."""
        if not self._settle(min(self.context.time_left(), 1.0), until_abandon=True) or self._must_abandon():
            return False
        producer = POOL.acquire("producer", self._owner, self._conf)
        shared, self._shared, self._inbox, self._wrap, self._slots = self._shared, None, None, None, None
        self._producer = producer
        PRODUCERS.release(shared)
        log.info("[%s] puts more than %d records/s: left the shared producer for one of its own",
                 self._owner, OWN_PRODUCER_RATE)
        return True

    def _serve_now(self) -> None:
        """Serve the reports that have arrived, without waiting."""
        if self._inbox is not None:
            self._inbox.serve()
        else:
            self._producer.poll(0)

    def _settle(self, seconds: float, until_abandon: bool = False) -> bool:
        """Shared producer: handle this task's reports until each of its records has an outcome (held
        transient failures count as one), at most ``seconds``, or (``until_abandon``) until the
        producer must be abandoned; True when every record has one."""
        deadline = time.monotonic() + seconds
        while self._puts.unsettled() > len(self._reports):
            left = deadline - time.monotonic()
            if left <= 0 or (until_abandon and self._must_abandon()):
                return False
            self._inbox.wait(min(left, 0.05))
        return True

    def transactions(self) -> KafkaTransactions:
        if self._txns is None:
            return super().transactions()
        return self._txns

    def stop(self) -> None:
        producer = getattr(self, "_producer", None)
        if producer is None:
            return
        self._producer = None
        POOL.release("admin", self._owner, self._admin_conf, self._admin)
        if self._txns is not None:  # never pooled: its transactional.id is this pair's
            self._txns.abort()
            try:
                producer.flush(min(self.context.time_left(), 1.0))
            except (KafkaException, SystemError):
                pass
            return
        shared = getattr(self, "_shared", None)
        if shared is not None:  # its records' outcomes, for a second at most
            self._shared = None
            try:
                if not self._settle(min(self.context.time_left(), 1.0)):
                    # Left queued (an outage), they could land after the copies a restarted task
                    # sends from its committed offsets elsewhere: purged, as an own producer is.
                    shared.retire(f"not confirmed: task {self._owner} stopped with records in flight")
            finally:
                PRODUCERS.release(shared)
            return
        try:
            clean = producer.flush(min(self.context.time_left(), 1.0)) == 0 and not self._tainted and self._broken is None
        except (KafkaException, SystemError):
            clean = False
        if clean:  # never hand a broken, failing or non-empty producer to the next task
            POOL.release("producer", self._owner, self._conf, producer)
        else:
            producer.purge()
