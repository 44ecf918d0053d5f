"""``connect``: run connectors standalone, validate configs, list plugins."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import List

import typer

from connect.clientpolicy import DEFAULT_POLICY, ClientConfigPolicy
from connect.errors import ConfigError, ConnectError, PluginError
from connect.plugins import allow_plugin_classes, list_plugins, resolve_connector
from connect.secrets import Redactor, install_log_redaction
from connect.transforms.registry import list_transform_plugins, resolve_plugin
from worker.api.restcli import app as connectors_app
from worker.devbrokers import app as dev_app
from worker.migration.mm2cli import app as mm2_app
from worker.pipeline import PipelineConfig, load_pipeline_file
from worker.replication.replicatorcli import app as replicators_app

# Help is click's plain layout (rich_markup_mode=None, every app here): rich's option table cuts
# long option names ("--client-config-po…") to fit 80 columns; click wraps the text instead.
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Cross-broker connector framework: move and replicate data between Kafka, Pulsar and RocketMQ.")


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("connect-bridge")
    except metadata.PackageNotFoundError:  # a source checkout that was not pip-installed
        from connect import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"connect-bridge {_version()}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Cross-broker connector framework: move and replicate data between Kafka, Pulsar and RocketMQ."""


_POLICY_HELP = ("Client config override policy: default refuses client settings that load code or name files "
                "outside --client-allowed-paths; all accepts every setting (KIP-458's All).")
_PATHS_HELP = "Directories (comma list) where client settings naming files (*.location, *.file) may point."
_KEYS_HELP = "Client settings refused by default that are allowed anyway (comma list, e.g. debug)."
_CLASSES_HELP = ("Connector classes (module:Class, comma list) the files may name besides the installed entry points "
                 "and built-ins (the worker setting plugin.classes); nothing else is imported because a file names it.")


def _client_policy(policy: str, allowed_paths: str, allowed_keys: str) -> ClientConfigPolicy:
    try:
        return ClientConfigPolicy.from_settings(policy, allowed_keys, allowed_paths)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--client-config-policy") from None


