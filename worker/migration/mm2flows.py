"""The connectors MM2's herders would run for each pair of clusters, in this project's keys.

Per enabled flow S -> T: ``<prefix>-S-T-mirror`` (Kafka -> Kafka pipeline, MirrorSourceConnector),
``<prefix>-S-T-checkpoint`` (MirrorCheckpointConnector; MM2's record format into
``S.checkpoints.internal``) and ``<prefix>-S-T-metadata`` (topic configs and ACLs). Per cluster
that some pair sends heartbeats to: ``<prefix>-T-heartbeat`` (MirrorHeartbeatConnector, into T's
``heartbeats``). Keys are described in docs/replication.md ("Coming from MirrorMaker 2").
"""

from __future__ import annotations

import re
from typing import Any

from worker.migration.mm2clients import ClientSettings
from worker.migration.mm2reader import DEFAULT_POLICY, IDENTITY_POLICY, ImportResult, Reader, bootstrap, client

__all__ = ["build_flows"]

HEARTBEATS = "heartbeats"


def _overrides(prefix: str, general: ClientSettings, role: ClientSettings, role_prefix: str) -> dict[str, str]:
    """``general`` as ``<prefix>client.override.*``, what ``role`` adds or changes as ``<prefix><role_prefix>*``."""
    out = {f"{prefix}client.override.{k}": v for k, v in general.settings.items()}
    out.update({f"{prefix}{role_prefix}{k}": v for k, v in role.settings.items() if general.settings.get(k) != v})
    return out


