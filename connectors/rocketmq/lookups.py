"""Name-server answers and lookups of the embedded RocketMQ broker (a mixin of
:class:`connectors.rocketmq.broker.Broker`, which owns the store, the limits and the connections).

- name server (``DefaultRequestProcessor``/``ClientRequestProcessor``): routes (GET_ROUTEINFO_BY_TOPIC,
  every topic on this broker, standard JSON), topic list, cluster info, KV config (none);
- offsets (``ConsumerManageProcessor``, ``AdminBrokerProcessor``): query/update consumer offsets
  (updates only for topics and queues that exist, from groups admitted under ``max_groups``),
  min/max offset, search by timestamp, earliest store time, view message by commit-log offset;
- GET_BROKER_RUNTIME_INFO: what the broker holds against its limits (connections, pending answers,
  buffered bytes, long-poll waiters, open queue files, groups, topics) and the limits themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import orjson

from connectors.rocketmq.protocol import RemotingCommand, ResponseCode
from connectors.rocketmq.validation import Refused, field, shown

if TYPE_CHECKING:
    from connectors.rocketmq.server import Connection, ConnectionServer, Limits
    from connectors.rocketmq.store import MessageStore, TopicConfig

__all__ = ["LookupHandlers", "CLUSTER"]

CLUSTER = "DefaultCluster"


class LookupHandlers:
    """Handlers for the name server, offsets and lookups; see the module's docstring."""

    store: MessageStore
    broker_name: str
    address: str
    limits: Limits
    connections: ConnectionServer

    def _topic(self, name: str) -> TopicConfig:
        raise NotImplementedError

    def _admit_group(self, group: str) -> None:
        raise NotImplementedError

    # -- name server ------------------------------------------------------------------------------
    def _route(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = field(cmd, "topic")
        config = self.store.topics.get(topic)
        if config is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, remark=f"No topic route info in name server for the topic: "
                                                                     f"{shown(topic)}\nSee http://rocketmq.apache.org/docs/faq/ "
                                                                     f"for further details.")
        body = {"brokerDatas": [self._broker_data()], "filterServerTable": {},
                "queueDatas": [{"brokerName": self.broker_name, "perm": config["perm"],
                                "readQueueNums": config["readQueueNums"], "topicSysFlag": config.get("topicSysFlag", 0),
                                "writeQueueNums": config["writeQueueNums"]}]}
        if config.get("order"):
            body["orderTopicConf"] = f"{self.broker_name}:{config['writeQueueNums']}"
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    def _broker_data(self) -> dict:
        return {"brokerAddrs": {"0": self.address}, "brokerName": self.broker_name, "cluster": CLUSTER}

    def _topic_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"topicList": sorted(self.store.topics)}))

    def _cluster_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = {"brokerAddrTable": {self.broker_name: self._broker_data()}, "clusterAddrTable": {CLUSTER: [self.broker_name]}}
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    def _kv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.QUERY_NOT_FOUND, remark=f"No config item, Namespace: "
                                                                 f"{shown(cmd.ext_fields.get('namespace', ''))} Key: "
                                                                 f"{shown(cmd.ext_fields.get('key', ''))}")

    # -- offsets ----------------------------------------------------------------------------------
    def _query_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """``ConsumerManageProcessor.queryConsumerOffset``: the stored offset; else 0 when the queue
        still holds its first message (always, here: nothing is deleted), unless the request says
        ``setZeroIfNotFound=false`` (5.x), then QUERY_NOT_FOUND."""
        group, topic, queue = field(cmd, "consumerGroup"), field(cmd, "topic"), field(cmd, "queueId", int)
        offset = self.store.consumer_offset(group, topic, queue)
        if offset is None:
            if cmd.ext_fields.get("setZeroIfNotFound", "true").lower() == "false":
                return cmd.response(ResponseCode.QUERY_NOT_FOUND, remark="Not found, V3_0_6_SNAPSHOT maybe this group "
                                                                         "consumer boot first")
            offset = 0
        return cmd.response(ResponseCode.SUCCESS, {"offset": offset})

    def _update_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """``ConsumerManageProcessor.updateConsumerOffset``: for a topic and queue that exist and a
        subscription group that does (as 5.x checks: a group is created by a pull, a heartbeat or
        UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, never by an offset), so ``offsets.json`` stays bounded."""
        group, topic, queue = field(cmd, "consumerGroup"), field(cmd, "topic"), field(cmd, "queueId", int)
        offset = field(cmd, "commitOffset", int)
        config = self.store.topics.get(topic)
        if config is None:
            raise Refused(ResponseCode.TOPIC_NOT_EXIST, f"Topic {shown(topic)} not exist!")
        if not 0 <= queue < config.queues:
            raise Refused(ResponseCode.INVALID_PARAMETER, f"QueueId {queue} is invalid: topic {topic} has "
                                                          f"{config.queues} queue(s)")
        if group not in self.store.groups:
            raise Refused(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {shown(group)} not exist!")
        self.store.commit_offset(group, topic, queue, offset)
        return cmd.response(ResponseCode.SUCCESS)

    def _queue_of(self, cmd: RemotingCommand) -> tuple[str, int]:
        topic, queue = field(cmd, "topic"), field(cmd, "queueId", int)
        self._topic(topic)
        return topic, queue

    def _max_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, {"offset": self.store.max_offset(*self._queue_of(cmd))})

    def _min_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self._queue_of(cmd)
        return cmd.response(ResponseCode.SUCCESS, {"offset": 0})

    def _search_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic, queue = self._queue_of(cmd)
        return cmd.response(ResponseCode.SUCCESS,
                            {"offset": self.store.search_offset(topic, queue, field(cmd, "timestamp", int))})

    def _earliest_time(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic, queue = self._queue_of(cmd)
        if not self.store.max_offset(topic, queue):
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"get earliest message store time failed, {topic} {queue}")
        return cmd.response(ResponseCode.SUCCESS, {"timestamp": self.store.store_timestamp(topic, queue, 0)})

    def _view_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        record = self.store.record_at(field(cmd, "offset", int))
        if record is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"can not find message by the offset, "
                                                                  f"{shown(cmd.ext_fields['offset'])}")
        return cmd.response(ResponseCode.SUCCESS, body=record)

    def _runtime_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_RUNTIME_INFO (a ``KVTable``): what the broker holds against its limits."""
        table = {**self.connections.stats(), "longPollWaiters": self.store.waiters,
                 "openQueueFiles": self.store.open_queue_files, "maxOpenQueueFiles": self.store.max_open_files,
                 "groups": len(self.store.known_groups), "topics": len(self.store.topics),
                 **{_camel(k): v for k, v in attrs.asdict(self.limits).items()}}
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"table": {k: str(v) for k, v in table.items()}}))


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
