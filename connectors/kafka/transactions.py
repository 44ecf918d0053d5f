"""Exactly-once to a Kafka target (:mod:`connect.sink.transactions`): KIP-98 transactions, one per epoch.

- The sink's producer gets ``transactional.id`` = ``connect-{connector}-{task}`` (stable across
  restarts). ``init_transactions`` at start fences every older producer with that id and aborts its
  open transaction, as Kafka Connect's ``ExactlyOnceWorkerSourceTask`` (KIP-618) relies on.
- The pair's source offsets are records of an offsets topic on the *target* cluster, written in the
  epoch's transaction, after its records: key ``["<connector>", {source partition}]``, value the
  offset (JSON, as Kafka Connect's offsets topic), header ``task``. Kafka Connect commits consumer
  offsets with ``send_offsets_to_transaction`` the same way; here the source may be any broker, so
  the offsets are plain records. A compacted topic, ``connect-offsets.<connector>`` unless
  ``exactly.once.offsets.topic`` names one; created when missing.
- ``stored_offsets`` reads that topic ``read_committed`` from the beginning up to the end it had when
  the read began (after ``init_transactions``: the pair's own earlier transactions are settled),
  the last record per key winning.
- ``rewrite_target_offsets`` applies an operator's change (the REST offsets API, connector STOPPED)
  there: every task's ``transactional.id`` is initialised first (fencing what may still run), then
  the change is one transaction of task 0's producer.
- ``fence_tasks_from`` fences the ids of pairs numbered at or above the task count that left
  attempt records (the count shrank), and removes those records.
- Each attempt then commits an *attempt* record (key ``["<connector>", "attempt", <task>]``, value its
  host, process and start time), so an older attempt that is fenced can say which one fenced it.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from typing import Any, Mapping

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from connect.errors import (
    ProducerFencedError,
    RetriableError,
    TransactionAbortedError,
    TransactionsUnavailableError,
)
from connect.records import partition_key
from connectors.kafka.clients import client_config

__all__ = ["KafkaTransactions", "transactional_producer", "is_fenced", "offsets_topic", "transaction_timeout_ms",
           "rewrite_target_offsets", "fence_tasks_from"]

log = logging.getLogger(__name__)

_FENCED = {KafkaError.PRODUCER_FENCED, KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
_READ_LIMIT_S = 120.0  # the offsets topic's end passes once the other tasks' open transactions end


def offsets_topic(config: Mapping[str, Any], connector: str) -> str:
    return config.get("exactly.once.offsets.topic") or f"connect-offsets.{connector}"


def transaction_timeout_ms(config: Mapping[str, Any]) -> int:
    """librdkafka's ``transaction.timeout.ms`` under the sink's overrides (default 60 s)."""
    value = client_config(config, "producer").get("transaction.timeout.ms", 60_000) if "bootstrap.servers" in config \
        else 60_000
    try:
        return int(str(value).strip())
    except ValueError:
        return 60_000


def is_fenced(err: KafkaError) -> bool:
    return err.code() in _FENCED


def _error(exc: KafkaException) -> KafkaError | None:
    return exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None


def transactional_producer(conf: dict[str, Any], txn_id: str, timeout_s: float) -> Producer:
    """A producer with ``txn_id``, its earlier incarnations fenced (``init_transactions``). Raises
    TransactionsUnavailableError when the target refuses transactions, RetriableError when it could
    not be asked (unreachable, coordinator loading)."""
    conf = {**conf, "transactional.id": txn_id, "enable.idempotence": True, "acks": "all"}
    # librdkafka requires a delivery timeout within the transaction timeout (a record not delivered
    # by then aborts the transaction, and the pair restarts from the target's offsets).
    conf["message.timeout.ms"] = int(conf.get("transaction.timeout.ms", 60_000))
    producer = Producer(conf)
    try:
        producer.init_transactions(timeout_s)
    except KafkaException as exc:
        err = _error(exc)
        if err is not None and (err.retriable() or err.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT)):
            raise RetriableError(f"transactional.id {txn_id}: init_transactions: {err.str()} (retried)") from None
        what = err.str() if err is not None else str(exc)
        raise TransactionsUnavailableError(f"the target refused transactions (init_transactions for transactional.id "
                                           f"{txn_id}: {what})") from None
    return producer


class KafkaTransactions:
    """``SinkTransactions`` of a Kafka sink: ``producer`` is its transactional producer."""

    def __init__(self, producer: Producer, config: Mapping[str, Any], connector: str, task: int,
                 time_left) -> None:
        self._producer = producer
        self._config = config
        self._connector = connector
        self._task = task
        self._time_left = time_left
        self._topic = offsets_topic(config, connector)
        self._headers = [("task", str(task).encode())]
        self._open = False
        self._attempt = {"host": socket.gethostname(), "pid": os.getpid(), "id": uuid.uuid4().hex[:12],
                         "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    @property
    def open(self) -> bool:
        return self._open

    @property
    def txn_id(self) -> str:
        return f"connect-{self._connector}-{self._task}"

    def adopt(self, writer):
        """A side writer (dead letters, offset syncs) to this target cluster writes in the transaction;
        one to another cluster stays as it is (at least once)."""
        join = getattr(writer, "join_transactions", None)
        if join is not None and writer.cluster == str(self._config.get("bootstrap.servers", "")):
            join(self._producer, self.txn_id)
        return writer

    def begin(self) -> None:
        if not self._open:
            try:
                self._producer.begin_transaction()
            except KafkaException as exc:
                raise self._failure("begin_transaction", exc) from None
            self._open = True

    def commit(self, offsets: Mapping[str, Mapping[str, Any]]) -> None:
        producer, topic, connector = self._producer, self._topic, self._connector
        try:
            for key, offset in offsets.items():
                producer.produce(topic, orjson.dumps(dict(offset)),
                                 orjson.dumps([connector, orjson.loads(key)], option=orjson.OPT_SORT_KEYS),
                                 headers=self._headers)
            producer.commit_transaction(max(self._time_left(), 5.0))
        except (KafkaException, BufferError) as exc:
            failure = self._failure("commit_transaction", exc) if isinstance(exc, KafkaException) else \
                TransactionAbortedError(f"transactional.id {self.txn_id}: the offsets did not fit the queue: {exc}")
            if not isinstance(failure, ProducerFencedError):
                self.abort()
            raise failure from None
        self._open = False

    def abort(self) -> None:
        if not self._open:
            return
        self._open = False
        try:
            self._producer.abort_transaction(max(min(self._time_left(), 10.0), 1.0))
        except KafkaException as exc:  # fenced or fatal: the next attempt's init_transactions settles it
            log.warning("transactional.id %s: abort_transaction: %s", self.txn_id, exc)

    def _failure(self, what: str, exc: KafkaException) -> Exception:
        err = _error(exc)
        if err is not None and is_fenced(err):
            return self.fenced_error(f"{what}: {err.str()}")
        text = err.str() if err is not None else str(exc)
        return TransactionAbortedError(f"transactional.id {self.txn_id}: {what} failed ({text}); the transaction "
                                       "is aborted and the pair restarts from the offsets in the target")

    def fenced_error(self, detail: str) -> ProducerFencedError:
        self._open = False
        newer = self._newer_attempt()
        by = (f"the attempt on {newer['host']} (pid {newer['pid']}, started {newer['started']})" if newer else
              "a newer attempt (not yet known: it has not committed its start)")
        return ProducerFencedError(
            f"task pair {self._connector}-{self._task} was fenced by {by}, which took over transactional.id "
            f"{self.txn_id}; this attempt ({self._attempt['host']}, pid {self._attempt['pid']}) commits nothing "
            f"and stops ({detail})")

    def _attempt_key(self) -> bytes:
        return orjson.dumps([self._connector, "attempt", self._task])

    def claim(self) -> None:
        """Commit this attempt's record (who holds the pair now), right after ``stored_offsets``."""
        try:
            self._producer.begin_transaction()
            self._producer.produce(self._topic, orjson.dumps(self._attempt), self._attempt_key(), headers=self._headers)
            self._producer.commit_transaction(30)
        except KafkaException as exc:
            self._open = True  # what abort needs to know
            failure = self._failure("committing the attempt record", exc)
            if not isinstance(failure, ProducerFencedError):
                self.abort()
            raise failure from None

    def _newer_attempt(self) -> dict | None:
        """The attempt record of this task committed last, if it is not this attempt's (5 s at most)."""
        found: dict[str, Any] = {}
        key = self._attempt_key()
        try:
            self._read_all(lambda msg: found.update(orjson.loads(msg.value())) if msg.key() == key else None, 5.0)
        except (RetriableError, KafkaException, orjson.JSONDecodeError) as exc:
            log.warning("offsets topic %s: the attempt that fenced %s is not known: %s", self._topic, self.txn_id, exc)
            return None
        return found if found and found.get("id") != self._attempt["id"] else None

    # -- offsets in the target -------------------------------------------------------------------------
    def stored_offsets(self) -> dict[str, dict[str, Any]]:
        """The connector's offsets as committed in the target, read ``read_committed``."""
        found: dict[str, dict[str, Any]] = {}
        self._read_all(lambda msg: self._take(msg, found), _READ_LIMIT_S)
        return found

    def _read_all(self, take, limit_s: float) -> None:
        """``take`` each record of the offsets topic, ``read_committed``, up to the end it had at the start."""
        partitions = self._ensure_topic()
        if not partitions:  # created just now: nothing stored yet
            return
        conf = client_config(self._config, "consumer", {
            "group.id": f"connect-offsets-reader-{uuid.uuid4().hex}", "enable.auto.commit": False,
            "enable.partition.eof": True, "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
        consumer = Consumer(conf)
        try:
            ends = {}
            for p in partitions:
                ends[p] = consumer.get_watermark_offsets(TopicPartition(self._topic, p), timeout=10)[1]
            todo = {p for p, end in ends.items() if end > 0}
            consumer.assign([TopicPartition(self._topic, p, OFFSET_BEGINNING) for p in todo])
            deadline = time.monotonic() + limit_s
            while todo:
                if time.monotonic() > deadline:
                    raise RetriableError(f"the offsets topic {self._topic} could not be read to its end within "
                                         f"{limit_s:.0f} s (an open transaction of another task?)")
                for msg in consumer.consume(500, 0.5):
                    err = msg.error()
                    if err is not None and err.code() != KafkaError._PARTITION_EOF:
                        raise RetriableError(f"reading the offsets topic {self._topic}: {err.str()}")
                    if err is None:
                        take(msg)
                for tp in consumer.position([TopicPartition(self._topic, p) for p in list(todo)]):
                    if tp.offset >= ends[tp.partition]:
                        todo.discard(tp.partition)
        except KafkaException as exc:
            raise RetriableError(f"reading the offsets topic {self._topic}: {exc}") from None
        finally:
            consumer.close()

    def _take(self, msg, found: dict) -> None:
        try:
            key = orjson.loads(msg.key())
            if isinstance(key, list) and len(key) == 3 and key[1] == "attempt":  # see ``claim``
                return
            connector, partition = key
        except (orjson.JSONDecodeError, TypeError, ValueError):
            log.warning("offsets topic %s: record at %d has no [connector, partition] key; ignored",
                        self._topic, msg.offset())
            return
        if connector != self._connector or not isinstance(partition, dict):
            return
        key = partition_key(partition)
        value = msg.value()
        if value is None:
            found.pop(key, None)
        else:
            found[key] = orjson.loads(value)

    def _ensure_topic(self) -> list[int]:
        """The offsets topic's partitions; none when it was created now (it holds nothing)."""
        admin = AdminClient(client_config(self._config, "admin"))
        try:
            meta = admin.list_topics(self._topic, timeout=10).topics.get(self._topic)
            if meta is not None and meta.error is None and meta.partitions:
                return sorted(meta.partitions)
            futures = admin.create_topics([NewTopic(self._topic, 1, replication_factor=-1,
                                                    config={"cleanup.policy": "compact"})], request_timeout=10)
            try:
                futures[self._topic].result(15)
            except KafkaException as exc:
                err = _error(exc)
                if err is None or err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise RetriableError(f"cannot create the offsets topic {self._topic} "
                                         f"(exactly.once.offsets.topic): {exc}") from None
            return []
        except KafkaException as exc:
            raise RetriableError(f"cannot look up the offsets topic {self._topic}: {exc}") from None


def rewrite_target_offsets(conf: dict[str, Any], config: Mapping[str, Any], connector: str,
                           changes: Mapping[str, Any] | None, tasks: int) -> int:
    """Write ``changes`` (partition key -> offset, None removes) - or, with ``changes`` None,
    tombstones for every offset of ``connector`` - to its offsets topic in the target, in one
    transaction, after fencing the transactional ids of its ``tasks`` pairs. Returns the records
    written; raises TransactionsUnavailableError / RetriableError naming the target's reason."""
    producers = [transactional_producer(conf, f"connect-{connector}-{task}", 30.0) for task in range(max(tasks, 1))]
    producer = producers[0]
    txns, topic = KafkaTransactions(producer, config, connector, 0, lambda: 30.0), offsets_topic(config, connector)
    if changes is None:
        changes = {key: None for key in txns.stored_offsets()}
    try:
        producer.begin_transaction()
        for key, offset in changes.items():
            producer.produce(topic, None if offset is None else orjson.dumps(dict(offset)),
                             orjson.dumps([connector, orjson.loads(key)], option=orjson.OPT_SORT_KEYS),
                             headers=[("altered-by", b"rest")])
        producer.commit_transaction(30)
    except KafkaException as exc:
        err = _error(exc)
        raise RetriableError(f"the offsets of {connector} in the target's {topic} were not changed: "
                             f"{err.str() if err is not None else exc}") from None
    log.info("connector %s: %d offset record(s) written to %s in the target (REST offsets change)",
             connector, len(changes), topic)
    return len(changes)


def fence_tasks_from(conf: dict[str, Any], config: Mapping[str, Any], connector: str, tasks: int) -> list[int]:
    """Fence ``connect-<connector>-<k>`` for every task ``k >= tasks`` with an attempt record in the
    offsets topic (``KafkaTransactions.claim``): ``init_transactions`` with its id bumps the producer
    epoch, so a zombie of that pair can neither commit nor keep its open transaction. The fenced
    tasks' attempt records are then removed, so later starts do not fence them again."""
    reader = KafkaTransactions(None, config, connector, 0, lambda: 30.0)  # reads only
    removed: set[int] = set()

    def take(msg) -> None:
        try:
            key = orjson.loads(msg.key())
        except (orjson.JSONDecodeError, TypeError):
            return
        if isinstance(key, list) and len(key) == 3 and key[0] == connector and key[1] == "attempt" \
                and isinstance(key[2], int) and key[2] >= tasks:
            (removed.add if msg.value() is not None else removed.discard)(key[2])

    reader._read_all(take, _READ_LIMIT_S)
    topic = offsets_topic(config, connector)
    for task in sorted(removed):
        producer = transactional_producer(conf, f"connect-{connector}-{task}", 30.0)
        try:
            producer.begin_transaction()
            producer.produce(topic, None, orjson.dumps([connector, "attempt", task]))
            producer.commit_transaction(30)
        except KafkaException as exc:
            raise RetriableError(f"fencing removed task {task} of {connector}: {exc}") from None
        log.info("connector %s: transactional.id connect-%s-%d fenced (task %d is no longer configured)",
                 connector, connector, task, task)
    return sorted(removed)
