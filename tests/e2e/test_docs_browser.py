"""``/docs`` (turned on with ``rest.docs.enabled``) in a real browser: headless Chromium (Debian's
package, ``tests/browser_util.py``) shows every operation of the API, under the console's
Content-Security-Policy (no violation reported, no inline script needed), and never asks another
origin for anything: Swagger UI comes from the installed ``swagger-ui-bundle-v2``, not from a CDN."""

from __future__ import annotations

import pytest
from browser_util import chromium_path, unavailable

pytestmark = pytest.mark.timeout(300)


def test_docs_render_the_api_under_the_console_csp_from_this_origin_only(worker_factory):
    pytest.importorskip("swagger_ui_bundle")
    chromium = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is not installed: pip install -e '.[test]'")
    w, _ = worker_factory(**{"rest.docs.enabled": "true"})
    origin = f"http://127.0.0.1:{w.port}"
    requests, problems = [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = browser.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto(f"{origin}/docs")
            page.wait_for_selector(".opblock-summary-path", timeout=60_000)
            paths = page.locator(".opblock-summary-path").all_inner_texts()
        finally:
            browser.close()
    assert any(p.replace("\u200b", "") == "/connectors" for p in paths), paths
    assert len(paths) >= 20, paths
    assert not [p for p in problems if "Content Security Policy" in p or "Refused" in p], problems
    foreign = [u for u in requests if not u.startswith(origin) and not u.startswith("data:")]
    assert not foreign, foreign