def _log_to_stderr(quiet: bool) -> None:
    logging.basicConfig(level=logging.INFO if not quiet else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    # py4j says "Closing down clientserver connection" at INFO whenever a gateway thread ends
    logging.getLogger("py4j").setLevel(logging.WARNING)


def _load_all(configs: List[Path], policy: ClientConfigPolicy = DEFAULT_POLICY, plugin_classes: str = ""
              ) -> tuple[list[PipelineConfig], list[ConfigError]]:
    try:
        allow_plugin_classes(plugin_classes)
    except PluginError as exc:
        raise typer.BadParameter(str(exc), param_hint="--plugin-classes") from None
    loaded, errors = [], []
    for path in configs:
        try:
            loaded.append(load_pipeline_file(path, policy))
        except ConfigError as exc:
            errors.append(exc)
    names = [p.name for p in loaded]
    for name in {n for n in names if names.count(n) > 1}:
        errors.append(ConfigError(f"connector name {name!r} is used by more than one file"))
    return loaded, errors


def _parse_spark_conf(items: List[str]) -> dict[str, str]:
    conf = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--spark-conf")
        conf[key.strip()] = value.strip()
    return conf


def _load_to_run(configs: List[Path], policy: ClientConfigPolicy, plugin_classes: str) -> tuple[list[PipelineConfig], Redactor]:
    """The pipelines of ``configs`` and a Redactor of their secret values, installed on every log
    line; exit 2 after printing every error when a file is bad."""
    pipelines, errors = _load_all(configs, policy, plugin_classes)
    if errors:
        for exc in errors:
            typer.echo(str(exc), err=True)
        raise typer.Exit(2)
    redactor = Redactor()
    for pipeline in pipelines:
        redactor.add(pipeline.secret_values())
    install_log_redaction(redactor)
    return pipelines, redactor


def _stop_on_signals() -> threading.Event:
    """An event the first SIGINT or SIGTERM sets (the driver finishes the epoch, flushes and
    commits); a second one exits at once, the running epoch to be replayed.

    Signals are handled from the start: a SIGTERM while Spark starts is honoured too (the driver
    loop sees the event before its first epoch). Spark's JVM runs in its own session, so a SIGTERM
    to the whole process group reaches only this process."""
    stop = threading.Event()

    def request_stop(signum, _frame):
        if stop.is_set():  # a second signal: stop now, the running epoch will be replayed
            typer.echo(f"received {signal.Signals(signum).name} again: exiting without committing", err=True)
            os._exit(130)
        typer.echo(f"received {signal.Signals(signum).name}: finishing the epoch, flushing and committing", err=True)
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    return stop


@app.command()
def run(
    configs: List[Path] = typer.Argument(..., help="Connector JSON files ({\"name\":..., \"config\":{...}})."),
    data_dir: Path = typer.Option(Path("data"), "--data-dir", envvar="CONNECT_DATA_DIR",
                                  help="Where offsets are kept; a restart resumes from them."),
    master: str | None = typer.Option(None, help="Spark master; default local[N], a slot per task pair."),
    spark_conf: List[str] = typer.Option([], "--spark-conf", help="Extra Spark setting KEY=VALUE (repeatable)."),
    max_epochs: int | None = typer.Option(None, help="Stop after this many epochs."),
    quiet: bool = typer.Option(False, help="Print failures only."),
    pair_hosting: str = typer.Option("shared", "--pair-hosting", help="shared: a few long-lived Spark tasks run "
                                     "every task pair; job: one Spark job per epoch, a slot per pair."),
    pair_hosts: int = typer.Option(0, "--pair-hosts", min=0, help="Most hosts with shared hosting; 0: twice the "
                                   "cores, at most the slots."),
    client_config_policy: str = typer.Option("default", envvar="CONNECT_CLIENT_CONFIG_POLICY", help=_POLICY_HELP),
    client_allowed_paths: str = typer.Option("", envvar="CONNECT_CLIENT_ALLOWED_PATHS", help=_PATHS_HELP),
    client_allowed_keys: str = typer.Option("", envvar="CONNECT_CLIENT_ALLOWED_KEYS", help=_KEYS_HELP),
    plugin_classes: str = typer.Option("", "--plugin-classes", envvar="CONNECT_PLUGIN_CLASSES", help=_CLASSES_HELP),
) -> None:
    """Run connectors standalone until SIGINT/SIGTERM, printing progress per task pair.

    Secret config values of every pipeline are masked in log lines, progress traces and errors."""
    _log_to_stderr(quiet)
    pipelines, redactor = _load_to_run(configs, _client_policy(client_config_policy, client_allowed_paths,
                                                               client_allowed_keys), plugin_classes)
    conf = _parse_spark_conf(spark_conf)
    if pair_hosting not in ("shared", "job"):
        raise typer.BadParameter(f"{pair_hosting!r} is not one of shared, job", param_hint="--pair-hosting")

    from worker.runtime.driver import Driver
    from worker.runtime.spark import SparkExecutor, control_host, default_master, start_spark
    from worker.stores.store import DataDirLocked, OffsetStore
    from worker.telemetry.progress import ProgressPrinter

    try:  # before Spark starts: a second worker on this directory stops here, with the reason
        store = OffsetStore(data_dir)
    except DataDirLocked as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    stop = _stop_on_signals()
    total_pairs = sum(p.settings.tasks_max for p in pipelines)
    master = master or default_master(total_pairs)
    typer.echo(f"starting Spark ({master}) for {len(pipelines)} connector(s)", err=True)
    # Spark starts in a thread while the connectors start here (they need no Spark).
    starting = start_spark(master, conf)
    try:
        # Executors reach the driver on loopback in local mode; elsewhere Spark says where.
        host = "127.0.0.1" if master.startswith("local") else control_host(starting.result())
        try:
            progress = ProgressPrinter(quiet=quiet, redact=redactor.redact)
            executor = SparkExecutor(starting, hosting=pair_hosting, hosts=pair_hosts)
            driver = Driver(executor, store, pipelines, control_host=host, control_tls=not master.startswith("local"),
                            on_epoch=progress, on_idle=progress.idle)
        except ConnectError as exc:
            typer.echo(redactor.redact(f"error: a connector could not start: {exc}"), err=True)
            raise typer.Exit(1) from None
        starting.result()  # a Spark that cannot start ends the run here, with its error
        code = driver.run(stop, max_epochs=max_epochs)
        if code:
            typer.echo("every task pair has failed; see the traces above", err=True)
        elif stop.is_set():
            typer.echo("stopped: the last epoch is committed", err=True)
    finally:
        store.close()
        try:
            starting.result().stop()
        except Exception:  # noqa: BLE001 - Spark never started: its error was raised above
            pass
    raise typer.Exit(code)


worker_app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                         help="The long-lived worker service (REST API shaped like Kafka Connect's).")
app.add_typer(worker_app, name="worker")
app.add_typer(connectors_app, name="connectors")
app.add_typer(replicators_app, name="replicators")
app.add_typer(dev_app, name="dev")
app.add_typer(mm2_app, name="mm2")


