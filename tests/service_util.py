"""The worker service in tests: a factory of in-process workers (real uvicorn, the session's Spark)
and small helpers to watch connectors and target topics."""

from __future__ import annotations

import time

import httpx
from confluent_kafka import Consumer, TopicPartition

from worker.service import Worker, load_worker_config


def worker_factory_for(spark, tmp_path):
    started: list[Worker] = []

    def start(**settings) -> tuple[Worker, httpx.Client]:
        overrides = {"rest.port": 0, "data.dir": str(tmp_path / "worker"), **settings}
        w = Worker(load_worker_config(None, overrides), spark_app=spark)
        w.start()
        started.append(w)
        headers = {}
        if settings.get("rest.auth.token"):
            headers["Authorization"] = f"Bearer {settings['rest.auth.token']}"
        client = httpx.Client(base_url=f"http://127.0.0.1:{w.port}", timeout=60, headers=headers)
        return w, client

    return start, started


def wait_for(predicate, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Arrivals:
    """Counts the records arriving in a target topic (read once, from the beginning)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = 2):
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watch", "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.n = 0

    def count(self, wait: float = 0.5) -> int:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            self.n += sum(1 for m in self.consumer.consume(10000, 0.1) if m.error() is None)
        return self.n

    def close(self) -> None:
        self.consumer.close()


def state_of(client: httpx.Client, name: str) -> str:
    return client.get(f"/connectors/{name}/status").json()["connector"]["state"]
