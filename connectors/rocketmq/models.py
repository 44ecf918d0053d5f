"""What RocketMQ's name servers and brokers answer, as values, and the parsers of their JSON
bodies (``TopicRouteData``/``QueueData``/``BrokerData``, ``SendResult``, ``PullResult``,
``ConsumeStats``/``OffsetWrapper``, ``TopicConfig``, ``MessageQueue``, ``ConsumerData``).

The parsers take standard JSON or fastjson's (see :mod:`connectors.rocketmq.fastjson`) and raise
:class:`connectors.rocketmq.protocol.ProtocolError` naming the JSON path of what is wrong."""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import attrs

from connectors.rocketmq.fastjson import json_list, json_object, parse_fastjson
from connectors.rocketmq.protocol import MessageExt, ProtocolError, ResponseCode

__all__ = [
    "MessageQueue", "QueueData", "BrokerData", "TopicRouteData", "SendResult", "PullResult", "OffsetWrapper",
    "ConsumeStats", "TopicConfig", "ConsumerData", "parse_topic_route", "parse_consume_stats",
    "parse_topic_configs", "parse_cluster_info", "PERM_READ", "PERM_WRITE", "PERM_INHERIT", "DEFAULT_TOPIC",
    "SEND_STATUS", "PULL_STATUS",
]

# PermName
PERM_INHERIT, PERM_WRITE, PERM_READ = 1, 2, 4

DEFAULT_TOPIC = "TBW102"  # TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC



# -- results --------------------------------------------------------------------------------------
@attrs.frozen(order=True)
class MessageQueue:
    """``MessageQueue``: topic, broker name, queue id."""

    topic: str
    broker_name: str
    queue_id: int


@attrs.frozen
class QueueData:
    """``QueueData``: one broker's queues of a topic."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


@attrs.frozen
class BrokerData:
    """``BrokerData``: a broker's addresses by broker id (0 = master)."""

    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str]

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(0)


@attrs.frozen
class TopicRouteData:
    """``TopicRouteData`` (GET_ROUTEINFO_BY_TOPIC body); ``topic`` is the topic asked for."""

    topic: str
    queue_datas: list[QueueData]
    broker_datas: list[BrokerData]
    order_topic_conf: str | None = None
    filter_server_table: Mapping[str, list[str]] = attrs.field(factory=dict)

    def broker(self, broker_name: str) -> BrokerData | None:
        return next((b for b in self.broker_datas if b.broker_name == broker_name), None)

    def master_addr(self, broker_name: str) -> str | None:
        b = self.broker(broker_name)
        return b.master_addr if b else None

    def write_queues(self) -> list[MessageQueue]:
        """Writable queues on brokers with a master, sorted (``topicRouteData2TopicPublishInfo``)."""
        return sorted(MessageQueue(self.topic, q.broker_name, i) for q in self.queue_datas
                      if q.writable and self.master_addr(q.broker_name) for i in range(q.write_queue_nums))

    def read_queues(self) -> list[MessageQueue]:
        """Readable queues, sorted (``topicRouteData2TopicSubscribeInfo``)."""
        return sorted(MessageQueue(self.topic, q.broker_name, i) for q in self.queue_datas
                      if q.readable for i in range(q.read_queue_nums))


SEND_STATUS = {ResponseCode.SUCCESS: "SEND_OK", ResponseCode.FLUSH_DISK_TIMEOUT: "FLUSH_DISK_TIMEOUT",
               ResponseCode.FLUSH_SLAVE_TIMEOUT: "FLUSH_SLAVE_TIMEOUT",
               ResponseCode.SLAVE_NOT_AVAILABLE: "SLAVE_NOT_AVAILABLE"}  # SendStatus, MQClientAPIImpl.processSendResponse


@attrs.frozen
class SendResult:
    """The answer to a send (``SendResult`` from ``SendMessageResponseHeader``). ``msg_id`` is the
    broker's ``msgId`` (the offset message id; comma-joined ids for a batch). ``status`` is
    SEND_OK, FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE: the message is stored
    in every case; the last three say the requested durability was not confirmed."""

    status: str
    msg_id: str
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None
    region_id: str | None = None
    trace_on: bool = True

    @property
    def ok(self) -> bool:
        return self.status == "SEND_OK"

    @property
    def msg_ids(self) -> list[str]:
        return [m for m in self.msg_id.split(",") if m]