@worker_app.command("start")
def worker_start(
    config: Path | None = typer.Option(None, "--config", "-c", help="Worker settings (JSON), e.g. conf/worker.json."),
    port: int | None = typer.Option(None, help="REST port (overrides rest.port)."),
    host: str | None = typer.Option(None, help="REST address (overrides rest.host)."),
    data_dir: Path | None = typer.Option(None, "--data-dir", envvar="CONNECT_DATA_DIR",
                                         help="Data directory of the embedded stores (overrides data.dir)."),
    quiet: bool = typer.Option(False, help="Log warnings and errors only."),
) -> None:
    """Run the worker until SIGINT/SIGTERM: submit connectors over REST (or `connect connectors ...`);
    they resume in their last state after a restart."""
    _log_to_stderr(quiet)
    from worker.service import load_worker_config, serve
    from worker.stores.store import DataDirLocked

    overrides = {"rest.port": port, "rest.host": host, "data.dir": str(data_dir) if data_dir else None}
    try:
        settings = load_worker_config(config, {k: v for k, v in overrides.items() if v is not None})
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    try:
        code = serve(settings)
    except DataDirLocked as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except (ConnectError, OSError) as exc:
        typer.echo(f"error: the worker could not start: {exc}", err=True)
        raise typer.Exit(1) from None
    raise typer.Exit(code)


@app.command()
def validate(
    configs: List[Path] = typer.Argument(..., help="Connector JSON files to check."),
    client_config_policy: str = typer.Option("default", envvar="CONNECT_CLIENT_CONFIG_POLICY", help=_POLICY_HELP),
    client_allowed_paths: str = typer.Option("", envvar="CONNECT_CLIENT_ALLOWED_PATHS", help=_PATHS_HELP),
    client_allowed_keys: str = typer.Option("", envvar="CONNECT_CLIENT_ALLOWED_KEYS", help=_KEYS_HELP),
    plugin_classes: str = typer.Option("", "--plugin-classes", envvar="CONNECT_PLUGIN_CLASSES", help=_CLASSES_HELP),
) -> None:
    """Print every configuration error of every file; exit 1 if there is any."""
    pipelines, errors = _load_all(configs, _client_policy(client_config_policy, client_allowed_paths,
                                                          client_allowed_keys), plugin_classes)
    for p in pipelines:
        typer.echo(f"{p.name}: OK ({p.source_class.__name__} -> {p.sink_class.__name__}, "
                   f"tasks.max={p.settings.tasks_max})")
    for exc in errors:
        typer.echo(str(exc), err=True)
    raise typer.Exit(1 if errors else 0)


