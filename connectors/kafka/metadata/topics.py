"""What of a topic is copied: its configs (MirrorMaker 2's rules) and its name in a Kafka cluster."""

from __future__ import annotations

from typing import Mapping, Sequence

from confluent_kafka.admin import ConfigEntry, ConfigSource

from connect import patterns

__all__ = ["topic_configs", "config_ops", "local_topic_name"]


def _source(entry: ConfigEntry) -> ConfigSource | None:
    """The entry's config source as the enum: a described entry holds the wire's int (confluent-kafka
    does not convert it), an entry built in code may hold the enum."""
    try:
        return ConfigSource(entry.source)
    except ValueError:
        return None


def topic_configs(entries: Mapping[str, ConfigEntry] | Sequence[ConfigEntry], exclude: str,
                  source_defaults: bool = False) -> dict[str, str]:
    """The configs of a described topic that are copied (MM2's ``targetConfig``): not read-only, not
    sensitive, not static broker configs, not matched by ``exclude``, and not defaults unless
    ``source_defaults`` (``use.defaults.from=source``)."""
    out = {}
    for e in (entries.values() if isinstance(entries, Mapping) else entries):
        if e.is_read_only or e.is_sensitive or e.value is None or _source(e) == ConfigSource.STATIC_BROKER_CONFIG:
            continue
        if (e.is_default or _source(e) == ConfigSource.DEFAULT_CONFIG) and not source_defaults:
            continue
        if exclude and patterns.fullmatch(exclude, e.name):
            continue
        out[e.name] = e.value
    return dict(sorted(out.items()))


def config_ops(wanted: Mapping[str, str], current: Mapping[str, ConfigEntry], exclude: str) -> dict[str, str | None]:
    """Incremental changes making the target's topic configs ``wanted``: name -> value to SET, or
    None to DELETE (a target override, ``DYNAMIC_TOPIC_CONFIG``, the source no longer has). Names
    matched by ``exclude`` are never touched."""
    def excluded(name: str) -> bool:
        return bool(exclude) and patterns.fullmatch(exclude, name)

    ops: dict[str, str | None] = {}
    for name, value in sorted(wanted.items()):
        held = current.get(name)
        if not excluded(name) and (held is None or held.value != value):
            ops[name] = value
    for name, held in sorted(current.items()):
        if name not in wanted and _source(held) == ConfigSource.DYNAMIC_TOPIC_CONFIG and not excluded(name):
            ops[name] = None
    return ops


def local_topic_name(name: str) -> str:
    """A source topic name as a Kafka cluster names it: a Pulsar ``persistent://t/ns/x`` (or ``t/ns/x``)
    is ``x``; Kafka and RocketMQ names are kept."""
    return name.rsplit("/", 1)[-1]
