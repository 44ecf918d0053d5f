"""The embedded RocketMQ broker: a name server and one broker in one process, on one port.

A **development broker**: for tests, the demo and users trying the product, where no RocketMQ
server can be installed. It speaks the RocketMQ remoting protocol (JSON and ROCKETMQ headers,
answered in the request's serialization) so the official clients and this project's client work
against it, and it stores every queue durably (see :mod:`connectors.rocketmq.store` for the files
and the flush policy). It is not a production broker: one broker, no replication, no
transactions, no delay levels (retried messages are delivered again at once), no SQL92 filters,
no retention (nothing is deleted).

What it serves, with the apache/rocketmq class each behaviour follows:

- name server (``DefaultRequestProcessor``/``ClientRequestProcessor``): routes (GET_ROUTEINFO_BY_TOPIC,
  every topic on this broker, standard JSON), topic list, cluster info, KV config (none);
- sends (``SendMessageProcessor``): SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE; topics
  auto-created from ``TBW102`` when ``auto_create_topics`` (``TopicConfigManager``);
  CONSUMER_SEND_MSG_BACK into ``%RETRY%<group>`` / ``%DLQ%<group>``;
- pulls (``PullMessageProcessor``): by queue and offset, tag filters, long polling, commit offset flag;
- offsets (``ConsumerManageProcessor``, ``AdminBrokerProcessor``): query/update consumer offsets,
  min/max offset, search by timestamp, earliest store time, view message by commit-log offset;
- clients (``ClientManageProcessor``): heartbeats (subscription groups and retry topics created),
  unregister, consumer list by group, queue locks for orderly consumers, NOTIFY_CONSUMER_IDS_CHANGED;
- admin (``AdminBrokerProcessor``): create/update, list and delete topic configs and subscription
  groups, topic config, topic stats, consume stats; DELETE_TOPIC_IN_NAMESRV (routes come from the
  broker's own topic table, so there is nothing more to drop);
- ACL (``PlainAccessValidator``), when accounts are configured: every request must carry an
  ``AccessKey`` of a known account and its ``Signature``.

Run it with ``connect rocketmq-broker --port N --data-dir DIR``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import os
import random
import signal
import time
from pathlib import Path
from typing import Any, Callable

import orjson

from connectors.rocketmq.names import ILLEGAL_CHARACTER, TOPIC_MAX_LENGTH
from connectors.rocketmq.protocol import (
    MessageExt,
    ProtocolError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    decode_batch,
    decode_messages,
    decode_properties,
    offset_message_id,
)
from connectors.rocketmq.store import PERM_INHERIT, PERM_READ, PERM_WRITE, MessageStore, TopicConfig, tags_filter

__all__ = ["Broker", "serve", "main"]

log = logging.getLogger(__name__)

AUTO_CREATE_TOPIC = "TBW102"  # TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC
CLUSTER = "DefaultCluster"
MAX_MESSAGE_SIZE = 4 * 1024 * 1024  # BrokerConfig/MessageStoreConfig maxMessageSize
FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION = 0x1, 0x2, 0x4  # PullSysFlag
MAX_SUSPEND_MS = 30_000
LOCK_EXPIRY_MS = 60_000  # RebalanceLockManager's REBALANCE_LOCK_MAX_LIVE_TIME
CONSUME_FROM = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
                "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
                "CONSUME_FROM_TIMESTAMP")


class _Refused(Exception):
    """A request answered with an error code and remark."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def _field(cmd: RemotingCommand, name: str, kind: Callable = str, default: Any = ...):
    """A header field of ``cmd`` as ``kind``: missing or malformed required fields are refused
    naming the field, as Java's ``decodeCommandCustomHeader`` does."""
    value = cmd.ext_fields.get(name)
    if value is None:
        if default is ...:
            raise _Refused(ResponseCode.SYSTEM_ERROR, f"the custom field <{name}> is null")
        return default
    if kind is bool:
        return value.lower() in ("true", "1")  # Boolean.parseBoolean, and the C++ client's "1"
    try:
        return kind(value)
    except ValueError:
        raise _Refused(ResponseCode.SYSTEM_ERROR, f"the custom field <{name}> is {value!r}, not {kind.__name__}") from None


