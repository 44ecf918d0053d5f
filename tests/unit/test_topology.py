"""One path per record through the flows a worker knows (connect.tasks.topology, worker.replication.topology),
and the replication stages that apply it (connect.tasks.replication)."""

from __future__ import annotations

from itertools import permutations

from connect.records import make_record
from connect.tasks.origin import DEFAULT_ORIGIN_PROPERTY as PROP
from connect.tasks.origin import chain_of
from connect.tasks.replication import OnePath, OriginFilter, _Chains, replication_stages
from connect.tasks.stages import StageChain
from connect.tasks.topology import Flow, Topology
from worker.pipeline import parse_pipeline
from worker.replication.topology import Withdrawal, flow_of, topologies, withdrawal, withholds

T = frozenset({"orders"})


def mesh(*edges: str, topics=T) -> Topology:
    return Topology(Flow(e[0], e[1], topics) for e in edges)


def deliveries(topology: Topology, origin: str, topic: str = "orders") -> dict[str, list[str]]:
    """Simulate every flow of ``topology`` on a record born in ``origin``: cluster -> chains it arrives with."""
    at = {origin: [()]}
    pending = [(origin, ())]
    while pending:
        node, chain = pending.pop()
        for f in topology.flows:
            if f.source != node or (f.topics is not None and topic not in f.topics):
                continue
            if f.target in chain or f.target == (chain[0] if chain else node):
                continue
            if not topology.forwards(f.source, f.target, chain[0] if chain else node, topic):
                continue
            new = (*chain, node) if chain else (node,)
            at.setdefault(f.target, []).append(new)
            pending.append((f.target, new))
    return at


def test_a_full_mesh_delivers_once_directly_from_the_origin():
    full = mesh(*("".join(p) for p in permutations("ABC", 2)))
    for origin in "ABC":
        got = deliveries(full, origin)
        assert {k: len(v) for k, v in got.items()} == {"A": 1, "B": 1, "C": 1}
        assert all(chain == (origin,) for node, chains in got.items() if node != origin for chain in chains)


def test_a_ring_still_delivers_everything_once_around_the_ring():
    ring = mesh("AB", "BC", "CA")
    got = deliveries(ring, "A")
    assert got == {"A": [()], "B": [("A",)], "C": [("A", "B")]}


def test_a_partial_mesh_takes_the_shortest_path_with_a_deterministic_tie():
    # A -> B, A -> C, B -> D, C -> D: D is two hops away by B and by C; B (the smaller alias) carries it
    diamond = mesh("AB", "AC", "BD", "CD")
    got = deliveries(diamond, "A")
    assert got["D"] == [("A", "B")] and len(got) == 4
    assert not diamond.forwards("C", "D", "A", "orders") and diamond.forwards("C", "D", "C", "orders")
    # a chain without its direct edge: A -> B -> C, C -> A, plus B -> A
    partial = mesh("AB", "BC", "CA", "BA")
    for origin in "ABC":
        assert {k: len(v) for k, v in deliveries(partial, origin).items()} == {"A": 1, "B": 1, "C": 1}


def test_flows_of_other_topics_or_unnamed_topics_cover_nothing_and_unknown_origins_forward():
    # A -> C replicates payments only: orders born in A reach C through B, whose flow must forward them
    mixed = Topology([Flow("A", "B", T), Flow("B", "C", T), Flow("A", "C", frozenset({"payments"}))])
    assert mixed.forwards("B", "C", "A", "orders") and not mixed.forwards("B", "C", "A", "payments")
    # a pattern flow (topics unknown) is no edge for others: B -> C still forwards (a duplicate, not a loss)
    pattern = Topology([Flow("A", "B", T), Flow("B", "C", T), Flow("A", "C", None)])
    assert pattern.forwards("B", "C", "A", "orders") and pattern.forwards("A", "C", "A", "orders")
    # an origin the worker does not know: forwarded
    assert mesh("AB", "BC", "AC").forwards("B", "C", "X", "orders")


