"""What a user meets first on the command line: --version, whole option names in help at 80
columns, and ``connect dev brokers`` starting brokers a client can reach."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
import typer

from worker.cli import app

CLI = [sys.executable, "-m", "worker.cli"]


def _help(*words: str, columns: int = 80) -> str:
    env = {**os.environ, "COLUMNS": str(columns), "TERMINAL_WIDTH": str(columns)}
    done = subprocess.run([*CLI, *words, "--help"], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _commands(group, prefix: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        if hasattr(command, "commands"):  # a group (typer ships its own click)
            yield from _commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def test_version_prints_the_package_version():
    from importlib import metadata

    done = subprocess.run([*CLI, "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"connect-bridge {metadata.version('connect-bridge')}"


@pytest.mark.parametrize("words", [("run",), ("rocketmq-broker",), ("worker", "start"), ("dev", "brokers"),
                                   ("connectors", "status")])
def test_help_shows_every_option_name_whole_at_80_columns(words):
    commands = dict(_commands(typer.main.get_command(app)))
    names = [opt for param in commands[words].params if param.param_type_name == "option" and not param.hidden
             for opt in (*param.opts, *param.secondary_opts)]
    assert names
    text = _help(*words)
    assert "…" not in text
    assert all(len(line) <= 80 for line in text.splitlines()), text
    shown = set(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", text))
    missing = [n for n in names if n not in shown]
    assert not missing, f"cut or missing in `{' '.join(words)} --help`: {missing}\n{text}"


def test_dev_brokers_prints_reachable_addresses_and_stops_on_ctrl_c(tmp_path):
    proc = subprocess.Popen([*CLI, "dev", "brokers", "kafka", "rocketmq", "--data-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
        assert lines[0].split()[:2] == ["kafka", "bootstrap.servers"], lines
        assert lines[1].split()[:2] == ["rocketmq", "namesrv.addr"], lines
        assert "export SOURCE_BOOTSTRAP=" in lines[0] and "export TARGET_NAMESRV=" in lines[1]
        addresses = [line.split()[2] for line in lines]
        for address in addresses:
            host, _, port = address.rpartition(":")
            socket.create_connection((host, int(port)), timeout=5).close()
        from confluent_kafka.admin import AdminClient

        metadata = AdminClient({"bootstrap.servers": addresses[0]}).list_topics(timeout=20)
        assert metadata.brokers, "the Kafka broker answered no metadata"
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(30) == 0, proc.stderr.read()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the brokers ended with it: nothing listens any more
            try:
                socket.create_connection(("127.0.0.1", int(addresses[0].rpartition(":")[2])), timeout=1).close()
            except OSError:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the Kafka broker still listens after Ctrl-C")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_dev_brokers_names_an_unknown_kind():
    done = subprocess.run([*CLI, "dev", "brokers", "kafak"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "'kafak' is not one of kafka, pulsar, rocketmq" in done.stderr


def test_connect_run_output_is_quiet_when_idle_and_free_of_spark_noise(kafka_pair, tmp_path, unique):
    """Records first, then idle epochs: the idle stretch prints one line (not a line per pair and
    a total every epoch), the total says it is cumulative, and Spark's NativeCodeLoader and
    FairSchedulableBuilder warnings do not appear."""
    import orjson
    from kafka_util import create_topic, produce

    src, dst = kafka_pair
    topic = f"quiet-{unique}"
    create_topic(src.bootstrap, topic, 2)
    produce(src.bootstrap, topic, 300, 2)
    config = tmp_path / "quiet.json"
    config.write_bytes(orjson.dumps({"name": unique, "config": {
        "source.connector.class": "kafka", "source.bootstrap.servers": src.bootstrap, "source.topics": topic,
        "source.start.position": "earliest", "sink.connector.class": "kafka",
        "sink.bootstrap.servers": dst.bootstrap, "sink.topic.template": "q.{topic}", "tasks.max": "2",
        "epoch.max.ms": "400"}}))
    done = subprocess.run([*CLI, "run", str(config), "--data-dir", str(tmp_path / "data"), "--max-epochs", "15",
                           "--spark-conf", "spark.ui.enabled=false"], capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "NativeCodeLoader" not in out and "FairSchedulableBuilder" not in out, out
    totals = re.findall(r"total ([\d,]+) records committed since start", out)
    assert totals and totals[-1] == "300", out
    for line in out.splitlines():  # a pair's line says something happened in its epoch
        counts = re.match(r"epoch +\d+  \S+/\d+ .* moved +([\d,]+) .* acked ([\d,]+) committed ([\d,]+) ", line)
        if counts:
            news = ("in flight", "retrying", "started in pid", "FAILED")
            assert any(n != "0" for n in counts.groups()) or any(w in line for w in news), line
    assert "clientserver" not in out, out
    idle = [line for line in out.splitlines() if ": idle since epoch" in line]
    assert len(idle) == 1, out  # one per idle stretch (a summary each minute after that)
