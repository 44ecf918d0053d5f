"""A RocketMQ remoting client: pipelined connections, ACL signing, and the name-server and broker
operations the RocketMQ source and sink need.

Written for this project from the wire definitions of apache/rocketmq 4.9.x (see
``connectors/rocketmq/protocol.py`` for the codec); no code is taken from the Apache sources.
Which Java class each piece follows:

- :class:`RemotingConnection`: ``NettyRemotingClient`` + ``NettyRemotingAbstract`` (one TCP
  connection, requests matched to responses by ``opaque``, ``invokeSync``/``invokeOneway``,
  server-initiated requests to processors, ``REQUEST_CODE_NOT_SUPPORTED`` when none is registered).
- :class:`AclSigner`: ``AclClientRPCHook.doBeforeRequest`` + ``AclUtils.combineRequestContent`` +
  ``AclSigner.calSignature`` (HmacSHA1, base64).
- :class:`RocketMQClient`: ``MQClientAPIImpl`` (one method per request; each names the request
  and response header classes it follows). Name servers are tried in turn, as
  ``NettyRemotingClient.getAndCreateNameserverChannel`` does.
- Results: ``TopicRouteData``/``QueueData``/``BrokerData``, ``SendResult``, ``PullResult``,
  ``ConsumeStats``/``OffsetWrapper``, ``TopicConfig``, ``MessageQueue``.

JSON bodies written by a Java broker or name server may be fastjson's non-standard JSON (map keys
written bare when they are numbers, and JSON objects used as keys): :func:`parse_fastjson` reads both.

Errors: every failure is a :class:`connect.errors.ConnectError`. Transient ones (timeouts, lost
connections, SYSTEM_BUSY, SYSTEM_ERROR, SERVICE_NOT_AVAILABLE) are
:class:`connect.errors.RetriableError`. Messages name the operation, the address and the broker's
remark.

Threading model: :class:`RemotingConnection` and :class:`RocketMQClient` are asyncio objects and
belong to the event loop that first uses them; call them only from that loop. Writes are safe from
any number of coroutines of that loop (a frame is handed to the transport in one synchronous
write). :class:`SyncRocketMQClient` owns one event loop running in a daemon thread and a
``RocketMQClient`` on it; any thread may call it. Its ``send``/``send_batch`` return
``concurrent.futures.Future`` objects (so a caller can pipeline many sends); its other methods
block until the answer. Closing it closes the connections and stops the thread.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import hashlib
import hmac
import inspect
import itertools
import logging
import re
import threading
import time
from json.decoder import scanstring
from typing import Any, Awaitable, Callable, Iterable, Mapping, Sequence, Union

import attrs
import orjson

from connect.errors import ConnectError, RetriableError
from connectors.rocketmq.protocol import (
    MAX_FRAME,
    ONEWAY_FLAG,
    FrameDecoder,
    MessageExt,
    ProtocolError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    decode_messages,
    encode_batch,
    encode_properties,
)

__all__ = [
    "AclSigner", "RemotingConnection", "RocketMQClient", "SyncRocketMQClient",
    "RemotingTimeoutError", "ConnectionLostError", "BrokerError", "RetriableBrokerError", "TopicNotFoundError",
    "MessageQueue", "QueueData", "BrokerData", "TopicRouteData", "SendResult", "PullResult", "OffsetWrapper",
    "ConsumeStats", "TopicConfig", "ConsumerData", "parse_fastjson", "parse_topic_route", "parse_consume_stats",
    "parse_topic_configs", "parse_cluster_info", "PERM_READ", "PERM_WRITE", "PERM_INHERIT",
]

log = logging.getLogger(__name__)

# RequestCode constants protocol.RequestCode does not define (apache/rocketmq RequestCode).
CHECK_TRANSACTION_STATE = 39
RESET_CONSUMER_CLIENT_OFFSET = 220
GET_CONSUMER_STATUS_FROM_CLIENT = 221
CONSUME_MESSAGE_DIRECTLY = 309
DELETE_SUBSCRIPTIONGROUP = 207
DELETE_TOPIC_IN_BROKER = 215
DELETE_TOPIC_IN_NAMESRV = 216
# ResponseCode constants protocol.ResponseCode does not define (apache/rocketmq ResponseCode, 5.x).
FLOW_CONTROL = 215

# PullSysFlag
FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION = 0x1, 0x2, 0x4
# PermName
PERM_INHERIT, PERM_WRITE, PERM_READ = 1, 2, 4

DEFAULT_TOPIC = "TBW102"  # TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC
RETRIABLE_CODES = frozenset({ResponseCode.SYSTEM_ERROR, ResponseCode.SYSTEM_BUSY, ResponseCode.SERVICE_NOT_AVAILABLE,
                             FLOW_CONTROL})
_CODE_NAMES = {v: k for k, v in vars(ResponseCode).items() if k.isupper() and isinstance(v, int)}
_CODE_NAMES[FLOW_CONTROL] = "FLOW_CONTROL"
_REQUEST_NAMES = {v: k for k, v in vars(RequestCode).items() if k.isupper() and isinstance(v, int)}
_REQUEST_NAMES.update({CHECK_TRANSACTION_STATE: "CHECK_TRANSACTION_STATE",
                       RESET_CONSUMER_CLIENT_OFFSET: "RESET_CONSUMER_CLIENT_OFFSET",
                       GET_CONSUMER_STATUS_FROM_CLIENT: "GET_CONSUMER_STATUS_FROM_CLIENT",
                       CONSUME_MESSAGE_DIRECTLY: "CONSUME_MESSAGE_DIRECTLY",
                       DELETE_SUBSCRIPTIONGROUP: "DELETE_SUBSCRIPTIONGROUP",
                       DELETE_TOPIC_IN_BROKER: "DELETE_TOPIC_IN_BROKER",
                       DELETE_TOPIC_IN_NAMESRV: "DELETE_TOPIC_IN_NAMESRV"})


def _request_name(code: int) -> str:
    name = _REQUEST_NAMES.get(code)
    return f"{name}({code})" if name else f"request code {code}"


def _response_name(code: int) -> str:
    name = _CODE_NAMES.get(code)
    return f"{name}({code})" if name else f"response code {code}"


# -- errors ---------------------------------------------------------------------------------------
class RemotingTimeoutError(RetriableError):
    """No response within the request's timeout (``RemotingTimeoutException``)."""


