"""Run pipelines through the real driver and Spark executor inside the test process."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from connect.source.gaps import is_bookkeeping_key
from worker.pipeline import parse_pipeline
from worker.runtime.driver import Driver
from worker.runtime.spark import SparkExecutor
from worker.stores.store import OffsetStore


def kafka_pipeline(name: str, source: str, target: str, **extra: Any):
    config = {"source.connector.class": "kafka", "source.bootstrap.servers": source,
              "sink.connector.class": "kafka", "sink.bootstrap.servers": target,
              "epoch.max.ms": "1500", "source.refresh.topics.interval.ms": "500"}
    config.update({k: str(v) for k, v in extra.items()})
    return parse_pipeline({"name": name, "config": config})


def pair_pipeline(name: str, source: dict, sink: dict, **extra):
    """A pipeline config from source and sink keys (prefixed here), 1.5 s epochs unless ``extra`` says."""
    from worker.pipeline import parse_pipeline

    config = {"epoch.max.ms": "1500", **{f"source.{k}": v for k, v in source.items()},
              **{f"sink.{k}": v for k, v in sink.items()}}
    config.update({k: str(v) for k, v in extra.items()})
    return parse_pipeline({"name": name, "config": {k: str(v) for k, v in config.items()}})


def source_offsets(offsets: Mapping[str, Any]) -> dict:
    """``offsets`` without the gap bookkeeping kept beside them (see :func:`partition_offsets`)."""
    return {k: v for k, v in offsets.items() if not is_bookkeeping_key(k)}


def partition_offsets(offsets: Mapping[str, Any]) -> list:
    """The source partitions' offsets, without the gap bookkeeping kept beside them (a Kafka source's
    topic identities, gap ledgers: ``connect.source.gaps``)."""
    return [v for k, v in offsets.items() if not is_bookkeeping_key(k)]


def make_driver(spark, data_dir: Path, *pipelines, hosting: str = "shared", hosts: int = 0) -> Driver:
    return Driver(SparkExecutor(spark, hosting=hosting, hosts=hosts), OffsetStore(data_dir), list(pipelines))


def committed_total(driver: Driver) -> int:
    return sum(rt.records_total for rt in driver.runtimes)


def committed_positions(driver: Driver) -> int:
    """Records behind the committed source offsets (sum of offset + 1 over every partition)."""
    return sum(o["offset"] + 1 for rt in driver.runtimes for o in partition_offsets(rt.offsets) if o)


def run_until(driver: Driver, expected: int, max_epochs: int = 60) -> int:
    """Run epochs until ``expected`` records were committed; fail on any FAILED pair."""
    put = transient = retries = 0
    in_flight: list[int] = []
    reasons: dict[str, int] = {}
    for _ in range(max_epochs):
        results = driver.run_epoch()
        failed = [r.trace for r in results if r.state != "RUNNING"]
        assert not failed, failed[0]
        for r in results:
            put += r.stats.get("records", 0)
            transient += r.stats.get("transient", 0)
            retries += r.stats.get("retries", 0)
            for reason, n in r.stats.get("failure_reasons", {}).items():
                reasons[reason] = reasons.get(reason, 0) + n
        in_flight = [r.stats.get("in_flight", 0) for r in results]
        if committed_total(driver) >= expected:
            return committed_total(driver)
    # Enough to tell a source that stopped delivering from a sink whose acknowledgements stopped.
    raise AssertionError(f"only {committed_total(driver)} of {expected} records after {max_epochs} epochs; "
                         f"{put} put to the sink, {transient} transient failures, {retries} retries, "
                         f"in flight at the end {in_flight}, reasons {dict(list(reasons.items())[:3])}")


def committed_in_store(data_dir: Path) -> int:
    """Records committed in a data directory's offset store (sum of offset + 1), read by a separate process."""
    import sqlite3

    import orjson

    db = Path(data_dir) / "offsets.sqlite"
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        try:
            rows = conn.execute("SELECT partition, offset FROM offsets").fetchall()
        except sqlite3.OperationalError:  # the worker created the file and not yet its table
            return 0
    return sum(orjson.loads(r[1])["offset"] + 1 for r in rows if not is_bookkeeping_key(r[0]))


def assert_delivered_in_order(indexes: list[int], expected: list[int], what: str = "") -> None:
    """Every expected record arrived, and the first copies in source order. At-least-once allows a
    re-send to repeat records (a transient failure, an epoch deadline), never a gap or reordering."""
    got = set(indexes)
    missing = [i for i in expected if i not in got]
    assert not missing, f"{what}: {len(missing)} record(s) missing, first {missing[:5]}"
    assert got == set(expected), f"{what}: unexpected records {sorted(got - set(expected))[:5]}"
    first: dict[int, int] = {}
    for pos, i in enumerate(indexes):
        first.setdefault(i, pos)
    order = [first[i] for i in expected]
    assert order == sorted(order), f"{what}: first copies out of source order"


def first_copies_out_of_order(indexes: list[int]) -> int:
    """How many records' first copy came after the first copy of a record that followed them in
    the source (``indexes``: source positions in arrival order, one partition or key; repeats
    are re-sent copies, allowed). 0 means per-partition (so per-key) order held."""
    seen: set[int] = set()
    top, broken = -1, 0
    for i in indexes:
        if i in seen:
            continue
        seen.add(i)
        if i < top:
            broken += 1
        else:
            top = i
    return broken
