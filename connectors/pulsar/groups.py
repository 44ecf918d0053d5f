"""Pulsar subscriptions as consumer groups for the checkpoint connector (see
``connectors.replicator.groups``).

A group is a subscription, read and moved per partition (``<topic>-partition-N``; a topic that is
not partitioned is its own only partition, index -1) over the binary protocol with pulsar-client:
no admin REST API is needed (pulsar-lite has none). What that allows, and what it costs:

- **Reading a position** ("peek"): an Exclusive consumer with a receiver queue of 1 subscribes to
  the partition; the first message it receives is the first one the subscription has not
  acknowledged, which is the position. The message is not acknowledged: the subscription's next
  consumer receives it again. When nothing arrives within ``peek.timeout.ms`` the subscription is
  at the end, and its position is just after the partition's last message (GetLastMessageId, asked
  before waiting so that a message written meanwhile is not counted as consumed):
  ``(ledger, entry + 1, -1)``, which sorts after every message of that entry, batched or not
  (pulsar-lite's last message id carries no batch index). A partition without messages has no
  position. A position is an order key ``(ledger, entry, batch)``, as ``order_key`` makes from a
  record's source offset ``{"ledger", "entry", "batch"}``; source partitions are the Pulsar
  source's ``{"topic": <full topic name>, "partition": N or -1}``.
- **Active subscriptions**: a subscription with a connected consumer refuses another exclusive
  one (ConsumerBusy; pulsar-lite lets the subscribe wait for the client's operation timeout
  instead, hence the short default ``operation.timeout.ms`` here). Then ``positions`` returns None
  and ``apply`` moves nothing. A subscribe the broker does not answer in time reads as busy too.
  All partitions are subscribed before any is read or moved, and the consumers are held until the
  end, so no other consumer joins halfway.
- **Existence**: pulsar-client can neither list subscriptions nor tell whether one exists, so
  ``list_groups`` returns None and subscribing creates a subscription that is missing.
  ``positions`` subscribes at the latest message: a named subscription that does not exist is
  created at the end of each partition (holding no backlog) and reads as fully consumed.
  ``apply`` subscribes at the earliest message: a subscription it creates starts before the first
  message and is moved forward from there (if the move fails, it is left at the start: messages
  are read again, none are skipped).
- **Moving** (``apply``), forward only - the current position is peeked first and a partition whose
  subscription is already at or after the wanted position is left alone. Inclusive ``(l, e, b)``:
  a seek to that message id (a later consumer receives it first; a seek inside a batch delivers
  the whole entry again). Just after an unbatched ``(l, e, -1)``: a cumulative acknowledgement of
  it. Just after a message inside a batch (``b >= 0``): a subscription cannot be positioned inside
  a batch, so it is moved to the start of that entry (a seek to ``(l, e, -1)``), which only delivers
  the rest of the batch again. Acknowledgements are flushed when the consumer closes.

Configuration: the Pulsar client keys (:mod:`connectors.pulsar.clients`), with
``operation.timeout.ms`` 5000 by default here (how long finding a subscription busy takes), and
``peek.timeout.ms`` (default 1000): how long a peek waits for a message before taking the
subscription as at the end. Other keys (e.g. ``groups``) are ignored.
"""

from __future__ import annotations

import concurrent.futures
import logging
from typing import Any, Callable, Mapping, Sequence

from connect.config import ConfigDef, Type, at_least
from connect.errors import ConfigError, ConnectError, RetriableError
from connect.records import partition_key
from connectors.pulsar.clients import CLIENT_CONFIG, CLIENTS, client_issues, client_settings
from connectors.pulsar.source import full_topic_name, partition_topic, split_partition
from connectors.replicator.groups import GroupPositions, TargetPartition

__all__ = ["PulsarGroups", "CONFIG"]

log = logging.getLogger(__name__)

DEFAULT_OPERATION_TIMEOUT_MS = 5000
MAX_PARALLEL = 16  # partitions subscribed, peeked or moved at once

CONFIG = CLIENT_CONFIG.merge(
    ConfigDef()
    .define("peek.timeout.ms", Type.INT, 1000, "How long reading a subscription's position waits for its first "
            "unacknowledged message before taking the subscription as at the end.", validator=at_least(100))
)

