"""``connect validate`` and ``connect run`` (separate processes) never print a value a config
provider returned, and import no module a connector file names unless it is declared or listed.

On a2dbae7 ``connect validate`` printed ``tasks.max: invalid value 'x<the variable's value>'``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

CLI = [sys.executable, "-m", "worker.cli"]
CANARY = "canary-Vb52-ci-secret"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def _file(path: Path, **config: str) -> Path:
    path.write_bytes(orjson.dumps({"name": path.stem, "config": {
        "source.connector.class": "kafka", "source.bootstrap.servers": "127.0.0.1:1", "source.topics": "t",
        "sink.connector.class": "kafka", "sink.bootstrap.servers": "127.0.0.1:1", **config}}))
    return path


def test_validate_and_run_never_print_a_provided_value(tmp_path):
    (tmp_path / "secret.properties").write_text(f"pw={CANARY}\n")
    files = [_file(tmp_path / "env.json", **{"tasks.max": "x${env:CANARY_VAR}"}),
             _file(tmp_path / "alone.json", **{"tasks.max": "${env:CANARY_VAR}"}),
             _file(tmp_path / "file.json", **{"tasks.max": f"x${{file:{tmp_path}/secret.properties:pw}}"}),
             _file(tmp_path / "topic.json", **{"source.topics": "${env:CANARY_VAR}", "sink.topic.template": "a b{topic}",
                                               "source.client.id": "x${env:CANARY_VAR}", "epoch.max.ms": "-1"})]
    for command in ("validate", "run"):
        result = _cli(command, *map(str, files), *(["--data-dir", str(tmp_path / "d")] if command == "run" else []),
                      env={"CANARY_VAR": CANARY})
        output = result.stdout + result.stderr
        assert result.returncode in (1, 2), (command, output)
        assert CANARY not in output, (command, output)
        assert "tasks.max: must be an integer" in output, (command, output)  # the key and the rule, no value
        assert "starting Spark" not in output


def test_validate_imports_no_module_a_file_names_unless_listed(tmp_path):
    marker = tmp_path / "ran.marker"
    (tmp_path / "planted_mod.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                             "from connectors.kafka.source import KafkaSourceConnector as Src\n")
    path = _file(tmp_path / "planted.json", **{"source.connector.class": "planted_mod:Src"})
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    result = _cli("validate", str(path), env=env)
    assert result.returncode == 1
    assert "source.connector.class" in result.stderr and "plugin.classes" in result.stderr, result.stderr
    assert not marker.exists()
    result = _cli("validate", str(path), "--plugin-classes", "planted_mod:Src", env=env)
    assert result.returncode == 0, result.stderr
    assert "planted: OK (KafkaSourceConnector -> KafkaSinkConnector" in result.stdout
    assert marker.exists()