class ConnectionLostError(RetriableError):
    """The connection failed (refused, reset, closed by the peer, or it sent a malformed frame)
    before the response came."""


class BrokerError(ConnectError):
    """A name server or broker answered with an error code (``MQBrokerException``/``MQClientException``)."""

    def __init__(self, operation: str, address: str, code: int, remark: str | None):
        self.operation, self.address, self.code, self.remark = operation, address, code, remark
        text = " ".join((remark or "").split()) or "no remark"
        super().__init__(f"{operation} on {address} failed: {_response_name(code)}: {text}")


class RetriableBrokerError(BrokerError, RetriableError):
    """A broker error that may go away: SYSTEM_BUSY, SYSTEM_ERROR, SERVICE_NOT_AVAILABLE, FLOW_CONTROL."""


class TopicNotFoundError(BrokerError):
    """TOPIC_NOT_EXIST: the name server has no route for the topic, or the broker does not know it."""


def _broker_error(operation: str, address: str, response: RemotingCommand) -> BrokerError:
    code = response.code
    if code == ResponseCode.TOPIC_NOT_EXIST:
        return TopicNotFoundError(operation, address, code, response.remark)
    if code in RETRIABLE_CODES:
        return RetriableBrokerError(operation, address, code, response.remark)
    return BrokerError(operation, address, code, response.remark)


# -- ACL ------------------------------------------------------------------------------------------
class AclSigner:
    """Signs requests as ``AclClientRPCHook`` does: adds ext fields ``AccessKey`` (and
    ``SecurityToken`` when set), then ``Signature`` = base64(HmacSHA1(secret key, the values of all
    ext fields but ``Signature`` in key order, followed by the body)). Keys are ordered as a Java
    ``TreeMap<String, ...>`` orders them (UTF-16 code units)."""

    ACCESS_KEY, SECURITY_TOKEN, SIGNATURE = "AccessKey", "SecurityToken", "Signature"  # SessionCredentials

    def __init__(self, access_key: str, secret_key: str, security_token: str | None = None):
        self.access_key, self.security_token = access_key, security_token
        self._secret = secret_key

    def __repr__(self) -> str:
        return f"AclSigner(access_key={self.access_key!r})"

    def sign(self, cmd: RemotingCommand) -> None:
        cmd.ext_fields[self.ACCESS_KEY] = self.access_key
        if self.security_token is not None:
            cmd.ext_fields[self.SECURITY_TOKEN] = self.security_token
        cmd.ext_fields[self.SIGNATURE] = self.signature(cmd.ext_fields, cmd.body, self._secret)

    @classmethod
    def signature(cls, ext_fields: Mapping[str, str], body: bytes, secret_key: str) -> str:
        """``AclUtils.combineRequestContent`` + ``AclSigner.calSignature``."""
        keys = sorted((k for k in ext_fields if k != cls.SIGNATURE), key=lambda k: k.encode("utf-16-be"))
        content = "".join(str(ext_fields[k]) for k in keys).encode() + (body or b"")
        digest = hmac.new(secret_key.encode(), content, hashlib.sha1).digest()
        return base64.b64encode(digest).decode("ascii")


