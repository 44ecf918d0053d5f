"""The replication topology a worker knows, and the one path a record takes through it.

A worker that runs several flows of one replication group (identity topic names, the same origin
property, no hop limit) knows where each record will go. In a full mesh of A, B and C a record
born in A reaches C directly (A -> C) and through B (A -> B -> C): the origin chain stops loops
(``connect.tasks.origin``), not a second path. So each flow is given the :class:`Topology` of its
group, and a record takes one path only:

- the record's *origin* ``O`` is the first alias of its chain (where it was born), or the flow's
  source when the chain is empty;
- over the flows that replicate the record's topic, a deterministic shortest-path tree is grown
  from ``O`` (breadth first; a node reached from several nodes of the same depth takes the
  smallest alias as its parent);
- the flow ``S -> T`` forwards the record only if ``S`` is ``T``'s parent in that tree.

Every node of the tree is reached once, through its parent, and every parent flow forwards, so
nothing is lost and nothing arrives twice - as long as each edge delivers every record of its
topics unchanged in name: only such flows are edges (``Flow.edge``; the worker decides which,
``worker.replication.topology``), the others take part only as a flow that leaves records to the edges (its own
edge, ``also``, counts for its own decision: it is sure it carries what it forwards). Where the
worker is unsure it forwards (a duplicate is better than a loss): when ``T`` is not reached from
``O`` over the known edges (an origin the worker does not know, a flow it does not run), and for
flows that are no edge (a topic pattern, transforms, ``errors.tolerance=all``...) - the flows
around them keep delivering.

Rings keep working: in A -> B -> C -> A the tree from A is A -> B -> C, which is the ring itself.
"""

from __future__ import annotations

from typing import Iterable

import attrs

__all__ = ["Flow", "Topology"]


@attrs.frozen
class Flow:
    """One replication flow: source alias, target alias, and the (local) topic names it replicates;
    ``topics`` None when they cannot be named (a pattern). ``edge`` False when it may not deliver
    every record of them unchanged in name (a transform, ``errors.tolerance=all``...). A flow with
    no topics or no edge covers no topic for others: none leaves a record to it."""

    source: str
    target: str
    topics: frozenset[str] | None = None
    edge: bool = True

    def covers(self, topic: str) -> bool:
        return self.edge and self.topics is not None and topic in self.topics


@attrs.frozen
class Topology:
    """The flows of a replication group (sorted, so equal topologies compare and hash equal)."""

    flows: tuple[Flow, ...] = attrs.field(converter=lambda fs: tuple(sorted(
        fs, key=lambda f: (f.source, f.target, sorted(f.topics) if f.topics is not None else [], f.edge))))

    def parents(self, origin: str, topic: str, also: Iterable[tuple[str, str]] = ()) -> dict[str, str]:
        """Each node's parent in the shortest-path tree from ``origin`` over the edges covering
        ``topic`` (plus the edges ``also``: a flow is sure it carries its own records)."""
        out: dict[str, set[str]] = {}
        for f in self.flows:
            if f.covers(topic):
                out.setdefault(f.source, set()).add(f.target)
        for source, target in also:
            out.setdefault(source, set()).add(target)
        parent: dict[str, str] = {}
        seen = {origin}
        layer = [origin]
        while layer:
            reached: dict[str, str] = {}
            for node in sorted(layer):  # sorted: the smallest alias of the layer wins a tie
                for nxt in out.get(node, ()):
                    if nxt not in seen and nxt not in reached:
                        reached[nxt] = node
            parent.update(reached)
            seen.update(reached)
            layer = list(reached)
        return parent

    def forwards(self, source: str, target: str, origin: str, topic: str) -> bool:
        """Whether the flow ``source -> target`` carries a record of ``topic`` born in ``origin``:
        ``source`` is ``target``'s parent, or ``target`` is not reached from ``origin`` at all."""
        parent = self.parents(origin, topic, [(source, target)]).get(target)
        return parent is None or parent == source
