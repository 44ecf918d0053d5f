"""Pulsar source: topics by list or regex, partitions divided across tasks, read with readers.

Positions are framework-managed, not acknowledged on a subscription. Why readers:

- The framework already commits positions at-least-once (per checkpoint, only what the sink
  acknowledged) into its offset store, which a restart, another process or a checkpoint
  connector reads. Acknowledging on a durable subscription too would be a second, weaker record of
  the same progress: Pulsar acknowledgements are asynchronous and not confirmed, so after a crash
  the two could disagree.
- A reader starts exactly after a given message (``start_message_id_inclusive=False``), batch
  index included, so a restart resumes after the last committed record even inside a batch; a
  subscription cannot be positioned inside a batch.
- No subscription is left behind on the source cluster to hold a backlog when a connector is
  deleted. The price, the same as Kafka's: data the source's retention deletes while the connector
  is stopped is not read: it is a source gap (``connect.source.gaps``), detected with ``admin.url``
  on brokers that index their entries (:mod:`connectors.pulsar.gaps`; each record's offset then
  carries the broker's message index, ``"index"``).

Topics and partitions that appear later (a topic matching the regex, partitions added, a named
topic a broker without auto-creation said did not exist) are read from their first message within
``refresh.topics.interval.ms`` (:mod:`connect.source.partitioned`).

Each partition of a partitioned topic (``persistent://t/ns/topic-partition-N``) is a source
partition ``{"topic": <topic>, "partition": N}`` (a non-partitioned topic: ``partition`` -1); the
offset of a record is its message id ``{"ledger", "entry", "batch"}`` (and ``"index"``, above). Records keep the payload;
the key (Pulsar's partition key, UTF-8 bytes; base64 keys written by this project's sink are
decoded back); properties as headers; the ordering key as header ``pulsar.ordering.key``; the
timestamp is the event time, else the publish time; the partition index as partition hint.

Schemas (PIP-87, ``schemas.enabled``): a message written with a schema carries the schema itself
on its record (:mod:`connectors.pulsar.schemas`), looked up by version from the source broker
once per (topic, version). A lookup the broker does not answer holds that partition's message
(it is not dropped) and the poll is retried; a schema the broker says does not exist fails the
task: its messages are never replicated without their schema, nor skipped.
"""

from __future__ import annotations

import base64
import logging
import re
import time
from typing import Any, Mapping, Sequence

import orjson

from connect import patterns
from connect.config import ConfigDef, Importance, Type, at_least, valid_regex
from connect.errors import ConfigIssue, ConnectError, RetriableError
from connect.records import ConnectRecord, make_record, partition_key
from connect.source import SourceTask
from connect.source.gaps import GAP_POLICY_KEY, SourceGap, SourceGapError, gap_keys
from connect.source.partitioned import (
    ASSIGNMENT_KEY,
    EARLIEST_KEY,
    PartitionedSourceConnector,
    parse_assignment,
    source_keys,
)
from connectors.pulsar.clients import CLIENT_CONFIG, CLIENTS, client_issues, client_settings
from connectors.pulsar.gaps import IndexCheck, NoIndex, admin_request, say_undetected
from connectors.pulsar.guards import GuardedPartition, ReaderGuards
from connectors.pulsar.mapping import BASE64_KEY, BASE64_PROPERTIES, ORDERING_KEY_HEADER
from connectors.pulsar.schemas import SchemaLookup

__all__ = ["PulsarSourceConnector", "PulsarSourceTask"]

log = logging.getLogger(__name__)

TIMESTAMP_FLOOR = "start.timestamp.ms"  # in a persisted start: drop messages published before it
_PARTITION = re.compile(r"^(.*)-partition-(\d+)$")

