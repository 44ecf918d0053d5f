"""The replication stages as one step over native batches (:class:`~connect.batch.NativeBatch`).

The decisions of the record stages of ``connect.tasks.replication``, asked of the same
:class:`~connect.tasks.replication.FlowRules` (origin filter, hop limit, one path, origin append)
and :class:`~connect.tasks.replication.TopicNaming`, taken once per distinct
``(topic, headers)``: the outcome of a record depends on nothing else, so records without headers
share one outcome per topic, and records carrying the same origin chain share one computed
result (the new header list, the target topic). The outcome is written as the batch's overlays
(:meth:`NativeBatch.with_overlays`): the messages themselves are not touched.

The cache holds at most ``_CACHE_MAX`` outcomes: records whose headers are all different (a
trace id per record) are decided one by one past that, at the record stages' cost.
"""

from __future__ import annotations

from connect.batch import NativeBatch
from connect.tasks.replication import FlowRules, TopicNaming, read_chain
from connect.tasks.topology import Topology

__all__ = ["FusedReplication"]

_CACHE_MAX = 4096
_DROP = None
_MISS: list = []  # not decided yet (no outcome is this object)


class FusedReplication:
    """``apply(batch) -> (batch, dropped)`` for the flow ``source -> target``."""

    name = "replication"

    def __init__(self, source: str, target: str, *, prop: str, max_hops: int = 0, policy: str = "identity",
                 separator: str = ".", topology: Topology | None = None):
        self.source = source
        self.target = target
        self.prop = prop
        self.max_hops = max_hops
        self.topology = topology
        self.rules = FlowRules(source, target, prop=prop, max_hops=max_hops, topology=topology)
        self.naming = TopicNaming(source, target, policy, separator)
        self._cache: dict[str, dict[tuple | None, list | None]] = {}  # topic -> headers -> outcome

    def mark_open_gaps(self, gaps: int) -> None:
        """The flow's open source gaps (:attr:`FlowRules.open_gaps`); the outcomes decided before go."""
        if gaps != self.rules.open_gaps:
            self.rules.open_gaps = gaps
            self._cache.clear()

    def decide(self, topic: str, headers: list | None) -> list | None:
        """None (dropped), or the headers to write for a record of ``topic`` with ``headers``
        (its target topic is ``naming.target_topic(topic)``: the topic alone says it)."""
        chain = read_chain(headers, self.prop) if headers else ()
        if not self.rules.keeps(chain, topic) or self.naming.target_topic(topic) is None:
            return _DROP
        return self.rules.stamped(headers, chain)

    def _outcomes(self, topic: str, headers: list) -> list:
        """The outcome (:meth:`decide`) of each of ``headers``, all of records of ``topic``."""
        cache = self._cache.get(topic)
        if cache is None:
            cache = self._cache[topic] = {}
        miss = _MISS
        outs = [cache.get(tuple(h) if h else None, miss) for h in headers]
        if miss in outs:
            decide = self.decide
            for i, out in enumerate(outs):
                if out is miss:
                    h = headers[i]
                    key = tuple(h) if h else None
                    out = cache.get(key, miss)
                    if out is miss:
                        out = decide(topic, h)
                        if len(cache) < _CACHE_MAX:
                            cache[key] = out
                    outs[i] = out
        return outs

    def apply(self, batch: NativeBatch) -> tuple[NativeBatch, int]:
        items, codec = batch.items, batch.codec
        headers = list(map(codec.header_getter, items))
        single = batch.topic
        if single is not None:  # one source topic: one target name, no topic overlay
            heads = self._outcomes(single, headers)
            names = None
            topic = self.naming.target_topic(single)
        else:
            topics = list(map(codec.topic_getter, items))
            heads = [None] * len(items)
            for t in set(topics):
                where = [i for i, x in enumerate(topics) if x == t]
                for i, out in zip(where, self._outcomes(t, [headers[i] for i in where]), strict=True):
                    heads[i] = out
            named = {t: self.naming.target_topic(t) for t in set(topics)}
            names = list(map(named.__getitem__, topics))
            topic = None
        n = len(items)
        if None in heads:  # some dropped: keep the others, in order
            keep = [i for i, h in enumerate(heads) if h is not None]
            items = [items[i] for i in keep]
            heads = [heads[i] for i in keep]
            names = None if names is None else [names[i] for i in keep]
        return NativeBatch(batch.kind, items, codec, batch.last, topic, names, heads), n - len(items)

    def close(self) -> None:
        self._cache.clear()
