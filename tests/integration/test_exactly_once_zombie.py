"""A zombie in another process (issue 39): a pair's Python process is frozen with SIGSTOP in the
middle of an epoch's transaction, a newer attempt of the pair runs meanwhile in this process and
finishes the work; after SIGCONT the frozen attempt goes on, and the broker fences it: it commits
nothing, says which attempt fenced it, and a ``read_committed`` reader of the target sees every record
once, in order. On Apache Kafka (tansu does not isolate transactions)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition

from connect.tasks.plan import PairPlan
from connect.tasks.policy import RunnerPolicy
from connect.tasks.results import RUNNING
from connect.tasks.runner import TaskPairRunner
from connect.testing import MemorySourceTask
from connectors.kafka import KafkaSinkTask

pytestmark = pytest.mark.timeout(300)

N = 2000

# The frozen attempt: epoch 0 commits records 0-99; epoch 1 sends 100..399 and then polls nothing until
# its 25 s are up (inside its transaction, records sent and not committed, however slow the host is
# at noticing them), and prints its result as JSON when it ends.
_ZOMBIE = textwrap.dedent("""
    import sys, time, orjson
    from connect.tasks.policy import RunnerPolicy
    from connect.tasks.plan import PairPlan
    from connect.tasks.runner import TaskPairRunner
    from connect.testing import MemorySourceTask
    from connectors.kafka import KafkaSinkTask

    class Slow(MemorySourceTask):
        def poll(self):  # 100..399 at once, then nothing: epoch 1 holds its transaction open until it ends
            time.sleep(0.02)
            return super().poll() if self.next[0] < 400 else []

    bootstrap, connector, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    runner = TaskPairRunner(PairPlan(
        connector=connector, task_id=0, source=Slow(), sink=KafkaSinkTask(),
        source_config={"topic": "src", "records": n, "partitions": "1", "batch.size": "10"},
        sink_config={"bootstrap.servers": bootstrap, "topic": topic},
        policy=RunnerPolicy(exactly_once="required", epoch_max_ms=25_000, epoch_grace_ms=5_000)))
    first = runner.run_epoch(0, max_records=100)
    print(orjson.dumps({"epoch": 0, "state": first.state, "trace": first.trace}).decode(), flush=True)
    second = runner.run_epoch(1, max_records=1500)
    print(orjson.dumps({"epoch": 1, "state": second.state, "trace": second.trace, "offsets": second.offsets,
                        "fenced": second.stats.get("fenced")}).decode(), flush=True)
    runner.stop()
""")


def _count(bootstrap: str, topic: str, isolation: str) -> list[int]:
    """The keys of every record of partition 0 that a reader with ``isolation`` sees now."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-zombie-verify", "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    keys, deadline = [], time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            msgs = c.consume(5000, 0.5)
            if any(m.error() is not None and m.error().code() == -191 for m in msgs):  # _PARTITION_EOF
                keys.extend(int(m.key()) for m in msgs if m.error() is None)
                return keys
            keys.extend(int(m.key()) for m in msgs if m.error() is None)
        return keys
    finally:
        c.close()


def test_a_pair_frozen_with_sigstop_mid_transaction_is_fenced_after_sigcont_and_nothing_doubles(
        apache_kafka_pair, unique):
    target = apache_kafka_pair[1].bootstrap
    topic = f"eos-sigstop-{unique}"
    zombie = subprocess.Popen([sys.executable, "-c", _ZOMBIE, target, unique, topic, str(N)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    newer = None
    try:
        first = orjson.loads(zombie.stdout.readline() or "{}")
        assert first.get("state") == RUNNING, (first, zombie.stderr.read() if zombie.poll() is not None else "")
        # inside epoch 1's transaction, with records sent but not committed: freeze it there
        deadline = time.monotonic() + 20
        while len(_count(target, topic, "read_uncommitted")) < 300:
            assert time.monotonic() < deadline and zombie.poll() is None, "the zombie's epoch 1 sent nothing"
            time.sleep(0.2)
        os.kill(zombie.pid, signal.SIGSTOP)
        assert _count(target, topic, "read_committed") == list(range(100)), "only epoch 0 is committed"

        # the next attempt of the pair, elsewhere (here), while the first is frozen: fences it, resumes at 100
        newer = TaskPairRunner(PairPlan(
            connector=unique, task_id=0, source=MemorySourceTask(), sink=KafkaSinkTask(),
            source_config={"topic": "src", "records": str(N), "partitions": "1", "batch.size": "100"},
            sink_config={"bootstrap.servers": target, "topic": topic},
            policy=RunnerPolicy(exactly_once="required", epoch_max_ms=1500, epoch_grace_ms=5000)))
        moved = 0
        for epoch in range(40):
            result = newer.run_epoch(epoch, max_records=700)
            assert result.state == RUNNING, result.trace
            moved += result.stats["records"]
            if result.offsets.get('{"partition":0,"topic":"src"}', {}).get("offset") == N - 1:
                break
        assert moved == N - 100, f"the newer attempt resumed from the committed offsets: moved {moved}"

        os.kill(zombie.pid, signal.SIGCONT)
        out, err = zombie.communicate(timeout=120)
        second = orjson.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        assert second.get("epoch") == 1, (out, err[-3000:])
        assert second["state"] != RUNNING and second["offsets"] == {}, second
        trace = second["trace"] or ""
        assert "ProducerFencedError" in trace, trace
        assert f"was fenced by the attempt on {socket.gethostname()} (pid {os.getpid()}, started" in trace, trace
    finally:
        if zombie.poll() is None:
            os.kill(zombie.pid, signal.SIGCONT)
            zombie.kill()
            zombie.wait(10)
        if newer is not None:
            newer.stop()
    assert _count(target, topic, "read_committed") == list(range(N)), "each record once, in order"
