"""RocketMQ remoting transport: one pipelined TCP connection per address, ACL signing, and the
errors every request can raise.

Written for this project from the wire definitions of apache/rocketmq 4.9.x (see
``connectors/rocketmq/protocol.py`` for the codec); no code is taken from the Apache sources.

- :class:`RemotingConnection`: ``NettyRemotingClient`` + ``NettyRemotingAbstract`` (one TCP
  connection, requests matched to responses by ``opaque``, ``invokeSync``/``invokeOneway``,
  server-initiated requests to processors, ``REQUEST_CODE_NOT_SUPPORTED`` when none is registered).
- :class:`AclSigner`: ``AclClientRPCHook.doBeforeRequest`` + ``AclUtils.combineRequestContent`` +
  ``AclSigner.calSignature`` (HmacSHA1, base64).

Errors: every failure is a :class:`connect.errors.ConnectError`. Transient ones (timeouts, lost
connections, SYSTEM_BUSY, SYSTEM_ERROR, SERVICE_NOT_AVAILABLE, FLOW_CONTROL) are
:class:`connect.errors.RetriableError`. Messages name the operation, the address and the broker's
remark.

Threading model: a :class:`RemotingConnection` is an asyncio object and belongs to the event loop
that first uses it; call it only from that loop. Writes are safe from any number of coroutines of
that loop (a frame is handed to the transport in one synchronous write).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import inspect
import itertools
import logging
from typing import Awaitable, Callable, Mapping, Union

from connect.errors import ConnectError, RetriableError
from connectors.rocketmq.protocol import (
    MAX_FRAME,
    ONEWAY_FLAG,
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
)

__all__ = [
    "AclSigner", "acl_signature", "RemotingConnection", "RequestHandler", "split_address", "request_name", "broker_error",
    "RemotingTimeoutError", "ConnectionLostError", "BrokerError", "RetriableBrokerError", "TopicNotFoundError",
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


def request_name(code: int) -> str:
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


def broker_error(operation: str, address: str, response: RemotingCommand) -> BrokerError:
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
        return acl_signature(ext_fields, body, secret_key, (cls.SIGNATURE,))


def acl_signature(ext_fields: Mapping[str, str], body: bytes, secret_key: str, unsigned: tuple[str, ...]) -> str:
    """base64(HmacSHA1(``secret_key``, the values of the ext fields not in ``unsigned``, in key
    order, followed by the body)), keys ordered as a Java ``TreeMap<String, ...>`` orders them
    (UTF-16 code units). What a client signs (:class:`AclSigner`) and what the embedded broker
    checks (:func:`connectors.rocketmq.acl.check_access`, which leaves one more field unsigned)."""
    keys = sorted((k for k in ext_fields if k not in unsigned), key=lambda k: k.encode("utf-16-be"))
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
            raise ConnectionLostError(f"oneway {request_name(cmd.code)} to {self.address}: connection lost: {link.error}")

    def _expire(self, fut: asyncio.Future, code: int, timeout: float, what: str = "no response") -> None:
        if not fut.done():
            fut.set_exception(RemotingTimeoutError(f"{request_name(code)} to {self.address}: {what} within {timeout:g}s"))

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
                log.warning("handler of %s from %s failed: %r", request_name(cmd.code), self.address, exc)
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
                    f"{request_name(code)} to {self.address} (opaque {opaque}): connection lost before the response: {why}"))
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

