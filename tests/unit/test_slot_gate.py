"""SlotGate: epochs are admitted to the task slots first come, first served (no pool starves)."""

from __future__ import annotations

import threading
import time

from worker.runtime.spark import SlotGate


def _enter(gate: SlotGate, name: str, pairs: int, order: list, release: threading.Event) -> threading.Thread:
    def run() -> None:
        with gate.admit(pairs):
            order.append(name)
            release.wait(5)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    time.sleep(0.05)  # queued in this order
    return t


def test_jobs_enter_in_arrival_order_when_slots_are_short():
    gate = SlotGate(lambda: 2)
    order: list[str] = []
    first, rest = threading.Event(), threading.Event()
    a = _enter(gate, "a", 2, order, first)  # takes both slots
    threads = [_enter(gate, n, p, order, rest) for n, p in (("b", 2), ("c", 1), ("d", 1))]
    assert order == ["a"]
    first.set()  # a leaves: b (asked first) goes in, c and d wait behind it even though one would fit
    a.join(2)
    time.sleep(0.1)
    assert order == ["a", "b"]
    rest.set()
    for t in threads:
        t.join(2)
    assert order == ["a", "b", "c", "d"]


def test_a_job_wider_than_the_application_takes_every_slot():
    gate = SlotGate(lambda: 2)
    done = []
    with gate.admit(5):
        t = threading.Thread(target=lambda: gate.admit(1).__enter__() or done.append(1), daemon=True)
        t.start()
        time.sleep(0.1)
        assert not done  # all slots are taken
    t.join(2)
    assert done == [1]


def test_an_error_while_waiting_leaves_no_ticket_behind():
    calls = []

    def slots() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("py4j hiccup")
        return 1

    gate = SlotGate(slots)
    try:
        with gate.admit(1):
            pass
    except RuntimeError:
        pass
    with gate.admit(1):  # the failed request does not block the queue
        pass
