"""What the Pulsar sink and its side writers (:mod:`connectors.pulsar.side`) share: the sink's
declared config, the producer options it parses to and which send results are permanent. It sits
below both: the sink, its connector and the side writers import it, it imports neither."""

from __future__ import annotations

from typing import Any, Mapping

from connect.config import ConfigDef, Type, at_least, one_of
from connect.sink.naming import NAMING_CONFIG
from connect.sink.routing import ROUTING_CONFIG
from connectors.pulsar.clients import CLIENT_CONFIG

__all__ = ["CONFIG", "permanent_results", "producer_options"]

CONFIG = ROUTING_CONFIG.merge(NAMING_CONFIG).merge(CLIENT_CONFIG).merge(
    ConfigDef()
    .define("routing.mode", Type.STRING, "partition",
            "partition (source partition index when the target has it, else key), key, or single.",
            validator=one_of("partition", "key", "single"))
    .define("batching.enabled", Type.BOOLEAN, True, "Batch messages in the producers.")
    .define("batching.max.messages", Type.INT, 1000, "Most messages per batch.", validator=at_least(1))
    .define("batching.max.publish.delay.ms", Type.INT, 5, "Longest a batch waits to fill.", validator=at_least(0))
    .define("max.pending.messages", Type.INT, 20_000,
            "Most sends of a task without an outcome (each producer's queue is this large too).",
            validator=at_least(1))
    .define("send.timeout.ms", Type.INT, 0, "How long a send may wait for its outcome before the sink abandons the "
            "producer and its records are re-sent, in order; 0: no timeout, an outage only delays.",
            validator=at_least(0))
    .define("chunking.enabled", Type.BOOLEAN, False,
            "Split messages larger than the broker's limit into chunks (needs batching.enabled=false).")
    .define("value.schema.type", Type.STRING, "",
            "Schema declared for records that carry none (AVRO, JSON, PROTOBUF, STRING...); empty: no schema.")
    .define("value.schema.definition", Type.STRING, "", "With value.schema.type: the schema definition "
            "(for AVRO and JSON the Avro schema JSON).")
    .define("value.schema.name", Type.STRING, "", "With value.schema.type: the schema's name.")
    .define("compression.type", Type.STRING, "none", "none, lz4, zlib, zstd or snappy.",
            validator=one_of("none", "lz4", "zlib", "zstd", "snappy"))
)


def permanent_results():
    """(Result.Ok, the results that refuse a record for good)."""
    import pulsar

    r = pulsar.Result
    permanent = {r.MessageTooBig, r.InvalidMessage, r.AuthorizationError, r.AuthenticationError,
                 r.TopicTerminated, r.InvalidTopicName, r.NotAllowedError}
    return r.Ok, permanent


def producer_options(cfg: Mapping[str, Any], pulsar) -> dict[str, Any]:
    """``create_producer`` keyword arguments from the sink's parsed config (data and side writers)."""
    mode = (pulsar.PartitionsRoutingMode.UseSinglePartition if cfg["routing.mode"] == "single"
            else pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    compression = cfg["compression.type"].upper() if cfg["compression.type"] != "none" else "NONE"
    return dict(send_timeout_millis=cfg["send.timeout.ms"], block_if_queue_full=False,
                max_pending_messages=cfg["max.pending.messages"],
                max_pending_messages_across_partitions=cfg["max.pending.messages"],
                batching_enabled=cfg["batching.enabled"], chunking_enabled=cfg["chunking.enabled"],
                batching_max_messages=cfg["batching.max.messages"],
                batching_max_publish_delay_ms=cfg["batching.max.publish.delay.ms"],
                compression_type=getattr(pulsar.CompressionType, compression), message_routing_mode=mode)