PULL_STATUS = {ResponseCode.SUCCESS: "FOUND", ResponseCode.PULL_NOT_FOUND: "NO_NEW_MSG",
               ResponseCode.PULL_RETRY_IMMEDIATELY: "NO_MATCHED_MSG",
               ResponseCode.PULL_OFFSET_MOVED: "OFFSET_ILLEGAL"}  # PullStatus, MQClientAPIImpl.processPullResponse


@attrs.frozen
class PullResult:
    """The answer to PULL_MESSAGE (``PullResult`` from ``PullMessageResponseHeader``). ``status``:
    FOUND (SUCCESS), NO_NEW_MSG (PULL_NOT_FOUND), NO_MATCHED_MSG (PULL_RETRY_IMMEDIATELY) or
    OFFSET_ILLEGAL (PULL_OFFSET_MOVED); ``code`` is the response code."""

    status: str
    code: int
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int = 0
    messages: list[MessageExt] = attrs.field(factory=list)


@attrs.frozen
class OffsetWrapper:
    """``OffsetWrapper``: one queue's broker and consumer offsets."""

    broker_offset: int
    consumer_offset: int
    last_timestamp: int = 0
    pull_offset: int = 0  # 5.x only

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)


@attrs.frozen
class ConsumeStats:
    """``ConsumeStats`` (GET_CONSUME_STATS body)."""

    offset_table: Mapping[MessageQueue, OffsetWrapper]
    consume_tps: float = 0.0

    @property
    def total_lag(self) -> int:
        return sum(o.lag for o in self.offset_table.values())


