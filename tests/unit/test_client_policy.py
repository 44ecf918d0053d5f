"""The client config override policy (issue 20, KIP-458's class): no connector config loads code,
runs a command or touches a local file outside the allowed directories, under any prefix."""

from __future__ import annotations

import pytest

from connect.clientpolicy import ClientConfigPolicy

DEFAULT = ClientConfigPolicy()


@pytest.mark.parametrize("key, value", [
    ("source.client.override.plugin.library.paths", "/tmp/libevil.so"),
    ("sink.producer.override.ssl.engine.location", "/tmp/engine.so"),
    ("dlq.producer.override.ssl.providers", "legacy"),
    ("source.consumer.override.sasl.kerberos.kinit.cmd", "touch /tmp/x"),
    ("source.client.override.debug", "all"),
    ("source.consumer.override.offset.store.method", "file"),
    ("source.consumer.override.offset.store.path", "/var/lib/connect/offsets.sqlite"),
    ("sink.client.override.ssl.key.location", "/etc/shadow"),
    ("source.tls.trust.certs.file", "relative/ca.pem"),
    ("upstream.client.override.sasl.kerberos.keytab", "/etc/krb5.keytab"),
    ("sink.admin.override.sasl.oauthbearer.token.endpoint.url", "file:///etc/passwd"),
    ("source.client.override.sasl.kerberos.principal", "x; touch /tmp/pwned"),
    ("source.client.override.sasl.kerberos.service.name", "$(id)"),
])
def test_the_default_policy_refuses(key, value):
    [issue] = DEFAULT.check({key: value})
    assert issue.key == key and issue.value is None  # names the key, never echoes the value


def test_what_stays_allowed_and_how_an_operator_widens_it(tmp_path):
    ok = {"source.bootstrap.servers": "a:9092", "source.client.override.ssl.ca.location": "probe",
          "sink.service.url": "pulsar+ssl://p:6651", "source.admin.url": "https://p:8443",
          "source.client.override.sasl.kerberos.principal": "connect/host@REALM.ORG"}
    assert DEFAULT.check(ok) == []
    (tmp_path / "tls").mkdir()
    widened = ClientConfigPolicy.from_settings("default", "debug", str(tmp_path / "tls"))
    assert widened.check({"source.client.override.debug": "broker",
                          "sink.client.override.ssl.ca.location": str(tmp_path / "tls" / "ca.pem")}) == []
    assert widened.check({"sink.client.override.ssl.ca.location": str(tmp_path / "tls" / "$(id).pem")})
    link = tmp_path / "tls" / "escape.pem"
    link.symlink_to("/etc/passwd")
    assert widened.check({"sink.client.override.ssl.ca.location": str(link)}), "a symlink out of the directory"
    assert ClientConfigPolicy.from_settings("all").check({"source.client.override.plugin.library.paths": "/x"}) == []
    with pytest.raises(ValueError):
        ClientConfigPolicy.from_settings("none-such")
