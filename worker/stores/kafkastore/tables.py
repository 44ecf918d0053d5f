"""The three stores on their topics (:class:`~worker.stores.store.Stores`' ``offsets``, ``configs``
and ``statuses``): each rebuilds its state from the records read at start-up, serves reads from
memory and writes through :meth:`KafkaStores._write <worker.stores.kafkastore.KafkaStores._write>`,
updating its memory once the write is committed (layout: :mod:`worker.stores.kafkastore`)."""

from __future__ import annotations

import logging
import threading
import zlib
from typing import TYPE_CHECKING, Any, Mapping

import orjson

from connect.errors import ConnectError
from worker.stores.kafkastore.topics import Record
from worker.stores.store import StoredConnector, StoredStatus

if TYPE_CHECKING:
    from worker.stores.kafkastore import KafkaStores

__all__ = ["KafkaOffsets", "KafkaConfigs", "KafkaStatuses"]

log = logging.getLogger(__name__)

_CONNECTOR, _TARGET_STATE = "connector-", "target-state-"
_STATUS_CONNECTOR, _STATUS_TASK = "status-connector-", "status-task-"


def _partition_of(connector: str, partitions: int) -> int:
    """Stable across processes and Python versions (unlike ``hash``)."""
    return zlib.crc32(connector.encode()) % partitions


def _dumps(value: Any, what: str) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError as exc:
        raise ConnectError(f"{what} is not JSON-serialisable: {exc}") from exc


