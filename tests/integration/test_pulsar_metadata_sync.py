"""PIP-136 over the wire: Pulsar metadata kept alike in clusters that share no metadata store.

Two Apache Pulsar standalone clusters ``a`` and ``b`` (``apache_pulsar_pair``; a third, ``c``, joins
later), each with its own RocksDB metadata store, carry the event topics, and each one's metadata is
read and written through its real admin REST API. Each cluster knows the other (``clusters``, as an
operator registers them for geo-replication: a tenant allowed on both names both). Per cluster X,
run by the real driver on Spark:

- ``pulsar-metadata`` source (X's admin) -> ``pulsar`` sink: X's event topic;
- mirrors of the event topics a -> b and b -> a (``cluster.alias`` on both sides: no loops);
- ``pulsar`` source (X's event topic) -> ``pulsar-metadata`` sink (X's admin).

Shown: the initial state converges (a's tenant and namespace reach b; an unstamped default
namespace settles on a's version, the smaller name; system tenants stay apart); a policy changed on
a reaches b; the same policy changed in a and b while neither had seen the other's change converges
to the later stamp's value everywhere, and the earlier one is counted stale where it arrives; a later
update in b wins everywhere; a third cluster, added later with only a source -> sink pipeline
reading a's event topic from its end, converges through the periodic snapshots.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import orjson
import pytest
from pipeline_util import make_driver, pair_pipeline
from pulsar_brokers import register

from connect.plugins import register_plugin
from connectors.pulsar.metadata.admin import PulsarAdmin
from connectors.pulsar.metadata.stamps import PENDING, stamp_of
from worker.embedded import ApachePulsar

pytestmark = pytest.mark.timeout(900)

register_plugin("pulsar-metadata-source", "connectors.pulsar.metadata:PulsarMetadataSourceConnector")
register_plugin("pulsar-metadata-sink", "connectors.pulsar.metadata:PulsarMetadataSinkConnector")

FAST = {"epoch.max.ms": "500"}
TAIL = {"reader.stall.check.ms": "1000"}  # readers tailing the event topics: reopen a stalled one after 1 s, not 5


def retention(minutes: int, mb: int) -> dict:
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": mb}


@pytest.fixture(scope="module")
def third_pulsar(tmp_path_factory):
    root = tmp_path_factory.mktemp("apache-pulsar-c")
    c = ApachePulsar(root / "c", log_path=root / "c.log", cluster="c").start()
    yield c
    c.stop()


@pytest.fixture
def clusters(apache_pulsar_pair, third_pulsar):
    """a, b and c knowing one another; on a a tenant ``acme-<n>`` allowed on a, b and c with a namespace
    ``orders``; b's default namespace carrying a property a's has not; each system namespace its own
    property. Everything made here is removed at the end (the pair is shared by the session)."""
    a, b = apache_pulsar_pair
    c = third_pulsar
    register(a, b, c)
    register(b, a, c)
    register(c, a, b)
    tenant = f"acme-{time.monotonic_ns() % 10**9}"
    with PulsarAdmin(a.admin_url) as admin:
        admin.create_tenant(tenant, {"adminRoles": ["ops"], "allowedClusters": ["a", "b", "c"]})
        admin.create_namespace(f"{tenant}/orders", {})
        admin.set_retention(f"{tenant}/orders", retention(10, 10))
        admin.set_message_ttl(f"{tenant}/orders", 60)
        admin.set_properties("pulsar/system", {"who": "a"})
    with PulsarAdmin(b.admin_url) as admin:
        admin.set_properties("public/default", {"env": "b"})
        admin.set_properties("pulsar/system", {"who": "b"})
    yield {"a": a, "b": b, "c": c}, tenant
    for broker in (a, b, c):
        with PulsarAdmin(broker.admin_url) as admin:
            if admin.tenant(tenant) is not None:
                admin.delete_namespace(f"{tenant}/orders")  # no topics there: no force needed
                admin.delete_tenant(tenant)
            for namespace in ("public/default", "pulsar/system"):
                for key in ("env", "who", "lastUpdatedBy", "lastUpdatedTime"):
                    admin.remove_property(namespace, key)


def apply_pipeline(name: str, events: ApachePulsar, topic: str, into: ApachePulsar, start: str = "earliest"):
    """``events``' event topic read into ``into``'s admin API."""
    return pair_pipeline(name, {"connector.class": "pulsar", "service.url": events.service_url, "topics": topic,
                                "start.position": start, **TAIL},
                         {"connector.class": "pulsar-metadata", "admin.url": into.admin_url,
                          "cluster.name": into.cluster}, **FAST)


class Rounds:
    """Run the connectors in rounds: each round, one epoch of every connector of every driver in
    ``drivers`` (append a driver to add its connectors), all at once, and the next round when they
    are all done. Not ``Driver.run``: its connectors resubmit an epoch as soon as one ends, and
    Spark's FAIR scheduler breaks ties between equally served pools by name, so on the 4 cores of
    the test session the connectors whose names sort last (the watchers here) would hardly ever get
    a core. ``pause`` returns once the round under way has ended; ``resume`` goes on."""

    def __init__(self, driver):
        self.drivers = [driver]
        self._stop, self._run, self._idle = threading.Event(), threading.Event(), threading.Event()
        self._run.set()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self._run.is_set():
                self._idle.set()
                self._run.wait(0.2)
                continue
            self._idle.clear()
            turns = [threading.Thread(target=rt.run_epoch, args=(d.executor,), daemon=True)
                     for d in list(self.drivers) for rt in d.runtimes]
            for t in turns:
                t.start()
            for t in turns:
                t.join()

    def pause(self) -> None:
        self._run.clear()
        assert self._idle.wait(120), "the round under way did not end"

    def resume(self) -> None:
        self._run.set()


@contextmanager
def rounds(driver):
    runner = Rounds(driver)
    runner._thread.start()
    try:
        yield runner
    finally:
        runner._stop.set()
        runner._run.set()
        runner._thread.join(60)
        for d in runner.drivers:
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
        time.sleep(0.5)


def settled(name: str, *brokers: ApachePulsar):
    """(retention, stamp) when every broker's namespace holds the same pair, read in one snapshot per
    broker, with no half-applied event (``lastUpdatedPending``), and the same a second later; else
    None. An applier writes fields and stamp with separate requests, so single reads can mix them."""
    def once():
        snaps = [ns(x, name) for x in brokers]
        pairs = {orjson.dumps([p.get("retention_policies"), stamp_of(p)]) for p in snaps}
        pending = any(PENDING in (p.get("properties") or {}) for p in snaps)
        return None if len(pairs) != 1 or pending else orjson.loads(pairs.pop())

    first = once()
    if first is None or first[1] is None:
        return None
    time.sleep(1.0)
    return (first[0], tuple(first[1])) if once() == first else None


def ns(broker: ApachePulsar, name: str) -> dict:
    """The namespace's Policies as the real admin API answers them ({} when it is not there)."""
    with PulsarAdmin(broker.admin_url) as admin:
        return admin.policies(name) or {}


