"""Do Apache Pulsar's readers need the reader guards (``connectors.pulsar.guards``)? Over pulsar-lite,
readers re-subscribed after a broker restart delivered messages again or stopped delivering although
their partition had more (``test_source_pulsar_restarted_mid_stream_reader_guards_lose_nothing``).
Here plain pulsar-client readers, without any guard, read three partitions of an Apache Pulsar
standalone slowly while the broker is restarted twice under them: each message arrives once, in
order, and the readers go on by themselves after each restart. So Apache Pulsar does not need the
guards; they stay (they cost a comparison per message and a has-message-available question per idle
reader) because pulsar-lite and brokers restarted in other ways may still need them."""

from __future__ import annotations

import threading
import time

import pulsar
import pulsar_util
import pytest

from worker.embedded import ApachePulsar

pytestmark = pytest.mark.timeout(900)


def _index(m) -> int:
    return int(m.data().decode().rsplit("-", 1)[1])


def test_plain_readers_across_apache_pulsar_restarts_deliver_each_message_once_in_order(tmp_path):
    broker = ApachePulsar(tmp_path / "p", log_path=tmp_path / "p.log", cluster="r").start()
    topic, n, parts = "persistent://public/default/restarted", 30_000, 3
    try:
        broker.create_partitioned_topics({topic: parts})
        pulsar_util.produce(broker, topic, n, parts)
        client = pulsar.Client(broker.service_url, logger=pulsar_util.QUIET, operation_timeout_seconds=60)
        readers = [client.create_reader(f"{topic}-partition-{p}", pulsar.MessageId.earliest, receiver_queue_size=100)
                   for p in range(parts)]
        seen: list[list[int]] = [[] for _ in range(parts)]
        at_stop: list[int] = []
        restarted, serving = threading.Event(), threading.Event()
        restarted_ok: list[bool] = []
        serving.set()

        def restart_twice() -> None:
            try:
                for k in range(2):  # mid-stream: once the readers have read a fifth, then two fifths more
                    while sum(map(len, seen)) < n * (1 + 2 * k) // 5 and time.monotonic() < deadline:
                        time.sleep(0.05)
                    at_stop.append(sum(map(len, seen)))
                    serving.clear()
                    broker.stop()
                    broker.start()
                    serving.set()  # reading on only now: the readers reconnected while it started
                restarted_ok.append(True)
            finally:
                serving.set()
                restarted.set()  # a failed restart ends the reading too (the assertions say so)

        deadline = time.monotonic() + 600
        thread = threading.Thread(target=restart_twice)
        thread.start()
        try:
            while time.monotonic() < deadline and not (restarted.is_set() and (sum(map(len, seen)) >= n or not restarted_ok)):
                if not serving.wait(0.5):  # paused from the stop until the start returned: still mid-stream
                    continue
                for p, reader in enumerate(readers):
                    try:
                        seen[p].append(_index(reader.read_next(20)))
                    except pulsar.Timeout:
                        pass
                time.sleep(0.002)  # slowly: the readers are mid-stream at each restart
            for _ in range(20):  # nothing more comes: no message delivered twice after the end
                for p, reader in enumerate(readers):
                    try:
                        seen[p].append(_index(reader.read_next(50)))
                    except pulsar.Timeout:
                        pass
        finally:
            thread.join()
            client.close()
        assert restarted_ok, "the broker did not start again (see the thread's exception above)"
        assert len(at_stop) == 2 and all(0 < k < n for k in at_stop), f"not mid-stream at the restarts: {at_stop}"
        for p in range(parts):
            assert seen[p] == list(range(p, n, parts)), f"partition {p}: {len(seen[p])} read"
    finally:
        broker.stop()
