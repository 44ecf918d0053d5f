"""Settings of the ``pulsar-metadata`` source (watcher) and sink (applier): the admin connection
both share, and each one's own."""

from __future__ import annotations

from typing import Any, Mapping

from connect.config import ConfigDef, Importance, Type, at_least, non_empty, one_of, valid_regex
from connect.errors import ConfigIssue

__all__ = ["ADMIN_CONFIG", "SOURCE_CONFIG", "SINK_CONFIG", "auth_issues"]


def _http_url(value: Any) -> str | None:
    return None if str(value).startswith(("http://", "https://")) else "must be an http:// or https:// URL"


ADMIN_CONFIG = (
    ConfigDef()
    .define("admin.url", Type.STRING, doc="The cluster's admin REST URL (http[s]://host:port).",
            importance=Importance.HIGH, validator=_http_url)
    .define("cluster.name", Type.STRING, doc="This cluster's name: the sourceCluster of its events, and what "
            "last-writer-wins compares on equal times (the smaller name wins).", importance=Importance.HIGH,
            validator=non_empty)
    .define("auth.plugin", Type.STRING, "none", "Admin API authentication: none or token (a bearer token).",
            validator=one_of("none", "token"))
    .define("auth.token", Type.PASSWORD, "", "With auth.plugin=token: the token (or set auth.token.file).")
    .define("auth.token.file", Type.STRING, "", "With auth.plugin=token: a file holding the token.")
    .define("admin.timeout.ms", Type.INT, 10_000, "Timeout of each admin request.", validator=at_least(100))
)

SOURCE_CONFIG = ADMIN_CONFIG.merge(
    ConfigDef()
    .define("tenants", Type.STRING, ".*", "Regex (full match) of the tenants synced.", validator=valid_regex)
    .define("tenants.exclude", Type.STRING, "pulsar|sample", "Regex (full match) of tenants never synced "
            "(Pulsar's system tenants by default).", validator=valid_regex)
    .define("topic", Type.STRING, "metadata-events", "Event topic the records carry (a Pulsar sink completes "
            "a short name as persistent://public/default/<name>).", validator=non_empty)
    .define("poll.interval.ms", Type.INT, 1000, "How often the cluster's metadata is read and compared (the "
            "admin REST API has no watch).", validator=at_least(10))
    .define("snapshot.interval.ms", Type.LONG, 60_000, "How often every resource is published with its stamp "
            "(PIP-136's snapshot sync); 0: only when the task starts.", validator=at_least(0))
)

SINK_CONFIG = ADMIN_CONFIG.merge(
    ConfigDef()
    .define("topics.namespace", Type.STRING, "public/default", "tenant/namespace completing short topic names "
            "of Topics events.")
    .define("deletions.max", Type.INT, 10_000, "Deletion stamps remembered, so an older Created arriving after a "
            "newer Deleted does not bring the resource back.", validator=at_least(0))
)


def auth_issues(config: Mapping[str, Any]) -> list[ConfigIssue]:
    if str(config.get("auth.plugin", "none")).lower() == "token" and not (config.get("auth.token")
                                                                           or config.get("auth.token.file")):
        return [ConfigIssue("auth.token", None, "auth.plugin=token needs auth.token or auth.token.file")]
    return []