# -- one connection -------------------------------------------------------------------------------
RequestHandler = Callable[["RemotingConnection", RemotingCommand],
                          Union[RemotingCommand, None, Awaitable[Union[RemotingCommand, None]]]]


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port``."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConnectError(f"RocketMQ address {address!r} is not host:port")
    return host.strip("[]"), int(port)


class _Link:
    """One TCP connection's state; replaced by a new one on reconnect."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.pending: dict[int, tuple[asyncio.Future, int]] = {}  # opaque -> (future, request code)
        self.error: str | None = None  # why it is dead
        self.drain_lock = asyncio.Lock()
        self.task: asyncio.Task | None = None


class RemotingConnection:
    """One TCP connection to ``host:port`` with pipelined requests (``NettyRemotingClient``).

    Each request gets the next ``opaque``; the reader task hands every response to the request
    waiting for that opaque. A request that times out raises :class:`RemotingTimeoutError` and its
    late response is dropped. When the connection fails (EOF, reset, a malformed frame), every
    pending request fails with :class:`ConnectionLostError` and the socket is closed; the next
    request connects again. Requests sent by the server go to ``handler(connection, request)``,
    which may return the response (or an awaitable of it); without a handler a request that is not
    oneway is answered ``REQUEST_CODE_NOT_SUPPORTED``, as ``NettyRemotingAbstract`` does."""

    def __init__(self, address: str, *, connect_timeout: float = 3.0, handler: RequestHandler | None = None,
                 signer: AclSigner | None = None, max_frame: int = MAX_FRAME):
        self.address = address
        self._host, self._port = split_address(address)
        self.connect_timeout = connect_timeout
        self.handler = handler
        self.signer = signer
        self._max_frame = max_frame
        self._opaque = itertools.count(1)
        self._link: _Link | None = None
        self._connect_lock: asyncio.Lock | None = None
        # Held from a request's start to its write: pipelined requests reach the wire in the order
        # they were made even while the first ones wait for a (re)connection, which a request made
        # later would otherwise overtake on the live link (seen as batches to one queue stored out
        # of order right after a sink connected).
        self._write_order = asyncio.Lock()
        self._closed = False
        self._tasks: set[asyncio.Task] = set()

    def __repr__(self) -> str:
        return f"RemotingConnection({self.address!r}, connected={self.connected})"

    @property
    def connected(self) -> bool:
        return self._link is not None and self._link.error is None

    @property
    def pending(self) -> int:
        return len(self._link.pending) if self._link else 0

    # -- connecting -------------------------------------------------------------------------------
    async def connect(self) -> None:
        await self._live_link()

    async def _live_link(self) -> _Link:
        link = self._link
        if link is not None and link.error is None:
            return link
        if self._closed:
            raise ConnectError(f"connection to {self.address} is closed")
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        async with self._connect_lock:
            link = self._link
            if link is not None and link.error is None:
                return link
            if self._closed:
                raise ConnectError(f"connection to {self.address} is closed")
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(self._host, self._port, limit=1 << 20), self.connect_timeout)
            except asyncio.TimeoutError:
                raise ConnectionLostError(
                    f"cannot connect to RocketMQ at {self.address}: no connection within {self.connect_timeout:g}s"
                ) from None
            except OSError as exc:
                raise ConnectionLostError(f"cannot connect to RocketMQ at {self.address}: {exc}") from None
            link = _Link(reader, writer)
            link.task = asyncio.get_running_loop().create_task(self._read_loop(link),
                                                               name=f"rocketmq-reader-{self.address}")
            self._link = link
            log.debug("connected to %s", self.address)
            return link

    # -- requests ---------------------------------------------------------------------------------
    def _next_opaque(self) -> int:
        return next(self._opaque) & 0x7FFFFFFF

    async def request(self, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Sends ``cmd`` (its opaque replaced) and returns the response (``invokeSync``). The
        timeout (seconds) runs from the write; connecting is bounded by ``connect_timeout``."""
        loop = asyncio.get_running_loop()
        async with self._write_order:
            link = await self._live_link()
            cmd.flag &= ~ONEWAY_FLAG
            cmd.opaque = opaque = self._next_opaque()
            if self.signer is not None:
                self.signer.sign(cmd)
            frame = cmd.encode()
            fut: asyncio.Future = loop.create_future()
            link.pending[opaque] = (fut, cmd.code)
            timer = loop.call_later(timeout, self._expire, fut, cmd.code, timeout)
            link.writer.write(frame)
        try:
            await self._drain(link, fut)
            return await fut
        finally:
            timer.cancel()
            if link.pending.get(opaque, (None,))[0] is fut:
                del link.pending[opaque]

    async def oneway(self, cmd: RemotingCommand, timeout: float | None = None) -> None:
        """Sends ``cmd`` with the oneway flag; no response is awaited (``invokeOneway``)."""
        async with self._write_order:
            link = await self._live_link()
            cmd.flag |= ONEWAY_FLAG
            cmd.opaque = self._next_opaque()
            if self.signer is not None:
                self.signer.sign(cmd)
            link.writer.write(cmd.encode())
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        timeout = 3.0 if timeout is None else timeout
        timer = loop.call_later(timeout, self._expire, fut, cmd.code, timeout, "oneway request not written")
        try:
            await self._drain(link, fut)
        finally:
            timer.cancel()
        if fut.done() and not fut.cancelled():
            raise fut.exception()  # the write did not drain in time
        fut.cancel()
        if link.error is not None:
            raise ConnectionLostError(f"oneway {_request_name(cmd.code)} to {self.address}: connection lost: {link.error}")

    def _expire(self, fut: asyncio.Future, code: int, timeout: float, what: str = "no response") -> None:
        if not fut.done():
            fut.set_exception(RemotingTimeoutError(f"{_request_name(code)} to {self.address}: {what} within {timeout:g}s"))

    async def _drain(self, link: _Link, fut: asyncio.Future) -> None:
        """Waits for the transport's buffer to fall below its high-water mark, unless the
        request's future completes first (timeout or lost connection)."""
        transport = link.writer.transport
        if transport.is_closing():
            if link.error is None:
                self._fail(link, "the transport closed")
            return
        if transport.get_write_buffer_size() <= transport.get_write_buffer_limits()[1]:
            return

        async def drain() -> None:
            async with link.drain_lock:
                await link.writer.drain()

        task = asyncio.ensure_future(drain())
        try:
            await asyncio.wait({task, fut}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not task.done():
                task.cancel()
        if task.done() and not task.cancelled() and task.exception() is not None:
            self._fail(link, f"write failed: {task.exception()}")

    # -- incoming ---------------------------------------------------------------------------------
    async def _read_loop(self, link: _Link) -> None:
        decoder = FrameDecoder(self._max_frame)
        why = None
        try:
            while why is None:
                data = await link.reader.read(1 << 16)
                if not data:
                    why = "closed by the peer (EOF)"
                    break
                for cmd in decoder.feed(data):
                    if cmd.is_response:
                        self._resolve(link, cmd)
                    else:
                        self._serve(link, cmd)
        except ProtocolError as exc:
            why = f"malformed frame from the peer: {exc}"
        except (ConnectionError, OSError) as exc:
            why = f"connection error: {str(exc) or type(exc).__name__}"
        except asyncio.CancelledError:
            why = why or "closed by the client"
            raise
        except Exception as exc:  # a bug here must not leave requests hanging
            log.exception("reader of %s failed", self.address)
            why = f"reader failed: {exc!r}"
        finally:
            self._fail(link, why or "closed")

    def _resolve(self, link: _Link, cmd: RemotingCommand) -> None:
        entry = link.pending.pop(cmd.opaque, None)
        if entry is None:
            log.debug("dropping a response from %s for opaque %d: no request waits for it (timed out?)",
                      self.address, cmd.opaque)
            return
        if not entry[0].done():
            entry[0].set_result(cmd)

    def _serve(self, link: _Link, cmd: RemotingCommand) -> None:
        task = asyncio.get_running_loop().create_task(self._answer(link, cmd))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, link: _Link, cmd: RemotingCommand) -> None:
        response: RemotingCommand | None
        if self.handler is None:
            response = cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                    remark=f" request type {cmd.code} not supported")
        else:
            try:
                result = self.handler(self, cmd)
                response = await result if inspect.isawaitable(result) else result
            except Exception as exc:
                log.warning("handler of %s from %s failed: %r", _request_name(cmd.code), self.address, exc)
                response = cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")
        if response is None or cmd.is_oneway or link.error is not None:
            return
        response.opaque = cmd.opaque
        response.flag |= 1
        link.writer.write(response.encode())

    def _fail(self, link: _Link, why: str) -> None:
        if link.error is not None:
            return
        link.error = why
        pending = list(link.pending.items())
        link.pending.clear()
        if pending:
            log.warning("connection to %s failed (%s): %d requests pending", self.address, why, len(pending))
        for opaque, (fut, code) in pending:
            if not fut.done():
                fut.set_exception(ConnectionLostError(
                    f"{_request_name(code)} to {self.address} (opaque {opaque}): connection lost before the response: {why}"))
        link.writer.close()
        if link.task is not None and link.task is not asyncio.current_task() and not link.task.done():
            link.task.cancel()

    async def close(self) -> None:
        self._closed = True
        link, self._link = self._link, None
        for task in list(self._tasks):
            task.cancel()
        if link is None:
            return
        self._fail(link, "closed by the client")
        if link.task is not None:
            await asyncio.gather(link.task, return_exceptions=True)
        try:
            await asyncio.wait_for(link.writer.wait_closed(), 1.0)
        except (asyncio.TimeoutError, OSError):
            pass