class _Clients:
    """Each cluster's settings per role, translated once (their skips and secrets reported once)."""

    def __init__(self, reader: Reader, result: ImportResult):
        self.reader, self.result, self._done = reader, result, {}

    def get(self, cluster: str, role: str) -> ClientSettings:
        if (cluster, role) not in self._done:
            settings = client(self.reader, cluster, role)
            self._done[(cluster, role)] = settings
            seen = {(s.key, s.reason) for s in self.result.skipped}
            self.result.skipped.extend(s for s in settings.skipped if (s.key, s.reason) not in seen)
            self.result.secrets.update(settings.secrets)
        return self._done[(cluster, role)]

    def general(self, cluster: str) -> ClientSettings:
        """What every role shares: the settings equal in the three roles."""
        roles = [self.get(cluster, r) for r in ("consumer", "producer", "admin")]
        shared = {k: v for k, v in roles[0].settings.items() if all(r.settings.get(k) == v for r in roles[1:])}
        return ClientSettings(shared)

    def flat(self, cluster: str, *roles: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for role in roles:
            out.update(self.get(cluster, role).settings)
        return out


def _policy(reader: Reader, s: str, t: str) -> dict[str, str]:
    name, cls = reader.flow(s, t, "replication.policy.class")
    if cls == IDENTITY_POLICY:
        return {"replication.policy": "identity"}
    if cls != DEFAULT_POLICY:
        reader.bad(name, "only DefaultReplicationPolicy and IdentityReplicationPolicy are carried over: a custom "
                         "policy's topic names cannot be known without running its code")
        return {}
    _, separator = reader.flow(s, t, "replication.policy.separator")
    return {"replication.policy": "prefix", "replication.policy.separator": separator or "."}


def _topics(reader: Reader, s: str, t: str, policy: dict[str, str]) -> tuple[str, str]:
    """(topics regex, exclude regex) of flow s->t; heartbeats topics always included, as MM2 does."""
    topics = reader.regexes(s, t, "topics")
    exclude = reader.regexes(s, t, "topics.exclude", "topics.blacklist")
    beats = [HEARTBEATS]
    if policy.get("replication.policy") == "prefix":  # heartbeats of clusters further upstream: B.heartbeats
        beats.append(".*" + re.escape(policy["replication.policy.separator"]) + HEARTBEATS)
    return "|".join([topics] * bool(topics) + beats), exclude


def _seconds_ms(reader: Reader, s: str, t: str, key: str) -> int | None:
    seconds = reader.number(s, t, key, minimum=1)
    return None if seconds is None else seconds * 1000


def _exactly_once(reader: Reader, t: str) -> bool:
    """MM2's ``exactly.once.source.support`` of the worker writing to ``t`` (``T.<key>`` over the top-level
    key): ``enabled`` -> a mirror into ``t`` is exactly once (one transaction per epoch with its offsets);
    ``preparing`` (MM2's upgrade step) and ``disabled`` run at least once, as here by default."""
    found = reader.raw(f"{t}.exactly.once.source.support") or reader.raw("exactly.once.source.support")
    if found is None:
        return False
    key, value = found
    if value.lower() not in ("enabled", "preparing", "disabled"):
        reader.bad(key, f"must be enabled, preparing or disabled, not {value!r}")
    return value.lower() == "enabled"


def _mirror(reader: Reader, clients: _Clients, s: str, t: str, policy: dict[str, str], syncs: str | None,
            name: str, take_over: bool) -> dict[str, Any]:
    topics, exclude = _topics(reader, s, t, policy)
    config: dict[str, Any] = {
        "source.connector.class": "kafka", "source.bootstrap.servers": bootstrap(reader, s),
        "source.topics.regex": topics, "source.topics.exclude": exclude or "(?!)",
        "source.cluster.alias": s, "source.start.position": "earliest",
        **_overrides("source.", clients.general(s), clients.get(s, "consumer"), "consumer.override."),
        "sink.connector.class": "kafka", "sink.bootstrap.servers": bootstrap(reader, t), "sink.cluster.alias": t,
        **_overrides("sink.", clients.general(t), clients.get(t, "producer"), "producer.override."),
        **policy, "errors.tolerance": "none",
    }
    if take_over:  # start where MM2 committed flow s->t: its Connect offsets topic mm2-offsets.<s>.internal, in t
        config["source.mm2.offsets.topic"] = f"mm2-offsets.{s}.internal"
        config["source.mm2.offsets.client.bootstrap.servers"] = bootstrap(reader, t)
        config.update({f"source.mm2.offsets.client.{k}": v for k, v in clients.flat(t, "consumer").items()})
    if (refresh := _seconds_ms(reader, s, t, "refresh.topics.interval.seconds")) is not None:
        config["source.refresh.topics.interval.ms"] = str(refresh)
    if (factor := reader.number(s, t, "replication.factor", minimum=-1)) is not None:
        config["sink.topic.creation.replication.factor"] = str(factor)
    if (tasks := reader.number(s, t, "tasks.max", minimum=1)) is not None:
        config["tasks.max"] = str(tasks)
    if _exactly_once(reader, t):
        config["exactly.once.support"] = "required"
    if syncs:
        config["offset.syncs.topic"] = syncs
        if (lag := reader.number(s, t, "offset.lag.max", minimum=1)) is not None:
            config["offset.syncs.max.lag"] = str(lag)
    return {"name": name, "config": config}


def _checkpoint(reader: Reader, clients: _Clients, s: str, t: str, syncs: str, name: str) -> dict[str, Any]:
    interval = _seconds_ms(reader, s, t, "emit.checkpoints.interval.seconds") or 60_000
    sync_groups = reader.boolean(s, t, "sync.group.offsets.enabled")
    if sync_groups:  # groups move each checkpoint round here: at least as often as MM2 moved them
        interval = min(interval, _seconds_ms(reader, s, t, "sync.group.offsets.interval.seconds") or interval)
    else:
        reader.flow(s, t, "sync.group.offsets.interval.seconds")  # read: no effect without the sync
    config: dict[str, Any] = {
        "source.connector.class": "checkpoint",
        "source.upstream.type": "kafka", "source.upstream.alias": s,
        "source.upstream.bootstrap.servers": bootstrap(reader, s),
        **{f"source.upstream.{k}": v for k, v in clients.flat(s, "consumer", "admin").items()},
        "source.downstream.type": "kafka", "source.downstream.alias": t,
        "source.downstream.bootstrap.servers": bootstrap(reader, t),
        **{f"source.downstream.{k}": v for k, v in clients.flat(t, "consumer", "admin").items()},
        "source.offset.syncs.topic": syncs,
        "source.groups": ",".join(p.strip() for p in reader.flow(s, t, "groups")[1].split(",") if p.strip()),
        "source.groups.exclude": reader.regexes(s, t, "groups.exclude", "groups.blacklist") or "(?!)",
        "source.emit.checkpoints.interval.ms": str(interval),
        "source.sync.group.offsets.enabled": str(sync_groups).lower(),
        "source.checkpoints.format": "mm2", "source.checkpoints.topic": f"{s}.checkpoints.internal",
        "sink.connector.class": "kafka", "sink.bootstrap.servers": bootstrap(reader, t),
        **_overrides("sink.", clients.general(t), clients.get(t, "producer"), "producer.override."),
    }
    reader.regexes(s, t, "groups")  # validated as Java regexes
    if (factor := reader.number(s, t, "checkpoints.topic.replication.factor", minimum=-1)) is not None:
        config["sink.topic.creation.replication.factor"] = str(factor)
    return {"name": name, "config": config}


def _metadata(reader: Reader, clients: _Clients, s: str, t: str, policy: dict[str, str], configs: bool, acls: bool,
              name: str) -> dict[str, Any]:
    topics, exclude = _topics(reader, s, t, policy)
    config: dict[str, Any] = {
        "source.connector.class": "kafka-metadata", "source.bootstrap.servers": bootstrap(reader, s),
        "source.cluster.name": s, "source.topics.regex": topics, "source.topics.exclude": exclude or "(?!)",
        "source.sync.acls.enabled": str(acls).lower(),
        **_overrides("source.", clients.general(s), clients.get(s, "admin"), "admin.override."),
        "sink.connector.class": "kafka-metadata", "sink.bootstrap.servers": bootstrap(reader, t),
        "sink.cluster.name": t,
        **_overrides("sink.", clients.general(t), clients.get(t, "admin"), "admin.override."),
    }
    excluded = reader.regexes(s, t, "config.properties.exclude", "config.properties.blacklist")
    if not configs:
        config["source.configs.exclude"] = ".*"  # sync.topic.configs.enabled=false: topics and ACLs only
    elif excluded:
        config["source.configs.exclude"] = excluded
    if policy.get("replication.policy") == "prefix":
        config["sink.topic.template"] = s + policy["replication.policy.separator"] + "{topic}"
    if (poll := _seconds_ms(reader, s, t, "sync.topic.configs.interval.seconds")) is not None:
        config["source.poll.interval.ms"] = str(poll)
    if (factor := reader.number(s, t, "replication.factor", minimum=-1)) is not None:
        config["sink.replication.factor"] = str(factor)
    return {"name": name, "config": config}


def build_flows(reader: Reader, clusters: list[str], result: ImportResult, prefix: str, take_over: bool = False) -> None:
    clients = _Clients(reader, result)
    beats: dict[str, int] = {}  # cluster heartbeats go to -> interval ms (the shortest asked)
    beat_factor: dict[str, str] = {}
    for s in clusters:
        for t in clusters:
            if s == t:
                continue
            if reader.boolean(s, t, "emit.heartbeats.enabled"):
                interval = _seconds_ms(reader, s, t, "emit.heartbeats.interval.seconds") or 1000
                beats[t] = min(beats.get(t, interval), interval)
                factor = reader.number(s, t, "heartbeats.topic.replication.factor", minimum=-1)
                if factor is not None:
                    beat_factor[t] = str(factor)
            enabled_key = f"{s}->{t}.enabled"
            found = reader.raw(enabled_key)
            if not found or found[1].lower() != "true":
                if found and found[1].lower() != "false":
                    reader.bad(enabled_key, "must be true or false")
                continue
            policy = _policy(reader, s, t)
            base = f"{prefix}-{s}-{t}"
            syncs = f"offset-syncs.{s}.internal" if reader.boolean(s, t, "emit.offset-syncs.enabled") else None
            result.connectors.append(_mirror(reader, clients, s, t, policy, syncs, f"{base}-mirror", take_over))
            if reader.boolean(s, t, "emit.checkpoints.enabled") and syncs:
                result.connectors.append(_checkpoint(reader, clients, s, t, syncs, f"{base}-checkpoint"))
            configs = reader.boolean(s, t, "sync.topic.configs.enabled")
            acls = reader.boolean(s, t, "sync.topic.acls.enabled")
            if configs or acls:
                result.connectors.append(_metadata(reader, clients, s, t, policy, configs, acls, f"{base}-metadata"))
    for t, interval in sorted(beats.items()):
        config = {"source.connector.class": "heartbeat", "source.alias": t, "source.topic": HEARTBEATS,
                  "source.interval.ms": str(interval),
                  "sink.connector.class": "kafka", "sink.bootstrap.servers": bootstrap(reader, t),
                  **_overrides("sink.", clients.general(t), clients.get(t, "producer"), "producer.override.")}
        if t in beat_factor:
            config["sink.topic.creation.replication.factor"] = beat_factor[t]
        result.connectors.append({"name": f"{prefix}-{t}-heartbeat", "config": config})
