"""``connect run``'s progress lines: an idle connector stays quiet, and the total says it is cumulative."""

from __future__ import annotations

import io
from types import SimpleNamespace

from worker.telemetry.progress import ProgressPrinter


def _result(epoch: int, task: int, moved: int = 0, in_flight: int = 0):
    stats = {"records": moved, "acknowledged": moved, "committed": moved, "in_flight": in_flight}
    return SimpleNamespace(epoch=epoch, connector="c", task=task, state="RUNNING", stats=stats, lag=0, duration=2.0,
                           restarted=False, pid=1, trace=None, gap_s=None)


def test_an_idle_connector_prints_one_line_per_idle_stretch_not_three_per_epoch():
    out = io.StringIO()
    runtime = SimpleNamespace(committed_total=0, records_total=0)
    printer = ProgressPrinter(out=out, idle_every_s=3600)
    runtime.committed_total = runtime.records_total = 500
    printer(1, [_result(1, 0, moved=300), _result(1, 1, moved=200)], [runtime])
    busy = out.getvalue().splitlines()
    assert len(busy) == 3 and busy[-1] == "epoch    1  total 500 records committed since start (500 moved)"
    for epoch in range(2, 12):  # ten idle epochs of two pairs: one line
        printer(epoch, [_result(epoch, 0), _result(epoch, 1)], [runtime])
    idle = out.getvalue().splitlines()[3:]
    assert idle == ["epoch    2  c: idle since epoch 2 (nothing moved or pending); "
                    "total 500 records committed since start (500 moved)"], idle
    printer(12, [_result(12, 0, in_flight=7), _result(12, 1)], [runtime])  # pending is news: printed
    lines = out.getvalue().splitlines()[4:]
    assert len(lines) == 2 and "c/0" in lines[0] and "in flight 7" in lines[0] and "since start" in lines[1]
    printer(13, [_result(13, 0), _result(13, 1)], [runtime])
    assert "idle since epoch 13" in out.getvalue().splitlines()[-1]


def test_a_long_idle_stretch_is_summarised_periodically():
    out = io.StringIO()
    printer = ProgressPrinter(out=out, idle_every_s=0)
    runtime = SimpleNamespace(committed_total=0, records_total=0)
    for epoch in range(1, 4):
        printer(epoch, [_result(epoch, 0)], [runtime])
    assert [line.split(": idle since ")[1][:7] for line in out.getvalue().splitlines()] == ["epoch 1"] * 3
