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
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any, Mapping

import attrs
import orjson

from connect.config import ConfigDef, Importance, Type, at_least, non_empty, one_of
from connect.connector import SinkConnector, SourceConnector
from connect.converters import CONVERTERS
from connect.errors import ConfigError, ConfigIssue, PluginError
from connect.plugins import resolve_connector

__all__ = ["PIPELINE_CONFIG", "SIDE_CONFIG", "PipelineConfig", "parse_pipeline", "load_pipeline_file",
           "resolve_env_references"]

PIPELINE_CONFIG = (
    ConfigDef()
    .define("tasks.max", Type.INT, 1, "Most task pairs to run; the source connector may use fewer.",
            importance=Importance.HIGH, validator=at_least(1))
    .define("epoch.max.ms", Type.INT, 10_000, "Longest epoch: offsets are committed at least this often.",
            validator=at_least(10))
    .define("epoch.max.records", Type.INT, 1_000_000, "The epoch ends once a task pair moved this many records "
            "(the last poll's batch is always completed).",
            validator=at_least(1))
    .define("max.in.flight.records", Type.INT, 100_000,
            "Records put to the sink but not yet acknowledged before polling pauses for a flush.",
            validator=at_least(1))
    .define("errors.retry.timeout", Type.INT, 30_000,
            "Milliseconds to keep retrying a retriable failure (poll, put, rejected records); 0 = no retry.",
            validator=at_least(0))
    .define("errors.retry.delay.max.ms", Type.INT, 5_000, "Longest wait between retries (backoff doubles from 100 ms).",
            validator=at_least(1))
    .define("errors.tolerance", Type.STRING, "none",
            "none: a record that fails after retries, hooks and DLQ fails the task; all: skip and count it.",
            validator=one_of("none", "all"))
    .define("errors.log.enable", Type.BOOLEAN, False, "Log every failed record with its position and error.")
    .define("errors.deadletterqueue.topic.name", Type.STRING, "",
            "Topic that receives records the sink rejected (written with the sink's connector; dlq.* keys override).")
    .define("errors.deadletterqueue.context.headers.enable", Type.BOOLEAN, True,
            "Add __connect.errors.* headers (origin position, exception) to dead-lettered records.")
)

SIDE_CONFIG = (
    ConfigDef()
    .define("connector.class", Type.STRING, doc="Connector: short alias, entry point name or module:Class.",
            importance=Importance.HIGH, validator=non_empty)
    .define("key.converter", Type.STRING, "bytes", "Key converter: bytes, string or json.", validator=one_of(*CONVERTERS))
    .define("value.converter", Type.STRING, "bytes", "Value converter: bytes, string or json.",
            validator=one_of(*CONVERTERS))
)

_PREFIXES = ("source.", "sink.", "dlq.")


@attrs.frozen
class PipelineConfig:
    name: str
    settings: dict[str, Any]
    source_class: type[SourceConnector]
    source_config: dict[str, str]
    sink_class: type[SinkConnector]
    sink_config: dict[str, str]
    dlq_overrides: dict[str, str]
    raw: dict[str, str]

    def config_hash(self) -> str:
        return hashlib.sha256(orjson.dumps(self.raw, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


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
    return cls, side


def parse_pipeline(document: Any, *, source: str | None = None) -> PipelineConfig:
    """Validate a ``{"name": ..., "config": {...}}`` document; raise ConfigError with every issue."""
    issues: list[ConfigIssue] = []
    if not isinstance(document, dict):
        raise ConfigError([ConfigIssue("$", None, "must be a JSON object with 'name' and 'config'")], source=source)
    name = document.get("name")
    if not isinstance(name, str) or not name.strip():
        issues.append(ConfigIssue("$.name", name, "must be a non-empty string naming the connector"))
    unknown_top = sorted(set(document) - {"name", "config"})
    for key in unknown_top:
        issues.append(ConfigIssue(f"$.{key}", None, "unknown field; a connector file holds only 'name' and 'config'"))
    config = document.get("config")
    if not isinstance(config, dict):
        issues.append(ConfigIssue("$.config", None, "must be an object of string keys to string values"))
        raise ConfigError(issues, source=source)
    flat = _flat_strings(config, issues)
    own = {k: v for k, v in flat.items() if not k.startswith(_PREFIXES)}
    for key in sorted(set(own) - {k.name for k in PIPELINE_CONFIG.keys()} - {"name"}):
        hint = f"; did you mean source.{key} or sink.{key}?"
        issues.append(ConfigIssue(key, own[key], f"unknown pipeline key{hint}"))
    issues.extend(PIPELINE_CONFIG.validate(own))
    source_cls, source_cfg = _resolve_side(flat, "source", issues)
    sink_cls, sink_cfg = _resolve_side(flat, "sink", issues)
    if issues:
        raise ConfigError(issues, source=source)
    settings = PIPELINE_CONFIG.parse(own)
    return PipelineConfig(
        name=name.strip(), settings=settings, source_class=source_cls, source_config=source_cfg,
        sink_class=sink_cls, sink_config=sink_cfg, dlq_overrides=_side(flat, "dlq."), raw=flat,
    )


_ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def resolve_env_references(document: Any, environ: Mapping[str, str] | None = None) -> Any:
    """Replace ``${env:NAME}`` (or ``${env:NAME:-default}``) in config values, as Kafka Connect's
    EnvVarConfigProvider does, so files can leave addresses and secrets to the environment.
    Raises ConfigError naming every key whose variable is unset."""
    environ = os.environ if environ is None else environ
    if not isinstance(document, dict) or not isinstance(document.get("config"), dict):
        return document
    issues: list[ConfigIssue] = []

    def substitute(key: str, value: str) -> str:
        def one(match: re.Match) -> str:
            name, default = match.group(1), match.group(2)
            if name in environ:
                return environ[name]
            if default is not None:
                return default
            issues.append(ConfigIssue(f'$.config["{key}"]', None, f"environment variable {name} is not set"))
            return match.group(0)

        return _ENV_REF.sub(one, value)

    config = {k: substitute(k, v) if isinstance(v, str) else v for k, v in document["config"].items()}
    if issues:
        raise ConfigError(issues)
    return {**document, "config": config}


def load_pipeline_file(path: str | Path) -> PipelineConfig:
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", source=str(path)) from None
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON: {exc}", source=str(path)) from None
    try:
        document = resolve_env_references(document)
    except ConfigError as exc:
        raise ConfigError(exc.issues, source=str(path)) from None
    return parse_pipeline(document, source=str(path))
