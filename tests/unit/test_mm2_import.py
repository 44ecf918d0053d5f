"""``connect mm2 import``: MirrorMaker 2 configurations as this project's connectors.

The Kafka documentation's MM2 examples (Geo-Replication, "Configuring Geo-Replication") import
cleanly; a configuration with every key the import carries shows where each one goes; keys it
cannot carry are reported by name, with the line and the reason; bad input names key and line;
secrets never appear in the output. Every connector produced passes this project's own validation
(``parse_pipeline``), so no key is invented."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from connect.clientpolicy import ClientConfigPolicy
from worker.cli import app
from worker.migration.mm2import import Mm2ImportError, import_mm2
from worker.migration.mm2properties import PropertiesError, read_properties
from worker.pipeline import parse_pipeline

# The Kafka documentation, Geo-Replication (Cross-Cluster Data Mirroring), as printed there
DOCS_BASIC = """\
# Basic settings
clusters = us-west, us-east
us-west.bootstrap.servers = broker3-west:9092
us-east.bootstrap.servers = broker5-east:9092

# Define replication flows
us-west->us-east.enabled = true
us-west->us-east.topics = foo-topic, bar-topic, baz-topic
"""
DOCS_ACTIVE_ACTIVE = """\
clusters = us-west, us-east
us-west.bootstrap.servers = broker3-west:9092
us-east.bootstrap.servers = broker5-east:9092

# Replication flows for Active/Active setup
us-west->us-east.enabled = true
us-east->us-west.enabled = true
"""
DOCS_MULTI_CLUSTER = """\
# Basic settings
clusters: west-1, west-2, east-1, east-2, north-1, north-2
west-1.bootstrap.servers = ...
west-2.bootstrap.servers = ...
east-1.bootstrap.servers = ...
east-2.bootstrap.servers = ...
north-1.bootstrap.servers = ...
north-2.bootstrap.servers = ...

# Replication flows for Active/Active in West DC
west-1->west-2.enabled = true
west-2->west-1.enabled = true

# Replication flows for Active/Active in East DC
east-1->east-2.enabled = true
east-2->east-1.enabled = true

# Replication flows for Active/Active in North DC
north-1->north-2.enabled = true
north-2->north-1.enabled = true

# Replication flows for XDC
west-1->east-1.enabled = true
west-1->north-1.enabled = true
east-1->west-1.enabled = true
east-1->north-1.enabled = true
north-1->west-1.enabled = true
north-1->east-1.enabled = true
"""
DOCS_SYNTAX = """\
# Custom top-level defaults that apply to all replication flows
topics = .*
groups = consumer-group1, consumer-group2

# Don't forget to enable a flow!
us-west->us-east.enabled = true

# Custom settings for specific replication flows
us-west->us-east.topics = foo.*
us-west->us-east.groups = bar.*
us-west->us-east.emit.heartbeats = false

