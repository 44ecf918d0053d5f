// connect-bridge operator console. Plain JS written for this project: no framework, no third-party
// code. It polls GET /console/summary (every connector in one request) or GET /console/connectors/NAME
// every 2 s, draws the topology as SVG (clusters on a circle, flows as curved arrows) and the link
// page's charts as SVG polylines, and sends the REST API's own pause/resume/restart/stop requests.
// Every text is set as a text node or textContent, never parsed as HTML: connector names and traces
// cannot inject markup.
"use strict";

const POLL_MS = 2000;
const SVG_NS = "http://www.w3.org/2000/svg";
const HEALTHS = ["running", "lagging", "stale", "failing", "paused", "stopped", "starting"];
const SEVERITY = { failing: 0, stale: 1, lagging: 2, starting: 3, paused: 4, stopped: 5, running: 6 };
const COLOURS = {
  running: "#2e9d4f", lagging: "#d98c00", failing: "#d93025", paused: "#80868b",
  stopped: "#3c4043", stale: "#9334e6", starting: "#1a73e8",
};

let timer = null;
let generation = 0; // bumped on every route change: answers of an older view are dropped
let filterText = "";

// -- helpers ---------------------------------------------------------------------------------
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function fmt(n, digits) {
  if (n === null || n === undefined || Number.isNaN(n)) return "-";
  return Number(n).toLocaleString("en-US", { maximumFractionDigits: digits === undefined ? 1 : digits });
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  let t = Math.floor(seconds);
  const d = Math.floor(t / 86400); t -= d * 86400;
  const hh = Math.floor(t / 3600); t -= hh * 3600;
  const mm = Math.floor(t / 60); const ss = t - mm * 60;
  const pad = (x) => String(x).padStart(2, "0");
  return (d ? `${d}d ` : "") + (d || hh ? `${hh}h ` : "") + `${pad(mm)}m ${pad(ss)}s`;
}

// a duration in the unit that reads best: 850 ms, 4.2 s, 3.5 min, 2.1 h, 1,107 d
function human(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "-";
  const a = Math.abs(seconds);
  if (a < 1) return `${fmt(seconds * 1000, 0)} ms`;
  if (a < 60) return `${fmt(seconds, 1)} s`;
  if (a < 3600) return `${fmt(seconds / 60, 1)} min`;
  if (a < 86400) return `${fmt(seconds / 3600, 1)} h`;
  return `${fmt(seconds / 86400, a < 10 * 86400 ? 1 : 0)} d`;
}

function short(text, max) {
  return text.length > max ? text.slice(0, max - 1) + "\u2026" : text;
}

function badge(health) {
  return h("span", { class: `badge ${health}`, "data-health": health }, health);
}

function showError(message) {
  const box = document.getElementById("error");
  box.textContent = message;
  box.hidden = !message;
}

// -- the REST API ----------------------------------------------------------------------------
function token() {
  return sessionStorage.getItem("connect-token");
}

async function api(method, path) {
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = `Bearer ${token()}`;
  let response;
  try {
    response = await fetch(path, { method, headers, credentials: "same-origin", cache: "no-store" });
  } catch (err) {
    return { ok: false, status: 0, message: `the worker cannot be reached (${err.message}); it may be restarting` };
  }
  let body = null;
  const text = await response.text();
  if (text) {
    try { body = JSON.parse(text); } catch (_) { body = null; }
  }
  // A Basic challenge is the browser's to answer (it asks for credentials); only a bearer token is ours.
  const challenge = response.headers.get("WWW-Authenticate") || "";
  if (response.status === 401 && !/^\s*basic/i.test(challenge)) document.getElementById("login").hidden = false;
  const message = body && body.message ? body.message : `${response.status} ${response.statusText}`;
  return { ok: response.ok, status: response.status, body, message };
}

