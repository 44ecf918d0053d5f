"""RocketMQ sink: batched, pipelined sends with this project's client, every result tied to its
records.

- Target topic: ``topic`` (fixed) or ``topic.template`` (default ``{topic}``). A name RocketMQ
  refuses (:mod:`connectors.rocketmq.names`: Kafka's ``orders.created``) is caught by ``validate``
  where it is known, else its records fail with that reason (:mod:`connect.sink.naming`); with
  ``topic.illegal.chars=replace`` each refused character becomes ``_``, as the metadata connectors
  map names, and the renamed topics are logged when the connector prepares them. With
  ``auto.create.topics`` the connector creates missing targets with the source's queue (or
  partition) count before the first epoch, on the broker that serves ``TBW102``, and grows a
  target whose source gained queues (spread over the target's brokers, never shrinking).
- Queue selection (``queue.selection``): ``source`` (default) writes a record to the queue with its
  source queue (or partition) id, modulo the target's queue count, so queue-level order is kept
  when the target has as many queues (queue-level replication); records without a source queue
  go by key. ``key``: a CRC32 of the key picks the queue (records without key go round robin).
  ``round_robin``.
- Consecutive records for one queue are sent as one SEND_BATCH_MESSAGE (up to ``batch.size``
  messages and ``batch.max.bytes``); every batch is a future whose outcome, served on the task's
  thread by ``wait_outcomes``, counts its records down (an asynchronous sink: epochs end without
  draining).
- A transient failure holds its queue: at most ``max.in.flight.batches.per.queue`` (default 1)
  batches to one queue are in flight; the next waits in the sink and is sent, from the client's
  thread, as soon as the one before it is confirmed. When a batch fails, nothing later for that
  queue is sent: the batches waiting behind it are reported transient after it, and the runner
  re-sends them all, in order, before anything new, so queue (key) order holds through a broker
  that hangs or times out. Queues do not wait for one another. Batches that piled up behind the
  one in flight go out together (up to ``batch.max.bytes`` and 4 x ``batch.size`` messages), so a
  round trip per queue costs little throughput. A limit above 1 pipelines sends to one queue, but
  a later batch may then land before a failed one is re-sent.
- Transient failures (no answer in time, lost connections, SYSTEM_BUSY/SYSTEM_ERROR, and sends the
  broker stored without confirming the requested flush: FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT,
  SLAVE_NOT_AVAILABLE) are reported transient and re-sent. A batch refused for good (e.g.
  MESSAGE_ILLEGAL) is sent again one record at a time, in order and ahead of the batches waiting
  for its queue, so only the records the broker refuses themselves go to the failed-message hooks /
  dead-letter destination.
- Records become messages as :mod:`connectors.rocketmq.mapping` says; the record's timestamp is the
  message's born timestamp (a batch carries one born timestamp: records whose own differs keep it
  in property ``CONNECT_BORN_TIMESTAMP``, which the source reads back).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections import deque
from functools import partial
from typing import Any, Mapping, Sequence

from connect.config import ConfigDef
from connect.connector import SinkConnector
from connect.errors import ConfigIssue, ConnectError, DeliveryError, RetriableError
from connect.records import ConnectRecord
from connect.sink import Outstanding, QueuedOutcomes, SinkTask
from connect.sink.naming import IllegalTopicName, TargetNames, naming_issues
from connectors.rocketmq.clients import CLIENTS, client_issues, client_settings
from connectors.rocketmq.mapping import BORN_TIMESTAMP, message_body, message_properties
from connectors.rocketmq.models import DEFAULT_TOPIC
from connectors.rocketmq.names import ROCKETMQ_NAMES
from connectors.rocketmq.sinkconfig import CONFIG, MAX_MESSAGE_SIZE, Target

__all__ = ["RocketMQSinkConnector", "RocketMQSinkTask"]

log = logging.getLogger(__name__)

class RocketMQSinkConnector(SinkConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return CONFIG

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        return super().validate(config) + client_issues(config) + naming_issues(config, ROCKETMQ_NAMES)

    @classmethod
    def target_issues(cls, config: Mapping[str, Any], source_topics: Sequence[str]) -> list[ConfigIssue]:
        return naming_issues(config, ROCKETMQ_NAMES, source_topics)

    @classmethod
    def task_class(cls) -> type:
        return RocketMQSinkTask

    @classmethod
    def side_writer(cls, config: Mapping[str, Any], topic: str):
        from connectors.rocketmq.side import RocketMQSideWriter

        return RocketMQSideWriter(config, topic)

    def prepare_topics(self, source_topics: Mapping[str, int]) -> None:
        cfg = CONFIG.parse(self.config)
        if getattr(self, "_names", None) is None:  # kept: each rename is announced once
            self._names = TargetNames(cfg, ROCKETMQ_NAMES)
        self._names.announce(source_topics, log, f"connector {self.context.name}" if self.context else "rocketmq sink")
        if not cfg["auto.create.topics"]:
            return
        from connectors.rocketmq.remoting import TopicNotFoundError
        from connectors.rocketmq.system import created_by_sends_only

        targets, _refused, _ = self._names.plan(source_topics)  # refused ones were just logged
        wanted: dict[str, int] = {}
        for topic, target in targets.items():  # several sources in one target: the most queues
            if created_by_sends_only(target):  # the first send creates it from TBW102 (see _target)
                continue
            wanted[target] = max(wanted.get(target, 0), source_topics[topic])
        settings = client_settings(cfg)
        client = CLIENTS.acquire(settings)
        try:
            broker = None
            for target, queues in wanted.items():
                try:
                    _grow(client, target, client.topic_route(target), queues)
                    continue
                except TopicNotFoundError:
                    pass
                if broker is None:
                    broker = _creation_broker(client)
                client.create_topic(broker, target, max(queues, 1), max(queues, 1))
                log.info("created target topic %s with %d queue(s) on %s", target, queues, broker)
        except ConnectError as exc:
            raise RetriableError(f"cannot create the target topics on {cfg['namesrv.addr']}: {exc}") from exc
        finally:
            CLIENTS.release(settings)


def _grow(client, topic: str, route, queues: int) -> None:
    """Give an existing target at least the source's queue count, as MM2 grows target partitions:
    with fewer, the source's new queues would share target queues and their order would mix."""
    from connectors.rocketmq.metadata import spread_queues

    if sum(q.write_queue_nums for q in route.queue_datas) >= queues:
        return
    addrs = {b.broker_name: b.master_addr for b in route.broker_datas if b.master_addr}
    current = {name: client.all_topic_configs(addr).get(topic) for name, addr in addrs.items()}
    for name, tc in spread_queues(topic, queues, current).items():
        if tc != current[name]:
            client.create_topic(addrs[name], topic, tc.read_queue_nums, tc.write_queue_nums, tc.perm,
                                topic_filter_type=tc.topic_filter_type, topic_sys_flag=tc.topic_sys_flag, order=tc.order)
            log.info("grew target topic %s on %s to %d write queue(s), as its source has %d", topic, name,
                     tc.write_queue_nums, queues)


