"""``connect worker start``: the long-lived worker (Spark driver + herder + REST API on uvicorn).

The worker config is a JSON object of string keys (``conf/worker.json``), checked with the same
declared-config machinery as connectors (unknown keys get a did-you-mean, values are validated,
secrets are masked in every error). Config provider references (``${env:...}``, ``${file:...}``,
keystore plugins) work in it too.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Mapping

import attrs
import orjson

from connect.clientpolicy import ClientConfigPolicy
from connect.config import ConfigDef, Importance, Type, in_range, one_of
from connect.errors import ConfigError, ConfigIssue
from connect.plugins import allow_plugin_classes
from connect.providers import secret_provider_values
from connect.secrets import install_log_redaction
from worker.api.authpolicy import auth_issues

__all__ = ["WORKER_CONFIG", "WorkerConfig", "load_worker_config", "Worker"]

log = logging.getLogger(__name__)

def _plugin_targets(value: Any) -> str | None:
    """``plugin.classes``: module:Class targets only (checked, not imported)."""
    for item in (t.strip() for t in str(value).split(",")):
        module, sep, attr = item.partition(":")
        if item and not (sep and all(p.isidentifier() for p in module.split(".") + attr.split("."))):
            return f"{item!r} is not a module:Class target"
    return None


WORKER_CONFIG = (
    ConfigDef()
    .define("rest.host", Type.STRING, "127.0.0.1", "Address the REST API listens on.", importance=Importance.HIGH)
    .define("rest.port", Type.INT, 8083, "Port of the REST API (0: any free port).", validator=in_range(0, 65535))
    .define("rest.auth.token", Type.PASSWORD, "", "Bearer token every REST request must send (empty: none).")
    .define("rest.auth.user", Type.STRING, "", "User of HTTP basic authentication (empty: none).")
    .define("rest.auth.password", Type.PASSWORD, "", "Password of HTTP basic authentication.")
    .define("rest.allow.unauthenticated", Type.BOOLEAN, False, "Let the REST API listen beyond loopback without "
            "rest.auth.* (only behind a proxy that authenticates every request); refused otherwise.")
    .define("rest.tls.certfile", Type.STRING, "", "PEM certificate chain: serve HTTPS (with rest.tls.keyfile).")
    .define("rest.tls.keyfile", Type.STRING, "", "PEM private key of rest.tls.certfile.")
    .define("rest.tls.keyfile.password", Type.PASSWORD, "", "Password of an encrypted rest.tls.keyfile.")
    .define("rest.allowed.hosts", Type.STRING, "localhost,localhost.localdomain",
            "Host header names the REST API answers (comma list) besides IP literals, which are always accepted; "
            "'*' accepts any. Against DNS rebinding: a web page whose name resolves to this worker is refused.")
    .define("rest.allowed.origins", Type.STRING, "", "Browser origins (scheme://host:port, comma list) allowed to "
            "call the REST API; a request with any other Origin header is refused (403), so a web page the "
            "operator visits cannot drive the worker. The worker's own origin is always allowed.")
    .define("rest.max.body.bytes", Type.INT, 1_048_576, "Largest request body the REST API reads (413 beyond).",
            validator=in_range(1024, 1 << 30))
    .define("rest.max.json.depth", Type.INT, 32, "Deepest nesting of a JSON request body (400 beyond).",
            validator=in_range(4, 512))
    .define("connector.client.config.override.policy", Type.STRING, "default",
            "Client settings a connector may carry (KIP-458): default refuses settings that load code (e.g. "
            "plugin.library.paths) and files outside connector.client.config.allowed.paths; all accepts any.",
            validator=one_of("default", "all"))
    .define("connector.client.config.allowed.paths", Type.STRING, "", "Directories (comma list) where connector "
            "client settings naming files (ssl.ca.location, tls.trust.certs.file...) may point; relative ones "
            "are taken from data.dir. Empty: none.")
    .define("connector.client.config.allowed.keys", Type.STRING, "", "Client settings the default policy refuses "
            "that connectors may set anyway (comma list, e.g. debug).")
    .define("plugin.classes", Type.STRING, "", "Connector classes (module:Class, comma list) a connector config may "
            "name besides the installed entry points and built-ins; nothing else is ever imported because a config "
            "names it. Empty: none.", validator=_plugin_targets)
    .define("rest.docs.enabled", Type.BOOLEAN, False, "Serve the API's browsable documentation at /docs (Swagger UI "
            "from the installed swagger-ui-bundle-v2 package, pip install 'connect-bridge[docs]'); /openapi.json is "
            "always served.")
    .define("data.dir", Type.STRING, "data", "Where the embedded stores (SQLite) live; locked by this worker.")
    .define("replicators.keystore.root", Type.STRING, "", "Where replicator onboarding (PIP-18) has the authPlugin "
            "keep credentials: <root>/<replicator id> (default: <data.dir>/keystore, absolute).")
    .define("store", Type.STRING, "sqlite", "sqlite: embedded stores in data.dir; kafka: compacted topics.",
            validator=one_of("sqlite", "kafka"))
    .define("store.kafka.bootstrap.servers", Type.STRING, "", "Kafka cluster holding the stores (store=kafka).")
    .define("store.kafka.config.topic", Type.STRING, "connect-configs", "Compacted topic of connector configs.")
    .define("store.kafka.offset.topic", Type.STRING, "connect-offsets", "Compacted topic of committed offsets.")
    .define("store.kafka.status.topic", Type.STRING, "connect-status", "Compacted topic of statuses.")
    .define("store.kafka.replication.factor", Type.INT, 1, "Replication factor of the store topics.",
            validator=in_range(1, 32))
    .define("spark.master", Type.STRING, "", "Spark master; default local[worker.task.slots].")
    .define("worker.task.slots", Type.INT, 16, "Task pairs that can run at once in local mode (all connectors).",
            validator=in_range(1, 4096))
    .define("worker.pair.hosting", Type.STRING, "shared", "shared: a few long-lived Spark tasks (hosts) run many "
            "task pairs each, so a connector costs a thread, not a slot; job: one Spark job per epoch, a slot per pair "
            "for the whole epoch (pairs beyond the slots take turns).", validator=one_of("shared", "job"))
    .define("worker.pair.hosts", Type.INT, 0, "Most hosts (worker.pair.hosting=shared); 0: twice the cores, at most "
            "worker.task.slots.", validator=in_range(0, 4096))
    .define("worker.id", Type.STRING, "", "Name of this worker in statuses; default host:rest.port.")
    .define_prefix("spark.conf.", "Spark settings, e.g. spark.conf.spark.executor.memory.")
    .define_prefix("store.kafka.client.", "Client settings of the store's Kafka clients (security, SASL...).")
    .define_prefix("config.providers", "Config providers: config.providers=NAMES, config.providers.NAME.class/param.*")
)


@attrs.frozen
class WorkerConfig:
    values: dict[str, Any]
    raw: dict[str, str]

    def get(self, key: str) -> Any:
        return self.values[key]

    def prefixed(self, prefix: str) -> dict[str, str]:
        return {k[len(prefix):]: v for k, v in self.raw.items() if k.startswith(prefix)}

    def providers_config(self) -> dict[str, str]:
        return {k: v for k, v in self.raw.items() if k.startswith("config.providers")}


def load_worker_config(path: str | Path | None, overrides: Mapping[str, Any] | None = None) -> WorkerConfig:
    """The worker config from a JSON file (or defaults), with ``overrides`` applied; provider
    references resolved; raises ConfigError naming the file and every bad key."""
    document: Any = {}
    source = str(path) if path else None
    if path:
        try:
            document = orjson.loads(Path(path).read_bytes())
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}", source=source) from None
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"not valid JSON: {exc}", source=source) from None
    if not isinstance(document, dict):
        raise ConfigError([ConfigIssue("$", None, "must be a JSON object of worker settings")], source=source)
    raw: dict[str, str] = {}
    issues = []
    for key, value in {**document, **(overrides or {})}.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        if not isinstance(value, (str, int, float)):
            issues.append(ConfigIssue(f'$["{key}"]', None, "must be a string, number or boolean"))
            continue
        raw[key] = str(value)
    if issues:
        raise ConfigError(issues, source=source)
    from connect.providers import ConfigProviders

    # The worker file is the operator's own: its references (the REST token, the store's address...)
    # are resolved without the fences that keep connectors (REST callers) away from them.
    fences = (".param.allowlist.pattern", ".param.allowed.paths")
    providers = ConfigProviders.from_worker_config({k: v for k, v in raw.items()
                                                    if k.startswith("config.providers") and not k.endswith(fences)})
    resolved = providers.resolve(raw).config
    issues = list(WORKER_CONFIG.validate(resolved)) + list(WORKER_CONFIG.unknown_keys(resolved))
    values = WORKER_CONFIG.parse(resolved, source=source) if not issues else {}
    if not issues and values["store"] == "kafka" and not values["store.kafka.bootstrap.servers"]:
        issues.append(ConfigIssue("store.kafka.bootstrap.servers", None, "required when store=kafka"))
    if not issues and values["rest.auth.user"] and not values["rest.auth.password"]:
        issues.append(ConfigIssue("rest.auth.password", None, "required with rest.auth.user (no empty passwords)"))
    if not issues:
        issues.extend(auth_issues(raw, values))
    if not issues and bool(values["rest.tls.certfile"]) != bool(values["rest.tls.keyfile"]):
        issues.append(ConfigIssue("rest.tls.keyfile", None, "rest.tls.certfile and rest.tls.keyfile go together"))
    if not issues and values["rest.docs.enabled"]:
        from worker.api.docs import swagger_ui_files

        try:
            swagger_ui_files()
        except ConfigError as exc:
            issues.extend(exc.issues)
    if issues:
        raise ConfigError(issues, source=source)
    return WorkerConfig(values, resolved)


# Variables a connector may read with ${env:...} when the operator sets no allowlist.pattern: the
# names the shipped connector examples use. HOME, PATH, AWS_*, the worker's own settings (CONNECT_TOKEN,
# STORE_BOOTSTRAP...) are refused: a REST caller could send any readable value to a broker it chose.
DEFAULT_ENV_ALLOWLIST = r"(SOURCE|TARGET|KAFKA|PULSAR|ROCKETMQ)_[A-Z0-9_]*"


def fenced_providers(config: WorkerConfig, keystore_root: str) -> dict[str, str]:
    """The provider settings with the worker's fences (KIP-993) wherever the operator set none for a
    built-in provider: ``file`` and ``directory`` read only under ``<data.dir>/secrets`` (and
    ``directory`` the replicator keystore), ``env`` only :data:`DEFAULT_ENV_ALLOWLIST`. A REST caller
    must not be able to send the worker's files or environment to a broker it chose. Relative paths in
    their references are taken from ``data.dir`` too (``base.dir``), as the relative fences are."""
    raw = config.providers_config()
    names = [n.strip() for n in raw.get("config.providers", "env,file").split(",") if n.strip()]
    secrets = os.path.join(os.path.abspath(config.get("data.dir")), "secrets")
    defaults = {"env": ("allowlist.pattern", DEFAULT_ENV_ALLOWLIST), "file": ("allowed.paths", secrets),
                "directory": ("allowed.paths", f"{secrets},{keystore_root}")}
    out = dict(raw)
    for name in names:
        if name in defaults and raw.get(f"config.providers.{name}.class", name).strip() in (name, ""):
            param, value = defaults[name]
            key = f"config.providers.{name}.param.{param}"
            out[key] = data_dir_paths(config, out[key]) if key in out and param == "allowed.paths" else out.get(key, value)
            if param == "allowed.paths":  # relative references too: ${file:secrets/db.properties:pw}
                out.setdefault(f"config.providers.{name}.param.base.dir", os.path.abspath(config.get("data.dir")))
    return out


def data_dir_paths(config: WorkerConfig, paths: str) -> str:
    """A comma list of paths with the relative ones taken from ``data.dir`` (not from the working
    directory), so a worker config's fences follow ``--data-dir``."""
    root = os.path.abspath(config.get("data.dir"))
    return ",".join(p if os.path.isabs(p) else os.path.join(root, p) for p in (x.strip() for x in paths.split(","))
                    if p)


