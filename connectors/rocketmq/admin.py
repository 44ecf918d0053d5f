"""Client registrations and admin requests of the embedded RocketMQ broker (a mixin of
:class:`connectors.rocketmq.broker.Broker`, which owns the store and the state used here).

- clients (``ClientManageProcessor``, ``RebalanceLockManager``): heartbeats (subscription groups and
  retry topics created), unregister, consumer list by group, queue locks for orderly consumers,
  NOTIFY_CONSUMER_IDS_CHANGED;
- admin (``AdminBrokerProcessor``): create/update, list and delete topic configs and subscription
  groups, topic config, topic stats, consume stats; DELETE_TOPIC_IN_NAMESRV.

What a client can make the broker keep is bounded: group names follow RocketMQ's rules and count
against ``max_groups`` (:meth:`AdminHandlers._admit_group`), a connection registers at most
``MAX_CLIENT_IDS`` client ids, locks are taken only on queues that exist, a subscription group's
config is at most ``MAX_GROUP_CONFIG_BYTES`` of JSON, and a topic or group change that cannot be
saved is refused and undone (:meth:`MessageStore.set_topic`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import orjson

from connectors.rocketmq.lookups import CLUSTER
from connectors.rocketmq.protocol import RemotingCommand, RequestCode, ResponseCode
from connectors.rocketmq.store import PERM_READ, PERM_WRITE, TopicConfig
from connectors.rocketmq.system import SYSTEM_TOPICS
from connectors.rocketmq.validation import Refused, check_expression, check_group_name, check_topic_name, field, shown

if TYPE_CHECKING:
    from connectors.rocketmq.server import Connection
    from connectors.rocketmq.store import MessageStore

__all__ = ["AdminHandlers", "group_defaults", "saved"]

LOCK_EXPIRY_MS = 60_000  # RebalanceLockManager's REBALANCE_LOCK_MAX_LIVE_TIME
MAX_CLIENT_IDS = 16  # per connection: an official client uses one (one MQClientInstance per connection)
MAX_CLIENT_ID_LENGTH = 255
MAX_GROUP_CONFIG_BYTES = 64 * 1024


def saved(action, *args) -> None:
    """Runs a store change that saves a metadata file; a failed save is answered as an error
    (the store has undone the change), never left for a restart to discover."""
    try:
        action(*args)
    except OSError as exc:
        raise Refused(ResponseCode.SYSTEM_ERROR, f"not saved, nothing changed: {exc}") from None


def group_defaults(name: str) -> dict:
    """``SubscriptionGroupConfig``'s defaults."""
    return {"groupName": name, "consumeEnable": True, "consumeFromMinEnable": True, "consumeBroadcastEnable": True,
            "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
            "notifyConsumerIdsChangedEnable": True}


