"""Which Pulsar the tests run on: pulsar-lite (default, fast) or Apache Pulsar 4.0 standalone with
``CONNECT_TEST_PULSAR=apache``. Fixtures and tests that start a broker of their own build it with
:func:`pulsar_broker`, so one variable moves them all."""

from __future__ import annotations

import os

from worker.embedded import ApachePulsar, EmbeddedPulsar

KINDS = ("lite", "apache")


def use_apache_pulsar() -> bool:
    kind = os.environ.get("CONNECT_TEST_PULSAR", "lite").strip().lower() or "lite"
    if kind not in KINDS:
        raise RuntimeError(f"CONNECT_TEST_PULSAR must be one of {', '.join(KINDS)}")
    return kind == "apache"


def pulsar_broker(data_dir, **kwargs) -> ApachePulsar | EmbeddedPulsar:
    """A broker (not started) of the configured kind; ``kwargs`` as :class:`EmbeddedPulsar` takes
    them (``cluster``: the Apache cluster's name, ignored by pulsar-lite)."""
    if use_apache_pulsar():
        return ApachePulsar(data_dir, **kwargs)
    kwargs.pop("cluster", None)
    return EmbeddedPulsar(data_dir, **kwargs)


def needs_apache_pulsar(broker) -> None:
    """Skip the calling test unless ``broker`` is Apache Pulsar (it needs the admin REST API)."""
    import pytest

    if not isinstance(broker, ApachePulsar):
        pytest.skip("needs Apache Pulsar's admin REST API: CONNECT_TEST_PULSAR=apache")


def register(on: ApachePulsar, *others: ApachePulsar) -> None:
    """Make ``on`` know each of ``others`` by cluster name, through the admin API (what a tenant
    allowed on several clusters and geo-replication need)."""
    from connectors.pulsar.metadata.admin import PulsarAdmin

    with PulsarAdmin(on.admin_url) as admin:
        for other in others:
            if admin.request("GET", f"/admin/v2/clusters/{other.cluster}", missing=True) is None:
                admin.request("PUT", f"/admin/v2/clusters/{other.cluster}",
                              {"serviceUrl": other.admin_url, "brokerServiceUrl": other.service_url})