def rec(value: bytes, chain: str | None = None, topic: str = "orders"):
    headers = [("h", b"1")] + ([(PROP, chain.encode())] if chain else [])
    return make_record(topic, b"k", value, headers, 1, {"p": 0}, {"o": 0}, 0)


def test_one_path_stage_drops_what_the_direct_flow_delivers_and_counts_it():
    full = mesh(*("".join(p) for p in permutations("ABC", 2)))
    chain = StageChain(replication_stages("B", "C", topology=full))
    out, dropped, failed = chain.apply([rec(b"born-b"), rec(b"born-a", "A"), rec(b"born-c", "C"), rec(b"a-b", "A,B")])
    assert [r.value for r in out] == [b"born-b"] and dropped == 3 and failed == []
    assert chain_of(out[0].headers) == ["B"] and out[0].headers[0] == ("h", b"1")
    assert [s.name for s in chain.stages] == ["origin filter", "one path", "origin append", "topic naming"]


def test_the_stages_read_each_records_headers_once(monkeypatch):
    import connect.tasks.replication as replication

    reads = []
    real = replication.read_chain
    monkeypatch.setattr(replication, "read_chain", lambda headers, prop: reads.append(1) or real(headers, prop))
    stages = StageChain(replication_stages("B", "C", max_hops=3, topology=mesh("AB", "BC", "AC")))
    out, dropped, _ = stages.apply([rec(b"1"), rec(b"2", "A"), rec(b"3", "D"), rec(b"4", "C")])
    assert len(reads) == 4 and [r.value for r in out] == [b"1", b"3"] and dropped == 2


def test_a_stage_given_another_batch_reads_its_chains_itself():
    chains = _Chains(PROP)
    OriginFilter(chains, "C").apply([rec(b"1", "A")], [])
    path = OnePath(chains, mesh("AB", "BC", "AC"), "B", "C")
    assert path.apply([rec(b"2", "A"), rec(b"3", "D")], []) == [rec(b"3", "D")]


def flow_config(src: str, dst: str, topics: str | None = "orders", **extra) -> dict:
    source = {"source.connector.class": "kafka", "source.bootstrap.servers": "127.0.0.1:1", "source.cluster.alias": src}
    source.update({"source.topics": topics} if topics else {"source.topics.regex": "ord.*"})
    return {"name": f"{src}{dst}", "config": {**source, "sink.connector.class": "kafka",
                                              "sink.bootstrap.servers": "127.0.0.1:2", "sink.cluster.alias": dst, **extra}}


def test_the_worker_groups_identity_flows_without_hop_limit_by_topics():
    pipelines = [parse_pipeline(flow_config(s, t)) for s, t in permutations("ABC", 2)]
    pipelines.append(parse_pipeline({**flow_config("A", "D", "other"), "name": "AD"}))
    pipelines.append(parse_pipeline({**flow_config("D", "A", None), "name": "DA"}))
    pipelines.append(parse_pipeline({**flow_config("B", "D", **{"replication.max.hops": "1"}), "name": "BD"}))
    pipelines.append(parse_pipeline({**flow_config("C", "D", **{"replication.policy": "prefix"}), "name": "CD"}))
    flows = {p.name: flow_of(p) for p in pipelines}
    assert flows["BD"] is None and flows["CD"] is None  # their own rules: no edge of anyone's tree
    assert flows["DA"][1] == Flow("D", "A", None)
    tops = topologies(flows)
    assert {(f.source, f.target) for f in tops["AB"].flows} == set(permutations("ABC", 2))  # not AD (other topic)
    assert tops["AD"] is None  # nothing else replicates "other"
    assert len(tops["DA"].flows) == 8  # its own (pattern) flow and every named one of its group
    assert "BD" not in tops and "BD" not in {f.source + f.target for f in tops["AB"].flows}


