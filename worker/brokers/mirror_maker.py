"""MirrorMaker 2 in dedicated mode (``org.apache.kafka.connect.mirror.MirrorMaker``) as a process:
the ``mm2.properties`` of a one-way flow and the launcher. Tests take over from it
(tests/integration/test_mm2_takeover.py) and ``bench/mm2.py`` measures against it.

The jars are MM2's own from Maven Central (:data:`worker.brokers.kafka.MIRROR_MAKER`, fetched on
first use). The process runs in a session of its own: :func:`stop_mirror_maker` signals the whole
group, SIGTERM first (Connect commits its source offsets on a graceful stop), SIGKILL after ``timeout``.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from worker.brokers.kafka import MIRROR_MAKER, java_argv, log4j2_xml

__all__ = ["SHIPPED_JVM_FLAGS", "mm2_properties", "start_mirror_maker", "stop_mirror_maker"]

# What Kafka's bin/connect-mirror-maker.sh runs MM2 with (KAFKA_HEAP_OPTS and
# KAFKA_JVM_PERFORMANCE_OPTS of kafka-run-class.sh): a benchmark measures MM2 as shipped.
SHIPPED_HEAP = "2G"
SHIPPED_JVM_FLAGS = ("-Xms256M", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                     "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
                     "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true")

# One broker per cluster: every topic MM2 creates with one replica.
_SINGLE_NODE = {"replication.factor": "1", "offset-syncs.topic.replication.factor": "1",
                "checkpoints.topic.replication.factor": "1", "heartbeats.topic.replication.factor": "1",
                "offset.storage.replication.factor": "1", "status.storage.replication.factor": "1",
                "config.storage.replication.factor": "1"}


def mm2_properties(source: str, source_bootstrap: str, target: str, target_bootstrap: str, topics: str,
                   extra: dict[str, str] | None = None) -> str:
    """An ``mm2.properties`` mirroring ``topics`` (MM2's list/regex) from cluster alias ``source``
    to ``target`` only (the reverse flow off), for single-node clusters; ``extra`` adds or overrides
    keys (e.g. ``tasks.max``, ``emit.checkpoints.enabled``)."""
    settings = {
        "clusters": f"{source}, {target}",
        f"{source}.bootstrap.servers": source_bootstrap,
        f"{target}.bootstrap.servers": target_bootstrap,
        f"{source}->{target}.enabled": "true",
        f"{source}->{target}.topics": topics,
        f"{target}->{source}.enabled": "false",
        **_SINGLE_NODE,
        **(extra or {}),
    }
    if settings.get("emit.offset-syncs.enabled", "true").strip().lower() == "false":
        # MM2 refuses to start its source connector with any offset-syncs.* key set then
        settings.pop("offset-syncs.topic.replication.factor", None)
    return "".join(f"{key} = {value}\n" for key, value in settings.items())


def start_mirror_maker(properties: str, work_dir: Path, *, heap: str = "384m", flags: tuple[str, ...] = (),
                       log_level: str = "INFO") -> subprocess.Popen:
    """MM2 dedicated mode on ``properties`` (the file's text), its files and log (``mm2.log``) in
    ``work_dir``; the process leads a session of its own."""
    work_dir.mkdir(parents=True, exist_ok=True)
    props = work_dir / "mm2.properties"
    props.write_text(properties)
    (work_dir / "log4j2.xml").write_text(log4j2_xml(work_dir / "mm2.log", log_level))
    argv = java_argv(["org.apache.kafka.connect.mirror.MirrorMaker", str(props)], heap=heap, flags=flags,
                     log4j2_config=work_dir / "log4j2.xml", bundle=MIRROR_MAKER)
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(work_dir / "mm2.stderr", "wb"),
                            stdin=subprocess.DEVNULL, start_new_session=True)


def stop_mirror_maker(proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """SIGTERM to MM2's process group, SIGKILL if it has not exited within ``timeout`` s."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
