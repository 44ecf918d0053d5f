"""Schemas across clusters (PIP-87): read a message's schema at the source, publish with it at the
destination.

At the source, a message written with a schema carries only its schema *version*, a number local
to that cluster's registry. :class:`SchemaLookup` asks the source broker for the schema of that
version (the binary protocol's GetSchema, as Pulsar's own clients do when they decode a message:
no admin endpoint needed) and caches it per (topic, version); records carry the schema itself
(:class:`connect.records.ValueSchema`), never the version.

At the destination, :func:`producer_schema` turns a record's schema into the schema a producer
declares when it connects: the broker registers it if it is new (and assigns its own version) or
refuses it as incompatible. The payload is sent exactly as read - the same approach as PIP-43's
AUTO_PRODUCE_BYTES, on which PIP-87 builds the geo-replicator's schema support.
"""

from __future__ import annotations

import threading

from connect.errors import ConnectError, RetriableError
from connect.records import ValueSchema

__all__ = ["SchemaLookup", "SchemaIncompatibleError", "producer_schema", "schema_types"]


class SchemaIncompatibleError(ConnectError):
    """The destination refused a record's schema as incompatible. PIP-87's rule: replication of
    that topic stops (the task fails, positions stay before the record); nothing is skipped."""


class SchemaLookup:
    """Schemas by (topic, version) from the source cluster, cached for the task's life."""

    def __init__(self, client, pulsar_module):
        self._client = client
        self._pulsar = pulsar_module
        self._cache: dict[tuple[str, int], ValueSchema] = {}
        self._lock = threading.Lock()

    def get(self, topic: str, version: int) -> ValueSchema | None:
        return self._cache.get((topic, version))

    def fetch(self, topic: str, version: int) -> ValueSchema:
        """The schema of ``version`` on ``topic``. RetriableError when the broker did not answer
        (timeout, lost connection); ConnectError when it answered that there is no such schema."""
        found = self._cache.get((topic, version))
        if found is not None:
            return found
        pulsar = self._pulsar
        try:
            # CommandGetSchema; no public API: pulsar.Client has no call for a schema by version.
            info = self._client._client.get_schema_info(topic, version)
        except (pulsar.Timeout, pulsar.ConnectError, pulsar.ServiceUnitNotReady,
                pulsar.AlreadyClosed, pulsar.LookupError) as exc:
            raise RetriableError(f"schema version {version} of {topic}: no answer from the source broker "
                                 f"({type(exc).__name__}: {exc}); retried") from exc
        except Exception as exc:  # noqa: BLE001 - the broker answered with an error
            raise ConnectError(f"schema version {version} of {topic} cannot be read from the source cluster "
                               f"({type(exc).__name__}: {exc}): the messages written with it cannot be replicated "
                               "with their schema, and are not skipped") from exc
        schema = ValueSchema(info.schema_type().name, info.schema(), info.name())
        with self._lock:
            self._cache[(topic, version)] = schema
        return schema


# pulsar-client has no public API for these two: its schema types (``SchemaType``) and a schema
# info built from a definition as it is (``SchemaInfo``; the public ``pulsar.schema.Schema``
# constructor JSON-encodes the definition again) exist only in the ``_pulsar`` extension, which its
# own ``pulsar.schema`` classes use too. This module is the one place this project touches them.
def schema_types() -> list[str]:
    """The schema type names pulsar-client knows (AVRO, JSON, PROTOBUF, STRING, ...)."""
    import _pulsar

    return list(_pulsar.SchemaType.__members__)


def producer_schema(schema: ValueSchema):
    """A pulsar-client schema object that declares ``schema`` and sends payloads unchanged."""
    import _pulsar
    from pulsar.schema import Schema

    try:
        schema_type = getattr(_pulsar.SchemaType, schema.type)
    except AttributeError:
        raise ConnectError(f"schema type {schema.type!r} is not one pulsar-client knows "
                           f"({', '.join(schema_types())})") from None

    class _Declared(Schema):
        def __init__(self):  # noqa: D107 - Schema.__init__ would JSON-encode the definition again
            self._record_cls = bytes
            self._schema_info = _pulsar.SchemaInfo(schema_type, schema.name, schema.definition)

        def encode(self, obj):
            return obj

        def decode(self, data):
            return data

    return _Declared()
