"""Which RocketMQ the tests run on: Apache RocketMQ 5.x (default) or the project's embedded broker
with ``CONNECT_TEST_ROCKETMQ=embedded`` (a quick local loop; the conformance suite holds it to
Apache's answers). Fixtures and tests that start a broker of their own build it with
:func:`rocketmq_broker`, so one variable moves them all.

Both kinds have ``namesrv`` (the name server) and ``broker_addr`` (the broker): one address on the
embedded broker, two on Apache RocketMQ; requests to a broker go to ``broker_addr``."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from worker.embedded import ApacheRocketMQ, EmbeddedRocketMQ

KINDS = ("embedded", "apache")


def use_apache_rocketmq() -> bool:
    kind = os.environ.get("CONNECT_TEST_ROCKETMQ", "apache").strip().lower() or "apache"
    if kind not in KINDS:
        raise RuntimeError(f"CONNECT_TEST_ROCKETMQ must be one of {', '.join(KINDS)}")
    return kind == "apache"


def rocketmq_broker(data_dir, **kwargs) -> ApacheRocketMQ | EmbeddedRocketMQ:
    """A broker (not started) of the configured kind storing under ``data_dir``; ``kwargs``
    (``log_path``, ``port``) as both take them."""
    return ApacheRocketMQ(data_dir, **kwargs) if use_apache_rocketmq() else EmbeddedRocketMQ(data_dir, **kwargs)


def stop_all(brokers: list) -> None:
    """Stop ``brokers`` side by side (an Apache broker's clean shutdown takes ~14 s, mostly waiting)."""
    with ThreadPoolExecutor(len(brokers)) as pool:
        for f in [pool.submit(b.stop) for b in brokers]:
            f.result()
