"""The replication topology of the connectors a worker runs (``connect.tasks.topology``).

A worker holds every connector config (the herder's stores, or ``connect run``'s files), so it
knows the flows of each replication group: connectors with both cluster aliases, identity topic
names and no hop limit, grouped by their origin property. Each such flow gets the
:class:`~connect.tasks.topology.Topology` of the flows that matter to it - the edges of its group
whose named topics meet its own (all named ones when it cannot name its own) - so that a record
takes one path through the group (a full mesh delivers once without ``replication.max.hops``).

A flow leaves a record to another one only when that one is an *edge* (:func:`withholds` says why
a flow is not): it delivers every record of its named topics, under the same name - no
transforms, the sink's own routing the identity (``topic`` unset, ``topic.template`` ``{topic}``,
``topic.illegal.chars=fail``), nothing a failed record can be resolved by but delivering it (no
``errors.tolerance=all``, no dead-letter topic, no failed-record hooks of the source task), and a
source that starts at its ``earliest`` position (one starting later never copies what was there
before it). A flow that is no edge is still given its group's topology: it leaves records to the
edges, which deliver them unchanged - unless the flow itself writes other names than the records'
(a renaming transform, the sink's routing, the prefix policy), as those names get nothing by the
edges: such a flow keeps its own rules (no topology, no edge), as does a flow with a hop limit. A
flow whose source cannot name its topics (a pattern) is no edge either: the flows around it keep
delivering (a duplicate rather than a loss).

A flow's topology is part of its pairs' generation, so a change of the group (an edge created,
changed or deleted) restarts the pairs it concerns, from their committed offsets. A flow that
stops being an edge (deleted, or changed) leaves a gap: the records other flows left to it and it
had not delivered yet (:func:`withdrawal` says whose targets; the herder warns).
"""

from __future__ import annotations

from typing import Iterable, Mapping

import attrs

from connect.source import SourceTask
from connect.tasks.replication import local_topic_name
from connect.tasks.topology import Flow, Topology
from connect.transforms.base import Transformation
from connect.transforms.predicates import Filter
from connect.transforms.topics import topic_routes
from worker.pipeline import SIDE_CONFIG, PipelineConfig

__all__ = ["flow_of", "withholds", "topologies", "with_topology", "with_topologies", "Withdrawal", "withdrawal"]

# The sink keys that name target topics (``connect.sink.routing``, ``connect.sink.naming``), with
# the value under which a record keeps its topic's (local) name.
IDENTITY_ROUTING = {"topic": "", "topic.template": "{topic}", "topic.illegal.chars": "fail"}
_HOOKS = ("dismiss_failed_msgs", "customer_failed_msgs")


def _own(config: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in config.items() if k not in SIDE_CONFIG}


def _named(pipeline: PipelineConfig) -> list[str] | None:
    try:
        return pipeline.source_class.named_topics(_own(pipeline.source_config)) or None
    except Exception:  # noqa: BLE001 - a source that cannot say names no topics: it covers none for others
        return None


def _keeps_names(pipeline: PipelineConfig, named: list[str] | None) -> bool:
    """Whether every record the flow writes keeps its topic's local name: the sink routes by the
    shared keys, left at the identity, and no transform renames (with named topics, as far as
    :func:`~connect.transforms.topics.topic_routes` can tell; with a pattern, no transform that may)."""
    sink_keys = pipeline.sink_class.config_def()
    if "topic.template" not in sink_keys:  # a sink routing by keys of its own: its names are unknown
        return False
    for key, identity in IDENTITY_ROUTING.items():
        if key in sink_keys and (pipeline.sink_config.get(key) or identity) != identity:
            return False
    transforms = pipeline.transforms
    if not transforms.transforms:
        return True
    if named is None:
        return all(issubclass(t.cls, Filter) or (t.cls.keeps_topic and t.cls.topic_for is Transformation.topic_for)
                   for t in transforms.transforms)
    local = [local_topic_name(t) for t in named]
    routes = topic_routes(transforms, local)
    return all(routes[t].unknown is None and set(routes[t].names) <= {t} for t in local)


