"""Pulsar's own geo-replication next to this project's mirror, between the same two Apache Pulsar
standalone clusters (``apache_pulsar_pair``), from the same messages.

Pulsar replicates a namespace whose replication clusters name both (``geo-<n>/ns``: the clusters
know each other, the tenant and namespace exist in both, each with its own metadata store); the
mirror copies a topic of ``public/default`` that Pulsar does not replicate. Both source topics get
the same messages (two partitions; key, properties, event time, ordering key). What arrives on b is
compared message by message: where they agree (payload, partition, order, key, properties, event time,
ordering key) and where they differ (publish time: Pulsar's replicator keeps the source's; the
mirror's producer publishes anew).
"""

from __future__ import annotations

import pytest
from pipeline_util import make_driver, pair_pipeline, run_until
from pulsar_brokers import register
from pulsar_util import consume_all, produce

from worker.brokers.pulsar import admin_request

pytestmark = pytest.mark.timeout(900)


def _fields(m) -> tuple:
    return (m.data(), m.partition_key(), m.properties(), m.event_timestamp(), m.ordering_key())


def test_geo_replication_and_the_mirror_deliver_the_same_messages(apache_pulsar_pair, spark, tmp_path, unique):
    a, b = apache_pulsar_pair
    register(a, b)
    register(b, a)
    n, parts = 2000, 2
    tenant = f"geo-{unique.rsplit('-', 1)[1]}"
    for broker in (a, b):
        admin_request(broker.admin_url, "PUT", f"/admin/v2/tenants/{tenant}",
                      {"adminRoles": [], "allowedClusters": ["a", "b"]})
        admin_request(broker.admin_url, "PUT", f"/admin/v2/namespaces/{tenant}/ns", {})
    # Pulsar replicates a's topics of the namespace to b (and b's to a: nothing is written there)
    admin_request(a.admin_url, "POST", f"/admin/v2/namespaces/{tenant}/ns/replication", ["a", "b"])
    theirs, ours = f"persistent://{tenant}/ns/orders", f"persistent://public/default/orders-{unique}"
    for broker in (a, b):
        broker.create_partitioned_topics({theirs: parts, ours: parts})
    produce(a, theirs, n, parts)
    produce(a, ours, n, parts)
    driver = make_driver(spark, tmp_path, pair_pipeline(
        unique, {"connector.class": "pulsar", "service.url": a.service_url, "topics": ours},
        {"connector.class": "pulsar", "service.url": b.service_url}))
    try:
        assert run_until(driver, n) >= n
    finally:
        driver.close()
    source = consume_all(a, theirs, parts, n)
    replicated = consume_all(b, theirs, parts, n, timeout=180)
    mirrored = consume_all(b, ours, parts, n)
    for p in range(parts):
        # the same messages, in the same partition and order, with the same key, properties, event
        # time and ordering key
        assert [_fields(m) for m in replicated[p]] == [_fields(m) for m in source[p]], f"geo-replication, partition {p}"
        assert [_fields(m) for m in mirrored[p]] == [_fields(m) for m in source[p]], f"mirror, partition {p}"
        # publish time: Pulsar's replicator keeps the source's, the mirror's producer publishes anew
        assert [m.publish_timestamp() for m in replicated[p]] == [m.publish_timestamp() for m in source[p]]
        assert all(mine.publish_timestamp() >= src.publish_timestamp() for mine, src in zip(mirrored[p], source[p],
                                                                                            strict=True))
