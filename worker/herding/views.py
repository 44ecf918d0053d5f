"""A connector's config and its task pairs' configs, fit to show: secret keys, values that came
from config providers and every secret the worker knows are masked."""

from __future__ import annotations

from typing import Any

from connect.providers import mask_config
from connect.secrets import MASK, Redactor, is_secret_name
from worker.herding.model import HerdedConnector
from worker.herding.registry import Registry

__all__ = ["ConfigViews"]


class ConfigViews:
    def __init__(self, registry: Registry, redactor: Redactor):
        self._registry = registry
        self._redactor = redactor

    @staticmethod
    def masked_config(c: HerdedConnector) -> dict[str, str]:
        """The config as submitted, fit to show: references as written (secret keys show MASK around
        them), values of secret keys MASK (see :func:`connect.providers.mask_config`)."""
        declared = c.runtime.pipeline.secret_keys() if c.runtime is not None else set()
        return mask_config(c.config, declared)

    def info(self, name: str) -> dict[str, Any]:
        with self._registry.lock:
            c = self._registry.get(name)
            tasks = len(c.runtime.tasks) if c.runtime is not None else 0
            return {"name": name, "config": {**self.masked_config(c), "name": name},
                    "tasks": [{"connector": name, "task": i} for i in range(tasks)], "type": "source"}

    def side_configs(self, name: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The (source, sink) configs its running pipeline resolved, or None without a runtime: for
        lookups in this process (the console asks a Kafka cluster for its id); never to be shown."""
        with self._registry.lock:
            rt = self._registry.get(name).runtime
            return None if rt is None else (dict(rt.pipeline.source_config), dict(rt.pipeline.sink_config))

    def task_configs(self, name: str) -> list[dict[str, Any]]:
        with self._registry.lock:
            c = self._registry.get(name)
            rt = c.runtime
            if rt is None:
                return []
            redact = self._redactor.redact
            out = []
            for t in rt.tasks:
                flat = {**{f"source.{k}": v for k, v in t.source_config.items()},
                        **{f"sink.{k}": v for k, v in t.sink_config.items()}}
                hidden = rt.pipeline.secret_keys() | c.provided_keys
                shown = {k: MASK if (k in hidden or is_secret_name(k)) else redact(str(v)) for k, v in flat.items()}
                out.append({"id": {"connector": name, "task": t.task}, "config": shown})
            return out
