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

from typing import Any, Mapping

from connect.errors import DeliveryError, RetriableError
from connect.records import ConnectRecord
from connect.sink.side import QueuedSideWriter
from connectors.pulsar.clients import CLIENTS, client_settings
from connectors.pulsar.mapping import message_fields
from connectors.pulsar.names import PULSAR_NAMES
from connectors.pulsar.sink import CONFIG, permanent_results, producer_options

__all__ = ["PulsarSideWriter"]


class PulsarSideWriter(QueuedSideWriter):
    def __init__(self, config: Mapping[str, Any], topic: str) -> None:
        cfg = CONFIG.parse(config)
        super().__init__(PULSAR_NAMES.complete(topic), cfg["max.pending.messages"])
        self._cfg = cfg
        self._settings = client_settings(cfg)
        self._client = None
        self._producer = None

    def _send_one(self, r: ConnectRecord) -> None:
        if self._producer is None:
            self._open()
        key, properties, ordering = message_fields(r.key, r.headers)
        value = r.value
        if value is not None and value.__class__ is not bytes:
            value = bytes(value)  # a TypeError is the record's refusal

        def done(res, _mid, r=r) -> None:  # on the client's IO thread: only queue it
            self._arrive(r, None if res == self._ok else res)

        self._producer.send_async(value, done, properties=properties or None, partition_key=key,
                                  ordering_key=ordering.decode("utf-8", "replace") if ordering is not None else None,
                                  event_timestamp=r.timestamp or None)

    def _open(self) -> None:
        import pulsar

        self._pulsar = pulsar
        self._ok, self._permanent = permanent_results()
        if self._client is None:
            self._client = CLIENTS.acquire(self._settings)
        try:
            self._producer = self._client.create_producer(self.topic, **producer_options(self._cfg, pulsar))
        except Exception as exc:  # noqa: BLE001 - pulsar raises its own exception types
            raise RetriableError(f"cannot create a producer on {self.topic}: {exc}") from exc

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
        if producer is not None:
            try:
                producer.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        if self._client is not None:
            self._client = None
            CLIENTS.release(self._settings)
