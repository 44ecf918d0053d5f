"""Which cluster each side of a connector is in, so the console draws one node per cluster.

Connectors name a cluster in different ways: one by ``source.cluster.alias`` A and its
``bootstrap.servers`` ``kafka-a:9092``, another only by ``bootstrap.servers`` ``kafka-a:9092``,
a third by another bootstrap address of the same brokers. Each side of a connector gives
*tokens* that stand for its cluster, and sides sharing a token are one cluster (union-find):

- ``alias:A``: the side's alias (``source.cluster.alias``, ``sink.cluster.alias`` or
  ``target.cluster.alias``, else ``alias`` of a heartbeat emitter; a checkpoint source's
  ``upstream.alias``);
- ``kafka@host:port`` for each bootstrap server, ``rocketmq@host:port`` for each name server of
  ``namesrv.addr``, ``pulsar@host:port`` for each host of ``service.url`` (a broker address belongs
  to one cluster);
- for Kafka, what the cluster says of itself once asked (:class:`KafkaClusterIds`): ``kafka-id:<id>``,
  its cluster id from the admin metadata, and ``kafka@host:port`` of each broker it advertises.
  Two clusters that report one id but advertise disjoint brokers (two brokers started with
  tansu's default id, say) are not the same: that id is then not used as a token. (The price: one
  cluster reached through two listeners that advertise different addresses stays two nodes
  unless an alias or a shared address joins them.)

A heartbeat side (an emitter's source, a monitor's sink) is in the cluster of the connector's
other side. The node is labelled by its aliases (``A``), else by its addresses.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from typing import Any, Callable, Iterable, Mapping

import attrs

__all__ = ["Side", "sides", "Clusters", "group", "KafkaClusterIds", "endpoints"]

log = logging.getLogger(__name__)

_CONNECTION = (("bootstrap.servers", "kafka"), ("service.url", "pulsar"), ("namesrv.addr", "rocketmq"))
_CONNECTION_OF = {broker: key for key, broker in _CONNECTION}
_SPLIT = re.compile(r"[,;\s]+")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)


def endpoints(address: str) -> tuple[str, ...]:
    """The ``host:port`` entries of an address list, lowercased, without scheme or path, sorted:
    ``"PLAINTEXT://Kafka-A:9092, kafka-b:9092"`` -> ``("kafka-a:9092", "kafka-b:9092")``."""
    out = set()
    for part in _SPLIT.split(address.strip()):
        part = _SCHEME.sub("", part).split("/", 1)[0].strip().lower()
        if part:
            out.add(part)
    return tuple(sorted(out))


@attrs.frozen
class Side:
    """One side of a connector: its kind (``kafka``, ``heartbeat``...), alias, and the broker type
    and address it connects to (None when it names no cluster of its own)."""

    kind: str
    alias: str | None = None
    broker: str | None = None
    address: str | None = None

    @property
    def own_cluster(self) -> bool:
        return self.kind != "heartbeat" and (self.alias is not None or self.address is not None)


def _side(config: Mapping[str, str], side: str) -> Side:
    kind = str(config.get(f"{side}.connector.class", "?")).removesuffix(f"-{side}")
    prefix = f"{side}."
    alias = str(config.get(f"{side}.cluster.alias", "")).strip()
    if not alias and side == "sink":
        alias = str(config.get("target.cluster.alias", "")).strip()
    if not alias:
        alias = str(config.get(f"{side}.alias", "")).strip()  # a heartbeat emitter names its cluster so
    if kind == "checkpoint" and side == "source":  # it reads the groups of its upstream cluster
        alias = str(config.get("source.upstream.alias", "")).strip()
        broker = str(config.get("source.upstream.type", "kafka")).strip()
        key = _CONNECTION_OF.get(broker)
        address = str(config.get(f"source.upstream.{key}", "")).strip() if key else ""
        return Side(kind, alias or None, broker if address else None, address or None)
    for key, broker in _CONNECTION:
        address = str(config.get(prefix + key, "")).strip()
        if address:
            return Side(kind, alias or None, broker, address)
    return Side(kind, alias or None)


def sides(config: Mapping[str, str]) -> tuple[Side, Side]:
    """(source side, sink side) of a (masked) connector config."""
    return _side(config, "source"), _side(config, "sink")


@attrs.define
class Clusters:
    """The clusters of a set of connectors: ``nodes`` (id -> node document) and, per connector,
    the ids of its (source, target) clusters; ``alias_node`` finds the node an alias names."""

    nodes: dict[str, dict[str, Any]]
    ends: dict[str, tuple[str, str]]
    aliases: dict[str, str]

    def alias_node(self, alias: str) -> str | None:
        return self.aliases.get(alias)


class _Union:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def join(self, tokens: Iterable[str]) -> None:
        tokens = list(tokens)
        for t in tokens[1:]:
            a, b = self.find(tokens[0]), self.find(t)
            if a != b:
                self.parent[max(a, b)] = min(a, b)


def group(connectors: Mapping[str, tuple[Side, Side]],
          kafka: Callable[[tuple[str, ...]], Iterable[str]] = lambda _: ()) -> Clusters:
    """One node per cluster. ``kafka(endpoints)`` gives the tokens a Kafka cluster reached at
    those endpoints says of itself (see :meth:`KafkaClusterIds.tokens`)."""
    union = _Union()
    side_tokens: dict[tuple[str, int], list[str]] = {}

    def tokens_of(s: Side) -> list[str]:
        out = [f"alias:{s.alias}"] if s.alias else []
        if s.address and s.broker:
            eps = endpoints(s.address)
            out += [f"{s.broker}@{e}" for e in eps]
            if s.broker == "kafka" and eps:
                out += list(kafka(eps))
        return out

    for name, pair in connectors.items():
        own = [tokens_of(s) if s.own_cluster else [] for s in pair]
        for i, s in enumerate(pair):
            tokens = own[i]
            if not tokens:  # a heartbeat side, or a side naming nothing: the other side's cluster
                tokens = own[1 - i] + ([f"alias:{s.alias}"] if s.alias else [])
            if not tokens:
                tokens = ["?"]
            union.join(tokens)
            side_tokens[(name, i)] = tokens
    members: dict[str, dict[str, Any]] = {}
    for (name, i), tokens in side_tokens.items():
        root = union.find(tokens[0])
        m = members.setdefault(root, {"aliases": set(), "addresses": set(), "kinds": [], "cluster_ids": set()})
        s = connectors[name][i]
        if s.alias:
            m["aliases"].add(s.alias)
        if s.address and s.own_cluster:
            m["addresses"].add(s.address)
        if s.kind not in m["kinds"] and s.kind != "?":
            m["kinds"].append(s.kind)
        m["cluster_ids"].update(t.split(":", 1)[1] for t in tokens if t.startswith("kafka-id:"))
    labels: dict[str, str] = {}
    for root, m in members.items():
        label = " / ".join(sorted(m["aliases"])) or ", ".join(sorted(m["addresses"])) or "?"
        labels[root] = label
    taken: dict[str, int] = {}
    for label in labels.values():
        taken[label] = taken.get(label, 0) + 1
    nodes: dict[str, dict[str, Any]] = {}
    ids: dict[str, str] = {}
    for root, m in sorted(members.items(), key=lambda x: labels[x[0]]):
        label = labels[root]
        node_id = label if taken[label] == 1 else f"{label} ({', '.join(sorted(m['addresses'])) or root})"
        ids[root] = node_id
        nodes[node_id] = {"id": node_id, "label": label, "aliases": sorted(m["aliases"]),
                          "addresses": sorted(m["addresses"]), "kinds": m["kinds"],
                          "cluster_id": ", ".join(sorted(m["cluster_ids"])) or None}
    ends = {name: (ids[union.find(side_tokens[(name, 0)][0])], ids[union.find(side_tokens[(name, 1)][0])])
            for name in connectors}
    aliases = {t.split(":", 1)[1]: ids[union.find(t)] for t in union.parent if t.startswith("alias:")}
    return Clusters(nodes, ends, aliases)


def _admin_lookup(settings: Mapping[str, Any], timeout: float) -> tuple[str | None, tuple[str, ...]]:
    """(cluster id, advertised broker endpoints) from one metadata request with the side's client
    settings (``connectors.kafka.clients.client_config``: its overrides, credentials included)."""
    from confluent_kafka.admin import AdminClient

    from connectors.kafka.clients import client_config

    conf = client_config(settings, "admin")
    conf.pop("logger", None)  # a cluster that cannot be reached is the console's business, said below
    conf.setdefault("log_level", 0)
    metadata = AdminClient(conf).list_topics(timeout=timeout)
    brokers = tuple(sorted(f"{b.host}:{b.port}".lower() for b in metadata.brokers.values()))
    return metadata.cluster_id, brokers


class KafkaClusterIds:
    """Kafka cluster ids by bootstrap endpoints, asked in a thread of its own (a request never
    waits on a broker longer than :meth:`wait`'s budget), remembered for ``ttl`` seconds (a failed
    lookup for ``retry`` seconds), for at most ``max_entries`` endpoint lists."""

    def __init__(self, lookup: Callable[[Mapping[str, Any], float], tuple[str | None, tuple[str, ...]]] = _admin_lookup,
                 *, ttl: float = 300.0, retry: float = 30.0, timeout: float = 5.0, max_entries: int = 256,
                 clock: Callable[[], float] = time.monotonic):
        self._lookup = lookup
        self.ttl, self.retry, self.timeout, self.max_entries = ttl, retry, timeout, max_entries
        self._clock = clock
        self._known: dict[tuple[str, ...], tuple[float, str | None, tuple[str, ...]]] = {}  # -> (until, id, brokers)
        self._pending: set[tuple[str, ...]] = set()
        self._queue: queue.Queue = queue.Queue()
        self._done = threading.Condition()
        self._thread: threading.Thread | None = None

    def request(self, key: tuple[str, ...], settings: Mapping[str, Any]) -> None:
        """Ask the cluster at ``key`` for its id unless known and fresh, or asked already."""
        with self._done:
            entry = self._known.get(key)
            if key in self._pending or (entry is not None and entry[0] > self._clock()):
                return
            if entry is None and len(self._known) + len(self._pending) >= self.max_entries:
                return
            self._pending.add(key)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="console-cluster-ids", daemon=True)
                self._thread.start()
        self._queue.put((key, dict(settings)))

    def _run(self) -> None:
        while True:
            key, settings = self._queue.get()
            try:
                cluster_id, brokers = self._lookup(settings, self.timeout)
                until = self._clock() + self.ttl
            except Exception as exc:  # noqa: BLE001 - an unreachable cluster is drawn by its address
                log.info("console: cannot ask the Kafka cluster at %s for its id: %s", ",".join(key), type(exc).__name__)
                cluster_id, brokers, until = None, (), self._clock() + self.retry
            with self._done:
                self._pending.discard(key)
                self._known[key] = (until, cluster_id or None, brokers)
                self._done.notify_all()

    def wait(self, keys: Iterable[str | tuple[str, ...]], budget: float) -> None:
        """Wait up to ``budget`` seconds for the first answer about each of ``keys`` (one asked
        before is not waited for again: its last answer stands until the new one comes)."""
        keys = set(keys)
        deadline = time.monotonic() + budget
        with self._done:
            while any(k in self._pending and k not in self._known for k in keys):
                left = deadline - time.monotonic()
                if left <= 0 or not self._done.wait(left):
                    return

    def tokens(self, key: tuple[str, ...]) -> list[str]:
        """What the cluster at ``key`` said of itself: ``kafka-id:<id>`` (unless another cluster
        with that id advertises disjoint brokers) and ``kafka@<broker>`` per advertised broker."""
        with self._done:
            entry = self._known.get(key)
            if entry is None:
                return []
            _, cluster_id, brokers = entry
            out = [f"kafka@{b}" for b in brokers]
            if cluster_id is None:
                return out
            mine = set(brokers)
            clash = any(other[1] == cluster_id and other[2] and mine and not mine & set(other[2])
                        for k, other in self._known.items() if k != key)
            return out if clash else [f"kafka-id:{cluster_id}", *out]
