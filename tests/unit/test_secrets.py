"""connect.secrets and secret hygiene end to end: no secret value reaches an error, a log line,
a progress trace or ``connect validate``'s output, whatever level it was given at."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Mapping

import orjson
import pytest

from connect.config import ConfigDef, Type, one_of
from connect.errors import ConfigError, ConfigIssue
from connect.plugins import register_plugin
from connect.secrets import MASK, RedactingFilter, Redactor, install_log_redaction, is_secret_name
from connect.testing import MemorySinkConnector
from worker.pipeline import parse_pipeline
from worker.telemetry.progress import ProgressPrinter

ROOT = Path(__file__).resolve().parents[2]


# -- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [
    "password", "sasl.password", "producer.override.sasl.password", "client.override.ssl.key.password",
    "ssl.keystore.password", "sasl.oauthbearer.client.secret", "ssl.key.pem", "client.override.ssl.key.pem",
    "ssl.keystore.key", "sasl.jaas.config", "sasl.oauthbearer.config", "db.passwd", "MY_PASSWORD", "auth.token",
    "credentials", "gcp.credential.file", "private.key", "privateKey", "access_key", "aws.access.key.id", "api-key",
    "apiKey", "api key"])
def test_credential_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["bootstrap.servers", "topics", "ssl.key.location", "ssl.certificate.pem",
                                  "key.converter", "sasl.mechanism", "security.protocol", "sasl.username",
                                  "keystore.type", "monkey.pems"])
def test_ordinary_names(name):
    assert not is_secret_name(name)


# -- Redactor ---------------------------------------------------------------------------------


def test_redactor_masks_secret_values_of_a_config():
    config = {"sasl.password": "hunter2-pw", "bootstrap.servers": "a:9092", "auth": "declared-secret",
              "producer.override.sasl.jaas.config": 'module required password="jaas-pw";', "empty.token": ""}
    redact = Redactor.from_config(config, ["auth"])
    text = f"failed: {config!r} / a:9092 / declared-secret / hunter2-pw"
    out = redact(text)
    for secret in ("hunter2-pw", "declared-secret", "jaas-pw"):
        assert secret not in out
    assert "a:9092" in out and MASK in out
    assert len(redact) > 0


def test_redactor_masks_short_values_only_where_they_stand_alone_and_ignores_non_secret_keys():
    redact = Redactor.from_config({"password": "abc", "host": "localhost"})
    assert redact.redact("abc localhost") == f"{MASK} localhost"
    assert redact.redact("pw=abc, abcdef, xabc, abc1") == f"pw={MASK}, abcdef, xabc, abc1"
    assert "localhost" in redact.redact("host localhost")
    single = Redactor(["7"])
    assert len(single) == 0 and single.redact("partition 7") == "partition 7"  # one character: by key only


def test_longer_secret_masked_whole_even_when_it_contains_another():
    redact = Redactor(["abcd", "xxabcdyy"])
    assert redact("[xxabcdyy] [abcd]") == f"[{MASK}] [{MASK}]"


def test_escaped_spellings_are_masked():
    secret = 'pa"ss\\wo\nrd'
    redact = Redactor([secret])
    for text in (secret, repr(secret), orjson.dumps(secret).decode()):
        assert "ss" not in redact(text).replace("pass", "")  # nothing of the value survives
        assert MASK in redact(text)


def test_redactor_add_and_non_string_values():
    redact = Redactor()
    assert redact("1234567") == "1234567"
    redact.add([1234567])
    assert redact("pin 1234567") == f"pin {MASK}"


# -- logging ----------------------------------------------------------------------------------


@pytest.fixture
def captured():
    logger = logging.getLogger("test_secrets.capture")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(handler)
    flt = install_log_redaction(Redactor(["s3cr3t-value"]), logger)
    yield logger, stream
    logger.removeHandler(handler)
    assert flt in handler.filters


def test_log_messages_and_arguments_redacted(captured):
    logger, stream = captured
    logger.info("config %s", {"sasl.password": "s3cr3t-value"})
    logger.warning("direct s3cr3t-value in the message")
    logger.info("no secret %d%%", 5)
    out = stream.getvalue()
    assert "s3cr3t-value" not in out
    assert out.count(MASK) == 2
    assert "no secret 5%" in out


def test_log_exceptions_and_stacks_redacted(captured):
    logger, stream = captured
    try:
        raise RuntimeError("cannot connect with s3cr3t-value")
    except RuntimeError:
        logger.exception("failed")
    logger.info("here", stack_info=True, extra={})
    assert "s3cr3t-value" not in stream.getvalue()
    assert "RuntimeError: cannot connect with ********" in stream.getvalue()


def test_log_record_with_arguments_that_do_not_fit_is_still_redacted(captured, capsys):
    logger, stream = captured
    logger.info("two %s %s", "s3cr3t-value")
    assert "s3cr3t-value" not in stream.getvalue() + capsys.readouterr().err
    assert MASK in stream.getvalue()


def test_filter_never_drops_records():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello %s", ("world",), None)
    assert RedactingFilter(Redactor(["nothing"])).filter(record) is True
    assert record.getMessage() == "hello world"


# -- progress traces --------------------------------------------------------------------------


def test_progress_printer_redacts_failure_traces():
    out = io.StringIO()
    result = SimpleNamespace(epoch=3, connector="c", task=0, state="FAILED", stats={}, lag=None, duration=1.0,
                             restarted=False, pid=1, trace="Traceback: auth failed for s3cr3t-value")
    ProgressPrinter(out=out, quiet=True, redact=Redactor(["s3cr3t-value"]).redact)(3, [result], [])
    assert "s3cr3t-value" not in out.getvalue()
    assert f"auth failed for {MASK}" in out.getvalue()


def test_progress_printer_without_redactor_prints_traces_as_they_are():
    out = io.StringIO()
    result = SimpleNamespace(epoch=3, connector="c", task=0, state="FAILED", stats={}, lag=None, duration=1.0,
                             restarted=False, pid=1, trace="plain trace")
    ProgressPrinter(out=out, quiet=True)(3, [result], [])
    assert "plain trace" in out.getvalue()


# -- pipelines: secrets at every level --------------------------------------------------------


class SecretSink(MemorySinkConnector):
    """A sink with declared secrets, whose own validate echoes one (a careless connector)."""

    @classmethod
    def config_def(cls) -> ConfigDef:
        return (super().config_def()
                .define("auth", Type.STRING, "", "Declared secret by flag.", secret=True, validator=one_of("ok"))
                .define("login", Type.PASSWORD, "", "Declared secret by type.", validator=one_of("ok"))
                .define_prefix("client.override.", "Passed through."))

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().validate(config)
        if config.get("login") not in (None, "ok"):
            issues.append(ConfigIssue("user", None, f"login {config['login']} refused by the server"))
        return issues


SECRETS = {
    "sasl.password": "TOPLEVEL-secret-1",               # framework level, where it does not belong
    "source.sasl.passwrd": "SIDE-secret-2",             # misspelt side key
    "sink.auth": "DECLARED-secret-3",                   # declared secret=True, invalid value
    "sink.login": "PASSWORD-secret-4",                  # Type.PASSWORD, invalid, echoed by validate()
    "sink.client.override.sasl.password": "PASS-secret-5",  # valid pass-through
    "dlq.client.override.ssl.key.pem": "PEM-secret-6",   # valid dlq pass-through
    "dlq.sasl.password": "DLQ-secret-7",                # unknown dlq key
    "sink.ssl.key.password": "NAMED-secret-8",          # unknown side key, secret by name
}


register_plugin("secret-sink", f"{__name__}:SecretSink")  # this process only: declares this module


def secret_document(sink_class: str) -> dict:
    return {"name": "secrets", "config": {
        "source.connector.class": "connect.testing:MemorySourceConnector",
        "sink.connector.class": sink_class,
        "tasks.max": "99999999999999999999",
        **SECRETS}}


def test_no_secret_in_configuration_errors():
    with pytest.raises(ConfigError) as exc_info:
        parse_pipeline(secret_document(f"{__name__}:SecretSink"), source="s.json")
    err = exc_info.value
    text = str(err)
    for secret in SECRETS.values():
        assert secret not in text
        assert all(secret not in str(i.value) for i in err.issues)
    keys = {i.key for i in err.issues}
    assert {"sasl.password", "source.sasl.passwrd", "sink.auth", "sink.login", "sink.user", "dlq.sasl.password",
            "sink.ssl.key.password", "tasks.max"} <= keys
    assert "sink.auth: invalid value '********'" in text
    assert "sink.login: invalid value '********'" in text
    assert "sink.user: login ******** refused by the server" in text


def test_pipeline_collects_its_secret_values():
    document = secret_document(f"{__name__}:SecretSink")
    config = document["config"]
    for key in ("tasks.max", "sasl.password", "source.sasl.passwrd", "dlq.sasl.password", "sink.ssl.key.password"):
        del config[key]
    config.update({"sink.auth": "ok", "sink.login": "ok"})
    p = parse_pipeline(document)
    assert p.secret_keys() == {"sink.auth", "sink.login", "sink.client.override.sasl.password",
                               "dlq.client.override.ssl.key.pem"}
    assert p.secret_values() == {"ok", "PASS-secret-5", "PEM-secret-6"}


def _validate(tmp_path: Path, document: dict, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    path = tmp_path / "c.json"
    path.write_bytes(orjson.dumps(document))
    classes = "connect.testing:MemorySourceConnector,tests.unit.test_secrets:SecretSink"  # the operator's list
    return subprocess.run([sys.executable, "-m", "worker.cli", "validate", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "CONNECT_PLUGIN_CLASSES": classes, **(env or {})})


def test_connect_validate_never_prints_a_secret(tmp_path):
    document = secret_document("tests.unit.test_secrets:SecretSink")
    document["config"]["sink.client.override.sasl.password"] = "${env:CONNECT_TEST_SECRET}"
    result = _validate(tmp_path, document, {"CONNECT_TEST_SECRET": "ENV-secret-9"})
    assert result.returncode == 1, result.stderr
    output = result.stdout + result.stderr
    for secret in [*SECRETS.values(), "ENV-secret-9"]:
        assert secret not in output
    assert "sink.auth: invalid value '********'" in output
    assert "sasl.password: unknown pipeline key" in output
    assert "source.sasl.passwrd: unknown key" in output


def test_connect_validate_of_a_valid_file_with_secrets(tmp_path):
    result = _validate(tmp_path, {"name": "ok", "config": {
        "source.connector.class": "connect.testing:MemorySourceConnector",
        "sink.connector.class": "tests.unit.test_secrets:SecretSink",
        "sink.client.override.sasl.password": "VALID-secret-10"}})
    assert result.returncode == 0, result.stderr
    assert "ok: OK" in result.stdout
    assert "VALID-secret-10" not in result.stdout + result.stderr
