"""``connect connectors gaps NAME`` and ``connect connectors acknowledge-gaps NAME --by WHO``: a
connector's source gaps (records the source dropped before they were copied), shown and
acknowledged through the worker's REST API (``worker.api.routes_gaps``)."""

from __future__ import annotations

import datetime

import typer
from rich.table import Table
from rich.text import Text

from worker.api.restcli_client import _command, _console, _name_argument, _print_json, _seg

__all__ = ["gaps", "acknowledge_gaps"]


def _when(value) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    return datetime.datetime.fromtimestamp(value, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _print_gaps(entries: list) -> None:
    table = Table(show_edge=False, pad_edge=False)
    for heading in ("TOPIC", "PARTITION", "OFFSETS", "RECORDS", "POLICY", "DETECTED", "ACKNOWLEDGED", "CAUSE"):
        table.add_column(heading)
    for g in entries:
        if not isinstance(g, dict):
            continue
        ack = g.get("acknowledged")
        acked = f"{ack.get('by')} at {_when(ack.get('at'))}" if isinstance(ack, dict) else "open"
        last = "?" if g.get("last") is None else g.get("last")
        records = "unknown" if g.get("records") is None else str(g.get("records"))
        table.add_row(Text(str(g.get("topic"))), Text(str(g.get("partition"))), Text(f"{g.get('first')}..{last}"),
                      Text(records), Text(str(g.get("policy"))), Text(_when(g.get("detected_at"))),
                      Text(acked, style="red" if ack is None else ""), Text(str(g.get("cause"))))
    _console().print(table)


@_command("gaps")
def gaps(
    client,
    name: str = _name_argument(),
    as_json: bool = typer.Option(False, "--json", help="Print the worker's raw JSON."),
) -> None:
    """Show the records a connector's source dropped before they were copied (GET /connectors/NAME/gaps)."""
    answer = client.json("GET", f"/connectors/{_seg(name)}/gaps")
    if as_json:
        _print_json(answer)
        return
    entries = (answer or {}).get("gaps") or []
    if not entries:
        typer.echo(f"no source gaps for {name}")
        return
    _print_gaps(entries)


@_command("acknowledge-gaps")
def acknowledge_gaps(
    client,
    name: str = _name_argument(),
    by: str = typer.Option(..., "--by", help="Who acknowledges (recorded with the time)."),
) -> None:
    """Acknowledge a connector's open source gaps: pairs stopped at one resume after it
    (POST /connectors/NAME/gaps/acknowledge)."""
    answer = client.json("POST", f"/connectors/{_seg(name)}/gaps/acknowledge", body={"by": by})
    typer.echo(f"{(answer or {}).get('acknowledged', 0)} gap(s) of {name} acknowledged by {by}")