// -- routing and polling -----------------------------------------------------------------------
function route() {
  const hash = location.hash || "#/";
  const m = hash.match(/^#\/connector\/(.+)$/);
  return m ? { view: "connector", name: decodeURIComponent(m[1]) } : { view: "topology" };
}

function start() {
  generation += 1;
  clearTimeout(timer);
  const view = document.getElementById("view");
  view.replaceChildren();
  const r = route();
  if (r.view === "connector") buildConnectorPage(view, r.name);
  else buildTopologyPage(view);
  tick(generation);
}

function refresh() { // poll now, in place of the poll that was due (one polling chain at a time)
  generation += 1;
  clearTimeout(timer);
  tick(generation);
}

async function tick(mine) {
  const began = Date.now();
  const r = route();
  const path = r.view === "connector" ? `/console/connectors/${encodeURIComponent(r.name)}` : "/console/summary";
  const answer = await api("GET", path);
  if (mine !== generation) return;
  if (answer.ok) {
    if (r.view === "connector") renderConnector(answer.body);
    else renderTopology(answer.body);
    renderWorker(answer.body.worker);
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.loaded = "true";
  } else if (answer.status !== 401) {
    document.getElementById("updated").textContent = `not updated: ${answer.message}`;
  }
  // the next poll POLL_MS after this one began: an update at least every 2 s, however long the answer took
  timer = setTimeout(() => tick(mine), Math.max(200, POLL_MS - (Date.now() - began)));
}

function renderWorker(w) {
  const el = document.getElementById("worker");
  el.replaceChildren(
    "worker ", h("b", { id: "worker-id" }, w.worker_id),
    " \u00b7 generation ", h("b", { id: "worker-generation" }, w.generation === undefined ? "-" : w.generation),
    " \u00b7 up ", h("b", { id: "worker-uptime" }, duration(w.uptime_s)),
    w.version ? ` \u00b7 v${w.version}` : "",
    ...(w.hosts && w.hosts.length ? [" \u00b7 ", h("span", { id: "worker-hosts",
      title: w.hosts.map((x) => `${x.host}: ${x.pairs} task pair${x.pairs === 1 ? "" : "s"}, using ${fmt(x.load_cores, 2)} cores`).join("\n") },
      h("b", {}, `${w.hosts.length} Python host${w.hosts.length === 1 ? "" : "s"}`),
      `; task pairs per host: ${w.hosts.map((x) => x.pairs).join(", ")}`)] : []),
    ...(w.slot_waits_s && Object.keys(w.slot_waits_s).length ? [" \u00b7 ", h("b", { id: "worker-slot-waits",
      class: "warn", title: Object.entries(w.slot_waits_s).map(([n, s]) => `${n}: ${fmt(s)} s`).join("\n") },
      `${Object.keys(w.slot_waits_s).length} waiting for a task slot`)] : []));
}

// -- topology ----------------------------------------------------------------------------------
function buildTopologyPage(view) {
  const legend = h("div", { class: "legend" },
    HEALTHS.map((k) => h("span", {}, h("i", { class: k }), k))); // colours by class: the CSP allows no inline style
  view.append(
    h("h2", {}, "Topology"),
    h("div", { class: "panel" }, s("svg", { id: "topology", class: "topology", viewBox: "0 0 960 680",
                                              role: "img", "aria-label": "clusters and replication flows" }), legend),
    h("input", { class: "filter", id: "filter", placeholder: "filter flows by name or cluster", value: filterText,
                 oninput: (e) => { filterText = e.target.value; renderFlowTable(lastSummary); } }),
    h("table", { id: "flows" }));
}

let lastSummary = null;

function renderTopology(summary) {
  lastSummary = summary;
  drawTopology(document.getElementById("topology"), summary);
  renderFlowTable(summary);
}

function markers() {
  return s("defs", {}, HEALTHS.map((k) => s("marker", {
    id: `arrow-${k}`, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse",
  }, s("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: COLOURS[k] }))));
}

function flowLabel(f) {
  const lag = f.lag ? fmt(f.lag.records, 0) : "?";
  const rate = f.records_per_second;
  const rateText = `${fmt(rate, rate !== null && rate >= 100 ? 0 : 1)} rec/s`;
  if (f.draining) return `${f.state.toLowerCase()}, draining \u00b7 ${rateText}`;
  if (f.state === "PAUSED" || f.state === "STOPPED") return `${f.state.toLowerCase()} \u00b7 lag ${lag}`;
  return `${rateText} \u00b7 lag ${lag}`;
}

// Lines of a cluster's label that fit a circle: an address list breaks after its commas and semicolons.
function nodeLines(label) {
  return label.split(/(?<=[,;])\s*|\s+\/\s+/).filter((x) => x);
}

function boxOf(el) {
  const b = el.getBBox();
  return { x: b.x, y: b.y, w: b.width, h: b.height };
}

function overlaps(p, q, pad) {
  return p.x < q.x + q.w + pad && q.x < p.x + p.w + pad && p.y < q.y + q.h + pad && q.y < p.y + p.h + pad;
}

function drawTopology(svg, summary) {
  const W = 960, H = 680, cx = W / 2, cy = H / 2, R = H / 2 - 110, MIN_R = 38, MAX_R = 84;
  const clusters = summary.clusters;
  const at = {};
  clusters.forEach((c, i) => {
    const n = clusters.length;
    const angle = -Math.PI / 2 + (2 * Math.PI * i) / n;
    at[c.id] = n === 1 ? { x: cx, y: cy } : { x: cx + R * Math.cos(angle), y: cy + R * Math.sin(angle) };
  });
  // three layers: arrows at the bottom, clusters over them, flow labels on top (no arrow's hit area
  // covers a label, so every label can be clicked)
  const arrows = s("g", { class: "arrows" }), nodes = s("g", { class: "nodes" }), labels = s("g", { class: "labels" });
  svg.replaceChildren(markers(), arrows, nodes, labels);

  // clusters: the whole label inside the circle (the circle grows, the type shrinks past MAX_R)
  const obstacles = [];
  for (const c of clusters) {
    const p = at[c.id];
    const lines = nodeLines(c.label || c.id);
    const text = s("text", { class: "name", x: p.x, y: p.y },
      lines.map((line, i) => s("tspan", { x: p.x, dy: i === 0 ? 0 : "1.2em" }, line)));
    const circle = s("circle", { cx: p.x, cy: p.y, r: MIN_R });
    const aliasLabelled = c.aliases && c.aliases.length;
    const caption = [c.kinds.join(", "), aliasLabelled ? c.addresses.join(", ") : ""].filter((x) => x).join(" \u00b7 ");
    const g = s("g", { class: "cluster", "data-cluster": c.id },
      s("title", {}, [`${c.label || c.id}`, c.kinds.length ? `type: ${c.kinds.join(", ")}` : "",
        c.addresses && c.addresses.length ? `addresses: ${c.addresses.join(", ")}` : "",
        c.cluster_id ? `cluster id: ${c.cluster_id}` : ""].filter((x) => x).join("\n")),
      circle, text);
    nodes.append(g);
    let box = boxOf(text);
    let r = Math.max(MIN_R, Math.hypot(box.w / 2, box.h / 2) + 8);
    if (r > MAX_R) { // too long even for the largest circle: smaller type, all of it still inside
      text.style.fontSize = `${(13 * (MAX_R - 8) / (r - 8)).toFixed(2)}px`; // CSSOM: allowed by the CSP
      r = MAX_R;
    }
    circle.setAttribute("r", String(r));
    box = boxOf(text); // centred vertically on the node
    text.setAttribute("y", String(p.y - (box.y + box.h / 2 - p.y)));
    for (const t of text.querySelectorAll("tspan")) t.setAttribute("x", String(p.x));
    p.r = r;
    obstacles.push({ x: p.x - r, y: p.y - r, w: 2 * r, h: 2 * r });
    if (caption) {
      const cap = s("text", { class: "kind", x: p.x, y: p.y + r + 14 }, caption);
      g.append(cap);
      obstacles.push(boxOf(cap));
    }
  }

  const seen = {}; // "a->b" -> flows drawn so far, for the curve's offset
  const placed = [];
  for (const f of summary.flows) {
    const a = at[f.source], b = at[f.target];
    if (!a || !b) continue;
    const key = `${f.source}\u0000${f.target}`;
    const k = seen[key] = (seen[key] || 0) + 1;
    const colour = COLOURS[f.health] || COLOURS.running;
    let d, lx, ly, nx, ny;
    if (f.source === f.target) { // a loop outside the circle of clusters
      const ox = a.x - cx, oy = a.y - cy, len = Math.hypot(ox, oy) || 1;
      const ux = ox / len || 0, uy = len === 1 ? -1 : oy / len, px = -uy, py = ux, reach = 55 + 22 * k;
      const s0 = { x: a.x + a.r * (ux + px * 0.6), y: a.y + a.r * (uy + py * 0.6) };
      const s1 = { x: a.x + a.r * (ux - px * 0.6), y: a.y + a.r * (uy - py * 0.6) };
      d = `M ${s0.x} ${s0.y} C ${s0.x + ux * reach + px * reach * 0.6} ${s0.y + uy * reach + py * reach * 0.6} ` +
          `${s1.x + ux * reach - px * reach * 0.6} ${s1.y + uy * reach - py * reach * 0.6} ${s1.x} ${s1.y}`;
      lx = a.x + ux * (a.r + reach * 0.8); ly = a.y + uy * (a.r + reach * 0.8); nx = ux; ny = uy;
    } else {
      const dx = b.x - a.x, dy = b.y - a.y, len = Math.hypot(dx, dy);
      const px = -dy / len, py = dx / len, bend = 48 * k;
      const c = { x: (a.x + b.x) / 2 + px * bend, y: (a.y + b.y) / 2 + py * bend };
      const unit = (from, to) => { const l = Math.hypot(to.x - from.x, to.y - from.y); return { x: (to.x - from.x) / l, y: (to.y - from.y) / l }; };
      const u0 = unit(a, c), u2 = unit(b, c);
      const p0 = { x: a.x + u0.x * a.r, y: a.y + u0.y * a.r };
      const p2 = { x: b.x + u2.x * (b.r + 3), y: b.y + u2.y * (b.r + 3) };
      d = `M ${p0.x} ${p0.y} Q ${c.x} ${c.y} ${p2.x} ${p2.y}`;
      // the label at the curve's middle, on its outer side: the two directions of a link part
      lx = 0.25 * p0.x + 0.5 * c.x + 0.25 * p2.x; ly = 0.25 * p0.y + 0.5 * c.y + 0.25 * p2.y; nx = px; ny = py;
    }
    const open = () => { location.hash = `#/connector/${encodeURIComponent(f.name)}`; };
    const title = `${f.name}: ${f.source} \u2192 ${f.target}, ${f.state}${f.draining ? " (draining its last epoch)" : ""} (${f.health})`;
    const flow = s("g", { class: "flow", "data-flow": f.name, "data-health": f.health, "data-state": f.state, onclick: open },
      s("title", {}, title),
      s("path", { class: "hit", d }),
      s("path", { class: "line", d, stroke: colour, "marker-end": `url(#arrow-${f.health in COLOURS ? f.health : "running"})` }));
    arrows.append(flow);

    // the label: placed where it overlaps no other label and no cluster, as near its curve as can be
    const bg = s("rect", { class: "bg", rx: 3 });
    const label = s("g", { class: "flow-label", "data-flow": f.name, "data-health": f.health, onclick: open },
      s("title", {}, title), bg,
      s("text", { x: 0, y: -3 }, short(f.name, 32)),
      s("text", { x: 0, y: 10, class: "figures" }, flowLabel(f)));
    labels.append(label);
    const own = boxOf(label);
    const pad = 3;
    bg.setAttribute("x", String(own.x - pad)); bg.setAttribute("y", String(own.y - pad + 1));
    bg.setAttribute("width", String(own.w + 2 * pad)); bg.setAttribute("height", String(own.h + 2 * pad - 2));
    const w = own.w + 2 * pad, hgt = own.h + 2 * pad;
    const boxAt = (x, y) => ({ x: x - w / 2, y: y - hgt / 2, w, h: hgt });
    const free = (q) => q.x >= 0 && q.y >= 0 && q.x + q.w <= W && q.y + q.h <= H &&
      !placed.some((o) => overlaps(q, o, 2)) && !obstacles.some((o) => overlaps(q, o, 2));
    const base = { x: lx + nx * (hgt / 2 + 4), y: ly + ny * (hgt / 2 + 4) };
    let best = null;
    for (let step = 0; step <= 60 && !best; step++) {
      const dist = 6 * step;
      const tries = step === 0 ? [[0, 0]] : [[nx, ny], [0, 1], [0, -1], [-nx, -ny], [1, 0], [-1, 0]];
      for (const [ux, uy] of tries) {
        const q = boxAt(base.x + ux * dist, base.y + uy * dist);
        if (free(q)) { best = q; break; }
      }
    }
    if (!best) best = boxAt(base.x, base.y); // nowhere free: where it belongs
    placed.push(best);
    const mx = best.x + w / 2, my = best.y + hgt / 2;
    label.setAttribute("transform", `translate(${mx - (own.x + own.w / 2)} ${my - (own.y + own.h / 2)})`);
    if (Math.hypot(mx - lx, my - ly) > hgt) { // moved away: a thin leader back to its arrow
      flow.append(s("line", { class: "leader", x1: lx, y1: ly, x2: Math.min(Math.max(lx, best.x), best.x + w),
        y2: Math.min(Math.max(ly, best.y), best.y + hgt), stroke: colour }));
    }
  }
}

function renderFlowTable(summary) {
  const table = document.getElementById("flows");
  if (!table || !summary) return;
  const want = filterText.trim().toLowerCase();
  const flows = summary.flows
    .filter((f) => !want || [f.name, f.source, f.target].some((x) => x.toLowerCase().includes(want)))
    .sort((x, y) => (SEVERITY[x.health] ?? 9) - (SEVERITY[y.health] ?? 9) || x.name.localeCompare(y.name));
  const head = h("tr", {}, h("th", {}, "flow"), h("th", {}, "source \u2192 target"), h("th", {}, "state"),
    h("th", {}, "health"), h("th", { class: "num" }, "tasks"), h("th", { class: "num" }, "records/s"),
    h("th", { class: "num" }, "acked/s"), h("th", { class: "num" }, "lag"), h("th", { class: "num" }, "errors"),
    h("th", { class: "num" }, "DLQ"));
  const rows = flows.map((f) => h("tr", { class: "link", "data-flow": f.name,
    onclick: () => { location.hash = `#/connector/${encodeURIComponent(f.name)}`; } },
    h("td", {}, f.name), h("td", {}, `${f.source} \u2192 ${f.target}`),
    h("td", {}, f.slot_wait_s ? `${f.state} (waits ${human(f.slot_wait_s)} for a slot)` : f.draining ? `${f.state} (draining its last epoch)` : f.state),
    h("td", {}, badge(f.health)),
    h("td", { class: "num" }, `${f.tasks.running}/${f.tasks.total}`), h("td", { class: "num" }, fmt(f.records_per_second)),
    h("td", { class: "num" }, fmt(f.acknowledged_per_second)),
    h("td", { class: "num" }, f.lag ? `${fmt(f.lag.records, 0)} (${human(f.lag.seconds)})` : "?"),
    h("td", { class: "num" }, fmt(f.errors, 0)), h("td", { class: "num" }, fmt(f.dead_lettered, 0))));
  table.replaceChildren(h("thead", {}, head), h("tbody", {}, rows));
  const counted = document.getElementById("filter");
  if (counted) counted.title = `${flows.length} of ${summary.flows.length} flows`;
}

// -- the link (connector) page -------------------------------------------------------------------
async function act(label, method, path) {
  if (!window.confirm(`${label}?`)) return;
  const answer = await api(method, path);
  if (answer.ok) {
    showError("");
    refresh();
  } else {
    showError(`${label} refused: ${answer.message}`);
  }
}

function buildConnectorPage(view, name) {
  const base = `/connectors/${encodeURIComponent(name)}`;
  view.append(
    h("p", {}, h("a", { id: "back", href: "#/" }, "\u2190 topology")),
    h("h2", { id: "title" }, name),
    h("div", { class: "actions" },
      h("button", { id: "pause", disabled: true, onclick: () => act(`Pause ${name}`, "PUT", `${base}/pause`) }, "Pause"),
      h("button", { id: "resume", disabled: true, onclick: () => act(`Resume ${name}`, "PUT", `${base}/resume`) }, "Resume"),
      h("button", { id: "restart", disabled: true, onclick: () => act(`Restart ${name} and its tasks`, "POST", `${base}/restart?includeTasks=true`) }, "Restart"),
      h("button", { id: "stop", class: "danger", disabled: true, onclick: () => act(`Stop ${name} (its task pairs shut down)`, "PUT", `${base}/stop`) }, "Stop")),
    h("div", { id: "overview", class: "panel kv" }),
    h("h3", {}, "Tasks"), h("table", { id: "tasks" }),
    h("h3", {}, "Last 15 minutes"),
    h("div", { class: "charts" }, h("div", { class: "panel", id: "chart-rates" }), h("div", { class: "panel", id: "chart-lag" })),
    h("h3", {}, "Lag and committed offsets per partition"), h("table", { id: "partitions" }),
    h("h3", {}, "Heartbeats seen by this connector (last 15 minutes)"), h("div", { id: "heartbeat" }),
    h("h3", {}, "Checkpoints"), h("div", { id: "checkpoints" }),
    h("h3", {}, "Failures and dead letters"), h("div", { id: "failures" }),
    h("h3", {}, "Config (secrets masked)"), h("details", {}, h("summary", {}, "show"), h("table", { id: "config", class: "config" })));
}

function kv(pairs) {
  return pairs.flatMap(([k, v]) => [h("span", { class: "muted" }, k), h("span", {}, v)]);
}

// The one place the state shows: the state, and the health where it says more (RUNNING - lagging).
function stateText(state, health, drain) {
  const parts = [state];
  if (health && health !== state.toLowerCase() && !(health === "running" && state === "RUNNING")) parts.push(health);
  if (drain) parts.push("draining its last epoch");
  return parts.join(" \u00b7 ");
}

function latencyText(lat) {
  if (!lat) return null;
  return `p50 ${human(lat.p50_ms / 1000)}, p99 ${human(lat.p99_ms / 1000)} (${fmt(lat.heartbeats, 0)} heartbeats from ${lat.origin}, seen by ${lat.monitor})`;
}

function renderConnector(doc) {
  const st = doc.status.connector;
  document.getElementById("title").replaceChildren(`${doc.name} `,
    h("span", { id: "state", "data-state": st.state, "data-health": doc.health, class: `badge ${doc.health}` },
      stateText(st.state, doc.health, doc.draining)));
  for (const [id, allowed] of Object.entries(doc.actions || {})) {
    const button = document.getElementById(id);
    if (button) {
      button.disabled = !allowed;
      button.title = allowed ? "" : `not while ${st.state}`;
    }
  }
  const rate = doc.draining ? `${fmt(doc.records_per_second)} (draining its last epoch after ${st.state === "PAUSED" ? "the pause" : "the stop"})`
    : fmt(doc.records_per_second);
  document.getElementById("overview").replaceChildren(...kv([
    ["flow", `${doc.source} (${doc.source_kind}) \u2192 ${doc.target} (${doc.target_kind})`],
    ["delivery", h("span", { id: "delivery" }, deliveryText(st.tasks))],
    ["records/s", rate], ["acknowledged/s", fmt(doc.acknowledged_per_second)],
    ["lag", st.lag ? `${fmt(st.lag.records, 0)} records, ${human(st.lag.seconds)} behind` : "unknown"],
    ["records moved / acknowledged / committed", `${fmt(doc.counts.records, 0)} / ${fmt(doc.counts.acknowledged, 0)} / ${fmt(doc.counts.committed, 0)}`],
    ["replication latency", h("span", { id: "replication-latency" }, latencyText(doc.replication_latency) ||
      `unknown: no heartbeat monitor in ${doc.target} reports heartbeats from ${doc.source}`)],
    ["record age when written (oldest, last epochs)", h("span", { id: "record-age" },
      doc.record_age ? human(doc.record_age.max_s) : "-",
      doc.record_age && doc.record_age.seen_s_ago > 2 * POLL_MS / 1000 ? ` (seen ${human(doc.record_age.seen_s_ago)} ago)` : "",
      h("span", { class: "muted" }, " \u2014 now minus the record's timestamp: includes the time it waited before it was read (a backlog, old timestamps)"))],
    ...(st.waiting ? [["waiting", st.waiting]] : []),
    ...(st.slot_wait_s ? [["waiting for a task slot", `${human(st.slot_wait_s)} (worker.task.slots)`]] : []),
    ...(st.trace ? [["connector trace", h("pre", {}, st.trace)]] : []),
  ]));
  renderTasks(doc);
  drawChart(document.getElementById("chart-rates"), "records/s and acknowledged/s", doc.chart.ago_s, [
    { name: "records/s", colour: "#1a73e8", values: doc.chart.records_per_second },
    { name: "acknowledged/s", colour: "#2e9d4f", values: doc.chart.acknowledged_per_second }]);
  drawChart(document.getElementById("chart-lag"), "lag (records)", doc.chart.ago_s, [
    { name: "lag", colour: "#d98c00", values: doc.chart.lag }]);
  renderPartitions(doc.partitions);
  renderHeartbeat(doc.heartbeat);
  const cps = Object.entries(doc.checkpoints);
  document.getElementById("checkpoints").replaceChildren(cps.length
    ? h("div", { class: "panel kv" }, kv(cps.map(([k, v]) => [k, fmt(v, 0)])))
    : h("p", { class: "muted" }, "no checkpoint counters (not a checkpoint connector)"));
  renderFailures(doc);
  renderConfig(doc.config);
}

function renderConfig(config) {
  const rows = Object.keys(config).sort().map((k) => h("tr", {}, h("td", { class: "key" }, k), h("td", { class: "value" }, String(config[k]))));
  document.getElementById("config").replaceChildren(h("thead", {}, h("tr", {}, h("th", {}, "key"), h("th", {}, "value"))),
    h("tbody", {}, rows));
}

// The delivery mode of the connector's task pairs (exactly.once.support): "exactly-once", or
// "at-least-once" with the reason a pair fell back; modes that differ between pairs are all shown.
function deliveryText(tasks) {
  const modes = [...new Set((tasks || []).map((t) => t.delivery || "at-least-once"))];
  return modes.length ? modes.join("; ") : "at-least-once";
}

function renderTasks(doc) {
  const name = doc.name;
  const head = h("tr", {}, ["task", "state", "delivery", "executor", "moved", "acknowledged", "committed", "lag", ""].map(
    (t, i) => h("th", { class: i >= 4 && i <= 7 ? "num" : null }, t)));
  const rows = doc.status.tasks.flatMap((t) => {
    const row = h("tr", { "data-task": t.id },
      h("td", {}, t.id), h("td", { "data-state": t.state }, t.state),
      h("td", { class: "delivery" }, t.delivery || "at-least-once"), h("td", {}, t.executor || "-"),
      h("td", { class: "num" }, fmt(t.records.moved, 0)), h("td", { class: "num" }, fmt(t.records.acknowledged, 0)),
      h("td", { class: "num" }, fmt(t.records.committed, 0)),
      h("td", { class: "num" }, t.lag ? fmt(t.lag.records, 0) : "?"),
      h("td", {}, h("button", { class: "restart-task", disabled: !(doc.actions && doc.actions.restart),
        onclick: () => act(`Restart task ${t.id} of ${name}`, "POST",
          `/connectors/${encodeURIComponent(name)}/tasks/${t.id}/restart`) }, "Restart task")));
    const extra = [];
    for (const r of t.retrying || []) {
      extra.push(h("tr", {}, h("td", {}), h("td", { colspan: 8, class: "muted" },
        `retrying ${r.operation} for ${human(r.for_s)}: ${r.reason}`)));
    }
    if (t.trace) extra.push(h("tr", {}, h("td", {}), h("td", { colspan: 8 }, h("pre", {}, t.trace))));
    return [row, ...extra];
  });
  document.getElementById("tasks").replaceChildren(h("thead", {}, head),
    h("tbody", {}, rows.length ? rows : [h("tr", {}, h("td", { colspan: 9, class: "muted" }, "no task pairs"))]));
}

// A committed offset as words: 963, or "ledger 12 · entry 4" for positions of several parts.
function offsetText(offset) {
  if (offset === null || offset === undefined) return "-";
  if (typeof offset !== "object") return typeof offset === "number" ? fmt(offset, 0) : String(offset);
  const entries = Object.entries(offset);
  if (entries.length === 1 && entries[0][0] === "offset") return offsetText(entries[0][1]);
  return entries.map(([k, v]) => `${k} ${typeof v === "object" && v !== null ? `(${offsetText(v)})` : offsetText(v)}`).join(" \u00b7 ");
}

function renderPartitions(partitions) {
  const head = h("tr", {}, h("th", {}, "partition"), h("th", { class: "num" }, "lag (records)"),
    h("th", { class: "num" }, "behind for"), h("th", { class: "num" }, "committed offset"));
  const rows = partitions.map((p) => h("tr", {}, h("td", {}, p.partition), h("td", { class: "num" }, fmt(p.records, 0)),
    h("td", { class: "num" }, human(p.seconds)), h("td", { class: "num" }, offsetText(p.offset))));
  document.getElementById("partitions").replaceChildren(h("thead", {}, head),
    h("tbody", {}, rows.length ? rows : [h("tr", {}, h("td", { colspan: 4, class: "muted" }, "nothing committed yet"))]));
}

function renderHeartbeat(heartbeat) {
  const entries = Object.entries(heartbeat);
  const el = document.getElementById("heartbeat");
  if (!entries.length) {
    el.replaceChildren(h("p", { class: "muted" }, "none (a heartbeat monitor reports the heartbeats it reads)"));
    return;
  }
  el.replaceChildren(h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "from cluster"), h("th", { class: "num" }, "p50"),
    h("th", { class: "num" }, "p99"), h("th", { class: "num" }, "heartbeats"))),
  h("tbody", {}, entries.map(([alias, v]) => h("tr", {}, h("td", {}, alias), h("td", { class: "num" }, human(v.p50_ms / 1000)),
    h("td", { class: "num" }, human(v.p99_ms / 1000)), h("td", { class: "num" }, fmt(v.heartbeats, 0)))))));
}

function renderFailures(doc) {
  const c = doc.counts;
  const parts = [h("div", { class: "panel kv" }, kv([
    ["refused records (permanent)", fmt(c.errors, 0)], ["transient failures (re-sent)", fmt(c.transient, 0)],
    ["dead-lettered", `${fmt(c.dead_lettered, 0)}${doc.dead_letter_topic ? ` (topic ${doc.dead_letter_topic})` : " (no dead-letter topic)"}`],
    ["skipped by errors.tolerance", fmt(c.skipped, 0)], ["dismissed / handled by hooks", `${fmt(c.dismissed, 0)} / ${fmt(c.customer_handled, 0)}`],
    ["filtered by replication rules", fmt(c.filtered, 0)]]))];
  if (doc.failure_reasons.length) {
    parts.push(h("table", { id: "reasons" }, h("thead", {}, h("tr", {}, h("th", {}, "reason"), h("th", { class: "num" }, "records"))),
      h("tbody", {}, doc.failure_reasons.map((r) => h("tr", {}, h("td", { class: "reason", title: r.reason }, r.text || r.reason),
        h("td", { class: "num" }, fmt(r.records, 0)))))));
  }
  if (doc.last_failure) {
    parts.push(h("p", {}, `last FAILED epoch: task ${doc.last_failure.task} at ${new Date(doc.last_failure.at * 1000).toLocaleString()}`),
      h("pre", { id: "last-trace" }, doc.last_failure.trace));
  }
  document.getElementById("failures").replaceChildren(...parts);
}

function drawChart(box, title, ago, series) {
  const W = 560, H = 170, L = 56, R = 10, T = 22, B = 24;
  const all = series.flatMap((x) => x.values).filter((v) => v !== null && v !== undefined);
  const top = Math.max(1, ...all) * 1.1;
  const span = 900; // seconds shown: the history's window
  const x = (a) => L + (W - L - R) * (1 - Math.min(a, span) / span);
  const y = (v) => T + (H - T - B) * (1 - v / top);
  const parts = [s("text", { x: L, y: 14 }, title),
    s("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }), s("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }),
    s("text", { x: L - 6, y: T + 4, "text-anchor": "end" }, fmt(top, 0)), s("text", { x: L - 6, y: H - B, "text-anchor": "end" }, "0"),
    s("text", { x: L, y: H - 6 }, "-15 min"), s("text", { x: W - R, y: H - 6, "text-anchor": "end" }, "now")];
  series.forEach((ser, i) => {
    let run = [];
    const flush = () => {
      if (run.length) parts.push(s("polyline", { points: run.join(" "), stroke: ser.colour }));
      run = [];
    };
    ser.values.forEach((v, j) => {
      if (v === null || v === undefined) flush();
      else run.push(`${x(ago[j]).toFixed(1)},${y(v).toFixed(1)}`);
    });
    flush();
    parts.push(s("text", { x: W - R - 130 * (series.length - i), y: 14, fill: ser.colour }, `\u25a0 ${ser.name}`));
  });
  if (!ago.length) parts.push(s("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "collecting samples (every 2 s)"));
  box.replaceChildren(s("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title }, parts));
}

// -- start ---------------------------------------------------------------------------------------
document.getElementById("login").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem("connect-token", document.getElementById("token").value);
  document.getElementById("login").hidden = true;
  start();
});
window.addEventListener("hashchange", () => { showError(""); start(); });
start();
