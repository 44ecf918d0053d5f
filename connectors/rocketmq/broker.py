"""The embedded RocketMQ broker: a name server and one broker in one process, on one port.

A **development broker**: for tests, the demo and users trying the product, where no RocketMQ
server can be installed. It speaks the RocketMQ remoting protocol (JSON and ROCKETMQ headers,
answered in the request's serialization) so the official clients and this project's client work
against it, and it stores every queue durably (see :mod:`connectors.rocketmq.store` for the files
and the flush policy). It is not a production broker: one broker, no replication, no
transactions, no delay levels (retried messages are delivered again at once), no SQL92 filters,
no retention (nothing is deleted).

What it serves, with the apache/rocketmq class each behaviour follows:

- sends (``SendMessageProcessor``): SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE; topics
  auto-created from ``TBW102`` when ``auto_create_topics`` (``TopicConfigManager``);
  CONSUMER_SEND_MSG_BACK into ``%RETRY%<group>`` / ``%DLQ%<group>``;
- pulls (``PullMessageProcessor``): by queue and offset, tag filters, long polling, commit offset flag;
- name server, offsets, lookups and GET_BROKER_RUNTIME_INFO: :mod:`connectors.rocketmq.lookups`;
- clients and admin requests: :mod:`connectors.rocketmq.admin`;
- ACL (``PlainAccessValidator``), when accounts are configured: :mod:`connectors.rocketmq.acl`.

Connections, and the limits that keep a hostile client from exhausting the broker's memory or file
descriptors, are in :mod:`connectors.rocketmq.server`. Run it with
``connect rocketmq-broker --port N --data-dir DIR``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import time
from pathlib import Path
from typing import Callable

import attrs

from connectors.rocketmq.acl import check_access, load_accounts
from connectors.rocketmq.admin import AdminHandlers, saved
from connectors.rocketmq.lookups import LookupHandlers
from connectors.rocketmq.models import DEFAULT_TOPIC
from connectors.rocketmq.protocol import (
    FLAG_COMMIT_OFFSET,
    FLAG_SUBSCRIPTION,
    FLAG_SUSPEND,
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
from connectors.rocketmq.server import READER_LIMIT, Connection, ConnectionServer, Limits, fd_budget
from connectors.rocketmq.store import PERM_INHERIT, PERM_READ, PERM_WRITE, MessageStore, TopicConfig, tags_filter
from connectors.rocketmq.validation import Refused, check_expression, check_topic_name, field, shown

__all__ = ["Broker", "Limits", "serve", "main"]

log = logging.getLogger(__name__)

AUTO_CREATE_TOPIC = DEFAULT_TOPIC  # TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC
MAX_MESSAGE_SIZE = 4 * 1024 * 1024  # BrokerConfig/MessageStoreConfig maxMessageSize (a batch's body too)
MAX_SUSPEND_MS = 30_000
MAX_GROUPS = 1000
GET_BROKER_RUNTIME_INFO = 28  # RequestCode
CONSUME_FROM = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
                "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
                "CONSUME_FROM_TIMESTAMP")


class Broker(AdminHandlers, LookupHandlers):
    """Name server + broker over one :class:`MessageStore`."""

    def __init__(self, store: MessageStore, *, host: str = "127.0.0.1", port: int = 9876, broker_name: str = "broker-a",
                 auto_create_topics: bool = True, default_queues: int = 8, max_pull_bytes: int = 4 * 1024 * 1024,
                 accounts: dict[str, str] | None = None, limits: Limits | None = None,
                 max_groups: int = MAX_GROUPS) -> None:
        self.store = store
        self.host, self.port = host, port
        self.broker_name = broker_name
        self.address = f"{host}:{port}"
        self.auto_create = auto_create_topics
        self.default_queues = default_queues
        self.max_pull_bytes = max_pull_bytes
        self.accounts = accounts or {}
        self.max_groups = max_groups
        self.limits = limits or Limits()
        self.connections = ConnectionServer(self.limits, self._dispatch, self._forget)
        # group -> client id -> (connection, subscriptions {topic: expression}, last heartbeat ms)
        self.consumers: dict[str, dict[str, tuple[Connection, dict[str, str], int]]] = {}
        self.locks: dict[tuple[str, str, int], tuple[str, int]] = {}  # (group, topic, queue) -> (client id, until ms)
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        if auto_create_topics and AUTO_CREATE_TOPIC not in store.topics:
            store.set_topic(AUTO_CREATE_TOPIC, TopicConfig.make(AUTO_CREATE_TOPIC, default_queues,
                                                                PERM_INHERIT | PERM_READ | PERM_WRITE))
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
            GET_BROKER_RUNTIME_INFO: self._runtime_info,
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
        self._server = await asyncio.start_server(self.connections.serve, self.host, self.port, limit=READER_LIMIT)
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]
            self.address = f"{self.host}:{self.port}"
        self.store.lock.describe(f"pid {os.getpid()}, listening on {self.address}")
        self._spawn(self._flusher())
        self._spawn(self.connections.run())
        log.info("embedded RocketMQ broker %s listening on %s, data in %s (%s)", self.broker_name, self.address,
                 self.store.dir, ", ".join(f"{k} {v}" for k, v in attrs.asdict(self.limits).items()))
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
        self.connections.close_all()
        for task in list(self._tasks):
            task.cancel()
        self.store.close()

    def _dispatch(self, conn: Connection, cmd: RemotingCommand) -> None:
        handler = self._handlers.get(cmd.code)
        try:
            if handler is None:
                raise Refused(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
            check_access(self.accounts, cmd)
            result = handler(conn, cmd)
        except Refused as exc:
            result = cmd.response(exc.code, remark=exc.remark)
        except Exception as exc:  # noqa: BLE001 - a request that breaks the broker is answered, never fatal
            log.exception("request %d from %s:%d failed", cmd.code, *conn.peer)
            result = cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")
        if asyncio.iscoroutine(result):
            answer = self._answer_later(conn, cmd, result)
            if not conn.start_async(answer):
                answer.close()
                result.close()
                conn.send(cmd.response(ResponseCode.SYSTEM_BUSY, remark=f"[TOO_MANY_REQUESTS] broker busy: "
                                                                        f"{self.limits.max_pending_total} answers "
                                                                        f"pending, try again later"))
        elif result is not None and not cmd.is_oneway:
            conn.send(result)

    async def _answer_later(self, conn: Connection, cmd: RemotingCommand, pending) -> None:
        try:
            result = await pending
        except Refused as exc:
            result = cmd.response(exc.code, remark=exc.remark)
        except Exception as exc:  # noqa: BLE001
            log.exception("request %d from %s:%d failed", cmd.code, *conn.peer)
            result = cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")
        if not cmd.is_oneway:
            conn.send(result)

    # -- topics -----------------------------------------------------------------------------------
    def _topic(self, name: str) -> TopicConfig:
        config = self.store.topics.get(name)
        if config is None:
            raise Refused(ResponseCode.TOPIC_NOT_EXIST,
                          f"topic[{shown(name)}] not exist, apply first please! (embedded broker {self.broker_name})")
        return config

    def _create(self, name: str, queues: int, perm: int = PERM_READ | PERM_WRITE) -> TopicConfig:
        config = TopicConfig.make(name, queues, perm)
        saved(self.store.set_topic, name, config)
        log.info("topic %s created with %d queue(s)", name, queues)
        return config

    def _topic_for_send(self, name: str, default_topic: str | None, default_queues: int) -> TopicConfig:
        """``AbstractSendMessageProcessor.msgCheck``: the topic, created from the default topic when
        that one may be inherited (``TopicConfigManager.createTopicInSendMessageMethod``)."""
        check_topic_name(name)
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

    # -- sends ------------------------------------------------------------------------------------
    def _send(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code == RequestCode.SEND_MESSAGE:  # SendMessageRequestHeader
            names = ("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
                     "bornTimestamp", "flag", "properties", "reconsumeTimes", "batch")
        else:  # SendMessageRequestHeaderV2: the same fields, one letter each
            names = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "m")
        _group, topic, default_topic, default_queues, queue_id, sys_flag, born, flag, props, reconsume, batch = names
        topic = field(cmd, topic)
        config = self._topic_for_send(topic, field(cmd, default_topic, str, None), field(cmd, default_queues, int, 4))
        if not config["perm"] & PERM_WRITE:
            raise Refused(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        queue = field(cmd, queue_id, int)
        if queue < 0:
            queue = random.randrange(int(config["writeQueueNums"]))
        if queue >= config.queues:  # INVALID_PARAMETER as 5.x answers (4.9.x: SYSTEM_ERROR, retriable)
            raise Refused(ResponseCode.INVALID_PARAMETER, f"request queueId[{queue}] is illegal, topic {topic} has "
                                                           f"{config.queues} queue(s)")
        common = dict(sys_flag=field(cmd, sys_flag, int, 0), born_timestamp=field(cmd, born, int, 0),
                      born_host=conn.peer, store_host=(self.host, self.port),
                      reconsume_times=field(cmd, reconsume, int, 0))
        if field(cmd, batch, bool, False) or cmd.code == RequestCode.SEND_BATCH_MESSAGE:
            if len(cmd.body) > MAX_MESSAGE_SIZE:  # a batch is checked whole, as the Java broker does
                raise Refused(ResponseCode.MESSAGE_ILLEGAL, f"batch body of {len(cmd.body)} bytes is larger than "
                                                            f"{MAX_MESSAGE_SIZE}")
            try:
                entries = decode_batch(cmd.body)
            except ProtocolError as exc:
                raise Refused(ResponseCode.MESSAGE_ILLEGAL, f"batch body: {exc}") from None
            if not entries:
                raise Refused(ResponseCode.MESSAGE_ILLEGAL, "batch body holds no message")
            messages = [MessageExt(topic, body, queue, 0, flag=f, properties=p, **common) for body, p, f in entries]
        else:
            messages = [MessageExt(topic, cmd.body, queue, 0, flag=field(cmd, flag, int, 0),
                                   properties=decode_properties(field(cmd, props, str, "")), **common)]
        for i, m in enumerate(messages):
            if len(m.body) > MAX_MESSAGE_SIZE:
                raise Refused(ResponseCode.MESSAGE_ILLEGAL, f"message {i}: body of {len(m.body)} bytes is larger than "
                                                             f"{MAX_MESSAGE_SIZE}")
        try:
            stored = self.store.put(messages)  # every record is encoded before any is written
        except ProtocolError as exc:  # e.g. properties longer than a record holds
            raise Refused(ResponseCode.MESSAGE_ILLEGAL, f"message refused: {exc}") from None
        ids = ",".join(offset_message_id(m.store_host, m.commit_log_offset) for m in stored)
        return cmd.response(ResponseCode.SUCCESS, {"msgId": ids, "queueId": queue, "queueOffset": stored[0].queue_offset,
                                                   "MSG_REGION": "DefaultRegion", "TRACE_ON": "false"})

    def _send_back(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """``SendMessageProcessor.consumerSendMsgBack``: the message stored at ``offset`` goes to
        ``%RETRY%<group>`` (delivered again at once: no delay levels here), or to
        ``%DLQ%<group>`` after ``maxReconsumeTimes``."""
        group = field(cmd, "group")
        self._ensure_group(group)  # its retry and dead-letter topics are created for it
        record = self.store.record_at(field(cmd, "offset", int))
        if record is None:
            raise Refused(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {shown(cmd.ext_fields['offset'])}")
        (m,) = decode_messages(record, decompress=False)
        props = dict(m.properties)
        props.setdefault("RETRY_TOPIC", m.topic)
        props.setdefault("ORIGIN_MESSAGE_ID", cmd.ext_fields.get("originMsgId") or m.msg_id)
        times = m.reconsume_times
        topic = f"%RETRY%{group}"
        if times >= field(cmd, "maxReconsumeTimes", int, 16) or field(cmd, "delayLevel", int, 0) < 0:
            topic = f"%DLQ%{group}"
        self._topic_for_send(topic, None, 1)
        retry = MessageExt(topic, m.body, 0, 0, flag=m.flag, sys_flag=m.sys_flag, born_timestamp=m.born_timestamp,
                           born_host=m.born_host, store_host=(self.host, self.port), reconsume_times=times + 1,
                           properties=props)
        try:
            self.store.put([retry])
        except ProtocolError as exc:  # e.g. a retry topic longer than a record holds
            raise Refused(ResponseCode.MESSAGE_ILLEGAL, f"message refused: {exc}") from None
        return cmd.response(ResponseCode.SUCCESS)

    # -- pulls ------------------------------------------------------------------------------------
    async def _pull(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group, topic = field(cmd, "consumerGroup"), field(cmd, "topic")
        queue, offset = field(cmd, "queueId", int), field(cmd, "queueOffset", int)
        most, sys_flag = field(cmd, "maxMsgNums", int), field(cmd, "sysFlag", int, 0)
        config = self._topic(topic)
        if not config["perm"] & PERM_READ:
            raise Refused(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
        if not 0 <= queue < int(config["readQueueNums"]):
            raise Refused(ResponseCode.INVALID_PARAMETER, f"queueId[{queue}] is illegal, topic:[{topic}] topicConfig."
                                                           f"readQueueNums:[{config['readQueueNums']}]")
        self._ensure_group(group)  # autoCreateSubscriptionGroup: a pull creates its group
        if sys_flag & FLAG_SUBSCRIPTION:
            tags = tags_filter(check_expression(cmd.ext_fields.get("subscription")))
        else:
            tags = tags_filter(self._subscription(group, topic))
        if sys_flag & FLAG_COMMIT_OFFSET:
            commit = field(cmd, "commitOffset", int, -1)
            if commit >= 0:
                self.store.commit_offset(group, topic, queue, commit)
        wait_ms = min(field(cmd, "suspendTimeoutMillis", int, 0), MAX_SUSPEND_MS) if sys_flag & FLAG_SUSPEND else 0
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            top = self.store.max_offset(topic, queue)
            if offset < 0 or offset > top:
                return self._pull_answer(cmd, ResponseCode.PULL_OFFSET_MOVED, top if offset > top else 0, top, b"",
                                         "OFFSET_OVERFLOW_BADLY" if offset > top else "OFFSET_TOO_SMALL")
            if offset < top:
                # Messages are read only once the client has read what it was sent before, and
                # nothing awaits between the read and the write: one answer over the mark at most.
                await conn.writable()
                top = self.store.max_offset(topic, queue)
                data, count, next_offset = self.store.read(topic, queue, offset, max(most, 1), self.max_pull_bytes, tags)
                if count:
                    return self._pull_answer(cmd, ResponseCode.SUCCESS, next_offset, top, data, "FOUND")
                return self._pull_answer(cmd, ResponseCode.PULL_RETRY_IMMEDIATELY, next_offset, top, b"",
                                         "NO_MATCHED_MESSAGE")
            left = deadline - time.monotonic()
            if left <= 0:
                code = ResponseCode.PULL_NOT_FOUND if top or offset == 0 else ResponseCode.PULL_OFFSET_MOVED
                return self._pull_answer(cmd, code, offset, top, b"", "OFFSET_OVERFLOW_ONE" if top else "NO_MESSAGE_IN_QUEUE")
            await self.store.wait_message(topic, queue, left)

    @staticmethod
    def _pull_answer(cmd: RemotingCommand, code: int, next_offset: int, top: int, body: bytes, status: str):
        return cmd.response(code, {"suggestWhichBrokerId": 0, "nextBeginOffset": next_offset, "minOffset": 0,
                                   "maxOffset": top}, body, remark=status)

    def _subscription(self, group: str, topic: str) -> str | None:
        for _conn, subs, _seen in self.consumers.get(group, {}).values():
            if topic in subs:
                return subs[topic]
        return None


async def serve(port: int, data_dir: str | Path, *, host: str = "127.0.0.1", sync_flush: bool = False,
                flush_interval_ms: int = 500, auto_create_topics: bool = True, default_queues: int = 8,
                accounts: dict[str, str] | None = None, limits: Limits | None = None, max_groups: int = MAX_GROUPS,
                max_open_files: int | None = None, ready: Callable[[Broker], None] | None = None) -> None:
    """Run a broker until SIGTERM/SIGINT (or cancellation)."""
    store = MessageStore(data_dir, sync_flush=sync_flush, flush_interval_ms=flush_interval_ms,
                         max_open_files=max_open_files or fd_budget()[1])
    try:
        broker = Broker(store, host=host, port=port, auto_create_topics=auto_create_topics,
                        default_queues=default_queues, accounts=accounts, limits=limits, max_groups=max_groups)
        await broker.start()
    except BaseException:
        store.close()
        raise
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
         auto_create_topics: bool = True, default_queues: int = 8, acl: list[str] | None = None,
         acl_file: str | None = None, limits: Limits | None = None, max_groups: int = MAX_GROUPS,
         max_open_files: int | None = None) -> None:
    accounts = load_accounts(file=acl_file, inline=acl or ())
    print(f"embedded RocketMQ broker (development use only) on {host}:{port}, data in {os.path.abspath(data_dir)}"
          f"{f', ACL with {len(accounts)} account(s)' if accounts else ''}", flush=True)
    asyncio.run(serve(port, data_dir, host=host, sync_flush=sync_flush, flush_interval_ms=flush_interval_ms,
                      auto_create_topics=auto_create_topics, default_queues=default_queues, accounts=accounts,
                      limits=limits, max_groups=max_groups, max_open_files=max_open_files))