@attrs.frozen
class TopicConfig:
    """``TopicConfig`` (from GET_ALL_TOPIC_CONFIG)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False


@attrs.frozen
class ConsumerData:
    """A consumer group in a heartbeat (``ConsumerData``); ``topics`` are subscribed with ``*``.
    The defaults describe a pull consumer with explicit offsets."""

    group: str
    topics: Sequence[str] = ()
    consume_type: str = "CONSUME_ACTIVELY"  # ConsumeType: CONSUME_ACTIVELY (pull), CONSUME_PASSIVELY (push)
    message_model: str = "CLUSTERING"  # MessageModel
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"  # ConsumeFromWhere
    unit_mode: bool = False

    def to_json(self, sub_version: int) -> dict:
        subs = [{"classFilterMode": False, "codeSet": [], "expressionType": "TAG", "subString": "*",
                 "subVersion": sub_version, "tagsSet": [], "topic": t} for t in self.topics]
        return {"consumeFromWhere": self.consume_from_where, "consumeType": self.consume_type, "groupName": self.group,
                "messageModel": self.message_model, "subscriptionDataSet": subs, "unitMode": self.unit_mode}


# -- body parsers ---------------------------------------------------------------------------------
def _int_field(doc: Mapping, key: str, where: str, default: int | None = None) -> int:
    v = doc.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ProtocolError(f"{where}: {key} is {v!r}, not an integer")
    try:
        return int(v)
    except ValueError:
        raise ProtocolError(f"{where}: {key} is {v!r}, not an integer") from None


def _broker_data(doc: Any, where: str) -> BrokerData:
    """A ``BrokerData`` object (``brokerAddrs`` keys may be bare numbers: fastjson)."""
    doc = json_object(doc, where)
    addrs = {}
    for k, v in json_object(doc.get("brokerAddrs") or {}, f"{where}.brokerAddrs").items():
        try:
            addrs[int(k)] = str(v)
        except (TypeError, ValueError):
            raise ProtocolError(f"{where}.brokerAddrs: broker id {k!r} is not a number") from None
    return BrokerData(str(doc.get("cluster") or ""), str(doc.get("brokerName") or ""), addrs)


def parse_topic_route(body: bytes | str, topic: str = "") -> TopicRouteData:
    """A ``TopicRouteData`` JSON body, standard or fastjson (``brokerAddrs`` keys bare numbers)."""
    doc = json_object(parse_fastjson(body), "route body")
    queues = []
    for i, q in enumerate(json_list(doc, "queueDatas", "route body")):
        where = f"route body: queueDatas[{i}]"
        q = json_object(q, where)
        queues.append(QueueData(str(q.get("brokerName") or ""), _int_field(q, "readQueueNums", where, 0),
                                _int_field(q, "writeQueueNums", where, 0), _int_field(q, "perm", where, 0),
                                _int_field(q, "topicSysFlag", where, 0)))
    brokers = [_broker_data(b, f"route body: brokerDatas[{i}]")
               for i, b in enumerate(json_list(doc, "brokerDatas", "route body"))]
    filters = doc.get("filterServerTable") or {}
    return TopicRouteData(topic, queues, brokers, doc.get("orderTopicConf") or None,
                          {str(k): list(v or []) for k, v in json_object(filters, "route body: filterServerTable").items()})


_MQ_TEXT = re.compile(r"MessageQueue \[topic=(.*), brokerName=(.*), queueId=(-?\d+)\]")


def _message_queue(key: Any, where: str) -> MessageQueue:
    if isinstance(key, str):  # a quoted key: JSON text of the object, or MessageQueue.toString()
        m = _MQ_TEXT.fullmatch(key)
        if m:
            return MessageQueue(m.group(1), m.group(2), int(m.group(3)))
        try:
            key = parse_fastjson(key)
        except ProtocolError:
            raise ProtocolError(f"{where}: key {key!r} is not a MessageQueue") from None
    doc = dict(key) if isinstance(key, tuple) else key
    doc = json_object(doc, f"{where} key")
    return MessageQueue(str(doc.get("topic") or ""), str(doc.get("brokerName") or ""),
                        _int_field(doc, "queueId", f"{where} key"))


def parse_cluster_info(body: bytes | str) -> dict[str, BrokerData]:
    """A ``ClusterInfo`` body (GET_BROKER_CLUSTER_INFO): its ``brokerAddrTable``, broker name -> BrokerData."""
    doc = json_object(parse_fastjson(body), "ClusterInfo body")
    table = json_object(doc.get("brokerAddrTable") or {}, "ClusterInfo body: brokerAddrTable")
    return {str(name): _broker_data(b, f"brokerAddrTable[{name!r}]") for name, b in table.items()}


def parse_consume_stats(body: bytes | str) -> ConsumeStats:
    """A ``ConsumeStats`` JSON body: ``offsetTable`` keyed by MessageQueue objects (fastjson
    writes them as JSON objects used as keys)."""
    doc = json_object(parse_fastjson(body), "ConsumeStats body")
    table = {}
    for key, value in json_object(doc.get("offsetTable") or {}, "ConsumeStats body: offsetTable").items():
        mq = _message_queue(key, "ConsumeStats offsetTable")
        where = f"ConsumeStats offsetTable[{mq}]"
        v = json_object(value, where)
        table[mq] = OffsetWrapper(_int_field(v, "brokerOffset", where, 0), _int_field(v, "consumerOffset", where, 0),
                                  _int_field(v, "lastTimestamp", where, 0), _int_field(v, "pullOffset", where, 0))
    tps = doc.get("consumeTps") or 0.0
    return ConsumeStats(table, float(tps) if isinstance(tps, (int, float)) else 0.0)


def parse_topic_configs(body: bytes | str) -> dict[str, TopicConfig]:
    """``TopicConfigSerializeWrapper`` (or 5.x ``TopicConfigAndMappingSerializeWrapper``) body: its
    ``topicConfigTable``."""
    doc = json_object(parse_fastjson(body), "topic config body")
    out = {}
    for name, cfg in json_object(doc.get("topicConfigTable") or {}, "topic config body: topicConfigTable").items():
        where = f"topicConfigTable[{name!r}]"
        cfg = json_object(cfg, where)
        out[str(name)] = TopicConfig(str(cfg.get("topicName") or name), _int_field(cfg, "readQueueNums", where, 16),
                                     _int_field(cfg, "writeQueueNums", where, 16), _int_field(cfg, "perm", where, 6),
                                     str(cfg.get("topicFilterType") or "SINGLE_TAG"),
                                     _int_field(cfg, "topicSysFlag", where, 0), cfg.get("order") in (True, "true"))
    return out

