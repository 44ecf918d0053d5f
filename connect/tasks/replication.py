"""The replication stages of a flow ``S -> T``: built-in stages of the pair's chain (``connect.tasks.stages``).

Configured by the replication keys (``source/sink.cluster.alias``, ``replication.*``), they run
first, before the converters and the user's transforms (as MirrorMaker 2 renames topics in
``MirrorSourceTask`` before any SMT), each owning one concern:

1. :class:`OriginFilter` - drops a record whose origin chain holds ``T`` (it came from there);
2. :class:`HopLimit` - drops a record that went through ``replication.max.hops`` copies already;
3. :class:`OnePath` - drops a record another flow of the group delivers to ``T``
   (``connect.tasks.topology``; only when the worker gave the flow its topology);
4. :class:`OriginAppend` - appends ``S`` to the chain of every record it passes on;
5. :class:`TopicNaming` - names the target topic (identity or prefix) and drops a topic whose
   prefixes say it came from ``T`` (the prefix policy's cycle guard, by name as in MM2).

A dropped record is counted ``filtered`` and its offset advances. The stages are batch-level and
read each record's headers once: the filter reads the chains of a batch and the stages after it
reuse them (:class:`_Chains`, keyed by the batch list they were read from) until the append.
"""

from __future__ import annotations

from typing import Any, Sequence

from connect.records import ConnectRecord, make_record
from connect.tasks.topology import Topology

__all__ = ["FlowRules", "OriginFilter", "HopLimit", "OnePath", "OriginAppend", "TopicNaming", "replication_stages",
           "DEFAULT_ORIGIN_PROPERTY", "GAPS_HEADER", "open_gaps_of", "marked_gaps", "chain_of", "read_chain",
           "local_topic_name"]

DEFAULT_ORIGIN_PROPERTY = "ROCKETMQ_REPLICATOR_SOURCE"
# On a record a replication flow copied while it had open source gaps (records its source dropped
# before they were copied, not acknowledged yet: connect.source.gaps): how many, summed over the flows
# it went through. A heartbeat monitor reports a link whose newest heartbeat carries it as unhealthy.
GAPS_HEADER = "CONNECT_OPEN_SOURCE_GAPS"
_NONE: tuple[str, ...] = ()


def local_topic_name(topic: str) -> str:
    """``orders`` for ``persistent://public/default/orders``; other names unchanged."""
    return topic.rsplit("/", 1)[-1] if "://" in topic else topic


def read_chain(headers, prop: str = DEFAULT_ORIGIN_PROPERTY) -> tuple[str, ...]:
    """The origin chain ``headers`` carry (the last ``prop`` header wins); () if none."""
    value = None
    for name, v in headers or ():
        if name == prop:
            value = v
    if not value:
        return _NONE
    text = value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else str(value)
    return tuple(a for a in (s.strip() for s in text.split(",")) if a)


def chain_of(headers, prop: str = DEFAULT_ORIGIN_PROPERTY) -> list[str]:
    """:func:`read_chain` as a list."""
    return list(read_chain(headers, prop))


class FlowRules:
    """The decisions of the flow ``source -> target`` about one record, by its origin chain and
    topic, in one place: the record stages each ask the one they own, the native fused step
    (:mod:`connect.tasks.fused`) asks :meth:`keeps` and :meth:`stamped` (the topic's target name is
    :class:`TopicNaming`'s)."""

    def __init__(self, source: str, target: str, *, prop: str = DEFAULT_ORIGIN_PROPERTY, max_hops: int = 0,
                 topology: Topology | None = None):
        self.source = source
        self.target = target
        self.prop = prop
        self.max_hops = max_hops
        self.topology = topology
        self._forwards: dict[tuple[str, str], bool] = {}  # (origin, topic) -> forwards
        self._values: dict[tuple[str, ...], bytes] = {}  # chain read -> header value written
        # open source gaps of this flow, as the worker last said (connect.source.gaps): while > 0 the
        # records it writes carry them (GAPS_HEADER), so a heartbeat monitor downstream sees the link unhealthy
        self.open_gaps = 0

    def loops(self, chain: tuple[str, ...]) -> bool:
        """The chain holds the target: writing the record there would loop."""
        return self.target in chain

    def too_far(self, chain: tuple[str, ...]) -> bool:
        """The record went through ``max_hops`` copies already (``replication.max.hops``; 0: no limit)."""
        return bool(self.max_hops) and len(chain) >= self.max_hops

    def forwards(self, chain: tuple[str, ...], topic: str) -> bool:
        """No other flow of the topology delivers this record to the target (always, without one)."""
        if self.topology is None:
            return True
        key = (chain[0] if chain else self.source, topic)
        forwards = self._forwards.get(key)
        if forwards is None:
            forwards = self.topology.forwards(self.source, self.target, key[0], local_topic_name(topic))
            if len(self._forwards) < 100_000:
                self._forwards[key] = forwards
        return forwards

    def keeps(self, chain: tuple[str, ...], topic: str) -> bool:
        """Whether a record of ``topic`` with ``chain`` is passed on (before topic naming)."""
        return not self.loops(chain) and not self.too_far(chain) and self.forwards(chain, topic)

    def chain_value(self, chain: tuple[str, ...]) -> bytes:
        """The chain header's value after this flow: ``chain`` and the source."""
        value = self._values.get(chain)
        if value is None:
            value = ",".join((*chain, self.source)).encode()
            if len(self._values) < 10_000:
                self._values[chain] = value
        return value

    def stamped(self, headers: list | None, chain: tuple[str, ...]) -> list:
        """``headers`` with the chain header replaced by :meth:`chain_value` (others kept, in order)."""
        prop = self.prop
        kept = [h for h in headers if h[0] != prop] if headers else []
        kept.append((prop, self.chain_value(chain)))
        if self.open_gaps:
            return marked_gaps(kept, self.open_gaps)
        return kept


