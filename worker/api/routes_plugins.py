"""``/connector-plugins``: list the plugins, describe one's config, validate a config of it.

A plugin is named in a path as anywhere a connector class is named: the entry point
(``kafka-source``), the class (``KafkaSourceConnector``, ``connectors.kafka.source.KafkaSourceConnector``
or ``connectors.kafka.source:KafkaSourceConnector``), Kafka Connect's short form without
``Connector`` (``KafkaSource``), or the alias a pipeline writes in ``source.connector.class`` and
``sink.connector.class`` (``kafka``). An alias that names both a source and a sink plugin stands for
the pair, with their keys as a pipeline config writes them: ``source.*`` and ``sink.*``; its
validation checks the body as the pipeline ``POST /connectors`` would create (framework keys too;
the connector classes default to the pair's).

Only listed plugins (entry points, built-ins) are found here: a path never imports a module.

Validation goes through :meth:`worker.herder.Herder.config_issues`, the path ``POST /connectors``
takes: provider references are resolved with the worker's fences (a refused ``${env:HOME}`` or
``${file:/etc/passwd:root}`` is an error here as it is at create), then the plugin's own rules, its
unknown keys and the client config override policy (for a pair: the pipeline's parsing, as create).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from fastapi import FastAPI, Request
from starlette.concurrency import run_in_threadpool

from connect.config import NO_DEFAULT
from connect.errors import ConfigError, ConfigIssue, ConnectError
from connect.plugins import PluginInfo, list_plugins, resolve_connector
from connect.secrets import MASK
from connect.transforms.registry import list_transform_plugins, resolve_plugin
from worker.herder import BadRequest, ConnectorNotFound, Herder
from worker.pipeline import parse_pipeline

__all__ = ["plugin_routes", "find_plugin", "PluginSide"]

_SIDES = ("source", "sink")


class PluginSide(NamedTuple):
    kind: str  # "source" or "sink"
    cls: type
    info: PluginInfo
    prefix: str  # "" for one plugin; "source." / "sink." for a pair's sides


def plugin_kind(name: str) -> str:
    return "source" if name.endswith("-source") else "sink" if name.endswith("-sink") else "?"


def _names(info: PluginInfo) -> set[str]:
    """Every name that designates ``info`` alone."""
    cls_name = info.target.rpartition(":")[2]
    names = {info.name, info.target, info.target.replace(":", "."), cls_name}
    if cls_name.endswith("Connector") and len(cls_name) > len("Connector"):
        names.add(cls_name[:-len("Connector")])  # Kafka Connect's alias: FileStreamSource
    return names


def find_plugin(plugin: str) -> list[PluginSide]:
    """The connector plugin(s) ``plugin`` names: one, or a source and a sink for a pipeline alias
    (``kafka``). ConnectorNotFound (404) naming what exists otherwise."""
    listed = [(info, plugin_kind(info.name)) for info in list_plugins()]
    listed = [(info, kind) for info, kind in listed if kind != "?"]
    found = [(info, kind) for info, kind in listed if plugin in _names(info)]
    if not found:  # the pipeline alias: kafka is kafka-source in a source slot, kafka-sink in a sink slot
        found = [(info, kind) for info, kind in listed if info.name == f"{plugin}-{kind}"]
    if not found:
        aliases = sorted({info.name.rsplit("-", 1)[0] for info, _ in listed} | {info.name for info, _ in listed})
        raise ConnectorNotFound(f"Unknown connector plugin {plugin}; known: {', '.join(aliases)} "
                                "(GET /connector-plugins lists them with their classes)")
    pair = len(found) > 1
    return [PluginSide(kind, resolve_connector(info.target, kind), info, f"{kind}." if pair else "")
            for info, kind in sorted(found, key=lambda f: _SIDES.index(f[1]))]


def _definition(key, prefix: str = "") -> dict[str, Any]:
    default = None if key.default is NO_DEFAULT else key.default
    if key.is_secret and default:
        default = MASK
    name = prefix + key.name
    return {"name": name, "type": key.type.name, "required": key.required, "default_value":
            None if default is None else str(default), "importance": key.importance.name,
            "documentation": key.doc, "group": prefix[:-1] or None, "width": "NONE", "display_name": name,
            "dependents": [], "order": -1}


def _side_issues(side: PluginSide, config: dict[str, str], herder: Herder) -> list[ConfigIssue]:
    """The plugin's own rules, its unknown keys and the client override policy, keyed as sent."""
    own = {k[len(side.prefix):]: v for k, v in config.items() if k.startswith(side.prefix)}
    own = {k: v for k, v in own.items() if k not in ("connector.class", "name")}
    issues = [*side.cls.validate(own), *side.cls.config_def().unknown_keys(own), *herder.client_policy.check(own)]
    return [ConfigIssue(side.prefix + i.key, i.value, i.message) for i in issues]


