"""Exactly-once against at-least-once: ``connect run`` Kafka -> Kafka on two Apache Kafka clusters.

Tansu accepts transactions but does not isolate them, so this runs on two Apache Kafka 4.x
clusters (``worker.embedded.ApacheKafka``, or ``--clusters A,B`` already running). Contenders, each
a process of its own watched from outside at the target topic by ``bench/e2e.py``'s watcher:

- ``alo-<E>s``: ``connect run`` (1 task pair), at-least-once (``exactly.once.support=disabled``),
  ``epoch.max.ms`` = E s;
- ``eos-<E>s``: the same with ``exactly.once.support=required``: each epoch one transaction;
- ``raw``: the raw confluent-kafka consume -> produce loop (``bench/e2e.py raw-loop``), the floor.

Each contender runs once per round and is measured twice in that run, on a source topic of its own:

- throughput: ``--records`` records (2 partitions) are written to the source topic before it
  starts. ``msg/s``: the steady rate at which the mirror *writes* them (records between the 10 %
  and 90 % arrival marks of a ``read_uncommitted`` watcher over the time between them; epoch ends,
  drains and commits inside that window count). ``committed s``: seconds from the first record
  written to the last one visible to a ``read_committed`` reader - with exactly-once the backlog
  becomes visible only at its epoch's commit, so when the backlog takes less than one epoch to
  copy this is about the epoch length, not a rate. ``visible msg/s``: the backlog over that time;
- latency: then a producer process writes ``--rate`` msg/s for ``--seconds`` s into the same
  source topic; a ``read_committed`` watcher reads the target from where the backlog ended; latency
  = arrival - the record's produce timestamp (kept by the mirror), the first 5 s left out. With
  exactly-once a record becomes visible at its epoch's commit, so latency grows with the epoch.

A warm-up (the raw loop and one exactly-once run on a small backlog, not counted; ``--no-warmup``
leaves it out) runs first: on fresh clusters the first run (the raw loop) logged "Coordinator load
in progress" retries and measured a p50 latency of 5-10 s, against 0.1-0.25 s in later rounds. Each round runs every
contender; within an epoch length, which mode goes first alternates every
round (and the raw loop goes first, then last). Figures are medians of rounds; ratios
(exactly-once / at-least-once per epoch length, each / raw loop) medians of the per-round ratios.

Usage: python bench/exactly_once.py [--records 200000] [--size 100] [--epochs 1,3,10] [--rounds 3]
       [--rate 5000] [--seconds 25] [--no-raw] [--no-warmup] [--clusters A,B] [--json out.json] [--set KEY=VALUE]
       python bench/exactly_once.py --from-json out.json   (the summary of a saved run again)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import e2e  # noqa: E402  (bench/e2e.py: this script's directory comes first on sys.path)
from bench_util import apache_kafka_pair, median_of, ratio_of  # noqa: E402

MODES = {"alo": "disabled", "eos": "required"}  # contender prefix -> exactly.once.support
GOAL_EPOCH_S, GOAL = 10, 0.8  # exactly-once >= 0.8x at-least-once throughput at the default epoch (issue 39)
FIGURES = {"msg_s": ("written msg/s", ",.0f"), "committed_s": ("committed s", ".1f"),
           "visible_msg_s": ("visible msg/s", ",.0f"), "p50_ms": ("p50 ms", ".0f"), "p99_ms": ("p99 ms", ".0f")}
THROUGHPUTS = {"msg_s": "written", "visible_msg_s": "visible"}


def kinds(epochs: list[int], raw: bool, rnd: int = 0) -> list[str]:
    """The contenders of round ``rnd`` in the order they run: per epoch length at-least-once first in
    even rounds, exactly-once first in odd ones; the raw loop first in even rounds, last in odd ones."""
    modes = list(MODES) if rnd % 2 == 0 else list(MODES)[::-1]
    out = [f"{m}-{e}s" for e in epochs for m in modes]
    if raw:
        out = ["raw", *out] if rnd % 2 == 0 else [*out, "raw"]
    return out


def _ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's high watermark (where the next record will go)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ends"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(e2e.PARTITIONS)}
    finally:
        c.close()


def run(kind: str, a: str, b: str, records: int, size: int, rate: int, seconds: int, work: Path, tag: str
        ) -> dict[str, float]:
    """One contender: its throughput on a backlog, then its latency at ``rate`` msg/s."""
    topic, target = f"{tag}-src", f"{tag}-out"
    e2e._create(a, topic)
    e2e._create(b, target)
    e2e.produce(a, topic, records, 0, size)
    extra = {}
    if kind != "raw":
        mode, epoch = kind.split("-")
        extra = {"exactly.once.support": MODES[mode], "epoch.max.ms": str(int(epoch[:-1]) * 1000)}
    proc = e2e.start_mirror("raw" if kind == "raw" else "connect-1", a, b, topic, target, work, None, extra)
    try:
        written = e2e.watch(b, target, records, 300 + records / 5000, proc, latency=False, committed=False)
        visible = e2e.watch(b, target, records, 120, proc, latency=False)
        out = {"msg_s": e2e.steady_rate(written, records), "committed_s": visible[-1][0] - written[0][0]}
        lat = e2e.paced_latencies(a, topic, b, target, rate, seconds, size, work / f"{tag}-producer.log", proc,
                                  start=_ends(b, target))
    except RuntimeError as err:
        raise RuntimeError(f"{kind}: {err} (log: {work / target}.log)") from err
    finally:
        e2e.stop(proc)
    out |= {"p50_ms": e2e.percentile(lat, 0.5), "p99_ms": e2e.percentile(lat, 0.99)}
    print(f"    {kind:<8} {out['msg_s']:>9,.0f} msg/s written, all committed {out['committed_s']:5.1f} s after the "
          f"first write | p50 {out['p50_ms']:6.0f} ms  p99 {out['p99_ms']:6.0f} ms", flush=True)
    return out


def summary(rounds: list[dict], epochs: list[int], raw: bool, records: int) -> dict:
    """Print and return the medians of every contender's figures and the ratios: exactly-once /
    at-least-once per epoch length (throughput written and visible, p99), each contender's
    throughputs / the raw loop's, and whether the goal (exactly-once >= 0.8x at-least-once
    throughput at a 10 s epoch) was met, for each throughput. ``records``: the backlog of a round
    (visible msg/s = records / committed s)."""
    for r in rounds:
        for v in r.values():
            v["visible_msg_s"] = records / v["committed_s"] if v["committed_s"] > 0 else float("nan")
    names = kinds(epochs, raw)
    medians = {k: {key: median_of(rounds, k, key) for key in FIGURES} for k in names}
    ratios = {f"eos-{e}s / alo-{e}s": {key: ratio_of(rounds, f"eos-{e}s", f"alo-{e}s", key)
                                       for key in (*THROUGHPUTS, "p99_ms")} for e in epochs}
    if raw:
        ratios |= {f"{k} / raw": {key: ratio_of(rounds, k, "raw", key) for key in THROUGHPUTS}
                   for k in names if k != "raw"}
    fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    print()
    print(f"medians of {len(rounds)} round(s)")
    print(f"{'contender':<11}" + "".join(f"{label:>14}" for label, _ in FIGURES.values()))
    for k, m in medians.items():
        print(f"{k:<11}" + "".join(f"{fmt(m[key], f):>14}" for key, (_, f) in FIGURES.items()))
    print()
    print("ratios, median of per-round ratios")
    for label, r in ratios.items():
        print(f"{label:<20}" + "  ".join(f"throughput {name} {fmt(r[key], '.2f')}" for key, name in THROUGHPUTS.items())
              + (f"  p99 latency {fmt(r['p99_ms'], '.2f')}" if "p99_ms" in r else ""))
    goal = ratios.get(f"eos-{GOAL_EPOCH_S}s / alo-{GOAL_EPOCH_S}s", {})
    met = {key: None if goal.get(key) is None else goal[key] >= GOAL for key in THROUGHPUTS}
    if goal and any(v is not None for v in met.values()):
        print(f"goal: exactly-once >= {GOAL}x at-least-once throughput at a {GOAL_EPOCH_S} s epoch: " + ", ".join(
            f"{name} {fmt(goal[key], '.2f')} {'-' if met[key] is None else 'met' if met[key] else 'NOT met'}"
            for key, name in THROUGHPUTS.items()))
    return {"median": medians, "ratios": ratios, "goal_met": met}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000, help="backlog of the throughput measure")
    ap.add_argument("--size", type=int, default=100, help="value size, bytes")
    ap.add_argument("--epochs", default="1,3,10", help="epoch.max.ms of the runs, in seconds")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=int, default=5_000, help="msg/s of the latency measure")
    ap.add_argument("--seconds", type=int, default=25, help="length of the latency measure")
    ap.add_argument("--no-raw", action="store_true", help="leave out the raw confluent-kafka loop")
    ap.add_argument("--no-warmup", action="store_true", help="no uncounted warm-up run before the rounds")
    ap.add_argument("--clusters", metavar="A,B", help="bootstrap servers of two running clusters (default: start two)")
    ap.add_argument("--json", metavar="PATH", help="write parameters, every round and the summary as JSON")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a key of every connector")
    ap.add_argument("--from-json", metavar="PATH", help="only print the summary of a run saved with --json")
    args = ap.parse_args()
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        params = saved["params"]
        summary(saved["rounds"], params["epochs_s"], "raw" in saved["rounds"][0], params["records"])
        return
    try:
        epochs = [int(e) for e in args.epochs.split(",")]
    except ValueError:
        epochs = []
    if not epochs or min(epochs) < 1:
        ap.error(f"--epochs: a comma-separated list of whole seconds >= 1, not {args.epochs!r}")
    if bad := [kv for kv in args.set if "=" not in kv]:
        ap.error(f"--set: KEY=VALUE, not {bad[0]!r}")
    e2e.EXTRA.update(kv.split("=", 1) for kv in args.set)
    records = args.records - args.records % e2e.PARTITIONS
    rounds: list[dict] = []
    with ExitStack() as stack:
        a, b = apache_kafka_pair(stack, args.clusters)
        work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        run_id = f"x{int(time.time()) % 100000}"  # topic prefix: runs on the same clusters never meet
        if not args.no_warmup:  # the first run on fresh clusters pays their start (coordinators loading, JIT)
            print("warm-up (not counted): raw loop and exactly-once, 20,000 records, 5 s", flush=True)
            for k in ("raw", f"eos-{epochs[0]}s"):
                run(k, a, b, 20_000, args.size, args.rate, 5, work, f"{run_id}w{k.replace('-', '')}")
        for rnd in range(args.rounds):
            print(f"round {rnd + 1}: {records:,} records backlog, then {args.rate:,} msg/s for {args.seconds} s",
                  flush=True)
            rounds.append({k: run(k, a, b, records, args.size, args.rate, args.seconds, work,
                                  f"{run_id}r{rnd}{k.replace('-', '')}") for k in kinds(epochs, not args.no_raw, rnd)})
    result = summary(rounds, epochs, not args.no_raw, records)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "params": {"records": records, "size": args.size, "epochs_s": epochs, "rounds": args.rounds,
                       "rate": args.rate, "seconds": args.seconds, "connector": e2e.EXTRA},
            "rounds": rounds, **result}, indent=1))


if __name__ == "__main__":
    main()
