"""The replication topology of the connectors a worker runs (``connect.tasks.topology``).

A worker holds every connector config (the herder's stores, or ``connect run``'s files), so it
knows the flows of each replication group: connectors with both cluster aliases, identity topic
names and no hop limit, grouped by their origin property. Each such flow gets the
:class:`~connect.tasks.topology.Topology` of the flows that matter to it - those of its group
whose named topics meet its own (all named ones when it cannot name its own) - so that a record
takes one path through the group (a full mesh delivers once without ``replication.max.hops``).

A flow with a hop limit or the prefix policy keeps its own rules and is no edge of anyone's
tree (with the prefix policy every path writes another topic: nothing arrives twice); a flow
whose source cannot name its topics (a pattern) is no edge either: the flows around it keep
delivering (a duplicate rather than a loss). A flow's topology is part of its pairs' generation,
so a change of the group (a flow created, changed or deleted) restarts the pairs it concerns,
from their committed offsets.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import attrs

from connect.tasks.replication import local_topic_name
from connect.tasks.topology import Flow, Topology
from worker.pipeline import SIDE_CONFIG, PipelineConfig

__all__ = ["flow_of", "topologies", "with_topology", "with_topologies"]


def flow_of(pipeline: PipelineConfig) -> tuple[str, Flow] | None:
    """(group, flow) of a connector that is an identity replication flow without hop limit, else None."""
    runner = pipeline.settings.runner
    if not (runner.source_alias and runner.target_alias) or runner.topic_policy != "identity" or runner.max_hops:
        return None
    own = {k: v for k, v in pipeline.source_config.items() if k not in SIDE_CONFIG}
    try:
        named = pipeline.source_class.named_topics(own)
    except Exception:  # noqa: BLE001 - a source that cannot say names no topics: it covers none for others
        named = None
    topics = frozenset(local_topic_name(t) for t in named) if named else None
    return runner.origin_property, Flow(runner.source_alias, runner.target_alias, topics)


def topologies(flows: Mapping[str, tuple[str, Flow] | None]) -> dict[str, Topology | None]:
    """Per connector name (``flows``: what :func:`flow_of` said of each), the topology its flow
    takes one path through; None when it has none (no other flow of its group meets its topics)."""
    known = {name: found for name, found in flows.items() if found is not None}
    out: dict[str, Topology | None] = {}
    for name, (group, own) in known.items():
        related = [f for n, (g, f) in known.items() if n != name and g == group and f.topics is not None
                   and (own.topics is None or own.topics & f.topics)]
        out[name] = Topology((own, *related)) if related else None
    return out


def with_topology(pipeline: PipelineConfig, topology: Topology | None) -> PipelineConfig:
    """``pipeline`` whose pairs take one path through ``topology``."""
    if pipeline.settings.runner.topology == topology:
        return pipeline
    runner = attrs.evolve(pipeline.settings.runner, topology=topology)
    return attrs.evolve(pipeline, settings=attrs.evolve(pipeline.settings, runner=runner))


def with_topologies(pipelines: Iterable[PipelineConfig]) -> list[PipelineConfig]:
    """``pipelines`` (all a worker runs), each with the topology of its flow."""
    pipelines = list(pipelines)
    tops = topologies({p.name: flow_of(p) for p in pipelines})
    return [with_topology(p, tops.get(p.name)) for p in pipelines]