def open_gaps_of(headers) -> int:
    """The open source gaps the flows a record went through had when they copied it (:data:`GAPS_HEADER`)."""
    value = None
    for name, v in headers or ():
        if name == GAPS_HEADER:
            value = v
    try:
        return max(int(value.decode() if isinstance(value, (bytes, bytearray)) else value), 0) if value else 0
    except (ValueError, UnicodeDecodeError):
        return 0


def marked_gaps(headers: list, gaps: int) -> list:
    """``headers`` with :data:`GAPS_HEADER` holding ``gaps`` more than the flows before this one said."""
    total = gaps + open_gaps_of(headers)
    kept = [h for h in headers if h[0] != GAPS_HEADER]
    kept.append((GAPS_HEADER, str(total).encode()))
    return kept


class _Chains:
    """The origin chains of the batch the replication stages hand on, read once per record."""

    __slots__ = ("prop", "batch", "chains")

    def __init__(self, prop: str):
        self.prop = prop
        self.batch: list | None = None
        self.chains: list[tuple[str, ...]] = []

    def read(self, batch: list[ConnectRecord]) -> list[tuple[str, ...]]:
        prop = self.prop
        self.batch = batch
        self.chains = [read_chain(r.headers, prop) if r.headers else _NONE for r in batch]
        return self.chains

    def of(self, batch: list[ConnectRecord]) -> list[tuple[str, ...]]:
        """The chains of ``batch``: those handed on with it, else read now."""
        return self.chains if batch is self.batch else self.read(batch)

    def keep(self, batch: list[ConnectRecord], chains: list[tuple[str, ...]]) -> list[ConnectRecord]:
        self.batch, self.chains = batch, chains
        return batch

    def clear(self) -> None:
        self.batch, self.chains = None, []


class _ChainStage:
    """A stage that keeps or drops each record by its chain (``keeps``)."""

    name = "replication"

    def __init__(self, chains: _Chains):
        self.chains = chains

    def keeps(self, record: ConnectRecord, chain: tuple[str, ...]) -> bool:
        raise NotImplementedError

    def apply(self, batch: list[ConnectRecord], failures: list) -> list[ConnectRecord]:
        return self._filter(batch, self.chains.of(batch))

    def _filter(self, batch: list[ConnectRecord], chains: list[tuple[str, ...]]) -> list[ConnectRecord]:
        keeps = self.keeps
        flags = [keeps(r, c) for r, c in zip(batch, chains, strict=True)]
        if all(flags):
            return self.chains.keep(batch, chains)
        return self.chains.keep([r for r, k in zip(batch, flags, strict=True) if k],
                                [c for c, k in zip(chains, flags, strict=True) if k])

    def close(self) -> None:
        self.chains.clear()


