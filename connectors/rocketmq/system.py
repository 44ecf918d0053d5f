"""RocketMQ's own topics, and when a ``topics.regex`` reads one (the source and the config sync
share these rules).

A catch-all regex (``.*``, ``.*heartbeat``) must never drag the broker's internals into a
replication flow, yet RIP-45's replicator keeps its own topics under the same ``rmq_sys_`` prefix as
the broker (``rmq_sys_replicator_heartbeat``), and a DR mirror has to carry that one. So a topic of a
system *family* (``rmq_sys_*``, ``RMQ_SYS_*``, retry, dead-letter and light queues) is read when the
regex spells out its prefix: it matches the name but not the name with the prefix cut off
(``orders.*|rmq_sys_replicator_heartbeat`` reads the heartbeat topic, ``.*`` does not). The broker's
fixed topics (``TBW102``...) and the topics named after a cluster or broker are never read by a
regex; name them in ``topics`` if they are really wanted.
"""

from __future__ import annotations

from typing import Any, Mapping

from connect.patterns import JavaPattern

__all__ = ["SYSTEM_TOPICS", "SYSTEM_PREFIXES", "created_by_sends_only", "is_system_topic", "reserved_names",
           "regex_selects"]

# TopicValidator.SYSTEM_TOPIC_SET (4.9.x / 5.x) and the prefixes of RocketMQ's own topics.
SYSTEM_TOPICS = frozenset({"TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
                           "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
                           "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"})
SYSTEM_PREFIXES = ("rmq_sys_", "RMQ_SYS_", "%RETRY%", "%DLQ%", "%LMQ%")


def is_system_topic(name: str, reserved: frozenset[str] | set[str] = frozenset()) -> bool:
    """A topic RocketMQ itself uses: the system set, ``rmq_sys_*``/``RMQ_SYS_*``, retry, dead-letter
    and light queues, and the topics named after a cluster or broker (``reserved``: each broker
    creates one per cluster and broker name, and ``<cluster>_REPLY_TOPIC``)."""
    if name in SYSTEM_TOPICS or name.startswith(SYSTEM_PREFIXES) or name in reserved:
        return True
    return name.endswith("_REPLY_TOPIC") and name[:-len("_REPLY_TOPIC")] in reserved


def created_by_sends_only(name: str) -> bool:
    """A topic Apache RocketMQ 5.x refuses to create by UPDATE_AND_CREATE_TOPIC ("conflict with
    system topic": ``TopicValidator.isSystemTopic``, the fixed set and ``rmq_sys_*``) but creates
    from TBW102 on its first send, as RIP-45's replicator relies on for ``rmq_sys_replicator_*``."""
    return name in SYSTEM_TOPICS or name.startswith("rmq_sys_")


def reserved_names(brokers: Mapping[str, Any]) -> set[str]:
    """Broker and cluster names of a cluster info answer (broker name -> ``client.BrokerData``)."""
    return set(brokers) | {b.cluster for b in brokers.values() if b.cluster}


def regex_selects(pattern: JavaPattern, name: str, reserved: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether ``topics.regex`` reads ``name`` (see the module's rules)."""
    if not pattern.fullmatch(name):
        return False
    if not is_system_topic(name, reserved):
        return True
    prefix = next((p for p in SYSTEM_PREFIXES if name.startswith(p)), None)
    if prefix is None or name in SYSTEM_TOPICS or name in reserved:
        return False
    return not pattern.fullmatch(name[len(prefix):])