class _Conn:
    """One client connection: its writer and what its heartbeats registered."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        peer = writer.get_extra_info("peername") or ("0.0.0.0", 0)
        self.peer = (str(peer[0]), int(peer[1]))
        self.client_ids: set[str] = set()
        self.groups: set[str] = set()

    def send(self, cmd: RemotingCommand) -> None:
        if not self.writer.is_closing():
            self.writer.write(cmd.encode())


class Broker:
    """Name server + broker over one :class:`MessageStore`."""

    def __init__(self, store: MessageStore, *, host: str = "127.0.0.1", port: int = 9876, broker_name: str = "broker-a",
                 auto_create_topics: bool = True, default_queues: int = 8, max_pull_bytes: int = 4 * 1024 * 1024,
                 accounts: dict[str, str] | None = None) -> None:
        self.store = store
        self.host, self.port = host, port
        self.broker_name = broker_name
        self.address = f"{host}:{port}"
        self.auto_create = auto_create_topics
        self.default_queues = default_queues
        self.max_pull_bytes = max_pull_bytes
        self.accounts = accounts or {}
        # group -> client id -> (connection, subscriptions {topic: expression}, last heartbeat ms)
        self.consumers: dict[str, dict[str, tuple[_Conn, dict[str, str], int]]] = {}
        self.locks: dict[tuple[str, str, int], tuple[str, int]] = {}  # (group, topic, queue) -> (client id, until ms)
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        if auto_create_topics and AUTO_CREATE_TOPIC not in store.topics:
            store.topics[AUTO_CREATE_TOPIC] = TopicConfig.make(AUTO_CREATE_TOPIC, default_queues,
                                                               PERM_INHERIT | PERM_READ | PERM_WRITE)
            store.save_topics()
        self._handlers: dict[int, Callable] = {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._route,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._topic_list,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._cluster_info,
            101: self._kv_config,  # GET_KV_CONFIG
            RequestCode.SEND_MESSAGE: self._send,
            RequestCode.SEND_MESSAGE_V2: self._send,
            RequestCode.SEND_BATCH_MESSAGE: self._send,
            RequestCode.CONSUMER_SEND_MSG_BACK: self._send_back,
            RequestCode.PULL_MESSAGE: self._pull,
            RequestCode.QUERY_CONSUMER_OFFSET: self._query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self._update_offset,
            RequestCode.GET_MAX_OFFSET: self._max_offset,
            RequestCode.GET_MIN_OFFSET: self._min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self._search_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self._earliest_time,
            RequestCode.VIEW_MESSAGE_BY_ID: self._view_message,
            RequestCode.HEART_BEAT: self._heartbeat,
            RequestCode.UNREGISTER_CLIENT: self._unregister,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self._consumer_list,
            RequestCode.LOCK_BATCH_MQ: self._lock,
            RequestCode.UNLOCK_BATCH_MQ: self._unlock,
            RequestCode.UPDATE_AND_CREATE_TOPIC: self._create_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self._all_topic_configs,
            RequestCode.GET_TOPIC_CONFIG: self._topic_config,
            RequestCode.GET_TOPIC_STATS_INFO: self._topic_stats,
            RequestCode.GET_CONSUME_STATS: self._consume_stats,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self._create_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self._all_groups,
            215: self._delete_topic,  # DELETE_TOPIC_IN_BROKER
            216: self._delete_route,  # DELETE_TOPIC_IN_NAMESRV
            207: self._delete_group,  # DELETE_SUBSCRIPTIONGROUP
        }

    # -- serving ----------------------------------------------------------------------------------
    async def start(self) -> Broker:
        self._server = await asyncio.start_server(self._serve_conn, self.host, self.port, limit=1 << 20)
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]
            self.address = f"{self.host}:{self.port}"
        self._spawn(self._flusher())
        log.info("embedded RocketMQ broker %s listening on %s, data in %s", self.broker_name, self.address, self.store.dir)
        return self

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _flusher(self) -> None:
        interval = max(self.store.flush_interval_ms, 10) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.store.flush()
            except OSError as exc:
                log.error("flushing the store failed: %s", exc)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        self.store.close()

    async def _serve_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from connectors.rocketmq.protocol import FrameDecoder

        conn = _Conn(writer)
        decoder = FrameDecoder()
        try:
            while True:
                data = await reader.read(1 << 20)
                if not data:
                    break
                try:
                    commands = decoder.feed(data)
                except ProtocolError as exc:
                    # The stream cannot be resynced: close it, as NettyDecoder does.
                    log.warning("closing the connection from %s:%d: %s", *conn.peer, exc)
                    break
                for cmd in commands:
                    if cmd.is_response:
                        continue  # answers to our NOTIFY_CONSUMER_IDS_CHANGED: nothing to do
                    self._dispatch(conn, cmd)
                if writer.transport.get_write_buffer_size() > (8 << 20):
                    await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._forget(conn)
            writer.close()

    def _dispatch(self, conn: _Conn, cmd: RemotingCommand) -> None:
        handler = self._handlers.get(cmd.code)
        try:
            if handler is None:
                raise _Refused(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
            self._check_access(cmd)
            result = handler(conn, cmd)
        except _Refused as exc:
            result = cmd.response(exc.code, remark=exc.remark)
        except Exception as exc:  # noqa: BLE001 - a request that breaks the broker is answered, never fatal
            log.exception("request %d from %s:%d failed", cmd.code, *conn.peer)
            result = cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")
        if asyncio.iscoroutine(result):
            self._spawn(self._answer_later(conn, cmd, result))
        elif result is not None and not cmd.is_oneway:
            conn.send(result)

    async def _answer_later(self, conn: _Conn, cmd: RemotingCommand, pending) -> None:
        try:
            result = await pending
        except _Refused as exc:
            result = cmd.response(exc.code, remark=exc.remark)
        except Exception as exc:  # noqa: BLE001
            log.exception("request %d from %s:%d failed", cmd.code, *conn.peer)
            result = cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")
        if not cmd.is_oneway:
            conn.send(result)

    def _check_access(self, cmd: RemotingCommand) -> None:
        """``PlainAccessValidator``: HmacSHA1 over the sorted ext-field values (Signature left out)
        and the body, keyed by the account's secret."""
        if not self.accounts:
            return
        fields = cmd.ext_fields
        access = fields.get("AccessKey")
        secret = self.accounts.get(access or "")
        if secret is None:
            raise _Refused(ResponseCode.NO_PERMISSION, f"No acl config for {access or '(no AccessKey)'}")
        content = "".join(v for k, v in sorted(fields.items()) if k not in ("Signature", "_UNIQUE_KEY_QUERY")).encode()
        expected = base64.b64encode(hmac.new(secret.encode(), content + cmd.body, hashlib.sha1).digest()).decode()
        if not hmac.compare_digest(expected, fields.get("Signature", "")):
            raise _Refused(ResponseCode.NO_PERMISSION, "Check signature failed for accessKey=" + access)

    # -- topics -----------------------------------------------------------------------------------
    def _topic(self, name: str) -> TopicConfig:
        config = self.store.topics.get(name)
        if config is None:
            raise _Refused(ResponseCode.TOPIC_NOT_EXIST,
                           f"topic[{name}] not exist, apply first please! (embedded broker {self.broker_name})")
        return config

    @staticmethod
    def _check_topic_name(name: str) -> None:
        if not name or len(name) > (255 if name.startswith("%") else TOPIC_MAX_LENGTH) or ILLEGAL_CHARACTER.search(name):
            raise _Refused(ResponseCode.SYSTEM_ERROR, f"The specified topic[{name}] is not valid: "
                                                      f"1-{TOPIC_MAX_LENGTH} characters of [%|a-zA-Z0-9_-]")

    def _create(self, name: str, queues: int, perm: int = PERM_READ | PERM_WRITE, **kw) -> TopicConfig:
        config = self.store.topics[name] = TopicConfig.make(name, queues, perm, **kw)
        self.store.save_topics()
        log.info("topic %s created with %d queue(s)", name, queues)
        return config

    def _topic_for_send(self, name: str, default_topic: str | None, default_queues: int) -> TopicConfig:
        """``AbstractSendMessageProcessor.msgCheck``: the topic, created from the default topic when
        that one may be inherited (``TopicConfigManager.createTopicInSendMessageMethod``)."""
        self._check_topic_name(name)
        config = self.store.topics.get(name)
        if config is not None:
            return config
        if name.startswith("%RETRY%") or name.startswith("%DLQ%"):
            return self._create(name, 1)
        template = self.store.topics.get(default_topic or "")
        if not self.auto_create or template is None or not template["perm"] & PERM_INHERIT:
            return self._topic(name)
        queues = max(1, min(default_queues, int(template["writeQueueNums"])))
        return self._create(name, queues, int(template["perm"]) & ~PERM_INHERIT)

    # -- name server ------------------------------------------------------------------------------
    def _route(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        topic = _field(cmd, "topic")
        config = self.store.topics.get(topic)
        if config is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, remark=f"No topic route info in name server for the topic: "
                                                                     f"{topic}\nSee http://rocketmq.apache.org/docs/faq/ "
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

    def _topic_list(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"topicList": sorted(self.store.topics)}))

    def _cluster_info(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        body = {"brokerAddrTable": {self.broker_name: self._broker_data()}, "clusterAddrTable": {CLUSTER: [self.broker_name]}}
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    def _kv_config(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.QUERY_NOT_FOUND, remark=f"No config item, Namespace: "
                                                                 f"{cmd.ext_fields.get('namespace')} Key: "
                                                                 f"{cmd.ext_fields.get('key')}")

    # -- sends ------------------------------------------------------------------------------------
    def _send(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code == RequestCode.SEND_MESSAGE:  # SendMessageRequestHeader
            names = ("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
                     "bornTimestamp", "flag", "properties", "reconsumeTimes", "batch")
        else:  # SendMessageRequestHeaderV2: the same fields, one letter each
            names = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "m")
        _group, topic, default_topic, default_queues, queue_id, sys_flag, born, flag, props, reconsume, batch = names
        topic = _field(cmd, topic)
        config = self._topic_for_send(topic, _field(cmd, default_topic, str, None), _field(cmd, default_queues, int, 4))
        if not config["perm"] & PERM_WRITE:
            raise _Refused(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        queue = _field(cmd, queue_id, int)
        if queue < 0:
            queue = random.randrange(int(config["writeQueueNums"]))
        if queue >= config.queues:
            raise _Refused(ResponseCode.SYSTEM_ERROR, f"request queueId[{queue}] is illegal, topic {topic} has "
                                                      f"{config.queues} queue(s)")
        common = dict(sys_flag=_field(cmd, sys_flag, int, 0), born_timestamp=_field(cmd, born, int, 0),
                      born_host=conn.peer, store_host=(self.host, self.port),
                      reconsume_times=_field(cmd, reconsume, int, 0))
        if _field(cmd, batch, bool, False) or cmd.code == RequestCode.SEND_BATCH_MESSAGE:
            try:
                entries = decode_batch(cmd.body)
            except ProtocolError as exc:
                raise _Refused(ResponseCode.MESSAGE_ILLEGAL, f"batch body: {exc}") from None
            if not entries:
                raise _Refused(ResponseCode.MESSAGE_ILLEGAL, "batch body holds no message")
            messages = [MessageExt(topic, body, queue, 0, flag=f, properties=p, **common) for body, p, f in entries]
        else:
            messages = [MessageExt(topic, cmd.body, queue, 0, flag=_field(cmd, flag, int, 0),
                                   properties=decode_properties(_field(cmd, props, str, "")), **common)]
        for i, m in enumerate(messages):
            if len(m.body) > MAX_MESSAGE_SIZE:
                raise _Refused(ResponseCode.MESSAGE_ILLEGAL, f"message {i}: body of {len(m.body)} bytes is larger than "
                                                             f"{MAX_MESSAGE_SIZE}")
        try:
            stored = self.store.put(messages)  # every record is encoded before any is written
        except ProtocolError as exc:  # e.g. properties longer than a record holds
            raise _Refused(ResponseCode.MESSAGE_ILLEGAL, f"message refused: {exc}") from None
        ids = ",".join(offset_message_id(m.store_host, m.commit_log_offset) for m in stored)
        return cmd.response(ResponseCode.SUCCESS, {"msgId": ids, "queueId": queue, "queueOffset": stored[0].queue_offset,
                                                   "MSG_REGION": "DefaultRegion", "TRACE_ON": "false"})

    def _send_back(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        """``SendMessageProcessor.consumerSendMsgBack``: the message stored at ``offset`` goes to
        ``%RETRY%<group>`` (delivered again at once: no delay levels here), or to
        ``%DLQ%<group>`` after ``maxReconsumeTimes``."""
        group = _field(cmd, "group")
        record = self.store.record_at(_field(cmd, "offset", int))
        if record is None:
            raise _Refused(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {cmd.ext_fields.get('offset')}")
        (m,) = decode_messages(record, decompress=False)
        props = dict(m.properties)
        props.setdefault("RETRY_TOPIC", m.topic)
        props.setdefault("ORIGIN_MESSAGE_ID", cmd.ext_fields.get("originMsgId") or m.msg_id)
        times = m.reconsume_times
        topic = f"%RETRY%{group}"
        if times >= _field(cmd, "maxReconsumeTimes", int, 16) or _field(cmd, "delayLevel", int, 0) < 0:
            topic = f"%DLQ%{group}"
        self._topic_for_send(topic, None, 1)
        retry = MessageExt(topic, m.body, 0, 0, flag=m.flag, sys_flag=m.sys_flag, born_timestamp=m.born_timestamp,
                           born_host=m.born_host, store_host=(self.host, self.port), reconsume_times=times + 1,
                           properties=props)
        self.store.put([retry])
        return cmd.response(ResponseCode.SUCCESS)

    # -- pulls ------------------------------------------------------------------------------------
    async def _pull(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        group, topic = _field(cmd, "consumerGroup"), _field(cmd, "topic")
        queue, offset = _field(cmd, "queueId", int), _field(cmd, "queueOffset", int)
        most, sys_flag = _field(cmd, "maxMsgNums", int), _field(cmd, "sysFlag", int, 0)
        config = self._topic(topic)
        if not config["perm"] & PERM_READ:
            raise _Refused(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
        if not 0 <= queue < int(config["readQueueNums"]):
            raise _Refused(ResponseCode.SYSTEM_ERROR, f"queueId[{queue}] is illegal, topic:[{topic}] topicConfig."
                                                      f"readQueueNums:[{config['readQueueNums']}]")
        if sys_flag & FLAG_SUBSCRIPTION:
            tags = tags_filter(cmd.ext_fields.get("subscription"))
        else:
            tags = tags_filter(self._subscription(group, topic))
        if sys_flag & FLAG_COMMIT_OFFSET:
            commit = _field(cmd, "commitOffset", int, -1)
            if commit >= 0:
                self.store.commit_offset(group, topic, queue, commit)
        wait_ms = min(_field(cmd, "suspendTimeoutMillis", int, 0), MAX_SUSPEND_MS) if sys_flag & FLAG_SUSPEND else 0
        deadline = time.monotonic() + wait_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            top = self.store.max_offset(topic, queue)
            if offset < 0 or offset > top:
                return self._pull_answer(cmd, ResponseCode.PULL_OFFSET_MOVED, top if offset > top else 0, top, b"",
                                         "OFFSET_OVERFLOW_BADLY" if offset > top else "OFFSET_TOO_SMALL")
            if offset < top:
                data, count, next_offset = self.store.read(topic, queue, offset, max(most, 1), self.max_pull_bytes, tags)
                if count:
                    return self._pull_answer(cmd, ResponseCode.SUCCESS, next_offset, top, data, "FOUND")
                return self._pull_answer(cmd, ResponseCode.PULL_RETRY_IMMEDIATELY, next_offset, top, b"",
                                         "NO_MATCHED_MESSAGE")
            left = deadline - time.monotonic()
            if left <= 0:
                code = ResponseCode.PULL_NOT_FOUND if top or offset == 0 else ResponseCode.PULL_OFFSET_MOVED
                return self._pull_answer(cmd, code, offset, top, b"", "OFFSET_OVERFLOW_ONE" if top else "NO_MESSAGE_IN_QUEUE")
            waiter = self.store.wait_future(topic, queue, loop)
            try:
                await asyncio.wait_for(waiter, left)
            except asyncio.TimeoutError:
                pass

    @staticmethod
    def _pull_answer(cmd: RemotingCommand, code: int, next_offset: int, top: int, body: bytes, status: str):
        return cmd.response(code, {"suggestWhichBrokerId": 0, "nextBeginOffset": next_offset, "minOffset": 0,
                                   "maxOffset": top}, body, remark=status)

    def _subscription(self, group: str, topic: str) -> str | None:
        for _conn, subs, _seen in self.consumers.get(group, {}).values():
            if topic in subs:
                return subs[topic]
        return None

    # -- offsets ----------------------------------------------------------------------------------
    def _query_offset(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        """``ConsumerManageProcessor.queryConsumerOffset``: the stored offset; else 0 when the queue
        still holds its first message (always, here: nothing is deleted), unless the request says
        ``setZeroIfNotFound=false`` (5.x), then QUERY_NOT_FOUND."""
        group, topic, queue = _field(cmd, "consumerGroup"), _field(cmd, "topic"), _field(cmd, "queueId", int)
        offset = self.store.consumer_offset(group, topic, queue)
        if offset is None:
            if cmd.ext_fields.get("setZeroIfNotFound", "true").lower() == "false":
                return cmd.response(ResponseCode.QUERY_NOT_FOUND, remark="Not found, V3_0_6_SNAPSHOT maybe this group "
                                                                         "consumer boot first")
            offset = 0
        return cmd.response(ResponseCode.SUCCESS, {"offset": offset})

    def _update_offset(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        group, topic, queue = _field(cmd, "consumerGroup"), _field(cmd, "topic"), _field(cmd, "queueId", int)
        self.store.commit_offset(group, topic, queue, _field(cmd, "commitOffset", int))
        return cmd.response(ResponseCode.SUCCESS)

    def _queue_of(self, cmd: RemotingCommand) -> tuple[str, int]:
        topic, queue = _field(cmd, "topic"), _field(cmd, "queueId", int)
        self._topic(topic)
        return topic, queue

    def _max_offset(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, {"offset": self.store.max_offset(*self._queue_of(cmd))})

    def _min_offset(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        self._queue_of(cmd)
        return cmd.response(ResponseCode.SUCCESS, {"offset": 0})

    def _search_offset(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        topic, queue = self._queue_of(cmd)
        return cmd.response(ResponseCode.SUCCESS,
                            {"offset": self.store.search_offset(topic, queue, _field(cmd, "timestamp", int))})

    def _earliest_time(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        topic, queue = self._queue_of(cmd)
        if not self.store.max_offset(topic, queue):
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"get earliest message store time failed, {topic} {queue}")
        return cmd.response(ResponseCode.SUCCESS, {"timestamp": self.store.store_timestamp(topic, queue, 0)})

    def _view_message(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        record = self.store.record_at(_field(cmd, "offset", int))
        if record is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"can not find message by the offset, "
                                                                  f"{cmd.ext_fields.get('offset')}")
        return cmd.response(ResponseCode.SUCCESS, body=record)

    # -- clients ----------------------------------------------------------------------------------
    def _heartbeat(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        """``ClientManageProcessor.heartBeat``: consumers registered (enum names or ordinals
        accepted), their subscription groups and ``%RETRY%`` topics created."""
        try:
            data = orjson.loads(cmd.body)
            client_id = str(data["clientID"])
            consumer_set = data.get("consumerDataSet") or []
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise _Refused(ResponseCode.SYSTEM_ERROR, f"heartbeat body is not HeartbeatData JSON: {exc}") from None
        conn.client_ids.add(client_id)
        now = int(time.time() * 1000)
        for consumer in consumer_set:
            group = str(consumer.get("groupName", ""))
            if not group:
                continue
            subs = {str(s.get("topic")): str(s.get("subString") or "*") for s in consumer.get("subscriptionDataSet") or []}
            if group not in self.store.groups:
                self.store.groups[group] = _group_config(group)
                self.store.save_groups()
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
            conn.send(RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, flag=2, ext_fields={"consumerGroup": group},
                                      language="JAVA"))

    def _unregister(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        client_id = _field(cmd, "clientID")
        group = cmd.ext_fields.get("consumerGroup")
        if group and self.consumers.get(group, {}).pop(client_id, None) is not None:
            self._notify_changed(group)
        return cmd.response(ResponseCode.SUCCESS)

    def _forget(self, conn: _Conn) -> None:
        for group in conn.groups:
            members = self.consumers.get(group, {})
            gone = [cid for cid, (c, _s, _t) in members.items() if c is conn]
            for cid in gone:
                del members[cid]
            if gone:
                self._notify_changed(group)

    def _consumer_list(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        group = _field(cmd, "consumerGroup")
        members = sorted(self.consumers.get(group, {}))
        if not members:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"no consumer for this group, {group}")
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"consumerIdList": members}))

    def _lock_body(self, cmd: RemotingCommand) -> tuple[str, str, list[dict]]:
        try:
            data = orjson.loads(cmd.body)
            return str(data["consumerGroup"]), str(data["clientId"]), list(data.get("mqSet") or [])
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise _Refused(ResponseCode.SYSTEM_ERROR, f"lock body: {exc}") from None

    def _lock(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        """``RebalanceLockManager.tryLockBatch``: a queue is locked for a client unless another
        client holds an unexpired lock on it."""
        group, client, queues = self._lock_body(cmd)
        now = int(time.time() * 1000)
        locked = []
        for mq in queues:
            key = (group, str(mq.get("topic")), int(mq.get("queueId", -1)))
            holder = self.locks.get(key)
            if holder is None or holder[0] == client or holder[1] < now:
                self.locks[key] = (client, now + LOCK_EXPIRY_MS)
                locked.append(mq)
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"lockOKMQSet": locked}))

    def _unlock(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        group, client, queues = self._lock_body(cmd)
        for mq in queues:
            key = (group, str(mq.get("topic")), int(mq.get("queueId", -1)))
            if self.locks.get(key, ("",))[0] == client:
                del self.locks[key]
        return cmd.response(ResponseCode.SUCCESS)

    # -- admin ------------------------------------------------------------------------------------
    def _create_topic(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        """``AdminBrokerProcessor.updateAndCreateTopic`` (CreateTopicRequestHeader)."""
        topic = _field(cmd, "topic")
        self._check_topic_name(topic)
        read, write = _field(cmd, "readQueueNums", int), _field(cmd, "writeQueueNums", int)
        if read < 1 or write < 1 or max(read, write) > 1024:
            raise _Refused(ResponseCode.INVALID_PARAMETER, f"queue numbers read {read} / write {write} must be 1..1024")
        config = TopicConfig.make(topic, write, _field(cmd, "perm", int, PERM_READ | PERM_WRITE), read=read,
                                  order=_field(cmd, "order", bool, False), sys_flag=_field(cmd, "topicSysFlag", int, 0),
                                  filter_type=_field(cmd, "topicFilterType", str, "SINGLE_TAG"))
        self.store.topics[topic] = config
        self.store.save_topics()
        return cmd.response(ResponseCode.SUCCESS)

    def _delete_topic(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        topic = _field(cmd, "topic")
        if self.store.topics.pop(topic, None) is not None:
            self.store.save_topics()
        return cmd.response(ResponseCode.SUCCESS)

    def _delete_route(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        """``DefaultRequestProcessor.deleteTopicInNamesrv``: the name server here routes from this
        broker's own topic table, so DELETE_TOPIC_IN_BROKER removed the route already."""
        _field(cmd, "topic")
        return cmd.response(ResponseCode.SUCCESS)

    def _all_topic_configs(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        body = {"dataVersion": {"counter": len(self.store.topics), "timestamp": int(time.time() * 1000)},
                "topicConfigTable": self.store.topics}
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    def _topic_config(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(self._topic(_field(cmd, "topic"))))

    def _topic_stats(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        """TopicStatsTable; its offsetTable is keyed by MessageQueue objects, written as fastjson
        writes them (an object as a key: not standard JSON, as a Java broker answers)."""
        topic = _field(cmd, "topic")
        config = self._topic(topic)
        entries = []
        for q in range(config.queues):
            top = self.store.max_offset(topic, q)
            stamp = self.store.store_timestamp(topic, q, top - 1) if top else 0
            entries.append((self._mq(topic, q), {"lastUpdateTimestamp": stamp, "maxOffset": top, "minOffset": 0}))
        return cmd.response(ResponseCode.SUCCESS, body=_object_keyed({"offsetTable": entries}, {"topicPutTps": 0.0}))

    def _mq(self, topic: str, queue: int) -> dict:
        return {"brokerName": self.broker_name, "queueId": queue, "topic": topic}

    def _consume_stats(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        """``AdminBrokerProcessor.getConsumeStats``: per queue of the group's topics, the broker's
        max offset and the group's committed offset."""
        group = _field(cmd, "consumerGroup")
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

    def _create_group(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        try:
            config = orjson.loads(cmd.body)
            name = str(config["groupName"])
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise _Refused(ResponseCode.SYSTEM_ERROR, f"subscription group body: {exc}") from None
        self.store.groups[name] = {**_group_config(name), **config}
        self.store.save_groups()
        return cmd.response(ResponseCode.SUCCESS)

    def _delete_group(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        if self.store.groups.pop(_field(cmd, "groupName"), None) is not None:
            self.store.save_groups()
        return cmd.response(ResponseCode.SUCCESS)

    def _all_groups(self, conn: _Conn, cmd: RemotingCommand) -> RemotingCommand:
        body = {"dataVersion": {"counter": len(self.store.groups), "timestamp": int(time.time() * 1000)},
                "subscriptionGroupTable": self.store.groups}
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(body))


def _group_config(name: str) -> dict:
    """``SubscriptionGroupConfig``'s defaults."""
    return {"groupName": name, "consumeEnable": True, "consumeFromMinEnable": True, "consumeBroadcastEnable": True,
            "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
            "notifyConsumerIdsChangedEnable": True}


def _object_keyed(table: dict[str, list[tuple[dict, dict]]], rest: dict) -> bytes:
    """fastjson's output for maps keyed by objects: ``{{"k":..}:{..}}``."""
    parts = []
    for name, entries in table.items():
        inner = ",".join(orjson.dumps(k).decode() + ":" + orjson.dumps(v).decode() for k, v in entries)
        parts.append(f'"{name}":{{{inner}}}')
    parts.extend(f'"{k}":{orjson.dumps(v).decode()}' for k, v in rest.items())
    return ("{" + ",".join(parts) + "}").encode()


async def serve(port: int, data_dir: str | Path, *, host: str = "127.0.0.1", sync_flush: bool = False,
                flush_interval_ms: int = 500, auto_create_topics: bool = True, default_queues: int = 8,
                accounts: dict[str, str] | None = None, ready: Callable[[Broker], None] | None = None) -> None:
    """Run a broker until SIGTERM/SIGINT (or cancellation)."""
    store = MessageStore(data_dir, sync_flush=sync_flush, flush_interval_ms=flush_interval_ms)
    broker = Broker(store, host=host, port=port, auto_create_topics=auto_create_topics, default_queues=default_queues,
                    accounts=accounts)
    await broker.start()
    if ready is not None:
        ready(broker)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    try:
        await stop.wait()
    finally:
        await broker.close()


def main(port: int, data_dir: str, host: str = "127.0.0.1", sync_flush: bool = False, flush_interval_ms: int = 500,
         auto_create_topics: bool = True, default_queues: int = 8, acl: list[str] | None = None) -> None:
    accounts = {}
    for item in acl or []:
        access, sep, secret = item.partition(":")
        if not sep or not access or not secret:
            raise ValueError(f"--acl {item!r}: expected ACCESS_KEY:SECRET_KEY")
        accounts[access] = secret
    print(f"embedded RocketMQ broker (development use only) on {host}:{port}, data in {os.path.abspath(data_dir)}",
          flush=True)
    asyncio.run(serve(port, data_dir, host=host, sync_flush=sync_flush, flush_interval_ms=flush_interval_ms,
                      auto_create_topics=auto_create_topics, default_queues=default_queues, accounts=accounts))
