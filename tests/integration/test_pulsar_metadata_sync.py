"""PIP-136 over the wire: Pulsar metadata kept alike in clusters that share no metadata store.

Two real pulsar-lite brokers (``pulsar_pair``) carry the event topics; pulsar-lite has no admin REST
API, so each cluster's metadata lives in an in-memory admin server (``tests/pulsar_admin.py``)
playing Pulsar's admin paths. Per cluster X in {A, B}, run by the real driver on Spark:

- ``pulsar-metadata`` source (X's admin) -> ``pulsar`` sink: X's event topic;
- mirrors of the event topics A -> B and B -> A (``cluster.alias`` on both sides: no loops);
- ``pulsar`` source (X's event topic) -> ``pulsar-metadata`` sink (X's admin).

Shown: the initial state converges (A's tenant and namespace reach B; an unstamped default
namespace settles on A's version, the smaller name; system tenants stay apart); the same policy
updated in A and B with different values at the SAME time converges to A's value everywhere; a
later update in B wins everywhere; a third cluster C, added later with only a source -> sink
pipeline reading A's event topic from its end, converges through the periodic snapshots.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import pytest
from pipeline_util import make_driver, pair_pipeline
from pulsar_admin import FakePulsarAdmin

from connect.plugins import register_plugin
from connectors.pulsar.metadata import PulsarAdmin, stamp_of

pytestmark = pytest.mark.timeout(180)

register_plugin("pulsar-metadata-source", "connectors.pulsar.metadata:PulsarMetadataSourceConnector")
register_plugin("pulsar-metadata-sink", "connectors.pulsar.metadata:PulsarMetadataSinkConnector")

FAST = {"epoch.max.ms": "500"}
TAIL = {"reader.stall.check.ms": "1000"}  # readers tailing the event topics: reopen a stalled one after 1 s, not 5


def retention(minutes: int, mb: int) -> dict:
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": mb}


@pytest.fixture
def admins():
    a, b, c = FakePulsarAdmin().start(), FakePulsarAdmin().start(), FakePulsarAdmin().start()
    a.tenants.update({"pulsar": {"adminRoles": []}, "public": {"adminRoles": []},
                      "acme": {"adminRoles": ["ops"], "allowedClusters": ["a", "b"]}})
    a.namespaces.update({"pulsar/system": {"message_ttl_in_seconds": 1}, "public/default": {},
                         "acme/orders": {"retention_policies": retention(10, 10), "message_ttl_in_seconds": 60}})
    b.tenants.update({"pulsar": {"adminRoles": []}, "public": {"adminRoles": []}})
    b.namespaces.update({"pulsar/system": {"message_ttl_in_seconds": 2}, "public/default": {"message_ttl_in_seconds": 30}})
    yield {"A": a, "B": b, "C": c}
    for server in (a, b, c):
        server.stop()


def apply_pipeline(name: str, broker, topic: str, admin: FakePulsarAdmin, cluster: str, start: str = "earliest"):
    return pair_pipeline(name, {"connector.class": "pulsar", "service.url": broker.service_url, "topics": topic,
                                "start.position": start, **TAIL},
                         {"connector.class": "pulsar-metadata", "admin.url": admin.url, "cluster.name": cluster}, **FAST)


@contextmanager
def rounds(driver):
    """Run the connectors in rounds: each round, one epoch of every connector of every driver in
    ``drivers`` (the list it yields: append a driver to add its connectors), all at once, and the
    next round when they are all done. Not ``Driver.run``: its connectors resubmit an epoch as soon
    as one ends, and Spark's FAIR scheduler breaks ties between equally served pools by name, so on
    the 4 cores of the test session the connectors whose names sort last (the watchers here) would
    hardly ever get a core."""
    drivers, stop = [driver], threading.Event()

    def loop() -> None:
        while not stop.is_set():
            turns = [threading.Thread(target=rt.run_epoch, args=(d.executor,), daemon=True)
                     for d in list(drivers) for rt in d.runtimes]
            for t in turns:
                t.start()
            for t in turns:
                t.join()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield drivers
    finally:
        stop.set()
        thread.join(60)
        for d in drivers:
            d.close()


def wait_for(check, timeout: float, what: str, drivers=()):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        for driver in drivers:
            failed = [t.last.trace for rt in driver.runtimes for t in rt.tasks if t.last and t.last.state != "RUNNING"]
            assert not failed, failed[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


def ns(admin: FakePulsarAdmin, name: str = "acme/orders") -> dict:
    return admin.snapshot()[1].get(name) or {}


def sink_metrics(driver, name: str) -> dict:
    [rt] = [rt for rt in driver.runtimes if rt.name == name]
    return (rt.tasks[0].last.metrics or {}) if rt.tasks[0].last else {}


def test_pulsar_metadata_sync_converges_over_the_wire(pulsar_pair, admins, spark, tmp_path, unique):
    brokers = {"A": pulsar_pair[0], "B": pulsar_pair[1]}
    topic = f"md-{unique.rsplit('-', 1)[1]}"  # persistent://public/default/md-<pid> in each pulsar-lite
    pipelines = []
    for x in ("A", "B"):
        pipelines.append(pair_pipeline(
            f"{unique}-watch-{x}", {"connector.class": "pulsar-metadata", "admin.url": admins[x].url, "cluster.name": x,
                                    "topic": topic, "poll.interval.ms": "200", "snapshot.interval.ms": "2000"},
            {"connector.class": "pulsar", "service.url": brokers[x].service_url}, **FAST))
        pipelines.append(apply_pipeline(f"{unique}-apply-{x}", brokers[x], topic, admins[x], x))
    for s, t in (("A", "B"), ("B", "A")):
        pipelines.append(pair_pipeline(
            f"{unique}-mirror-{s}{t}", {"connector.class": "pulsar", "service.url": brokers[s].service_url, "topics": topic,
                                        "start.position": "earliest", "cluster.alias": s, **TAIL},
            {"connector.class": "pulsar", "service.url": brokers[t].service_url, "cluster.alias": t}, **FAST))
    a, b, c = admins["A"], admins["B"], admins["C"]
    driver = make_driver(spark, tmp_path / "ab", *pipelines)
    with rounds(driver) as drivers:
        # initial state: A's tenant and namespace reach B; public/default (unstamped in both) settles on A's
        wait_for(lambda: ns(b).get("retention_policies") == retention(10, 10) and "acme" in b.snapshot()[0]
                 and ns(b, "public/default").get("message_ttl_in_seconds", "unset") is None, 60, "the initial sync",
                 [driver])
        assert b.snapshot()[0]["acme"]["adminRoles"] == ["ops"] and ns(b)["message_ttl_in_seconds"] == 60
        assert ns(a, "pulsar/system") == {"message_ttl_in_seconds": 1}  # system tenants are never synced
        assert ns(b, "pulsar/system") == {"message_ttl_in_seconds": 2}

        # (a) the same policy updated in A and B at the same time with different values: A's wins everywhere
        t = int(time.time() * 1000) - 1
        a.local_update("namespace", "acme/orders", {"retention_policies": retention(60, 100), "properties": {
            "lastUpdatedBy": "A", "lastUpdatedTime": str(t)}})
        b.local_update("namespace", "acme/orders", {"retention_policies": retention(120, 200), "properties": {
            "lastUpdatedBy": "B", "lastUpdatedTime": str(t)}})
        wait_for(lambda: ns(a).get("retention_policies") == ns(b).get("retention_policies") == retention(60, 100)
                 and stamp_of(ns(b)) == (t, "A"), 30, "A's concurrent update everywhere", [driver])
        time.sleep(3)  # a snapshot round later, nothing has moved
        assert ns(a)["retention_policies"] == ns(b)["retention_policies"] == retention(60, 100)
        wait_for(lambda: sink_metrics(driver, f"{unique}-apply-A").get("metadata.stale", 0) >= 1, 10,
                 "B's event stale in A")

        # a later update in B (a plain pulsar-admin call, stamped by B's watcher) wins everywhere
        with PulsarAdmin(b.url) as admin_b:
            admin_b.set_retention("acme/orders", retention(240, 30))
        wait_for(lambda: ns(a).get("retention_policies") == retention(240, 30) and stamp_of(ns(a)) == stamp_of(ns(b)),
                 30, "B's later update in A", [driver])
        later = stamp_of(ns(a))
        assert later[1] == "B" and later[0] > t

        # (b) C joins later, reading A's event topic from its end: the periodic snapshots bring it everything
        joiner = make_driver(spark, tmp_path / "c", apply_pipeline(f"{unique}-apply-C", brokers["A"], topic, c, "C",
                                                                   start="latest"))
        drivers.append(joiner)
        # Converged = the whole snapshot applied: its events apply one by one, so acme/orders can be in
        # C a moment before public/default (a CI run read C between the two).
        wait_for(lambda: ns(c).get("retention_policies") == retention(240, 30) and stamp_of(ns(c)) == later
                 and "public/default" in c.snapshot()[1], 40, "C converged", drivers)
        tenants_c, namespaces_c = c.snapshot()
        assert set(tenants_c) == {"acme", "public"} and set(namespaces_c) == {"acme/orders", "public/default"}
        assert namespaces_c["acme/orders"]["message_ttl_in_seconds"] == 60
        assert sink_metrics(joiner, f"{unique}-apply-C").get("metadata.invalid", 0) == 0
