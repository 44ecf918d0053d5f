"""Checkpoints: consumer progress carried across a replication link, so consumers can fail over
(MirrorMaker 2's MirrorCheckpointConnector; RIP-45's checkpoint connector, which only published
timestamps, is the one this improves on).

The ``checkpoint`` source runs in a pipeline whose sink writes to the *target* cluster:

1. it reads the replication flow's offset syncs (``offset.syncs.topic`` in the target cluster,
   written by the mirror: see ``connect.tasks.offsetsync``) into a :class:`SyncStore`;
2. every ``emit.checkpoints.interval.ms`` it reads the committed positions of the source
   cluster's consumer groups (Kafka groups, RocketMQ consumer groups per queue, Pulsar
   subscriptions: ``connectors.replicator.groups``) in the replicated topics and translates them
   into target positions, conservatively (a consumer resuming there may see duplicates, never a
   gap); a group positioned in a *source gap* - records the source dropped before the mirror
   copied them, which the mirror writes to the offset-syncs topic too - is never translated: a
   consumer moved to the target would skip, without a word, records it never read (it is logged
   and reported as ``checkpoint.untranslated|<group>|<partition>|in-source-gap``);
3. it emits a checkpoint record per (group, source partition, target partition) whose
   translation changed: value ``{"group", "source": {"alias", "topic", "partition", "position"},
   "target": {"alias", "topic", "partition", "position", "inclusive"}, "ts"}``, key
   ``<group>:<source partition>:<target topic>:<target partition>`` - to ``checkpoints.topic``;
   with ``checkpoints.format=mm2`` (Kafka to Kafka) in MirrorMaker 2's own record format instead
   (``connectors.replicator.mm2format``), to ``<upstream.alias>.checkpoints.internal`` unless
   ``checkpoints.topic`` is given, so consumers translating with MM2's ``RemoteClusterUtils`` keep working;
4. with ``sync.group.offsets.enabled`` it also moves the same groups in the target cluster to the
   translated positions, forward only and only while those groups are inactive (Kafka: no
   members; Pulsar: no consumer on the subscription), as MirrorMaker 2 does. A target partition
   fed by several source partitions moves only once each of them translates (to the lowest).

Positions are broker-specific and opaque (Kafka offset, RocketMQ queue offset, Pulsar message id),
so every pair of brokers translates, cross-broker ones included. Groups are chosen by ``groups``
(regexes, full match, against the groups the source cluster lists; entries that are plain names
are taken as they are - the only way for Pulsar, whose subscriptions cannot be listed without an
admin API) minus ``groups.exclude``.

Offsets: nothing to replay (a restart reads the syncs again and re-emits every checkpoint once).
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any, Mapping, Sequence

import orjson

from connect import patterns
from connect.config import ConfigDef, Importance, Type, at_least, non_empty, one_of, valid_regex
from connect.connector import SourceConnector
from connect.errors import ConfigIssue, ConnectError, RetriableError
from connect.records import ConnectRecord, make_record, partition_key
from connect.source import SourceTask
from connect.tasks.offsetsync import GapSync, decode_sync
from connectors.replicator import mm2format
from connectors.replicator.groups import GROUP_BACKENDS, GroupPositions, cluster_groups
from connectors.replicator.syncstore import SyncStore, Translation
from connectors.replicator.tail import TopicTail, side_keys

__all__ = ["CheckpointSourceConnector", "CheckpointSourceTask"]

log = logging.getLogger(__name__)

_CONNECTION_KEY = {"kafka": "bootstrap.servers", "pulsar": "service.url", "rocketmq": "namesrv.addr"}
_PLAIN_NAME = re.compile(r"[\w.\-%|]+")
_NO_SYNC, _BEHIND, _IN_GAP = "no-sync-yet", "behind-oldest-sync", "in-source-gap"
_GAPS_KEPT = 100  # source gaps remembered per source partition (the newest)
_WHY = {_NO_SYNC: "has no offset sync yet (the mirror has copied nothing of this partition, or its syncs are not "
                  "in the offset-syncs topic)",
        _BEHIND: "is before every offset sync known (the mirror started after it, or older syncs left the "
                 "offset-syncs topic by retention)",
        _IN_GAP: "is in a source gap: records the source dropped (retention, DeleteRecords) before the mirror "
                 "copied them; a consumer moved to the target would skip records it never read without a word "
                 "(see GET /connectors/<mirror>/gaps)"}
_SHOWN = 50  # untranslated (group, partition) gauges reported at most
_PARKED_GROUPS = 10_000  # groups whose parked partitions are remembered at most

CONFIG = (
    ConfigDef()
    .define("upstream.type", Type.STRING, doc="Source cluster's broker: kafka, pulsar or rocketmq.",
            importance=Importance.HIGH, validator=one_of(*GROUP_BACKENDS))
    .define("upstream.alias", Type.STRING, doc="Source cluster alias (as the mirror's source.cluster.alias).",
            importance=Importance.HIGH, validator=non_empty)
    .define("downstream.type", Type.STRING, doc="Target cluster's broker: kafka, pulsar or rocketmq.",
            importance=Importance.HIGH, validator=one_of(*GROUP_BACKENDS))
    .define("downstream.alias", Type.STRING, doc="Target cluster alias (as the mirror's target.cluster.alias).",
            importance=Importance.HIGH, validator=non_empty)
    .define_prefix("upstream.", "Client keys of the source cluster (bootstrap.servers, service.url or namesrv.addr...).")
    .define_prefix("downstream.", "Client keys of the target cluster.")
    .define("offset.syncs.topic", Type.STRING, doc="The mirror's offset.syncs.topic, in the target cluster.",
            importance=Importance.HIGH, validator=non_empty)
    .define("groups", Type.LIST, [".*"], "Groups to checkpoint: regexes (full match) against the groups the source "
            "lists, or plain names (Pulsar subscriptions must be named).")
    .define("groups.exclude", Type.STRING, r"console-consumer-.*|connect-.*|__.*", "Regex of groups never checkpointed.",
            validator=valid_regex)
    .define("checkpoints.topic", Type.STRING, "checkpoints", "Topic of the checkpoint records (the sink may rename it); "
            "with checkpoints.format=mm2 the default is MM2's <upstream.alias>.checkpoints.internal.",
            validator=non_empty)
    .define("checkpoints.format", Type.STRING, "json", "Checkpoint records: json (this project's, any brokers) or mm2 "
            "(MirrorMaker 2's Checkpoint key and value, Kafka to Kafka: read by MM2's RemoteClusterUtils.translateOffsets).",
            validator=one_of("json", "mm2"))
    .define("emit.checkpoints.interval.ms", Type.INT, 5_000, "How often group positions are read and translated.",
            validator=at_least(100))
    .define("sync.group.offsets.enabled", Type.BOOLEAN, False,
            "Also move the groups in the target cluster (forward only, while they are inactive).")
)


def checkpoints_topic(config: Mapping[str, Any]) -> str:
    """The configured checkpoints.topic; with the mm2 format and none given, MM2's name for it."""
    cfg = CONFIG.parse(config)
    if cfg["checkpoints.format"] == "mm2" and "checkpoints.topic" not in config:
        return mm2format.checkpoints_topic(cfg["upstream.alias"])
    return cfg["checkpoints.topic"]