# -- which flows are edges: a flow is relied on only when it delivers every record of its topics unchanged in name


def mesh_pipelines(**ac_extra):
    """A full mesh of A, B and C, the flow A -> C configured with ``ac_extra``."""
    out = []
    for s, t in permutations("ABC", 2):
        extra = ac_extra if (s, t) == ("A", "C") else {}
        out.append(parse_pipeline(flow_config(s, t, **extra)))
    return out


def sibling_forwards(**ac_extra) -> bool:
    """Whether B -> C copies a record born in A (what A -> C would deliver, were it an edge)."""
    pipelines = mesh_pipelines(**ac_extra)
    tops = topologies({p.name: flow_of(p) for p in pipelines})
    return tops["BC"].forwards("B", "C", "A", "orders")


FILTER = {"transforms": "drop", "transforms.drop.type": "Filter", "transforms.drop.predicate": "tomb",
          "predicates": "tomb", "predicates.tomb.type": "RecordIsTombstone"}
ROUTER = {"transforms": "route", "transforms.route.type": "RegexRouter", "transforms.route.regex": "orders",
          "transforms.route.replacement": "orders-copy"}


def test_a_plain_identity_flow_is_an_edge_and_its_siblings_leave_records_to_it():
    assert withholds(parse_pipeline(flow_config("A", "C"))) is None
    assert not sibling_forwards()


def test_a_parent_with_a_filter_transform_is_no_edge_so_the_sibling_forwards():
    found = flow_of(parse_pipeline(flow_config("A", "C", **FILTER)))
    assert found is not None and found[1] == Flow("A", "C", T, edge=False)
    assert "transforms" in withholds(parse_pipeline(flow_config("A", "C", **FILTER)))
    assert sibling_forwards(**FILTER)


def test_a_parent_with_a_regex_router_is_no_edge_so_the_sibling_forwards():
    assert flow_of(parse_pipeline(flow_config("A", "C", **ROUTER))) is None  # it writes other names: own rules
    assert sibling_forwards(**ROUTER)
    # a router that leaves the flow's topics alone keeps their names: the flow defers, but is still no edge
    other = {**ROUTER, "transforms.route.regex": "payments"}
    assert flow_of(parse_pipeline(flow_config("A", "C", **other)))[1] == Flow("A", "C", T, edge=False)
    assert sibling_forwards(**other)


def test_a_parent_whose_sink_renames_topics_is_no_edge_so_the_sibling_forwards():
    for routing in ({"sink.topic.template": "backup.{topic}"}, {"sink.topic": "everything"}):
        assert flow_of(parse_pipeline(flow_config("A", "C", **routing))) is None
        assert sibling_forwards(**routing)
    assert not sibling_forwards(**{"sink.topic.template": "{topic}"})  # the identity, spelled out


def test_a_parent_that_may_skip_a_record_is_no_edge_so_the_sibling_forwards():
    tolerant = {"errors.tolerance": "all"}
    assert flow_of(parse_pipeline(flow_config("A", "C", **tolerant)))[1].edge is False
    assert "errors.tolerance=all" in withholds(parse_pipeline(flow_config("A", "C", **tolerant)))
    assert sibling_forwards(**tolerant)
    assert sibling_forwards(**{"errors.deadletterqueue.topic.name": "dlq"})
    assert not sibling_forwards(**{"errors.tolerance": "none"})


def test_a_parent_starting_later_than_its_topics_beginning_is_no_edge():
    assert "start.position=latest" in withholds(parse_pipeline(flow_config("A", "C", **{"source.start.position": "latest"})))
    assert sibling_forwards(**{"source.start.position": "latest"})
    assert not sibling_forwards(**{"source.start.position": "earliest"})


