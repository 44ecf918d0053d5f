"""Pipeline (connector) configuration: Kafka Connect's JSON envelope, one source + one sink.

A pipeline config file looks like::

    {"name": "orders-mirror",
     "config": {
        "source.connector.class": "kafka", "source.bootstrap.servers": "a:9092", "source.topics": "orders",
        "sink.connector.class": "kafka",   "sink.bootstrap.servers": "b:9092",
        "tasks.max": "2"}}

Keys starting ``source.`` configure the source connector (the prefix is removed before it sees
them), ``sink.`` the sink connector, ``dlq.`` override sink keys for the dead-letter writer, and
the remaining keys are the framework's own (:data:`PIPELINE_CONFIG`). Values are strings, as in
Kafka Connect; numbers and booleans are accepted and turned into strings.

Guarantees of :func:`parse_pipeline`: the connector name is 1 to 128 letters, digits, ``.``,
``_`` or ``-`` starting with a letter or digit (it becomes file names and ids, so it can never
hold a path); every key is known - a framework key, a side key (:data:`SIDE_CONFIG`) or a key the
side's connector declares or passes through (``dlq.*`` against the sink connector) - or it is
reported with a did-you-mean; and no issue shows a secret's value (declared secrets, keys named
like credentials, and any text containing such a value are masked).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
from pathlib import Path
from typing import Any, Mapping

import attrs
import orjson

from connect.builtin_providers import EnvVarConfigProvider
from connect.clientpolicy import DEFAULT_POLICY, ClientConfigPolicy
from connect.config import ConfigDef, Importance, Type, non_empty, one_of
from connect.connector import SinkConnector, SourceConnector
from connect.converters import CONVERTERS
from connect.errors import ConfigError, ConfigIssue, PluginError
from connect.plugins import resolve_connector
from connect.providers import ConfigProviders, UnresolvedReferences, parse_references
from connect.secrets import MASK, Redactor, is_secret_name
from connect.sink.side import side_output_config, side_output_issues, writes_side_outputs
from connect.tasks.exactlyonce import config_issues
from connect.tasks.stages import target_routes
from connect.transforms.chain import TransformsConfig, is_transforms_key, parse_transforms
from connect.transforms.chain import secret_keys as transforms_secret_keys
from connect.transforms.topics import routed_issues
from worker.settings import FRAMEWORK_CONFIG, FrameworkSettings

__all__ = ["PIPELINE_CONFIG", "SIDE_CONFIG", "PipelineConfig", "parse_pipeline", "load_pipeline_file",
           "resolve_env_references", "check_connector_name", "hide_provided"]

PIPELINE_CONFIG = FRAMEWORK_CONFIG
"""The framework's own keys: generated from the typed settings (``worker.settings``), declared there once."""

SIDE_CONFIG = (
    ConfigDef()
    .define("connector.class", Type.STRING, doc="Connector: short alias, entry point name or module:Class.",
            importance=Importance.HIGH, validator=non_empty)
    .define("key.converter", Type.STRING, "bytes", "Key converter: bytes, string or json.", validator=one_of(*CONVERTERS))
    .define("value.converter", Type.STRING, "bytes", "Value converter: bytes, string or json.",
            validator=one_of(*CONVERTERS))
    .define("cluster.alias", Type.STRING, "", "Name of this side's cluster in replication (source.cluster.alias, "
            "sink.cluster.alias): with both set, records carry the origin chain and never loop back.")
)

_PREFIXES = ("source.", "sink.", "dlq.")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_NAME_RULE = ("must be a non-empty string naming the connector: 1 to 128 characters, letters, digits, "
              "'.', '_' or '-', starting with a letter or digit")


def check_connector_name(name: Any) -> str | None:
    """None when ``name`` is a valid connector name (it becomes file names and ids), else the rule."""
    return None if isinstance(name, str) and _NAME.fullmatch(name) else _NAME_RULE


