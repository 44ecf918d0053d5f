"""conf/kubernetes/connect-worker.yaml says what it must (issue 35): its worker config refuses to start
with an empty token and serves HTTPS, the pod runs non-root on a read-only root with no privilege,
capability or ServiceAccount token, and a NetworkPolicy limits who reaches the REST port."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from connect.errors import ConfigError
from worker.service import load_worker_config

MANIFEST = Path(__file__).resolve().parents[2] / "conf" / "kubernetes" / "connect-worker.yaml"


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(MANIFEST.read_text())}


def _pod(docs) -> dict:
    return docs["Deployment"]["spec"]["template"]["spec"]


def test_the_configmap_worker_refuses_an_empty_token_and_serves_tls(docs, tmp_path, monkeypatch):
    path = tmp_path / "worker.json"
    path.write_text(docs["ConfigMap"]["data"]["worker.json"])
    for name, value in {"CONNECT_REST_HOSTS": "connect-worker", "STORE_BOOTSTRAP": "kafka:9092", "POD_NAME": "p"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CONNECT_TOKEN", "")
    with pytest.raises(ConfigError, match="rest.auth.token"):
        load_worker_config(path)
    monkeypatch.setenv("CONNECT_TOKEN", "a-long-random-token")
    config = load_worker_config(path)
    assert config.get("rest.host") == "0.0.0.0" and config.get("rest.auth.token") == "a-long-random-token"
    mounts = {m["name"]: m["mountPath"] for m in _pod(docs)["containers"][0]["volumeMounts"]}
    for key in ("rest.tls.certfile", "rest.tls.keyfile"):
        assert config.get(key).startswith(mounts["tls"] + "/")
    tls_volume = next(v for v in _pod(docs)["volumes"] if v["name"] == "tls")
    assert tls_volume["secret"]["secretName"] == "connect-worker-tls"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert _pod(docs)["containers"][0][probe]["httpGet"]["scheme"] == "HTTPS"


def test_the_pod_runs_unprivileged_without_a_service_account_token(docs):
    pod = _pod(docs)
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
    [container] = pod["containers"]
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert {"/tmp", "/var/lib/connect"} <= writable  # Spark's scratch and the data directory


def test_a_network_policy_admits_only_labelled_clients_to_the_rest_port(docs):
    policy = docs["NetworkPolicy"]["spec"]
    assert policy["podSelector"]["matchLabels"] == docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert "Ingress" in policy["policyTypes"]
    for rule in policy["ingress"]:
        assert rule.get("from"), "an ingress rule without 'from' admits everyone"
        assert [p["port"] for p in rule["ports"]] == [8083]
