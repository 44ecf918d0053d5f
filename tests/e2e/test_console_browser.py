"""The console in a real browser: headless Chromium (Debian's package, ``tests/browser_util.py``)
driven by Playwright, against a worker running a full mesh of three tansu clusters (six flows
naming their clusters by alias), two more flows from A to B naming both only by address (one by
another name of A's broker, ``localhost``: only A's cluster id says it is A), and a paused flow
from C to a fourth cluster nobody gave an alias - with basic authentication on.

The topology shows one node per cluster (4, not 7) and 9 arrows; the labels of the three parallel
flows A -> B do not overlap (nor any other two), each label is what the browser finds at its centre
(no arrow's hit area covers it: a click opens its flow), and a cluster named by its address has
that address whole inside its circle. A flow is paused from its link page (the confirmation
accepted): Pause is then disabled and Resume enabled, the state shows once, its arrow turns
``paused`` and the REST API reports PAUSED; a dismissed confirmation sends nothing; the link page
says durations in human units (no "95,671,020,726 ms") and shows no raw JSON (offsets and config
as tables); the flow is resumed from the page; an action the API refuses shows the API's text.
Screenshots of the topology and the link page are taken on the way (``UPDATE_SCREENSHOTS=1``
writes them to ``docs/``, where docs/operations.md shows them).
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

from worker.embedded import EmbeddedKafka

pytestmark = pytest.mark.timeout(420)

DOCS = Path(__file__).resolve().parents[2] / "docs"
USER, PASSWORD = "ops", "console-browser-pw-41d"


def _flow(name_src: str, src, name_dst: str, dst, topic: str) -> dict[str, str]:
    return {"source.connector.class": "kafka", "source.bootstrap.servers": src.bootstrap, "source.topics": topic,
            "source.start.position": "earliest", "source.cluster.alias": name_src,
            "sink.connector.class": "kafka", "sink.bootstrap.servers": dst.bootstrap, "sink.cluster.alias": name_dst,
            "epoch.max.ms": "1000"}


def _by_address(src: str, dst: str, topic: str) -> dict[str, str]:
    """A flow naming both clusters only by address."""
    return {"source.connector.class": "kafka", "source.bootstrap.servers": src, "source.topics": topic,
            "source.start.position": "earliest", "sink.connector.class": "kafka", "sink.bootstrap.servers": dst,
            "epoch.max.ms": "1000"}


# Geometry checked in the page: label boxes that intersect, labels another element covers at their
# centre (or at four points around it), cluster names wider or taller than their circle.
_OVERLAPPING_LABELS = """() => {
  const boxes = [...document.querySelectorAll('g.flow-label')].map(g => [g.dataset.flow, g.getBoundingClientRect()]);
  const out = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const [n, p] = boxes[i], [m, q] = boxes[j];
    if (p.left < q.right && q.left < p.right && p.top < q.bottom && q.top < p.bottom) out.push([n, m]);
  }
  return out;
}"""
_COVERED_LABELS = """() => [...document.querySelectorAll('g.flow-label')].flatMap(g => {
  const r = g.getBoundingClientRect();
  return [[0.5, 0.5], [0.2, 0.3], [0.8, 0.3], [0.2, 0.7], [0.8, 0.7]].flatMap(([fx, fy]) => {
    const hit = document.elementFromPoint(r.left + r.width * fx, r.top + r.height * fy);
    const owner = hit && hit.closest('g.flow-label');
    return owner === g ? [] : [[g.dataset.flow, fx, fy, hit ? hit.outerHTML.slice(0, 80) : null]];
  });
})"""
_CUT_CLUSTER_NAMES = """() => [...document.querySelectorAll('g.cluster')].flatMap(g => {
  const c = g.querySelector('circle').getBoundingClientRect(), t = g.querySelector('text.name').getBoundingClientRect();
  const inside = t.left >= c.left && t.right <= c.right && t.top >= c.top && t.bottom <= c.bottom;
  return inside ? [] : [[g.dataset.cluster, g.querySelector('text.name').textContent]];
})"""
# a duration in human units, and the raw milliseconds the page used to print for record ages
_HUMAN = r"^\d[\d,.]* (ms|s|min|h|d)$"
_RAW_MS = r"\d{1,3}(,\d{3}){2,} ms"


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
    import re

    a, b = kafka_pair
    clusters = {"A": a, "B": b, "C": third_kafka}
    topic = f"orders.{os.getpid()}.{int(time.time()) % 100000}"
    for broker in clusters.values():
        create_topic(broker.bootstrap, topic, 2)
    for i, broker in enumerate(clusters.values()):
        produce(broker.bootstrap, topic, 2000, 2, start=i * 1_000_000, headers=False)
    side_topics = {"mirror-payments": f"payments.{topic}", "mirror-audit": f"audit.{topic}"}
    for extra in side_topics.values():
        create_topic(a.bootstrap, extra, 2)
        produce(a.bootstrap, extra, 500, 2, headers=False)
    archive = EmbeddedKafka(log_path=tmp_path / "archive.log").start()  # a fourth cluster, named by address only
    w, _ = worker_factory(**{"rest.auth.user": USER, "rest.auth.password": PASSWORD})
    url = f"http://127.0.0.1:{w.port}"
    api = httpx.Client(base_url=url, auth=(USER, PASSWORD), timeout=30)
    names = []
    for s, d in permutations(clusters, 2):
        name = f"{s.lower()}-to-{d.lower()}"
        names.append(name)
        assert api.post("/connectors", json={"name": name, "config": _flow(s, clusters[s], d, clusters[d], topic)}
                        ).status_code == 201
    # three parallel flows A -> B: a-to-b by alias, these two by address only (A once as localhost)
    a_by_other_name = a.bootstrap.replace("127.0.0.1", "localhost")
    for name, extra in side_topics.items():
        source = a_by_other_name if name == "mirror-payments" else a.bootstrap
        assert api.post("/connectors", json={"name": name, "config": _by_address(source, b.bootstrap, extra)}
                        ).status_code == 201
        names.append(name)
    assert api.post("/connectors", json={"name": "c-to-archive", "initial_state": "PAUSED", "config": {
        **_by_address(third_kafka.bootstrap, archive.bootstrap, topic)}}).status_code == 201

    def all_running() -> bool:
        for name in names:
            st = api.get(f"/connectors/{name}/status").json()
            if st["connector"]["state"] != "RUNNING" or not st["tasks"] or any(t["state"] != "RUNNING" for t in st["tasks"]):
                return False
        return True

    wait_for(all_running, 180, "eight flows RUNNING")
    stop = threading.Event()
    producer = threading.Thread(target=_keep_producing, args=(clusters, topic, stop), daemon=True)
    producer.start()
    shots = tmp_path / "shots"
    shots.mkdir()
    target = "a-to-b"
    flow = f'g.flow[data-flow="{target}"]'
    label = f'g.flow-label[data-flow="{target}"]'
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
            expect(page.locator("g.flow")).to_have_count(9)
            # one node per cluster: A, B and C by alias, whatever name each connector gave them
            expect(page.locator("g.cluster")).to_have_count(4)
            assert sorted(page.locator("g.cluster").evaluate_all("els => els.map(e => e.dataset.cluster)")) == \
                sorted(["A", "B", "C", archive.bootstrap])
            summary = api.get("/console/summary").json()
            ends = {f["name"]: (f["source"], f["target"]) for f in summary["flows"]}
            assert ends["mirror-payments"] == ends["mirror-audit"] == ends[target] == ("A", "B"), ends
            assert ends["c-to-archive"] == ("C", archive.bootstrap), ends
            expect(page.locator("#worker-generation")).to_have_text("1")
            # shared hosts and their pairs, in words
            expect(page.locator("#worker-hosts")).to_contain_text(re.compile(r"\d+ Python hosts?; task pairs per host: \d"))
            # every arrow labelled with its rate once the history has samples
            page.wait_for_function("() => [...document.querySelectorAll('g.flow-label text.figures')]"
                                   ".every(t => !t.textContent.startsWith('-'))", timeout=30_000)
            expect(page.locator("g.flow-label")).to_have_count(9)  # one label per flow, checked below
            assert page.evaluate(_OVERLAPPING_LABELS) == []
            assert page.evaluate(_COVERED_LABELS) == []
            assert page.evaluate(_CUT_CLUSTER_NAMES) == []
            page.screenshot(path=str(shots / "console-topology.png"), full_page=True)
            window = time.monotonic()
            page.wait_for_timeout(6_000)  # live: one summary request (for all nine flows) at least every 2 s
            seen = [t for t in polls if t >= window]
            assert len(seen) >= 3 and max(b - a for a, b in zip(seen, seen[1:], strict=False)) <= 2.5, seen
            assert page.evaluate(_OVERLAPPING_LABELS) == [] and page.evaluate(_COVERED_LABELS) == []  # redrawn alike

            page.locator('g.flow-label[data-flow="mirror-audit"]').click()  # a real click on a label
            expect(page.locator("#title")).to_contain_text("mirror-audit", timeout=15_000)
            expect(page.locator("#state")).to_have_attribute("data-state", "RUNNING", timeout=15_000)
            page.locator("#back").click()
            page.locator(label).click()  # the label opens its link page
            expect(page.locator("#state")).to_have_attribute("data-state", "RUNNING", timeout=15_000)
            expect(page.locator("#pause")).to_be_enabled()
            expect(page.locator("#resume")).to_be_disabled()  # only what applies to RUNNING
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
            expect(page.locator("#pause")).to_be_disabled()
            expect(page.locator("#resume")).to_be_enabled()
            assert page.locator("#title").inner_text().count("PAUSED") == 1  # the state shows once
            page.wait_for_function("() => document.querySelectorAll('#chart-rates polyline').length > 0",
                                   timeout=30_000)
            expect(page.locator("#tasks tbody tr[data-task]")).to_have_count(1)
            expect(page.locator("#delivery")).to_have_text("at-least-once")  # exactly.once.support's mode
            expect(page.locator("#tasks tbody tr[data-task] td.delivery")).to_have_text("at-least-once")
            # human units: the records' age (their timestamps are from 2023) is not printed as latency in ms
            expect(page.locator("#record-age")).to_contain_text(re.compile(r"^\d[\d,.]* d\b"), timeout=30_000)
            view = page.locator("#view").text_content()
            assert not re.search(_RAW_MS, view), view
            expect(page.locator("#replication-latency")).to_contain_text("no heartbeat monitor in B")
            behind = page.locator("#partitions tbody tr td:nth-child(3)").all_inner_texts()
            assert behind and all(re.match(_HUMAN, t) or t == "-" for t in behind), behind
            # no raw JSON: committed offsets are numbers, the config a table of keys and values
            offsets = page.locator("#partitions tbody tr td:nth-child(4)").all_inner_texts()
            assert len(offsets) == 2 and all(re.match(r"^[\d,]+$", t) for t in offsets), offsets
            assert not re.search(r"[{\[]\s*[\"']", view), "raw JSON on the link page"
            assert page.locator("#config tbody tr").count() >= 8
            page.locator("#view details").evaluate("d => { d.open = true; }")  # the config table in the screenshot
            page.screenshot(path=str(shots / "console-link.png"), full_page=True)

            page.locator("#back").click()
            expect(page.locator(flow)).to_have_attribute("data-health", "paused", timeout=15_000)
            others = page.locator("g.flow").evaluate_all("els => els.map(e => [e.dataset.flow, e.dataset.health])")
            assert sorted(n for n, h in others if h == "paused") == ["a-to-b", "c-to-archive"], others

            page.locator(label).click()
            page.locator("#resume").click()
            expect(page.locator("#state")).to_have_attribute("data-state", "RUNNING", timeout=30_000)
            assert api.get(f"/connectors/{target}/status").json()["connector"]["state"] == "RUNNING"
            page.locator("#back").click()
            expect(page.locator(flow)).not_to_have_attribute("data-health", "paused", timeout=15_000)

            # an action the API refuses: the page shows the API's own text
            page.locator(label).click()
            expect(page.locator("#state")).to_have_attribute("data-state", "RUNNING", timeout=15_000)
            assert api.delete(f"/connectors/{target}").status_code == 204
            page.locator("#pause").click()
            expect(page.locator("#error")).to_contain_text(f"Pause {target} refused: Connector {target} not found")
            browser.close()
    finally:
        stop.set()
        producer.join(30)
        archive.stop()
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