@attrs.frozen
class PipelineConfig:
    name: str
    settings: FrameworkSettings
    source_class: type[SourceConnector]
    source_config: dict[str, str]
    sink_class: type[SinkConnector]
    sink_config: dict[str, str]
    dlq_overrides: dict[str, str]
    raw: dict[str, str]
    provided_values: frozenset[str] = frozenset()  # values that came from config providers (masked too)
    # dlq.connector.class: the broker sink writing dead letters, dlq_overrides its whole config
    dlq_class: type[SinkConnector] | None = None
    transforms: TransformsConfig = TransformsConfig()  # the transforms/predicates keys, parsed

    def config_hash(self) -> str:
        return hashlib.sha256(orjson.dumps(self.raw, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]

    def secret_keys(self) -> set[str]:
        """Keys of :attr:`raw` holding credentials: declared secret by the connector of their side
        (``dlq.*`` by the sink's) or named like a credential."""
        return _secret_keys(self.raw, {"source": self.source_class, "sink": self.sink_class, "dlq": self.dlq_class})

    def secret_values(self) -> set[str]:
        """The non-empty values of :meth:`secret_keys`, e.g. for a :class:`~connect.secrets.Redactor`."""
        return {self.raw[k] for k in self.secret_keys() if self.raw[k]} | set(self.provided_values)


def _secret_keys(flat: Mapping[str, str], classes: Mapping[str, type | None]) -> set[str]:
    sides = {**classes, "dlq": classes.get("dlq") or classes.get("sink")}
    declared = {f"{side}.{name}" for side, cls in sides.items() if cls is not None
                for name in cls.config_def().secret_names()}
    return {k for k in flat if k in declared or is_secret_name(k)} | transforms_secret_keys(flat)


def _scrub(issues: list[ConfigIssue], flat: Mapping[str, str], classes: Mapping[str, type | None]) -> list[ConfigIssue]:
    """The issues with every secret masked: values of secret keys, and secret values inside any text."""
    secret = _secret_keys(flat, classes)
    redact = Redactor.from_config(flat, secret).redact

    def scrub(issue: ConfigIssue) -> ConfigIssue:
        value = issue.value
        if value is not None and (issue.key in secret or is_secret_name(issue.key)):
            value = MASK
        elif isinstance(value, str):
            value = redact(value)
        return ConfigIssue(redact(issue.key), value, redact(issue.message))

    return [scrub(issue) for issue in issues]


def _flat_strings(config: Mapping[str, Any], issues: list[ConfigIssue]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, (str, int, float)):
            out[key] = str(value)
        elif value is None:
            continue
        else:
            issues.append(ConfigIssue(f'$.config["{key}"]', None,
                                      f"must be a string, number or boolean, not {type(value).__name__}"))
    return out


def _side(flat: Mapping[str, str], prefix: str) -> dict[str, str]:
    return {k[len(prefix):]: v for k, v in flat.items() if k.startswith(prefix)}


def _resolve_side(flat: dict[str, str], kind: str, issues: list[ConfigIssue]):
    side = _side(flat, f"{kind}.")
    for issue in SIDE_CONFIG.validate(side):
        issues.append(issue._replace(key=f"{kind}.{issue.key}"))
    name = side.get("connector.class")
    if not name:
        return None, side
    try:
        cls = resolve_connector(name, kind)
    except PluginError as exc:
        issues.append(ConfigIssue(f"{kind}.connector.class", name, str(exc)))
        return None, side
    own = {k: v for k, v in side.items() if k not in SIDE_CONFIG}
    for issue in cls.validate(own):
        issues.append(issue._replace(key=f"{kind}.{issue.key}"))
    issues.extend(cls.config_def().unknown_keys(own, prefix=f"{kind}.", also_known=[k.name for k in SIDE_CONFIG.keys()]))
    return cls, side


def _unknown_pipeline_key(key: str, classes: Mapping[str, type | None]) -> ConfigIssue:
    """A framework key nobody declares: suggest the sides whose connector takes it (else both) and
    a close framework key."""
    sides = [f"{kind}.{key}" for kind, cls in classes.items()
             if cls is not None and (key in cls.config_def() or cls.config_def().passes_through(key))]
    hint = " or ".join(sides or [f"source.{key}", f"sink.{key}"])
    close = difflib.get_close_matches(key, [k.name for k in PIPELINE_CONFIG.keys()] + ["transforms", "predicates"], n=1)
    if close:
        hint += f" (connector keys take their side's prefix) or the framework key {close[0]}"
    return ConfigIssue(key, None, f"unknown pipeline key; did you mean {hint}?")


def parse_pipeline(document: Any, *, source: str | None = None,
                   client_policy: ClientConfigPolicy = DEFAULT_POLICY) -> PipelineConfig:
    """Validate a ``{"name": ..., "config": {...}}`` document; raise ConfigError with every issue,
    including every client setting ``client_policy`` refuses (code, local files)."""
    issues: list[ConfigIssue] = []
    if not isinstance(document, dict):
        raise ConfigError([ConfigIssue("$", None, "must be a JSON object with 'name' and 'config'")], source=source)
    name = document.get("name")
    name = name.strip() if isinstance(name, str) else name
    if problem := check_connector_name(name):
        issues.append(ConfigIssue("$.name", name, problem))
    unknown_top = sorted(set(document) - {"name", "config"})
    for key in unknown_top:
        issues.append(ConfigIssue(f"$.{key}", None, "unknown field; a connector file holds only 'name' and 'config'"))
    config = document.get("config")
    if not isinstance(config, dict):
        issues.append(ConfigIssue("$.config", None, "must be an object of string keys to string values"))
        raise ConfigError(issues, source=source)
    flat = _flat_strings(config, issues)
    issues.extend(client_policy.check(flat))
    own = {k: v for k, v in flat.items() if not k.startswith(_PREFIXES) and not is_transforms_key(k)}
    issues.extend(PIPELINE_CONFIG.validate(own))
    transforms, transform_issues = parse_transforms(flat)  # transforms.* / predicates.* (connect.transforms)
    issues.extend(transform_issues)
    source_cls, source_cfg = _resolve_side(flat, "source", issues)
    sink_cls, sink_cfg = _resolve_side(flat, "sink", issues)
    classes = {"source": source_cls, "sink": sink_cls}
    for key in sorted(set(own) - {k.name for k in PIPELINE_CONFIG.keys()} - {"name"}):
        issues.append(_unknown_pipeline_key(key, classes))
    dlq_cls, dlq = _dlq_side(flat, sink_cls, issues)
    classes = {**classes, "dlq": dlq_cls}
    values = PIPELINE_CONFIG.parse(own) if not issues else {}
    aliases = _replication_aliases(source_cfg, sink_cfg, values, issues) if not issues else ("", "")
    if issues:
        raise ConfigError(_scrub(issues, flat, classes), source=source)
    settings = FrameworkSettings.from_config(values, aliases)
    issues = _target_name_issues(source_cls, source_cfg, sink_cls, sink_cfg, dlq, settings, transforms, dlq_cls)
    issues += config_issues(settings.runner.exactly_once, sink_cls, source_cfg, sink_cfg,  # exactly.once.support
                            settings.runner.epoch_max_ms + settings.runner.epoch_grace_ms)
    if issues:
        raise ConfigError(_scrub(issues, flat, classes), source=source)
    return PipelineConfig(
        name=name, settings=settings, source_class=source_cls, source_config=source_cfg,
        sink_class=sink_cls, sink_config=sink_cfg, dlq_overrides=dlq, raw=flat, dlq_class=dlq_cls,
        transforms=transforms,
    )


def _dlq_side(flat: Mapping[str, str], sink_cls: type[SinkConnector] | None, issues: list[ConfigIssue]):
    """(connector, keys) of the dead-letter writer: ``dlq.*`` override the sink's keys, unless
    ``dlq.connector.class`` names a broker sink - then they are that connector's own config (a
    sink with no cluster of its own, a user's file sink, keeps its dead letters in Kafka...)."""
    dlq = _side(flat, "dlq.")
    name = dlq.pop("connector.class", "")
    if not name:
        if sink_cls is not None:
            issues.extend(sink_cls.config_def().unknown_keys(dlq, prefix="dlq."))
        return None, dlq
    try:
        cls = resolve_connector(name, "sink")
    except PluginError as exc:
        issues.append(ConfigIssue("dlq.connector.class", name, str(exc)))
        return None, dlq
    if not writes_side_outputs(cls):
        issues.append(ConfigIssue("dlq.connector.class", name, "writes no side outputs (it defines no "
                                  "SinkConnector.side_writer): name a broker sink (kafka, pulsar, rocketmq)"))
        return None, dlq
    issues.extend(i._replace(key=f"dlq.{i.key}") for i in cls.validate(dlq))
    issues.extend(cls.config_def().unknown_keys(dlq, prefix="dlq."))
    return cls, dlq


def _target_name_issues(source_cls: type[SourceConnector], source_cfg: Mapping[str, str],
                        sink_cls: type[SinkConnector], sink_cfg: Mapping[str, str], dlq: Mapping[str, str],
                        settings: FrameworkSettings, transforms: TransformsConfig,
                        dlq_cls: type[SinkConnector] | None = None) -> list[ConfigIssue]:
    """Target names the sink's broker refuses, wherever they are known before anything runs, so
    ``validate`` and ``run`` refuse them alike: the topics the source names, as the sink receives
    them (a replication flow renames them, then the transforms: ``connect.tasks.stages.target_routes``),
    and the dead-letter and offset-syncs topics (written with the sink's connector)."""
    sink_own = {k: v for k, v in sink_cfg.items() if k not in SIDE_CONFIG}
    issues: list[ConfigIssue] = []
    named = source_cls.named_topics({k: v for k, v in source_cfg.items() if k not in SIDE_CONFIG})
    if named:
        routes = target_routes(settings.runner, transforms, named)
        issues.extend(routed_issues(routes, lambda received: [
            i._replace(key=f"sink.{i.key}") for i in sink_cls.target_issues(sink_own, received)]))
    side = side_output_issues(dlq_cls or sink_cls, {"errors.deadletterqueue.topic.name": settings.dlq_topic}) + \
        side_output_issues(sink_cls, {"offset.syncs.topic": settings.runner.offset_syncs_topic})
    if side:
        return issues + side
    for key, topic, writer_cls, overrides, what in (
            ("errors.deadletterqueue.topic.name", settings.dlq_topic, dlq_cls or sink_cls, dlq,
             "every dead-lettered record"),
            ("offset.syncs.topic", settings.runner.offset_syncs_topic, sink_cls, {}, "every offset sync")):
        if topic:
            fixed = side_output_config(sink_own, overrides, topic, own_connector=writer_cls is dlq_cls)
            issues.extend(ConfigIssue(key, None, i.message.replace("every source topic maps", f"{what} goes", 1))
                          for i in writer_cls.validate(fixed) if i.key == "topic")
    return issues


def _replication_aliases(source_cfg: Mapping[str, str], sink_cfg: Mapping[str, str], values: Mapping[str, Any],
                         issues: list[ConfigIssue]) -> tuple[str, str]:
    """(source alias, target alias) of a replication flow, or ("", "") when it is none."""
    source = source_cfg.get("cluster.alias", "").strip()
    target = sink_cfg.get("cluster.alias", "").strip()
    other = values["target.cluster.alias"].strip()
    if other and target and other != target:
        issues.append(ConfigIssue("target.cluster.alias", other, f"differs from sink.cluster.alias {target!r}"))
    target = target or other
    for key, alias in (("source.cluster.alias", source), ("target.cluster.alias", target)):
        if "," in alias:
            issues.append(ConfigIssue(key, alias, "may not contain ',' (it separates the origin chain)"))
    if bool(source) != bool(target):
        missing = "target.cluster.alias (or sink.cluster.alias)" if source else "source.cluster.alias"
        issues.append(ConfigIssue(missing, None, "replication needs both cluster aliases"))
    elif source and source == target:
        issues.append(ConfigIssue("target.cluster.alias", target, "must differ from source.cluster.alias"))
    return source, target


def resolve_env_references(document: Any, environ: Mapping[str, str] | None = None) -> Any:
    """Replace ``${env:NAME}`` (or ``${env:NAME:-default}``) in config values, as Kafka Connect's
    EnvVarConfigProvider does, so files can leave addresses and secrets to the environment.
    Raises ConfigError naming every key whose variable is unset.

    Delegates to :mod:`connect.providers` with only the ``env`` provider enabled: references to
    other providers (``${file:...}``) and ``$${env:...}`` are left as written."""
    if not isinstance(document, dict) or not isinstance(document.get("config"), dict):
        return document
    try:
        resolved = ConfigProviders({"env": EnvVarConfigProvider(os.environ if environ is None else environ)}).resolve(
            document["config"], ignore_unknown=True)
    except UnresolvedReferences as exc:
        raise ConfigError([ConfigIssue(f'$.config["{f.key}"]', None, f.reason) for f in exc.failures]) from None
    return {**document, "config": resolved.config}


def hide_provided(issues: list[ConfigIssue], config: Mapping[str, Any], resolved: Mapping[str, Any],
                  provided: set[str] | frozenset[str], secret_values: set[str] | frozenset[str],
                  path: str | None = "$.config") -> list[ConfigIssue]:
    """The issues of a config whose provider references were resolved (``config`` as written,
    ``resolved`` after), fit to show: each issue's JSON path and rule, and its value only when the
    key neither holds a reference nor a secret; every value a provider returned is masked in the
    text. Keys become JSON paths under ``path`` (None: kept as they are). The REST API (the herder's
    validation) and the CLI (``connect validate`` / ``run``) both answer through this."""
    hidden = {k for k, v in config.items()
              if k in provided or is_secret_name(k) or (isinstance(v, str) and parse_references(v))}
    redact = Redactor([*secret_values, *(str(resolved[k]) for k in hidden if resolved.get(k))]).redact

    def shown(issue: ConfigIssue) -> ConfigIssue:
        key = issue.key
        if key.startswith('$.config["') and key.endswith('"]'):
            key = key[len('$.config["'):-2]
        value = issue.value
        if value is not None and (key in hidden or not isinstance(value, str) or redact(value) != value):
            value = None
        return ConfigIssue(issue.key if path is None else _json_path(issue.key, path), value, redact(issue.message))

    return [shown(i) for i in issues]


def _json_path(key: str, base: str) -> str:
    """A config issue's key as a JSON path into the request body."""
    if key.startswith("$"):
        return key.replace("$.config", base, 1) if base != "$.config" else key
    return f'{base}["{key}"]'


def load_pipeline_file(path: str | Path, client_policy: ClientConfigPolicy = DEFAULT_POLICY) -> PipelineConfig:
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", source=str(path)) from None
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON: {exc}", source=str(path)) from None
    provided: frozenset[str] = frozenset()
    written = document.get("config") if isinstance(document, dict) else None
    if not isinstance(written, dict):
        return parse_pipeline(document, source=str(path), client_policy=client_policy)
    # The default providers (env, file), as the worker service resolves them; other values kept.
    from connect.providers import ConfigProviders, secret_provider_values

    with ConfigProviders.from_worker_config({}) as providers:
        resolved = providers.resolve({k: v for k, v in written.items() if isinstance(v, str)}, source=str(path))
    config = {**written, **resolved.config}
    provided = frozenset(secret_provider_values(config, resolved))
    try:
        pipeline = parse_pipeline({**document, "config": config}, source=str(path), client_policy=client_policy)
    except ConfigError as exc:  # never a resolved value in what is printed: the REST API's rule
        issues = hide_provided(exc.issues, written, config, resolved.provided_keys, set(resolved.secret_values), None)
        raise ConfigError(issues, source=str(path)) from None
    return attrs.evolve(pipeline, provided_values=provided) if provided else pipeline
