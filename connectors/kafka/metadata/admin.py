"""The tasks' pooled admin client, its time budget, and how its errors read (transient or not)."""

from __future__ import annotations

import concurrent.futures
from typing import Any, Mapping, Sequence

from confluent_kafka import KafkaError, KafkaException

from connect.errors import ConnectError, RetriableError
from connectors.kafka.clients import POOL, client_config

__all__ = ["Admin", "kafka_error", "result", "permanent"]


_TRANSIENT = {KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError.REQUEST_TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
              KafkaError.NOT_CONTROLLER, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.BROKER_NOT_AVAILABLE,
              KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NETWORK_EXCEPTION, KafkaError.THROTTLING_QUOTA_EXCEEDED}


def kafka_error(exc: BaseException) -> KafkaError | None:
    return exc.args[0] if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError) else None


def result(future, timeout: float, what: str, accept: Sequence[int] = ()) -> Any:
    """A future's result, or the KafkaError when its code is in ``accept``; RetriableError when the
    cluster did not answer or answered with a transient error; KafkaException for the others."""
    try:
        return future.result(timeout=timeout + 1)
    except KafkaException as exc:
        err = kafka_error(exc)
        if err is not None and err.code() in accept:
            return err
        if err is not None and (err.retriable() or err.code() in _TRANSIENT):
            raise RetriableError(f"cannot {what} now: {err.str()}") from exc
        raise
    except concurrent.futures.TimeoutError as exc:
        raise RetriableError(f"cannot {what} now: no answer in {timeout:.1f} s") from exc


def permanent(exc: KafkaException, what: str) -> ConnectError:
    err = kafka_error(exc)
    return ConnectError(f"cannot {what}: {err.str() if err else exc}")


class Admin:
    """The task's pooled admin client and its time budget (the epoch's time left, capped)."""

    def __init__(self, config: Mapping[str, Any], owner: str, context, request_timeout_ms: int):
        self.conf = client_config(config, "admin")
        self.owner = owner
        self.context = context
        self.cap = request_timeout_ms / 1000
        self.client = POOL.acquire("admin", owner, self.conf)

    def timeout(self) -> float:
        left = min(self.context.time_left(), self.cap)
        if left <= 0.05:
            raise RetriableError("no time left in this epoch for an admin request")
        return left

    def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            POOL.release("admin", self.owner, self.conf, client)
