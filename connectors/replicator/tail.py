"""TopicTail: read one topic of any broker with that broker's own source connector.

The replicator's helpers read small topics of their own (the offset syncs a checkpoint connector
translates with, the heartbeats an emitter echoes): the broker's source connector lists the
topic's partitions and its task reads them, from the earliest or the latest position, with no
committed offsets (nothing is persisted: a restart reads again from where ``start`` says). A topic
that does not exist yet is looked for again every ``retry_s``, and a warning is logged once when
it is still not found after ``warn_s`` (a wrong name, or a writer that never started, must not
look like an idle topic). ``caught_up`` tells when a poll found nothing more to read (the history
written before it was read whole).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping

from connect.records import ConnectRecord
from connect.source import OffsetStorageReader, SourceTask, SourceTaskContext
from connect.source.partitioned import ASSIGNMENT_KEY

__all__ = ["TopicTail", "side_keys"]

log = logging.getLogger(__name__)


def side_keys(config: Mapping[str, Any], prefix: str, *own: str) -> dict[str, Any]:
    """The keys under ``prefix`` (a cluster's client keys given as ``upstream.bootstrap.servers``...),
    prefix removed, without the connector's own keys under it (``own``: e.g. ``type``, ``alias``)."""
    return {k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix) and k[len(prefix):] not in own}


class TopicTail:
    def __init__(self, kind: str, client: Mapping[str, Any], topic: str, name: str, *, start: str = "earliest",
                 retry_s: float = 2.0, warn_s: float = 30.0):
        from connect.plugins import resolve_connector

        self.kind, self.client, self.topic, self.name = kind, dict(client), topic, name
        self.start = start
        self._cls = resolve_connector(kind, "source")
        self.task: SourceTask | None = None
        self._retry_s = retry_s
        self._retry_at = 0.0
        self._missing_since: float | None = None  # first look that did not find the topic
        self._warn_s, self._warned = warn_s, False
        self.caught_up = False  # a poll found nothing more: everything written before it was read

    def _open(self) -> SourceTask | None:
        config = {**self.client, "topics": self.topic, "start.position": self.start}
        connector = self._cls()
        connector.start(config)
        try:
            task_configs = connector.task_configs(1)
        finally:
            connector.stop()
        if not task_configs or not task_configs[0].get(ASSIGNMENT_KEY):
            return None  # the topic does not exist yet
        task = self._cls.task_class()()
        task.context = SourceTaskContext(self.name, task_configs[0], OffsetStorageReader(None))
        task.start(task_configs[0], task.context)
        return task

    def _not_found(self) -> None:
        now = time.monotonic()
        if self._missing_since is None:
            self._missing_since = now
        elif not self._warned and now - self._missing_since >= self._warn_s:
            self._warned = True
            log.warning("[%s] topic %r not found in the %s cluster for %.0f s (looked for every %.0f s): nothing "
                        "is read until it exists; check the name and that its writer runs", self.name, self.topic,
                        self.kind, now - self._missing_since, self._retry_s)

    def poll(self, until: float) -> list[ConnectRecord]:
        """Records that arrived, reading until the topic is drained or ``until`` (time.monotonic)."""
        if self.task is None:
            if time.monotonic() < self._retry_at:
                return []
            self._retry_at = time.monotonic() + self._retry_s
            self.task = self._open()
            if self.task is None:
                self._not_found()
                return []
            if self._warned:
                log.info("[%s] topic %r found in the %s cluster: reading it", self.name, self.topic, self.kind)
        out: list[ConnectRecord] = []
        while time.monotonic() < until:
            self.task.context.deadline = until
            batch = self.task.poll()
            if not batch:
                self.caught_up = True
                break
            out.extend(batch)
        return out

    def close(self) -> None:
        task, self.task = self.task, None
        if task is not None:
            task.stop()