def _creation_broker(client) -> str:
    """The master of a broker that serves TBW102 (the one brokers auto-create topics from)."""
    route = client.topic_route(DEFAULT_TOPIC)
    for b in route.broker_datas:
        if b.master_addr:
            return b.master_addr
    raise ConnectError("no broker with a master address serves TBW102: create the target topics first, or let a "
                       "broker auto-create them")


class _Lane:
    """The sends to one target queue: how many are in flight, the batches waiting their turn
    (oldest first: [records, messages, checkpoint, bytes, alone]), and whether a failure holds the
    queue until the task's thread has sorted it out."""

    __slots__ = ("target", "index", "busy", "waiting", "blocked")

    def __init__(self, target: Target, index: int) -> None:
        self.target = target
        self.index = index
        self.busy = 0
        self.waiting: deque[list] = deque()
        self.blocked = False


class RocketMQSinkTask(QueuedOutcomes, SinkTask):
    def start(self, config: Mapping[str, Any], context) -> None:
        cfg = CONFIG.parse(config)
        self._cfg = cfg
        self._route = TargetNames(cfg, ROCKETMQ_NAMES)
        self._settings = client_settings(cfg)
        self._client = CLIENTS.acquire(self._settings)
        self._targets: dict[str, Target] = {}
        self._selection = cfg["queue.selection"]
        self._tag = cfg["tag"] or None
        self._group = cfg["producer.group"]
        self._batch = cfg["batch.size"]
        self._batch_bytes = cfg["batch.max.bytes"]
        self._max_pending = cfg["max.pending.messages"]
        self._max_batches = cfg["max.in.flight.batches.per.queue"]
        self._merge_count = 4 * self._batch
        self._lanes: dict[tuple[str, str, int], _Lane] = {}  # (topic, broker name, queue id) -> its sends
        self._lock = threading.RLock()  # lanes: the task's thread and the client's thread (done callbacks)
        self._init_outcomes()  # (records, messages, target, queue index, gen, lane, future) from the client's thread
        self._failed_sends = 0  # transient send failures served so far

    def _target(self, source_topic: str) -> Target:
        """The target's route, kept. A system-named target that does not exist yet (Apache RocketMQ
        creates ``rmq_sys_*`` only from a send) is sent to through TBW102's first queue, as
        RocketMQ's producer does, so its first send creates it; that route is not kept: the next
        ``put`` looks the created topic up."""
        from connectors.rocketmq.remoting import TopicNotFoundError
        from connectors.rocketmq.system import created_by_sends_only

        target = self._targets.get(source_topic)
        if target is None:
            name = self._route(source_topic)
            try:
                route = self._client.topic_route(name)
            except TopicNotFoundError as exc:
                if not created_by_sends_only(name):
                    raise RetriableError(f"cannot look up target topic {name}: {exc}") from exc
                return Target.through_default_topic(name, self._client.topic_route(DEFAULT_TOPIC))
            except RetriableError:
                raise
            except ConnectError as exc:
                raise RetriableError(f"cannot look up target topic {name}: {exc}") from exc
            target = self._targets[source_topic] = Target(name, route)
        return target

    def _queue_index(self, target: Target, r: ConnectRecord) -> int:
        if self._selection == "source" and r.partition is not None:
            return r.partition % len(target.queues)
        if self._selection == "round_robin":
            return next(target.rr) % len(target.queues)
        return target.key_index(r.key)

    # -- data -------------------------------------------------------------------------------------
    def put(self, records: Sequence[ConnectRecord]) -> None:
        batches: dict[tuple[int, int], list] = {}  # (target id, queue index) -> [target, index, records, messages, bytes]
        order: list[tuple[int, int]] = []
        report = self.context.errant_record_reporter.report
        tag, most, most_bytes = self._tag, self._batch, self._batch_bytes
        room = self._max_pending - self._pending  # records this put may still batch before it waits
        source_topic, target = None, None  # the previous record's topic and its target
        for i, r in enumerate(records):
            if room <= 0:
                self._send_all(batches, order)
                batches, order = {}, []
                failed = self._failed_sends
                if not self._wait_for_room(self._max_pending):
                    self._reports.not_sent(records[i:], f"{self._pending} sends without an outcome "
                                           "(max.pending.messages) until the epoch deadline; "
                                           f"{len(records) - i} record(s) not sent yet", backpressure=True)
                    return
                if self._failed_sends != failed:
                    # A send failed while this put waited: what it failed is re-sent first, and the
                    # rest of the put must not reach its queue (now free again) before it.
                    self._reports.not_sent(records[i:], f"{len(records) - i} record(s) not sent yet: an earlier send "
                                           "failed, re-sent first")
                    return
                room = self._max_pending - self._pending
                source_topic = None  # outcomes were served: a failure may have dropped a target's route
            if r.topic != source_topic:
                try:
                    target = self._target(r.topic)
                except RetriableError as exc:  # the target cannot be looked up: this record and the rest wait, in order
                    self._send_all(batches, order)
                    self._reports.not_sent(records[i:], f"{len(records) - i} record(s) not sent: {exc}")
                    return
                except IllegalTopicName as exc:  # no RocketMQ will take it: permanent, with the fix in the message
                    report(r, exc)
                    source_topic = None
                    continue
                source_topic = r.topic
            value = r.value
            if value is not None and value.__class__ is not bytes:
                try:
                    value = bytes(value)
                except TypeError:
                    report(r, DeliveryError(f"record {r.position()} has a {type(value).__name__} value: RocketMQ "
                                            "bodies are bytes (set the sink's value.converter)"))
                    continue
            body = message_body(value)
            if len(body) > MAX_MESSAGE_SIZE:
                report(r, DeliveryError(f"record {r.position()}: a body of {len(body)} bytes is larger than "
                                        f"RocketMQ's {MAX_MESSAGE_SIZE}"))
                continue
            props = message_properties(r.key, value, r.headers, tag)
            index = self._queue_index(target, r)
            slot = (id(target), index)
            batch = batches.get(slot)
            if batch is not None and (len(batch[2]) >= most or batch[4] + len(body) > most_bytes):
                self._send(batch)
                del batches[slot]
                batch = None
            if batch is None:
                batch = batches[slot] = [target, index, [], [], 0]
                order.append(slot)
            batch[2].append(r)
            batch[3].append((body, props, r.timestamp))
            batch[4] += len(body)
            room -= 1
        self._send_all(batches, order)

    def _send_all(self, batches: dict, order: list) -> None:
        for slot in order:
            batch = batches.pop(slot, None)  # a slot is in order once per batch opened on it
            if batch is not None:
                self._send(batch)

    def _send(self, batch: list, gen: Outstanding | None = None) -> None:
        """Send one batch, or queue it behind what is in flight to its queue; its outcome counts
        down ``gen`` (the open checkpoint unless given)."""
        target, index, records, messages, size = batch
        self._queue(target, index, [[records, messages, gen or self._gen, size, False]])

    def _queue(self, target: Target, index: int, parts: list[list], front: bool = False) -> None:
        """Count ``parts`` pending and queue them for their queue (in front of what waits: a re-send)."""
        q = target.queues[index]
        key = (target.topic, q.broker_name, q.queue_id)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane(target, index)
        for part in parts:
            n = len(part[0])
            self._pending += n
            part[2].left += n
        with self._lock:
            lane.target, lane.index = target, index
            if front:
                lane.waiting.extendleft(reversed(parts))
            else:
                lane.waiting.extend(parts)
            if not lane.blocked:
                self._pump(lane)

    def _pump(self, lane: _Lane) -> None:
        """Send what waits for the queue while it has room (holding the lock: a queue's sends are
        submitted in its order). Batches that waited go together, up to batch.max.bytes and
        4 x batch.size messages: one round trip for what piled up while the one before was in flight."""
        waiting = lane.waiting
        while waiting and lane.busy < self._max_batches and not lane.blocked:
            parts = [waiting.popleft()]
            if not parts[0][4]:
                count, size = len(parts[0][0]), parts[0][3]
                while waiting and not waiting[0][4] and count + len(waiting[0][0]) <= self._merge_count \
                        and size + waiting[0][3] <= self._batch_bytes:
                    part = waiting.popleft()
                    parts.append(part)
                    count += len(part[0])
                    size += part[3]
            lane.busy += 1
            self._dispatch(lane, parts)

    def _dispatch(self, lane: _Lane, parts: list[list]) -> None:
        target, index = lane.target, lane.index
        if len(parts) == 1:
            records, messages = parts[0][0], parts[0][1]
        else:
            records = [r for part in parts for r in part[0]]
            messages = [m for part in parts for m in part[1]]
        q = target.queues[index]
        addr = target.addrs[index]
        born = messages[0][2] or None
        try:
            if len(messages) == 1:
                body, props, _ts = messages[0]
                fut = self._client.send(addr, target.topic, q.queue_id, body, props, producer_group=self._group,
                                        born_timestamp=born, broker_name=None)
            else:
                items = []
                for body, props, ts in messages:
                    if ts and ts != born:
                        props[BORN_TIMESTAMP] = str(ts)
                    items.append((body, props))
                fut = self._client.send_batch(addr, target.topic, q.queue_id, items, producer_group=self._group,
                                              born_timestamp=born)
        except Exception as exc:  # noqa: BLE001 - a closed client: an outcome like any other
            fut = concurrent.futures.Future()
            fut.set_exception(RetriableError(f"send not submitted: {exc}"))
        fut.add_done_callback(partial(self._done, (records, messages, target, index, parts, lane)))

    def _done(self, item: tuple, fut) -> None:
        """On the client's thread: queue the outcome; send what waits for the queue if this send
        was confirmed, else hold the queue for the task's thread (re-send or split first)."""
        exc = fut.exception()
        confirmed = exc is None and fut.result().ok
        self._arrive((*item, fut))
        lane = item[5]
        with self._lock:
            lane.busy -= 1
            if not confirmed:
                lane.blocked = True
            elif not lane.blocked:
                self._pump(lane)

    # -- outcomes ---------------------------------------------------------------------------------
    def _serve(self) -> int:
        outcomes = self._outcomes
        served = 0
        while outcomes:
            records, messages, target, index, parts, lane, fut = outcomes.popleft()
            n = len(records)
            self._pending -= n
            for part in parts:
                part[2].left -= len(part[0])
            served += n
            exc = fut.exception()
            if exc is None:
                result = fut.result()
                if not result.ok:
                    self._failed_sends += 1
                    self._reports.transient(records, RetriableError(
                        f"{n} record(s) stored by {target.addrs[index]} without the requested flush "
                        f"({result.status}): sent again"))
                    served += self._release(lane, fail=result.status)
                elif self.context.positions is not None:  # offset syncs: where they landed
                    q = target.queues[index]
                    label = (q.broker_name, q.queue_id)
                    ack = self.context.positions.ack
                    for i, r in enumerate(records):  # a batch takes consecutive queue offsets
                        ack(r, target.topic, label, result.queue_offset + i)
                continue
            if isinstance(exc, RetriableError):
                self._failed_sends += 1
                self._reports.transient(records, RetriableError(f"{n} record(s) not delivered to {target.topic}: {exc}"))
                self._targets = {k: t for k, t in self._targets.items() if t is not target}  # route looked up again
                served += self._release(lane, fail=exc)
            elif n > 1:
                # Refused as a batch: each record on its own, in order, ahead of what waits for the
                # queue, so only those the broker refuses fail (still counted by their checkpoints).
                if self.context.positions is not None:  # sent after later batches: no offset syncs from them
                    self.context.positions.mark_resent(records)
                singles = [[[r], [m], part[2], len(m[0]), True]
                           for part in parts for r, m in zip(part[0], part[1], strict=True)]
                self._queue(target, index, singles, front=True)
                served += self._release(lane)
            else:
                self.context.errant_record_reporter.report(records[0], DeliveryError(
                    f"record {records[0].position()} refused by {target.addrs[index]}: {exc}"))
                served += self._release(lane)
        return served

    def _release(self, lane: _Lane, fail=None) -> int:
        """The task's thread has sorted out a send that was not confirmed: the queue goes on. After
        a transient failure (``fail``), the batches waiting for the queue are reported transient
        behind it, in order (the runner re-sends them all before anything new). Returns how many
        records that settled."""
        with self._lock:
            waiting = list(lane.waiting) if fail is not None else []
            if fail is not None:
                lane.waiting.clear()
            lane.blocked = False
            self._pump(lane)
        settled = 0
        for records, _messages, gen, _size, _alone in waiting:
            n = len(records)
            self._pending -= n
            gen.left -= n
            settled += n
            # transient, not NotSentError: they go out right behind the failed batch of their queue
            self._reports.transient(records, RetriableError(
                f"{n} record(s) not sent to {lane.target.topic}: an earlier send to the queue failed ({fail}); "
                "re-sent behind it"))
        return settled

    def flush(self, offsets) -> bool:
        return self._settle_all()

    def stop(self) -> None:
        if getattr(self, "_client", None) is not None:
            CLIENTS.release(self._settings)
            self._client = None
