"""Pulsar metadata sync (PIP-136) against an in-memory admin REST API (``tests/pulsar_admin.py``), no
Spark: the admin client's paths and errors, the applier's last-writer-wins (newer wins, equal times
go to the smaller cluster name, stale / duplicate / own events change nothing, a late Created does
not undo a newer Deleted), the watcher's diffing (snapshots, stamps kept or given, stamp-only
changes silent), invalid events reported with their JSON path, and two clusters converging when
their watchers and appliers are wired to each other by hand."""

from __future__ import annotations

import time

import orjson
import pytest
from pulsar_admin import FakePulsarAdmin

from connect.errors import ConnectError, RetriableError
from connect.records import make_record
from connect.sink import SinkTaskContext
from connect.source import OffsetStorageReader, SourceTaskContext
from connectors.pulsar.metadata import PulsarMetadataSinkConnector, PulsarMetadataSourceConnector
from connectors.pulsar.metadata.admin import AdminError, PulsarAdmin
from connectors.pulsar.metadata.applier import PulsarMetadataSinkTask
from connectors.pulsar.metadata.stamps import namespace_data, stamp_of, strip_stamp
from connectors.pulsar.metadata.watcher import PulsarMetadataSourceTask
from connectors.replicator.metadata import MetadataChangeEvent

TOPIC = "persistent://public/default/metadata-events"
RETENTION = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}


