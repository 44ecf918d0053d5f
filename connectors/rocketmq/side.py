"""The RocketMQ sink's side writer (:mod:`connect.sink.side`): dead letters and offset syncs.

Sends with this project's remoting client (the pooled one of the sink's connection keys: for the
dead-letter topic with the ``dlq.*`` overrides applied), one SEND_MESSAGE_V2 per record, its
future bound to its record. Records become messages as the sink's
(:mod:`connectors.rocketmq.mapping`: a record without value is a one-byte body marked
``CONNECT_NULL_VALUE``); the queue is picked by the key's CRC32 (round robin without a key). A
topic the name server does not know is sent to through a broker serving ``TBW102``, as RocketMQ's
own producer does, so a broker that auto-creates topics creates it; one that does not answers
TOPIC_NOT_EXIST, a transient failure whose message says to create the topic.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any, Mapping

from connect.errors import ConnectError, DeliveryError, RetriableError
from connect.records import ConnectRecord
from connect.sink.side import QueuedSideWriter, time_left
from connectors.rocketmq.clients import CLIENTS, client_settings
from connectors.rocketmq.mapping import message_body, message_properties
from connectors.rocketmq.models import DEFAULT_TOPIC
from connectors.rocketmq.sinkconfig import CONFIG, MAX_MESSAGE_SIZE, Target

__all__ = ["RocketMQSideWriter"]


class RocketMQSideWriter(QueuedSideWriter):
    def __init__(self, config: Mapping[str, Any], topic: str) -> None:
        cfg = CONFIG.parse(config)
        super().__init__(topic, cfg["max.pending.messages"])
        self._cfg = cfg
        self._settings = client_settings(cfg)
        self._client = None
        self._target: Target | None = None
        self._stale = False  # a send failed since the last lookup: look the route up again
        self._lookup_at = 0.0  # not before then (a lookup that failed, or a stale route, waits)

    def _ready(self, deadline: float) -> None:
        """The topic's route, looked up again (at most every ``ready_pause_s``) once a send
        failed: the route may have changed, or the topic appeared. Until that lookup succeeds, a
        route known sends on."""
        if self._target is not None and (not self._stale or time.monotonic() < self._lookup_at):
            return
        self._lookup_at = time.monotonic() + self.ready_pause_s
        try:
            self._target, self._stale = self._route(deadline), False
        except RetriableError:
            if self._target is None:
                raise

    def _lookup(self, topic: str, deadline: float):
        """``topic``'s route from the name server, waiting at most until ``deadline``."""
        left = time_left(deadline)
        if left <= 0.05:
            raise RetriableError(f"no time left to look up topic {topic}")
        future = self._client.submit(self._client.client.topic_route(topic, timeout=left))
        try:
            return future.result(timeout=left)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise RetriableError(f"route lookup of topic {topic}: no answer in {left:.1f} s") from None

    def _route(self, deadline: float) -> Target:
        from connectors.rocketmq.remoting import TopicNotFoundError

        if self._client is None:
            self._client = CLIENTS.acquire(self._settings)
        try:
            return Target(self.topic, self._lookup(self.topic, deadline))
        except TopicNotFoundError:
            pass
        except ConnectError as exc:
            raise RetriableError(f"cannot look up topic {self.topic}: {exc}") from exc
        try:
            return Target.through_default_topic(self.topic, self._lookup(DEFAULT_TOPIC, deadline))
        except ConnectError as exc:
            raise RetriableError(f"topic {self.topic} does not exist and no broker serves {DEFAULT_TOPIC} to "
                                 f"create it from ({exc}): create the topic") from exc

    def _send_one(self, r: ConnectRecord) -> None:
        target = self._target
        value = r.value
        if value is not None and value.__class__ is not bytes:
            value = bytes(value)  # a TypeError is the record's refusal
        body = message_body(value)
        if len(body) > MAX_MESSAGE_SIZE:
            raise DeliveryError(f"record {r.position()}: a body of {len(body)} bytes is larger than RocketMQ's "
                                f"{MAX_MESSAGE_SIZE}")
        index = target.key_index(r.key)
        fut = self._client.send(target.addrs[index], self.topic, target.queues[index].queue_id, body,
                                message_properties(r.key, value, r.headers, self._cfg["tag"] or None),
                                producer_group=self._cfg["producer.group"], born_timestamp=r.timestamp or None)
        fut.add_done_callback(lambda f, r=r: self._arrive(r, f))  # on the client's loop thread

    def _refusal(self, r: ConnectRecord, exc: Exception) -> BaseException:
        if isinstance(exc, (RetriableError, DeliveryError)):
            return exc
        if isinstance(exc, (TypeError, ValueError)):
            return DeliveryError(f"record {r.position()} cannot be written to {self.topic}: {exc} (bodies are bytes)")
        return RetriableError(f"record {r.position()} not sent to {self.topic}: {exc}")

    def _settled(self, record: ConnectRecord, fut) -> None:
        from connectors.rocketmq.remoting import TopicNotFoundError

        error: BaseException | None = None
        exc = fut.exception()
        if isinstance(exc, TopicNotFoundError):
            error = RetriableError(f"topic {self.topic} does not exist and the broker does not create it: create it "
                                   f"(e.g. the sink's auto.create.topics for its own topics): {exc}")
        elif isinstance(exc, RetriableError):
            error = RetriableError(f"record {record.position()} not delivered to {self.topic}: {exc}")
        elif exc is not None:
            error = DeliveryError(f"record {record.position()} refused by {self.topic}: {exc}")
        elif not fut.result().ok:
            error = RetriableError(f"record {record.position()} stored by {self.topic} without the requested flush "
                                   f"({fut.result().status})")
        if error is not None:
            self._stale = True
        super()._settled(record, error)

    def close(self) -> None:
        if self._client is not None:
            self._client = None
            CLIENTS.release(self._settings)