# -- lenient JSON (fastjson output) ---------------------------------------------------------------
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_SPACE = re.compile(r"[ \t\r\n]*")


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted(((k, _freeze(v)) for k, v in value.items()), key=lambda kv: str(kv[0])))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


class _FastjsonParser:
    """Standard JSON plus what fastjson writes by default: bare number keys (``{0:"a"}``, read as
    the key ``"0"``), objects as keys (read as a sorted tuple of ``(key, value)`` pairs) and bare
    identifier keys."""

    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def error(self, what: str) -> ProtocolError:
        snippet = self.text[max(0, self.pos - 20):self.pos + 20]
        return ProtocolError(f"JSON body: {what} at character {self.pos} (near {snippet!r})")

    def skip(self) -> None:
        self.pos = _SPACE.match(self.text, self.pos).end()

    def document(self) -> Any:
        value = self.value()
        self.skip()
        if self.pos != len(self.text):
            raise self.error("text after the JSON value")
        return value

    def value(self) -> Any:
        self.skip()
        if self.pos >= len(self.text):
            raise self.error("unexpected end")
        c = self.text[self.pos]
        if c == "{":
            return self.obj()
        if c == "[":
            return self.array()
        if c == '"':
            return self.string()
        for word, val in (("true", True), ("false", False), ("null", None)):
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return val
        m = _NUMBER.match(self.text, self.pos)
        if m:
            self.pos = m.end()
            return float(m.group()) if m.group(1) or m.group(2) else int(m.group())
        raise self.error(f"unexpected {c!r}")

    def string(self) -> str:
        try:
            s, self.pos = scanstring(self.text, self.pos + 1, False)
        except ValueError as exc:
            raise self.error(f"bad string ({exc})") from None
        return s

    def key(self) -> Any:
        self.skip()
        c = self.text[self.pos:self.pos + 1]
        if c == '"':
            return self.string()
        if c in ("{", "["):
            return _freeze(self.value())
        m = _NUMBER.match(self.text, self.pos) or _IDENT.match(self.text, self.pos)
        if not m:
            raise self.error("expected a key")
        self.pos = m.end()
        return m.group()

    def obj(self) -> dict:
        self.pos += 1
        out: dict = {}
        self.skip()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return out
        while True:
            k = self.key()
            self.skip()
            if not self.text.startswith(":", self.pos):
                raise self.error("expected ':'")
            self.pos += 1
            out[k] = self.value()
            self.skip()
            c = self.text[self.pos:self.pos + 1]
            self.pos += 1
            if c == "}":
                return out
            if c != ",":
                self.pos -= 1
                raise self.error("expected ',' or '}'")

    def array(self) -> list:
        self.pos += 1
        out: list = []
        self.skip()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return out
        while True:
            out.append(self.value())
            self.skip()
            c = self.text[self.pos:self.pos + 1]
            self.pos += 1
            if c == "]":
                return out
            if c != ",":
                self.pos -= 1
                raise self.error("expected ',' or ']'")


