"""Settings of the ``kafka-metadata`` source and sink: the cluster and its admin client, both share;
each one's own."""

from __future__ import annotations

from connect.config import ConfigDef, Importance, Type, at_least, non_empty, one_of, valid_regex
from connect.sink.routing import check_template

__all__ = ["DEFAULT_CONFIGS_EXCLUDE", "SOURCE_CONFIG", "SINK_CONFIG"]


# MirrorMaker 2's DefaultConfigPropertyFilter (config.properties.exclude), as one regex.
DEFAULT_CONFIGS_EXCLUDE = ("follower\\.replication\\.throttled\\.replicas|leader\\.replication\\.throttled\\.replicas|"
                           "message\\.timestamp\\.difference\\.max\\.ms|message\\.timestamp\\.type|"
                           "unclean\\.leader\\.election\\.enable|min\\.insync\\.replicas")

_CLIENT_PREFIXES = (("client.override.", "librdkafka settings for every client of the connector (e.g. security)."),
                    ("admin.override.", "librdkafka settings for the admin client (all this connector uses)."))


def _common() -> ConfigDef:
    cfg = (
        ConfigDef()
        .define("bootstrap.servers", Type.STRING, doc="Cluster bootstrap servers, host:port[,host:port].",
                importance=Importance.HIGH, validator=non_empty)
        .define("cluster.name", Type.STRING, doc="Name of this cluster in metadata events (their sourceCluster).",
                importance=Importance.HIGH, validator=non_empty)
        .define("configs.exclude", Type.STRING, DEFAULT_CONFIGS_EXCLUDE,
                "Regex of topic config names never copied (full match); default MM2's DefaultConfigPropertyFilter.",
                validator=valid_regex)
        .define("request.timeout.ms", Type.INT, 10_000, "Longest single admin request.", validator=at_least(100))
    )
    for prefix, doc in _CLIENT_PREFIXES:
        cfg.define_prefix(prefix, doc)
    return cfg


SOURCE_CONFIG = _common().merge(
    ConfigDef()
    .define("topics", Type.LIST, [], "Topics to watch (comma-separated); or use topics.regex.", importance=Importance.HIGH)
    .define("topics.regex", Type.STRING, "", "Regex of topics to watch (full match).", validator=valid_regex)
    .define("topics.exclude", Type.STRING, r"__.*|.*\.internal", "Regex of topics topics.regex never picks (full "
            "match); a topic named in topics is watched as named.", validator=valid_regex)
    .define("use.defaults.from", Type.STRING, "target",
            "Configs at their default value: target (not copied, MM2's default) or source (copied too).",
            validator=one_of("target", "source"))
    .define("sync.acls.enabled", Type.BOOLEAN, True, "Emit the literal TOPIC ACLs of the watched topics.")
    .define("topic", Type.STRING, "metadata-events", "Topic the event records carry (the sink may rename it).",
            validator=non_empty)
    .define("poll.interval.ms", Type.INT, 5_000, "Time between two looks at the cluster.", validator=at_least(10))
    .define("snapshot.interval.ms", Type.INT, 60_000,
            "Time between full snapshots (every resource emitted); 0: only the one at start.", validator=at_least(0))
)

SINK_CONFIG = _common().merge(
    ConfigDef()
    .define("topic.template", Type.STRING, "{topic}", "Target topic name from the source topic's name, e.g. "
            "'backup.{topic}' (a Pulsar name persistent://t/ns/x gives x).", validator=check_template)
    .define("replication.factor", Type.INT, -1, "Replication factor of created topics; -1: broker default.")
    .define("sync.topic.deletes", Type.BOOLEAN, False,
            "Delete the target topic when the source topic is deleted (MM2 never does: default false).")
)