# Custom settings for specific clusters
us-west.offset.storage.topic = my-mirrormaker-offsets
"""


def _import(text: str):
    return import_mm2(read_properties(text))


def _by_name(result) -> dict[str, dict]:
    return {c["name"]: c["config"] for c in result.connectors}


def _all_valid(result) -> None:
    policy = ClientConfigPolicy.from_settings("default", "", "/etc/kafka")  # where EVERY_KEY's files are
    for connector in result.connectors:
        parse_pipeline(connector, client_policy=policy)  # raises ConfigError naming any key nobody knows


def test_docs_basic_example_gives_mirror_checkpoint_metadata_and_heartbeats():
    result = _import(DOCS_BASIC)
    got = _by_name(result)
    assert sorted(got) == ["mm2-us-east-heartbeat", "mm2-us-east-us-west-heartbeat"[:0] or "mm2-us-west-heartbeat",
                           "mm2-us-west-us-east-checkpoint", "mm2-us-west-us-east-metadata",
                           "mm2-us-west-us-east-mirror"]
    mirror = got["mm2-us-west-us-east-mirror"]
    assert mirror["source.bootstrap.servers"] == "broker3-west:9092"
    assert mirror["sink.bootstrap.servers"] == "broker5-east:9092"
    assert mirror["source.topics.regex"] == "(?:foo-topic)|(?:bar-topic)|(?:baz-topic)|heartbeats|.*\\.heartbeats"
    assert (mirror["replication.policy"], mirror["replication.policy.separator"]) == ("prefix", ".")
    assert (mirror["source.cluster.alias"], mirror["sink.cluster.alias"]) == ("us-west", "us-east")
    checkpoint = got["mm2-us-west-us-east-checkpoint"]
    assert checkpoint["source.checkpoints.format"] == "mm2"
    assert checkpoint["source.checkpoints.topic"] == "us-west.checkpoints.internal"
    assert checkpoint["source.offset.syncs.topic"] == mirror["offset.syncs.topic"]
    assert got["mm2-us-west-us-east-metadata"]["sink.topic.template"] == "us-west.{topic}"
    # MM2 runs a heartbeat herder for the disabled pair us-east->us-west too: beats go into us-west
    assert got["mm2-us-west-heartbeat"]["sink.bootstrap.servers"] == "broker3-west:9092"
    assert result.skipped == [] and result.secrets == {}
    _all_valid(result)


def test_docs_active_active_example_mirrors_both_ways():
    result = _import(DOCS_ACTIVE_ACTIVE)
    got = _by_name(result)
    assert {n for n in got if n.endswith("-mirror")} == {"mm2-us-west-us-east-mirror", "mm2-us-east-us-west-mirror"}
    assert {n for n in got if n.endswith("-heartbeat")} == {"mm2-us-west-heartbeat", "mm2-us-east-heartbeat"}
    assert got["mm2-us-east-us-west-mirror"]["source.topics.regex"].startswith("(?:.*)|")
    assert result.skipped == []
    _all_valid(result)


def test_docs_multi_cluster_example_with_colon_separators():
    result = _import(DOCS_MULTI_CLUSTER)
    mirrors = [c for c in result.connectors if c["name"].endswith("-mirror")]
    assert len(mirrors) == 12
    assert len([c for c in result.connectors if c["name"].endswith("-heartbeat")]) == 6
    assert result.skipped == []
    _all_valid(result)


def test_docs_syntax_example_reports_what_it_cannot_carry():
    text = "clusters = us-west, us-east\nus-west.bootstrap.servers = w:9092\nus-east.bootstrap.servers = e:9092\n"
    result = _import(text + DOCS_SYNTAX)
    got = _by_name(result)
    assert got["mm2-us-west-us-east-mirror"]["source.topics.regex"].startswith("(?:foo.*)|")  # the flow's own
    assert got["mm2-us-west-us-east-checkpoint"]["source.groups"] == "bar.*"
    skipped = {s.key: (s.line, s.reason) for s in result.skipped}
    # the top-level topics and groups are overridden by the only flow's: MM2 would not use them either
    assert set(skipped) == {"topics", "groups", "us-west->us-east.emit.heartbeats", "us-west.offset.storage.topic"}
    assert "no enabled flow uses it" in skipped["topics"][1]
    assert skipped["us-west->us-east.emit.heartbeats"][0] == 14
    assert "not a MirrorMaker 2 setting" in skipped["us-west->us-east.emit.heartbeats"][1]
    assert "own stores" in skipped["us-west.offset.storage.topic"][1]
    _all_valid(result)


EVERY_KEY = r"""
clusters = A, B, C
A.bootstrap.servers = a1:9092,a2:9092
B.bootstrap.servers = b1:9092
C.bootstrap.servers = c1:9092
A.security.protocol = SASL_SSL
A.sasl.mechanism = SCRAM-SHA-512
A.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required \
    username="mirror" password="hunter2-very-secret";