class _KeyedLocks:
    """One lock per key (a connector name), created on first use."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def __call__(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())


class KafkaOffsets:
    def __init__(self, stores: KafkaStores, topic: str, partitions: int, records: list[Record]):
        self._stores, self._topic, self._partitions = stores, topic, partitions
        self._lock = threading.Lock()  # the maps below
        self._writing = _KeyedLocks()
        self._offsets: dict[str, dict[str, bytes]] = {}  # connector -> partition key -> offset JSON
        self._maybe: dict[str, set[str]] = {}  # keys possibly live in the topic (a superset of _offsets')
        for raw_key, value in records:
            try:
                connector, part = orjson.loads(raw_key)
                if not isinstance(connector, str) or not isinstance(part, str):
                    raise ValueError("not a [connector, partition] pair")
                if value is not None and not isinstance(orjson.loads(value), dict):
                    raise ValueError("the offset is not a JSON object")
            except (ValueError, TypeError) as exc:
                log.warning("skipping a record of offset topic %s with key %r: %s", topic, raw_key, exc)
                continue
            self._apply(connector, {part: value})

    def _apply(self, connector: str, values: Mapping[str, bytes | None]) -> None:
        offsets = self._offsets.setdefault(connector, {})
        maybe = self._maybe.setdefault(connector, set())
        for part, value in values.items():
            if value is None:
                offsets.pop(part, None)
                maybe.discard(part)
            else:
                offsets[part] = value
                maybe.add(part)
        if not offsets:
            del self._offsets[connector]
        if not maybe:
            del self._maybe[connector]

    def _key(self, connector: str, part: str) -> bytes:
        return orjson.dumps([connector, part])

    def load(self, connector: str) -> dict[str, dict[str, Any]]:
        with self._lock:
            rows = list(self._offsets.get(connector, {}).items())
        return {part: orjson.loads(value) for part, value in rows}

    def commit(self, connector: str, offsets: Mapping[str, Mapping[str, Any] | None]) -> None:
        if not offsets:
            return
        values = {str(part): None if offset is None else _dumps(dict(offset), f"offset of {connector}/{part}")
                  for part, offset in offsets.items()}
        records = [(self._key(connector, part), value) for part, value in values.items()]
        with self._writing(connector):
            with self._lock:  # a failed write may still have stored some of these keys
                self._maybe.setdefault(connector, set()).update(p for p, v in values.items() if v is not None)
            self._stores._write(self._topic, _partition_of(connector, self._partitions), records)
            with self._lock:
                self._apply(connector, values)

    def reset(self, connector: str) -> None:
        with self._writing(connector):
            with self._lock:
                parts = sorted(self._maybe.get(connector, set()) | set(self._offsets.get(connector, {})))
            if not parts:
                return
            self._stores._write(self._topic, _partition_of(connector, self._partitions),
                                [(self._key(connector, part), None) for part in parts])
            with self._lock:
                self._apply(connector, dict.fromkeys(parts))

    def close(self) -> None:
        self._stores.close()


class KafkaConfigs:
    def __init__(self, stores: KafkaStores, topic: str, records: list[Record]):
        self._stores, self._topic = stores, topic
        self._lock = threading.Lock()  # the maps below
        self._writing = threading.Lock()
        self._configs: dict[str, dict[str, str]] = {}
        self._states: dict[str, str] = {}
        self._maybe: set[str] = set()  # names possibly having records in the topic
        for raw_key, value in records:
            try:
                key = raw_key.decode()
                if key.startswith(_CONNECTOR):
                    config = None if value is None else orjson.loads(value)["config"]
                    if config is not None and not isinstance(config, dict):
                        raise ValueError("the config is not a JSON object")
                    self._apply_config(key[len(_CONNECTOR):], config)
                elif key.startswith(_TARGET_STATE):
                    state = None if value is None else orjson.loads(value)["state"]
                    self._apply_state(key[len(_TARGET_STATE):], state)
            except (AttributeError, ValueError, TypeError, KeyError) as exc:
                log.warning("skipping a record of config topic %s with key %r: %s", topic, raw_key, exc)

    def _apply_config(self, name: str, config: dict[str, str] | None) -> None:
        if config is None:
            self._configs.pop(name, None)
        else:
            self._configs[name] = config
            self._maybe.add(name)

    def _apply_state(self, name: str, state: str | None) -> None:
        if state is None:
            self._states.pop(name, None)
        else:
            self._states[name] = state
            self._maybe.add(name)

    def connectors(self) -> dict[str, StoredConnector]:
        with self._lock:
            return {name: StoredConnector(name, dict(self._configs[name]), self._states.get(name, "RUNNING"))
                    for name in sorted(self._configs)}

    def put(self, name: str, config: Mapping[str, str], target_state: str | None = None) -> None:
        config = dict(config)
        records: list[Record] = [(f"{_CONNECTOR}{name}".encode(), _dumps({"config": config}, f"config of {name}"))]
        with self._writing:
            with self._lock:
                new = name not in self._configs
                self._maybe.add(name)
            state = target_state or ("RUNNING" if new else None)  # a new connector starts from a known state
            if state:
                records.append((f"{_TARGET_STATE}{name}".encode(), orjson.dumps({"state": state})))
            self._stores._write(self._topic, 0, records)
            with self._lock:
                self._apply_config(name, config)
                if state:
                    self._apply_state(name, state)

    def put_target_state(self, name: str, state: str) -> None:
        with self._writing:
            with self._lock:
                if name not in self._configs:  # as an UPDATE of a missing row: nothing to do
                    return
            self._stores._write(self._topic, 0, [(f"{_TARGET_STATE}{name}".encode(), orjson.dumps({"state": state}))])
            with self._lock:
                self._apply_state(name, state)

    def delete(self, name: str) -> None:
        with self._writing:
            with self._lock:
                if name not in self._maybe and name not in self._configs and name not in self._states:
                    return
            self._stores._write(self._topic, 0, [(f"{_CONNECTOR}{name}".encode(), None),
                                                 (f"{_TARGET_STATE}{name}".encode(), None)])
            with self._lock:
                self._apply_config(name, None)
                self._apply_state(name, None)
                self._maybe.discard(name)


def _status_key(connector: str, task: int | None) -> bytes:
    return (f"{_STATUS_CONNECTOR}{connector}" if task is None else f"{_STATUS_TASK}{connector}-{task}").encode()


class KafkaStatuses:
    def __init__(self, stores: KafkaStores, topic: str, partitions: int, records: list[Record]):
        self._stores, self._topic, self._partitions = stores, topic, partitions
        self._lock = threading.Lock()  # the maps below
        self._writing = _KeyedLocks()
        self._statuses: dict[str, dict[int | None, StoredStatus]] = {}
        self._maybe: dict[str, set[int | None]] = {}  # tasks possibly having a record in the topic
        for raw_key, value in records:
            try:
                key = raw_key.decode()
                if key.startswith(_STATUS_CONNECTOR):
                    connector, task = key[len(_STATUS_CONNECTOR):], None
                elif key.startswith(_STATUS_TASK):
                    connector, task_id = key[len(_STATUS_TASK):].rsplit("-", 1)
                    task = int(task_id)
                else:
                    continue
                status = None
                if value is not None:
                    data = orjson.loads(value)
                    status = StoredStatus(connector, task, data["state"], data["worker_id"], data.get("trace"))
                self._apply(connector, task, status)
            except (AttributeError, ValueError, TypeError, KeyError) as exc:
                log.warning("skipping a record of status topic %s with key %r: %s", topic, raw_key, exc)

    def _apply(self, connector: str, task: int | None, status: StoredStatus | None) -> None:
        statuses = self._statuses.setdefault(connector, {})
        maybe = self._maybe.setdefault(connector, set())
        if status is None:
            statuses.pop(task, None)
            maybe.discard(task)
        else:
            statuses[task] = status
            maybe.add(task)
        if not statuses:
            del self._statuses[connector]
        if not maybe:
            del self._maybe[connector]

    def put(self, status: StoredStatus) -> None:
        value = _dumps({"state": status.state, "worker_id": status.worker_id, "trace": status.trace},
                       f"status of {status.connector}")
        with self._writing(status.connector):
            with self._lock:
                self._maybe.setdefault(status.connector, set()).add(status.task)
            self._stores._write(self._topic, _partition_of(status.connector, self._partitions),
                                [(_status_key(status.connector, status.task), value)])
            with self._lock:
                self._apply(status.connector, status.task, status)

    def statuses(self, connector: str) -> list[StoredStatus]:
        with self._lock:
            found = list(self._statuses.get(connector, {}).values())
        return sorted(found, key=lambda s: -1 if s.task is None else s.task)

    def delete(self, connector: str) -> None:
        with self._writing(connector):
            with self._lock:
                tasks = self._maybe.get(connector, set()) | set(self._statuses.get(connector, {}))
            if not tasks:
                return
            ordered = sorted(tasks, key=lambda t: -1 if t is None else t)
            self._stores._write(self._topic, _partition_of(connector, self._partitions),
                                [(_status_key(connector, task), None) for task in ordered])
            with self._lock:
                for task in ordered:
                    self._apply(connector, task, None)