@pytest.fixture
def admins():
    started: list[FakePulsarAdmin] = []

    def start(**kwargs) -> FakePulsarAdmin:
        server = FakePulsarAdmin(**kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def sink(admin: FakePulsarAdmin, cluster: str = "B", **extra) -> PulsarMetadataSinkTask:
    config = {"admin.url": admin.url, "cluster.name": cluster, **extra}
    task = PulsarMetadataSinkTask()
    task.context = SinkTaskContext("sink", config)
    task.start(config, task.context)
    return task


def source(admin: FakePulsarAdmin, cluster: str = "A", **extra) -> PulsarMetadataSourceTask:
    config = {"admin.url": admin.url, "cluster.name": cluster, "topic": "metadata-events", **extra}
    task = PulsarMetadataSourceTask()
    task.context = SourceTaskContext("source", config, OffsetStorageReader(None))
    task.start(config, task.context)
    return task


def read(task: PulsarMetadataSourceTask) -> list:
    task._next_poll = 0.0  # no waiting for poll.interval.ms
    return task.poll()


def events(records) -> list[tuple]:
    out = []
    for r in records:
        ev = MetadataChangeEvent.from_json(r.value)
        out.append((ev.type, ev.resource, ev.resource_name, ev.stamp))
    return out


def ev(kind: str, resource: str, name: str, data, cluster: str, when: int) -> MetadataChangeEvent:
    return MetadataChangeEvent(kind, resource, name, data, cluster, when)


_offsets = iter(range(1_000_000))


def rec(event: MetadataChangeEvent | bytes):
    value = event if isinstance(event, bytes) else event.to_json()
    return make_record(TOPIC, b"k", value, None, 0, {"topic": TOPIC, "partition": -1},
                       {"ledger": 1, "entry": next(_offsets), "batch": -1}, 0)


def put(task: PulsarMetadataSinkTask, *evs) -> list[tuple]:
    task.put([rec(e) for e in evs])
    return task.context.errant_record_reporter.take()


def with_ns(admin: FakePulsarAdmin, ns: str = "acme/orders", stamp: tuple | None = None, **policies) -> None:
    tenant = ns.split("/")[0]
    admin.tenants.setdefault(tenant, {"adminRoles": [], "allowedClusters": ["a"]})
    doc = dict(policies)
    if stamp:
        doc["properties"] = {"lastUpdatedBy": stamp[1], "lastUpdatedTime": str(stamp[0])}
    admin.namespaces[ns] = doc


# -- the admin client ---------------------------------------------------------------------------
def test_admin_client_uses_pulsars_paths_and_bearer_token(admins):
    server = admins(token="s3cret")
    admin = PulsarAdmin(server.url, "s3cret")
    admin.create_tenant("acme", {"adminRoles": ["ops"], "allowedClusters": ["a"]})
    admin.update_tenant("acme", {"adminRoles": ["ops", "dev"], "allowedClusters": ["a"]})
    admin.create_namespace("acme/orders", {})
    admin.set_retention("acme/orders", RETENTION)
    admin.set_message_ttl("acme/orders", 30)
    admin.set_properties("acme/orders", {"team": "x"})
    admin.create_partitions("persistent://acme/orders/t", 2)
    admin.grow_partitions("persistent://acme/orders/t", 3)
    assert admin.tenants() == ["acme"] and admin.namespaces("acme") == ["acme/orders"]
    assert admin.tenant("acme") == {"adminRoles": ["ops", "dev"], "allowedClusters": ["a"]}
    assert admin.policies("acme/orders") == {"retention_policies": RETENTION, "message_ttl_in_seconds": 30,
                                             "properties": {"team": "x"}}
    assert admin.partitions("persistent://acme/orders/t") == 3 and admin.partitions("persistent://acme/orders/u") == 0
    assert admin.tenant("nobody") is None and admin.policies("acme/none") is None
    admin.set_message_ttl("acme/orders", None)
    admin.set_retention("acme/orders", None)
    assert admin.policies("acme/orders")["retention_policies"] is None
    assert server.requests[:8] == [
        ("PUT", "/admin/v2/tenants/acme"), ("POST", "/admin/v2/tenants/acme"), ("PUT", "/admin/v2/namespaces/acme/orders"),
        ("POST", "/admin/v2/namespaces/acme/orders/retention"), ("POST", "/admin/v2/namespaces/acme/orders/messageTTL"),
        ("PUT", "/admin/v2/namespaces/acme/orders/properties"), ("PUT", "/admin/v2/persistent/acme/orders/t/partitions"),
        ("POST", "/admin/v2/persistent/acme/orders/t/partitions")]
    admin.close()


def test_admin_client_errors_name_url_and_status(admins):
    server = admins(token="s3cret")
    with pytest.raises(AdminError, match=r"GET http://127\.0\.0\.1:\d+/admin/v2/tenants: HTTP 401") as refused:
        PulsarAdmin(server.url, "wrong").tenants()
    assert refused.value.status == 401
    admin = PulsarAdmin(server.url, "s3cret")
    server.fail_next = [503]
    with pytest.raises(RetriableError, match=r"/admin/v2/tenants: HTTP 503"):
        admin.tenants()
    with pytest.raises(AdminError, match=r"PUT .*/admin/v2/namespaces/ghost/ns: HTTP 404 \(Tenant does not exist\)"):
        admin.create_namespace("ghost/ns", {})
    server.stop()
    with pytest.raises(RetriableError, match=r"/admin/v2/tenants failed: ConnectError"):
        PulsarAdmin(server.url, "s3cret", timeout_s=1).tenants()


def test_connectors_validate_their_keys():
    assert [i.key for i in PulsarMetadataSourceConnector.validate({"admin.url": "localhost:8080"})] == \
        ["admin.url", "cluster.name"]
    issues = PulsarMetadataSinkConnector.validate({"admin.url": "http://h:8080", "cluster.name": "B",
                                                   "auth.plugin": "token"})
    assert [i.key for i in issues] == ["auth.token"]
    connector = PulsarMetadataSourceConnector()
    connector.start({"admin.url": "http://h:8080", "cluster.name": "A"})
    assert connector.source_topics() == {"metadata-events": 1}


def test_stamps_are_read_from_the_top_or_the_namespace_properties():
    assert stamp_of({"lastUpdatedBy": "A", "lastUpdatedTime": 5}) == (5, "A")
    assert stamp_of({"properties": {"lastUpdatedBy": "B", "lastUpdatedTime": "7"}}) == (7, "B")
    both = {"lastUpdatedBy": "A", "lastUpdatedTime": 5, "properties": {"lastUpdatedBy": "B", "lastUpdatedTime": "7"}}
    assert stamp_of(both) == (7, "B")
    assert stamp_of({"lastUpdatedBy": "", "lastUpdatedTime": 5}) is None and stamp_of({}) is None
    assert strip_stamp(both) == {"properties": {}}


# -- the applier: last writer wins --------------------------------------------------------------
def test_newer_event_wins_and_its_stamp_is_written(admins):
    b = admins()
    with_ns(b, stamp=(100, "B"), retention_policies={"retentionTimeInMinutes": 1, "retentionSizeInMB": 1})
    task = sink(b)
    assert put(task, ev("Modified", "Namespaces", "acme/orders", {"retention_policies": RETENTION,
                                                                  "message_ttl_in_seconds": 45}, "A", 200)) == []
    held = b.namespaces["acme/orders"]
    assert held["retention_policies"] == RETENTION and held["message_ttl_in_seconds"] == 45
    assert stamp_of(held) == (200, "A")
    assert task.metrics()["metadata.applied"] == 1.0


def test_equal_times_go_to_the_smaller_cluster_name(admins):
    b = admins()
    with_ns(b, stamp=(100, "B"), retention_policies={"retentionTimeInMinutes": 2, "retentionSizeInMB": 2})
    task = sink(b, cluster="C")
    put(task, ev("Modified", "Namespaces", "acme/orders", {"retention_policies": RETENTION}, "A", 100))
    assert b.namespaces["acme/orders"]["retention_policies"] == RETENTION and stamp_of(b.namespaces["acme/orders"]) == (100, "A")
    put(task, ev("Modified", "Namespaces", "acme/orders", {"retention_policies": {"retentionTimeInMinutes": 9,
                                                                                  "retentionSizeInMB": 9}}, "B", 100))
    assert b.namespaces["acme/orders"]["retention_policies"] == RETENTION  # B's value, same time: A's stays
    m = task.metrics()
    assert (m["metadata.applied"], m["metadata.stale"]) == (1.0, 1.0)


def test_stale_duplicate_and_own_events_change_nothing(admins):
    b = admins()
    with_ns(b, stamp=(100, "B"), message_ttl_in_seconds=10)
    task = sink(b, cluster="C")
    before = b.snapshot()
    writes = len(b.requests)
    put(task, ev("Modified", "Namespaces", "acme/orders", {"message_ttl_in_seconds": 1}, "A", 99),  # stale
        ev("Modified", "Namespaces", "acme/orders", {"message_ttl_in_seconds": 2}, "B", 100),  # duplicate
        ev("Modified", "Namespaces", "acme/orders", {"message_ttl_in_seconds": 3}, "C", 500))  # own (cluster C)
    assert b.snapshot() == before
    assert all(method == "GET" for method, _ in b.requests[writes:])
    m = task.metrics()
    assert (m["metadata.stale"], m["metadata.duplicate"], m["metadata.own"], m["metadata.applied"]) == (1, 1, 1, 0)


def test_a_late_created_does_not_undo_a_newer_deleted(admins):
    b = admins()
    with_ns(b, stamp=(100, "A"), message_ttl_in_seconds=10)
    task = sink(b, cluster="C")
    put(task, ev("Deleted", "Namespaces", "acme/orders", None, "B", 300))
    assert "acme/orders" not in b.namespaces
    put(task, ev("Created", "Namespaces", "acme/orders", {"message_ttl_in_seconds": 10}, "A", 200))
    assert "acme/orders" not in b.namespaces and task.metrics()["metadata.stale"] == 1
    put(task, ev("Deleted", "Namespaces", "acme/orders", None, "B", 300))
    assert task.metrics()["metadata.duplicate"] == 1
    put(task, ev("Created", "Namespaces", "acme/orders", {"message_ttl_in_seconds": 20}, "A", 400))  # newer: back
    assert b.namespaces["acme/orders"]["message_ttl_in_seconds"] == 20 and stamp_of(b.namespaces["acme/orders"]) == (400, "A")
    forgetful = sink(b, cluster="C", **{"deletions.max": "0"})  # the documented limit: nothing remembered
    put(forgetful, ev("Deleted", "Namespaces", "acme/orders", None, "B", 500))
    put(forgetful, ev("Created", "Namespaces", "acme/orders", {}, "A", 450))
    assert "acme/orders" in b.namespaces


def test_tenants_are_created_updated_and_deleted_with_their_stamp(admins):
    b = admins()
    task = sink(b)
    info = {"adminRoles": ["ops"], "allowedClusters": ["a"]}
    put(task, ev("Created", "Tenants", "acme", info, "A", 10))
    assert b.tenants["acme"] == {**info, "lastUpdatedBy": "A", "lastUpdatedTime": 10}
    put(task, ev("Modified", "Tenants", "acme", {**info, "adminRoles": ["dev"]}, "A", 20))
    assert b.tenants["acme"]["adminRoles"] == ["dev"] and stamp_of(b.tenants["acme"]) == (20, "A")
    put(task, ev("Deleted", "Tenants", "acme", None, "A", 30))
    assert "acme" not in b.tenants and task.metrics()["metadata.applied"] == 3


def test_namespace_fields_are_applied_one_by_one_and_others_ignored(admins):
    b = admins()
    with_ns(b, message_ttl_in_seconds=60, retention_policies=RETENTION, bundles={"numBundles": 4},
            properties={"lastUpdatedBy": "B", "lastUpdatedTime": "1", "team": "x", "old": "y"})
    task = sink(b)
    data = {"message_ttl_in_seconds": None, "bundles": {"numBundles": 16}, "properties": {"team": "z"}}
    put(task, ev("Modified", "Namespaces", "acme/orders", data, "A", 5))
    held = b.namespaces["acme/orders"]
    assert held["message_ttl_in_seconds"] is None  # null: removed
    assert held["retention_policies"] == RETENTION  # not in the event's data: left as it is
    assert held["bundles"] == {"numBundles": 4}  # not a synced field
    assert held["properties"] == {"team": "z", "lastUpdatedBy": "A", "lastUpdatedTime": "5"}
    assert task.metrics()["metadata.fields.ignored"] == 1
    assert ("DELETE", "/admin/v2/namespaces/acme/orders/messageTTL") in b.requests
    assert ("DELETE", "/admin/v2/namespaces/acme/orders/property/old") in b.requests
    put(task, ev("Created", "Namespaces", "acme/new", {"retention_policies": RETENTION, "bundles": {}}, "A", 6))
    assert b.namespaces["acme/new"] == {"retention_policies": RETENTION,
                                        "properties": {"lastUpdatedBy": "A", "lastUpdatedTime": "6"}}


def test_transient_failures_report_the_event_and_every_one_after_it(admins):
    b = admins()
    task = sink(b)
    batch = [ev("Created", "Tenants", "acme", {"adminRoles": []}, "A", 1),
             ev("Created", "Tenants", "other", {"adminRoles": []}, "A", 1)]
    b.fail_next = [503]
    records = [rec(e) for e in batch]
    task.put(records)
    failed = task.context.errant_record_reporter.take()
    assert [(r, type(e)) for r, e in failed] == [(records[0], RetriableError), (records[1], RetriableError)]
    assert "HTTP 503" in str(failed[0][1]) and records[0].position() in str(failed[0][1])
    assert b.tenants == {}
    assert put(task, *batch) == [] and set(b.tenants) == {"acme", "other"}  # the runner re-sends them


def test_refusals_are_reported_as_permanent(admins):
    b = admins()
    task = sink(b)
    b.fail_next = [403]  # forbidden: not a tenant that will come later
    [(_, error)] = put(task, ev("Created", "Tenants", "other", {"adminRoles": [], "allowedClusters": ["a"]}, "A", 1))
    assert type(error) is ConnectError and "HTTP 403" in str(error) and "/admin/v2/tenants/other" in str(error)
    assert task.metrics()["metadata.failed"] == 1


@pytest.mark.parametrize("value, path", [
    (b"{not json", "$: not JSON"),
    (b'{"type": "Renamed"}', "$.type"),
    (orjson.dumps({"type": "Modified", "resource": "Namespaces", "resourceName": "a/b", "sourceCluster": "A",
                   "updateTime": 1, "data": {"retention_policies": {"retentionTimeInMinutes": "1h", "retentionSizeInMB": 1}}}),
     "$.data.retention_policies.retentionTimeInMinutes"),
    (orjson.dumps({"type": "Created", "resource": "Tenants", "resourceName": "a", "sourceCluster": "A", "updateTime": 1,
                   "data": {"adminRoles": [7]}}), "$.data.adminRoles[0]"),
    (orjson.dumps({"type": "Created", "resource": "Topics", "resourceName": "t", "sourceCluster": "A", "updateTime": 1,
                   "data": {"partitions": 3}}), "$.data.broker"),
])
def test_invalid_events_are_reported_with_their_position_and_json_path(admins, value, path):
    b = admins()
    task = sink(b)
    record = rec(value)
    task.put([record])
    [(reported, error)] = task.context.errant_record_reporter.take()
    assert reported is record and type(error) is ConnectError
    assert path in str(error) and record.position() in str(error)
    assert task.metrics()["metadata.invalid"] == 1


def test_topics_events_create_or_grow_partitioned_topics(admins):
    b = admins()
    with_ns(b, "public/default")
    task = sink(b)
    put(task, ev("Created", "Topics", "orders", {"partitions": 3, "broker": "kafka"}, "K", 1))
    assert b.partitioned == {"persistent://public/default/orders": 3}
    put(task, ev("Modified", "Topics", "orders", {"partitions": 5, "broker": "rocketmq"}, "R", 2))
    put(task, ev("Modified", "Topics", "orders", {"partitions": 2, "broker": "kafka"}, "K", 3))  # never shrinks
    put(task, ev("Created", "Topics", "persistent://public/default/plain", {"partitions": 0, "broker": "pulsar"}, "P", 4))
    put(task, ev("Deleted", "Topics", "orders", None, "K", 5))
    assert b.partitioned == {"persistent://public/default/orders": 5}
    m = task.metrics()
    assert (m["metadata.applied"], m["metadata.topics.unchanged"], m["metadata.topics.deletes.ignored"]) == (2, 2, 1)


# -- the watcher --------------------------------------------------------------------------------
def _cluster(admin: FakePulsarAdmin) -> None:
    admin.tenants.update({"pulsar": {"adminRoles": []}, "public": {"adminRoles": []},
                          "acme": {"adminRoles": ["ops"], "allowedClusters": ["a"]}})
    admin.namespaces.update({"pulsar/system": {}, "public/default": {},
                             "acme/orders": {"retention_policies": RETENTION,
                                             "properties": {"lastUpdatedBy": "Z", "lastUpdatedTime": "50"}}})


def test_the_watcher_starts_with_a_snapshot_and_stamps_what_carries_none(admins):
    a = admins()
    _cluster(a)
    task = source(a)
    records = read(task)
    assert events(records) == [("Modified", "Tenants", "acme", (0, "A")), ("Modified", "Tenants", "public", (0, "A")),
                               ("Modified", "Namespaces", "acme/orders", (50, "Z")),
                               ("Modified", "Namespaces", "public/default", (0, "A"))]  # no system tenant
    r = records[0]
    assert (r.topic, r.key, r.source_partition, set(r.source_offset)) == ("metadata-events", b"Tenants/acme",
                                                                          {"metadata": "A"}, {"ts"})
    assert MetadataChangeEvent.from_json(records[2].value).data == {"retention_policies": RETENTION, "properties": {},
                                                                    "message_ttl_in_seconds": None}
    assert stamp_of(a.tenants["acme"]) == (0, "A") and stamp_of(a.namespaces["public/default"]) == (0, "A")
    assert stamp_of(a.namespaces["acme/orders"]) == (50, "Z")  # kept as it was
    assert read(task) == []  # the stamps written are a change of the stamps alone: no event
    assert task.metrics()["metadata.stamps.written"] == 3


def test_the_watcher_stamps_local_changes_and_keeps_applied_ones(admins):
    a = admins()
    _cluster(a)
    task = source(a, **{"snapshot.interval.ms": "0"})
    read(task)
    admin = PulsarAdmin(a.url)
    before = int(time.time() * 1000)
    admin.set_message_ttl("acme/orders", 30)  # a local change (pulsar-admin)
    [(kind, resource, name, (when, by))] = events(read(task))
    assert (kind, resource, name, by) == ("Modified", "Namespaces", "acme/orders", "A") and when >= before
    assert stamp_of(a.namespaces["acme/orders"]) == (when, "A")  # written into the resource
    assert read(task) == []
    # applied from another cluster: data and stamp change together, the stamp is kept (and not rewritten)
    a.local_update("namespace", "acme/orders", {"message_ttl_in_seconds": 5,
                                                "properties": {"lastUpdatedBy": "C", "lastUpdatedTime": str(when + 1)}})
    assert events(read(task)) == [("Modified", "Namespaces", "acme/orders", (when + 1, "C"))]
    assert stamp_of(a.namespaces["acme/orders"]) == (when + 1, "C")
    a.local_update("namespace", "acme/orders", {"properties": {"lastUpdatedBy": "D", "lastUpdatedTime": "9"}})
    assert read(task) == []  # the stamp alone
    admin.set_message_ttl("acme/orders", 6)  # local again, after a remote change: a stamp of its own
    [(_, _, _, (_, by))] = events(read(task))
    assert by == "A"
    admin.close()


def test_the_watcher_sees_creations_and_deletions_in_order(admins):
    a = admins()
    _cluster(a)
    task = source(a, **{"snapshot.interval.ms": "0"})
    read(task)
    admin = PulsarAdmin(a.url)
    admin.create_tenant("shop", {"adminRoles": []})
    admin.create_namespace("shop/carts", {"message_ttl_in_seconds": 10})
    got = events(read(task))
    assert [(k, r, n, by) for k, r, n, (_, by) in got] == [("Created", "Tenants", "shop", "A"),
                                                            ("Created", "Namespaces", "shop/carts", "A")]
    admin.delete_namespace("shop/carts")
    admin.delete_tenant("shop")
    got = events(read(task))
    assert [(k, r, n) for k, r, n, _ in got] == [("Deleted", "Namespaces", "shop/carts"), ("Deleted", "Tenants", "shop")]
    admin.close()


def test_snapshots_repeat_every_resource_with_its_stamp_and_tenants_are_filtered(admins):
    a = admins()
    _cluster(a)
    task = source(a, **{"snapshot.interval.ms": "50", "tenants": "acme|public", "tenants.exclude": "public"})
    first = events(read(task))
    time.sleep(0.06)
    assert events(read(task)) == first == [("Modified", "Tenants", "acme", (0, "A")),
                                           ("Modified", "Namespaces", "acme/orders", (50, "Z"))]
    assert task.metrics()["metadata.snapshots"] == 2


def test_the_watcher_raises_retriable_while_the_admin_api_is_away(admins):
    a = admins()
    _cluster(a)
    task = source(a)
    a.fail_next = [502]
    with pytest.raises(RetriableError, match="HTTP 502"):
        read(task)
    assert len(read(task)) == 4


# -- two clusters, wired by hand ----------------------------------------------------------------
def test_two_clusters_converge_on_concurrent_updates_with_the_same_time(admins):
    a, b = admins(), admins()
    _cluster(a)
    b.tenants.update({"public": {"adminRoles": []}})
    b.namespaces.update({"public/default": {"message_ttl_in_seconds": 30}})
    watch = {"A": source(a, **{"snapshot.interval.ms": "0"}), "B": source(b, cluster="B", **{"snapshot.interval.ms": "0"})}
    apply = {"A": sink(a, cluster="A"), "B": sink(b, cluster="B")}

    def exchange(rounds: int = 4) -> None:
        for _ in range(rounds):
            for here, there in (("A", "B"), ("B", "A")):
                records = read(watch[here])
                apply[there].put(records)
                apply[here].put(records)  # its own events come back through its own topic: skipped
                assert apply[there].context.errant_record_reporter.take() == []

    exchange()
    ta, na = a.snapshot()
    tb, nb = b.snapshot()
    assert set(tb) == {"public", "acme"} and set(nb) == {"public/default", "acme/orders"}
    assert namespace_data(na["public/default"]) == namespace_data(nb["public/default"])  # unstamped at start: A's
    assert nb["public/default"]["message_ttl_in_seconds"] is None
    t = int(time.time() * 1000) - 1000  # both updated at t, before B's later one
    a.local_update("namespace", "acme/orders", {"retention_policies": {"retentionTimeInMinutes": 1, "retentionSizeInMB": 1},
                                                "properties": {"lastUpdatedBy": "A", "lastUpdatedTime": str(t)}})
    b.local_update("namespace", "acme/orders", {"retention_policies": {"retentionTimeInMinutes": 2, "retentionSizeInMB": 2},
                                                "properties": {"lastUpdatedBy": "B", "lastUpdatedTime": str(t)}})
    exchange()
    for admin in (a, b):
        held = admin.snapshot()[1]["acme/orders"]
        assert held["retention_policies"]["retentionTimeInMinutes"] == 1 and stamp_of(held) == (t, "A")
    PulsarAdmin(b.url).set_retention("acme/orders", {"retentionTimeInMinutes": 3, "retentionSizeInMB": 3})
    exchange()
    for admin in (a, b):
        held = admin.snapshot()[1]["acme/orders"]
        assert held["retention_policies"]["retentionTimeInMinutes"] == 3 and stamp_of(held)[1] == "B"
        assert stamp_of(held)[0] > t


@pytest.mark.parametrize("resource, name", [
    ("Tenants", ".."), ("Tenants", "a/b"), ("Namespaces", "t/../../tenants/victim"), ("Namespaces", "t"),
    ("Namespaces", "t/."), ("Topics", "persistent://t/ns/../x"), ("Tenants", "bad name"),
])
def test_names_that_would_reach_other_admin_endpoints_are_refused(resource, name):
    from connectors.pulsar.metadata.admin import check_resource_name

    with pytest.raises(ValueError, match=r"\$\.resourceName"):
        check_resource_name(resource, name)
    check_resource_name("Namespaces", "tenant-a/ns.1")  # ordinary names pass
    check_resource_name("Topics", "persistent://public/default/orders.v1")


def test_a_namespace_whose_tenant_is_not_there_yet_waits_for_the_next_snapshot(admins):
    admin = admins()
    task = sink(admin)
    try:
        policies = {"retention_policies": {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10}}
        # a reader that joined mid-snapshot: the namespace arrives before its tenant
        assert put(task, ev("Created", "Namespaces", "acme/orders", policies, "A", 1000)) == []  # not a failure
        assert task.metrics()["metadata.deferred"] == 1 and task.metrics()["metadata.applied"] == 0
        # the next snapshot: the tenant, then the namespace again
        assert put(task, ev("Modified", "Tenants", "acme", {"adminRoles": [], "allowedClusters": ["a"]}, "A", 900),
                   ev("Modified", "Namespaces", "acme/orders", policies, "A", 1000)) == []
        assert admin.namespaces["acme/orders"]["retention_policies"]["retentionTimeInMinutes"] == 60
    finally:
        task.stop()


def test_a_watcher_reading_between_the_appliers_requests_never_takes_the_event_for_a_local_change(admins):
    """The applier writes a namespace in several requests; the watcher of the same cluster reads after
    every one of them (the race a worker hits when both run): the change is published with the
    remote stamp and never re-stamped as local."""
    a = admins()
    with_ns(a, stamp=(100, "A"), retention_policies={"retentionTimeInMinutes": 1, "retentionSizeInMB": 1})
    a.tenants["acme"]["lastUpdatedBy"], a.tenants["acme"]["lastUpdatedTime"] = "A", 100
    watch, apply = source(a, **{"snapshot.interval.ms": "0"}), sink(a, cluster="A")
    read(watch)
    seen: list = []
    original = apply.admin.request

    def request_then_read(method, path, body=None, **kw):
        out = original(method, path, body, **kw)
        if method != "GET":
            seen.extend(events(read(watch)))
        return out

    apply.admin.request = request_then_read
    assert put(apply, ev("Modified", "Namespaces", "acme/orders", {"retention_policies": RETENTION,
                                                                   "message_ttl_in_seconds": 45}, "B", 200)) == []
    assert seen == [("Modified", "Namespaces", "acme/orders", (200, "B"))]  # once, with B's stamp
    held = a.namespaces["acme/orders"]
    assert stamp_of(held) == (200, "B") and "lastUpdatedPending" not in held["properties"]
    assert held["retention_policies"] == RETENTION and held["message_ttl_in_seconds"] == 45
    assert watch.metrics()["metadata.pending.skipped"] >= 2 and watch.metrics()["metadata.stamps.written"] == 0


def test_an_apply_that_failed_half_way_is_finished_when_the_event_comes_again(admins):
    b = admins()
    with_ns(b, stamp=(100, "B"), retention_policies={"retentionTimeInMinutes": 1, "retentionSizeInMB": 1})
    task = sink(b)
    event = ev("Modified", "Namespaces", "acme/orders", {"retention_policies": RETENTION, "message_ttl_in_seconds": 45},
               "A", 200)
    original, failed = task.admin.request, []

    def fail_the_marker_removal(method, path, body=None, **kw):
        if method == "DELETE" and path.endswith("/property/lastUpdatedPending") and not failed:
            failed.append(path)
            raise RetriableError("injected: connection reset")
        return original(method, path, body, **kw)

    task.admin.request = fail_the_marker_removal
    [(_, error)] = put(task, event)
    assert isinstance(error, RetriableError)
    assert stamp_of(b.namespaces["acme/orders"]) == (200, "A")  # stamped, but the marker is still there
    assert put(task, event) == []  # not taken for a duplicate: finished
    assert "lastUpdatedPending" not in b.namespaces["acme/orders"]["properties"]
    assert task.metrics()["metadata.applied"] == 1 and task.metrics()["metadata.duplicate"] == 0
    assert put(task, event) == [] and task.metrics()["metadata.duplicate"] == 1
    assert strip_stamp({"properties": {"lastUpdatedPending": "1", "x": "y"}}) == {"properties": {"x": "y"}}
