"""The synchronous RocketMQ client: a :class:`RocketMQClient` on its own event loop in a daemon
thread, for the connectors' synchronous code (tasks, connectors, tests, the CLI).

Any thread may call it. ``send``/``send_batch`` return ``concurrent.futures.Future`` objects (so a
caller can pipeline many sends; their done callbacks run on the loop thread); the other methods
block until the answer and return it or raise the async client's error (see
:mod:`connectors.rocketmq.remoting`). Each method takes the arguments of the
:class:`RocketMQClient` method of the same name, which documents the request it makes. Closing it
closes the connections and stops the thread. Called from its own loop thread (a done callback),
a blocking method raises instead of deadlocking: await :attr:`SyncRocketMQClient.client` there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import threading
from typing import Any, Awaitable, Iterable, Mapping, Sequence

from connect.errors import ConnectError
from connectors.rocketmq.async_client import RocketMQClient
from connectors.rocketmq.models import (
    DEFAULT_TOPIC,
    PERM_READ,
    PERM_WRITE,
    BrokerData,
    ConsumerData,
    ConsumeStats,
    PullResult,
    TopicConfig,
    TopicRouteData,
)
from connectors.rocketmq.remoting import AclSigner, RequestHandler

__all__ = ["SyncRocketMQClient"]

log = logging.getLogger(__name__)


class SyncRocketMQClient:
    """A :class:`RocketMQClient` on its own event loop in a daemon thread, for synchronous code.
    ``send``/``send_batch`` return ``concurrent.futures.Future`` (pipelining); the other methods
    block and return the result (or raise)."""

    def __init__(self, namesrv_addrs: str | Sequence[str] = (), *, signer: AclSigner | None = None,
                 timeout: float = 3.0, connect_timeout: float = 3.0, handler: RequestHandler | None = None):
        """``namesrv_addrs``: ``"host:port;host:port"`` or a list. ``signer`` signs every request
        (ACL); ``timeout`` is the default per-request timeout and ``connect_timeout`` bounds each
        connection attempt, in seconds; ``handler`` answers requests the brokers send (it runs on
        the loop thread)."""
        self._loop = asyncio.new_event_loop()
        self.client = RocketMQClient(namesrv_addrs, signer=signer, timeout=timeout, connect_timeout=connect_timeout,
                                     handler=handler)
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

    # -- name server -------------------------------------------------------------------------------
    def topic_route(self, topic: str, *, timeout: float | None = None) -> TopicRouteData:
        """The topic's route from the name servers (GET_ROUTEINFO_BY_TOPIC); :class:`TopicNotFoundError` when
        there is none."""
        return self._call(self.client.topic_route(topic, timeout=timeout))

    def topic_list(self, *, timeout: float | None = None) -> list[str]:
        """The sorted names of every topic the name servers know (GET_ALL_TOPIC_LIST_FROM_NAMESERVER)."""
        return self._call(self.client.topic_list(timeout=timeout))

    def cluster_info(self, *, timeout: float | None = None) -> dict[str, BrokerData]:
        """Broker name -> its addresses, from the name servers (GET_BROKER_CLUSTER_INFO)."""
        return self._call(self.client.cluster_info(timeout=timeout))

    def send(self, broker_addr: str, topic: str, queue_id: int, body: bytes,
             properties: Mapping[str, str] | None = None, *, producer_group: str = "DEFAULT_PRODUCER",
             flag: int = 0, sys_flag: int = 0, born_timestamp: int | None = None, reconsume_times: int = 0,
             max_reconsume_times: int | None = None, default_topic: str = DEFAULT_TOPIC,
             default_topic_queue_nums: int = 4, unit_mode: bool = False, broker_name: str | None = None,
             timeout: float | None = None) -> concurrent.futures.Future:
        """Sends one message (SEND_MESSAGE_V2) and returns at once: the future holds the :class:`SendResult` or
        the error."""
        return self.submit(self.client.send(broker_addr, topic, queue_id, body, properties,
                                            producer_group=producer_group, flag=flag, sys_flag=sys_flag,
                                            born_timestamp=born_timestamp, reconsume_times=reconsume_times,
                                            max_reconsume_times=max_reconsume_times, default_topic=default_topic,
                                            default_topic_queue_nums=default_topic_queue_nums, unit_mode=unit_mode,
                                            broker_name=broker_name, timeout=timeout))

    def send_batch(self, broker_addr: str, topic: str, queue_id: int,
                   messages: Sequence[tuple[bytes, Mapping[str, str]] | tuple[bytes, Mapping[str, str], int]],
                   properties: Mapping[str, str] | None = None, *, producer_group: str = "DEFAULT_PRODUCER",
                   born_timestamp: int | None = None, default_topic: str = DEFAULT_TOPIC,
                   default_topic_queue_nums: int = 4, broker_name: str | None = None,
                   timeout: float | None = None) -> concurrent.futures.Future:
        """Sends ``messages`` (body, properties[, flag]) as one batch (SEND_BATCH_MESSAGE) and returns at once:
        the future holds the :class:`SendResult` or the error."""
        return self.submit(self.client.send_batch(broker_addr, topic, queue_id, messages, properties,
                                                  producer_group=producer_group, born_timestamp=born_timestamp,
                                                  default_topic=default_topic,
                                                  default_topic_queue_nums=default_topic_queue_nums,
                                                  broker_name=broker_name, timeout=timeout))

    def pull(self, broker_addr: str, group: str, topic: str, queue_id: int, offset: int, max_nums: int = 32, *,
             suspend_timeout: float = 0.0, commit_offset: int | None = None, subscription: str | None = "*",
             sub_version: int = 0, expression_type: str = "TAG", broker_name: str | None = None,
             decompress: bool = True, timeout: float | None = None) -> PullResult:
        """Pulls up to ``max_nums`` messages of a queue from ``offset`` (PULL_MESSAGE); ``suspend_timeout`` > 0
        long-polls."""
        return self._call(self.client.pull(broker_addr, group, topic, queue_id, offset, max_nums,
                                           suspend_timeout=suspend_timeout, commit_offset=commit_offset,
                                           subscription=subscription, sub_version=sub_version,
                                           expression_type=expression_type, broker_name=broker_name,
                                           decompress=decompress, timeout=timeout))

    def query_consumer_offset(self, broker_addr: str, group: str, topic: str, queue_id: int, *,
                              broker_name: str | None = None, set_zero_if_not_found: bool | None = None,
                              timeout: float | None = None) -> int | None:
        """The group's committed offset of the queue (QUERY_CONSUMER_OFFSET); None when the broker has none."""
        return self._call(self.client.query_consumer_offset(broker_addr, group, topic, queue_id,
                                                            broker_name=broker_name,
                                                            set_zero_if_not_found=set_zero_if_not_found,
                                                            timeout=timeout))

    def update_consumer_offset(self, broker_addr: str, group: str, topic: str, queue_id: int, offset: int, *,
                               broker_name: str | None = None, timeout: float | None = None) -> None:
        """Commits the group's offset of the queue (UPDATE_CONSUMER_OFFSET), awaiting the broker's answer."""
        return self._call(self.client.update_consumer_offset(broker_addr, group, topic, queue_id, offset,
                                                             broker_name=broker_name, timeout=timeout))

    def min_offset(self, broker_addr: str, topic: str, queue_id: int, *, broker_name: str | None = None,
                   timeout: float | None = None) -> int:
        """The queue's first offset still stored (GET_MIN_OFFSET)."""
        return self._call(self.client.min_offset(broker_addr, topic, queue_id, broker_name=broker_name,
                                                 timeout=timeout))

    def max_offset(self, broker_addr: str, topic: str, queue_id: int, *, broker_name: str | None = None,
                   timeout: float | None = None) -> int:
        """The queue's next offset to be written (GET_MAX_OFFSET)."""
        return self._call(self.client.max_offset(broker_addr, topic, queue_id, broker_name=broker_name,
                                                 timeout=timeout))

    def search_offset(self, broker_addr: str, topic: str, queue_id: int, timestamp: int, *,
                      broker_name: str | None = None, timeout: float | None = None) -> int:
        """The queue's offset of the first message stored at or after ``timestamp`` ms
        (SEARCH_OFFSET_BY_TIMESTAMP)."""
        return self._call(self.client.search_offset(broker_addr, topic, queue_id, timestamp, broker_name=broker_name,
                                                    timeout=timeout))

    def create_topic(self, broker_addr: str, topic: str, read_queue_nums: int = 8, write_queue_nums: int = 8,
                     perm: int = PERM_READ | PERM_WRITE, *, default_topic: str = DEFAULT_TOPIC,
                     topic_filter_type: str = "SINGLE_TAG", topic_sys_flag: int = 0, order: bool = False,
                     timeout: float | None = None) -> None:
        """Creates or updates the topic on the broker (UPDATE_AND_CREATE_TOPIC)."""
        return self._call(self.client.create_topic(broker_addr, topic, read_queue_nums, write_queue_nums, perm,
                                                   default_topic=default_topic, topic_filter_type=topic_filter_type,
                                                   topic_sys_flag=topic_sys_flag, order=order, timeout=timeout))

    def all_topic_configs(self, broker_addr: str, *, timeout: float | None = None) -> dict[str, TopicConfig]:
        """Topic name -> :class:`TopicConfig` of every topic the broker holds (GET_ALL_TOPIC_CONFIG)."""
        return self._call(self.client.all_topic_configs(broker_addr, timeout=timeout))

    def consume_stats(self, broker_addr: str, group: str, topic: str | None = None, *,
                      timeout: float | None = None) -> ConsumeStats:
        """The group's offsets and lag per queue on the broker, of one topic or all (GET_CONSUME_STATS)."""
        return self._call(self.client.consume_stats(broker_addr, group, topic, timeout=timeout))

    def subscription_groups(self, broker_addr: str, *, timeout: float | None = None) -> list[str]:
        """The sorted names of the broker's subscription groups."""
        return self._call(self.client.subscription_groups(broker_addr, timeout=timeout))

    def subscription_group_configs(self, broker_addr: str, *, timeout: float | None = None
                                   ) -> dict[str, dict[str, Any]]:
        """Group name -> its ``SubscriptionGroupConfig`` as the broker wrote it."""
        return self._call(self.client.subscription_group_configs(broker_addr, timeout=timeout))

    def create_subscription_group(self, broker_addr: str, config: Mapping[str, Any], *,
                                  timeout: float | None = None) -> None:
        """Creates or replaces a subscription group; ``config`` must hold ``groupName``."""
        return self._call(self.client.create_subscription_group(broker_addr, config, timeout=timeout))

    def delete_subscription_group(self, broker_addr: str, group: str, *, clean_offset: bool = False,
                                  timeout: float | None = None) -> None:
        """Deletes a subscription group (and, ``clean_offset`` on a 5.x broker, its offsets)."""
        return self._call(self.client.delete_subscription_group(broker_addr, group, clean_offset=clean_offset,
                                                                timeout=timeout))

    def delete_topic_in_broker(self, broker_addr: str, topic: str, *, timeout: float | None = None) -> None:
        """Deletes the topic's config on the broker; the name servers keep its route until
        :meth:`delete_topic_in_namesrv`."""
        return self._call(self.client.delete_topic_in_broker(broker_addr, topic, timeout=timeout))

    def delete_topic_in_namesrv(self, topic: str, *, cluster: str | None = None,
                                timeout: float | None = None) -> None:
        """Deletes the topic's route on every name server."""
        return self._call(self.client.delete_topic_in_namesrv(topic, cluster=cluster, timeout=timeout))

    def consumer_ids(self, broker_addr: str, group: str, *, timeout: float | None = None) -> list[str]:
        """The client ids of the group's consumers connected to the broker ([] when none)."""
        return self._call(self.client.consumer_ids(broker_addr, group, timeout=timeout))

    def heartbeat(self, broker_addr: str, client_id: str, producer_groups: Iterable[str] = (),
                  consumer_groups: Iterable[str | ConsumerData] = (), *, timeout: float | None = None) -> int:
        """Registers producer and consumer groups of ``client_id`` with the broker (HEART_BEAT); returns its
        version."""
        return self._call(self.client.heartbeat(broker_addr, client_id, producer_groups, consumer_groups,
                                                timeout=timeout))

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
