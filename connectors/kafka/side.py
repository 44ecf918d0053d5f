"""The Kafka sink's side writer (:mod:`connect.sink.side`): dead letters and offset syncs.

A producer of its own (from the per-process pool, never the data producer), with the sink's
client settings (``bootstrap.servers``, ``client.override.*``, ``producer.override.*``; for the
dead-letter topic the ``dlq.*`` overrides are already applied) and the sink's producer defaults:
idempotent, ``acks=all``, no delivery timeout (an outage delays a dead letter, it never fails it).
Every record goes to the one topic, partitioned by key (murmur2, as Java's producer); the topic is
created with one partition when missing and ``topic.creation.enable`` (the default), as Kafka
Connect creates its dead-letter topic. Each delivery report is bound to its record (by a number,
``partial``); a report that never comes (a producer dropped) fails its record explicitly.
"""

from __future__ import annotations

import itertools
import logging
import time
from functools import partial
from typing import Any, Mapping

from confluent_kafka import KafkaError, KafkaException

from connect.errors import DeliveryError, RetriableError, TransactionAbortedError
from connect.records import ConnectRecord
from connect.sink.side import AsyncSideWriter, time_left
from connectors.kafka.clients import POOL, client_config
from connectors.kafka.sinkconfig import BROKEN_PRODUCER, CONFIG, PRODUCER_DEFAULTS, is_permanent
from connectors.kafka.topics import TargetTopics

__all__ = ["KafkaSideWriter"]

log = logging.getLogger(__name__)


class KafkaSideWriter(AsyncSideWriter):
    def __init__(self, config: Mapping[str, Any], topic: str) -> None:
        conf = client_config(config, "producer", PRODUCER_DEFAULTS)
        # as many without an outcome as the producer's queue holds (the sink's bound, as the
        # Pulsar and RocketMQ writers take their sink's max.pending.messages)
        super().__init__(topic, int(conf["queue.buffering.max.messages"]))
        self._config = dict(config)
        self._conf = conf
        self._conf["delivery.report.only.error"] = False  # every outcome settles its record
        self._owner = f"side:{topic}"
        self._producer = None
        self._clean = True  # never hand a producer that saw a failure back to the pool
        self._broken = False  # a fatal error: the producer will never deliver again
        self._opened = False
        self._unsettled: dict[int, ConnectRecord] = {}  # sent on the current producer, by report number
        self._numbers = itertools.count()
        self._txn_id: str | None = None  # set by ``join_transactions``

    @property
    def cluster(self) -> str:
        return str(self._config.get("bootstrap.servers", ""))

    def join_transactions(self, producer, txn_id: str) -> None:
        """Exactly-once (``connectors.kafka.transactions``): write through the pair's transactional
        producer, so these records commit or abort with the epoch's records. Never pooled nor purged
        (its other records are the pair's data); a failure aborts the transaction."""
        self._producer, self._txn_id, self._opened = producer, txn_id, False

    def _ready(self, deadline: float) -> None:
        """The topic, created when missing (its admin calls bounded by ``deadline``)."""
        if self._opened:
            return
        admin_conf = client_config(self._config, "admin")
        admin = POOL.acquire("admin", self._owner, admin_conf)
        try:
            TargetTopics(admin, CONFIG.parse(self._config), lambda: time_left(deadline)).ensure(self.topic, 1)
        finally:
            POOL.release("admin", self._owner, admin_conf, admin)
        self._opened = True

    def send(self, records, deadline: float) -> None:
        super().send(records, deadline)
        self._serve(0)

    def _send_one(self, r: ConnectRecord) -> None:
        if self._producer is None:
            self._producer = POOL.acquire("producer", self._owner, self._conf)
            self._clean = True
        headers = r.headers
        if headers is not None and headers.__class__ is not list:
            headers = list(headers)
        number = next(self._numbers)
        self._producer.produce(self.topic, r.value, r.key, on_delivery=partial(self._delivered, number),
                               timestamp=r.timestamp or 0, headers=headers)
        self._unsettled[number] = r

    def _refusal(self, r: ConnectRecord, exc: Exception) -> BaseException:
        if isinstance(exc, BufferError):
            return RetriableError(f"producer queue to {self.topic} full (queue.buffering.max.messages)")
        if isinstance(exc, KafkaException):
            err = exc.args[0]
            if is_permanent(err):
                return DeliveryError(f"record {r.position()} cannot be written to {self.topic}: {err.name()}: {err.str()}")
            return RetriableError(f"record {r.position()} not written to {self.topic}: {err.name()}: {err.str()}")
        return DeliveryError(f"record {r.position()} cannot be written to {self.topic}: {exc} (keys and values "
                             "must be bytes, str or None)")

    def _delivered(self, number: int, err: KafkaError | None, msg) -> None:
        """librdkafka calls it once per record, on the thread serving the producer (ours)."""
        r = self._unsettled.pop(number, None)
        if r is None:  # its producer was dropped and the record failed then
            return
        error = None
        if err is not None:
            self._clean = False
            where = f"{msg.topic()}[{msg.partition()}]"
            if is_permanent(err):
                error = DeliveryError(f"{where} refused the record: {err.name()}: {err.str()}")
            else:
                error = RetriableError(f"delivery to {where} failed: {err.name()}: {err.str()}")
            if err.fatal() or err.code() in BROKEN_PRODUCER:  # replaced once this poll returns
                self._broken = True
            if self._txn_id is not None:  # in the transaction: it cannot commit any more
                raise TransactionAbortedError(f"transactional.id {self._txn_id}: writing to {self.topic}: {error}; "
                                              "the epoch's transaction is aborted")
        self._settled(r, error)

    def _serve(self, timeout: float) -> None:
        if self._producer is None:
            return
        until = time.monotonic() + timeout
        try:
            self._producer.poll(timeout)
        except (KafkaException, SystemError) as exc:  # fatal producer errors surface here
            if self._txn_id is not None:
                raise TransactionAbortedError(f"transactional.id {self._txn_id}: writing to {self.topic}: {exc}; "
                                              "the epoch's transaction is aborted") from None
            log.warning("side writer to %s: producer failed (%s)", self.topic, exc)
            self._broken = True
        if self._broken:
            self._drop(until)

    def _drop(self, deadline: float) -> None:
        """Forget the producer (the next send starts a fresh one) and fail every record without an
        outcome back as transient: the purged ones by their delivery reports, served until
        ``deadline``; those whose report did not come by then explicitly (as the Kafka sink does),
        so ``flush`` never waits for a report that cannot come any more."""
        producer, self._producer, self._clean, self._broken = self._producer, None, False, False
        if producer is None:
            return
        try:
            producer.purge()
            producer.poll(0)  # serves the purged reports
            while self._unsettled and (left := time_left(deadline)) > 0:
                producer.poll(min(left, 0.2))
        except (KafkaException, SystemError):
            pass
        lost, self._unsettled = self._unsettled, {}
        for r in lost.values():
            self._settled(r, RetriableError(f"record {r.position()} has no delivery report from the dropped producer to "
                                            f"{self.topic}: it may or may not have been written"))

    def close(self) -> None:
        producer = self._producer
        if producer is None:
            return
        if self._txn_id is not None:  # the pair's: its sink closes it
            self._producer = None
            return
        if self._pending == 0 and self._clean:
            self._producer = None
            POOL.release("producer", self._owner, self._conf, producer)
        else:
            self._drop(time.monotonic())
