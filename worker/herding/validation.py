"""Submitted connector configs checked as creating the connector would check them, and the
replication flow each one is (``worker.replication.topology``)."""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from connect.clientpolicy import ClientConfigPolicy
from connect.errors import ConfigError, ConfigIssue
from connect.secrets import Redactor
from worker.herding.model import BadRequest, Resolver
from worker.pipeline import PipelineConfig, _json_path, hide_provided, parse_pipeline
from worker.replication.topology import flow_of, withholds

__all__ = ["Validation", "config_key"]

log = logging.getLogger("worker.herder")


class Validation:
    def __init__(self, resolve: Resolver, client_policy: ClientConfigPolicy, redactor: Redactor):
        self.resolve = resolve
        self.client_policy = client_policy
        self.redactor = redactor

    def validate(self, name: Any, config: Any, *, path: str = "$.config") -> PipelineConfig:
        """The parsed pipeline of a submitted config (provider references resolved to check it);
        raises ConfigError naming every problem by JSON path and rule. No issue carries a value of
        a key that holds a reference or a secret, and no text shows a value a provider returned."""
        if not isinstance(config, dict):
            raise BadRequest(f"{path}: must be an object of string keys to string values")
        parsed: list[PipelineConfig] = []

        def parse(resolved: dict[str, str]) -> list[ConfigIssue]:
            try:
                parsed.append(parse_pipeline({"name": name, "config": resolved}, client_policy=self.client_policy))
            except ConfigError as exc:
                return list(exc.issues)
            return []

        issues = self.config_issues(config, parse)
        if issues:
            raise ConfigError([ConfigIssue(_json_path(i.key, path), i.value, i.message) for i in issues])
        return parsed[0]

    def config_issues(self, config: Mapping[str, str], check: Callable[[dict[str, str]], list[ConfigIssue]]
                      ) -> list[ConfigIssue]:
        """What creating a connector with ``config`` would refuse, as ``check`` finds it in the config
        with its provider references resolved (fences included): the references that cannot be
        resolved, else ``check``'s issues. Issues are keyed by config key and fit for an answer (no
        value of a key that holds a reference or a secret, no provider value in any text). The one
        path of ``POST /connectors`` and ``PUT /connector-plugins/.../config/validate``."""
        try:
            resolved, provided, secret_values = self.resolve(config)
        except ConfigError as exc:
            return [ConfigIssue(config_key(i.key), None, i.message) for i in exc.issues]
        return [ConfigIssue(config_key(i.key), i.value, i.message)
                for i in hide_provided(check(resolved), config, resolved, provided, secret_values, None)]

    def flow(self, name: str, config: dict[str, str]):
        """What ``worker.replication.topology.flow_of`` says of a stored config; None when it does not parse now
        (then it is no edge of anyone's tree: the others keep delivering)."""
        try:
            return self.flow_of(self.validate(name, config))
        except ConfigError as exc:  # its issues are scrubbed by validate: no secret nor provided value shows
            log.warning("connector %s: not part of any replication topology: %s", name, self.redactor.redact(str(exc)))
        except Exception as exc:  # noqa: BLE001 - invalid now (e.g. a provider is away): it starts FAILED anyway
            # Not its text: this connector's secrets are not in the redactor before it starts, and
            # an unexpected error (a plugin's, a provider's) may quote resolved values.
            log.warning("connector %s: not part of any replication topology: its config did not parse (%s)",
                        name, type(exc).__name__)
        return None

    @staticmethod
    def flow_of(pipeline: PipelineConfig):
        """``worker.replication.topology.flow_of``, saying why a replication flow is no edge of its group's tree."""
        flow = flow_of(pipeline)
        if flow is not None and not flow[1].edge:
            log.info("connector %s: no other flow leaves records to it (%s): the flows around it keep delivering "
                     "them", pipeline.name, withholds(pipeline) or "its topics are a pattern")
        return flow


def config_key(key: str) -> str:
    """``$.config["k"]`` as ``k``; other keys as they are."""
    return key[len('$.config["'):-2] if key.startswith('$.config["') and key.endswith('"]') else key
