"""Loop-proof replication: the source-origin chain every replicated record carries, and topic naming.

RIP-45 marks a replicated RocketMQ message with the system property ``ROCKETMQ_REPLICATOR_SOURCE``
(where it was born) so it is never replicated back. Here that property (name configurable; a Kafka
header, a Pulsar property or a RocketMQ user property - the connectors carry headers across
brokers) holds the *ordered chain* of cluster aliases the record was born in and copied through,
comma-separated: a record born in ``A`` and copied A -> B reads ``A`` in B; copied on B -> C it
reads ``A,B`` in C. A replication flow ``S -> T`` then:

- drops a record whose chain already holds ``T`` (it came from there: writing it would loop),
  or whose chain is ``max.hops`` long already (``replication.max.hops``; 1 = copy only records
  born in ``S``, which a full mesh needs so a record does not arrive twice by two paths);
- appends ``S`` to the chain of every record it writes.

Dropped records are counted (``filtered``) and their offsets advance like any other's. Where the
worker knows the other flows of the group, a record also takes one path only (``connect.tasks.topology``).

The work is done by the replication stages of the pair's chain (``connect.tasks.replication``:
origin filter, hop limit, one path, origin append, topic naming); :class:`OriginChain` runs them
as one unit, for callers that need the flow's naming or want to apply it outside a runner.

Topic naming (``replication.policy``): ``identity`` keeps the name, ``prefix`` writes
``{source alias}{separator}{topic}`` (MirrorMaker 2's default). With ``prefix`` a second guard
applies, by name as in MM2: a topic one of whose prefixes is ``T`` came from ``T`` and is not
copied back. Across brokers a topic is named by its local name: ``persistent://t/ns/orders`` is
``orders`` to a Kafka or RocketMQ sink (a Pulsar sink completes it with its own template).

Aliases may not hold the chain's separator ``,`` (checked when the config is validated).
"""

from __future__ import annotations

from typing import Sequence

from connect.records import ConnectRecord
from connect.tasks.replication import DEFAULT_ORIGIN_PROPERTY, TopicNaming, chain_of, local_topic_name, replication_stages
from connect.tasks.topology import Topology

__all__ = ["OriginChain", "DEFAULT_ORIGIN_PROPERTY", "chain_of", "local_topic_name"]


class OriginChain:
    """The replication stages of the flow ``source_alias -> target_alias`` as one unit."""

    def __init__(self, source_alias: str, target_alias: str, *, prop: str = DEFAULT_ORIGIN_PROPERTY,
                 max_hops: int = 0, policy: str = "identity", separator: str = ".",
                 topology: Topology | None = None):
        self.stages = replication_stages(source_alias, target_alias, prop=prop, max_hops=max_hops, policy=policy,
                                         separator=separator, topology=topology)
        self.source = source_alias
        self.target = target_alias
        self.prop = prop
        self.max_hops = max_hops
        self.naming: TopicNaming = self.stages[-1]

    @classmethod
    def for_policy(cls, policy) -> OriginChain | None:
        """The chain a pair with ``policy`` (a :class:`~connect.tasks.policy.RunnerPolicy`) applies;
        None when it is no replication flow (its topics keep their names)."""
        if not (policy.source_alias and policy.target_alias):
            return None
        return cls(policy.source_alias, policy.target_alias, prop=policy.origin_property, max_hops=policy.max_hops,
                   policy=policy.topic_policy, separator=policy.policy_separator,
                   topology=getattr(policy, "topology", None))

    def target_topic(self, topic: str) -> str | None:
        """The name the sink receives records of ``topic`` under; None when none are written (a
        topic whose name says it came from the target)."""
        return self.naming.target_topic(topic)

    def apply(self, batch: Sequence[ConnectRecord]) -> tuple[list[ConnectRecord], int]:
        """The records to write (chain extended, topic renamed) and how many were dropped."""
        out = list(batch)
        for stage in self.stages:
            if not out:
                break
            out = stage.apply(out, [])
        return out, len(batch) - len(out)