def _side(config: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    return side_keys(config, prefix, "type", "alias")


class CheckpointSourceConnector(SourceConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return CONFIG

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().validate(config)
        for side in ("upstream", "downstream"):
            kind = str(config.get(f"{side}.type", ""))
            key = _CONNECTION_KEY.get(kind)
            if key and not config.get(f"{side}.{key}"):
                issues.append(ConfigIssue(f"{side}.{key}", None, f"a {kind} {side} cluster needs its {key}"))
        if config.get("upstream.alias") and config.get("upstream.alias") == config.get("downstream.alias"):
            issues.append(ConfigIssue("downstream.alias", config.get("downstream.alias"), "must differ from upstream.alias"))
        if str(config.get("checkpoints.format", "json")).lower() == "mm2":
            for side in ("upstream", "downstream"):
                if str(config.get(f"{side}.type", "kafka")) != "kafka":
                    issues.append(ConfigIssue(f"{side}.type", config.get(f"{side}.type"),
                                              "checkpoints.format=mm2 needs Kafka on both sides (MM2 offsets are Kafka offsets)"))
        for pattern in str(config.get("groups", "")).split(","):
            if problem := patterns.problem(pattern.strip()):
                issues.append(ConfigIssue("groups", pattern.strip(), problem))
        return issues

    @classmethod
    def task_class(cls) -> type:
        return CheckpointSourceTask

    @classmethod
    def named_topics(cls, config: Mapping[str, Any]) -> list[str] | None:
        return None if CONFIG.validate(config) else [checkpoints_topic(config)]

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [dict(self.config)]

    def source_topics(self) -> Mapping[str, int]:
        return {checkpoints_topic(self.config): 1}


class CheckpointSourceTask(SourceTask):
    def start(self, config: Mapping[str, Any], context) -> None:
        cfg = CONFIG.parse(config)
        self.cfg = cfg
        self.upstream_alias, self.downstream_alias = cfg["upstream.alias"], cfg["downstream.alias"]
        self.interval = cfg["emit.checkpoints.interval.ms"] / 1000
        self.topic = checkpoints_topic(config)
        self.mm2 = cfg["checkpoints.format"] == "mm2"
        self.apply_groups = cfg["sync.group.offsets.enabled"]
        self._patterns = [patterns.compile(p) for p in cfg["groups"] if p]
        self._plain = [p for p in cfg["groups"] if _PLAIN_NAME.fullmatch(p)]
        self._exclude = patterns.compile(cfg["groups.exclude"]) if cfg["groups.exclude"] else None
        self.upstream: GroupPositions = cluster_groups(cfg["upstream.type"], _side(config, "upstream."))
        self.downstream: GroupPositions | None = None
        try:
            if self.apply_groups:
                self.downstream = cluster_groups(cfg["downstream.type"], _side(config, "downstream."))
            self.reader = TopicTail(cfg["downstream.type"], _side(config, "downstream."), cfg["offset.syncs.topic"],
                                   f"{context.task_id}-syncs", start="earliest")
        except BaseException:
            self.upstream.close()
            raise
        self.store = SyncStore(self.upstream.order_key)
        self.gaps: dict[str, list[tuple[Any, Any]]] = {}  # source partition key -> (first, last) never copied
        self.partition = {"checkpoint": f"{self.upstream_alias}->{self.downstream_alias}"}
        self._emitted: dict[tuple, tuple] = {}  # (group, source key, target) -> (source position, translation)
        self._next_at = time.monotonic()
        self.counts = {"checkpoint.syncs": 0, "checkpoint.syncs.invalid": 0, "checkpoint.syncs.other.flows": 0,
                       "checkpoint.groups": 0, "checkpoint.emitted": 0, "checkpoint.rounds": 0,
                       "checkpoint.groups.busy": 0, "checkpoint.applied": 0, "checkpoint.parked": 0,
                       "checkpoint.targets.incomplete": 0, "checkpoint.source.gaps": 0}
        # (group, source partition key) -> why it is not translated: this round, the last whole round
        self._untranslatable: dict[tuple, str] = {}
        self._last_untranslatable: dict[tuple, str] = {}
        self._reported: dict[tuple, str] = {}  # what was logged, so it is logged once
        # group -> target partitions parked by an apply that succeeded: not parked again while they
        # stay parked (forgotten once they translate, or the group is no longer listed)
        self._parked: dict[str, set[tuple]] = {}

    # -- syncs -------------------------------------------------------------------------------
    def _read_syncs(self, until: float) -> int:
        """Reads the offset syncs that arrived; how many records it read."""
        records = self.reader.poll(until)
        for r in records:
            try:
                sync = decode_sync(r.value)
            except ValueError as exc:
                self.counts["checkpoint.syncs.invalid"] += 1
                log.warning("[%s] record %s of %s skipped: %s", self.context.task_id, r.position(), self.reader.topic, exc)
                continue
            if sync.source_alias != self.upstream_alias or sync.target_alias != self.downstream_alias:
                self.counts["checkpoint.syncs.other.flows"] += 1
                continue
            if isinstance(sync, GapSync):
                kept = self.gaps.setdefault(partition_key(sync.source_partition), [])
                if (sync.first, sync.last) not in kept:
                    kept.append((sync.first, sync.last))
                    del kept[:-_GAPS_KEPT]
                    self.counts["checkpoint.source.gaps"] += 1
                continue
            self.store.add(sync)
            self.counts["checkpoint.syncs"] += 1
        return len(records)

    # -- groups ------------------------------------------------------------------------------
    def _groups(self) -> list[str]:
        listed = self.upstream.list_groups() or []
        chosen = {g for g in listed if any(p.fullmatch(g) for p in self._patterns)}
        chosen.update(self._plain)
        return sorted(g for g in chosen if not (self._exclude and self._exclude.fullmatch(g)))

    def _checkpoint_group(self, group: str, topics: Sequence[str], ts: int, out: list[ConnectRecord]) -> None:
        positions = self.upstream.positions(group, topics)
        if positions is None:
            self.counts["checkpoint.groups.busy"] += 1
            return
        per_target: dict[tuple, dict[str, Translation]] = {}  # target -> source key -> translation
        behind: set[str] = set()  # source partitions of the group behind every known sync
        for source_key, (sp, next_key) in positions.items():
            if source_key in self.gaps and self._in_gap(source_key, next_key):
                self._untranslated(group, source_key, next_key, _IN_GAP)
                continue
            if not self.store.knows(source_key):
                if str(sp.get("topic")) in topics:  # a replicated topic, nothing of this partition copied yet
                    self._untranslated(group, source_key, next_key, _NO_SYNC)
                continue
            translated = self.store.translate(source_key, next_key)
            if not translated:
                behind.add(source_key)
                self._untranslated(group, source_key, next_key, _BEHIND)
                continue
            self._translated(group, source_key)
            for target, t in translated.items():
                per_target.setdefault(target, {})[source_key] = t
                memo = (group, source_key, target)
                if self._emitted.get(memo) == (next_key, t):
                    continue
                self._emitted[memo] = (next_key, t)
                out.append(self._record(group, sp, next_key, target, t, ts))
        if self.downstream is None or not (per_target or behind):
            self._parked.pop(group, None)
            return
        # A target partition fed by several source partitions moves only when every one of them
        # translated (to the lowest of their translations): one left out could have records there
        # before the others' positions. One fed by a partition the group is behind every sync of is
        # parked: at its earliest position if the group has none there, so a consumer failing over
        # reads records again rather than skipping them (its reset policy could say "latest").
        # Parking is done once per stretch of being parked (a group active in the target then has
        # positions of its own): every round would cost the target a group description and an
        # offset fetch (Kafka), or exclusive consumers on every parked partition (Pulsar).
        lowest: dict[tuple, Translation] = {}
        parked = {target for key in behind for target in self.store.targets_of(key)}
        done = self._parked.get(group, set()) & parked
        to_park = parked - done
        for target, by_source in per_target.items():
            missing = self.store.sources_of(target) - by_source.keys()
            if missing:
                if target not in parked:
                    self.counts["checkpoint.targets.incomplete"] += 1
                continue
            lowest[target] = min(by_source.values(), key=Translation.sort_key)
        for target in parked:
            lowest.pop(target, None)
        lowest.update((target, Translation(None, True)) for target in to_park)
        if lowest:
            moved = self.downstream.apply(group, lowest)
            self.counts["checkpoint.applied"] += sum(1 for m in moved if m not in parked)
            self.counts["checkpoint.parked"] += sum(1 for m in moved if m in parked)
            if moved:
                log.info("[%s] group %s moved in %s: %d partition(s)%s", self.context.task_id, group,
                         self.downstream_alias, len(moved),
                         f", {len(parked & set(moved))} parked at their earliest position" if parked else "")
        done |= to_park
        if done:
            if len(self._parked) >= _PARKED_GROUPS and group not in self._parked:
                self._parked.pop(next(iter(self._parked)))  # the oldest group: parked once more, at worst
            self._parked[group] = done
        else:
            self._parked.pop(group, None)

    def _in_gap(self, source_key: str, next_key: Any) -> bool:
        """The group's next record is one the source dropped before the mirror copied it."""
        order = self.upstream.order_key  # gaps are of offset-numbered sources (Kafka, RocketMQ)
        try:
            return any(order({"offset": first}) <= next_key <= order({"offset": last})
                       for first, last in self.gaps[source_key])
        except (KeyError, TypeError, ValueError):  # positions of another kind (not comparable): not this gap's
            return False

    # -- groups that cannot be translated: which, where, why ---------------------------------
    def _untranslated(self, group: str, source_key: str, next_key: Any, why: str) -> None:
        memo = (group, source_key)
        self._untranslatable[memo] = why
        if self._reported.get(memo) != why:
            self._reported[memo] = why
            oldest = self.store.oldest(source_key)
            log.warning("[%s] group %s is not translated in %s: its next position %s %s%s", self.context.task_id,
                        group, source_key, next_key, _WHY[why],
                        f" (the oldest known is at {oldest})" if oldest is not None else "")

    def _translated(self, group: str, source_key: str) -> None:
        memo = (group, source_key)
        if self._reported.pop(memo, None) is not None:
            log.info("[%s] group %s is translated again in %s", self.context.task_id, group, source_key)

    def _record(self, group: str, sp: dict, next_key: Any, target: tuple, t: Translation, ts: int) -> ConnectRecord:
        self.counts["checkpoint.emitted"] += 1
        if self.mm2:  # MM2's Checkpoint: the target partition, and the offset the consumer resumes at there
            key = mm2format.encode_key(group, target[0], int(target[1]))
            value = mm2format.encode_value(int(next_key), int(t.position) + (0 if t.inclusive else 1))
            return make_record(self.topic, key, value, None, ts, self.partition, {"ts": ts}, 0)
        value = orjson.dumps({
            "group": group,
            "source": {"alias": self.upstream_alias, "topic": sp.get("topic"), "partition": sp, "position": next_key},
            "target": {"alias": self.downstream_alias, "topic": target[0], "partition": target[1],
                       "position": t.position, "inclusive": t.inclusive},
            "ts": ts})
        key = f"{group}:{partition_key(sp)}:{target[0]}:{target[1]}".encode()
        return make_record(self.topic, key, value, None, ts, self.partition, {"ts": ts}, 0)

    # -- the task ----------------------------------------------------------------------------
    def poll(self) -> Sequence[ConnectRecord]:
        now = time.monotonic()
        until = now + min(0.5, self.context.time_left())
        read = self._read_syncs(until)
        if not self.reader.caught_up:  # the whole history first: the oldest syncs count
            if not read:  # the topic is not there yet (the reader looks for it every few seconds): no busy loop
                time.sleep(max(min(0.1, self.context.time_left()), 0))
            return []
        if now < self._next_at:
            time.sleep(max(min(self._next_at - time.monotonic(), 0.1, self.context.time_left()), 0))
            return []
        self._next_at = now + self.interval
        topics = sorted(self.store.source_topics())
        if not topics:
            return []
        out: list[ConnectRecord] = []
        ts = int(time.time() * 1000)
        groups = self._groups()
        self.counts["checkpoint.groups"] = len(groups)
        self.counts["checkpoint.rounds"] += 1
        self._untranslatable = {}
        for group in groups:
            try:
                self._checkpoint_group(group, topics, ts, out)
            except (RetriableError, ConnectError) as exc:
                log.warning("[%s] group %s not checkpointed this round: %s", self.context.task_id, group, exc)
                self._untranslatable.update((k, w) for k, w in self._last_untranslatable.items() if k[0] == group)
        self._last_untranslatable = self._untranslatable
        listed = set(groups)
        for group in [g for g in self._parked if g not in listed]:
            del self._parked[group]
        for memo in [m for m in self._reported if m not in self._untranslatable]:  # a group gone or moved on
            del self._reported[memo]
        return out

    def metrics(self) -> Mapping[str, float]:
        """The counters, and one gauge per (group, source partition) not translated (at most
        ``_SHOWN``): ``checkpoint.untranslated|<group>|<source partition>|<why>`` = 1."""
        out = {k: float(v) for k, v in self.counts.items()}
        out["checkpoint.untranslated"] = float(len(self._last_untranslatable))
        for (group, source_key), why in sorted(self._last_untranslatable.items())[:_SHOWN]:
            out[f"checkpoint.untranslated|{group}|{source_key}|{why}"] = 1.0
        return out

    def stop(self) -> None:
        for step in (self.reader.close, self.upstream.close, *([self.downstream.close] if self.downstream else [])):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - close everything
                log.warning("[%s] closing: %s", self.context.task_id, exc)