@app.command()
def plugins() -> None:
    """List the connectors, transforms and predicates this installation can load."""
    for info in list_plugins():
        kind = "source" if info.name.endswith("-source") else "sink" if info.name.endswith("-sink") else "?"
        version = "?"
        try:
            cls = resolve_connector(info.target, kind) if kind != "?" else None
            version = cls.version() if cls else "?"
        except ConnectError as exc:
            version = f"unloadable: {exc}"
        typer.echo(f"{info.name:<20} {kind:<7} {version:<10} {info.target}  [{info.origin}]")
    for t in list_transform_plugins():
        try:
            version = resolve_plugin(t.kind, t.name).version()
        except ConnectError as exc:
            version = f"unloadable: {exc}"
        typer.echo(f"{t.name:<24} {t.kind:<14} {version:<10} {t.target}  [{t.origin}]")


@app.command("rocketmq-broker")
def rocketmq_broker(
    port: int = typer.Option(9876, help="Port of the name server and broker (one port serves both)."),
    data_dir: Path = typer.Option(Path("rocketmq-data"), "--data-dir",
                                  help="Where queues, topics and offsets are kept (created 0700; one broker at a time)."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on and to advertise in routes."),
    sync_flush: bool = typer.Option(False, help="fsync every send before answering (default: every flush interval)."),
    flush_interval_ms: int = typer.Option(500, help="fsync period of the commit log and queues."),
    auto_create_topics: bool = typer.Option(True, help="Create unknown topics on their first send (from TBW102)."),
    default_queues: int = typer.Option(8, help="Queue count of TBW102, the most an auto-created topic gets."),
    acl_file: Path | None = typer.Option(None, help="File of ACCESS_KEY:SECRET_KEY lines (one account each); "
                                                       "the CONNECT_ROCKETMQ_ACL variable may hold them too. "
                                                       "None: no ACL."),
    acl: List[str] = typer.Option([], help="ACCESS_KEY:SECRET_KEY (repeatable). Visible to local users in ps: "
                                           "prefer --acl-file or CONNECT_ROCKETMQ_ACL."),
    max_connections: int | None = typer.Option(None, help="Most client connections (default: half the "
                                                             "open-file limit, at most 1024)."),
    max_frame_bytes: int = typer.Option(16 << 20, help="Largest request frame accepted."),
    max_buffered_bytes: int = typer.Option(64 << 20, help="Partial frames and unsent answers of all "
                                                          "connections together."),
    max_pending: int = typer.Option(1024, help="Pulls waiting for an answer per connection (then it is not read)."),
    idle_timeout_ms: int = typer.Option(120_000, help="Close a connection silent this long with nothing pending, "
                                                      "or not reading its answers."),
    frame_timeout_ms: int = typer.Option(30_000, help="Close a connection whose frame is not complete in this time."),
    max_groups: int = typer.Option(1000, help="Most consumer groups kept (configs and offsets)."),
    max_open_files: int | None = typer.Option(None, help="Queue files kept open (default: a quarter of the "
                                                            "open-file limit, at most 256)."),
    log_level: str = typer.Option("INFO", help="Log level."),
) -> None:
    """Run the embedded RocketMQ name server + broker (a development broker: tests, demos, trials)."""
    import logging

    from connectors.rocketmq import broker

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        limits = broker.Limits(**({"max_connections": max_connections} if max_connections else {}),
                               max_frame_bytes=max_frame_bytes, max_buffered_bytes=max_buffered_bytes,
                               max_pending=max_pending, idle_timeout=idle_timeout_ms / 1000,
                               frame_timeout=frame_timeout_ms / 1000)
        broker.main(port, str(data_dir), host=host, sync_flush=sync_flush, flush_interval_ms=flush_interval_ms,
                    auto_create_topics=auto_create_topics, default_queues=default_queues, acl=acl,
                    acl_file=str(acl_file) if acl_file else None, limits=limits, max_groups=max_groups,
                    max_open_files=max_open_files)
    except (ValueError, OSError) as exc:
        typer.echo(f"rocketmq-broker: {exc}", err=True)
        raise typer.Exit(2) from None


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    app()


if __name__ == "__main__":
    main()
