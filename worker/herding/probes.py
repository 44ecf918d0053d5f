"""The lag of a connector that runs no epoch (``worker.telemetry.lag``): records keep arriving
while it is PAUSED, idle or STOPPED, and they are what is left to deliver. Lag is informational:
a probe that fails leaves the connector as it is."""

from __future__ import annotations

import logging
import threading
from typing import Any

from connect.clientpolicy import ClientConfigPolicy
from connect.connector import ConnectorContext
from connect.secrets import Redactor
from worker.herding.model import HerdedConnector, Resolver
from worker.pipeline import parse_pipeline
from worker.stores.store import OffsetBackend
from worker.telemetry.lag import REFRESH_S

__all__ = ["wait_measuring_lag", "wait_measuring_stopped_lag"]

log = logging.getLogger("worker.herder")


def wait_measuring_lag(c: HerdedConnector, metrics: Any) -> None:
    """Wait for a change of ``c``; meanwhile keep the lag of its runtime true."""
    while True:
        rt = c.runtime
        if rt is not None:
            rt.lag.measured_at = 0.0
            rt.measure_lag()
            if metrics is not None and not c.removed:  # a deleted connector's series stay gone
                for t in rt.tasks:
                    metrics.lag(c.name, t.task, rt.task_lag(t), rt.lag.partitions, tuple(t.partitions))
        if c.wake.wait(REFRESH_S):
            return


def wait_measuring_stopped_lag(c: HerdedConnector, lock: threading.RLock, resolve: Resolver, redactor: Redactor,
                               client_policy: ClientConfigPolicy, offsets: OffsetBackend) -> None:
    """Wait for a change of the STOPPED connector ``c``: it has no runtime, so a source connector
    of its own measures its lag against its committed offsets meanwhile."""
    source = None
    masked = False  # until this connector's secrets are known, an error's text is not shown
    try:
        with lock:
            config = dict(c.config)
        resolved, _, secrets = resolve(config)
        redactor.add(secrets)
        masked = True
        pipeline = parse_pipeline({"name": c.name, "config": resolved}, client_policy=client_policy)
        source = pipeline.source_class()
        source.initialize(ConnectorContext(c.name))
        source.start({k: v for k, v in pipeline.source_config.items() if k != "connector.class"})
    except Exception as exc:  # noqa: BLE001 - lag is informational; the connector stays STOPPED
        log.info("connector %s: lag not measured while STOPPED: %s", c.name,
                 redactor.redact(str(exc)) if masked else type(exc).__name__)
        if source is not None:  # it may have opened clients before failing
            try:
                source.stop()
            except Exception:  # noqa: BLE001
                pass
        source = None
    try:
        while True:
            if source is not None:
                c.stopped_lag.measure(source, offsets.load(c.name))
            if c.wake.wait(REFRESH_S):
                return
    finally:
        c.stopped_lag.known = False
        if source is not None:
            try:
                source.stop()
            except Exception as exc:  # noqa: BLE001
                log.debug("connector %s: lag probe: %s", c.name, exc)
