"""PIP-18 onboarding of a Pulsar namespace between two Apache Pulsar standalones, through the worker
service: a tenant and namespace made on both through the real admin API, one ``POST /replicators``
(type ``pulsar``, a Pulsar source with an alias) puts the namespace's two topics under replication
to mapped names in the same namespace on b. Every message arrives with its key, properties, event
time and ordering key, in its partition and in order; one topic's replicator stops (nothing more
arrives there while the other goes on) and starts again (the rest arrives); the stats count the
records; removal takes the connectors away. ``test_replicators.py`` covers the keystore and the
CLI on Kafka; this test is about what the Pulsar side of onboarding does on a real Pulsar."""

from __future__ import annotations

import pytest
from pulsar_util import consume_all, produce
from service_util import state_of, wait_for

from worker.brokers.pulsar import admin_request

pytestmark = pytest.mark.timeout(600)

PARTS = 2


def _fields(m) -> tuple:
    return (m.data(), m.partition_key(), m.properties().get("idx"), m.event_timestamp(), m.ordering_key())


def _first_copies(messages: list) -> list:
    seen: set[bytes] = set()
    return [m for m in messages if not (m.data() in seen or seen.add(m.data()))]


def _arrived(broker, topic: str, expected: int) -> dict[int, list]:
    return consume_all(broker, topic, PARTS, expected, timeout=120, ident=lambda m: m.data())


def test_pip18_onboards_a_pulsar_namespace_between_apache_pulsar_clusters(worker_factory, apache_pulsar_pair, unique):
    a, b = apache_pulsar_pair
    tenant = f"pip18-{unique.rsplit('-', 1)[1]}"
    namespace = f"{tenant}/ns"
    for broker in (a, b):  # each cluster its own tenant and namespace (no geo-replication between them)
        admin_request(broker.admin_url, "PUT", f"/admin/v2/tenants/{tenant}",
                      {"adminRoles": [], "allowedClusters": [broker.cluster]})
        admin_request(broker.admin_url, "PUT", f"/admin/v2/namespaces/{namespace}", {})
    mapping = {"orders": f"persistent://{namespace}/orders-copy", "payments": f"persistent://{namespace}/payments-copy"}
    a.create_partitioned_topics({f"persistent://{namespace}/{t}": PARTS for t in mapping})
    b.create_partitioned_topics({t: PARTS for t in mapping.values()})
    _, c = worker_factory()
    r = c.post("/replicators", json={
        "namespace": namespace, "type": "pulsar", "region": "b",
        "source": {"type": "pulsar", "service.url": a.service_url, "alias": "a"},
        "topicMapping": mapping, "replicationProperties": {"service.url": b.service_url},
        "config": {"epoch.max.ms": "1000"}})
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    assert rid == f"pulsar.b.{tenant}_ns" and len(r.json()["connectors"]) == 2

    produce(a, f"persistent://{namespace}/orders", 600, PARTS)
    produce(a, f"persistent://{namespace}/payments", 600, PARTS)
    for topic, target in mapping.items():
        source = consume_all(a, f"persistent://{namespace}/{topic}", PARTS, 600)
        got = _arrived(b, target, 600)
        for p in range(PARTS):
            firsts = _first_copies(got[p])  # at least once: a re-sent copy may follow
            assert [_fields(m) for m in firsts] == [_fields(m) for m in source[p]], f"{topic}, partition {p}"

    # one topic's replicator stopped: nothing more arrives there, the other topic goes on
    assert c.put(f"/replicators/{rid}/topics/orders/stop").status_code == 202
    wait_for(lambda: state_of(c, f"{rid}.orders") == "STOPPED", 120, "the orders replicator stopped")
    produce(a, f"persistent://{namespace}/orders", 400, PARTS, start=600)
    produce(a, f"persistent://{namespace}/payments", 400, PARTS, start=600)
    assert sum(map(len, _arrived(b, mapping["payments"], 1000).values())) >= 1000
    stopped = {m.data() for ms in consume_all(b, mapping["orders"], PARTS, 600, timeout=10).values() for m in ms}
    assert stopped == {f"value-{i}".encode() for i in range(600)}, "orders copied while its replicator was stopped"

    assert c.put(f"/replicators/{rid}/topics/orders/start").status_code == 202
    got = _arrived(b, mapping["orders"], 1000)
    assert {m.data() for ms in got.values() for m in ms} == {f"value-{i}".encode() for i in range(1000)}

    stats = wait_for(lambda: (t := c.get(f"/replicators/{rid}/stats").json()["topics"])["orders"]["records"] >= 1000
                     and t, 60, "the stats to count every record")
    assert stats["payments"]["records"] >= 1000 and stats["payments"]["state"] == "RUNNING"

    assert c.delete(f"/replicators/{rid}").status_code in (200, 204)
    assert all(not n.startswith(rid) for n in c.get("/connectors").json())
