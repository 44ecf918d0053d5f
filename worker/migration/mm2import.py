"""A MirrorMaker 2 dedicated-mode configuration (``mm2.properties``) as this project's connectors.

For every ordered pair of ``clusters`` (S, T), each setting is resolved as MirrorMakerConfig does:
the flow's ``S->T.<key>`` over the top-level ``<key>`` over MM2's default; client settings of a
cluster are its ``S.<key>`` over the top-level client keys, role-specific ``S.consumer.*`` /
``S.producer.*`` / ``S.admin.*`` over both. Then, as MM2's herders would run them:

- ``S->T.enabled=true``: a Kafka mirror S -> T (MirrorSourceConnector), its checkpoint connector
  (``emit.checkpoints.enabled``; MM2's record format into ``S.checkpoints.internal``, so
  ``RemoteClusterUtils`` keeps working) and a ``kafka-metadata`` pair
  (``sync.topic.configs.enabled`` / ``sync.topic.acls.enabled``);
- a heartbeat emitter into every cluster some pair sends heartbeats to (``emit.heartbeats.enabled``,
  true by default, also for pairs not enabled: MM2 creates those herders too), and the mirrors copy
  ``heartbeats`` topics whatever ``topics`` says, as MM2 does.

Every key present in the file that is not carried over is reported with the reason
(:attr:`ImportResult.skipped`); malformed values are errors naming the key and the line.
"""

from __future__ import annotations

import re

from worker.migration.mm2clients import Skipped
from worker.migration.mm2flows import build_flows
from worker.migration.mm2properties import Entry
from worker.migration.mm2reader import FLOW_KEYS, NOT_CARRIED, ImportResult, Mm2ImportError, Reader, clusters

__all__ = ["ImportResult", "Mm2ImportError", "import_mm2"]


def import_mm2(entries: dict[str, Entry], *, prefix: str = "mm2", take_over: bool = False) -> ImportResult:
    """The connectors for ``entries`` (from :func:`~worker.migration.mm2properties.read_properties`);
    raises :class:`Mm2ImportError` listing every bad key at once."""
    reader = Reader(entries)
    aliases = clusters(reader)
    result = ImportResult()
    if aliases:
        build_flows(reader, aliases, result, prefix, take_over)
    for key, entry in entries.items():
        scope, _, rest = key.partition("->")
        if rest and "." in rest:
            target, bare = rest.split(".", 1)
            if scope not in aliases or target not in aliases:
                reader.problems.append((key, entry.line, f"names a flow {scope}->{target} between clusters not in "
                                        f"'clusters' ({', '.join(aliases) or 'none'})"))
                reader.used.add(key)
    if reader.problems:
        raise Mm2ImportError(sorted(set(reader.problems), key=lambda p: (p[1], p[0], p[2])))
    idle = {c for c in aliases if f"{c}.bootstrap.servers" not in reader.used}
    for key, entry in entries.items():
        if key not in reader.used:
            result.skipped.append(Skipped(key, entry.line, _why_not(key, aliases, idle)))
    result.skipped.sort(key=lambda s: (s.line, s.key))
    return result


def _why_not(key: str, clusters: list[str], idle: set[str]) -> str:
    scope, arrow, rest = key.partition("->")
    bare = rest.split(".", 1)[1] if arrow and "." in rest else key
    if arrow and bare in FLOW_KEYS:
        return f"the flow {scope}->{rest.split('.', 1)[0]} is not enabled"
    head = key.split(".", 1)[0]
    if not arrow and head in idle:
        return f"cluster {head} takes part in no connector (no enabled flow from or to it, no heartbeats into it)"
    if not arrow and head in clusters:
        bare = key.split(".", 1)[1]
    for pattern, reason in NOT_CARRIED:
        if re.fullmatch(pattern, bare):
            return reason
    if bare in FLOW_KEYS:
        return "no enabled flow uses it (each sets its own, or none is enabled)"
    return "not a MirrorMaker 2 setting this import knows"
