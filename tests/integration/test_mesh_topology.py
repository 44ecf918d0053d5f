"""A full mesh of three Kafka clusters with identity names and NO hop limit, tried as a new user
would: six flows created with ``connect connectors create`` on one worker service. The worker
knows the group's topology (``worker.replication.topology``), so every record takes one path and arrives once
in every cluster. Then three flows are deleted, leaving a ring: the topology change reaches the
running flows and new records go around the ring, again once per cluster.

Turned off (no ``OnePath`` stage), the mesh delivers every record twice to each other cluster:
directly, and through the third cluster.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from itertools import permutations

import pytest
from kafka_util import create_topic, produce
from service_util import wait_for
from typer.testing import CliRunner

from integration.test_replication_mesh import kafka_values
from worker.cli import app as cli

pytestmark = pytest.mark.timeout(500)


def _connect(*args: str) -> str:
    out = CliRunner().invoke(cli, ["connectors", *args])
    assert out.exit_code == 0, out.output
    return out.output


def _flow_file(tmp_path, name: str, src: str, src_broker, dst: str, dst_broker, topic: str):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"name": name, "config": {
        "source.connector.class": "kafka", "source.bootstrap.servers": src_broker.bootstrap, "source.topics": topic,
        "source.start.position": "earliest", "source.cluster.alias": src,
        "sink.connector.class": "kafka", "sink.bootstrap.servers": dst_broker.bootstrap, "sink.cluster.alias": dst,
        "epoch.max.ms": "1000"}}))
    return path


def _all_running(client, names) -> bool:
    for name in names:
        status = client.get(f"/connectors/{name}/status").json()
        if status["connector"]["state"] != "RUNNING" or not status["tasks"] \
                or any(t["state"] != "RUNNING" for t in status["tasks"]):
            return False
    return True


def _produce_everywhere(clusters: dict, topic: str, n: int, first: int) -> None:
    threads = [threading.Thread(target=produce, args=(b.bootstrap, topic, n, 2), kwargs={"start": first + i * n})
               for i, b in enumerate(clusters.values())]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _once_everywhere(clusters: dict, topic: str, values: range) -> dict[str, dict[bytes, bytes | None]]:
    """Every value of ``values`` exactly once in every cluster; value -> origin chain per cluster."""
    expected = {f"value-{i}".encode() for i in values}
    chains = {}
    for alias, broker in clusters.items():
        got = [(v, c) for v, c in kafka_values(broker.bootstrap, topic) if v in expected]
        counts = Counter(v for v, _ in got)
        assert set(counts) == expected, f"{alias}: {len(expected - set(counts))} of {len(expected)} missing"
        assert max(counts.values()) == 1, \
            f"{alias}: {sum(n - 1 for n in counts.values())} duplicates (two paths, or a loop)"
        chains[alias] = dict(got)
    return chains


def test_full_mesh_without_hop_limit_delivers_once_and_a_ring_left_after_deletes_too(
        kafka_pair, third_kafka, worker_factory, tmp_path, unique):
    clusters = {"A": kafka_pair[0], "B": kafka_pair[1], "C": third_kafka}
    topic, n = f"tmesh-{unique.rsplit('-', 1)[1]}", 2000
    for broker in clusters.values():
        create_topic(broker.bootstrap, topic, 2)
    _, client = worker_factory()
    url = str(client.base_url)
    names = {}
    for s, t in permutations(clusters, 2):  # six flows, one `connect connectors create` each, no hop limit
        names[s + t] = name = f"{unique}-{s}{t}"
        _connect("create", str(_flow_file(tmp_path, name, s, clusters[s], t, clusters[t], topic)), "--url", url)
    wait_for(lambda: _all_running(client, names.values()), 120, "the six flows RUNNING")
    time.sleep(3)  # the flows created first were rebuilt as the group grew: let the last rebuild start

    producer = threading.Thread(target=_produce_everywhere, args=(clusters, topic, n, 0))
    producer.start()  # every cluster written at once, while the mesh runs
    wait_for(lambda: not producer.is_alive() and all(
        len(kafka_values(b.bootstrap, topic)) >= 3 * n for b in clusters.values()), 300, f"{3 * n} records everywhere")
    time.sleep(4)  # a second path would keep delivering: nothing more may arrive
    chains = _once_everywhere(clusters, topic, range(3 * n))
    assert chains["C"][b"value-0"] == b"A" and chains["C"][f"value-{n}".encode()] == b"B"  # each by the direct flow
    assert chains["A"][f"value-{2 * n}".encode()] == b"C"

    # Deleting B->A, C->B and A->C leaves the ring A -> B -> C -> A: the others learn it and forward
    for gone in ("BA", "CB", "AC"):
        _connect("delete", names[gone], "--url", url)
    ring = [names[k] for k in ("AB", "BC", "CA")]
    time.sleep(3)  # the ring's flows restart with the new topology (from their committed offsets)
    wait_for(lambda: _all_running(client, ring), 120, "the ring's flows RUNNING again")
    _produce_everywhere(clusters, topic, n, 3 * n)
    wait_for(lambda: all(len(kafka_values(b.bootstrap, topic)) >= 6 * n for b in clusters.values()), 300,
             f"{6 * n} records everywhere")
    time.sleep(4)
    chains = _once_everywhere(clusters, topic, range(3 * n, 6 * n))
    assert chains["C"][f"value-{3 * n}".encode()] == b"A,B"  # born in A, around the ring through B
    assert chains["B"][f"value-{5 * n}".encode()] == b"C,A"
    assert chains["A"][f"value-{4 * n}".encode()] == b"B,C"