def parse_fastjson(data: bytes | str) -> Any:
    """A JSON body as a Java broker or name server writes it (``RemotingSerializable.encode``,
    fastjson): standard JSON, or fastjson's form with bare number keys and object keys. Raises
    ProtocolError when it is neither."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else data
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"JSON body is not UTF-8: {exc}") from None
    return _FastjsonParser(text).document()


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


def _obj(doc: Any, where: str) -> dict:
    if not isinstance(doc, dict):
        raise ProtocolError(f"{where} is a {type(doc).__name__}, not an object")
    return doc


def _list(doc: Mapping, key: str, where: str) -> list:
    v = doc.get(key)
    if v is None:
        return []
    if not isinstance(v, list):
        raise ProtocolError(f"{where}: {key} is a {type(v).__name__}, not an array")
    return v


def _broker_data(doc: Any, where: str) -> BrokerData:
    """A ``BrokerData`` object (``brokerAddrs`` keys may be bare numbers: fastjson)."""
    doc = _obj(doc, where)
    addrs = {}
    for k, v in _obj(doc.get("brokerAddrs") or {}, f"{where}.brokerAddrs").items():
        try:
            addrs[int(k)] = str(v)
        except (TypeError, ValueError):
            raise ProtocolError(f"{where}.brokerAddrs: broker id {k!r} is not a number") from None
    return BrokerData(str(doc.get("cluster") or ""), str(doc.get("brokerName") or ""), addrs)


def parse_topic_route(body: bytes | str, topic: str = "") -> TopicRouteData:
    """A ``TopicRouteData`` JSON body, standard or fastjson (``brokerAddrs`` keys bare numbers)."""
    doc = _obj(parse_fastjson(body), "route body")
    queues = []
    for i, q in enumerate(_list(doc, "queueDatas", "route body")):
        where = f"route body: queueDatas[{i}]"
        q = _obj(q, where)
        queues.append(QueueData(str(q.get("brokerName") or ""), _int_field(q, "readQueueNums", where, 0),
                                _int_field(q, "writeQueueNums", where, 0), _int_field(q, "perm", where, 0),
                                _int_field(q, "topicSysFlag", where, 0)))
    brokers = [_broker_data(b, f"route body: brokerDatas[{i}]")
               for i, b in enumerate(_list(doc, "brokerDatas", "route body"))]
    filters = doc.get("filterServerTable") or {}
    return TopicRouteData(topic, queues, brokers, doc.get("orderTopicConf") or None,
                          {str(k): list(v or []) for k, v in _obj(filters, "route body: filterServerTable").items()})


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
    doc = _obj(doc, f"{where} key")
    return MessageQueue(str(doc.get("topic") or ""), str(doc.get("brokerName") or ""),
                        _int_field(doc, "queueId", f"{where} key"))


def parse_cluster_info(body: bytes | str) -> dict[str, BrokerData]:
    """A ``ClusterInfo`` body (GET_BROKER_CLUSTER_INFO): its ``brokerAddrTable``, broker name -> BrokerData."""
    doc = _obj(parse_fastjson(body), "ClusterInfo body")
    table = _obj(doc.get("brokerAddrTable") or {}, "ClusterInfo body: brokerAddrTable")
    return {str(name): _broker_data(b, f"brokerAddrTable[{name!r}]") for name, b in table.items()}


def parse_consume_stats(body: bytes | str) -> ConsumeStats:
    """A ``ConsumeStats`` JSON body: ``offsetTable`` keyed by MessageQueue objects (fastjson
    writes them as JSON objects used as keys)."""
    doc = _obj(parse_fastjson(body), "ConsumeStats body")
    table = {}
    for key, value in _obj(doc.get("offsetTable") or {}, "ConsumeStats body: offsetTable").items():
        mq = _message_queue(key, "ConsumeStats offsetTable")
        where = f"ConsumeStats offsetTable[{mq}]"
        v = _obj(value, where)
        table[mq] = OffsetWrapper(_int_field(v, "brokerOffset", where, 0), _int_field(v, "consumerOffset", where, 0),
                                  _int_field(v, "lastTimestamp", where, 0), _int_field(v, "pullOffset", where, 0))
    tps = doc.get("consumeTps") or 0.0
    return ConsumeStats(table, float(tps) if isinstance(tps, (int, float)) else 0.0)


def parse_topic_configs(body: bytes | str) -> dict[str, TopicConfig]:
    """``TopicConfigSerializeWrapper`` (or 5.x ``TopicConfigAndMappingSerializeWrapper``) body: its
    ``topicConfigTable``."""
    doc = _obj(parse_fastjson(body), "topic config body")
    out = {}
    for name, cfg in _obj(doc.get("topicConfigTable") or {}, "topic config body: topicConfigTable").items():
        where = f"topicConfigTable[{name!r}]"
        cfg = _obj(cfg, where)
        out[str(name)] = TopicConfig(str(cfg.get("topicName") or name), _int_field(cfg, "readQueueNums", where, 16),
                                     _int_field(cfg, "writeQueueNums", where, 16), _int_field(cfg, "perm", where, 6),
                                     str(cfg.get("topicFilterType") or "SINGLE_TAG"),
                                     _int_field(cfg, "topicSysFlag", where, 0), cfg.get("order") in (True, "true"))
    return out


# -- the client -----------------------------------------------------------------------------------
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
            raise ConnectError(f"{_request_name(cmd.code)}: no name server address configured")
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
        raise RetriableError(f"{_request_name(cmd.code)}: no name server answered: " + "; ".join(errors))

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
        raise _broker_error(operation, addr, response)

    async def topic_list(self, *, timeout: float | None = None) -> list[str]:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER (no header; body ``TopicList``): sorted topic names."""
        addr, response = await self.invoke_namesrv(self._request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
                                                   timeout)
        if response.code != ResponseCode.SUCCESS:
            raise _broker_error("topic list", addr, response)
        try:
            doc = _obj(parse_fastjson(response.body or b"{}"), "TopicList body")
            return sorted(str(t) for t in _list(doc, "topicList", "TopicList body"))
        except ProtocolError as exc:
            raise ConnectError(f"topic list on {addr}: {exc}") from None

    async def cluster_info(self, *, timeout: float | None = None) -> dict[str, BrokerData]:
        """GET_BROKER_CLUSTER_INFO (no header; body ``ClusterInfo``): broker name -> its addresses
        (the ``brokerAddrTable``)."""
        addr, response = await self.invoke_namesrv(self._request(RequestCode.GET_BROKER_CLUSTER_INFO), timeout)
        if response.code != ResponseCode.SUCCESS:
            raise _broker_error("cluster info", addr, response)
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
            raise _broker_error(operation, addr, response)
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
            raise _broker_error(operation, broker_addr, response)
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
            raise _broker_error(operation, broker_addr, response)
        return self._field(response, "offset", operation, broker_addr)

    async def update_consumer_offset(self, broker_addr: str, group: str, topic: str, queue_id: int, offset: int, *,
                                     broker_name: str | None = None, timeout: float | None = None) -> None:
        """UPDATE_CONSUMER_OFFSET, awaited (``UpdateConsumerOffsetRequestHeader``: consumerGroup,
        topic, queueId, commitOffset; ``MQClientAPIImpl.updateConsumerOffset``, not the oneway variant)."""
        fields = {"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset,
                  "bname": broker_name}
        response = await self.invoke(broker_addr, self._request(RequestCode.UPDATE_CONSUMER_OFFSET, fields), timeout)
        if response.code != ResponseCode.SUCCESS:
            raise _broker_error(f"offset commit of group {group!r} on {topic}[{queue_id}] to {offset}", broker_addr,
                                response)

    async def _offset(self, code: int, broker_addr: str, fields: dict, operation: str, timeout: float | None) -> int:
        response = await self.invoke(broker_addr, self._request(code, fields), timeout)
        if response.code != ResponseCode.SUCCESS:
            raise _broker_error(operation, broker_addr, response)
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
            raise _broker_error(f"creation of topic {topic!r}", broker_addr, response)

    async def all_topic_configs(self, broker_addr: str, *, timeout: float | None = None) -> dict[str, TopicConfig]:
        """GET_ALL_TOPIC_CONFIG (no header; body ``TopicConfigSerializeWrapper``): topic name -> config."""
        response = await self.invoke(broker_addr, self._request(RequestCode.GET_ALL_TOPIC_CONFIG), timeout)
        if response.code != ResponseCode.SUCCESS:
            raise _broker_error("topic config listing", broker_addr, response)
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
            raise _broker_error(operation, broker_addr, response)
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
            raise _broker_error("subscription group listing", broker_addr, response)
        try:
            doc = _obj(parse_fastjson(response.body or b"{}"), "SubscriptionGroupWrapper body")
            table = _obj(doc.get("subscriptionGroupTable") or {}, "SubscriptionGroupWrapper body: subscriptionGroupTable")
            return {str(name): dict(_obj(cfg, f"subscriptionGroupTable[{name!r}]")) for name, cfg in table.items()}
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
            raise _broker_error(f"creation of subscription group {group!r}", broker_addr, response)

    async def delete_subscription_group(self, broker_addr: str, group: str, *, clean_offset: bool = False,
                                        timeout: float | None = None) -> None:
        """DELETE_SUBSCRIPTIONGROUP (``DeleteSubscriptionGroupRequestHeader``: groupName; 5.x also
        cleanOffset, to drop the group's consumer offsets too - 4.x brokers ignore it)."""
        fields = {"groupName": group, "cleanOffset": clean_offset or None}
        response = await self.invoke(broker_addr, self._request(DELETE_SUBSCRIPTIONGROUP, fields), timeout)
        if response.code != ResponseCode.SUCCESS:
            raise _broker_error(f"deletion of subscription group {group!r}", broker_addr, response)

    async def delete_topic_in_broker(self, broker_addr: str, topic: str, *, timeout: float | None = None) -> None:
        """DELETE_TOPIC_IN_BROKER (``DeleteTopicRequestHeader``: topic): the broker drops the topic's
        config (and, a Java broker, its queues). The name servers keep routing it until
        :meth:`delete_topic_in_namesrv` (``MQAdminExt.deleteTopic`` calls both)."""
        response = await self.invoke(broker_addr, self._request(DELETE_TOPIC_IN_BROKER, {"topic": topic}), timeout)
        if response.code != ResponseCode.SUCCESS:
            raise _broker_error(f"deletion of topic {topic!r}", broker_addr, response)

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
                raise _broker_error(f"deletion of the route of topic {topic!r}", addr, response)

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
            raise _broker_error(operation, broker_addr, response)
        try:
            doc = _obj(parse_fastjson(response.body or b"{}"), "GetConsumerListByGroupResponseBody")
            return [str(c) for c in _list(doc, "consumerIdList", "GetConsumerListByGroupResponseBody")]
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
            raise _broker_error(f"heartbeat of client {client_id!r}", broker_addr, response)
        return response.version

    async def close(self) -> None:
        self._closed = True
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)


