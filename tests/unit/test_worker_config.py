"""Worker settings (``connect worker start --config``): every bad key named, examples valid, secrets masked."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from connect.errors import ConfigError
from worker.cli import app
from worker.service import load_worker_config

CONF = Path(__file__).resolve().parents[2] / "conf"


def write(tmp_path: Path, document) -> Path:
    path = tmp_path / "worker.json"
    path.write_bytes(orjson.dumps(document))
    return path


def test_example_worker_configs_are_valid(monkeypatch):
    monkeypatch.setenv("CONNECT_TOKEN", "t0ken-value")
    monkeypatch.setenv("CONNECT_TLS_CERT", "/etc/connect/cert.pem")
    monkeypatch.setenv("CONNECT_TLS_KEY", "/etc/connect/key.pem")
    embedded = load_worker_config(CONF / "worker.json")
    assert embedded.get("store") == "sqlite" and embedded.get("rest.port") == 8083
    kafka = load_worker_config(CONF / "worker-kafka-store.json")
    assert kafka.get("store") == "kafka" and kafka.get("rest.auth.token") == "t0ken-value"
    assert kafka.get("store.kafka.replication.factor") == 3


def test_every_bad_key_is_named_and_secrets_never_shown(tmp_path):
    path = write(tmp_path, {"rest.prot": 8083, "rest.port": "eighty", "store": "zookeeper",
                            "rest.auth.password": "pa55word-secret", "rest.tls.certfile": "/c.pem"})
    with pytest.raises(ConfigError) as err:
        load_worker_config(path)
    text = str(err.value)
    assert "rest.prot" in text and "rest.port" in text and "store" in text
    assert "pa55word-secret" not in text
    assert str(path) in text


def test_kafka_store_needs_bootstrap_and_tls_needs_both_files(tmp_path):
    with pytest.raises(ConfigError, match="store.kafka.bootstrap.servers"):
        load_worker_config(write(tmp_path, {"store": "kafka"}))
    with pytest.raises(ConfigError, match="rest.auth.password"):
        load_worker_config(write(tmp_path, {"rest.auth.user": "admin"}))
    with pytest.raises(ConfigError, match="rest.tls.keyfile"):
        load_worker_config(write(tmp_path, {"rest.tls.certfile": "/c.pem"}))


def test_overrides_and_file_provider(tmp_path):
    secrets = tmp_path / "s.properties"
    secrets.write_text("token = from-a-file-123\n")
    cfg = load_worker_config(write(tmp_path, {"rest.auth.token": f"${{file:{secrets}:token}}", "rest.port": 1}),
                             {"rest.port": 9999})
    assert cfg.get("rest.port") == 9999 and cfg.get("rest.auth.token") == "from-a-file-123"


def test_worker_start_with_a_bad_config_exits_2_naming_the_key(tmp_path):
    result = CliRunner().invoke(app, ["worker", "start", "--config", str(write(tmp_path, {"rest.prot": 1}))])
    assert result.exit_code == 2
    assert "rest.prot" in result.output
    missing = CliRunner().invoke(app, ["worker", "start", "--config", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2 and "cannot read" in missing.output


def test_a_set_but_empty_credential_is_a_start_up_error_naming_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("CONNECT_TOKEN", "")
    with pytest.raises(ConfigError, match=r"rest.auth.token.*set but empty"):
        load_worker_config(write(tmp_path, {"rest.auth.token": "${env:CONNECT_TOKEN}"}))
    monkeypatch.setenv("CONNECT_PASSWORD", " ")
    with pytest.raises(ConfigError, match=r"rest.auth.password.*set but empty"):
        load_worker_config(write(tmp_path, {"rest.auth.user": "admin", "rest.auth.password": "${env:CONNECT_PASSWORD}"}))
    assert load_worker_config(write(tmp_path, {})).get("rest.auth.token") == ""  # not set: no token, on loopback


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "worker.example"])
def test_beyond_loopback_without_authentication_refuses_unless_declared(tmp_path, host):
    with pytest.raises(ConfigError, match=r"rest.host.*rest.allow.unauthenticated=true") as err:
        load_worker_config(write(tmp_path, {"rest.host": host}))
    assert host not in str(err.value).replace(str(tmp_path), "")
    assert load_worker_config(write(tmp_path, {"rest.host": host, "rest.allow.unauthenticated": True}))
    assert load_worker_config(write(tmp_path, {"rest.host": host, "rest.auth.token": "t0ken-value"}))
    for loopback in ("127.0.0.1", "::1", "localhost"):
        assert load_worker_config(write(tmp_path, {"rest.host": loopback}))