A.ssl.truststore.type = PEM
A.ssl.truststore.location = /etc/kafka/ca.pem
A.ssl.keystore.type = PKCS12
A.ssl.keystore.location = /etc/kafka/client.p12
A.ssl.keystore.password = keystore-pass-123
A.ssl.key.password = ${file:/etc/kafka/secrets.properties:keypass}
A.ssl.endpoint.identification.algorithm =
A.consumer.fetch.min.bytes = 1024
A.consumer.key.deserializer = org.apache.kafka.common.serialization.ByteArrayDeserializer
B.producer.linger.ms = 50
B.admin.request.timeout.ms = 20000
A->B.enabled = true
A->C.enabled = false
B->A.enabled = true
topics = orders-.*, payments
topics.exclude = .*-tmp
A->B.topics = orders-.*
groups = app-.*
groups.blacklist = app-test-.*
replication.policy.class = org.apache.kafka.connect.mirror.DefaultReplicationPolicy
replication.policy.separator = _
emit.checkpoints.enabled = true
emit.checkpoints.interval.seconds = 30
emit.heartbeats.enabled = true
emit.heartbeats.interval.seconds = 5
A->C.emit.heartbeats.enabled = false
B->C.emit.heartbeats.enabled = false
C->A.emit.heartbeats.enabled = false
C->B.emit.heartbeats.enabled = false
sync.group.offsets.enabled = true
sync.group.offsets.interval.seconds = 10
refresh.topics.interval.seconds = 20
offset.lag.max = 500
tasks.max = 4
B->A.tasks.max = 2
replication.factor = 3
sync.topic.configs.enabled = true
sync.topic.acls.enabled = false
B->A.sync.topic.configs.enabled = false
B->A.sync.topic.acls.enabled = false
config.properties.exclude = retention\\..*, segment\\.bytes
A->C.topics = never-used
exactly.once.source.support = enabled
B.exactly.once.source.support = disabled
transaction.boundary = poll
"""


def test_every_key_lands_where_it_belongs():
    result = _import(EVERY_KEY)
    got = _by_name(result)
    assert sorted(got) == ["mm2-A-B-checkpoint", "mm2-A-B-metadata", "mm2-A-B-mirror", "mm2-A-heartbeat",
                           "mm2-B-A-checkpoint", "mm2-B-A-mirror", "mm2-B-heartbeat"]
    ab, ba = got["mm2-A-B-mirror"], got["mm2-B-A-mirror"]
    assert ab["source.topics.regex"] == "(?:orders-.*)|heartbeats|.*_heartbeats"  # flow over global
    assert ba["source.topics.regex"] == "(?:orders-.*)|(?:payments)|heartbeats|.*_heartbeats"
    assert ab["source.topics.exclude"] == "(?:.*-tmp)"
    assert (ab["replication.policy"], ab["replication.policy.separator"]) == ("prefix", "_")
    assert (ab["tasks.max"], ba["tasks.max"]) == ("4", "2")
    # exactly.once.source.support is the writing worker's: B's own (disabled) over the top-level (enabled)
    assert "exactly.once.support" not in ab and ba["exactly.once.support"] == "required"
    assert ab["offset.syncs.max.lag"] == "500"
    assert ab["source.refresh.topics.interval.ms"] == "20000"
    assert ab["sink.topic.creation.replication.factor"] == "3"
    # A's client settings: JAAS split into username + password reference, PEM trust store, PKCS#12
    assert ab["source.client.override.security.protocol"] == "SASL_SSL"
    assert ab["source.client.override.sasl.mechanism"] == "SCRAM-SHA-512"
    assert ab["source.client.override.sasl.username"] == "mirror"
    assert ab["source.client.override.sasl.password"] == "${env:MM2_A_SASL_PASSWORD}"
    assert ab["source.client.override.ssl.ca.location"] == "/etc/kafka/ca.pem"
    assert ab["source.client.override.ssl.keystore.location"] == "/etc/kafka/client.p12"
    assert ab["source.client.override.ssl.keystore.password"] == "${env:MM2_A_SSL_KEYSTORE_PASSWORD}"
    assert ab["source.client.override.ssl.key.password"] == "${file:/etc/kafka/secrets.properties:keypass}"
    assert ab["source.client.override.ssl.endpoint.identification.algorithm"] == "none"
    assert ab["source.consumer.override.fetch.min.bytes"] == "1024"
    assert ba["sink.client.override.sasl.username"] == "mirror" and "source.client.override.sasl.username" not in ba
    assert ab["sink.producer.override.linger.ms"] == "50"
    checkpoint = got["mm2-A-B-checkpoint"]
    assert checkpoint["source.groups"] == "app-.*"
    assert checkpoint["source.groups.exclude"] == "(?:app-test-.*)"  # the legacy blacklist name
    assert checkpoint["source.sync.group.offsets.enabled"] == "true"
    assert checkpoint["source.emit.checkpoints.interval.ms"] == "10000"  # groups move as often as MM2 moved them
    assert checkpoint["source.upstream.sasl.username"] == "mirror"
    metadata = got["mm2-A-B-metadata"]
    # \\. in the file is \. in the value (Properties.load drops a lone backslash)
    assert metadata["source.configs.exclude"] == r"(?:retention\..*)|(?:segment\.bytes)"
    assert metadata["source.sync.acls.enabled"] == "false"
    assert metadata["sink.topic.template"] == "A_{topic}"
    assert metadata["sink.replication.factor"] == "3"
    assert got["mm2-A-heartbeat"]["source.interval.ms"] == "5000"
    assert "mm2-B-A-metadata" not in got  # configs and ACLs both off for B->A
    skipped = {s.key: s.reason for s in result.skipped}
    assert set(skipped) == {"A.consumer.key.deserializer", "A->C.topics", "transaction.boundary",
                            "C.bootstrap.servers"}
    assert "cluster C takes part in no connector" in skipped["C.bootstrap.servers"]
    assert "librdkafka refuses it" in skipped["A.consumer.key.deserializer"]
    assert "not enabled" in skipped["A->C.topics"]
    assert "one transaction" in skipped["transaction.boundary"]
    assert result.secrets == {"MM2_A_SASL_PASSWORD": "A.sasl.jaas.config (its password)",
                              "MM2_A_SSL_KEYSTORE_PASSWORD": "A.ssl.keystore.password"}
    text = json.dumps(result.to_json())
    assert "hunter2" not in text and "keystore-pass-123" not in text
    _all_valid(result)


def test_take_over_points_each_mirror_at_mm2s_offsets_in_its_target():
    result = import_mm2(read_properties(DOCS_ACTIVE_ACTIVE), take_over=True)
    got = _by_name(result)
    mirror = got["mm2-us-west-us-east-mirror"]
    assert mirror["source.mm2.offsets.topic"] == "mm2-offsets.us-west.internal"  # named after the source, in the target
    assert mirror["source.mm2.offsets.client.bootstrap.servers"] == "broker5-east:9092"
    assert got["mm2-us-east-us-west-mirror"]["source.mm2.offsets.topic"] == "mm2-offsets.us-east.internal"
    _all_valid(result)


def test_identity_policy_keeps_names():
    result = _import("clusters=A,B\nA.bootstrap.servers=a:1\nB.bootstrap.servers=b:1\nA->B.enabled=true\n"
                     "replication.policy.class=org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n")
    got = _by_name(result)
    assert got["mm2-A-B-mirror"]["replication.policy"] == "identity"
    assert got["mm2-A-B-mirror"]["source.topics.regex"] == "(?:.*)|heartbeats"
    assert "sink.topic.template" not in got["mm2-A-B-metadata"]


@pytest.mark.parametrize("line, key, problem", [
    ("tasks.max = many", "tasks.max", "whole number"),
    ("A->B.emit.checkpoints.enabled = yes", "A->B.emit.checkpoints.enabled", "true or false"),
    ("A->X.enabled = true", "A->X.enabled", "not in 'clusters'"),
    ("topics = (?<=x)orders", "topics", "lookbehind"),
    ("replication.policy.class = com.example.MyPolicy", "replication.policy.class", "custom policy"),
    ("B.exactly.once.source.support = yes", "B.exactly.once.source.support", "enabled, preparing or disabled"),
])
def test_bad_values_name_the_key_and_line(line, key, problem):
    text = "clusters=A,B\nA.bootstrap.servers=a:1\nB.bootstrap.servers=b:1\nA->B.enabled=true\n" + line + "\n"
    with pytest.raises(Mm2ImportError) as caught:
        _import(text)
    [(got_key, got_line, why)] = caught.value.problems
    assert (got_key, got_line) == (key, 5) and problem in why.lower() or problem in why


def test_missing_clusters_and_bootstrap_are_errors():
    with pytest.raises(Mm2ImportError, match="clusters: missing"):
        _import("A.bootstrap.servers=a:1\n")
    with pytest.raises(Mm2ImportError, match=r"B\.bootstrap\.servers: missing"):
        _import("clusters=A,B\nA.bootstrap.servers=a:1\nA->B.enabled=true\n")


def test_properties_follow_the_java_format():
    entries = read_properties("a=1\n# c\n! c2\nb : 2 \\\n   x\n\nc\\ d e\nf\\u00e9=\\u00e9\\t\n  g h\nk\\=v=w\n")
    assert {k: (e.value, e.line) for k, e in entries.items()} == {
        "a": ("1", 1), "b": ("2 x", 4), "c d": ("e", 7), "fé": ("é\t", 8), "g": ("h", 9), "k=v": ("w", 10)}
    with pytest.raises(PropertiesError, match="line 2"):
        read_properties("a=1\nb=\\u12zz\n")


def test_cli_prints_json_and_reports_skips_and_secrets_on_stderr(tmp_path):
    path = tmp_path / "mm2.properties"
    path.write_text(EVERY_KEY)
    run = CliRunner().invoke(app, ["mm2", "import", str(path)])
    assert run.exit_code == 0, run.output
    doc = json.loads(run.stdout)
    assert len(doc["connectors"]) == 7
    assert "skipped A->C.topics (line" in run.stderr
    assert "MM2_A_SASL_PASSWORD" in run.stderr
    assert "/etc/kafka" in run.stderr and "allowed.paths" in run.stderr
    assert "hunter2" not in run.output


def test_cli_names_key_and_line_of_bad_input(tmp_path):
    path = tmp_path / "mm2.properties"
    path.write_text("clusters = A, B\nA.bootstrap.servers=a:1\nB.bootstrap.servers=b:1\nA->B.enabled=true\n"
                    "A->B.offset.lag.max = -5\n")
    run = CliRunner().invoke(app, ["mm2", "import", str(path)])
    assert run.exit_code == 2
    assert f"{path}:5: A->B.offset.lag.max: must be at least 1" in run.stderr
    assert run.stdout == ""