def withholds(pipeline: PipelineConfig) -> str | None:
    """Why the flow of ``pipeline`` may not deliver some record of its topics unchanged, so that no
    other flow may leave one to it (it is no edge of the topology); None when it delivers them all."""
    runner = pipeline.settings.runner
    if pipeline.transforms.transforms:
        return "it has transforms (they may drop or change records)"
    if not _keeps_names(pipeline, _named(pipeline)):
        return "its sink does not keep topic names (topic, topic.template or topic.illegal.chars)"
    if runner.tolerance_all:
        return "errors.tolerance=all (it may skip a record)"
    if pipeline.settings.dlq_topic:
        return "a dead-letter topic (a record it dead-letters does not reach its topic)"
    task = _task_class(pipeline)
    if task is not None and any(getattr(task, hook) is not getattr(SourceTask, hook) for hook in _HOOKS):
        return "its source task resolves failed records itself (dismiss_failed_msgs / customer_failed_msgs)"
    source_keys = pipeline.source_class.config_def()
    if "start.position" in source_keys:
        start = pipeline.source_config.get("start.position") or source_keys["start.position"].default
        if str(start).lower() != "earliest":
            return f"start.position={start} (it does not copy what its topics held before it started)"
    return None


def _task_class(pipeline: PipelineConfig) -> type | None:
    try:
        return pipeline.source_class.task_class()
    except Exception:  # noqa: BLE001 - a connector that cannot say: its hooks are the base class's, or none
        return None


def flow_of(pipeline: PipelineConfig) -> tuple[str, Flow] | None:
    """(group, flow) of a connector that is an identity replication flow without hop limit and whose
    records keep their topic names, else None (it keeps its own rules). The flow is an edge when
    :func:`withholds` has nothing to say."""
    runner = pipeline.settings.runner
    if not (runner.source_alias and runner.target_alias) or runner.topic_policy != "identity" or runner.max_hops:
        return None
    named = _named(pipeline)
    if not _keeps_names(pipeline, named):  # it writes names no edge fills: it must write every record itself
        return None
    topics = frozenset(local_topic_name(t) for t in named) if named else None
    return runner.origin_property, Flow(runner.source_alias, runner.target_alias, topics,
                                        edge=withholds(pipeline) is None)


def topologies(flows: Mapping[str, tuple[str, Flow] | None]) -> dict[str, Topology | None]:
    """Per connector name (``flows``: what :func:`flow_of` said of each), the topology its flow
    takes one path through; None when it has none (no edge of its group meets its topics)."""
    known = {name: found for name, found in flows.items() if found is not None}
    out: dict[str, Topology | None] = {}
    for name, (group, own) in known.items():
        related = [f for n, (g, f) in known.items() if n != name and g == group and f.edge and f.topics is not None
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


@attrs.frozen
class Withdrawal:
    """What other flows lose when one flow stops being an edge (deleted, or changed): the records
    of ``topics`` that reached ``targets`` through it and that it had not delivered yet, which the
    connectors ``flows`` (writing to those targets) left to it."""

    topics: tuple[str, ...]
    targets: tuple[str, ...]
    flows: tuple[str, ...]


def withdrawal(flows: Mapping[str, tuple[str, Flow] | None], name: str,
               new: tuple[str, Flow] | None = None) -> Withdrawal | None:
    """What connector ``name``'s flow (``flows[name]``, all the worker's flows as :func:`flow_of`
    said) withdraws when it is deleted (``new`` None) or becomes ``new``; None when no other flow
    relied on it for anything it no longer carries as an edge."""
    old = flows.get(name)
    if old is None or not old[1].edge or old[1].topics is None:
        return None
    group, flow = old
    kept: frozenset[str] = frozenset()
    if new is not None and new[0] == group and new[1].edge and new[1].topics is not None \
            and (new[1].source, new[1].target) == (flow.source, flow.target):
        kept = new[1].topics
    gone = flow.topics - kept
    members = {n: found[1] for n, found in flows.items() if found is not None and found[0] == group}
    edges = Topology(members.values())
    nodes = sorted({f.source for f in members.values()} | {f.target for f in members.values()})
    topics: set[str] = set()
    targets: set[str] = set()
    for topic in sorted(gone):
        for origin in nodes:
            parent = edges.parents(origin, topic)
            if parent.get(flow.target) != flow.source:
                continue
            below = {flow.target}  # its target and every cluster the tree reaches through it
            while True:
                more = {child for child, up in parent.items() if up in below} - below
                if not more:
                    break
                below |= more
            topics.add(topic)
            targets |= below
    relying = sorted(n for n, f in members.items() if n != name and f.target in targets
                     and (f.topics is None or f.topics & topics))
    if not relying:
        return None
    return Withdrawal(tuple(sorted(topics)), tuple(sorted(targets)), tuple(relying))
