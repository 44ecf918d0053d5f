"""``connect connectors status``: a connector and its tasks as a table, with rates and lag from the
worker's Prometheus ``/metrics`` (sampled between two refreshes with ``--watch``)."""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from worker.api.restcli_client import _Client, _console, _name_argument, _print_json, _seg, _Unreachable, _WorkerError

__all__ = ["parse_prometheus", "status"]


POLLED = "connect_records_polled_total"
ACKED = "connect_records_acknowledged_total"
LAG = "connect_source_lag_records"
COMMITTED = "connect_records_committed_total"


# --- prometheus metrics -----------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = re.compile(r"\\(.)")


def parse_prometheus(text: str, names: set[str] | None = None) -> list[tuple[str, dict[str, str], float]]:
    """The samples ``(name, labels, value)`` of a Prometheus text exposition (only ``names`` if given)."""
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match or (names is not None and match.group(1) not in names):
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        labels = {key: _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), raw)
                  for key, raw in _LABEL.findall(match.group(2) or "")}
        samples.append((match.group(1), labels, value))
    return samples


@dataclass
class _Sample:
    """One connector's task metrics at one moment: ``values[metric][task id] = value``."""

    at: float
    values: dict[str, dict[str, float]] = field(default_factory=dict)

    def get(self, metric: str, task: str) -> float | None:
        return self.values.get(metric, {}).get(task)


def _sample_metrics(client: _Client, connector: str) -> _Sample | None:
    """The connector's task metrics, or None when ``/metrics`` cannot be read (shown as '-')."""
    try:
        text = client.request("GET", "/metrics").text
    except (_WorkerError, _Unreachable):
        return None
    sample = _Sample(at=time.monotonic())
    for name, labels, value in parse_prometheus(text, {POLLED, ACKED, COMMITTED, LAG}):
        if labels.get("connector") == connector and "task" in labels and math.isfinite(value):
            per_task = sample.values.setdefault(name, {})
            per_task[labels["task"]] = per_task.get(labels["task"], 0.0) + value
    return sample


def _rate(metric: str, task: str, now: _Sample | None, before: _Sample | None) -> float | None:
    """Per-second increase of a counter between two samples (None: unknown, or the counter was reset)."""
    if now is None or before is None or now.at <= before.at:
        return None
    current, previous = now.get(metric, task), before.get(metric, task)
    if current is None or previous is None or current < previous:
        return None
    return (current - previous) / (now.at - before.at)


# --- rendering --------------------------------------------------------------------------------

_STATE_STYLES = {"RUNNING": "green", "FAILED": "bold red", "PAUSED": "yellow", "STOPPED": "yellow",
                 "UNASSIGNED": "cyan", "RESTARTING": "cyan"}


