"""The Pulsar sink's side writer (:mod:`connect.sink.side`): dead letters and offset syncs.

One producer of its own on the one topic (a short name is completed as
``persistent://public/default/<name>``), on the pooled ``pulsar.Client`` of the sink's connection
keys (for the dead-letter topic with the ``dlq.*`` overrides applied), with the sink's producer
settings (batching, chunking, compression, ``send.timeout.ms`` 0: an outage delays a dead letter,
it never fails it). Records map onto messages as the sink's (:mod:`connectors.pulsar.mapping`); a
record without value is sent as Pulsar's null value. Every ``send_async`` callback is bound to its
record and only queues the outcome; the caller's thread settles it. Pulsar creates the topic on
first use.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, Mapping

from connect.errors import DeliveryError, RetriableError
from connect.records import ConnectRecord
from connect.sink.side import QueuedSideWriter, time_left
from connectors.pulsar.clients import CLIENTS, client_settings
from connectors.pulsar.mapping import message_fields
from connectors.pulsar.names import PULSAR_NAMES
from connectors.pulsar.sinkconfig import CONFIG, permanent_results, producer_options

__all__ = ["PulsarSideWriter"]


class PulsarSideWriter(QueuedSideWriter):
    def __init__(self, config: Mapping[str, Any], topic: str) -> None:
        cfg = CONFIG.parse(config)
        super().__init__(PULSAR_NAMES.complete(topic), cfg["max.pending.messages"])
        self._cfg = cfg
        self._settings = client_settings(cfg)
        self._client = None
        self._producer = None
        self._creating: concurrent.futures.Future | None = None  # the producer being created, on a thread
        self._waited = False  # whether a send already waited for that creation

    def _ready(self, deadline: float) -> None:
        """The producer. ``create_producer`` blocks up to the client's operation timeout (30 s by
        default) when Pulsar does not answer, so it runs on a thread of its own: the first send
        waits for it until its deadline, later ones do not wait while it is still under way, and a
        creation that failed is tried again only after ``ready_pause_s``."""
        if self._producer is not None:
            return
        creating = self._creating
        if creating is None:
            creating = self._creating = self._create()
            self._waited = False
        try:
            producer = creating.result(timeout=0 if self._waited else time_left(deadline))
        except concurrent.futures.TimeoutError:
            self._waited = True
            raise RetriableError(f"no producer on {self.topic} yet: Pulsar did not answer in time") from None
        except Exception as exc:  # noqa: BLE001 - pulsar raises its own exception types
            self._creating = None
            raise RetriableError(f"cannot create a producer on {self.topic}: {exc}") from exc
        self._creating = None
        self._producer = producer

    def _create(self) -> concurrent.futures.Future:
        import pulsar

        self._ok, self._permanent = permanent_results()
        if self._client is None:
            self._client = CLIENTS.acquire(self._settings)
        client, options, future = self._client, producer_options(self._cfg, pulsar), concurrent.futures.Future()

        def create() -> None:
            try:
                future.set_result(client.create_producer(self.topic, **options))
            except BaseException as exc:  # noqa: BLE001 - handed to the sender
                future.set_exception(exc)

        threading.Thread(target=create, name=f"pulsar-side-producer-{self.topic}", daemon=True).start()
        return future

    def _send_one(self, r: ConnectRecord) -> None:
        key, properties, ordering = message_fields(r.key, r.headers)
        value = r.value
        if value is not None and value.__class__ is not bytes:
            value = bytes(value)  # a TypeError is the record's refusal

        def done(res, _mid, r=r) -> None:  # on the client's IO thread: only queue it
            self._arrive(r, None if res == self._ok else res)

        self._producer.send_async(value, done, properties=properties or None, partition_key=key,
                                  ordering_key=ordering.decode("utf-8", "replace") if ordering is not None else None,
                                  event_timestamp=r.timestamp or None)

    def _refusal(self, r: ConnectRecord, exc: Exception) -> BaseException:
        if isinstance(exc, RetriableError):
            return exc
        text = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, (TypeError, ValueError)) or type(exc).__name__ == "MessageTooBig":
            return DeliveryError(f"record {r.position()} cannot be written to {self.topic}: {text}")
        return RetriableError(f"record {r.position()} not sent to {self.topic}: {text}")

    def _settled(self, record: ConnectRecord, error: BaseException | None) -> None:
        if error is not None and not isinstance(error, BaseException):  # a pulsar.Result
            if error in self._permanent:
                error = DeliveryError(f"record {record.position()} refused by {self.topic}: {error}")
            else:
                error = RetriableError(f"record {record.position()} not delivered to {self.topic}: {error}")
        super()._settled(record, error)

    def close(self) -> None:
        producer, self._producer = self._producer, None
        creating, self._creating = self._creating, None
        client, self._client = self._client, None
        if producer is not None:
            try:
                producer.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        if client is None:
            return
        if creating is None or creating.done():
            if creating is not None:
                _close_created(creating)
            CLIENTS.release(self._settings)
        else:  # a creation under way: its producer is closed, and the client released, once it ends
            creating.add_done_callback(lambda f: (_close_created(f), CLIENTS.release(self._settings)))


def _close_created(future: concurrent.futures.Future) -> None:
    """Close the producer a creation made, if it made one."""
    if future.exception() is None:
        try:
            future.result().close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