def _json_body(cmd: RemotingCommand, what: str) -> dict:
    try:
        data = orjson.loads(cmd.body)
    except orjson.JSONDecodeError as exc:
        raise Refused(ResponseCode.SYSTEM_ERROR, f"{what} body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise Refused(ResponseCode.SYSTEM_ERROR, f"{what} body is a {type(data).__name__}, not an object")
    return data


def _objects(value: Any, what: str) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise Refused(ResponseCode.SYSTEM_ERROR, f"{what} is not a list of objects")
    return value


class AdminHandlers:
    """Handlers for clients and admin requests; see the module's docstring."""

    store: MessageStore
    broker_name: str
    max_groups: int
    consumers: dict[str, dict[str, tuple[Connection, dict[str, str], int]]]
    locks: dict[tuple[str, str, int], tuple[str, int]]

    def _topic(self, name: str) -> TopicConfig:
        raise NotImplementedError

    def _topic_for_send(self, name: str, default_topic: str | None, default_queues: int) -> TopicConfig:
        raise NotImplementedError

    # -- groups -----------------------------------------------------------------------------------
    def _admit_group(self, group: str) -> None:
        """A group the broker is to keep something for (a config, offsets, locks): a valid name,
        and room under ``max_groups`` unless it is known already. This bounds ``groups.json`` and
        ``offsets.json``, which are rewritten whole."""
        check_group_name(group)
        known = self.store.known_groups
        if group not in known and len(known) >= self.max_groups:
            raise Refused(ResponseCode.SYSTEM_ERROR, f"group[{shown(group)}] refused: this broker keeps at most "
                                                     f"{self.max_groups} groups (--max-groups)")

    def _ensure_group(self, group: str) -> None:
        """The group admitted and its subscription config created when missing (as RocketMQ's
        ``autoCreateSubscriptionGroup`` does)."""
        self._admit_group(group)
        if group not in self.store.groups:
            saved(self.store.set_group, group, group_defaults(group))

    # -- clients ----------------------------------------------------------------------------------
    def _heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """``ClientManageProcessor.heartBeat``: consumers registered (enum names or ordinals
        accepted), their subscription groups and ``%RETRY%`` topics created."""
        data = _json_body(cmd, "heartbeat")
        client_id = data.get("clientID")
        if not isinstance(client_id, str) or not 0 < len(client_id) <= MAX_CLIENT_ID_LENGTH:
            raise Refused(ResponseCode.SYSTEM_ERROR, f"heartbeat: clientID must be 1-{MAX_CLIENT_ID_LENGTH} characters")
        if client_id not in conn.client_ids and len(conn.client_ids) >= MAX_CLIENT_IDS:
            raise Refused(ResponseCode.SYSTEM_ERROR, f"heartbeat: at most {MAX_CLIENT_IDS} client ids per connection")
        consumer_set = _objects(data.get("consumerDataSet"), "heartbeat consumerDataSet")
        conn.client_ids.add(client_id)
        now = int(time.time() * 1000)
        for consumer in consumer_set:
            group = str(consumer.get("groupName") or "")
            if not group:
                continue
            subs = {str(s.get("topic")): check_expression(str(s.get("subString") or "*"))
                    for s in _objects(consumer.get("subscriptionDataSet"), "heartbeat subscriptionDataSet")}
            self._ensure_group(group)
            self._topic_for_send(f"%RETRY%{group}", None, 1)
            members = self.consumers.setdefault(group, {})
            changed = client_id not in members
            members[client_id] = (conn, subs, now)
            conn.groups.add(group)
            if changed:
                self._notify_changed(group)
        return cmd.response(ResponseCode.SUCCESS)

    def _notify_changed(self, group: str) -> None:
        """Broker2Client.notifyConsumerIdsChanged: oneway NOTIFY_CONSUMER_IDS_CHANGED to each member."""
        for conn, _subs, _seen in self.consumers.get(group, {}).values():
            conn.notify(RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, flag=2,
                                        ext_fields={"consumerGroup": group}, language="JAVA"))

    def _unregister(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        client_id = field(cmd, "clientID")
        group = cmd.ext_fields.get("consumerGroup")
        if group and self.consumers.get(group, {}).pop(client_id, None) is not None:
            self._notify_changed(group)
        return cmd.response(ResponseCode.SUCCESS)

    def _forget(self, conn: Connection) -> None:
        for group in conn.groups:
            members = self.consumers.get(group, {})
            gone = [cid for cid, (c, _s, _t) in members.items() if c is conn]
            for cid in gone:
                del members[cid]
            if gone:
                self._notify_changed(group)

    def _consumer_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = field(cmd, "consumerGroup")
        members = sorted(self.consumers.get(group, {}))
        if not members:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"no consumer for this group, {shown(group)}")
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"consumerIdList": members}))

    def _lock_body(self, cmd: RemotingCommand) -> tuple[str, str, list[tuple[tuple[str, str, int], dict]]]:
        """(group, client id, [(lock key, mq)]) for the queues of the body that exist: locks are
        kept only for them, so the lock table is bounded by groups x queues."""
        data = _json_body(cmd, "lock")
        group, client = data.get("consumerGroup"), data.get("clientId")
        if not isinstance(group, str) or not isinstance(client, str):
            raise Refused(ResponseCode.SYSTEM_ERROR, "lock body: consumerGroup and clientId must be strings")
        self._ensure_group(group)
        out = []
        for mq in _objects(data.get("mqSet"), "lock mqSet"):
            topic, queue = mq.get("topic"), mq.get("queueId")
            config = self.store.topics.get(topic) if isinstance(topic, str) else None
            if config is not None and isinstance(queue, int) and not isinstance(queue, bool) and 0 <= queue < config.queues:
                out.append(((group, topic, queue), mq))
        return group, client, out

    def _lock(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """``RebalanceLockManager.tryLockBatch``: a queue is locked for a client unless another
        client holds an unexpired lock on it."""
        _group, client, queues = self._lock_body(cmd)
        now = int(time.time() * 1000)
        locked = []
        for key, mq in queues:
            holder = self.locks.get(key)
            if holder is None or holder[0] == client or holder[1] < now:
                self.locks[key] = (client, now + LOCK_EXPIRY_MS)
                locked.append(mq)
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"lockOKMQSet": locked}))

    def _unlock(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        _group, client, queues = self._lock_body(cmd)
        for key, _mq in queues:
            if self.locks.get(key, ("",))[0] == client:
                del self.locks[key]
        return cmd.response(ResponseCode.SUCCESS)

    # -- admin ------------------------------------------------------------------------------------
    def _create_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """``AdminBrokerProcessor.updateAndCreateTopic`` (CreateTopicRequestHeader). As 5.x, not
        for a system topic (``TopicValidator.isSystemTopic``: the fixed set and ``rmq_sys_*``) nor
        one named after the cluster or the broker: a send may still create those from TBW102."""
        topic = field(cmd, "topic")
        check_topic_name(topic)
        if topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_") or topic in (CLUSTER, self.broker_name):
            raise Refused(ResponseCode.INVALID_PARAMETER, f"The topic[{topic}] is conflict with system topic.")
        read, write = field(cmd, "readQueueNums", int), field(cmd, "writeQueueNums", int)
        if read < 1 or write < 1 or max(read, write) > 1024:
            raise Refused(ResponseCode.INVALID_PARAMETER, f"queue numbers read {read} / write {write} must be 1..1024")
        config = TopicConfig.make(topic, write, field(cmd, "perm", int, PERM_READ | PERM_WRITE), read=read,
                                  order=field(cmd, "order", bool, False), sys_flag=field(cmd, "topicSysFlag", int, 0),
                                  filter_type=field(cmd, "topicFilterType", str, "SINGLE_TAG")[:64])
        saved(self.store.set_topic, topic, config)
        return cmd.response(ResponseCode.SUCCESS)

    def _delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = field(cmd, "topic")
        if topic in self.store.topics:
            saved(self.store.set_topic, topic, None)
        return cmd.response(ResponseCode.SUCCESS)

    def _delete_route(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """``DefaultRequestProcessor.deleteTopicInNamesrv``: the name server here routes from this
        broker's own topic table, so DELETE_TOPIC_IN_BROKER removed the route already."""
        field(cmd, "topic")
        return cmd.response(ResponseCode.SUCCESS)

    def _all_topic_configs(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = {"dataVersion": {"counter": len(self.store.topics), "timestamp": int(time.time() * 1000)},
                "topicConfigTable": self.store.topics}
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    def _topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(self._topic(field(cmd, "topic"))))

    def _topic_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """TopicStatsTable; its offsetTable is keyed by MessageQueue objects, written as fastjson
        writes them (an object as a key: not standard JSON, as a Java broker answers)."""
        topic = field(cmd, "topic")
        config = self._topic(topic)
        entries = []
        for q in range(config.queues):
            top = self.store.max_offset(topic, q)
            stamp = self.store.store_timestamp(topic, q, top - 1) if top else 0
            entries.append((self._mq(topic, q), {"lastUpdateTimestamp": stamp, "maxOffset": top, "minOffset": 0}))
        return cmd.response(ResponseCode.SUCCESS, body=_object_keyed({"offsetTable": entries}, {"topicPutTps": 0.0}))

    def _mq(self, topic: str, queue: int) -> dict:
        return {"brokerName": self.broker_name, "queueId": queue, "topic": topic}

    def _consume_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """``AdminBrokerProcessor.getConsumeStats``: per queue of the group's topics, the broker's
        max offset and the group's committed offset."""
        group = field(cmd, "consumerGroup")
        topic = cmd.ext_fields.get("topic")
        topics = [topic] if topic else self.store.group_topics(group)
        entries = []
        for t in topics:
            config = self.store.topics.get(t)
            if config is None:
                continue
            for q in range(config.queues):
                top = self.store.max_offset(t, q)
                committed = self.store.consumer_offset(group, t, q) or 0  # AdminBrokerProcessor: < 0 counts as 0
                last = self.store.store_timestamp(t, q, committed - 1) if 0 < committed <= top else 0
                entries.append((self._mq(t, q), {"brokerOffset": top, "consumerOffset": committed, "lastTimestamp": last}))
        return cmd.response(ResponseCode.SUCCESS, body=_object_keyed({"offsetTable": entries}, {"consumeTps": 0.0}))

    def _create_group(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if len(cmd.body) > MAX_GROUP_CONFIG_BYTES:
            raise Refused(ResponseCode.INVALID_PARAMETER, f"subscription group body of {len(cmd.body)} bytes: at most "
                                                          f"{MAX_GROUP_CONFIG_BYTES}")
        config = _json_body(cmd, "subscription group")
        name = config.get("groupName")
        if not isinstance(name, str):
            raise Refused(ResponseCode.SYSTEM_ERROR, "subscription group body: groupName must be a string")
        self._admit_group(name)
        saved(self.store.set_group, name, {**group_defaults(name), **config})
        return cmd.response(ResponseCode.SUCCESS)

    def _delete_group(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        name = field(cmd, "groupName")
        if name in self.store.groups:
            saved(self.store.set_group, name, None)
        return cmd.response(ResponseCode.SUCCESS)

    def _all_groups(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = {"dataVersion": {"counter": len(self.store.groups), "timestamp": int(time.time() * 1000)},
                "subscriptionGroupTable": self.store.groups}
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(body))


def _object_keyed(table: dict[str, list[tuple[dict, dict]]], rest: dict) -> bytes:
    """fastjson's output for maps keyed by objects: ``{{"k":..}:{..}}``."""
    parts = []
    for name, entries in table.items():
        inner = ",".join(orjson.dumps(k).decode() + ":" + orjson.dumps(v).decode() for k, v in entries)
        parts.append(f'"{name}":{{{inner}}}')
    parts.extend(f'"{k}":{orjson.dumps(v).decode()}' for k, v in rest.items())
    return ("{" + ",".join(parts) + "}").encode()