Position = tuple[int, int, int]  # (ledger, entry, batch index)


class _Busy(Exception):
    """The subscription has a consumer (or the broker did not answer the subscribe in time)."""


class PulsarGroups(GroupPositions):
    def __init__(self, config: Mapping[str, Any]) -> None:
        import pulsar

        super().__init__(config)
        self._pulsar = pulsar
        cfg = CONFIG.parse({"operation.timeout.ms": DEFAULT_OPERATION_TIMEOUT_MS, **config}, source="Pulsar cluster")
        issues = client_issues(cfg)
        if issues:
            raise ConfigError(issues, source="Pulsar cluster")
        self._service = cfg["service.url"]
        self._peek_ms = cfg["peek.timeout.ms"]
        self._settings = client_settings(cfg)
        self._client = CLIENTS.acquire(self._settings)

    # -- helpers ------------------------------------------------------------------------------------
    def _partitions(self, topic: str, group: str) -> list[tuple[str, int]]:
        """(partition topic name, index) of a full topic name; (topic, -1) when it is not partitioned."""
        try:
            names = self._client.get_topic_partitions(topic)
        except Exception as exc:  # noqa: BLE001 - pulsar raises its own exception types
            raise RetriableError(f"cannot look up the partitions of {topic} (group {group}) on {self._service}: "
                                 f"{exc}") from exc
        return [(name, -1 if name == topic else split_partition(name)[1]) for name in names]

    def _subscribe(self, name: str, group: str, initial) -> Any:
        pulsar = self._pulsar
        try:
            return self._client.subscribe(name, group, consumer_type=pulsar.ConsumerType.Exclusive,
                                          receiver_queue_size=1, initial_position=initial)
        except (pulsar.Timeout, pulsar.ConsumerBusy) as exc:
            raise _Busy(f"subscription {group} of {name} is in use: {exc}") from exc
        except Exception as exc:  # noqa: BLE001
            raise RetriableError(f"cannot subscribe to {name} as {group} on {self._service}: {exc}") from exc

    def _each(self, items: Sequence[Any], work: Callable[[Any], Any]) -> list[Any]:
        """``work(item)`` for every item, a few at a time; results in order, or the first error
        (after every call ended)."""
        if len(items) <= 1:
            return [work(item) for item in items]
        with concurrent.futures.ThreadPoolExecutor(min(len(items), MAX_PARALLEL), "pulsar-groups") as pool:
            futures = [pool.submit(work, item) for item in items]
            concurrent.futures.wait(futures)
        return [f.result() for f in futures]

    def _hold(self, group: str, names: Sequence[str], initial) -> dict[str, Any] | None:
        """An exclusive consumer on each partition (name -> consumer); None when any is busy.
        Errors raised after closing what was opened."""

        def subscribe(name: str):
            try:
                return self._subscribe(name, group, initial)
            except (_Busy, ConnectError) as exc:
                return exc

        opened = dict(zip(names, self._each(names, subscribe), strict=True))
        consumers = {name: c for name, c in opened.items() if not isinstance(c, Exception)}
        failures = [c for c in opened.values() if isinstance(c, Exception)]
        if not failures:
            return consumers
        self._release(consumers)
        busy = [f for f in failures if isinstance(f, _Busy)]
        if busy:
            log.info("%s: not read or moved now", busy[0])
            return None
        raise failures[0]

    @staticmethod
    def _release(consumers: Mapping[str, Any]) -> None:
        for consumer in consumers.values():
            try:
                consumer.close()  # flushes pending acknowledgements
            except Exception as exc:  # noqa: BLE001 - closing is best effort
                log.debug("closing a consumer of %s: %s", consumer.topic(), exc)

    def _peek(self, consumer, name: str, group: str) -> Position | None:
        """The id of the first message the subscription has not acknowledged; None when nothing
        arrives within peek.timeout.ms - asked twice, the second time waiting three times as long, so
        a slow dispatch (cold reads, a rate limit) is not taken for a subscription at its end, which
        would translate past records it has not consumed."""
        message = None
        for wait_ms in (self._peek_ms, 3 * self._peek_ms):
            try:
                message = consumer.receive(timeout_millis=wait_ms)
                break
            except self._pulsar.Timeout:
                continue
            except Exception as exc:  # noqa: BLE001
                raise RetriableError(f"cannot read the position of subscription {group} of {name}: {exc}") from exc
        if message is None:
            return None
        mid = message.message_id()
        return mid.ledger_id(), mid.entry_id(), mid.batch_index()

    def _last(self, consumer, name: str) -> Position | None:
        """Just after the partition's last message: ``(ledger, entry + 1, -1)``; None when it has none."""
        try:
            last = consumer.get_last_message_id()
        except Exception as exc:  # noqa: BLE001 - pulsar-lite answers an error for a partition without messages
            log.debug("no last message id for %s: %s", name, exc)
            return None
        if last.ledger_id() < 0 or last.entry_id() < 0:
            return None
        return last.ledger_id(), last.entry_id() + 1, -1

    # -- GroupPositions -----------------------------------------------------------------------------
    def positions(self, group: str, topics: Sequence[str]) -> dict[str, tuple[dict, Any]] | None:
        partitions = []  # (base topic, partition name, index)
        for topic in dict.fromkeys(full_topic_name(t) for t in topics):
            partitions.extend((topic, name, index) for name, index in self._partitions(topic, group))
        consumers = self._hold(group, [name for _t, name, _i in partitions], self._pulsar.InitialPosition.Latest)
        if consumers is None:
            return None
        try:
            def read(name: str) -> Position | None:
                end = self._last(consumers[name], name)  # before the peek: a message written meanwhile stays unread
                return self._peek(consumers[name], name, group) or end

            found = self._each([name for _t, name, _i in partitions], read)
        finally:
            self._release(consumers)
        out: dict[str, tuple[dict, Any]] = {}
        for (topic, _name, index), position in zip(partitions, found, strict=True):
            if position is not None:
                sp = {"topic": topic, "partition": index}
                out[partition_key(sp)] = (sp, position)
        return out

    @staticmethod
    def order_key(offset: Mapping[str, Any]) -> Any:
        return int(offset["ledger"]), int(offset["entry"]), int(offset.get("batch", -1))

    def apply(self, group: str, targets: Mapping[TargetPartition, tuple[Any, bool]]) -> list[TargetPartition]:
        if not targets:
            return []
        named = {partition_topic(full_topic_name(target[0]), int(target[1])): target for target in targets}
        consumers = self._hold(group, list(named), self._pulsar.InitialPosition.Earliest)
        if consumers is None:
            return []
        try:
            moved = self._each(list(named), lambda name: self._move(consumers[name], name, group, named[name],
                                                                     *targets[named[name]]))
        finally:
            self._release(consumers)
        return [named[name] for name, done in zip(named, moved, strict=True) if done]

    def _move(self, consumer, name: str, group: str, target: TargetPartition, position: Sequence[int] | None,
              inclusive: bool) -> bool:
        """Moves one partition's subscription forward to ``position``; whether it moved."""
        pulsar = self._pulsar
        if position is None:  # parked: the subscription was created at the earliest if it did not exist
            return False
        ledger, entry, batch = (int(v) for v in position)
        index = int(target[1])
        if inclusive:
            wanted, how, at = (ledger, entry, batch), "seek", pulsar.MessageId(index, ledger, entry, batch)
        elif batch < 0:
            wanted, how, at = (ledger, entry, 0), "acknowledge", pulsar.MessageId(index, ledger, entry, -1)
        else:  # just after a message inside a batch: the start of its entry (never past a record)
            wanted, how, at = (ledger, entry, -1), "seek", pulsar.MessageId(index, ledger, entry, -1)
        current = self._peek(consumer, name, group)
        if current is None or current >= wanted:
            log.debug("subscription %s of %s is at %s, not before %s: not moved", group, name, current or "the end",
                      wanted)
            return False
        try:
            if how == "seek":
                consumer.seek(at)
            else:
                consumer.acknowledge_cumulative(at)
        except Exception as exc:  # noqa: BLE001
            raise RetriableError(f"cannot move subscription {group} of {name} from {current} to {wanted} "
                                 f"({how} {ledger}:{entry}:{batch}): {exc}") from exc
        return True

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            CLIENTS.release(self._settings)
