"""The console in a real browser: headless Chromium (Debian's package, ``tests/browser_util.py``)
driven by Playwright, against a worker running a full mesh of three tansu clusters (six flows),
with basic authentication on.

The topology shows 3 clusters and 6 arrows; a flow is paused from its link page (the confirmation
accepted), its arrow turns ``paused`` and the REST API reports PAUSED; a dismissed confirmation
sends nothing; the flow is resumed from the page; an action the API refuses shows the API's text.
Screenshots of the topology and the link page are taken on the way (``UPDATE_SCREENSHOTS=1``
writes them to ``docs/``, where the README shows them).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from itertools import permutations
from pathlib import Path

import httpx
import pytest
from browser_util import chromium_path, unavailable
from kafka_util import create_topic, produce
from service_util import wait_for

pytestmark = pytest.mark.timeout(420)

DOCS = Path(__file__).resolve().parents[2] / "docs"
USER, PASSWORD = "ops", "console-browser-pw-41d"


def _flow(name_src: str, src, name_dst: str, dst, topic: str) -> dict[str, str]:
    return {"source.connector.class": "kafka", "source.bootstrap.servers": src.bootstrap, "source.topics": topic,
            "source.start.position": "earliest", "source.cluster.alias": name_src,
            "sink.connector.class": "kafka", "sink.bootstrap.servers": dst.bootstrap, "sink.cluster.alias": name_dst,
            "epoch.max.ms": "1000"}


def _keep_producing(clusters: dict, topic: str, stop: threading.Event) -> None:
    """A trickle of new records in every cluster, so the flows have rates to show."""
    first = 10_000
    while not stop.is_set():
        for i, broker in enumerate(clusters.values()):
            produce(broker.bootstrap, topic, 50, 2, start=first + i * 1_000_000, headers=False)
        first += 50
        stop.wait(1.0)


def test_console_shows_the_mesh_and_pauses_and_resumes_a_flow_from_the_browser(worker_factory, kafka_pair,
                                                                                 third_kafka, tmp_path):
    chromium = chromium_path()
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        unavailable("playwright is not installed: pip install -e '.[test]'")
    a, b = kafka_pair
    clusters = {"A": a, "B": b, "C": third_kafka}
    topic = f"orders.{os.getpid()}.{int(time.time()) % 100000}"
    for broker in clusters.values():
        create_topic(broker.bootstrap, topic, 2)
    for i, broker in enumerate(clusters.values()):
        produce(broker.bootstrap, topic, 2000, 2, start=i * 1_000_000, headers=False)
    w, _ = worker_factory(**{"rest.auth.user": USER, "rest.auth.password": PASSWORD})
    url = f"http://127.0.0.1:{w.port}"
    api = httpx.Client(base_url=url, auth=(USER, PASSWORD), timeout=30)
    names = []
    for s, d in permutations(clusters, 2):
        name = f"{s.lower()}-to-{d.lower()}"
        names.append(name)
        assert api.post("/connectors", json={"name": name, "config": _flow(s, clusters[s], d, clusters[d], topic)}
                        ).status_code == 201

    def all_running() -> bool:
        for name in names:
            st = api.get(f"/connectors/{name}/status").json()
            if st["connector"]["state"] != "RUNNING" or not st["tasks"] or any(t["state"] != "RUNNING" for t in st["tasks"]):
                return False
        return True

    wait_for(all_running, 120, "six flows RUNNING")
    stop = threading.Event()
    producer = threading.Thread(target=_keep_producing, args=(clusters, topic, stop), daemon=True)
    producer.start()
    shots = tmp_path / "shots"
    shots.mkdir()
    target = "a-to-b"
    flow = f'g.flow[data-flow="{target}"]'
    dialogs: list[str] = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, headless=True)
            context = browser.new_context(http_credentials={"username": USER, "password": PASSWORD},
                                          viewport={"width": 1280, "height": 900})
            page = context.new_page()
            answer = {"accept": True}

            def on_dialog(dialog) -> None:
                dialogs.append(dialog.message)
                dialog.accept() if answer["accept"] else dialog.dismiss()

            page.on("dialog", on_dialog)
            polls: list[float] = []
            page.on("request", lambda r: polls.append(time.monotonic()) if r.url.endswith("/console/summary") else None)
            page.goto(f"{url}/ui")
            expect(page.locator("body")).to_have_attribute("data-loaded", "true", timeout=30_000)
            expect(page.locator("#login")).to_be_hidden()  # basic credentials: the browser's, no token asked
            expect(page.locator("g.cluster")).to_have_count(3)
            expect(page.locator("g.flow")).to_have_count(6)
            assert sorted(page.locator("g.cluster").evaluate_all("els => els.map(e => e.dataset.cluster)")) == ["A", "B", "C"]
            expect(page.locator("#worker-generation")).to_have_text("1")
            expect(page.locator("#worker-hosts")).to_contain_text("pairs")  # shared hosts and their pairs
            # every arrow labelled with its rate once the history has samples
            page.wait_for_function("() => [...document.querySelectorAll('g.flow text.figures')]"
                                   ".every(t => !t.textContent.startsWith('-'))", timeout=30_000)
            page.screenshot(path=str(shots / "console-topology.png"), full_page=True)
            window = time.monotonic()
            page.wait_for_timeout(6_000)  # live: one summary request (for all six flows) at least every 2 s
            seen = [t for t in polls if t >= window]
            assert len(seen) >= 3 and max(b - a for a, b in zip(seen, seen[1:], strict=False)) <= 2.5, seen

            page.locator(flow).dispatch_event("click")  # the arrow opens its link page
            expect(page.locator("#state")).to_have_attribute("data-state", "RUNNING", timeout=15_000)
            answer["accept"] = False  # a dismissed confirmation sends nothing
            page.locator("#stop").click()
            time.sleep(3)
            assert dialogs and dialogs[-1].startswith("Stop a-to-b")
            assert api.get(f"/connectors/{target}/status").json()["connector"]["state"] == "RUNNING"

            answer["accept"] = True
            page.locator("#pause").click()
            assert dialogs[-1] == f"Pause {target}?"
            expect(page.locator("#state")).to_have_attribute("data-state", "PAUSED", timeout=30_000)
            assert api.get(f"/connectors/{target}/status").json()["connector"]["state"] == "PAUSED"
            page.wait_for_function("() => document.querySelectorAll('#chart-rates polyline').length > 0",
                                   timeout=30_000)
            expect(page.locator("#tasks tbody tr[data-task]")).to_have_count(1)
            page.screenshot(path=str(shots / "console-link.png"), full_page=True)

            page.locator("#back").click()
            expect(page.locator(flow)).to_have_attribute("data-health", "paused", timeout=15_000)
            others = page.locator("g.flow").evaluate_all("els => els.map(e => [e.dataset.flow, e.dataset.health])")
            assert [n for n, h in others if h == "paused"] == [target], others

            page.locator(flow).dispatch_event("click")
            page.locator("#resume").click()
            expect(page.locator("#state")).to_have_attribute("data-state", "RUNNING", timeout=30_000)
            assert api.get(f"/connectors/{target}/status").json()["connector"]["state"] == "RUNNING"
            page.locator("#back").click()
            expect(page.locator(flow)).not_to_have_attribute("data-health", "paused", timeout=15_000)

            # an action the API refuses: the page shows the API's own text
            page.locator(flow).dispatch_event("click")
            expect(page.locator("#state")).to_have_attribute("data-state", "RUNNING", timeout=15_000)
            assert api.delete(f"/connectors/{target}").status_code == 204
            page.locator("#pause").click()
            expect(page.locator("#error")).to_contain_text(f"Pause {target} refused: Connector {target} not found")
            browser.close()
    finally:
        stop.set()
        producer.join(30)
    for shot in ("console-topology.png", "console-link.png"):
        data = (shots / shot).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 10_000, shot
        if os.environ.get("UPDATE_SCREENSHOTS") == "1":
            DOCS.mkdir(exist_ok=True)
            shutil.copyfile(shots / shot, DOCS / shot)


def test_with_only_a_token_the_page_asks_for_it_and_then_shows_the_worker(worker_factory):
    chromium = chromium_path()
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        unavailable("playwright is not installed: pip install -e '.[test]'")
    token = "console-browser-token-5e0b"
    w, _ = worker_factory(**{"rest.auth.token": token})
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True)
        page = browser.new_page()
        page.goto(f"http://127.0.0.1:{w.port}/ui")
        expect(page.locator("#login")).to_be_visible(timeout=15_000)  # the API answered 401 with a Bearer challenge
        assert page.locator("body").get_attribute("data-loaded") is None
        page.locator("#token").fill("not-the-token")
        page.locator("#login button").click()
        expect(page.locator("#login")).to_be_visible(timeout=15_000)
        page.locator("#token").fill(token)
        page.locator("#login button").click()
        expect(page.locator("body")).to_have_attribute("data-loaded", "true", timeout=15_000)
        expect(page.locator("#login")).to_be_hidden()
        expect(page.locator("#worker-generation")).to_have_text("1")
        assert page.evaluate("sessionStorage.getItem('connect-token')") == token
        browser.close()
