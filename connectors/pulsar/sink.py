"""Pulsar sink: batching producers per target topic, every send result tied to its own record.

- Target topic: ``topic`` (fixed) or ``topic.template`` (default ``{topic}``: the same name);
  short names are completed as ``persistent://public/default/<name>``. A name Pulsar refuses or
  misreads (:mod:`connectors.pulsar.names`) is caught by ``validate`` where it is known, else its
  records fail with that reason (:mod:`connect.sink.naming`); ``topic.illegal.chars=replace``
  replaces the refused characters (a ``/`` in the local name...), and the renamed topics are logged.
- Routing (``routing.mode``): ``partition`` (default) writes a record to the partition with its
  source partition index when the target topic has it (per-partition order kept as it was), else
  by key; ``key`` leaves it to Pulsar's key hashing (round robin for records without a key);
  ``single`` writes every record of a topic to one partition.
- Records map onto messages as :mod:`connectors.pulsar.mapping` says: key -> partition key,
  headers -> properties (the source-origin chain among them), timestamp -> event time.
- From a Kafka source, native batches (``connect.batch``): ``put_native`` sends from the consumed
  messages with the same fields and bookkeeping as ``put``, a record built only for a message that
  fails or is not sent.
- Every ``send_async`` gets a callback bound to its record and to the checkpoint it was put after
  (an asynchronous sink, see :mod:`connect.sink`). Callbacks run on the client's IO thread and only
  append to a queue; ``wait_outcomes`` serves that queue on the task's thread: failures are
  reported (transient ones re-sent by the runner, in order; permanent ones go to the hooks / DLQ),
  and every outcome counts its checkpoint down, so an epoch ends without draining.
- Schemas (PIP-87): a record that carries its source schema is published by a producer that
  declares that schema, so the destination registers it (under a version of its own) and
  consumers there can decode the data. Records without one use ``value.schema.type`` /
  ``value.schema.definition`` when set (e.g. Kafka -> Pulsar with a known Avro or JSON schema),
  else no schema. When a topic's records change schema, what was sent with the previous one is
  acknowledged first (order is kept across the switch). A schema the destination refuses as
  incompatible fails the task with that error: replication of the topic stops there and skips
  nothing; a registry that does not answer is retried.
- Outages only delay: producers have no send timeout (``send.timeout.ms`` 0, as the Kafka sink's
  ``message.timeout.ms``) and reconnect by themselves. The task never has more than
  ``max.pending.messages`` sends without an outcome, so Pulsar's own queue never refuses one; a
  send that finds no room within the epoch's time is reported transient with all that follow it.
- A transient failure holds its partition: nothing sent after a failed message to the same target
  (partition) topic goes out before the failed one is re-sent. The client alone does not keep that
  rule (its send timeout fails what is pending, and the producer takes the next sends at once), so
  the sink owns the timeout: the client's producers get none, and when a producer's oldest send has
  waited longer than ``send.timeout.ms`` (when set), or one of its sends failed transiently, the
  producer is *abandoned*: closing it fails every send it still holds, in order, and those records
  are reported transient (the rest of a batch being put then goes behind them); the runner re-sends
  them, in that order, through a new producer before it puts anything new. Producers are created
  on a thread of their own (``create_producer`` waits up to the client's operation timeout on a
  hung broker): a put waits for one until the epoch's deadline at most.
"""

from __future__ import annotations

import concurrent.futures
import logging
import operator
import threading
import time
from collections import deque
from itertools import repeat
from typing import Any, Callable, Iterator, Mapping, Sequence

from connect.batch import NativeBatch
from connect.config import ConfigDef
from connect.connector import SinkConnector
from connect.errors import ConfigIssue, DeliveryError, RetriableError
from connect.records import ConnectRecord, ValueSchema
from connect.sink import QueuedOutcomes, SinkTask
from connect.sink.naming import IllegalTopicName, TargetNames, naming_issues
from connectors.kafka.native import KIND as KAFKA_KIND
from connectors.pulsar.clients import CLIENTS, client_issues, client_settings
from connectors.pulsar.mapping import message_fields
from connectors.pulsar.names import PULSAR_NAMES
from connectors.pulsar.schemas import SchemaIncompatibleError, producer_schema, schema_types
from connectors.pulsar.sinkconfig import CONFIG, permanent_results, producer_options
from connectors.pulsar.source import partition_topic, split_partition

__all__ = ["PulsarSinkConnector", "PulsarSinkTask"]

log = logging.getLogger(__name__)