def _pipeline_issues(config: dict[str, str], herder: Herder) -> list[ConfigIssue]:
    try:
        parse_pipeline({"name": "validate", "config": config}, client_policy=herder.client_policy)
    except ConfigError as exc:
        return list(exc.issues)
    return []


def validate_config(herder: Herder, plugin: str, body: Any) -> dict[str, Any]:
    """Kafka Connect's ``ConfigInfos`` for ``body`` checked as a config of ``plugin``."""
    sides = find_plugin(plugin)
    if not isinstance(body, dict):
        raise BadRequest("$: must be an object of config keys to values")
    bad = sorted(k for k, v in body.items() if not isinstance(v, (str, int, float, bool)) or v is None)
    if bad:
        raise BadRequest(f'$["{bad[0]}"]: must be a string, number or boolean')
    config = {k: ("true" if v else "false") if isinstance(v, bool) else str(v) for k, v in body.items()}
    if len(sides) > 1:  # a pipeline: exactly what POST /connectors checks, framework keys included
        config = {k: v for k, v in config.items() if k not in ("connector.class", "name")}
        for side in sides:
            config.setdefault(f"{side.kind}.connector.class", side.info.name)
        issues = herder.config_issues(config, lambda resolved: _pipeline_issues(resolved, herder))
    else:
        issues = herder.config_issues(config, lambda resolved: _side_issues(sides[0], resolved, herder))
    errors: dict[str, list[str]] = {}
    for issue in issues:
        errors.setdefault(issue.key, []).append(issue.message)
    configs = []
    for side in sides:
        for key in side.cls.config_def().keys():
            name = side.prefix + key.name
            value = config.get(name)
            shown = MASK if key.is_secret and value else value
            configs.append({"definition": _definition(key, side.prefix), "value": {
                "name": name, "value": shown, "recommended_values": [], "errors": errors.pop(name, []),
                "visible": True}})
    for key, messages in errors.items():  # keys nobody declares, references that cannot be resolved
        configs.append({"definition": None, "value": {"name": key, "value": None, "recommended_values": [],
                                                      "errors": messages, "visible": True}})
    count = sum(len(c["value"]["errors"]) for c in configs)
    name = plugin if len(sides) > 1 else sides[0].info.target.replace(":", ".")
    groups = [s.prefix[:-1] for s in sides] if len(sides) > 1 else ["Common"]
    return {"name": name, "error_count": count, "groups": groups, "configs": configs}


_VALIDATE = {"requestBody": {"required": True, "description": "A config of the plugin to check.", "content": {
    "application/json": {"schema": {"type": "object", "additionalProperties": {"type": "string"}}}}}}


def plugin_routes(app: FastAPI, herder: Herder, read_body) -> None:
    """Add the three routes; ``read_body`` reads a request's JSON body (bounded, errors as 400)."""

    @app.get("/connector-plugins")
    async def plugins(request: Request):
        out = []
        for info in list_plugins():
            kind = plugin_kind(info.name)
            if kind == "?":
                continue
            try:
                version = resolve_connector(info.target, kind).version()
            except ConnectError:
                continue
            out.append({"class": info.target.replace(":", "."), "type": kind, "version": version, "alias": info.name})
        value = request.query_params.get("connectorsOnly", "true").lower()  # Kafka Connect's parameter
        if value not in ("true", "false"):
            raise BadRequest(f"query parameter connectorsOnly: must be true or false, not {value!r}")
        if value == "false":
            for t in list_transform_plugins():
                try:
                    version = resolve_plugin(t.kind, t.name).version()
                except ConnectError:
                    continue
                out.append({"class": t.target.replace(":", "."), "type": t.kind, "version": version, "alias": t.name})
        return out

    @app.get("/connector-plugins/{plugin}/config")
    async def plugin_config(plugin: str):
        return [_definition(k, side.prefix) for side in find_plugin(plugin) for k in side.cls.config_def().keys()]

    @app.put("/connector-plugins/{plugin}/config/validate", openapi_extra=_VALIDATE)
    async def validate(plugin: str, request: Request):
        find_plugin(plugin)  # 404 before the body is read
        body = await read_body(request)
        return await run_in_threadpool(validate_config, herder, plugin, body)