def _state(value: Any) -> Text:
    state = str(value or "-")
    return Text(state, style=_STATE_STYLES.get(state, ""))


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _per_second(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _first_line(trace: Any) -> str:
    for line in str(trace or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def _sum(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _render_status(status: dict[str, Any], now: _Sample | None, before: _Sample | None,
                   header: str = "") -> RenderableType:
    connector = status.get("connector") or {}
    tasks = sorted((t for t in status.get("tasks") or [] if isinstance(t, dict)),
                   key=lambda t: (0, t["id"], "") if isinstance(t.get("id"), int) else (1, 0, str(t.get("id"))))
    title = f"{status.get('name', '?')} ({status.get('type') or 'unknown type'})"
    table = Table(title=Text(title), title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("TASK")
    table.add_column("STATE")
    table.add_column("WORKER")
    for heading in ("RECORDS", "RECORDS/S", "ACKED", "ACKED/S", "COMMITTED", "LAG"):
        table.add_column(heading, justify="right")

    rows, traces = [], []
    for task in tasks:
        tid = str(task.get("id", "?"))
        lag = (task.get("lag") or {}).get("records")  # the driver's, from committed offsets (any state)
        values = [now.get(POLLED, tid) if now else None, _rate(POLLED, tid, now, before),
                  now.get(ACKED, tid) if now else None, _rate(ACKED, tid, now, before),
                  now.get(COMMITTED, tid) if now else None, lag if lag is not None else (now.get(LAG, tid) if now else None)]
        rows.append((tid, task, values))
        if task.get("state") == "FAILED" and _first_line(task.get("trace")):
            traces.append(f"task {tid}: {_first_line(task.get('trace'))}")
        for retry in task.get("retrying") or []:
            held = ", ".join(retry.get("partitions") or []) or "the whole pair"
            traces.append(f"task {tid}: retrying {retry.get('operation')} for {retry.get('for_s')} s "
                          f"(offsets held: {held}): {retry.get('reason')}")
    totals = [_sum([values[i] for _, _, values in rows]) for i in range(6)]
    connector_lag = (connector.get("lag") or {}).get("records")
    if connector_lag is not None:  # a STOPPED connector has no task rows, its lag is still known
        totals[5] = connector_lag
    formats = (_count, _per_second, _count, _per_second, _count, _count)
    table.add_row("connector", _state(connector.get("state")), Text(str(connector.get("worker_id") or "-")),
                  *(f(v) for f, v in zip(formats, totals, strict=True)))
    for tid, task, values in rows:
        table.add_row(Text(tid), _state(task.get("state")), Text(str(task.get("worker_id") or "-")),
                      *(f(v) for f, v in zip(formats, values, strict=True)))
    if connector.get("state") == "FAILED" and _first_line(connector.get("trace")):
        traces.insert(0, f"connector: {_first_line(connector.get('trace'))}")

    parts: list[RenderableType] = []
    if header:
        parts.append(Text(header, style="dim"))
    parts.append(table)
    if connector.get("waiting"):  # no task pair yet, and why (e.g. waiting for topics matching ...)
        parts.append(Text(f"connector: {connector['waiting']}", style="yellow"))
    for line in traces:
        parts.append(Text(line, style="red"))
    return Group(*parts)


def status(
    client: _Client,
    name: str = _name_argument(),
    watch: bool = typer.Option(False, "--watch", "-w", help="Refresh until Ctrl-C."),
    interval: float = typer.Option(2.0, "--interval", min=0.1, help="Seconds between refreshes (with --watch)."),
    as_json: bool = typer.Option(False, "--json", help="Print the worker's raw JSON (one line per refresh with --watch)."),
    iterations: int | None = typer.Option(None, "--iterations", min=1, hidden=True, help="Stop after N refreshes."),
) -> None:
    """Show a connector and its tasks: state, worker, records/s, acknowledged/s and lag (from /metrics).

    Rates are computed between two refreshes, so they show with --watch. FAILED tasks show the first line of their trace.
    """
    path = f"/connectors/{_seg(name)}/status"
    if as_json and not watch:
        _print_json(client.json("GET", path))
        return
    if not watch:
        _console().print(_render_status(client.json("GET", path), _sample_metrics(client, name), None))
        return

    console = _console()
    before: _Sample | None = None
    done = 0

    def refresh() -> RenderableType:
        nonlocal before
        stamp = time.strftime("%H:%M:%S")
        try:
            doc = client.json("GET", path)
        except _Unreachable as exc:
            if done == 0:
                raise  # the first look fails: most likely a wrong --url
            return Text(f"{stamp}  {exc.describe()}; retrying every {interval:g}s", style="red")
        if as_json:
            typer.echo(json.dumps(doc, separators=(",", ":")))
            return Text("")
        now = _sample_metrics(client, name)
        view = _render_status(doc, now, before, header=f"{stamp}  {client.url}  every {interval:g}s, Ctrl-C to stop")
        before = now if now is not None else before
        return view

    def finished() -> bool:
        return iterations is not None and done >= iterations

    try:
        if as_json or not console.is_terminal:  # a pipe or a file: one snapshot after the other
            while True:
                view = refresh()
                if not as_json:
                    console.print(view)
                    console.print()
                done += 1
                if finished():
                    break
                time.sleep(interval)
        else:
            with Live(Text("loading..."), console=console, auto_refresh=False) as live:
                while True:
                    live.update(refresh(), refresh=True)
                    done += 1
                    if finished():
                        break
                    time.sleep(interval)
    except KeyboardInterrupt:
        pass