CONFIG = CLIENT_CONFIG.merge(
    ConfigDef()
    .define("topics", Type.LIST, [], "Topics to read (comma-separated, full names persistent://tenant/ns/topic "
            "or short names in public/default); or use topics.regex.", importance=Importance.HIGH)
    .define("topics.regex", Type.STRING, "", "Regex (full match) of the full topic names to read within "
            "topics.namespace.", validator=valid_regex)
    .define("topics.namespace", Type.STRING, "public/default", "tenant/namespace searched by topics.regex.")
    .define("admin.url", Type.STRING, "", "The cluster's admin REST URL (http[s]://host:port): where topics.regex "
            "lists the namespace's topics, where lag per partition is read (internalStats), and where the "
            "broker's message index is looked up to detect source gaps (connectors.pulsar.gaps).")
    .define("receiver.queue.size", Type.INT, 5000, "Messages each reader prefetches.", validator=at_least(1))
    .define("reader.stall.check.ms", Type.INT, 5000,
            "A reader that finds nothing for this long while the broker has messages after the last one it "
            "delivered is opened again there (a guard against readers stalled after a reconnection); 0 disables.",
            validator=at_least(0))
    .define("schemas.enabled", Type.BOOLEAN, True,
            "Carry each message's schema (looked up by version on the source broker) on its record (PIP-87).")
    .merge(source_keys(partitions="partitions", time_kind="publish time", refresh_ms=30_000,
                       refresh_why="a listing asks the admin REST API, then looks up every topic's partitions."))
    .merge(gap_keys())
)


def full_topic_name(topic: str) -> str:
    """``persistent://public/default/x`` for ``x``; ``tenant/ns/x`` gets ``persistent://``."""
    if "://" in topic:
        return topic
    if topic.count("/") == 2:
        return f"persistent://{topic}"
    return f"persistent://public/default/{topic}"


def split_partition(name: str) -> tuple[str, int]:
    """``(topic, N)`` for ``topic-partition-N``; ``(name, -1)`` for a non-partitioned topic."""
    match = _PARTITION.match(name)
    return (match.group(1), int(match.group(2))) if match else (name, -1)


def partition_topic(topic: str, partition: int) -> str:
    return topic if partition < 0 else f"{topic}-partition-{partition}"


def _admin_get(url: str, cfg: Mapping[str, Any], what: str, timeout_s: float, refused_hint: str | None = None) -> Any:
    """GET a Pulsar admin REST URL (bearer token from ``auth.token``) and decode its JSON. With
    ``refused_hint``, 401/403/404 raise ConnectError (they will not heal by retrying); every other
    failure raises RetriableError naming ``what`` and the URL."""
    import json
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(admin_request(url, cfg), timeout=timeout_s) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if refused_hint is not None and exc.code in (401, 403, 404):
            raise ConnectError(f"cannot {what} at {url}: HTTP {exc.code} ({refused_hint})") from exc
        raise RetriableError(f"cannot {what} at {url}: HTTP {exc.code}") from exc
    except (OSError, ValueError) as exc:
        raise RetriableError(f"cannot {what} at {url}: {exc}") from exc


def list_namespace_topics(admin_url: str, namespace: str, cfg: Mapping[str, Any]) -> list[str]:
    """``GET /admin/v2/namespaces/{tenant}/{namespace}/topics``: the persistent topics of a namespace,
    partitions listed one by one (``...-partition-N``), as Pulsar's admin API answers."""
    url = f"{admin_url.rstrip('/')}/admin/v2/namespaces/{namespace}/topics"
    names = _admin_get(url, cfg, f"list the topics of namespace {namespace}", cfg.get("operation.timeout.ms", 30_000) / 1000,
                       refused_hint="check topics.namespace and the credentials")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise RetriableError(f"{url} answered {str(names)[:200]!r}, not a JSON list of topic names")
    return names


def internal_stats(admin_url: str, topic: str, cfg: Mapping[str, Any]) -> dict:
    """``GET /admin/v2/persistent/{tenant}/{namespace}/{topic}/internalStats`` (one partition's
    managed ledger: ``lastConfirmedEntry`` and ``ledgers``), as Pulsar's admin API answers."""
    url = f"{admin_url.rstrip('/')}/admin/v2/{topic.replace('://', '/', 1)}/internalStats"
    stats = _admin_get(url, cfg, f"read the internal stats of {topic}",
                       min(cfg.get("operation.timeout.ms", 30_000) / 1000, 2))
    if not isinstance(stats, dict):
        raise RetriableError(f"{url} answered {str(stats)[:200]!r}, not a JSON object")
    return stats