class Worker:
    """Builds and runs the service: stores, Spark, herder, metrics, REST server."""

    def __init__(self, config: WorkerConfig, *, spark_app=None):
        from connect.providers import ConfigProviders
        from worker.telemetry.metrics import ConnectMetrics

        self.config = config
        allow_plugin_classes(config.get("plugin.classes"))
        self.keystore_root = config.get("replicators.keystore.root") or os.path.join(
            os.path.abspath(config.get("data.dir")), "keystore")
        self.providers = ConfigProviders.from_worker_config(fenced_providers(config, self.keystore_root))
        self.client_policy = ClientConfigPolicy.from_settings(config.get("connector.client.config.override.policy"),
                                                              config.get("connector.client.config.allowed.keys"),
                                                              data_dir_paths(config, config.get(
                                                                  "connector.client.config.allowed.paths")))
        self.metrics = ConnectMetrics()
        self._spark_app = spark_app  # a running SparkApp/SparkContext to use (tests); None: start one
        self._owns_spark = spark_app is None
        self.stores = self._open_stores()
        self.herder = None
        self.server = None
        self.port: int | None = None
        self.address = None  # worker.api.address.WorkerAddress, once the REST socket is bound
        self.history = None  # worker.console.model.ConsoleHistory, sampling while the worker runs

    def _open_stores(self):
        c = self.config
        if c.get("store") == "kafka":
            from worker.stores.kafkastore import KafkaStores

            return KafkaStores(c.get("store.kafka.bootstrap.servers"), config_topic=c.get("store.kafka.config.topic"),
                               offset_topic=c.get("store.kafka.offset.topic"),
                               status_topic=c.get("store.kafka.status.topic"),
                               replication_factor=c.get("store.kafka.replication.factor"),
                               client_config=c.prefixed("store.kafka.client."))
        from worker.stores.store import SqliteStores

        return SqliteStores(c.get("data.dir"))

    def _resolver(self, config: Mapping[str, str]):
        resolved = self.providers.resolve(config)
        return resolved.config, set(resolved.provided_keys), secret_provider_values(config, resolved)

    def start(self) -> None:
        """Start Spark, the herder (resuming stored connectors) and the REST server (in a thread)."""
        import uvicorn

        from worker.api.address import record_start
        from worker.api.rest import VERSION, RestAuth, create_app
        from worker.console.model import ConsoleHistory, ConsoleViews
        from worker.herder import Herder
        from worker.replication.replicators import Replicators
        from worker.runtime.spark import SparkExecutor, control_host, start_spark

        c = self.config
        master = c.get("spark.master") or f"local[{c.get('worker.task.slots')}]"
        if self._spark_app is None:
            self._spark_app = start_spark(master, c.prefixed("spark.conf."))
        spark = self._spark_app
        host = "127.0.0.1" if master.startswith("local") else control_host(_ready(spark))
        sock = socket.socket(socket.AF_INET6 if ":" in c.get("rest.host") else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((c.get("rest.host"), c.get("rest.port")))
        self.port = sock.getsockname()[1]
        worker_id = c.get("worker.id") or f"{c.get('rest.host')}:{self.port}"
        executor = SparkExecutor(spark, hosting=c.get("worker.pair.hosting"), hosts=c.get("worker.pair.hosts"))
        self.metrics.watch_executor(executor)
        self.herder = Herder(executor, self.stores, worker_id=worker_id, resolver=self._resolver,
                             metrics=self.metrics, control_host=host, client_policy=self.client_policy,
                             control_tls=not master.startswith("local"))
        redactor = self.herder.redactor
        redactor.add(v for k, v in c.raw.items() if v and WORKER_CONFIG.is_secret(k))
        install_log_redaction(redactor)
        auth = RestAuth(c.get("rest.auth.token"), c.get("rest.auth.user"), c.get("rest.auth.password"))
        tls = {}
        if c.get("rest.tls.certfile"):
            tls = {"ssl_certfile": c.get("rest.tls.certfile"), "ssl_keyfile": c.get("rest.tls.keyfile"),
                   "ssl_keyfile_password": c.get("rest.tls.keyfile.password") or None}
        # Where it listens and how many times it started, in its data directory (worker.api.address):
        # `connect connectors --data-dir` finds it there, and the console shows the generation.
        self.address = address = record_start(c.get("data.dir"), scheme="https" if tls else "http",
                                              host=c.get("rest.host"), port=self.port, worker_id=worker_id)
        self.replicators = Replicators(self.herder, self.providers, self.keystore_root)
        self.history = ConsoleHistory(self.metrics, self.herder.connector_names)
        identity = {"worker_id": worker_id, "version": VERSION, "pid": address.pid, "started_at": address.started_at,
                    "generation": address.generation, "store": c.get("store")}
        console = ConsoleViews(self.herder, self.metrics, self.history, lambda: identity)
        app = create_app(self.herder, auth=auth, metrics=self.metrics, replicators=self.replicators,
                         allowed_hosts=_comma_list(c.get("rest.allowed.hosts")),
                         allowed_origins=_comma_list(c.get("rest.allowed.origins")),
                         max_body=c.get("rest.max.body.bytes"), max_json_depth=c.get("rest.max.json.depth"),
                         console=console, docs=c.get("rest.docs.enabled"))
        # log_config=None: uvicorn's loggers propagate to the root handlers, which mask secrets.
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", log_config=None, **tls)
        self.server = uvicorn.Server(config)
        self.server.install_signal_handlers = lambda: None  # the CLI owns the signals
        threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, name="rest", daemon=True).start()
        _ready(spark)  # a Spark that cannot start ends here, with its error
        self.herder.start()
        self.history.start()
        log.info("worker %s (generation %d): REST API on %s, console on %s/ui", worker_id, address.generation,
                 address.url, address.url)

    def close(self) -> None:
        if self.history is not None:
            self.history.close()
        if self.herder is not None:
            self.herder.close()
        if self.server is not None:
            self.server.should_exit = True
        self.stores.close()
        if self._owns_spark and self._spark_app is not None:
            try:
                self._spark_app.result().stop()
            except Exception:  # noqa: BLE001 - Spark never started
                pass


def _comma_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _ready(spark):
    """The SparkApp of a future still starting (waiting for it), or the app given."""
    return spark.result() if isinstance(spark, Future) else spark


def serve(config: WorkerConfig) -> int:
    """Run until SIGINT/SIGTERM; connectors end their epochs, drain and commit."""
    stop = threading.Event()

    def request_stop(signum, _frame):
        if stop.is_set():
            os._exit(130)
        log.warning("received %s: stopping the connectors (epochs drain and commit)", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    from worker.watchdog import HealthWatchdog

    worker = Worker(config)
    watchdog = None
    try:
        worker.start()
        print(f"worker ready: REST API on port {worker.port}", flush=True)
        watchdog = HealthWatchdog(worker.address.url).start()  # systemd's Type=notify and WatchdogSec
        stop.wait()
    finally:
        if watchdog is not None:
            watchdog.close()
        worker.close()
    return 0

