"""Pulsar metadata sync (PIP-136): tenants and namespaces kept alike in Pulsar clusters that share no
metadata store, through the admin REST API and an ordinary event topic.

Each cluster runs three ordinary pipelines (see :mod:`connectors.replicator.metadata` for the event
format and last-writer-wins):

1. ``pulsar-metadata`` source (the *watcher*, one task) -> a sink writing the cluster's event topic;
2. mirrors carrying the event topics between clusters (``cluster.alias`` on both sides, so the
   origin chain stops loops);
3. a source reading the cluster's event topic -> ``pulsar-metadata`` sink (the *applier*).

**Watcher.** The admin REST API has no watch, so every ``poll.interval.ms`` the source reads the
tenants (``tenants`` regex minus ``tenants.exclude``: the system tenants ``pulsar`` and ``sample``
by default), their TenantInfo, their namespaces and each one's Policies, and emits the differences
(:func:`~connectors.replicator.metadata.diff_events`): resource ``Tenants`` (name the tenant, data
the TenantInfo) and ``Namespaces`` (name ``tenant/ns``, data the Policies). Every
``snapshot.interval.ms`` (and once at start: nothing is replayed, a restart snapshots) it also
publishes every resource as ``Modified`` with its stamp, so a new or lagging cluster converges.
Records go to ``topic`` (default ``metadata-events``: a short name, which a Pulsar sink completes
as ``persistent://public/default/metadata-events`` and a Kafka or RocketMQ sink takes as it is),
source partition ``{"metadata": <cluster.name>}``, offset ``{"ts": <ms>}``.

**Stamps** (``lastUpdatedBy`` / ``lastUpdatedTime``, PIP-136's names) live in the resource itself:
for a tenant at the top of its TenantInfo JSON; for a namespace in its Policies' ``properties``
map (``PUT .../properties``: top-level Policies fields of an existing namespace cannot be set
through the REST API); a Policies JSON that carries them at its top (a Pulsar storing PIP-136's
fields) is read too, the newer of the two winning. Data is always compared and carried without
them, so a change of the stamp alone is never an event. A change the watcher sees whose stamp
changed with it was applied from another cluster and keeps that stamp; any other change is
local: it is stamped (now, ``cluster.name``) and the watcher writes that stamp into the resource
(as a PIP-136 broker stamps its local updates), so the applier of this cluster compares later
events against it. A resource that carries no stamp when the watcher starts is stamped
(0, ``cluster.name``): older than any stamped change, so a cluster's pre-existing (or default)
state never overrides a real change elsewhere, and two unstamped versions converge to the
smaller cluster name's. Limits: the stamp write-back races with an applier writing the same
resource between the watcher's read and its write (the watcher reads again just before writing,
which narrows the window to milliseconds); a local change made while the watcher is stopped is
published with the stamp the resource already carries (it loses to any newer one). An applier
updates a namespace with several requests (a ``lastUpdatedPending`` marker, the fields, the stamp,
then the marker removed); the watcher leaves a namespace carrying a fresh marker as it last read it,
so a half-applied event is never taken for a local change (two appliers of one cluster writing the
same namespace at once, or one that died mid-way and whose event never comes again, fall back to
that: the marker is ignored after 30 s). A stock
Pulsar drops unknown TenantInfo fields, so tenant stamps need a Pulsar that stores them.

**Applier.** A synchronous sink. Per event: bad JSON or fields are reported (never dropped) with
the record position and the JSON path; events of this cluster (``sourceCluster`` =
``cluster.name``) are skipped; the resource's stamp is read and the event applied only if
:func:`~connectors.replicator.metadata.newer` says it is newer (equal stamp: duplicate; older:
stale). ``Created`` / ``Modified`` create or update, with the event's stamp written along;
``Deleted`` deletes. A tenant that allows this cluster keeps it allowed (an event from another
cluster names that one: independent clusters each allow their tenants on themselves, ``public``
first of all). Namespaces are applied field by field, for the fields in
:data:`NAMESPACE_FIELDS` (``retention_policies`` via ``/retention``, ``message_ttl_in_seconds`` via
``/messageTTL``, ``properties`` via ``/properties``; a field the event's data does not hold is left
as it is, a null one removed); other Policies fields whose value differs from this cluster's are
ignored, counted (``metadata.fields.ignored``) and logged once per field. A namespace is created
with those fields only (Policies such as bundles or replication clusters name things of the
source cluster). Deletions are remembered (at most ``deletions.max``, oldest forgotten first, and
not across restarts) so an older ``Created`` arriving after a newer ``Deleted`` does not bring the
resource back; past that limit it may. ``Topics`` events, from any broker's metadata source
(data ``partitions`` and ``broker``), create or grow a partitioned topic as
:mod:`connectors.replicator.mapping` says; counts only grow and topics are never deleted by
metadata. Transient admin failures (connection, timeout, 5xx) report the event and every one
after it in the batch with a :class:`~connect.errors.RetriableError` (re-sent in order); a refusal
(4xx) reports that event as permanent. Gauges: ``metadata.applied``, ``.stale``, ``.duplicate``,
``.own``, ``.invalid``, ``.failed``, ``.retried``, ``.unsupported``, ``.fields.ignored``,
``.topics.unchanged``, ``.topics.deletes.ignored``.
"""

from __future__ import annotations

from typing import Any, Mapping

from connect.config import ConfigDef
from connect.connector import SinkConnector, SourceConnector
from connect.errors import ConfigIssue
from connectors.pulsar.metadata.applier import PulsarMetadataSinkTask
from connectors.pulsar.metadata.config import SINK_CONFIG, SOURCE_CONFIG, auth_issues
from connectors.pulsar.metadata.watcher import PulsarMetadataSourceTask

__all__ = ["PulsarMetadataSourceConnector", "PulsarMetadataSinkConnector"]


class PulsarMetadataSourceConnector(SourceConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return SOURCE_CONFIG

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        return super().validate(config) + auth_issues(config)

    @classmethod
    def task_class(cls) -> type:
        return PulsarMetadataSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [dict(self.config)]  # one watcher per cluster

    def source_topics(self) -> Mapping[str, int]:
        return {SOURCE_CONFIG.parse(self.config)["topic"]: 1}


class PulsarMetadataSinkConnector(SinkConnector):
    @classmethod
    def config_def(cls) -> ConfigDef:
        return SINK_CONFIG

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        return super().validate(config) + auth_issues(config)

    @classmethod
    def task_class(cls) -> type:
        return PulsarMetadataSinkTask