class OriginFilter(_ChainStage):
    """Drops a record whose chain holds the target: writing it there would loop. Reads the chains."""

    name = "origin filter"

    def __init__(self, chains: _Chains, target: str, rules: FlowRules | None = None):
        super().__init__(chains)
        self.rules = rules or FlowRules("", target, prop=chains.prop)
        self.target = self.rules.target

    def apply(self, batch: list[ConnectRecord], failures: list) -> list[ConnectRecord]:
        chains = self.chains.read(batch)  # first of the stages: a batch is read afresh
        target = self.target
        if not any(target in c for c in chains):  # the usual case: one pass, nothing copied
            return self.chains.keep(batch, chains)
        return self._filter(batch, chains)

    def keeps(self, record: ConnectRecord, chain: tuple[str, ...]) -> bool:
        return not self.rules.loops(chain)


class HopLimit(_ChainStage):
    """Drops a record that went through ``max_hops`` copies already (``replication.max.hops``)."""

    name = "hop limit"

    def __init__(self, chains: _Chains, max_hops: int, rules: FlowRules | None = None):
        super().__init__(chains)
        self.rules = rules or FlowRules("", "", prop=chains.prop, max_hops=max_hops)

    def keeps(self, record: ConnectRecord, chain: tuple[str, ...]) -> bool:
        return not self.rules.too_far(chain)


class OnePath(_ChainStage):
    """Drops a record that another flow of the worker's topology delivers to the target."""

    name = "one path"

    def __init__(self, chains: _Chains, topology: Topology, source: str, target: str, rules: FlowRules | None = None):
        super().__init__(chains)
        self.rules = rules or FlowRules(source, target, prop=chains.prop, topology=topology)

    def keeps(self, record: ConnectRecord, chain: tuple[str, ...]) -> bool:
        return self.rules.forwards(chain, record.topic)


class OriginAppend:
    """Appends the source alias to the chain of every record (replacing the chain header, other
    headers kept in order)."""

    name = "origin append"

    def __init__(self, chains: _Chains, source: str, rules: FlowRules | None = None):
        self.chains = chains
        self.rules = rules or FlowRules(source, "", prop=chains.prop)
        self.source = self.rules.source

    def apply(self, batch: list[ConnectRecord], failures: list) -> list[ConnectRecord]:
        chains = self.chains.of(batch)
        self.chains.clear()
        stamped = self.rules.stamped
        out = []
        append = out.append
        for r, chain in zip(batch, chains, strict=True):
            append(make_record(r.topic, r.key, r.value, stamped(r.headers, chain), r.timestamp, r.source_partition,
                               r.source_offset, r.partition, r.value_schema))
        return out

    def close(self) -> None:
        self.chains.clear()


class TopicNaming:
    """The target topic of each record (``replication.policy``): identity keeps the local name,
    prefix writes ``{source}{separator}{topic}`` and drops a topic one of whose prefixes is the
    target (it came from there)."""

    name = "topic naming"

    def __init__(self, source: str, target: str, policy: str = "identity", separator: str = "."):
        self.source = source
        self.target = target
        self.prefix = policy == "prefix"
        self.separator = separator
        self._names: dict[str, str | None] = {}  # source topic -> target topic (None: a cycle by name)

    def target_topic(self, topic: str) -> str | None:
        """The name the sink receives records of ``topic`` under; None when none are written."""
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

    def apply(self, batch: list[ConnectRecord], failures: list) -> list[ConnectRecord]:
        names = {t: self.target_topic(t) for t in {r.topic for r in batch}}
        if all(t == n for t, n in names.items()):  # identity names of a Kafka or RocketMQ source
            return batch
        out = []
        for r in batch:
            name = names[r.topic]
            if name is None:
                continue
            out.append(r if name == r.topic else make_record(
                name, r.key, r.value, r.headers, r.timestamp, r.source_partition, r.source_offset, r.partition,
                r.value_schema))
        return out

    def close(self) -> None:
        pass


def replication_stages(source: str, target: str, *, prop: str = DEFAULT_ORIGIN_PROPERTY, max_hops: int = 0,
                       policy: str = "identity", separator: str = ".",
                       topology: Topology | None = None) -> Sequence[Any]:
    """The stages of the flow ``source -> target``, in order (see the module doc)."""
    if not source or not target:
        raise ValueError("both cluster aliases are needed")
    if source == target:
        raise ValueError(f"source and target cluster aliases are both {source!r}")
    chains = _Chains(prop)
    rules = FlowRules(source, target, prop=prop, max_hops=max_hops, topology=topology)
    stages: list[Any] = [OriginFilter(chains, target, rules)]
    if max_hops:
        stages.append(HopLimit(chains, max_hops, rules))
    if topology is not None:
        stages.append(OnePath(chains, topology, source, target, rules))
    stages.append(OriginAppend(chains, source, rules))
    stages.append(TopicNaming(source, target, policy, separator))
    return stages
