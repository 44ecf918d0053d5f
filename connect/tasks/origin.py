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

Dropped records are counted (``filtered``) and their offsets advance like any other's.

Topic naming (``replication.policy``): ``identity`` keeps the name, ``prefix`` writes
``{source alias}{separator}{topic}`` (MirrorMaker 2's default). With ``prefix`` a second guard
applies, by name as in MM2: a topic one of whose prefixes is ``T`` came from ``T`` and is not
copied back. Across brokers a topic is named by its local name: ``persistent://t/ns/orders`` is
``orders`` to a Kafka or RocketMQ sink (a Pulsar sink completes it with its own template).

Aliases may not hold the chain's separator ``,`` (checked when the config is validated).
"""

from __future__ import annotations

from typing import Sequence

from connect.records import ConnectRecord, make_record

__all__ = ["OriginChain", "OriginStage", "DEFAULT_ORIGIN_PROPERTY", "chain_of", "local_topic_name"]

DEFAULT_ORIGIN_PROPERTY = "ROCKETMQ_REPLICATOR_SOURCE"


def local_topic_name(topic: str) -> str:
    """``orders`` for ``persistent://public/default/orders``; other names unchanged."""
    return topic.rsplit("/", 1)[-1] if "://" in topic else topic


def chain_of(headers, prop: str = DEFAULT_ORIGIN_PROPERTY) -> list[str]:
    """The origin chain a record's headers carry (the last ``prop`` header wins); [] if none."""
    value = None
    for name, v in headers or ():
        if name == prop:
            value = v
    if not value:
        return []
    text = value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else str(value)
    return [a for a in (s.strip() for s in text.split(",")) if a]


class OriginChain:
    def __init__(self, source_alias: str, target_alias: str, *, prop: str = DEFAULT_ORIGIN_PROPERTY,
                 max_hops: int = 0, policy: str = "identity", separator: str = "."):
        if not source_alias or not target_alias:
            raise ValueError("both cluster aliases are needed")
        if source_alias == target_alias:
            raise ValueError(f"source and target cluster aliases are both {source_alias!r}")
        self.source = source_alias
        self.target = target_alias
        self.prop = prop
        self.max_hops = max_hops
        self.prefix = policy == "prefix"
        self.separator = separator
        self._names: dict[str, str | None] = {}  # source topic -> target topic (None: a cycle by name)

    @classmethod
    def for_policy(cls, policy) -> OriginChain | None:
        """The chain a pair with ``policy`` (a :class:`~connect.tasks.policy.RunnerPolicy`) applies;
        None when it is no replication flow (its topics keep their names)."""
        if not (policy.source_alias and policy.target_alias):
            return None
        return cls(policy.source_alias, policy.target_alias, prop=policy.origin_property, max_hops=policy.max_hops,
                   policy=policy.topic_policy, separator=policy.policy_separator)

    def target_topic(self, topic: str) -> str | None:
        """The name the sink receives records of ``topic`` under; None when none are written (a
        topic whose name says it came from the target)."""
        name = self._names.get(topic, "")
        if name != "":
            return name
        local = local_topic_name(topic)
        if self.prefix:
            upstream = local.split(self.separator)[:-1]
            name = None if self.target in upstream else f"{self.source}{self.separator}{local}"
        else:
            name = local
        if len(self._names) < 100_000:
            self._names[topic] = name
        return name

    def apply(self, batch: Sequence[ConnectRecord]) -> tuple[list[ConnectRecord], int]:
        """The records to write (chain extended, topic renamed) and how many were dropped."""
        out = []
        append = out.append
        prop, target, source, max_hops = self.prop, self.target, self.source, self.max_hops
        dropped = 0
        for r in batch:
            headers = r.headers
            chain = chain_of(headers, prop) if headers else []
            if target in chain or (max_hops and len(chain) >= max_hops):
                dropped += 1
                continue
            topic = self.target_topic(r.topic)
            if topic is None:
                dropped += 1
                continue
            kept = [h for h in headers if h[0] != prop] if headers else []
            kept.append((prop, ",".join((*chain, source)).encode()))
            append(make_record(topic, r.key, r.value, kept, r.timestamp, r.source_partition, r.source_offset,
                               r.partition, r.value_schema))
        return out, dropped


class OriginStage:
    """The replication flow's stage (``connect.tasks.stages``): drops what would loop or is too many
    hops away, appends the source alias to the chain and names the target topic."""

    name = "replication"

    def __init__(self, chain: OriginChain):
        self.chain = chain

    @classmethod
    def for_policy(cls, policy) -> OriginStage | None:
        chain = OriginChain.for_policy(policy)
        return None if chain is None else cls(chain)

    def apply(self, batch: list[ConnectRecord], failures: list) -> list[ConnectRecord]:
        return self.chain.apply(batch)[0]

    def close(self) -> None:
        pass
