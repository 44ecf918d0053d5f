"""``connect replicators``: PIP-18 replicator onboarding on a running worker (``worker.replication.replicators``).

``add NAMESPACE --type kafka|pulsar|rocketmq --region NAME --topic-mapping JSON
--replication-properties JSON [--source JSON] [--auth-plugin NAME --auth-param JSON]`` puts the
namespace's mapped topics under replication (one connector per topic); ``remove ID``; ``list``;
``start ID TOPIC`` / ``stop ID TOPIC`` (one topic's replicator); ``stats ID`` (per topic: state,
records, records/s of the last epoch, lag, failures). Connection options and exit codes are those
of ``connect connectors`` (0 ok, 1 the worker answered an error, 2 bad usage, 3 unreachable).
``--auth-param`` values go to the worker's keystore plugin and are never printed.
"""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table

from worker.api.restcli_client import _command, _console, _print_json, _seg, _usage_error

__all__ = ["app"]

app = typer.Typer(name="replicators", add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="PIP-18 replicators: put a namespace's topics under replication with one command.")


def _json_option(text: str | None, option: str) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise _usage_error(f"{option}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise _usage_error(f"{option}: a JSON object expected, got {type(doc).__name__}")
    return doc


@_command(on=app)
def add(
    client,
    namespace: str = typer.Argument(..., help="Namespace whose topics are replicated (Pulsar: tenant/namespace)."),
    type_: str = typer.Option(..., "--type", help="Target broker: kafka, pulsar or rocketmq."),
    region: str = typer.Option(..., "--region", help="Name of the target region (cluster)."),
    topic_mapping: str = typer.Option(..., "--topic-mapping", help='JSON: {"source topic": "target topic", ...}.'),
    replication_properties: str = typer.Option(..., "--replication-properties",
                                               help="JSON: the target connector's client keys."),
    source: str = typer.Option(None, "--source", help='JSON: {"type": "pulsar", "service.url": ..., "alias": ...}.'),
    auth_plugin: str = typer.Option(None, "--auth-plugin", help="Keystore plugin (a config provider of the worker)."),
    auth_param: str = typer.Option(None, "--auth-param", help="JSON: credentials the keystore plugin keeps."),
) -> None:
    """Add a replicator for a namespace and start one connector per mapped topic (POST /replicators)."""
    body = {"namespace": namespace, "type": type_, "region": region,
            "topicMapping": _json_option(topic_mapping, "--topic-mapping"),
            "replicationProperties": _json_option(replication_properties, "--replication-properties")}
    if source is not None:
        body["source"] = _json_option(source, "--source")
    if auth_plugin:
        body["authPlugin"] = auth_plugin
    if auth_param is not None:
        body["authParam"] = _json_option(auth_param, "--auth-param")
    doc = client.json("POST", "/replicators", body=body)
    typer.echo(f"added replicator {doc['id']}: {len(doc['connectors'])} connector(s)")
    for name in doc["connectors"]:
        typer.echo(f"  {name}")


@_command(on=app)
def remove(client, rid: str = typer.Argument(..., metavar="ID", help="Replicator id.")) -> None:
    """Remove a replicator: delete its connectors and its keystore entry (DELETE /replicators/ID)."""
    client.request("DELETE", f"/replicators/{_seg(rid)}")
    typer.echo(f"removed replicator {rid}")


@_command("list", on=app)
def list_(client, as_json: bool = typer.Option(False, "--json", help="Print the worker's JSON.")) -> None:
    """List replicators and the state of each topic's connector (GET /replicators)."""
    doc = client.json("GET", "/replicators")
    if as_json:
        _print_json(doc)
        return
    if not doc:
        typer.echo("no replicators")
        return
    table = Table("ID", "NAMESPACE", "TYPE", "REGION", "TOPIC", "STATE")
    for r in doc:
        for topic, info in r["topics"].items():
            table.add_row(r["id"], r["namespace"], r["type"], r["region"], topic, info["state"])
    _console().print(table)


def _topic_action(action: str):
    def change(client, rid: str = typer.Argument(..., metavar="ID"), topic: str = typer.Argument(...)) -> None:
        doc = client.json("PUT", f"/replicators/{_seg(rid)}/topics/{_seg(topic)}/{action}")
        typer.echo(f"{action} requested for {topic} of {rid} ({doc['connector']} -> {doc['target']})")

    change.__name__ = action
    change.__doc__ = f"{action.capitalize()} one topic's replicator (PUT /replicators/ID/topics/TOPIC/{action})."
    return change


start = _command("start", on=app)(_topic_action("start"))
stop = _command("stop", on=app)(_topic_action("stop"))


def _figure(value: Any, fmt: str = "{:,.0f}") -> str:
    return "-" if value is None else fmt.format(value)


@_command(on=app)
def stats(client, rid: str = typer.Argument(..., metavar="ID"),
          as_json: bool = typer.Option(False, "--json", help="Print the worker's JSON.")) -> None:
    """Per-topic figures of a replicator: state, records, rate, lag, failures (GET /replicators/ID/stats)."""
    doc = client.json("GET", f"/replicators/{_seg(rid)}/stats")
    if as_json:
        _print_json(doc)
        return
    table = Table("TOPIC", "STATE", "RECORDS", "RECORDS/S", "LAG", "FAILURES")
    for topic, t in doc["topics"].items():
        table.add_row(topic, t["state"], _figure(t.get("records")), _figure(t.get("records_per_second"), "{:,.1f}"),
                      _figure(t.get("lag")), _figure(t.get("failures")))
    _console().print(table)
