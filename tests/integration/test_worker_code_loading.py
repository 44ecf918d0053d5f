"""Issue 35 over the wire: a REST request makes the worker import no module, and no import it does
make can take the API down; ``/docs`` is off unless the operator turns it on, and every answer
carries the console's security headers.

Each test runs against a running worker (real uvicorn, the session's Spark). On a2dbae7 the marker
module ran (its file appeared), ``unittest.__main__`` answered 500 and left ``/health`` silent,
``/docs`` loaded Swagger UI from a CDN, and no JSON answer carried a Content-Security-Policy.
"""

from __future__ import annotations

import importlib
import sys
import textwrap

import httpx
import pytest

from connect.plugins import ENTRY_POINT_GROUP
from worker.api.headers import SECURITY_HEADERS

pytestmark = pytest.mark.timeout(300)

SLOTS = ("source.connector.class", "sink.connector.class", "dlq.connector.class")


def _memory(**extra) -> dict[str, str]:
    return {"source.connector.class": "memory", "sink.connector.class": "memory", **extra}


@pytest.fixture
def marker_module(tmp_path, monkeypatch):
    """A module on the worker's sys.path whose top-level code writes a marker file: (name, marker)."""
    name = f"marker_{tmp_path.name.replace('-', '_')}"
    marker = tmp_path / "imported.marker"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(f"""
        open({str(marker)!r}, "w").write("top-level code ran")
        from connect.testing import MemorySourceConnector, MemorySinkConnector

        class Src(MemorySourceConnector):
            pass

        class Snk(MemorySinkConnector):
            pass
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield name, marker
    sys.modules.pop(name, None)


def _healthy(c: httpx.Client) -> bool:
    return c.get("/health", timeout=10).status_code == 200


def test_a_module_named_by_a_connector_class_is_never_imported(worker_factory, unique, marker_module):
    name, marker = marker_module
    _, c = worker_factory()
    assert _healthy(c)
    for slot in SLOTS:
        for spelling in (f"{name}:Src", f"{name}.Src", f"{name}:Snk"):
            config = _memory(**{slot: spelling})
            r = c.post("/connectors", json={"name": f"{unique}-x", "config": config})
            assert r.status_code == 400, (slot, spelling, r.text)
            assert slot in r.json()["message"] and "plugin.classes" in r.json()["message"], r.text
    created = c.post("/connectors", json={"name": f"{unique}-ok", "config": _memory(), "initial_state": "STOPPED"})
    assert created.status_code == 201, created.text
    r = c.put(f"/connectors/{unique}-ok/config", json=_memory(**{"source.connector.class": f"{name}:Src"}))
    assert r.status_code == 400 and "source.connector.class" in r.text, r.text
    r = c.patch(f"/connectors/{unique}-ok/config", json={"sink.connector.class": f"{name}.Snk"})
    assert r.status_code == 400 and "sink.connector.class" in r.text, r.text
    assert not marker.exists(), "the module's top-level code ran"
    assert name not in sys.modules
    assert _healthy(c)


def test_a_module_that_exits_on_import_is_a_400_and_health_still_answers(worker_factory, unique, monkeypatch):
    monkeypatch.delitem(sys.modules, "unittest.__main__", raising=False)
    _, c = worker_factory()
    for slot in SLOTS:
        r = c.post("/connectors", json={"name": f"{unique}-x", "config": _memory(**{slot: "unittest.__main__:Nope"})})
        assert r.status_code == 400, r.text
        assert slot in r.json()["message"], r.text
        assert _healthy(c)
    assert "unittest.__main__" not in sys.modules
    # the herder still works: a connector is created after it
    r = c.post("/connectors", json={"name": unique, "config": _memory(), "initial_state": "STOPPED"})
    assert r.status_code == 201, r.text
    assert _healthy(c)


@pytest.fixture
def exiting_distribution(tmp_path, monkeypatch):
    """An installed distribution whose declared connector module raises SystemExit when imported."""
    (tmp_path / "exiting_conn.py").write_text("raise SystemExit('a plugin that exits on import')\n")
    dist_info = tmp_path / "exiting_conn-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: exiting-conn\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nexiting-source = exiting_conn:Source\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield
    sys.modules.pop("exiting_conn", None)
    importlib.invalidate_caches()


def test_a_declared_plugin_raising_system_exit_is_a_400_naming_the_key(worker_factory, unique, exiting_distribution):
    _, c = worker_factory()
    r = c.post("/connectors", json={"name": unique, "config": _memory(**{"source.connector.class": "exiting"})})
    assert r.status_code == 400, r.text
    message = r.json()["message"]
    assert "source.connector.class" in message and "SystemExit" in message, message
    assert _healthy(c)


def test_the_operator_lists_a_class_in_plugin_classes(worker_factory, unique, marker_module):
    name, marker = marker_module
    _, c = worker_factory(**{"plugin.classes": f"{name}:Src"})
    r = c.post("/connectors", json={"name": f"{unique}-n", "config": _memory(**{"sink.connector.class": f"{name}:Snk"})})
    assert r.status_code == 400 and "sink.connector.class" in r.text, r.text  # only what is listed
    assert not marker.exists()
    r = c.post("/connectors", json={"name": unique, "initial_state": "STOPPED",
                                    "config": _memory(**{"source.connector.class": f"{name}:Src"})})
    assert r.status_code == 201, r.text
    assert marker.exists()  # listed: imported as any plugin


def test_plugin_classes_must_be_module_class_targets():
    from connect.errors import ConfigError
    from worker.service import load_worker_config

    with pytest.raises(ConfigError, match=r"plugin\.classes.*'os\.system' is not a module:Class target"):
        load_worker_config(None, {"plugin.classes": "a.b:C, os.system"})


def _assert_console_headers(r: httpx.Response, what: str) -> None:
    for header, value in SECURITY_HEADERS.items():
        assert r.headers.get(header) == value, (what, header, dict(r.headers))
    assert "script-src 'self'" in r.headers["content-security-policy"]


def test_docs_are_off_by_default_and_every_answer_carries_the_console_headers(worker_factory, unique):
    _, c = worker_factory(**{"rest.auth.token": "t0ken-for-headers"})
    assert c.get("/docs").status_code == 404
    assert c.get("/redoc").status_code == 404
    assert c.get("/openapi.json").status_code == 200
    answers = {path: c.get(path) for path in ("/", "/health", "/connectors", "/openapi.json", "/metrics",
                                              "/connector-plugins", "/ui", "/ui/assets/console.js", "/docs",
                                              "/connectors/nope", "/console/summary")}
    answers["POST 400"] = c.post("/connectors", json={"name": unique})
    answers["401"] = httpx.get(f"{str(c.base_url).rstrip('/')}/connectors")
    answers["guard 421"] = c.get("/connectors", headers={"Host": "evil.example"})
    answers["guard 415"] = c.post("/connectors", content=b"{}", headers={"Content-Type": "text/plain"})
    assert answers["401"].status_code == 401 and answers["guard 421"].status_code == 421
    for what, r in answers.items():
        _assert_console_headers(r, what)
    assert answers["/connectors"].headers["cache-control"] == "no-store"
    assert answers["/ui"].headers["cache-control"] == "no-cache"  # a route's own choice is kept


def test_docs_when_turned_on_come_from_this_origin_under_the_same_headers(worker_factory):
    pytest.importorskip("swagger_ui_bundle")
    _, c = worker_factory(**{"rest.docs.enabled": "true"})
    page = c.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    _assert_console_headers(page, "/docs")
    html = page.text
    assert "http" not in html and "<script>" not in html  # nothing from elsewhere, no inline script
    for asset, kind in (("swagger-ui-bundle.js", "javascript"), ("swagger-ui.css", "css"), ("init.js", "javascript")):
        assert f"/docs/assets/{asset}" in html
        r = c.get(f"/docs/assets/{asset}")
        assert r.status_code == 200 and kind in r.headers["content-type"] and len(r.content) > 100, asset
        _assert_console_headers(r, asset)
    assert "SwaggerUIBundle" in c.get("/docs/assets/swagger-ui-bundle.js").text
    assert c.get("/docs/assets/..%2f__init__.py").status_code == 404
    assert c.get("/docs/assets/swagger-ui-bundle.js.map").status_code == 404

