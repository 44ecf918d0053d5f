"""The watcher: the ``pulsar-metadata`` source task (see "Watcher" and "Stamps" in
:mod:`connectors.pulsar.metadata`)."""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping, Sequence

from connect import patterns
from connect.errors import ConnectError
from connect.records import ConnectRecord
from connect.source import SourceTask
from connectors.pulsar.metadata.admin import PulsarAdmin
from connectors.pulsar.metadata.config import SOURCE_CONFIG
from connectors.pulsar.metadata.stamps import (
    BY,
    ORDER,
    TIME,
    Key,
    applying,
    namespace_data,
    stamp_of,
    strip_stamp,
)
from connectors.replicator.metadata import MetadataChangeEvent, Stamp, diff_events

__all__ = ["PulsarMetadataSourceTask"]

log = logging.getLogger(__name__)


def _event_order(ev: MetadataChangeEvent) -> tuple:
    """Tenants before their namespaces, except deletions: namespaces before their tenant."""
    rank = ORDER.get(ev.resource, 2)
    return (1, -rank, ev.resource_name) if ev.type == "Deleted" else (0, rank, ev.resource_name)


class PulsarMetadataSourceTask(SourceTask):
    def start(self, config: Mapping[str, Any], context) -> None:
        cfg = SOURCE_CONFIG.parse(config)
        self.cluster = cfg["cluster.name"]
        self.topic = cfg["topic"]
        self.poll_s = cfg["poll.interval.ms"] / 1000
        self.snapshot_s = cfg["snapshot.interval.ms"] / 1000
        self._include = patterns.compile(cfg["tenants"])
        self._exclude = patterns.compile(cfg["tenants.exclude"]) if cfg["tenants.exclude"] else None
        self.admin = PulsarAdmin.from_config(cfg, time_left=context.time_left)
        self.partition = {"metadata": self.cluster}
        self._data: dict[Key, dict] | None = None  # what the last read saw (stamps stripped); None: not read yet
        self._carried: dict[Key, Stamp | None] = {}  # the stamp each resource carried then
        self._stamps: dict[Key, Stamp] = {}  # the stamp each resource was last published with
        self._unwritten: dict[Key, Stamp] = {}  # local changes whose stamp is not written into the resource yet
        self._next_poll = time.monotonic()
        self._next_snapshot = 0.0
        self.counts = {"metadata.resources": 0, "metadata.events": 0, "metadata.snapshots": 0,
                       "metadata.stamps.written": 0, "metadata.pending.skipped": 0}

    def _read(self) -> tuple[dict[Key, dict], dict[Key, Stamp | None]]:
        data: dict[Key, dict] = {}
        carried: dict[Key, Stamp | None] = {}
        for tenant in sorted(self.admin.tenants()):
            if not self._include.fullmatch(tenant) or (self._exclude and self._exclude.fullmatch(tenant)):
                continue
            info = self.admin.tenant(tenant)
            if info is None:
                continue  # deleted since it was listed
            data[("Tenants", tenant)], carried[("Tenants", tenant)] = strip_stamp(info), stamp_of(info)
            for ns in sorted(self.admin.namespaces(tenant)):
                policies = self.admin.policies(ns)
                key = ("Namespaces", ns)
                if applying(policies):  # half-applied: as last read until the applier is done
                    self.counts["metadata.pending.skipped"] += 1
                    if self._data is not None and key in self._data:
                        data[key], carried[key] = self._data[key], self._carried.get(key)
                    continue
                if policies is not None:
                    data[("Namespaces", ns)], carried[("Namespaces", ns)] = namespace_data(policies), stamp_of(policies)
        return data, carried

    def poll(self) -> Sequence[ConnectRecord]:
        now_mono = time.monotonic()
        if now_mono < self._next_poll:
            time.sleep(max(min(self._next_poll - now_mono, 0.1, self.context.time_left()), 0))
            return []
        self._next_poll = now_mono + self.poll_s
        data, carried = self._read()
        now = int(time.time() * 1000)
        events = self._changes(data, carried, now)
        self._write_stamps(data)
        if now_mono >= self._next_snapshot:
            self._next_snapshot = now_mono + self.snapshot_s if self.snapshot_s else float("inf")
            changed = {(ev.resource, ev.resource_name) for ev in events}
            for key, doc in data.items():
                if key not in changed:
                    when, by = self._stamps.get(key, (0, self.cluster))
                    events.append(MetadataChangeEvent("Modified", key[0], key[1], doc, by, when))
            self.counts["metadata.snapshots"] += 1
        events.sort(key=_event_order)
        self.counts["metadata.resources"] = len(data)
        self.counts["metadata.events"] += len(events)
        offset = {"ts": now}
        return [ev.to_record(self.topic, self.partition, offset) for ev in events]

    def _changes(self, data: dict[Key, dict], carried: dict[Key, Stamp | None], now: int) -> list[MetadataChangeEvent]:
        """The events since the last read; remembers stamps, and which local changes need theirs written."""
        first = self._data is None
        before = self._data or {}
        kept: dict[Key, Stamp] = {}  # changes that keep the stamp their resource carries
        for key, doc in data.items():
            held = carried[key]
            if key not in before:
                if held is not None:
                    kept[key] = held
                elif first:  # there before the watcher: older than any stamped change
                    kept[key] = (0, self.cluster)
                    self._unwritten[key] = kept[key]
            elif doc != before[key]:
                if held is not None and held != self._carried.get(key):
                    kept[key] = held  # applied from another cluster, with its stamp
            elif held is not None and key not in self._unwritten:  # unchanged, or a change of the stamp alone
                self._stamps[key] = held
        events = [] if first else diff_events(before, data, self.cluster, now, kept)
        for ev in events:
            key = (ev.resource, ev.resource_name)
            if ev.type == "Deleted":
                self._stamps.pop(key, None)
                self._unwritten.pop(key, None)
                continue
            self._stamps[key] = ev.stamp
            if key in kept:
                self._unwritten.pop(key, None)
            else:
                self._unwritten[key] = ev.stamp  # a local change: its stamp goes into the resource
        if first:
            self._stamps.update(kept)
        self._data, self._carried = data, dict(carried)
        return events

    def _write_stamps(self, data: dict[Key, dict]) -> None:
        """Write the stamps of local changes into their resources (as a PIP-136 broker does when it is
        updated), each only if the resource is still as read; failures are retried at the next read."""
        for key, stamp in list(self._unwritten.items()):
            resource, name = key
            written = False
            try:
                if resource == "Tenants":
                    current = self.admin.tenant(name)
                    if written := current is not None and strip_stamp(current) == data.get(key):
                        self.admin.update_tenant(name, {**current, BY: stamp[1], TIME: stamp[0]})
                else:
                    current = self.admin.policies(name)
                    if written := current is not None and namespace_data(current) == data.get(key):
                        self.admin.set_properties(name, {BY: stamp[1], TIME: str(stamp[0])})
            except ConnectError as exc:
                log.warning("[%s] cannot stamp %s %s yet: %s", self.context.task_id, resource, name, exc)
                continue
            del self._unwritten[key]  # written, or changed again since it was read (the next read sees to it)
            if written:
                self._carried[key] = stamp  # its own stamp, so a later local change is not taken for a remote one
                self.counts["metadata.stamps.written"] += 1

    def metrics(self) -> Mapping[str, float]:
        return {**{k: float(v) for k, v in self.counts.items()}, "metadata.stamps.unwritten": float(len(self._unwritten))}

    def stop(self) -> None:
        self.admin.close()
