"""``connect dev brokers kafka|pulsar|rocketmq``: local brokers to try connectors against.

A thin layer over :mod:`worker.embedded`: it starts the brokers named (each on a free loopback
port, or the one given), prints one line per broker with the address a connector config names
(``bootstrap.servers``, ``service.url``, ``namesrv.addr``), and runs until Ctrl-C or SIGTERM, then
stops them. Development brokers only: see :mod:`worker.embedded` for what each one is.
"""

from __future__ import annotations

import signal
import tempfile
import threading
from pathlib import Path
from typing import List

import typer

__all__ = ["app", "KINDS"]

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Development helpers: local brokers to try connectors against.")

# broker kind -> (the connector config key its address goes in, the suffix of the variables the
# examples in conf/ read it from: SOURCE_BOOTSTRAP, TARGET_PULSAR...)
KINDS = {"kafka": ("bootstrap.servers", "BOOTSTRAP"), "pulsar": ("service.url", "PULSAR"),
         "rocketmq": ("namesrv.addr", "NAMESRV")}
ROLES = ("SOURCE", "TARGET")  # the first broker named is the examples' source, the second their target


def _start(kind: str, port: int | None, data_dir: Path):
    """(the started broker, its address)."""
    from worker import embedded

    log = data_dir / f"{kind}.log"
    if kind == "kafka":
        broker = embedded.EmbeddedKafka(port=port, log_path=log).start()
        return broker, broker.bootstrap
    if kind == "pulsar":
        broker = embedded.EmbeddedPulsar(data_dir / "pulsar", port=port, log_path=log).start()
        return broker, broker.service_url
    broker = embedded.EmbeddedRocketMQ(data_dir / "rocketmq", port=port, log_path=log).start()
    return broker, broker.namesrv


@app.command("brokers")
def brokers(
    kinds: List[str] = typer.Argument(..., help="Brokers to start, each kafka, pulsar or rocketmq (one or more; "
                                      "`kafka kafka` for a mirror)."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where Pulsar and RocketMQ keep their data "
                                         "and every broker its log (default: a new temporary directory)."),
    port: List[int] = typer.Option([], "--port", help="Port of each broker, in the order named (default: free "
                                   "ports)."),
) -> None:
    """Start local brokers, print their addresses, and run until Ctrl-C (then stop them).

    Each line names the connector key the address goes in and, for the first two brokers, the
    variable the examples in conf/ read (SOURCE_*, then TARGET_*), e.g. `kafka pulsar` for
    conf/kafka-to-pulsar.json.

    Kafka is tansu (in memory), Pulsar is pulsar-lite, RocketMQ is this project's own broker: for
    trying connectors out, not for production."""
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise typer.BadParameter(f"{bad[0]!r} is not one of {', '.join(KINDS)}", param_hint="KINDS")
    if len(port) > len(kinds):
        raise typer.BadParameter(f"{len(port)} ports for {len(kinds)} broker(s)", param_hint="--port")
    root = data_dir or Path(tempfile.mkdtemp(prefix="connect-dev-"))
    root.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    started = []
    try:
        for i, kind in enumerate(kinds):
            try:
                broker, address = _start(kind, port[i] if i < len(port) else None, root)
            except RuntimeError as exc:
                typer.echo(f"error: {kind} did not start: {exc}", err=True)
                raise typer.Exit(1) from None
            started.append(broker)
            key, suffix = KINDS[kind]
            export = f"  export {ROLES[i]}_{suffix}={address}" if i < len(ROLES) else ""
            typer.echo(f"{kind:<9} {key:<18} {address:<26}{export}".rstrip())
        typer.echo(f"logs and data in {root}; Ctrl-C stops the broker(s)", err=True)
        while not stop.wait(0.5):
            if any(b.proc is None or b.proc.poll() is not None for b in started):
                typer.echo(f"error: a broker exited; see its log in {root}", err=True)
                raise typer.Exit(1)
    finally:
        for broker in reversed(started):
            broker.stop()