# -- synchronous facade ---------------------------------------------------------------------------
class SyncRocketMQClient:
    """A :class:`RocketMQClient` on its own event loop in a daemon thread, for synchronous code.
    ``send``/``send_batch`` return ``concurrent.futures.Future`` (pipelining); the other methods
    block and return the result (or raise). Arguments are those of :class:`RocketMQClient`."""

    def __init__(self, namesrv_addrs: str | Sequence[str] = (), **kwargs: Any):
        self._loop = asyncio.new_event_loop()
        self.client = RocketMQClient(namesrv_addrs, **kwargs)
        self._thread = threading.Thread(target=self._run, name="rocketmq-client", daemon=True)
        self._closed = False
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def __enter__(self) -> SyncRocketMQClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def submit(self, coro: Awaitable[Any]) -> concurrent.futures.Future:
        """Runs a coroutine of :attr:`client` on the loop thread."""
        if self._closed:
            if inspect.iscoroutine(coro):
                coro.close()
            raise ConnectError("RocketMQ client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]

    def _call(self, coro: Awaitable[Any]) -> Any:
        if threading.current_thread() is self._thread:
            if inspect.iscoroutine(coro):
                coro.close()
            raise ConnectError("SyncRocketMQClient called from its own loop thread: await the async client instead")
        return self.submit(coro).result()

    def send(self, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        return self.submit(self.client.send(*args, **kwargs))

    def send_batch(self, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        return self.submit(self.client.send_batch(*args, **kwargs))

    def topic_route(self, *args: Any, **kwargs: Any) -> TopicRouteData:
        return self._call(self.client.topic_route(*args, **kwargs))

    def topic_list(self, *args: Any, **kwargs: Any) -> list[str]:
        return self._call(self.client.topic_list(*args, **kwargs))

    def cluster_info(self, *args: Any, **kwargs: Any) -> dict[str, BrokerData]:
        return self._call(self.client.cluster_info(*args, **kwargs))

    def pull(self, *args: Any, **kwargs: Any) -> PullResult:
        return self._call(self.client.pull(*args, **kwargs))

    def query_consumer_offset(self, *args: Any, **kwargs: Any) -> int | None:
        return self._call(self.client.query_consumer_offset(*args, **kwargs))

    def update_consumer_offset(self, *args: Any, **kwargs: Any) -> None:
        return self._call(self.client.update_consumer_offset(*args, **kwargs))

    def min_offset(self, *args: Any, **kwargs: Any) -> int:
        return self._call(self.client.min_offset(*args, **kwargs))

    def max_offset(self, *args: Any, **kwargs: Any) -> int:
        return self._call(self.client.max_offset(*args, **kwargs))

    def search_offset(self, *args: Any, **kwargs: Any) -> int:
        return self._call(self.client.search_offset(*args, **kwargs))

    def create_topic(self, *args: Any, **kwargs: Any) -> None:
        return self._call(self.client.create_topic(*args, **kwargs))

    def all_topic_configs(self, *args: Any, **kwargs: Any) -> dict[str, TopicConfig]:
        return self._call(self.client.all_topic_configs(*args, **kwargs))

    def consume_stats(self, *args: Any, **kwargs: Any) -> ConsumeStats:
        return self._call(self.client.consume_stats(*args, **kwargs))

    def subscription_groups(self, *args: Any, **kwargs: Any) -> list[str]:
        return self._call(self.client.subscription_groups(*args, **kwargs))

    def subscription_group_configs(self, *args: Any, **kwargs: Any) -> dict[str, dict[str, Any]]:
        return self._call(self.client.subscription_group_configs(*args, **kwargs))

    def create_subscription_group(self, *args: Any, **kwargs: Any) -> None:
        return self._call(self.client.create_subscription_group(*args, **kwargs))

    def delete_subscription_group(self, *args: Any, **kwargs: Any) -> None:
        return self._call(self.client.delete_subscription_group(*args, **kwargs))

    def delete_topic_in_broker(self, *args: Any, **kwargs: Any) -> None:
        return self._call(self.client.delete_topic_in_broker(*args, **kwargs))

    def delete_topic_in_namesrv(self, *args: Any, **kwargs: Any) -> None:
        return self._call(self.client.delete_topic_in_namesrv(*args, **kwargs))

    def consumer_ids(self, *args: Any, **kwargs: Any) -> list[str]:
        return self._call(self.client.consumer_ids(*args, **kwargs))

    def heartbeat(self, *args: Any, **kwargs: Any) -> int:
        return self._call(self.client.heartbeat(*args, **kwargs))

    def close(self, timeout: float = 5.0) -> None:
        """Closes the connections (pending requests fail), cancels what still runs on the loop,
        stops the loop thread."""
        if self._closed:
            return
        self._closed = True
        if threading.current_thread() is self._thread:
            raise ConnectError("SyncRocketMQClient.close called from its own loop thread")

        async def shutdown() -> None:
            await self.client.close()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in others:
                t.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout)
        except (concurrent.futures.TimeoutError, RuntimeError):
            log.warning("RocketMQ client did not close within %gs", timeout)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
            if not self._thread.is_alive():
                self._loop.close()
