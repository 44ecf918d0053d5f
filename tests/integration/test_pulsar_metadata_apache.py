"""The PIP-136 applier (``pulsar-metadata`` sink) against Apache Pulsar's real admin REST API, task
by task (no Spark): what a real broker adds to a namespace it creates (its own defaults for every
Policies field) is not counted as a field left unsynced."""

from __future__ import annotations

import time

import pytest
from pulsar_brokers import register

from connect.records import make_record
from connect.sink import SinkTaskContext
from connectors.pulsar.metadata.admin import PulsarAdmin
from connectors.pulsar.metadata.applier import PulsarMetadataSinkTask
from connectors.pulsar.metadata.stamps import NAMESPACE_FIELDS, namespace_data
from connectors.replicator.metadata import MetadataChangeEvent

pytestmark = pytest.mark.timeout(600)

TOPIC = "persistent://public/default/metadata-events"


def retention(minutes: int, mb: int) -> dict:
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": mb}


def _sink(broker) -> PulsarMetadataSinkTask:
    config = {"admin.url": broker.admin_url, "cluster.name": broker.cluster}
    task = PulsarMetadataSinkTask()
    task.context = SinkTaskContext("sink", config)
    task.start(config, task.context)
    return task


def _put(task: PulsarMetadataSinkTask, event: MetadataChangeEvent) -> list:
    task.put([make_record(TOPIC, b"k", event.to_json(), None, 0, {"topic": TOPIC, "partition": -1},
                          {"ledger": 1, "entry": time.monotonic_ns(), "batch": -1}, 0)])
    return task.context.errant_record_reporter.take()


def test_a_namespace_created_from_an_event_counts_only_the_fields_that_really_differ(apache_pulsar_pair, unique):
    a, b = apache_pulsar_pair
    register(a, b)
    register(b, a)
    tenant, n = f"created-{unique.rsplit('-', 1)[1]}", f"created-{unique.rsplit('-', 1)[1]}/orders"
    info = {"adminRoles": [], "allowedClusters": ["a", "b"]}
    with PulsarAdmin(a.admin_url) as admin_a, PulsarAdmin(b.admin_url) as admin_b:
        admin_a.create_tenant(tenant, info)
        admin_b.create_tenant(tenant, info)
        admin_a.create_namespace(n, {})
        admin_a.set_retention(n, retention(30, 10))
        data = namespace_data(admin_a.policies(n))  # what a's watcher would publish
        task = _sink(b)
        try:
            assert _put(task, MetadataChangeEvent("Created", "Namespaces", n, data, "a", int(time.time() * 1000))) == []
            made = admin_b.policies(n)
            assert made["retention_policies"] == retention(30, 10)
            # Fields b holds otherwise than a (the replication clusters name each one's own cluster);
            # every other Policies field b filled with the same default as a is not "left unsynced".
            differ = [f for f, v in data.items() if f not in NAMESPACE_FIELDS and v != made.get(f)]
            assert "replication_clusters" in differ and len(differ) < len(data) // 4, differ
            assert task.metrics()["metadata.fields.ignored"] == len(differ)
        finally:
            task.stop()
            for admin in (admin_a, admin_b):
                admin.delete_namespace(n)
                admin.delete_tenant(tenant)


def test_removing_a_namespace_property_takes_pulsars_plain_text_answer(apache_pulsar_pair, unique):
    """Pulsar answers a property's removal with its old value as plain text, not JSON: the removal
    succeeded and is not an error to retry (it was: the applier re-sent the event once more)."""
    a, _ = apache_pulsar_pair
    key = f"gone-{unique.rsplit('-', 1)[1]}"
    with PulsarAdmin(a.admin_url) as admin:
        admin.set_properties("public/default", {key: "old value"})
        admin.remove_property("public/default", key)
        assert key not in (admin.policies("public/default").get("properties") or {})


def test_a_tenant_event_from_another_cluster_keeps_this_cluster_allowed(apache_pulsar_pair, unique):
    """Independent clusters each allow a tenant (``public`` above all) on themselves only. A tenant
    event from b names b; applied as it is on a, it took ``a`` out of the tenant's allowed clusters,
    and a refused every new namespace there ("Cluster [a] is not in the list of allowed clusters"):
    seen on the shared pair after the PIP-136 sync test, whose watchers sync ``public``. Stock Pulsar
    keeps no tenant stamp, so every such event applies (see docs/replication.md). The applier keeps
    its own cluster allowed where it was."""
    a, b = apache_pulsar_pair
    register(a, b)
    tenant = f"allowed-{unique.rsplit('-', 1)[1]}"
    with PulsarAdmin(a.admin_url) as admin:
        admin.create_tenant(tenant, {"adminRoles": [], "allowedClusters": ["a"]})
        task = _sink(a)
        try:
            event = MetadataChangeEvent("Modified", "Tenants", tenant, {"adminRoles": ["ops"], "allowedClusters": ["b"]},
                                        "b", int(time.time() * 1000))
            assert _put(task, event) == []
            info = admin.tenant(tenant)
            assert info["adminRoles"] == ["ops"] and sorted(info["allowedClusters"]) == ["a", "b"]
            admin.create_namespace(f"{tenant}/ns", {})  # a still takes namespaces of the tenant
            admin.delete_namespace(f"{tenant}/ns")
            # a tenant this cluster did not allow stays so: only what the event names
            admin.update_tenant(tenant, {"adminRoles": [], "allowedClusters": ["b"]})
            assert _put(task, MetadataChangeEvent("Modified", "Tenants", tenant, {"adminRoles": [], "allowedClusters": ["b"]},
                                                  "b", int(time.time() * 1000) + 1)) == []
            assert admin.tenant(tenant)["allowedClusters"] == ["b"]
        finally:
            task.stop()
            admin.delete_tenant(tenant)