def props(broker: ApachePulsar, name: str) -> dict:
    """The namespace's properties without the stamp."""
    return {k: v for k, v in (ns(broker, name).get("properties") or {}).items()
            if k not in ("lastUpdatedBy", "lastUpdatedTime", "lastUpdatedPending")}


def sink_metrics(driver, name: str) -> dict:
    [rt] = [rt for rt in driver.runtimes if rt.name == name]
    return (rt.tasks[0].last.metrics or {}) if rt.tasks[0].last else {}


def test_pulsar_metadata_sync_converges_over_the_wire(clusters, spark, tmp_path, unique):
    brokers, tenant = clusters
    orders = f"{tenant}/orders"
    a, b, c = brokers["a"], brokers["b"], brokers["c"]
    topic = f"md-{unique.rsplit('-', 1)[1]}"  # persistent://public/default/md-<pid> in each cluster
    pipelines = []
    for x in (a, b):
        pipelines.append(pair_pipeline(
            f"{unique}-watch-{x.cluster}", {"connector.class": "pulsar-metadata", "admin.url": x.admin_url,
                                            "cluster.name": x.cluster, "topic": topic, "poll.interval.ms": "200",
                                            "snapshot.interval.ms": "2000"},
            {"connector.class": "pulsar", "service.url": x.service_url}, **FAST))
        pipelines.append(apply_pipeline(f"{unique}-apply-{x.cluster}", x, topic, x))
    for s, t in ((a, b), (b, a)):
        pipelines.append(pair_pipeline(
            f"{unique}-mirror-{s.cluster}{t.cluster}", {"connector.class": "pulsar", "service.url": s.service_url,
                                                        "topics": topic, "start.position": "earliest",
                                                        "cluster.alias": s.cluster, **TAIL},
            {"connector.class": "pulsar", "service.url": t.service_url, "cluster.alias": t.cluster}, **FAST))
    driver = make_driver(spark, tmp_path / "ab", *pipelines)
    with rounds(driver) as runner:
        # initial state: a's tenant and namespace reach b; public/default (unstamped in both) settles on a's
        wait_for(lambda: ns(b, orders).get("retention_policies") == retention(10, 10)
                 and props(b, "public/default") == {}, 180, "the initial sync", [driver])
        with PulsarAdmin(b.admin_url) as admin_b:
            assert admin_b.tenant(tenant)["adminRoles"] == ["ops"]
        assert ns(b, orders)["message_ttl_in_seconds"] == 60
        assert ns(b, orders)["replication_clusters"] == ["b"]  # b's own: Policies naming a's things stay a's
        assert props(a, "pulsar/system") == {"who": "a"}  # system tenants are never synced
        assert props(b, "pulsar/system") == {"who": "b"}

        # a policy changed on a appears on b
        with PulsarAdmin(a.admin_url) as admin_a:
            admin_a.set_message_ttl(orders, 90)
        wait_for(lambda: ns(b, orders).get("message_ttl_in_seconds") == 90, 60, "a's new TTL on b", [driver])

        # the same policy changed in a and in b while neither has seen the other's change: the later
        # stamp wins everywhere, and the earlier change is stale where it arrives
        runner.pause()
        with PulsarAdmin(a.admin_url) as admin_a, PulsarAdmin(b.admin_url) as admin_b:
            admin_a.set_retention(orders, retention(60, 100))
            admin_b.set_retention(orders, retention(120, 200))
        runner.resume()
        values = {"a": retention(60, 100), "b": retention(120, 200)}
        value, (when, winner) = wait_for(lambda: settled(orders, a, b), 180, "one value everywhere", [driver])
        assert value == values[winner], (value, winner)
        loser = "b" if winner == "a" else "a"
        assert ns(a, orders)["retention_policies"] == values[winner]
        wait_for(lambda: sink_metrics(driver, f"{unique}-apply-{winner}").get("metadata.stale", 0) >= 1, 30,
                 f"{loser}'s earlier change stale in {winner}")
        time.sleep(3)  # a snapshot round later, nothing has moved
        assert ns(a, orders)["retention_policies"] == ns(b, orders)["retention_policies"] == values[winner]

        # a later update in b (a plain admin call, stamped by b's watcher) wins everywhere
        with PulsarAdmin(b.admin_url) as admin_b:
            admin_b.set_retention(orders, retention(240, 30))
        wait_for(lambda: ns(a, orders).get("retention_policies") == retention(240, 30)
                 and stamp_of(ns(a, orders)) == stamp_of(ns(b, orders)), 60, "b's later update in a", [driver])
        later = stamp_of(ns(a, orders))
        assert later[1] == "b" and later[0] > when

        # c joins later, reading a's event topic from its end: the periodic snapshots bring it everything
        joiner = make_driver(spark, tmp_path / "c", apply_pipeline(f"{unique}-apply-c", a, topic, c, start="latest"))
        runner.drivers.append(joiner)
        # Converged = the whole snapshot applied: its events apply one by one, so the tenant's namespace
        # can be in c a moment before public/default's stamp.
        wait_for(lambda: ns(c, orders).get("retention_policies") == retention(240, 30)
                 and stamp_of(ns(c, orders)) == later and props(c, "public/default") == {}
                 and ns(c, "public/default").get("properties", {}).get("lastUpdatedBy") == "a", 120, "c converged",
                 runner.drivers)
        assert ns(c, orders)["message_ttl_in_seconds"] == 90
        assert sink_metrics(joiner, f"{unique}-apply-c").get("metadata.invalid", 0) == 0
