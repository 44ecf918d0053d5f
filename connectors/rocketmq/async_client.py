"""The asynchronous RocketMQ client: the name-server and broker operations the RocketMQ source,
sink, metadata and group connectors need, over pooled :class:`RemotingConnection` s.

:class:`RocketMQClient` follows ``MQClientAPIImpl`` (one method per request; each names the request
and response header classes it follows). Name servers are tried in turn, as
``NettyRemotingClient.getAndCreateNameserverChannel`` does. It is an asyncio object and belongs to
the event loop that first uses it; synchronous code uses
:class:`connectors.rocketmq.sync_client.SyncRocketMQClient`.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any, Iterable, Mapping, Sequence

import orjson

from connect.errors import ConnectError, RetriableError
from connectors.rocketmq.fastjson import json_list, json_object, parse_fastjson
from connectors.rocketmq.models import (
    DEFAULT_TOPIC,
    PERM_READ,
    PERM_WRITE,
    PULL_STATUS,
    SEND_STATUS,
    BrokerData,
    ConsumerData,
    ConsumeStats,
    PullResult,
    SendResult,
    TopicConfig,
    TopicRouteData,
    parse_cluster_info,
    parse_consume_stats,
    parse_topic_configs,
    parse_topic_route,
)
from connectors.rocketmq.protocol import (
    FLAG_COMMIT_OFFSET,
    FLAG_SUBSCRIPTION,
    FLAG_SUSPEND,
    MessageExt,
    ProtocolError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    decode_messages,
    encode_batch,
    encode_properties,
)
from connectors.rocketmq.remoting import (
    DELETE_SUBSCRIPTIONGROUP,
    DELETE_TOPIC_IN_BROKER,
    DELETE_TOPIC_IN_NAMESRV,
    AclSigner,
    RemotingConnection,
    RequestHandler,
    TopicNotFoundError,
    broker_error,
    request_name,
    split_address,
)

__all__ = ["RocketMQClient"]


def _bool(v: bool) -> str:
    return "true" if v else "false"


class RocketMQClient:
    """Name-server and broker operations over pooled :class:`RemotingConnection` s (one per
    address). ``namesrv_addrs``: ``"host:port;host:port"`` or a list; they are tried in turn,
    sticking to the last one that answered. Timeouts are in seconds; ``timeout`` is the default
    per-request timeout."""

    def __init__(self, namesrv_addrs: str | Sequence[str] = (), *, signer: AclSigner | None = None,
                 timeout: float = 3.0, connect_timeout: float = 3.0, handler: RequestHandler | None = None):
        if isinstance(namesrv_addrs, str):
            namesrv_addrs = [a.strip() for a in re.split(r"[;,]", namesrv_addrs) if a.strip()]
        self.namesrv_addrs = list(namesrv_addrs)
        for a in self.namesrv_addrs:
            split_address(a)
        self.signer = signer
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.handler = handler
        self._connections: dict[str, RemotingConnection] = {}
        self._ns_index = 0
        self._closed = False

    async def __aenter__(self) -> RocketMQClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def connection(self, address: str) -> RemotingConnection:
        """The pooled connection to ``address`` (created, not yet connected, when new)."""
        if self._closed:
            raise ConnectError("RocketMQ client is closed")
        conn = self._connections.get(address)
        if conn is None:
            conn = self._connections[address] = RemotingConnection(
                address, connect_timeout=self.connect_timeout, handler=self.handler, signer=self.signer)
        return conn

    async def invoke(self, address: str, cmd: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        return await self.connection(address).request(cmd, self.timeout if timeout is None else timeout)

    async def invoke_namesrv(self, cmd: RemotingCommand, timeout: float | None = None) -> tuple[str, RemotingCommand]:
        """Sends ``cmd`` to the name servers in turn until one answers; returns (address, response)."""
        if not self.namesrv_addrs:
            raise ConnectError(f"{request_name(cmd.code)}: no name server address configured")
        errors = []
        n = len(self.namesrv_addrs)
        for i in range(n):
            index = (self._ns_index + i) % n
            addr = self.namesrv_addrs[index]
            try:
                response = await self.invoke(addr, cmd, timeout)
            except RetriableError as exc:
                errors.append(str(exc))
                continue
            self._ns_index = index
            return addr, response
        raise RetriableError(f"{request_name(cmd.code)}: no name server answered: " + "; ".join(errors))

    def _request(self, code: int, fields: Mapping[str, Any] | None = None, body: bytes = b"") -> RemotingCommand:
        ext = {k: (_bool(v) if isinstance(v, bool) else str(v)) for k, v in (fields or {}).items() if v is not None}
        return RemotingCommand(code, ext_fields=ext, body=body)

    @staticmethod
    def _field(response: RemotingCommand, key: str, operation: str, address: str) -> int:
        v = response.ext_fields.get(key)
        try:
            return int(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ConnectError(f"{operation} on {address}: the response's {key} is {v!r}, not a number") from None

    # -- name server ------------------------------------------------------------------------------
    async def topic_route(self, topic: str, *, timeout: float | None = None) -> TopicRouteData:
        """GET_ROUTEINFO_BY_TOPIC (``GetRouteInfoRequestHeader``: topic). TOPIC_NOT_EXIST raises
        :class:`TopicNotFoundError`."""
        operation = f"route lookup of topic {topic!r}"
        addr, response = await self.invoke_namesrv(self._request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}),
                                                   timeout)
        if response.code == ResponseCode.SUCCESS and response.body:
            try:
                return parse_topic_route(response.body, topic)
            except ProtocolError as exc:
                raise ConnectError(f"{operation} on {addr}: {exc}") from None
        if response.code == ResponseCode.SUCCESS:  # no body: no route (as the C++ client reads it)
            raise TopicNotFoundError(operation, addr, ResponseCode.TOPIC_NOT_EXIST, "empty route body")
        raise broker_error(operation, addr, response)

    async def topic_list(self, *, timeout: float | None = None) -> list[str]:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER (no header; body ``TopicList``): sorted topic names."""
        addr, response = await self.invoke_namesrv(self._request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
                                                   timeout)
        if response.code != ResponseCode.SUCCESS:
            raise broker_error("topic list", addr, response)
        try:
            doc = json_object(parse_fastjson(response.body or b"{}"), "TopicList body")
            return sorted(str(t) for t in json_list(doc, "topicList", "TopicList body"))
        except ProtocolError as exc:
            raise ConnectError(f"topic list on {addr}: {exc}") from None

    async def cluster_info(self, *, timeout: float | None = None) -> dict[str, BrokerData]:
        """GET_BROKER_CLUSTER_INFO (no header; body ``ClusterInfo``): broker name -> its addresses
        (the ``brokerAddrTable``)."""
        addr, response = await self.invoke_namesrv(self._request(RequestCode.GET_BROKER_CLUSTER_INFO), timeout)
        if response.code != ResponseCode.SUCCESS:
            raise broker_error("cluster info", addr, response)
        try:
            return parse_cluster_info(response.body or b"{}")
        except ProtocolError as exc:
            raise ConnectError(f"cluster info on {addr}: {exc}") from None

    # -- broker: produce --------------------------------------------------------------------------
    async def send(self, broker_addr: str, topic: str, queue_id: int, body: bytes,
                   properties: Mapping[str, str] | None = None, *, producer_group: str = "DEFAULT_PRODUCER",
                   flag: int = 0, sys_flag: int = 0, born_timestamp: int | None = None, reconsume_times: int = 0,
                   max_reconsume_times: int | None = None, default_topic: str = DEFAULT_TOPIC,
                   default_topic_queue_nums: int = 4, unit_mode: bool = False, broker_name: str | None = None,
                   timeout: float | None = None) -> SendResult:
        """SEND_MESSAGE_V2 of one message to ``queue_id`` (a negative id lets the broker choose). An
        empty ``body`` is refused here, as Java's ``Validators.checkMessage`` refuses it (Apache's
        broker fails on one with a NullPointerException, answered as the retriable SYSTEM_ERROR)."""
        if not body:
            raise ConnectError(f"send to {topic}[{queue_id}]: the message body is empty (RocketMQ refuses empty bodies)")
        cmd = self._send_command(RequestCode.SEND_MESSAGE_V2, topic, queue_id, body, properties, producer_group, flag,
                                 sys_flag, born_timestamp, reconsume_times, max_reconsume_times, default_topic,
                                 default_topic_queue_nums, unit_mode, False, broker_name)
        return await self._send(broker_addr, cmd, f"send to {topic}[{queue_id}]", timeout)

    async def send_batch(self, broker_addr: str, topic: str, queue_id: int,
                         messages: Sequence[tuple[bytes, Mapping[str, str]] | tuple[bytes, Mapping[str, str], int]],
                         properties: Mapping[str, str] | None = None, *, producer_group: str = "DEFAULT_PRODUCER",
                         born_timestamp: int | None = None, default_topic: str = DEFAULT_TOPIC,
                         default_topic_queue_nums: int = 4, broker_name: str | None = None,
                         timeout: float | None = None) -> SendResult:
        """SEND_BATCH_MESSAGE: ``messages`` are (body, properties[, flag]); the body is
        ``MessageDecoder.encodeMessages``' layout (protocol.encode_batch), the header's batch flag
        ``m`` is "true". ``properties`` are the batch envelope's (Java puts WAIT there)."""
        if not messages:
            raise ConnectError(f"batch send to {topic}[{queue_id}]: no messages")
        empty = next((i for i, m in enumerate(messages) if not m[0]), None)
        if empty is not None:
            raise ConnectError(f"batch send to {topic}[{queue_id}]: message {empty} of the batch has an empty body "
                               f"(RocketMQ refuses empty bodies)")
        items = [(m[0], m[1], m[2] if len(m) > 2 else 0) for m in messages]  # type: ignore[misc]
        try:
            body = encode_batch(items)
        except ProtocolError as exc:
            raise ConnectError(f"batch send to {topic}[{queue_id}]: {exc}") from None
        cmd = self._send_command(RequestCode.SEND_BATCH_MESSAGE, topic, queue_id, body, properties, producer_group, 0, 0,
                                 born_timestamp, 0, None, default_topic, default_topic_queue_nums, False, True,
                                 broker_name)
        return await self._send(broker_addr, cmd, f"batch send of {len(items)} to {topic}[{queue_id}]", timeout)

    def _send_command(self, code: int, topic: str, queue_id: int, body: bytes, properties: Mapping[str, str] | None,
                      producer_group: str, flag: int, sys_flag: int, born_timestamp: int | None, reconsume_times: int,
                      max_reconsume_times: int | None, default_topic: str, default_topic_queue_nums: int,
                      unit_mode: bool, batch: bool, broker_name: str | None) -> RemotingCommand:
        # SendMessageRequestHeaderV2 (a..n; k and m are primitive booleans in 4.9.x, so always sent)
        try:
            props = encode_properties(properties or {})
        except ProtocolError as exc:
            raise ConnectError(f"send to {topic}: {exc}") from None
        fields = {
            "a": producer_group, "b": topic, "c": default_topic, "d": default_topic_queue_nums, "e": queue_id,
            "f": sys_flag, "g": int(time.time() * 1000) if born_timestamp is None else born_timestamp, "h": flag,
            "i": props, "j": reconsume_times, "k": unit_mode, "l": max_reconsume_times, "m": batch, "n": broker_name,
        }
        return self._request(code, fields, bytes(body))

    async def _send(self, addr: str, cmd: RemotingCommand, operation: str, timeout: float | None) -> SendResult:
        response = await self.invoke(addr, cmd, timeout)
        status = SEND_STATUS.get(response.code)
        if status is None:
            raise broker_error(operation, addr, response)
        # SendMessageResponseHeader: msgId, queueId, queueOffset, transactionId; raw MSG_REGION, TRACE_ON
        ext = response.ext_fields
        return SendResult(status, ext.get("msgId") or "", self._field(response, "queueId", operation, addr),
                          self._field(response, "queueOffset", operation, addr), ext.get("transactionId"),
                          ext.get("MSG_REGION"), ext.get("TRACE_ON") != "false")

    # -- broker: consume --------------------------------------------------------------------------
    async def pull(self, broker_addr: str, group: str, topic: str, queue_id: int, offset: int, max_nums: int = 32, *,
                   suspend_timeout: float = 0.0, commit_offset: int | None = None, subscription: str | None = "*",
                   sub_version: int = 0, expression_type: str = "TAG", broker_name: str | None = None,
                   decompress: bool = True, timeout: float | None = None) -> PullResult:
        """PULL_MESSAGE (``PullMessageRequestHeader``). ``suspend_timeout`` > 0 asks the broker to
        hold the request up to that many seconds when no message is there (long polling,
        FLAG_SUSPEND); the request timeout then defaults to it plus the client's timeout.
        ``commit_offset`` (FLAG_COMMIT_OFFSET) lets the broker store the group's offset;
        ``subscription`` (FLAG_SUBSCRIPTION) is the tag expression, None to use the group's
        heartbeat subscription."""
        sys_flag = ((FLAG_COMMIT_OFFSET if commit_offset is not None else 0)
                    | (FLAG_SUSPEND if suspend_timeout > 0 else 0)
                    | (FLAG_SUBSCRIPTION if subscription is not None else 0))
        fields = {"consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
                  "maxMsgNums": max_nums, "sysFlag": sys_flag, "commitOffset": commit_offset or 0,
                  "suspendTimeoutMillis": int(suspend_timeout * 1000), "subscription": subscription,
                  "subVersion": sub_version, "expressionType": expression_type, "bname": broker_name}
        if timeout is None:
            timeout = self.timeout + max(0.0, suspend_timeout)
        operation = f"pull of {topic}[{queue_id}] at {offset} for group {group!r}"
        response = await self.invoke(broker_addr, self._request(RequestCode.PULL_MESSAGE, fields), timeout)
        status = PULL_STATUS.get(response.code)
        if status is None:
            raise broker_error(operation, broker_addr, response)
        # PullMessageResponseHeader: suggestWhichBrokerId, nextBeginOffset, minOffset, maxOffset
        messages: list[MessageExt] = []
        if response.code == ResponseCode.SUCCESS and response.body:
            try:
                messages = decode_messages(response.body, decompress=decompress)
            except ProtocolError as exc:
                raise ConnectError(f"{operation} on {broker_addr}: the messages do not decode: {exc}") from None
        return PullResult(status, response.code, self._field(response, "nextBeginOffset", operation, broker_addr),
                          self._field(response, "minOffset", operation, broker_addr),
                          self._field(response, "maxOffset", operation, broker_addr),
                          int(response.ext_fields.get("suggestWhichBrokerId") or 0), messages)

    async def query_consumer_offset(self, broker_addr: str, group: str, topic: str, queue_id: int, *,
                                    broker_name: str | None = None, set_zero_if_not_found: bool | None = None,
                                    timeout: float | None = None) -> int | None:
        """QUERY_CONSUMER_OFFSET (``QueryConsumerOffsetRequestHeader``: consumerGroup, topic,
        queueId, 5.x setZeroIfNotFound; response ``QueryConsumerOffsetResponseHeader``: offset).
        None when the broker has no offset for the group (QUERY_NOT_FOUND). A broker answers 0
        instead while the queue still holds its first message, unless ``set_zero_if_not_found``
        is False (5.x brokers; 4.x ignores the field)."""
        operation = f"offset query of group {group!r} on {topic}[{queue_id}]"
        fields = {"consumerGroup": group, "topic": topic, "queueId": queue_id, "bname": broker_name,
                  "setZeroIfNotFound": set_zero_if_not_found}
        response = await self.invoke(broker_addr, self._request(RequestCode.QUERY_CONSUMER_OFFSET, fields), timeout)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise broker_error(operation, broker_addr, response)
        return self._field(response, "offset", operation, broker_addr)

    async def update_consumer_offset(self, broker_addr: str, group: str, topic: str, queue_id: int, offset: int, *,
                                     broker_name: str | None = None, timeout: float | None = None) -> None:
        """UPDATE_CONSUMER_OFFSET, awaited (``UpdateConsumerOffsetRequestHeader``: consumerGroup,
        topic, queueId, commitOffset; ``MQClientAPIImpl.updateConsumerOffset``, not the oneway variant)."""
        fields = {"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset,
                  "bname": broker_name}
        response = await self.invoke(broker_addr, self._request(RequestCode.UPDATE_CONSUMER_OFFSET, fields), timeout)
        if response.code != ResponseCode.SUCCESS:
            raise broker_error(f"offset commit of group {group!r} on {topic}[{queue_id}] to {offset}", broker_addr,
                                response)

    async def _offset(self, code: int, broker_addr: str, fields: dict, operation: str, timeout: float | None) -> int:
        response = await self.invoke(broker_addr, self._request(code, fields), timeout)
        if response.code != ResponseCode.SUCCESS:
            raise broker_error(operation, broker_addr, response)
        return self._field(response, "offset", operation, broker_addr)

    async def min_offset(self, broker_addr: str, topic: str, queue_id: int, *, broker_name: str | None = None,
                         timeout: float | None = None) -> int:
        """GET_MIN_OFFSET (``GetMinOffsetRequestHeader``: topic, queueId; ``GetMinOffsetResponseHeader``: offset)."""
        return await self._offset(RequestCode.GET_MIN_OFFSET, broker_addr,
                                  {"topic": topic, "queueId": queue_id, "bname": broker_name},
                                  f"min offset of {topic}[{queue_id}]", timeout)

    async def max_offset(self, broker_addr: str, topic: str, queue_id: int, *, broker_name: str | None = None,
                         timeout: float | None = None) -> int:
        """GET_MAX_OFFSET (``GetMaxOffsetRequestHeader``: topic, queueId; ``GetMaxOffsetResponseHeader``:
        offset, the next offset to be written)."""
        return await self._offset(RequestCode.GET_MAX_OFFSET, broker_addr,
                                  {"topic": topic, "queueId": queue_id, "bname": broker_name},
                                  f"max offset of {topic}[{queue_id}]", timeout)

    async def search_offset(self, broker_addr: str, topic: str, queue_id: int, timestamp: int, *,
                            broker_name: str | None = None, timeout: float | None = None) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP (``SearchOffsetRequestHeader``: topic, queueId, timestamp in ms;
        ``SearchOffsetResponseHeader``: offset)."""
        return await self._offset(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, broker_addr,
                                  {"topic": topic, "queueId": queue_id, "timestamp": timestamp, "bname": broker_name},
                                  f"offset search of {topic}[{queue_id}] at {timestamp}", timeout)

    # -- broker: admin ----------------------------------------------------------------------------
    async def create_topic(self, broker_addr: str, topic: str, read_queue_nums: int = 8, write_queue_nums: int = 8,
                           perm: int = PERM_READ | PERM_WRITE, *, default_topic: str = DEFAULT_TOPIC,
                           topic_filter_type: str = "SINGLE_TAG", topic_sys_flag: int = 0, order: bool = False,
                           timeout: float | None = None) -> None:
        """UPDATE_AND_CREATE_TOPIC (``CreateTopicRequestHeader``: topic, defaultTopic, readQueueNums,
        writeQueueNums, perm, topicFilterType, topicSysFlag, order); creates or updates."""
        fields = {"topic": topic, "defaultTopic": default_topic, "readQueueNums": read_queue_nums,
                  "writeQueueNums": write_queue_nums, "perm": perm, "topicFilterType": topic_filter_type,
                  "topicSysFlag": topic_sys_flag, "order": order}
        response = await self.invoke(broker_addr, self._request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields), timeout)
        if response.code != ResponseCode.SUCCESS:
            raise broker_error(f"creation of topic {topic!r}", broker_addr, response)

    async def all_topic_configs(self, broker_addr: str, *, timeout: float | None = None) -> dict[str, TopicConfig]:
        """GET_ALL_TOPIC_CONFIG (no header; body ``TopicConfigSerializeWrapper``): topic name -> config."""
        response = await self.invoke(broker_addr, self._request(RequestCode.GET_ALL_TOPIC_CONFIG), timeout)
        if response.code != ResponseCode.SUCCESS:
            raise broker_error("topic config listing", broker_addr, response)
        try:
            return parse_topic_configs(response.body or b"{}")
        except ProtocolError as exc:
            raise ConnectError(f"topic config listing on {broker_addr}: {exc}") from None

    async def consume_stats(self, broker_addr: str, group: str, topic: str | None = None, *,
                            timeout: float | None = None) -> ConsumeStats:
        """GET_CONSUME_STATS (``GetConsumeStatsRequestHeader``: consumerGroup, topic; body ``ConsumeStats``)."""
        operation = f"consume stats of group {group!r}" + (f" on topic {topic!r}" if topic else "")
        response = await self.invoke(broker_addr, self._request(RequestCode.GET_CONSUME_STATS,
                                                                {"consumerGroup": group, "topic": topic}), timeout)
        if response.code != ResponseCode.SUCCESS:
            raise broker_error(operation, broker_addr, response)
        try:
            return parse_consume_stats(response.body or b"{}")
        except ProtocolError as exc:
            raise ConnectError(f"{operation} on {broker_addr}: {exc}") from None

    async def subscription_groups(self, broker_addr: str, *, timeout: float | None = None) -> list[str]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG (no header; body ``SubscriptionGroupWrapper``): the
        sorted names of the broker's subscription groups (its ``subscriptionGroupTable``)."""
        return sorted(await self.subscription_group_configs(broker_addr, timeout=timeout))

    async def subscription_group_configs(self, broker_addr: str, *, timeout: float | None = None
                                         ) -> dict[str, dict[str, Any]]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG (no header; body ``SubscriptionGroupWrapper``): group name
        -> its ``SubscriptionGroupConfig`` as the broker wrote it (groupName, consumeEnable,
        retryQueueNums, retryMaxTimes, brokerId, ...; 5.x adds groupRetryPolicy, attributes...)."""
        response = await self.invoke(broker_addr, self._request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), timeout)
        if response.code != ResponseCode.SUCCESS:
            raise broker_error("subscription group listing", broker_addr, response)
        try:
            doc = json_object(parse_fastjson(response.body or b"{}"), "SubscriptionGroupWrapper body")
            table = json_object(doc.get("subscriptionGroupTable") or {}, "SubscriptionGroupWrapper body: subscriptionGroupTable")
            return {str(name): dict(json_object(cfg, f"subscriptionGroupTable[{name!r}]")) for name, cfg in table.items()}
        except ProtocolError as exc:
            raise ConnectError(f"subscription group listing on {broker_addr}: {exc}") from None

    async def create_subscription_group(self, broker_addr: str, config: Mapping[str, Any], *,
                                        timeout: float | None = None) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (no header; body ``SubscriptionGroupConfig`` JSON, which
        must hold ``groupName``; ``MQClientAPIImpl.createSubscriptionGroup``); creates or replaces."""
        group = config.get("groupName")
        if not group:
            raise ConnectError("subscription group creation: the config has no groupName")
        body = orjson.dumps(dict(config), option=orjson.OPT_SORT_KEYS)
        response = await self.invoke(broker_addr, self._request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                                                body=body), timeout)
        if response.code != ResponseCode.SUCCESS:
            raise broker_error(f"creation of subscription group {group!r}", broker_addr, response)

    async def delete_subscription_group(self, broker_addr: str, group: str, *, clean_offset: bool = False,
                                        timeout: float | None = None) -> None:
        """DELETE_SUBSCRIPTIONGROUP (``DeleteSubscriptionGroupRequestHeader``: groupName; 5.x also
        cleanOffset, to drop the group's consumer offsets too - 4.x brokers ignore it)."""
        fields = {"groupName": group, "cleanOffset": clean_offset or None}
        response = await self.invoke(broker_addr, self._request(DELETE_SUBSCRIPTIONGROUP, fields), timeout)
        if response.code != ResponseCode.SUCCESS:
            raise broker_error(f"deletion of subscription group {group!r}", broker_addr, response)

    async def delete_topic_in_broker(self, broker_addr: str, topic: str, *, timeout: float | None = None) -> None:
        """DELETE_TOPIC_IN_BROKER (``DeleteTopicRequestHeader``: topic): the broker drops the topic's
        config (and, a Java broker, its queues). The name servers keep routing it until
        :meth:`delete_topic_in_namesrv` (``MQAdminExt.deleteTopic`` calls both)."""
        response = await self.invoke(broker_addr, self._request(DELETE_TOPIC_IN_BROKER, {"topic": topic}), timeout)
        if response.code != ResponseCode.SUCCESS:
            raise broker_error(f"deletion of topic {topic!r}", broker_addr, response)

    async def delete_topic_in_namesrv(self, topic: str, *, cluster: str | None = None,
                                      timeout: float | None = None) -> None:
        """DELETE_TOPIC_IN_NAMESRV (``DeleteTopicFromNamesrvRequestHeader``: topic; 5.x also
        clusterName) on every name server, as ``DefaultMQAdminExtImpl.deleteTopicInNameServer`` does."""
        if not self.namesrv_addrs:
            raise ConnectError("DELETE_TOPIC_IN_NAMESRV: no name server address configured")
        for addr in self.namesrv_addrs:
            response = await self.invoke(addr, self._request(DELETE_TOPIC_IN_NAMESRV,
                                                             {"topic": topic, "clusterName": cluster}), timeout)
            if response.code != ResponseCode.SUCCESS:
                raise broker_error(f"deletion of the route of topic {topic!r}", addr, response)

    async def consumer_ids(self, broker_addr: str, group: str, *, timeout: float | None = None) -> list[str]:
        """GET_CONSUMER_LIST_BY_GROUP (``GetConsumerListByGroupRequestHeader``: consumerGroup; body
        ``GetConsumerListByGroupResponseBody``: consumerIdList): the client ids of the group's
        consumers connected to this broker. [] when there are none: the broker answers SYSTEM_ERROR
        "no consumer for this group" then (``ConsumerManageProcessor.getConsumerListByGroup``)."""
        operation = f"consumer list of group {group!r}"
        response = await self.invoke(broker_addr, self._request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                                {"consumerGroup": group}), timeout)
        if response.code == ResponseCode.SYSTEM_ERROR and (response.remark or "").startswith("no consumer"):
            return []
        if response.code != ResponseCode.SUCCESS:
            raise broker_error(operation, broker_addr, response)
        try:
            doc = json_object(parse_fastjson(response.body or b"{}"), "GetConsumerListByGroupResponseBody")
            return [str(c) for c in json_list(doc, "consumerIdList", "GetConsumerListByGroupResponseBody")]
        except ProtocolError as exc:
            raise ConnectError(f"{operation} on {broker_addr}: {exc}") from None

    async def heartbeat(self, broker_addr: str, client_id: str, producer_groups: Iterable[str] = (),
                        consumer_groups: Iterable[str | ConsumerData] = (), *, timeout: float | None = None) -> int:
        """HEART_BEAT (no header; body ``HeartbeatData``: clientID, producerDataSet [ProducerData
        groupName], consumerDataSet [ConsumerData]). A group given by name is a pull consumer
        without subscriptions. Returns the broker's version."""
        now = int(time.time() * 1000)
        consumers = [(c if isinstance(c, ConsumerData) else ConsumerData(c)).to_json(now) for c in consumer_groups]
        doc = {"clientID": client_id, "consumerDataSet": consumers,
               "producerDataSet": [{"groupName": g} for g in producer_groups]}
        body = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)  # fastjson's SortField order
        response = await self.invoke(broker_addr, self._request(RequestCode.HEART_BEAT, body=body), timeout)
        if response.code != ResponseCode.SUCCESS:
            raise broker_error(f"heartbeat of client {client_id!r}", broker_addr, response)
        return response.version

    async def close(self) -> None:
        self._closed = True
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)