# What ``_send`` reads of a record (a native batch's messages are read with its codec's getters).
_RECORD_FIELDS = operator.attrgetter("topic", "partition", "value_schema", "key", "headers", "value", "timestamp")
_REFUSED = object()  # a payload that is no bytes (``_payload``)

class PulsarSinkConnector(SinkConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return CONFIG

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().validate(config) + client_issues(config) + naming_issues(config, PULSAR_NAMES)
        if str(config.get("chunking.enabled", "false")).lower() == "true" and \
                str(config.get("batching.enabled", "true")).lower() != "false":
            issues.append(ConfigIssue("chunking.enabled", "true", "needs batching.enabled=false (Pulsar does not "
                                      "chunk batched messages)"))
        declared = str(config.get("value.schema.type", "") or "")
        if declared:
            if declared.upper() not in schema_types():
                issues.append(ConfigIssue("value.schema.type", declared, "not a Pulsar schema type (one of "
                                          f"{', '.join(sorted(schema_types()))})"))
            elif not config.get("value.schema.definition") and declared.upper() in ("AVRO", "JSON", "PROTOBUF"):
                issues.append(ConfigIssue("value.schema.definition", None, f"value.schema.type={declared} needs the "
                                          "schema definition"))
        return issues

    @classmethod
    def target_issues(cls, config: Mapping[str, Any], source_topics: Sequence[str]) -> list[ConfigIssue]:
        return naming_issues(config, PULSAR_NAMES, source_topics)

    @classmethod
    def task_class(cls) -> type:
        return PulsarSinkTask

    @classmethod
    def side_writer(cls, config: Mapping[str, Any], topic: str):
        from connectors.pulsar.side import PulsarSideWriter

        return PulsarSideWriter(config, topic)

    def prepare_topics(self, source_topics: Mapping[str, int]) -> None:
        # Pulsar creates targets on first use: only the renamed and refused names are told here.
        if getattr(self, "_names", None) is None:  # kept: each rename is announced once
            self._names = TargetNames(CONFIG.parse(self.config), PULSAR_NAMES)
        self._names.announce(source_topics, log, f"connector {self.context.name}" if self.context else "pulsar sink")


class _Producer:
    """One target (partition) topic's producer, its schema, how many of its sends have no outcome
    yet, when the oldest of them was sent (with a send timeout), and why it was abandoned."""

    __slots__ = ("topic", "producer", "schema", "left", "sent_at", "abandoned")

    def __init__(self, topic: str, producer, schema: ValueSchema | None) -> None:
        self.topic = topic
        self.producer = producer
        self.schema = schema
        self.left = 0
        self.sent_at: deque[float] = deque()  # send times of the sends without an outcome, oldest first
        self.abandoned: str | None = None


def _close_quietly(producer) -> None:
    """Close on a thread of its own: the pending sends fail at once, the broker's answer may take
    the client's operation timeout (a hung broker)."""
    try:
        producer.close()
    except Exception:  # noqa: BLE001 - closing is best effort
        pass


class PulsarSinkTask(QueuedOutcomes, SinkTask):
    def start(self, config: Mapping[str, Any], context) -> None:
        import pulsar

        self._pulsar = pulsar
        cfg = CONFIG.parse(config)
        self._cfg = cfg
        self._route = TargetNames(cfg, PULSAR_NAMES)
        self._settings = client_settings(cfg)
        self._client = CLIENTS.acquire(self._settings)
        self._ok, self._permanent = permanent_results()
        self._producers: dict[str, _Producer] = {}  # target (partition) topic -> its producer
        self._timeout_ms = cfg["send.timeout.ms"]  # the sink's (the client's producers get none)
        self._failing: list[_Producer] = []  # producers with a transient failure served: abandoned next
        self._held_seq = 0  # transient failures held (self._reports), in the order served
        self._abandons = 0  # producers abandoned so far (a put sees whether one was, meanwhile)
        self._creating: dict[str, list] = {}  # topic -> [future of its producer, schema, a put waited already]
        declared = cfg["value.schema.type"].upper()
        self._declared = (ValueSchema(declared, cfg["value.schema.definition"], cfg["value.schema.name"])
                          if declared else None)
        self._targets: dict[str, tuple[str, int]] = {}  # source topic -> (target topic, partition count)
        self._init_outcomes()  # (record, gen, result) from the client's IO threads
        self._max_pending = cfg["max.pending.messages"]
        self._mode = cfg["routing.mode"]

    # -- producers --------------------------------------------------------------------------
    def _target(self, source_topic: str) -> tuple[str, int]:
        target = self._targets.get(source_topic)
        if target is None:
            name = self._route(source_topic)  # completed: persistent://tenant/ns/topic
            try:
                names = self._client.get_topic_partitions(name)
            except Exception as exc:  # noqa: BLE001 - pulsar raises its own exception types
                raise RetriableError(f"cannot look up target topic {name}: {exc}") from exc
            partitioned = any("-partition-" in n for n in names)
            target = self._targets[source_topic] = (name, len(names) if partitioned else 0)
        return target

    def _producer(self, topic: str, schema: ValueSchema | None) -> _Producer:
        current = self._producers.get(topic)
        if current is not None:
            if current.schema is schema or current.schema == schema:
                return current
            # A new schema on this topic: what the old producer sent is acknowledged first, so
            # the two producers' messages cannot interleave out of order.
            if not self.flush(None):
                raise RetriableError(f"records sent to {topic} before its schema changed are not acknowledged yet")
            if self._producers.get(topic) is current:
                self._producers.pop(topic)
                try:
                    current.producer.close()
                except Exception:  # noqa: BLE001 - closing is best effort
                    pass
        pulsar = self._pulsar
        creating = self._creating.get(topic)
        if creating is None or not (creating[1] is schema or creating[1] == schema):
            creating = self._creating[topic] = [self._create(topic, schema), schema, False]
        try:
            # The first put waits for it until the epoch's deadline; later ones do not wait while
            # it is under way (a hung broker answers after the client's operation timeout).
            wait = 0 if creating[2] else min(max(self.context.time_left(), 0), threading.TIMEOUT_MAX)
            producer = creating[0].result(timeout=wait)
        except concurrent.futures.TimeoutError:
            creating[2] = True
            raise RetriableError(f"no producer on {topic} yet: Pulsar did not answer in time") from None
        except pulsar.IncompatibleSchema as exc:
            self._creating.pop(topic, None)
            raise SchemaIncompatibleError(
                f"{topic} refused the {schema.type if schema else 'BYTES'} schema {schema.name if schema else ''!r} "
                f"as incompatible ({exc}): replication of this topic stops here and skips nothing (PIP-87). Make "
                "the destination accept the schema (compatibility strategy, or register it there), then restart "
                "the task") from exc
        except Exception as exc:  # noqa: BLE001
            self._creating.pop(topic, None)
            raise RetriableError(f"cannot create a producer on {topic}: {exc}") from exc
        self._creating.pop(topic, None)
        state = self._producers[topic] = _Producer(topic, producer, schema)
        return state

    def _create(self, topic: str, schema: ValueSchema | None) -> concurrent.futures.Future:
        """``create_producer`` on a thread of its own: it blocks up to the client's operation timeout
        (30 s by default) when Pulsar does not answer, and an epoch is a bound."""
        options = {**producer_options(self._cfg, self._pulsar), "send_timeout_millis": 0}  # the sink's timeout
        if schema:
            options["schema"] = producer_schema(schema)
        client, future = self._client, concurrent.futures.Future()

        def create() -> None:
            try:
                future.set_result(client.create_producer(topic, **options))
            except BaseException as exc:  # noqa: BLE001 - handed to the put that waits for it
                future.set_exception(exc)

        threading.Thread(target=create, name="pulsar-sink-producer", daemon=True).start()
        return future

    # -- data -------------------------------------------------------------------------------
    def put(self, records: Sequence[ConnectRecord]) -> None:
        self._send(map(_RECORD_FIELDS, records), records.__getitem__, lambda i: records[i:], len(records))

    # Kafka's native batches (``connectors.kafka.native``): a Kafka -> Pulsar pair sends straight
    # from the consumed messages, without a record per message.
    native_kinds = frozenset({KAFKA_KIND})

    def put_native(self, batch: NativeBatch) -> None:
        """``put`` for a batch of consumed Kafka messages: the same fields as ``put`` takes from a
        record (topic or a stage's overlay, partition, key, headers or a stage's overlay, value,
        timestamp), read with the batch's getters (``NativeBatch.columns``) at the client's C
        speed; a record is built only for a message that fails, is refused or is not sent."""
        topics, partitions, keys, headers, values, timestamps = batch.columns()
        fields = zip(topics, partitions, repeat(None), keys, headers, values, timestamps)
        self._send(fields, batch.record, batch.records, len(batch.items))

    def _send(self, fields: Iterator[tuple], record_at: Callable[[int], ConnectRecord],
              rest: Callable[[int], Sequence[ConnectRecord]], count: int) -> None:
        """Send ``count`` messages, each from its ``fields`` (source topic, partition hint, value
        schema, key, headers, value, timestamp); ``record_at(i)``: the record of message ``i``
        (built only when a failure must name it), ``rest(i)``: the records from ``i`` on."""
        abandons = self._abandons
        self._serve()
        self._check_timeouts()
        if self._abandons != abandons:  # earlier records fail now: this batch goes behind them, as a whole
            self._behind_abandoned(rest(0))
            return
        gen = self._gen
        outcomes = self._outcomes
        arrived = self._arrived
        ready = arrived.is_set
        timed = self._timeout_ms > 0
        declared = self._declared
        by_partition = self._mode == "partition"
        reporter = self.context.errant_record_reporter
        now = time.monotonic()
        sent = 0
        last = None  # (source topic, partition hint, schema) of the previous message, and its producer
        try:
            for i, (source_topic, part, schema, key, headers, value, ts) in enumerate(fields):
                if self._pending >= self._max_pending:
                    if not self._room(rest, i, count, abandons):
                        break
                    now = time.monotonic()
                schema = schema or declared
                if last is not None and last[0] == source_topic and last[1] == part and last[2] is schema:
                    state = last[3]  # routed as the previous message (no producer was abandoned meanwhile)
                else:
                    try:
                        topic, partitions = self._target(source_topic)
                        if by_partition and partitions and part is not None and part < partitions:
                            topic = partition_topic(topic, part)
                        state = self._producer(topic, schema)
                    except RetriableError as exc:  # target unreachable: this record and the rest wait, in order
                        self._reports.not_sent(rest(i), str(exc))
                        break
                    except IllegalTopicName as exc:  # no Pulsar will take it: permanent, with the fix in the message
                        reporter.report(record_at(i), exc)
                        last = None
                        continue
                    if self._abandons != abandons:  # (a schema change waited for outcomes)
                        self._behind_abandoned(rest(i))
                        break
                    last = (source_topic, part, schema, state)
                key, properties, ordering = message_fields(key, headers)
                if value is not None and value.__class__ is not bytes:
                    value = self._payload(value, record_at, i)
                    if value is _REFUSED:
                        continue

                def done(res, mid, i=i, gen=gen, state=state):
                    outcomes.append((record_at, i, gen, res, mid, state))
                    if not ready():  # set already: the task's thread has not served the queue since
                        arrived.set()

                try:
                    # pulsar-client's public send_async: a None value is Pulsar's null value (a
                    # tombstone on compacted topics), as a Kafka tombstone is; an empty key is no
                    # key (it sets only a non-empty partition key).
                    state.producer.send_async(value, done, properties=properties or None, partition_key=key,
                                              ordering_key=ordering.decode("utf-8", "replace") if ordering is not None
                                              else None, event_timestamp=ts or None)
                except Exception as exc:  # noqa: BLE001 - refused before sending
                    self._refused(record_at(i), rest, i, exc)
                    break
                sent += 1
                self._pending += 1
                state.left += 1
                if timed:
                    state.sent_at.append(now)
        finally:
            gen.left += sent

    def _room(self, rest: Callable[[int], Sequence[ConnectRecord]], i: int, count: int, abandons: int) -> bool:
        """Wait for room below ``max.pending.messages``; False when message ``i`` and the rest of the
        ``count`` are not sent now (reported so): a producer was abandoned meanwhile, or the deadline came."""
        room = self._wait_for_room(self._max_pending)
        if self._abandons != abandons:
            self._behind_abandoned(rest(i))
            return False
        if not room:
            self._reports.not_sent(rest(i), f"{self._pending} sends without an outcome (max.pending.messages) "
                                   f"until the epoch deadline; {count - i} record(s) not sent yet", backpressure=True)
        return room

    def _payload(self, value, record_at: Callable[[int], ConnectRecord], i: int):
        """A bytes-like value as bytes; ``_REFUSED`` (reported permanent) when it is no bytes at all."""
        try:
            return bytes(value)
        except TypeError:
            r = record_at(i)
            self.context.errant_record_reporter.report(r, DeliveryError(
                f"record {r.position()} has a {type(value).__name__} value: Pulsar payloads are bytes "
                "(set the sink's value.converter)"))
            return _REFUSED

    def _behind_abandoned(self, records: Sequence[ConnectRecord]) -> None:
        """``records`` were not sent because a producer was abandoned meanwhile: they go behind the
        abandoned producer's records, which are re-sent first."""
        self._reports.not_sent(records, "not sent: earlier records are re-sent first (a producer was abandoned)")

    def _refused(self, r: ConnectRecord, rest: Callable[[int], Sequence[ConnectRecord]], i: int,
                 exc: Exception) -> None:
        text = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, (self._pulsar.MessageTooBig, TypeError, ValueError)):
            self.context.errant_record_reporter.report(r, DeliveryError(f"record {r.position()} refused: {text}"))
            self._reports.not_sent(rest(i + 1), "not sent yet: behind a refused record")
        else:
            self._reports.not_sent(rest(i), f"record {r.position()} not sent: {text}")

    def _serve(self) -> int:
        served = self._serve_queued()
        while self._failing:  # a transient failure: nothing behind it in its producer may go out first
            state = self._failing.pop()
            if state.abandoned is None:
                served += self._abandon(state, "not confirmed: the producer was abandoned after a transient failure "
                                               "of an earlier send")
        self._reports.report_held()  # every producer they were sent by is abandoned
        return served

    def _serve_queued(self) -> int:
        outcomes = self._outcomes
        ok, permanent = self._ok, self._permanent
        served = 0
        positions = self.context.positions
        while outcomes:
            record_at, i, gen, res, mid, state = outcomes.popleft()
            state.left -= 1
            if state.sent_at:
                state.sent_at.popleft()  # a producer's outcomes come in its send order
            if res != ok:
                r = record_at(i)
                if res in permanent:
                    self.context.errant_record_reporter.report(r, DeliveryError(
                        f"record {r.position()} refused by Pulsar: {res}"))
                else:  # held until its producer is abandoned (served in its send order)
                    self._held_seq += 1
                    self._reports.hold(self._held_seq, r, RetriableError(
                        f"record {r.position()} {state.abandoned}; re-sent in order" if state.abandoned is not None
                        else f"record {r.position()} not delivered: {res}"))
                    if state.abandoned is None:
                        self._failing.append(state)
            elif positions is not None:  # offset syncs: where it landed
                self._ack_position(positions, record_at(i), mid, state.topic)
            gen.left -= 1
            served += 1
        self._pending -= served
        return served

    def wait_outcomes(self, timeout: float) -> None:
        super().wait_outcomes(timeout)
        self._check_timeouts()

    def _check_timeouts(self) -> None:
        """Abandon each producer whose oldest send has waited longer than send.timeout.ms."""
        if self._timeout_ms <= 0:
            return
        limit = time.monotonic() - self._timeout_ms / 1000
        expired = [s for s in self._producers.values() if s.sent_at and s.sent_at[0] < limit]
        for state in expired:
            self._abandon(state, f"timed out after {self._timeout_ms} ms (send.timeout.ms): the producer was abandoned")
        if expired:
            self._serve()  # a failure of another producer served meanwhile; the held ones reported

    def _abandon(self, state: _Producer, why: str) -> int:
        """Close the producer (on a thread: the pending sends fail at once, in order, while the
        broker's answer may take long), serve the failed sends (reported transient, ``why``) and let
        the next send to its topic create a new producer. Returns how many outcomes were served."""
        self._abandons += 1
        state.abandoned = why
        state.sent_at.clear()
        if self._producers.get(state.topic) is state:
            del self._producers[state.topic]
        log.warning("[%s] producer of %s: %s; its %d send(s) without an outcome are re-sent in order", self.context.task_id,
                    state.topic, why, state.left)
        threading.Thread(target=_close_quietly, args=(state.producer,), name="pulsar-sink-close", daemon=True).start()
        served = 0
        deadline = time.monotonic() + 5.0  # the failures arrive at once; bounded all the same
        while True:
            served += self._serve_queued()
            if state.left <= 0 or time.monotonic() >= deadline:
                break
            self._arrived.wait(0.02)
            self._arrived.clear()
        return served

    @staticmethod
    def _ack_position(positions, r: ConnectRecord, mid, topic: str) -> None:
        base, part = split_partition(topic)
        if mid.partition() >= 0:
            part = mid.partition()
        positions.ack(r, base, part, (mid.ledger_id(), mid.entry_id(), mid.batch_index()))

    def flush(self, offsets) -> bool:
        """Every outcome served, at most ``context.time_left()``; False if time ran out first.

        Producers are not flushed: pulsar-client's public ``Producer.flush`` blocks without a
        bound (an outage would hold the epoch), and a batch leaves by itself within
        ``batching.max.publish.delay.ms``; only the outcomes are waited for."""
        return self._settle_all()

    def stop(self) -> None:
        for future, _schema, _waited in getattr(self, "_creating", {}).values():
            future.add_done_callback(lambda f: f.exception() is None and _close_quietly(f.result()))
        for state in self._producers.values():
            try:
                state.producer.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        self._producers = {}
        if getattr(self, "_client", None) is not None:
            CLIENTS.release(self._settings)
            self._client = None
