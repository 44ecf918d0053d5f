"""RocketMQ consumer groups for the checkpoint connector (see ``connectors.replicator.groups``).

- A group's position in a queue is its consumer offset on the queue's broker (QUERY_CONSUMER_OFFSET):
  by RocketMQ's convention the next queue offset the group consumes. ``positions`` reports it per
  source partition ``{"topic", "broker", "queue"}`` (as the RocketMQ source builds them); a record's
  order key is its queue offset (the source offset ``{"offset": n}``), so the two compare.
- Queues where the group has no offset are left out: the broker answers QUERY_NOT_FOUND (they are
  asked with ``setZeroIfNotFound=false``), SUBSCRIPTION_GROUP_NOT_EXIST or a negative offset. A 4.x
  broker ignores ``setZeroIfNotFound`` and answers 0 while the queue still holds its first message,
  which reads as "nothing consumed yet". Other errors are raised, naming the group and the queue.
- ``list_groups``: the subscription groups of every broker the name server lists
  (GET_BROKER_CLUSTER_INFO, then GET_ALL_SUBSCRIPTIONGROUP_CONFIG on each master), without
  RocketMQ's own groups (``CID_RMQ_SYS_*``, ``TOOLS_CONSUMER``, ...).
- ``apply`` writes consumer offsets with UPDATE_CONSUMER_OFFSET (creating the subscription group
  first where the broker has none: 5.x refuses offsets of an unknown group), forward only (each
  queue's offset is read first), and only for a group without live consumers: RocketMQ consumers keep their
  offsets in memory and write them back periodically, so a running consumer would overwrite a
  moved offset. Liveness is GET_CONSUMER_LIST_BY_GROUP on every broker concerned; a broker that
  does not serve it (REQUEST_CODE_NOT_SUPPORTED) counts as having none. The check and the writes
  are not atomic: a consumer that starts in between may begin at the old offset and later write
  its own back over the moved one (RocketMQ has no way to refuse that, as Kafka's broker does).
  ``apply`` returns the target partitions whose offset it wrote.

Configuration: the RocketMQ client keys (``namesrv.addr``, ``access.key``, ``secret.key``,
``request.timeout.ms``: :mod:`connectors.rocketmq.clients`); other keys (e.g. ``groups``) are
ignored. The client is the process's shared one for those keys.
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
from typing import Any, Awaitable, Callable, Iterable, Mapping, NamedTuple, Sequence

from connect.errors import ConfigError, ConnectError, RetriableError
from connect.records import partition_key
from connectors.replicator.groups import GroupPositions, TargetPartition
from connectors.rocketmq.clients import CLIENT_CONFIG, CLIENTS, client_issues, client_settings
from connectors.rocketmq.protocol import ResponseCode

__all__ = ["RocketMQGroups", "is_system_group"]

log = logging.getLogger(__name__)

# MixAll / SubscriptionGroupManager: the groups a broker keeps for RocketMQ's own use.
_SYSTEM_GROUP = re.compile(r"^(CID_RMQ_SYS_|CID_SYS_RMQ_|CID_ONSAPI_|CID_ONS-HTTP-PROXY$|TOOLS_CONSUMER$|"
                           r"FILTERSRV_CONSUMER$|SELF_TEST_C_GROUP$|DEFAULT_CONSUMER$|CLIENT_INNER_PRODUCER$)")


# Answers to an offset query that mean "this group has no offset there".
_NO_OFFSET = frozenset({ResponseCode.QUERY_NOT_FOUND, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                        ResponseCode.SUBSCRIPTION_NOT_EXIST})


def is_system_group(name: str) -> bool:
    """A group RocketMQ itself uses (never a user's)."""
    return bool(_SYSTEM_GROUP.match(name))


def _wrap(what: str, exc: ConnectError) -> ConnectError:
    """``exc`` re-raised with ``what`` in front, keeping whether it is retriable."""
    kind = RetriableError if isinstance(exc, RetriableError) else ConnectError
    return kind(f"{what}: {exc}")


class _Queue(NamedTuple):
    """A queue ``apply`` moves: its broker's address and the offset it is moved to."""

    address: str
    topic: str
    broker: str
    queue: int
    new: int

    @property
    def where(self) -> tuple[str, str, int]:
        return self.topic, self.broker, self.queue

    def __str__(self) -> str:
        return f"{self.topic}[{self.broker}:{self.queue}]"


class RocketMQGroups(GroupPositions):
    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        cfg = CLIENT_CONFIG.parse(config, source="RocketMQ cluster")
        issues = client_issues(cfg)
        if issues:
            raise ConfigError(issues, source="RocketMQ cluster")
        self._namesrv = cfg["namesrv.addr"]
        self._settings = client_settings(cfg)
        self._client = CLIENTS.acquire(self._settings)

    # -- helpers ------------------------------------------------------------------------------------
    def _routes(self, topics: Iterable[str], group: str) -> dict[str, Any]:
        """topic -> route, for the topics that exist (a topic without a route has no queues)."""
        from connectors.rocketmq.remoting import TopicNotFoundError

        routes = {}
        for topic in dict.fromkeys(topics):
            try:
                routes[topic] = self._client.topic_route(topic)
            except TopicNotFoundError:
                log.debug("group %s: topic %s has no route on %s: no queues", group, topic, self._namesrv)
            except ConnectError as exc:
                raise _wrap(f"cannot look up the route of topic {topic} (group {group}) on {self._namesrv}", exc) from exc
        return routes

    @staticmethod
    def _master(route, broker: str, group: str) -> str:
        addr = route.master_addr(broker)
        if addr is None:
            raise RetriableError(f"group {group}: broker {broker} of topic {route.topic} has no master in the route")
        return addr

    def _gather(self, keys: Iterable[Any], call: Callable[[Any], Awaitable[Any]],
                what: Callable[[Any], str]) -> dict[Any, Any]:
        """``call(key)`` (a coroutine of the async client) for every key, run concurrently on the
        client's loop; key -> result. A failure is raised with ``what(key)`` in front."""
        futures: dict[Any, concurrent.futures.Future] = {}
        out = {}
        try:
            for key in keys:
                futures[key] = self._client.submit(call(key))
            for key, fut in futures.items():
                try:
                    out[key] = fut.result()
                except ConnectError as exc:
                    raise _wrap(what(key), exc) from exc
        finally:
            for fut in futures.values():
                fut.cancel()
        return out

    # -- GroupPositions -----------------------------------------------------------------------------
    def list_groups(self) -> list[str] | None:
        try:
            brokers = self._client.cluster_info()
        except ConnectError as exc:
            raise _wrap(f"cannot list the brokers of {self._namesrv}", exc) from exc
        names: set[str] = set()
        for name, data in sorted(brokers.items()):
            addr = data.master_addr
            if addr is None:
                log.warning("broker %s of %s has no master: its subscription groups are not listed", name, self._namesrv)
                continue
            try:
                names.update(self._client.subscription_groups(addr))
            except ConnectError as exc:
                raise _wrap(f"cannot list the subscription groups of broker {name} ({addr})", exc) from exc
        return sorted(n for n in names if not is_system_group(n))

    def positions(self, group: str, topics: Sequence[str]) -> dict[str, tuple[dict, Any]] | None:
        queues = {}  # (topic, broker, queue id) -> broker address
        for topic, route in self._routes(topics, group).items():
            for mq in route.read_queues():
                queues[(topic, mq.broker_name, mq.queue_id)] = self._master(route, mq.broker_name, group)
        offsets = self._gather(queues, lambda k: self._query(queues[k], group, *k),
                               lambda k: f"cannot read the offset of group {group} on {k[0]}[{k[1]}:{k[2]}]")
        out: dict[str, tuple[dict, Any]] = {}
        for (topic, broker, queue), offset in offsets.items():
            if offset is None:
                continue
            sp = {"topic": topic, "broker": broker, "queue": queue}
            out[partition_key(sp)] = (sp, offset)
        return out

    @staticmethod
    def order_key(offset: Mapping[str, Any]) -> Any:
        return int(offset["offset"])

    def active(self, group: str, addresses: Iterable[str]) -> bool:
        """Whether ``group`` has consumers connected to any of these brokers. A broker that does
        not serve GET_CONSUMER_LIST_BY_GROUP counts as having none."""
        from connectors.rocketmq.remoting import BrokerError

        for addr in sorted(set(addresses)):
            try:
                ids = self._client.consumer_ids(addr, group)
            except BrokerError as exc:
                if exc.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                    log.debug("broker %s cannot list consumers: group %s taken as inactive there", addr, group)
                    continue
                raise _wrap(f"cannot list the consumers of group {group}", exc) from exc
            except ConnectError as exc:
                raise _wrap(f"cannot list the consumers of group {group}", exc) from exc
            if ids:
                log.debug("group %s has %d consumer(s) on %s: not moved", group, len(ids), addr)
                return True
        return False

    def apply(self, group: str, targets: Mapping[TargetPartition, tuple[Any, bool]]) -> list[TargetPartition]:
        if not targets:
            return []
        routes = self._routes((topic for topic, _label in targets), group)
        queues: dict[TargetPartition, _Queue] = {}
        for target, (position, inclusive) in targets.items():
            topic, (broker, queue) = target
            route = routes.get(topic)
            address = route.master_addr(broker) if route is not None else None
            if address is None:
                log.warning("group %s: %s[%s:%s] not moved: %s", group, topic, broker, queue,
                            f"topic {topic} has no route on {self._namesrv}" if route is None
                            else f"broker {broker} has no master in the route of {topic}")
                continue
            # parked (position None: the group cannot be translated there): offset 0, only where the group
            # has none; a broker whose queue starts later answers the pull with its first offset
            new = 0 if position is None else int(position) + (0 if inclusive else 1)
            queues[target] = _Queue(address, topic, broker, int(queue), new)
        if not queues or self.active(group, (q.address for q in queues.values())):
            return []
        current = self._gather(queues, lambda t: self._query(queues[t].address, group, *queues[t].where),
                               lambda t: f"cannot read the offset of group {group} on {queues[t]}")
        moves = {t: q for t, q in queues.items()
                 if current[t] is None or (targets[t][0] is not None and current[t] < q.new)}
        self._gather(moves, lambda t: self._move(group, moves[t]),
                     lambda t: f"cannot move group {group} on {moves[t]} to {moves[t].new}")
        return list(moves)

    async def _move(self, group: str, q: _Queue) -> None:
        """UPDATE_CONSUMER_OFFSET of one queue. A broker refuses offsets of a group it has no
        subscription group for (SUBSCRIPTION_GROUP_NOT_EXIST: 5.x, also with autoCreateSubscriptionGroup,
        which only a pull or a heartbeat triggers): the group is then created with the broker's
        defaults, as a consumer's first heartbeat would, and the offset written again."""
        from connectors.rocketmq.remoting import BrokerError

        client = self._client.client
        try:
            await client.update_consumer_offset(q.address, group, q.topic, q.queue, q.new, broker_name=q.broker)
            return
        except BrokerError as exc:
            if exc.code != ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                raise
        log.info("group %s does not exist on %s: creating it to move its offsets", group, q.address)
        await client.create_subscription_group(q.address, {"groupName": group})
        await client.update_consumer_offset(q.address, group, q.topic, q.queue, q.new, broker_name=q.broker)

    async def _query(self, addr: str, group: str, topic: str, broker: str, queue: int) -> int | None:
        """The group's offset of one queue (on the client's loop); None when it has none: the
        broker answers QUERY_NOT_FOUND, or that it does not know the group."""
        from connectors.rocketmq.remoting import BrokerError

        try:
            offset = await self._client.client.query_consumer_offset(addr, group, topic, queue, broker_name=broker,
                                                                     set_zero_if_not_found=False)
        except BrokerError as exc:
            if exc.code in _NO_OFFSET:
                return None
            raise
        return offset if offset is not None and offset >= 0 else None

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            CLIENTS.release(self._settings)