def entries_behind(stats: Mapping[str, Any], last: tuple | None) -> int | None:
    """Entries of a partition after ``last`` (ledger, entry, ...) - every entry when None - from its
    internal stats; None when they do not say. Batched entries hold several messages, so in
    records this is a lower bound."""
    try:
        lce_ledger, lce_entry = (int(x) for x in str(stats["lastConfirmedEntry"]).split(":")[:2])
        ledgers = [(int(led["ledgerId"]), int(led.get("entries", 0))) for led in stats.get("ledgers", [])]
    except (KeyError, TypeError, ValueError):
        return None
    behind = 0
    for ledger, entries in ledgers:
        if ledger == lce_ledger:  # the open ledger: its entry count is the last confirmed entry's
            entries = lce_entry + 1
        if last is None or ledger > last[0]:
            behind += entries
        elif ledger == last[0]:
            behind += max(entries - (last[1] + 1), 0)
    return behind


class PulsarSourceConnector(PartitionedSourceConnector):
    separator = "|"  # full Pulsar names hold ":" (persistent://...)

    client_pool = CLIENTS
    client_key = staticmethod(client_settings)

    @classmethod
    def config_def(cls) -> ConfigDef:
        return CONFIG

    @classmethod
    def validate(cls, config: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().validate(config) + client_issues(config)
        namespace = str(config.get("topics.namespace", "public/default"))
        if config.get("topics.regex") and namespace.count("/") != 1:
            issues.append(ConfigIssue("topics.namespace", namespace, "must be tenant/namespace"))
        if config.get("topics.regex") and not str(config.get("admin.url", "")).startswith(("http://", "https://")):
            issues.append(ConfigIssue("admin.url", config.get("admin.url"),
                                      "topics.regex needs the admin REST URL (http://host:port) to list the namespace"))
        return issues

    def committed_lag(self, committed: Mapping[str, Mapping[str, Any]]) -> dict[str, int] | None:
        """Entries after the committed position per partition, from the admin API's internal stats
        (with ``admin.url``; pulsar-client cannot tell over the binary protocol, so None without
        it). A lower bound in records when entries are batched."""
        if not self._cfg.get("admin.url"):
            return None
        out: dict[str, int] = {}
        try:
            for key, offset in committed.items():
                part = orjson.loads(key)
                if not offset or not isinstance(part, dict) or "ledger" not in offset:
                    continue
                name = partition_topic(part["topic"], int(part["partition"]))
                behind = entries_behind(internal_stats(self._cfg["admin.url"], name, self._cfg),
                                        (int(offset["ledger"]), int(offset["entry"])))
                if behind is not None:
                    out[key] = behind
        except (RetriableError, KeyError, ValueError) as exc:
            log.debug("lag: %s", exc)
            return None
        return out

    @classmethod
    def task_class(cls) -> type:
        return PulsarSourceTask

    @classmethod
    def named_topics(cls, config: Mapping[str, Any]) -> list[str] | None:
        if CONFIG.validate(config):
            return None
        return [full_topic_name(t) for t in CONFIG.parse(config)["topics"]] or None  # records carry full names

    def _topics(self) -> list[str]:
        if self._cfg["topics"]:
            return [full_topic_name(t) for t in self._cfg["topics"]]
        return sorted(t for t in self._namespace_topics() if patterns.fullmatch(self._cfg["topics.regex"], t))

    def _namespace_topics(self) -> set[str]:
        """Topics of ``topics.namespace`` (partitions folded into their topic), from the admin REST
        API (pulsar-client has no call for it)."""
        names = list_namespace_topics(self._cfg["admin.url"], self._cfg["topics.namespace"], self._cfg)
        return {split_partition(full_topic_name(n))[0] for n in names}

    def _list_partitions(self) -> list[tuple[str, int]]:
        import pulsar

        out = []
        for topic in self._topics():
            try:
                names = self._client.get_topic_partitions(topic)
            except pulsar.TopicNotFound:
                # A broker that does not create topics on lookup: one missing topic must not hold
                # back the others, nor keep the connector from starting.
                self._absent(topic, f"does not exist on {self._cfg['service.url']}")
                continue
            except Exception as exc:  # noqa: BLE001
                raise RetriableError(f"cannot look up the partitions of {topic} on {self._cfg['service.url']}: "
                                     f"{exc}") from exc
            for name in names:
                out.append((topic, split_partition(name)[1]))
        return sorted(set(out))



class _Partition(GuardedPartition):
    """One assigned partition: its reader, where it stands (the guards' part), and the source's own."""

    __slots__ = ("sp", "part", "topic", "floor", "index", "at", "recheck", "held_for_index")

    def __init__(self, reader, sp: dict, part: int, topic: str, floor, start: tuple, committed=None) -> None:
        super().__init__(reader, partition_topic(topic, part), start)
        self.sp = sp
        self.part = part
        self.topic = topic
        self.floor = floor  # publish-time floor of a timestamp start, until the first message at or after it
        # the broker index of the last message read or committed, and its position (connectors.pulsar.gaps)
        index = committed.get("index") if committed else None
        self.index = int(index) if index is not None else None
        self.at = (int(committed["ledger"]), int(committed["entry"]), int(committed.get("batch", -1))) \
            if committed and int(committed["ledger"]) >= 0 else None
        self.recheck = 0.0
        self.held_for_index = False  # held because the index look-up failed: asked again first


class PulsarSourceTask(ReaderGuards, SourceTask):
    """Reads its partitions round robin; the readers are guarded against stalls and re-deliveries
    (:mod:`connectors.pulsar.guards`, whose ``_read`` loop drops what was delivered already), and
    ``_take`` builds the records on the hot path."""

    _index: IndexCheck | None = None  # gap checks (connectors.pulsar.gaps), with admin.url

    def start(self, config: Mapping[str, Any], context) -> None:
        import pulsar

        self._pulsar = pulsar
        cfg = CONFIG.parse(config)
        self.context = context
        self._batch = cfg["poll.batch.size"]
        self._timeout_ms = cfg["poll.timeout.ms"]
        self._queue = cfg["receiver.queue.size"]
        self._stall_s = cfg["reader.stall.check.ms"] / 1000
        self._settings = client_settings(cfg)
        self._service = cfg["service.url"]
        self._admin = cfg["admin.url"]
        self._cfg = cfg
        self._lag_cache: tuple[tuple, float, dict | None] | None = None
        self._client = CLIENTS.acquire(self._settings)
        assignment = parse_assignment(config.get(ASSIGNMENT_KEY, ""), PulsarSourceConnector.separator)
        earliest = set(parse_assignment(config.get(EARLIEST_KEY, ""), PulsarSourceConnector.separator))
        reader = context.offset_storage_reader
        self._schemas = SchemaLookup(self._client, pulsar) if cfg["schemas.enabled"] else None
        self._readers: list[_Partition] = []
        if self._admin:
            self._index = IndexCheck(self._admin, cfg, cfg[GAP_POLICY_KEY], context.time_left)
        elif assignment:
            say_undetected(self._service, "admin.url is not set")
        self._start_offsets: dict[str, dict] = {}
        self._next = 0
        self.duplicates_dropped = 0
        self.readers_reopened = 0
        for topic, part in assignment:
            sp = {"topic": topic, "partition": part}
            committed = reader.offset(sp)
            start_id, inclusive, floor = self._start(cfg, sp, committed, (topic, part) in earliest)
            entry = _Partition(None, sp, part, topic, floor, (start_id, inclusive), committed)
            entry.reader = self._open(entry.name, start_id, inclusive)
            self._readers.append(entry)

    def _open(self, name: str, start_id, inclusive: bool):
        try:
            return self._client.create_reader(name, start_id, receiver_queue_size=self._queue,
                                              start_message_id_inclusive=inclusive)
        except Exception as exc:  # noqa: BLE001 - pulsar raises its own exception types
            raise RetriableError(f"cannot open a reader on {name} at {self._service}: {exc}") from exc

    def _start(self, cfg, sp: dict, committed: Mapping[str, Any] | None, discovered_late: bool):
        """(start message id, inclusive?, publish-time floor or None).

        Earliest and timestamp starts are persisted before the first record (``start_offsets``:
        ledger -1 means "before the first message"), so a restart never resolves them again. A
        timestamp start reads from the earliest message and drops those published before it, per
        partition, until the first one at or after it (the floor is persisted with the start):
        it needs no seek, which not every Pulsar-compatible broker serves.

        Never inclusive: ``earliest`` is a sentinel before the first message, and a reader whose
        start is inclusive re-subscribes inclusively after a reconnection, delivering its last
        message again.
        """
        pulsar = self._pulsar
        if committed is not None:
            floor = committed.get(TIMESTAMP_FLOOR)
            if int(committed["ledger"]) < 0:
                return pulsar.MessageId.earliest, False, floor
            mid = pulsar.MessageId(-1, int(committed["ledger"]), int(committed["entry"]), int(committed.get("batch", -1)))
            return mid, False, floor
        if cfg["start.position"] == "latest" and not discovered_late:
            # Not persisted: until its first record, a restart starts at the latest message again.
            return pulsar.MessageId.latest, False, None
        start: dict[str, Any] = {"ledger": -1, "entry": -1, "batch": -1}
        floor = None
        if cfg["start.position"] == "timestamp" and not discovered_late:
            floor = start[TIMESTAMP_FLOOR] = cfg["start.timestamp.ms"]
        self._start_offsets[partition_key(sp)] = start
        return pulsar.MessageId.earliest, False, floor

    def start_offsets(self) -> dict[str, dict]:
        return self._start_offsets

    def poll(self) -> Sequence[ConnectRecord]:
        readers = self._readers
        if not readers:
            time.sleep(min(self._timeout_ms / 1000, self.context.time_left()))
            return []
        out: list[ConnectRecord] = []
        most = min(self._batch, self.context.poll_limit)  # the runner's budget left (epoch, in flight)
        if most <= 0:
            return out
        index = self._index
        if index is not None and index.error is not None:
            raise SourceGapError(index.error)  # source.gap.policy=fail: nothing is read past a gap until it is acknowledged
        for entry in readers:
            if entry.held is None:
                continue
            # a look-up failed: ask again before reading on (raises while out is empty)
            if entry.held_for_index:
                if index is not None:
                    mid = entry.held.message_id()
                    try:
                        index.index(entry, (mid.ledger_id(), mid.entry_id(), mid.batch_index()))
                    except NoIndex:
                        pass  # said, and the checks turned off, when the message is taken
            elif self._schemas is not None:
                self._schemas.fetch(entry.topic, entry.held.int_schema_version())
        budget = most
        wait_ms = max(int(min(self._timeout_ms / 1000, self.context.time_left()) * 1000), 0)
        # Round robin over the partitions: take what each has buffered; wait only when none had any.
        for turn in range(len(readers)):
            entry = readers[(self._next + turn) % len(readers)]
            self._read_guarded(entry, max(budget // (len(readers) - turn), 1), 0, out)
            budget = most - len(out)
            if budget <= 0:
                break
        self._next = (self._next + 1) % len(readers)
        if not out and wait_ms > 0:
            self._read_guarded(readers[self._next], most, wait_ms, out)
        return out

    def _take(self, entry: _Partition, m, pos: tuple, out: list) -> bool:
        """One message not delivered before, as a record into ``out`` (the guards' ``_read`` loop
        calls it). The extension's messages directly: pulsar.Message forwards every accessor, two
        Python calls per field per message on the hot path. False: its schema lookup failed, it is
        held and read again first next poll."""
        if self._index is not None:
            at = entry.at
            if at is None or entry.index is None or pos[0] != at[0] or pos[1] > at[1] + 1:
                if not self._check_index(entry, pos):
                    return False
        index = entry.index
        if index is not None:
            index += 1
        floor = entry.floor
        if floor is not None:
            if m.publish_timestamp() < floor:
                entry.index, entry.at = index, pos
                return True  # published before the start time: not read
            entry.floor = None
        props = m.properties()
        key = m.partition_key() or None
        headers = None
        if props:
            if BASE64_KEY in props or BASE64_PROPERTIES in props:
                key, props = _decode_marked(key, props)
            headers = [(k, v if v.__class__ is bytes else v.encode()) for k, v in props.items()]
        if key.__class__ is str:
            key = key.encode()
        ordering = m.ordering_key()
        if ordering:
            headers = (headers or []) + [(ORDERING_KEY_HEADER, ordering if ordering.__class__ is bytes
                                          else ordering.encode())]
        schema = None
        schemas = self._schemas
        if schemas is not None:
            version = m.int_schema_version()  # -1: written without a schema
            if version >= 0:
                schema = schemas.get(entry.topic, version)
                if schema is None:
                    try:
                        schema = schemas.fetch(entry.topic, version)
                    except RetriableError as exc:
                        log.warning("%s; holding %s", exc, entry.name)
                        return False
        data = m.data()
        if not data and m.has_null_value():
            data = None  # Pulsar's null value (a tombstone): Kafka's null value
        part = entry.part
        offset = {"ledger": pos[0], "entry": pos[1], "batch": pos[2]}
        if index is not None:
            offset["index"] = index
        entry.index, entry.at = index, pos
        out.append(make_record(entry.topic, key, data, headers, m.event_timestamp() or m.publish_timestamp(), entry.sp,
                               offset, part if part >= 0 else None, schema))
        return True

    def _check_index(self, entry: _Partition, pos: tuple) -> bool:
        """The gap check where ``pos`` does not follow the last message (``connectors.pulsar.gaps``).
        False: held (a gap under fail, or the admin API did not answer)."""
        entry.held_for_index = False
        try:
            return self._index.check(entry, pos)
        except RetriableError as exc:
            log.warning("%s; holding %s", exc, entry.name)
            entry.held_for_index = True
            return False
        except NoIndex:
            say_undetected(self._admin, "the broker does not add its message index to entries")
            self._index = None
            for each in self._readers:
                each.index = None
            return True

    def take_gaps(self) -> list[SourceGap]:
        if self._index is None:
            return []
        gaps, self._index.gaps = self._index.gaps, []
        return gaps

    def lag_by_partition(self) -> dict[str, int] | None:
        """Entries behind the end per partition, from the admin API's internal stats (with
        ``admin.url``; pulsar-client has no way to ask over the binary protocol without joining a
        subscription); None without it. A lower bound in records when entries are batched."""
        if not self._admin:
            return None
        where = tuple(entry.last for entry in self._readers)
        cached = self._lag_cache
        if cached is not None and cached[0] == where and time.monotonic() - cached[1] < 1.0:
            return cached[2]  # lag() and lag_by_partition() at an epoch's end share one read
        out = self._read_lag()
        self._lag_cache = (where, time.monotonic(), out)
        return out

    def _read_lag(self) -> dict[str, int] | None:
        out = {}
        for entry in self._readers:
            start = entry.start[0]
            if entry.last is None and (start.ledger_id() >= 0 or start.entry_id() >= 0):
                continue  # not read yet from a later start: where it stands is not known
            try:
                behind = entries_behind(internal_stats(self._admin, entry.name, self._cfg), entry.last)
            except RetriableError as exc:
                log.debug("lag of %s: %s", entry.name, exc)
                return None
            if behind is not None:
                out[partition_key(entry.sp)] = behind
        return out

    def lag(self) -> int | None:
        behind = self.lag_by_partition() if self._admin else None
        return None if behind is None else sum(behind.values())

    def stop(self) -> None:
        for entry in getattr(self, "_readers", []):
            try:
                entry.reader.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        self._readers = []
        if getattr(self, "_client", None) is not None:
            CLIENTS.release(self._settings)
            self._client = None


def _decode_marked(key: str, props: dict) -> tuple[bytes | None, dict]:
    """Undo the sink's encoding of bytes Pulsar cannot carry as strings (see connectors.pulsar.mapping)."""
    props = dict(props)
    raw: Any = key
    if props.pop(BASE64_KEY, None) == "true" and key:
        raw = base64.b64decode(key)
    listed = props.pop(BASE64_PROPERTIES, "")
    out: dict[str, Any] = {}
    names = set(filter(None, listed.split(",")))
    for k, v in props.items():
        out[k] = base64.b64decode(v) if k in names else v
    return (raw.encode() if isinstance(raw, str) and raw else raw or None), out
