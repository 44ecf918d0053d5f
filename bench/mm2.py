"""MirrorMaker 2 side by side with this project: the same two Apache Kafka clusters, the same run.

Two Apache Kafka 4.x clusters (``worker.embedded.ApacheKafka``, or ``--clusters A,B`` already
running). Contenders, each a process of its own measured from outside at the target topic by the
watcher of ``bench/e2e.py`` (whose helpers this reuses):

- ``mm2-N``: MirrorMaker 2 in dedicated mode (``org.apache.kafka.connect.mirror.MirrorMaker``,
  connect-mirror from Maven Central, ``worker.brokers.mirror_maker``) with ``tasks.max=N``, run
  with the JVM options of Kafka's ``bin/connect-mirror-maker.sh`` (``-Xms256M -Xmx2G``, G1). It is
  set up as a plain copier, like our mirror: no heartbeats, checkpoints, offset syncs or ACL sync.
  Every run is a fresh MM2 deployment: a source cluster alias of its own, so its Connect topics,
  its stored offsets and its target topic (``<alias>.<topic>``) are new, and it starts at the start;
- ``connect-N``: ``connect run`` (Kafka -> Kafka, N task pairs), a fresh data directory each run;
- ``raw``: the raw confluent-kafka consume -> produce loop (the floor).

Measured:

- throughput: one backlog of ``--records`` records of ``--size`` B (2 partitions) is written
  once; every contender mirrors it from the start. Steady state = records between the 10% and 90%
  arrival marks over the time between them. Also the time from launch to the first record at the
  target, the CPU per record of the contender's whole process tree between those marks (MM2: its
  JVM; ours: the `connect run` process, its Spark JVM and Python workers; ``bench_util.tree_cpu``)
  and the peak resident memory of that tree over the whole run (the sum over its processes,
  sampled every 0.25 s; ``bench_util.PeakRss``);
- latency (contenders with 1 task and the raw loop): a producer process writes ``--rate`` msg/s
  for ``--seconds`` s into a fresh topic once the mirror has moved a probe record; latency =
  arrival at the target consumer - record timestamp (set at produce, kept by both mirrors), the
  first 5 s left out;
- many topics (``--only topics``; ``bench/mm2_topics.py``): ``--topics`` (200) topics at
  ``--topic-rate`` (50) msg/s each, one MM2 with a topic regex covering them against one connector
  with ``source.topics.regex`` and the raw loop subscribed to the regex: latency per topic, cores,
  peak resident memory, time until every topic flows.

``--exactly-once`` runs both with exactly-once: MM2 ``B.exactly.once.source.support=enabled``
(KIP-618 in dedicated mode), ours ``exactly.once.support=required``; the watchers always read
``read_committed``.

Each measure runs ``--rounds`` rounds; within a pair, who goes first alternates every round.
Figures are medians of rounds; ratios are medians of the per-round ratios.

Usage: python bench/mm2.py [--records 3000000] [--size 100] [--tasks 1,2] [--rounds 3] [--rate 20000]
       [--seconds 25] [--topics 200] [--topic-rate 50] [--only throughput|latency|topics] [--exactly-once]
       [--no-raw] [--clusters A,B] [--json out.json] [--mm2-set KEY=VALUE] [--set KEY=VALUE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka.admin import AdminClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import e2e  # noqa: E402  (bench/e2e.py: this script's directory comes first on sys.path)
import mm2_topics  # noqa: E402
from bench_util import PeakRss, apache_kafka_pair, median_of, ratio_of  # noqa: E402

from worker.brokers.mirror_maker import SHIPPED_HEAP, SHIPPED_JVM_FLAGS, mm2_properties, start_mirror_maker  # noqa: E402

TASKS = (1, 2)  # the task counts `connect run` has a contender for (bench/e2e.py: connect-1, connect-2)
# MM2 as a plain copier, the job our mirror does: no heartbeats, checkpoints, offset syncs, ACL sync
MM2_PLAIN = {"emit.heartbeats.enabled": "false", "emit.checkpoints.enabled": "false",
             "emit.offset-syncs.enabled": "false", "sync.topic.acls.enabled": "false"}
MM2_EXTRA: dict[str, str] = {}  # --mm2-set
EXACTLY_ONCE = False  # --exactly-once


def start_mm2(kind: str, a: str, b: str, topics: str, work: Path, tag: str):
    """MM2 (``mm2-N``: ``tasks.max=N``) mirroring ``topics`` (a list or regex) from ``a`` to ``b``; its source
    cluster alias is ``tag``, so its target topics are ``<tag>.<topic>``."""
    props = mm2_properties(tag, a, "B", b, topics, {"tasks.max": kind[4:], **MM2_PLAIN, **MM2_EXTRA})
    return start_mirror_maker(props, work / tag, heap=SHIPPED_HEAP, flags=SHIPPED_JVM_FLAGS, log_level="WARN")


def launch(kind: str, a: str, b: str, topic: str, work: Path, tag: str):
    """Start contender ``kind`` mirroring ``topic`` from ``a`` to ``b``: (process, target topic, launch
    time). ``tag``: alphanumeric, unique in the run (MM2's source alias; our target topic)."""
    if kind.startswith("mm2-"):
        target = f"{tag}.{topic}"  # MM2's DefaultReplicationPolicy
        e2e._create(b, target)  # the watcher fetches from the first record on
        launched = time.time()
        return start_mm2(kind, a, b, topic, work, tag), target, launched
    target = f"{tag}-out"
    e2e._create(b, target)
    launched = time.time()
    return e2e.start_mirror(kind, a, b, topic, target, work, None), target, launched


def _delete(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the futures are done
    for f in admin.delete_topics([topic], operation_timeout=30).values():
        f.result()


def mm2_errors(kind: str, work: Path, tag: str) -> str:
    """MM2's ERROR lines (with the line after each: the reason) from its log, for a failed run; the
    checkpoint connector's refusal to run with checkpoints off is expected and left out."""
    log = work / tag / "mm2.log"
    if not kind.startswith("mm2-") or not log.exists():
        return ""
    lines = log.read_text(errors="replace").splitlines()
    found = [f"{line} {lines[i + 1] if i + 1 < len(lines) else ''}" for i, line in enumerate(lines)
             if " ERROR " in line and "MirrorCheckpointConnector" not in line]
    return f"; MM2's log: {' | '.join(found[:3])}" if found else ""


def throughput_run(kind: str, a: str, b: str, topic: str, records: int, work: Path, tag: str) -> dict[str, float]:
    """One contender mirroring the backlog. With exactly-once, the rate and CPU marks come from a
    ``read_uncommitted`` watcher (what the contender writes: a ``read_committed`` one sees whole
    transactions at once, so its 10 % and 90 % marks can fall on two commits) and a second watcher,
    ``read_committed``, times when the last record became visible (``visible_s`` after launch)."""
    proc, target, launched = launch(kind, a, b, topic, work, tag)
    rss = PeakRss(proc.pid)
    rss.start()
    cpu: dict = {}
    visible: dict = {}
    timeout = 300 + records / 5000

    def watch_committed() -> None:
        try:
            e2e.watch(b, target, records, timeout, proc, latency=False, committed=True)
            visible["at"] = time.time()
        except RuntimeError as e:
            visible["error"] = e

    committed = threading.Thread(target=watch_committed, daemon=True)
    if EXACTLY_ONCE:
        committed.start()
    try:
        arrivals = e2e.watch(b, target, records, timeout, proc, latency=False, cpu=cpu, committed=not EXACTLY_ONCE)
        if EXACTLY_ONCE:
            committed.join(timeout)
            if "at" not in visible:
                raise RuntimeError(f"not every record became visible to read_committed: {visible.get('error')}")
    except RuntimeError as e:
        raise RuntimeError(f"{kind}: {e}{mm2_errors(kind, work, tag)}") from e
    finally:
        peak = rss.stop()
        e2e.stop(proc)
    _delete(b, target)
    out = {"msg_s": e2e.steady_rate(arrivals, records), "first_s": arrivals[0][0] - launched,
           "cpu_us": (cpu[0.9] - cpu[0.1]) / max(cpu[("n", 0.9)] - cpu[("n", 0.1)], 1) * 1e6,
           "rss_mb": peak / 2**20}
    seen = ""
    if EXACTLY_ONCE:
        out["visible_s"] = visible["at"] - launched
        seen = f", all visible {out['visible_s']:5.1f} s after launch"
    print(f"    {kind:<10} {out['msg_s']:>10,.0f} msg/s steady, first record {out['first_s']:5.1f} s after launch, "
          f"CPU {out['cpu_us']:6.2f} us/record, peak RSS {out['rss_mb']:6.0f} MiB{seen}", flush=True)
    return out


def latency_run(kind: str, a: str, b: str, rate: int, seconds: int, size: int, work: Path, tag: str
                ) -> dict[str, float]:
    topic = f"{tag}-src"
    e2e._create(a, topic)
    proc, target, _ = launch(kind, a, b, topic, work, tag)
    try:
        e2e._wait_started(b, target, a, topic, proc, timeout=300)
        lat = e2e.paced_latencies(a, topic, b, target, rate, seconds, size, work / f"{tag}-producer.log", proc)
    except RuntimeError as e:
        raise RuntimeError(f"{kind}: {e}{mm2_errors(kind, work, tag)}") from e
    finally:
        e2e.stop(proc)
    out = {"p50_ms": e2e.percentile(lat, 0.5), "p99_ms": e2e.percentile(lat, 0.99), "max_ms": max(lat)}
    print(f"    {kind:<10} p50 {out['p50_ms']:6.0f} ms  p99 {out['p99_ms']:6.0f} ms  max {out['max_ms']:6.0f} ms",
          flush=True)
    return out


def order(kinds: list[str], rnd: int) -> list[str]:
    """``kinds`` as given (raw first, then MM2 before ours for each task count) in even rounds; odd
    rounds put ours before MM2 in each pair and the raw loop last."""
    if rnd % 2 == 0:
        return kinds
    swap = {f"mm2-{t}": f"connect-{t}" for t in TASKS} | {f"connect-{t}": f"mm2-{t}" for t in TASKS}
    return [swap[k] for k in kinds if k != "raw"] + (["raw"] if "raw" in kinds else [])


RATIO_KEYS = {"msg_s": "throughput", "records_per_cpu_s": "records per CPU second", "cpu_us": "CPU per record",
              "rss_mb": "peak RSS", "first_s": "first record", "p50_ms": "p50 latency", "p99_ms": "p99 latency"}
FAN_KEYS = {"p50_ms": "p50", "p99_ms": "p99", "topic_p99_median_ms": "per-topic p99 median",
            "topic_p99_max_ms": "worst topic p99", "cores": "CPU cores", "rss_mb": "peak RSS",
            "all_flowing_s": "every topic flowing"}


def _fmt(v, f: str) -> str:
    return "-" if v is None else format(v, f)


def summary(thr: list[dict], lat: list[dict], tasks: list[int], raw: bool) -> dict:
    for r in thr:  # throughput per core: records per CPU second of the tree
        for v in r.values():
            v["records_per_cpu_s"] = 1e6 / v["cpu_us"] if v["cpu_us"] else float("nan")
    kinds = (["raw"] if raw else []) + [f"{s}-{t}" for t in tasks for s in ("mm2", "connect")]
    keys_t, keys_l = ("msg_s", "records_per_cpu_s", "cpu_us", "rss_mb", "first_s"), ("p50_ms", "p99_ms")
    medians = {k: {key: median_of(rounds, k, key) for rounds, keys in ((thr, keys_t), (lat, keys_l)) for key in keys}
               for k in kinds}
    pairs = [(f"connect-{t}", f"mm2-{t}") for t in tasks] + ([(f"connect-{t}", "raw") for t in tasks] if raw else [])
    ratios = {f"{top} / {bottom}": {key: ratio_of(rounds, top, bottom, key)
                                    for rounds, keys in ((thr, keys_t), (lat, keys_l)) for key in keys}
              for top, bottom in pairs}
    print()
    print(f"medians of {max(len(thr), len(lat))} round(s)")
    print(f"{'contender':<12}{'msg/s':>11}{'rec/CPU s':>11}{'CPU us/rec':>11}{'peak RSS MiB':>13}"
          f"{'first rec s':>12}{'p50 ms':>8}{'p99 ms':>8}")
    for k, m in medians.items():
        print(f"{k:<12}{_fmt(m['msg_s'], ',.0f'):>11}{_fmt(m['records_per_cpu_s'], ',.0f'):>11}"
              f"{_fmt(m['cpu_us'], '.2f'):>11}{_fmt(m['rss_mb'], '.0f'):>13}{_fmt(m['first_s'], '.1f'):>12}"
              f"{_fmt(m['p50_ms'], '.0f'):>8}{_fmt(m['p99_ms'], '.0f'):>8}")
    print()
    print("ratios, median of per-round ratios: " + ", ".join(RATIO_KEYS.values()))
    for label, r in ratios.items():
        print(f"{label:<22}" + "  ".join(f"{RATIO_KEYS[key]} {_fmt(v, '.2f')}" for key, v in r.items()))
    if any("visible_s" in v for r in thr for v in r.values()):  # exactly-once: when the last record was visible
        for k in kinds:
            medians[k]["visible_s"] = median_of(thr, k, "visible_s")
        for label, r in ratios.items():
            r["visible_s"] = ratio_of(thr, *label.split(" / "), "visible_s")
        print("all records visible to read_committed, s after launch (median): "
              + ", ".join(f"{k} {_fmt(medians[k]['visible_s'], '.1f')}" for k in kinds)
              + "; ratios: " + ", ".join(f"{label} {_fmt(r['visible_s'], '.2f')}" for label, r in ratios.items()))
    return {"median": medians, "ratios": ratios}


def fan_summary(fan: list[dict], task: int, raw: bool) -> dict:
    kinds = (["raw"] if raw else []) + [f"mm2-{task}", f"connect-{task}"]
    medians = {k: {key: median_of(fan, k, key) for key in FAN_KEYS} for k in kinds}
    pairs = [(f"connect-{task}", f"mm2-{task}")] + ([(f"connect-{task}", "raw")] if raw else [])
    ratios = {f"{top} / {bottom}": {key: ratio_of(fan, top, bottom, key) for key in FAN_KEYS} for top, bottom in pairs}
    print()
    print(f"many topics, medians of {len(fan)} round(s)")
    print(f"{'contender':<12}" + "".join(f"{label:>22}" for label in FAN_KEYS.values()))
    for k, m in medians.items():
        print(f"{k:<12}" + "".join(f"{_fmt(m[key], '.2f' if key == 'cores' else '.0f'):>22}" for key in FAN_KEYS))
    for label, r in ratios.items():
        print(f"{label:<22}" + "  ".join(f"{FAN_KEYS[key]} {_fmt(v, '.2f')}" for key, v in r.items()))
    return {"median": medians, "ratios": ratios}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=3_000_000, help="backlog of the throughput rounds")
    ap.add_argument("--size", type=int, default=100, help="value size, bytes")
    ap.add_argument("--tasks", default="1,2", help="MM2 tasks.max / our task pairs, of 1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=int, default=20_000, help="msg/s of the latency rounds")
    ap.add_argument("--seconds", type=int, default=25, help="length of a latency or many-topics run")
    ap.add_argument("--topics", type=int, default=200, help="topics of the many-topics rounds")
    ap.add_argument("--topic-rate", type=float, default=50, help="msg/s per topic of the many-topics rounds")
    ap.add_argument("--only", choices=["throughput", "latency", "topics"])
    ap.add_argument("--exactly-once", action="store_true",
                    help="both with exactly-once: MM2 B.exactly.once.source.support=enabled, ours "
                         "exactly.once.support=required (the watchers always read read_committed)")
    ap.add_argument("--no-raw", action="store_true", help="leave out the raw confluent-kafka loop")
    ap.add_argument("--clusters", metavar="A,B", help="bootstrap servers of two running clusters (default: start two)")
    ap.add_argument("--json", metavar="PATH", help="write parameters, every round and the summary as JSON")
    ap.add_argument("--mm2-set", action="append", default=[], metavar="KEY=VALUE", help="an mm2.properties key")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a key of our connector")
    args = ap.parse_args()
    try:
        tasks = [int(t) for t in args.tasks.split(",")]
    except ValueError:
        tasks = []
    if not tasks or set(tasks) - set(TASKS):
        ap.error(f"--tasks: a comma-separated list of {', '.join(map(str, TASKS))}, not {args.tasks!r}")
    if args.topics < 1 or args.topic_rate <= 0:
        ap.error("--topics must be at least 1 and --topic-rate above 0")
    if args.seconds <= e2e.WARMUP_S:
        ap.error(f"--seconds must be above the {e2e.WARMUP_S:g} s warm-up that latencies leave out, not {args.seconds}")
    for opt, kvs in (("--mm2-set", args.mm2_set), ("--set", args.set)):
        if bad := [kv for kv in kvs if "=" not in kv]:
            ap.error(f"{opt}: KEY=VALUE, not {bad[0]!r}")
    if args.exactly_once:
        global EXACTLY_ONCE
        EXACTLY_ONCE = True
        MM2_EXTRA["B.exactly.once.source.support"] = "enabled"
        e2e.EXTRA["exactly.once.support"] = "required"
    MM2_EXTRA.update(kv.split("=", 1) for kv in args.mm2_set)
    e2e.EXTRA.update(kv.split("=", 1) for kv in args.set)
    records = args.records - args.records % e2e.PARTITIONS
    kinds = (["raw"] if not args.no_raw else []) + [f"{s}-{t}" for t in tasks for s in ("mm2", "connect")]
    one = [k for k in kinds if k in ("raw", f"mm2-{tasks[0]}", f"connect-{tasks[0]}")]
    thr: list[dict] = []
    lat: list[dict] = []
    fan: list[dict] = []
    wants = {args.only} if args.only else {"throughput", "latency", "topics"}
    with ExitStack() as stack:
        a, b = apache_kafka_pair(stack, args.clusters)
        work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        run = f"m{int(time.time()) % 100000}"  # topic and alias prefix: runs on the same clusters never meet
        backlog = f"{run}-backlog"
        if "throughput" in wants:
            print(f"producing the backlog: {records:,} records of {args.size} B, {e2e.PARTITIONS} partitions...",
                  flush=True)
            e2e._create(a, backlog)
            e2e.produce(a, backlog, records, 0, args.size)
        mm2_launch = lambda kind, tag, regex: start_mm2(kind, a, b, regex, work, tag)  # noqa: E731
        for rnd in range(args.rounds):
            if "throughput" in wants:
                print(f"round {rnd + 1}: throughput, {records:,} records", flush=True)
                thr.append({k: throughput_run(k, a, b, backlog, records, work, f"{run}r{rnd}t{k.replace('-', '')}")
                            for k in order(kinds, rnd)})
            if "latency" in wants:
                print(f"round {rnd + 1}: latency at {args.rate:,} msg/s for {args.seconds} s", flush=True)
                lat.append({k: latency_run(k, a, b, args.rate, args.seconds, args.size, work,
                                           f"{run}r{rnd}l{k.replace('-', '')}")
                            for k in order(one, rnd)})
            if "topics" in wants:
                print(f"round {rnd + 1}: {args.topics} topics at {args.topic_rate:g} msg/s each for {args.seconds} s",
                      flush=True)
                fan.append({k: mm2_topics.topics_run(k, a, b, args.topics, args.topic_rate, args.seconds, args.size,
                                                     work, f"{run}r{rnd}f{k.replace('-', '')}", mm2_launch)
                            for k in order(one, rnd)})
        if args.clusters and "throughput" in wants:
            _delete(a, backlog)
    result = summary(thr, lat, tasks, not args.no_raw) if thr or lat else {}
    if fan:
        result["many_topics"] = {"rounds": fan, **fan_summary(fan, tasks[0], not args.no_raw)}
    if args.json:
        Path(args.json).write_text(json.dumps({
            "params": {"records": records, "size": args.size, "tasks": tasks, "rounds": args.rounds,
                       "rate": args.rate, "seconds": args.seconds, "topics": args.topics,
                       "topic_rate": args.topic_rate, "exactly_once": args.exactly_once,
                       "mm2": {**MM2_PLAIN, **MM2_EXTRA}, "connector": e2e.EXTRA,
                       "mm2_jvm": [f"-Xmx{SHIPPED_HEAP}", *SHIPPED_JVM_FLAGS]},
            "throughput": thr, "latency": lat, **result}, indent=1))


if __name__ == "__main__":
    main()