def test_a_flow_that_is_no_edge_still_leaves_records_to_qualifying_parents():
    # B -> C has a Filter: no one relies on it, but it relies on A -> C (an edge) for records born in A
    pipelines = [parse_pipeline(flow_config(s, t, **(FILTER if (s, t) == ("B", "C") else {})))
                 for s, t in permutations("ABC", 2)]
    tops = topologies({p.name: flow_of(p) for p in pipelines})
    assert not tops["BC"].forwards("B", "C", "A", "orders") and tops["BC"].forwards("B", "C", "B", "orders")
    assert Flow("B", "C", T) not in tops["AC"].flows and Flow("B", "C", T, edge=False) not in tops["AC"].flows
    # a ring whose only path to C is the filtering flow: it is C's parent for itself, so it forwards
    ring = [parse_pipeline(flow_config("A", "B")), parse_pipeline(flow_config("B", "C", **FILTER)),
            parse_pipeline(flow_config("C", "A"))]
    tops = topologies({p.name: flow_of(p) for p in ring})
    assert tops["BC"].forwards("B", "C", "A", "orders")


def test_every_record_arrives_when_a_parent_is_no_edge():
    # the simulation of the first tests, with A -> C filtering: C still gets a copy through B
    flows = [Flow(s, t, T, edge=(s, t) != ("A", "C")) for s, t in permutations("ABC", 2)]
    topology = Topology(flows)
    got = deliveries(topology, "A")
    assert len(got["C"]) == 2 and len(got["B"]) == 1  # a duplicate rather than a loss


def test_deleting_or_changing_a_parent_names_the_targets_and_the_flows_that_relied_on_it():
    pipelines = mesh_pipelines()
    flows = {p.name: flow_of(p) for p in pipelines}
    gone = withdrawal(flows, "AC")
    assert gone == Withdrawal(("orders",), ("C",), ("BC",))
    assert withdrawal(flows, "AC", flows["AC"]) is None  # changed and still an edge of the same topics
    assert withdrawal(flows, "AC", flow_of(parse_pipeline(flow_config("A", "C", **FILTER)))) == gone
    # a ring: deleting A -> B cuts B and C off from A's records
    ring = {p.name: flow_of(p) for p in (parse_pipeline(flow_config(*e)) for e in ("AB", "BC", "CA", "CB"))}
    assert withdrawal(ring, "AB") == Withdrawal(("orders",), ("B", "C"), ("BC", "CB"))
    # a flow no one relies on
    assert withdrawal({"AC": flows["AC"]}, "AC") is None
    assert withdrawal(flows, "AC") is not None and withdrawal({**flows, "AC": None}, "AC") is None


def test_the_herder_logs_no_text_of_an_unexpected_error_when_a_stored_config_does_not_parse(caplog):
    from types import SimpleNamespace

    from connect.secrets import Redactor
    from worker.herding.validation import Validation

    def validate(name, config):
        raise RuntimeError(f"cannot reach broker with password {config['sink.sasl.password']}")

    validation = SimpleNamespace(validate=validate, redactor=Redactor(), flow_of=Validation.flow_of)
    with caplog.at_level("WARNING", logger="worker.herder"):
        assert Validation.flow(validation, "AB", {"sink.sasl.password": "hunter2"}) is None
    assert "hunter2" not in caplog.text and "RuntimeError" in caplog.text and "AB" in caplog.text


def test_a_kafka_flow_claims_the_topics_it_names_even_those_topics_exclude_matches():
    # topics.exclude filters what topics.regex picks: a named topic is read (issue 36: the README's
    # "offset-syncs.A.internal" was never read), so the flow covers it; a regex flow does not
    from connectors.kafka.source import KafkaSourceConnector

    named = KafkaSourceConnector.named_topics({"bootstrap.servers": "127.0.0.1:9", "topics": "orders,__internal,x.internal"})
    assert named == ["orders", "__internal", "x.internal"]
    assert KafkaSourceConnector.named_topics({"bootstrap.servers": "127.0.0.1:9", "topics.regex": ".*"}) is None
