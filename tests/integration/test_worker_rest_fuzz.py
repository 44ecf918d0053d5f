"""A bounded property-based fuzz of the worker's REST API, generated from its own OpenAPI document
(schemathesis): valid and invalid bodies, paths and queries on every operation; no answer may be
a 5xx, and every error must be Kafka Connect's error body."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from worker.api.rest import create_app
from worker.service import Worker, load_worker_config


@pytest.fixture(scope="module")
def fuzzed_worker(spark, tmp_path_factory):
    w = Worker(load_worker_config(None, {"rest.port": 0, "data.dir": str(tmp_path_factory.mktemp("fuzz"))}),
               spark_app=spark)
    w.start()
    yield w
    w.close()


@pytest.fixture(scope="module")
def api_schema(fuzzed_worker):
    app = create_app(fuzzed_worker.herder, metrics=fuzzed_worker.metrics, allowed_hosts=("testserver", "localhost"))
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def test_no_server_errors_and_kafka_connect_error_bodies(api_schema):
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 20  # every endpoint of the contract is in the document
    calls = []

    for operation in operations:
        @given(operation.as_strategy())
        @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def call(case):
            response = case.call()
            calls.append((case.method, response.status_code))
            where = f"{case.method} {case.formatted_path}"
            assert response.status_code < 500, f"{where}: {response.status_code} {response.text[:500]}"
            if response.status_code >= 400 and response.status_code != 405:
                body = response.json()
                assert set(body) == {"error_code", "message"} and body["error_code"] == response.status_code, (where, body)

        call()
    assert len(calls) >= 200, len(calls)
