"""Which Kafka the tests run on: Apache Kafka 4.x (default) or tansu with ``CONNECT_TEST_KAFKA=tansu``
(a quick local loop: it starts in a tenth of the time, but keeps everything in memory, answers high
watermarks wrong, shows aborted records to ``read_committed`` readers and has no topic configs or
ACLs). Fixtures and tests that start a broker of their own build it with :func:`kafka_broker`, so
one variable moves them all."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from worker.embedded import ApacheKafka, EmbeddedKafka

KINDS = ("tansu", "apache")


def use_apache_kafka() -> bool:
    kind = os.environ.get("CONNECT_TEST_KAFKA", "apache").strip().lower() or "apache"
    if kind not in KINDS:
        raise RuntimeError(f"CONNECT_TEST_KAFKA must be one of {', '.join(KINDS)}")
    return kind == "apache"


def kafka_broker(**kwargs) -> ApacheKafka | EmbeddedKafka:
    """A broker (not started) of the configured kind; ``kwargs`` as :class:`EmbeddedKafka` takes them."""
    return ApacheKafka(**kwargs) if use_apache_kafka() else EmbeddedKafka(**kwargs)


def start_all(brokers: list) -> list:
    """Start ``brokers`` side by side (a JVM spends its start waiting as much as computing); if
    one fails, the others are stopped and the first error is raised."""
    with ThreadPoolExecutor(len(brokers)) as pool:
        futures = [pool.submit(b.start) for b in brokers]
    errors = [f.exception() for f in futures if f.exception()]
    if errors:
        for b in brokers:
            b.stop()
        raise errors[0]
    return brokers
