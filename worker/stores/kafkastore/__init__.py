"""The worker's stores on three compacted Kafka topics, as Kafka Connect's config, offset and
status topics: the broker-backed alternative to :class:`worker.stores.store.SqliteStores`, with the same
interfaces (:class:`~worker.stores.store.Stores`) and the same semantics.

Topic and record layout
-----------------------
Keys of the config and status topics are UTF-8 strings; keys of the offset topic and every value
are JSON (orjson). A null value (tombstone) deletes its key; compaction eventually drops it.

``connect-configs`` (1 partition; a config topic with more is refused, as Kafka Connect does)::

    connector-<name>        {"config": {"key": "value", ...}}      # the config exactly as given
    target-state-<name>     {"state": "RUNNING" | "PAUSED" | "STOPPED"}

  A connector exists while it has a ``connector-`` record; without a ``target-state-`` record its
  target state is RUNNING. Deleting a connector writes tombstones for both keys.

``connect-offsets`` (``offset_partitions`` partitions)::

    ["<connector>", "<partition key>"]   {...offset...}   # or a tombstone: offset None / reset

  Every record of a connector goes to partition ``crc32(connector) % partitions``, so one
  connector's commits stay in one partition, in order. The partition count of this topic must
  therefore never change once offsets are stored (records would move to another partition and
  their order against older ones would be lost).

``connect-status`` (1 partition when created; records of a connector go to
``crc32(connector) % partitions``)::

    status-connector-<name>        {"state": ..., "worker_id": ..., "trace": ...}
    status-task-<name>-<task id>   {"state": ..., "worker_id": ..., "trace": ...}

Start-up
--------
Missing topics are created with ``cleanup.policy=compact``. An existing topic whose reported
``cleanup.policy`` is anything but ``compact`` (``delete``, ``compact,delete``) is refused with a
:class:`~connect.errors.ConnectError` naming the topic and the setting, as Kafka Connect does: a
time- or size-based retention would silently drop connector configs and offsets. A broker that
does not report the setting (tansu reports only the configs a topic was created with) cannot be
checked; that is logged and accepted, again as Kafka Connect does.

The store then takes the topics over (see "One writer" below) and only then reads each topic from
the beginning to its end to rebuild the state in memory: once it holds the topics, no earlier
worker can add a record behind that read. The end of a partition is its high watermark taken at
start, confirmed by the consumer reaching the end of the partition (``enable.partition.eof``):
tansu under-reports the high watermark in ListOffsets (the base offset of the last batch + 1) but
not in its fetch responses, so the watermark alone would miss the tail of the last batch.

One writer
----------
Every topic is written by a transactional producer whose ``transactional.id`` is
``connect-bridge-store-<topic>`` (the prefix is ``transactional.id`` of ``client_config``,
``store.kafka.client.transactional.id`` in the worker config; a Kafka ACL on the prefix
``connect-bridge-store-`` covers all three). One id per topic rather than one per set of topics:
two workers that share only one topic (say both kept the default offset topic) must not both write
it either. Opening the store calls ``init_transactions`` for the three ids, which fences any earlier
producer with the same id and aborts the transaction it left open: the last worker to open a set of
topics owns them. The earlier one's next write fails with :class:`StoreFencedError` naming the
topics, and so does every write after it on any of its topics (``fenced`` says why); it never makes
a new producer for them, since that would fence the newer worker in turn. The herder then stops its
connectors. (On tansu, a write caught between its produce and its commit by the takeover never
learns why: tansu answers the fenced commit by closing the connection, so that write and every later
one to that topic raise ``RetriableError`` instead. None of them is committed: the takeover aborted
the first, which tansu nevertheless shows to readers, see below, and the others never begin.)

Reads and writes
----------------
This worker is the only writer of its topics (see above): reads (``load``, ``connectors``, ``statuses``) are
served from memory, and there is no background consumer. A write is one transaction (begin,
produce with ``acks=all``, commit) and returns once it is committed; the in-memory state is updated
after that, so a write is visible to readers of this store all at once, or (when it raises) not at
all. A transactional producer runs one transaction at a time, so the writes to one topic take turns
(the three topics have a producer each). A failed or timed-out write raises
:class:`~connect.errors.RetriableError` (a transient broker error) or
:class:`~connect.errors.ConnectError` naming the topic.

What a write that raised leaves in the topic: if it failed, it was aborted. If it timed out (the
broker away for ``timeout_s``), its commit goes on in the background, as librdkafka allows no
abort then; when the broker is back it is committed, whole, and the next write to that topic waits
for that outcome before it begins (until then it raises too), so a later write never lands before an
earlier one. Either way, readers that skip aborted transactions, as the store's own reader does
(``isolation.level=read_committed``), see all of such a write or none of it; tansu lists no
aborted transactions in its fetch responses, so there an aborted write can be read back, whole.
This store's memory never shows a write that raised, though a restarted store may. All of that is
safe for at-least-once delivery, since every offset ever committed is one whose records were
acknowledged by the target; keys a failed write may have left behind are remembered, so a later
``reset`` or ``delete`` tombstones them too.

Records never time out before their transaction does (``message.timeout.ms`` =
``transaction.timeout.ms``, 5 minutes unless ``client_config`` sets the latter). A broker away for
longer, with a write in flight, ends this store's writes to that topic: a Kafka broker aborts the
transaction and fences its producer, which reads as :class:`StoreFencedError` (librdkafka reports
both alike); on tansu the abort needs an epoch bump (KIP-360) that tansu refuses, so the writes
raise ``RetriableError``. A worker restart recovers either. The producer replacement the idempotent
producer needed on tansu (it fenced a producer that bumped its epoch after a timed-out batch) is
thus not needed any more. A producer in a fatal state for another reason is still replaced and the
write made once more: its start fences only the broken producer, since one fenced by another worker
fails as fenced, not otherwise.

Writes of one connector (its offsets, its statuses) are serialised by a lock of that connector,
config writes by one lock: several connector threads share the store.

Modules: this one holds :class:`KafkaStores` (opening, the write path, fencing, closing);
``topics`` creates, checks and reads the topics at start-up; ``tables`` holds the offset, config
and status stores on them; ``errors`` tells transient Kafka errors from the others.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from connect.errors import ConnectError
from worker.stores.kafkastore.errors import error_class, kafka_error
from worker.stores.kafkastore.tables import KafkaConfigs, KafkaOffsets, KafkaStatuses
from worker.stores.kafkastore.topics import Record, StoreTopics

__all__ = ["KafkaStores", "StoreFencedError"]

log = logging.getLogger(__name__)

# a newer producer with the same transactional.id exists (librdkafka reports the two broker codes as _FENCED)
_FENCING = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}

_TRANSACTIONAL_ID = "connect-bridge-store"
_TXN_TIMEOUT_MS = 300_000  # the most a partition may last with a write in flight (see KafkaStores.__init__)


def _survivable(exc: KafkaException) -> KafkaError:
    """The error of ``exc`` when the producer survives it; ``exc`` itself is raised again when it is
    fatal or a fence (the producer can do nothing more: the write path replaces or stops it)."""
    err = kafka_error(exc)
    if err.fatal() or err.code() in _FENCING:
        raise exc
    return err


class StoreFencedError(ConnectError):
    """Another worker opened the same store topics: this store writes nothing any more, for good."""


class _TopicWriter:
    """The transactional producer of one store topic, and the transaction a failed write left open.

    ``unresolved`` is ``"abort"`` (the transaction failed and its abort did not complete) or
    ``"commit"`` (its commit timed out and goes on in the background: librdkafka allows no abort
    then, only another ``commit_transaction`` to learn the outcome); the next write ends it first.
    """

    __slots__ = ("topic", "transactional_id", "lock", "producer", "unresolved")

    def __init__(self, topic: str, transactional_id: str):
        self.topic, self.transactional_id = topic, transactional_id
        self.lock = threading.Lock()  # one transaction at a time per producer
        self.producer: Producer | None = None
        self.unresolved: str | None = None


class KafkaStores:
    """Connector configs, offsets and statuses on three compacted Kafka topics (see the module
    docstring for the layout). ``client_config`` (``security.protocol``, ``sasl.*``...) applies to
    the producers, the consumer and the admin client, except ``transactional.id`` (the prefix of
    the producers' ids) and ``transaction.timeout.ms`` (producers only); ``timeout_s`` bounds each
    broker operation. Opening the store takes its topics over from any earlier worker."""

    def __init__(self, bootstrap_servers: str, *, config_topic: str = "connect-configs",
                 offset_topic: str = "connect-offsets", status_topic: str = "connect-status",
                 replication_factor: int = 1, offset_partitions: int = 25,
                 client_config: Mapping[str, str] | None = None, timeout_s: float = 30.0):
        topics = (config_topic, offset_topic, status_topic)
        if len(set(topics)) != 3:
            raise ConnectError(f"the config, offset and status topics must be three different topics, got {topics}")
        if offset_partitions < 1 or replication_factor < 1:
            raise ConnectError("offset_partitions and replication_factor must be at least 1")
        self.bootstrap_servers = bootstrap_servers
        self.config_topic, self.offset_topic, self.status_topic = topics
        self.timeout_s = float(timeout_s)
        base = dict(client_config or {})
        # a producer setting made per topic here; the consumer and the admin client must not get it
        prefix = str(base.pop("transactional.id", "") or _TRANSACTIONAL_ID)
        self._base = {**base, "bootstrap.servers": bootstrap_servers}
        self._closed = False
        self._fenced: str | None = None  # the error every write raises once another worker took over
        self._writers = {topic: _TopicWriter(topic, f"{prefix}-{topic}") for topic in topics}

        # A write gives up after timeout_s, but its records stay queued and its commit goes on (up to
        # the transaction timeout): after a short partition it completes, whole. Records that time
        # out instead would need an epoch bump (KIP-360) to abort their transaction, which tansu
        # refuses (it answers InitProducerId with an unknown error, for ever), and a transaction
        # older than the timeout is aborted by the broker, which then fences this producer.
        try:
            txn_timeout_ms = int(base.pop("transaction.timeout.ms", _TXN_TIMEOUT_MS))
        except (TypeError, ValueError):
            raise ConnectError("transaction.timeout.ms of the store's client config must be a number of "
                               "milliseconds") from None
        self._producer_settings = {"acks": "all", "linger.ms": 2, "transaction.timeout.ms": txn_timeout_ms,
                                   "message.timeout.ms": txn_timeout_ms}  # librdkafka: at most the transaction's
        try:
            topics = StoreTopics(self._client(AdminClient, "admin", {}), self._client, bootstrap_servers, self.timeout_s)
            partitions = topics.ensure({config_topic: 1, offset_topic: offset_partitions, status_topic: 1},
                                       replication_factor, config_topic)
            # Take the topics over before reading them (after the checks, so that a worker refused
            # for a bad topic fences nobody): from here on no earlier worker can write, so the read
            # below sees its last write, and a transaction it left open has been aborted.
            with ThreadPoolExecutor(len(self._writers), thread_name_prefix="store-take-over") as pool:
                made = [(writer, pool.submit(self._new_producer, writer)) for writer in self._writers.values()]
            for writer, future in made:  # all three kept before any failure is raised, to be closed
                writer.producer = future.result() if future.exception() is None else None
            for _, future in made:
                future.result()
            records = topics.read_all(partitions)
        except BaseException:
            self.close()
            raise
        self.configs = KafkaConfigs(self, config_topic, records[config_topic])
        self.offsets = KafkaOffsets(self, offset_topic, partitions[offset_topic], records[offset_topic])
        self.statuses = KafkaStatuses(self, status_topic, partitions[status_topic], records[status_topic])

    # -- clients -----------------------------------------------------------------------------

    def _client(self, factory: Callable[[dict], Any], role: str, settings: Mapping[str, Any]):
        conf = {**self._base, **settings, "logger": logging.getLogger(f"{__name__}.{role}")}
        try:
            return factory(conf)
        except (KafkaException, ValueError, TypeError) as exc:
            raise ConnectError(f"cannot create the store's Kafka {role} for {self.bootstrap_servers}: {exc}") from exc

    def _new_producer(self, writer: _TopicWriter) -> Producer:
        """A producer of ``writer``'s transactional id, registered with the broker: this fences every
        earlier producer of that id (another worker's, or this store's own broken one) and aborts
        the transaction it left open."""
        producer = self._client(Producer, "producer", {**self._producer_settings,
                                                       "transactional.id": writer.transactional_id})
        try:
            producer.init_transactions(self.timeout_s)
        except KafkaException as exc:
            _close_producer(producer)
            err = kafka_error(exc)
            raise error_class(err)(f"cannot take over store topic {writer.topic!r} (transactional.id "
                                    f"{writer.transactional_id!r}): {err.str()}") from exc
        return producer


    @property
    def fenced(self) -> str | None:
        """Why this store writes nothing any more (another worker took its topics over), or None.
        The herder stops its connectors when it is set: their epochs would copy records whose
        offsets can never be committed."""
        return self._fenced

    # -- writes ------------------------------------------------------------------------------

    def _write(self, topic: str, partition: int, records: list[Record]) -> None:
        """Write ``records`` in order in one transaction and return once it is committed, or raise.

        The topic's writes take turns: its producer runs one transaction at a time. A producer in
        a fatal state (not fenced) is replaced and the write made once more; nothing of the failed
        transaction was committed, and the replacement's start aborts it at the broker.
        """
        writer = self._writers[topic]
        deadline = time.monotonic() + self.timeout_s
        with writer.lock:
            for attempt in range(2):
                self._check_writable(topic)
                try:
                    if writer.producer is None:
                        writer.producer = self._new_producer(writer)
                    self._settle(writer, deadline)
                    self._transact(writer, partition, records, deadline)
                    return
                except KafkaException as exc:  # fatal: the producer can do nothing more
                    err = kafka_error(exc)
                if err.code() in _FENCING:
                    raise self._fence(writer, err) from None
                log.warning("store topic %s: the producer failed for good (%s); %s", topic, err.str(),
                            "writing again with a new one" if attempt == 0 else "a new one is made at the next write")
                self._drop_producer(writer, broken=True)
        raise ConnectError(f"store topic {topic!r} partition {partition} did not take a write of {len(records)} "
                           f"record(s): the producer failed for good twice ({err.str()})")

    def _transact(self, writer: _TopicWriter, partition: int, records: list[Record], deadline: float) -> None:
        """Begin, produce, commit. A fatal error is raised as the KafkaException; any other one ends
        the transaction as far as it can and raises a RetriableError or ConnectError."""
        producer, committing = writer.producer, False
        producer.begin_transaction()
        writer.unresolved = "abort"  # from here on, a failure leaves a transaction to end
        try:
            for key, value in records:
                while True:
                    try:
                        producer.produce(writer.topic, value=value, key=key, partition=partition)
                        break
                    except BufferError:
                        if time.monotonic() > deadline:
                            raise KafkaException(KafkaError(KafkaError._TIMED_OUT_QUEUE,
                                                            "the producer queue stayed full")) from None
                        producer.poll(0.05)
            committing = True
            producer.commit_transaction(_remaining(deadline))
            writer.unresolved = None
            return
        except KafkaException as exc:
            err = _survivable(exc)
            what = (f"store topic {writer.topic!r} partition {partition}: a write of {len(records)} record(s) "
                    f"failed ({err.str()})")
            if committing and not err.txn_requires_abort() and (err.retriable() or err.code() == KafkaError._TIMED_OUT):
                # librdkafka goes on committing in the background and allows no abort now
                writer.unresolved = "commit"
                raise error_class(err)(f"{what}; its commit may still complete: it is committed or aborted, "
                                        "whole, before the next write to this topic") from exc
        self._abort(writer, deadline)
        raise error_class(err)(f"{what}; " + ("it was aborted" if writer.unresolved is None else
                                               "its abort is completed before the next write to this topic"))

    def _abort(self, writer: _TopicWriter, deadline: float) -> None:
        """Abort the open transaction; one that cannot be aborted yet stays ``unresolved``."""
        try:
            writer.producer.abort_transaction(_remaining(deadline))
            writer.unresolved = None
        except KafkaException as exc:
            err = _survivable(exc)
            log.debug("store topic %s: the abort is not complete yet: %s", writer.topic, err.str())

    def _settle(self, writer: _TopicWriter, deadline: float) -> None:
        """End the transaction an earlier failed write left open, before a new one begins."""
        if writer.unresolved is None:
            return
        try:
            if writer.unresolved == "commit":
                writer.producer.commit_transaction(_remaining(deadline))
                log.warning("store topic %s: an earlier write that raised has now been committed", writer.topic)
            else:
                writer.producer.abort_transaction(_remaining(deadline))
            writer.unresolved = None
            return
        except KafkaException as exc:
            err = _survivable(exc)
            if writer.unresolved == "commit" and err.txn_requires_abort():
                self._abort(writer, deadline)
                if writer.unresolved is None:
                    return
        raise error_class(err)(f"store topic {writer.topic!r}: the transaction of an earlier failed write is still "
                                f"open ({err.str()}); nothing more is written to this topic until it ends")

    def _check_writable(self, topic: str) -> None:
        if self._closed:
            raise ConnectError(f"cannot write to store topic {topic!r}: the stores are closed")
        if self._fenced is not None:
            raise StoreFencedError(self._fenced)

    def _fence(self, writer: _TopicWriter, err: KafkaError) -> StoreFencedError:
        """Stop writing, for good; the producer is kept, since a new one would fence the newer worker."""
        if self._fenced is None:
            topics = ", ".join(self._writers)
            self._fenced = (f"another worker took over store topics {topics}: it opened them with the same "
                            f"transactional ids ({', '.join(w.transactional_id for w in self._writers.values())}), "
                            f"which fenced this worker ({writer.topic}: {err.str()}). This worker must stop; "
                            "restart it only if no other worker uses these topics")
            log.error("%s", self._fenced)
        return StoreFencedError(self._fenced)

    def _drop_producer(self, writer: _TopicWriter, *, broken: bool) -> None:
        """Let go of the writer's producer. A broken one (in a fatal state, or with a transaction
        still open) is not closed, only released: its close would abort the transaction first,
        which fails or waits without a bound, and warn."""
        producer, writer.producer, writer.unresolved = writer.producer, None, None
        if producer is not None and not broken:
            _close_producer(producer)

    def close(self) -> None:
        """Wait for writes in progress (up to ``timeout_s`` each) and close the clients; idempotent."""
        if self._closed:
            return
        self._closed = True
        for writer in self._writers.values():
            if not writer.lock.acquire(timeout=self.timeout_s):
                log.warning("store topic %s: a write still runs at close; its producer is left to it", writer.topic)
                continue
            try:
                self._end_for_close(writer)
                self._drop_producer(writer, broken=writer.unresolved is not None or self._fenced is not None)
            finally:
                writer.lock.release()

    def _end_for_close(self, writer: _TopicWriter) -> None:
        """Give a transaction a failed write left open a last chance to end (a short one: the broker
        may be away). Still open, its records are purged: closing a producer waits for them (and
        for an abort) without a bound. The next worker to open the topics aborts it."""
        if writer.unresolved is None or writer.producer is None or self._fenced is not None:
            return
        try:
            self._settle(writer, time.monotonic() + min(self.timeout_s, 5.0))
            return
        except (ConnectError, KafkaException) as exc:
            log.warning("store topic %s: closed with the transaction of a failed write still open (%s); the next "
                        "worker to open the topics aborts it", writer.topic, exc)
        writer.producer.purge(in_queue=True, in_flight=True, blocking=False)


def _remaining(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.01)


def _close_producer(producer: Producer) -> None:
    close = getattr(producer, "close", None)  # confluent-kafka >= 2.13; before, it goes with its last reference
    if close is not None:
        try:
            close()
        except RuntimeError:  # already closed
            pass
