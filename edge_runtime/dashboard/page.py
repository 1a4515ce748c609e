"""The dashboard's one page: static HTML with inline CSS and JavaScript, no build step.

It renders the snapshot the server inlines (or fetches ``/state.json``), then follows
``/events`` (server-sent events, each a whole snapshot) and redraws by hand in SVG: the
tree with each node's liveness, coverage, rank and privacy; the root model's scree plot;
anomaly rates over time. A table lists the same nodes with ``data-node`` / ``data-state``
attributes (what the browser test reads), each with its anomaly rate and the sensor its fault
detector suspects (``data-suspect``: the column index, empty for none). The membership
table has a row per aggregator that is open or has had a child join, be forgotten or
quarantined (``data-aggregator``, ``data-joins``, ``data-forgets``): its admitted children,
the forgotten ones with the samples they took with them, the quarantined ones with the
reason; below it the latest changes, newest first.
"""

from __future__ import annotations

__all__ = ["PAGE_HTML", "page_with"]

PAGE_HTML = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>edge-runtime dashboard</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  body { font: 14px system-ui, sans-serif; margin: 16px; color: #222; background: #fafafa; }
  h1 { font-size: 20px; margin: 0 0 4px; }
  h2 { font-size: 15px; margin: 0 0 6px; }
  .bar { color: #555; margin-bottom: 12px; }
  .problem { color: #c62828; font-weight: 600; margin-bottom: 12px; }
  .grid { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
  .card { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 10px; }
  .wide { grid-column: 1 / 3; }
  table { border-collapse: collapse; width: 100%; font-size: 13px; }
  th, td { text-align: left; padding: 2px 6px; border-bottom: 1px solid #eee; }
  .state { font-weight: 600; }
  .online { color: #1a7f37; } .stale { color: #b7791f; }
  .offline { color: #c62828; } .unknown { color: #777; }
  svg text { font: 12px system-ui, sans-serif; }
</style>
</head>
<body>
<h1>edge-runtime <span id="name"></span></h1>
<div class="bar" id="bar">connecting&hellip;</div>
<div class="problem" id="problem" hidden></div>
<div class="grid">
  <div class="card wide"><h2>Tree</h2><svg id="tree" width="100%" height="260"></svg></div>
  <div class="card"><h2>Root model: scree plot</h2>
    <svg id="scree" width="100%" height="220"></svg></div>
  <div class="card"><h2>Anomaly rate over time</h2>
    <svg id="anomaly" width="100%" height="220"></svg></div>
  <div class="card wide"><h2>Nodes</h2>
    <table><thead><tr><th>node</th><th>state</th><th>samples</th><th>rank</th><th>seq</th>
    <th>privacy</th><th>anomaly rate</th><th>suspect</th><th>rejects</th></tr></thead>
    <tbody id="rows"></tbody></table></div>
  <div class="card wide"><h2>Membership: children joined, forgotten, quarantined</h2>
    <table><thead><tr><th>aggregator</th><th>admits</th><th>joined</th><th>forgotten</th>
    <th>quarantined</th></tr></thead>
    <tbody id="members"></tbody></table>
    <ul id="member-events"></ul></div>
</div>
<script>
"use strict";
const COLOURS = {online: "#2da44e", stale: "#d69e2e", offline: "#e5534b", unknown: "#9e9e9e"};
const LINE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
              "#7f7f7f", "#bcbd22", "#17becf"];
function esc(v) {
  return String(v).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;",
    '"': "&quot;", "'": "&#39;"}[c]));
}
function fmt(v) {
  if (v === null || v === undefined) return "\u2013";
  if (typeof v === "number" && !Number.isInteger(v)) return v.toPrecision(3);
  return String(v);
}
function privacyText(p) {
  return p ? "(\u03b5=" + fmt(p.epsilon) + ", \u03b4=" + fmt(p.delta) + ")" : "none";
}
function width(svg) { return Math.max(300, svg.getBoundingClientRect().width || 600); }

function drawTree(s) {
  const svg = document.getElementById("tree");
  const W = width(svg), boxW = 104, boxH = 62, rowH = 92;
  const kids = {}, pos = {};
  for (const n of s.nodes) { kids[n.id] = []; }
  for (const n of s.nodes) { if (n.parent !== null) kids[n.parent].push(n.id); }
  const leaves = s.nodes.filter(n => kids[n.id].length === 0).map(n => n.id);
  const step = W / Math.max(1, leaves.length);
  leaves.forEach((id, i) => { pos[id] = step * (i + 0.5); });
  const byDepth = [...s.nodes].sort((a, b) => b.depth - a.depth);
  for (const n of byDepth) {
    if (kids[n.id].length) {
      const xs = kids[n.id].map(k => pos[k]);
      pos[n.id] = (Math.min(...xs) + Math.max(...xs)) / 2;
    }
  }
  const depthMax = Math.max(...s.nodes.map(n => n.depth));
  svg.setAttribute("height", (depthMax + 1) * rowH + 10);
  const y = n => 8 + n.depth * rowH;
  const byId = Object.fromEntries(s.nodes.map(n => [n.id, n]));
  let out = "";
  for (const n of s.nodes) {
    if (n.parent === null) continue;
    const p = byId[n.parent];
    out += '<line x1="' + pos[p.id] + '" y1="' + (y(p) + boxH) + '" x2="' + pos[n.id] +
      '" y2="' + y(n) + '" stroke="#bbb"/>';
  }
  const bw = Math.min(boxW, step - 6);
  for (const n of s.nodes) {
    const x = pos[n.id] - bw / 2, c = COLOURS[n.state] || "#999";
    out += '<g class="node" data-node="' + esc(n.id) + '" data-state="' + esc(n.state) + '">' +
      '<rect x="' + x + '" y="' + y(n) + '" width="' + bw + '" height="' + boxH +
      '" rx="6" fill="' + c + '22" stroke="' + c + '" stroke-width="2"/>' +
      '<text x="' + pos[n.id] + '" y="' + (y(n) + 15) +
      '" text-anchor="middle" font-weight="600">' +
      esc(n.id) + '</text>' +
      '<text x="' + pos[n.id] + '" y="' + (y(n) + 29) + '" text-anchor="middle" fill="' + c +
      '">' + esc(n.state) + '</text>' +
      '<text x="' + pos[n.id] + '" y="' + (y(n) + 43) + '" text-anchor="middle">n=' +
      esc(fmt(n.n_samples)) + ' r=' + esc(rankText(n)) + '</text>' +
      '<text x="' + pos[n.id] + '" y="' + (y(n) + 57) + '" text-anchor="middle" fill="#555">' +
      (n.privacy ? "\u03b5=" + esc(fmt(n.privacy.epsilon)) : "no DP") + '</text></g>';
  }
  svg.innerHTML = out;
}

function drawScree(s) {
  const svg = document.getElementById("scree");
  const m = s.model;
  if (!m || !m.explained.length) {
    svg.innerHTML = '<text x="10" y="30" fill="#777">no model on ' + esc(s.prefix) + '/' +
      esc(s.root) + '/model yet</text>';
    return;
  }
  const W = width(svg), H = 220, L = 40, B = 30, T = 24, k = m.explained.length;
  const bw = (W - L - 10) / k;
  let out = '<text x="' + L + '" y="14">n=' + esc(m.n_samples) + ', rank ' + esc(m.rank) +
    ', seq ' + esc(m.seq) + ', ' + esc(m.leaves_covered.length) + ' leaves, privacy ' +
    esc(privacyText(m.privacy)) + '</text>';
  out += '<line x1="' + L + '" y1="' + (H - B) + '" x2="' + (W - 5) + '" y2="' + (H - B) +
    '" stroke="#999"/>';
  for (const f of [0, 0.5, 1]) {
    const yy = H - B - f * (H - B - T);
    out += '<text x="' + (L - 4) + '" y="' + (yy + 4) + '" text-anchor="end">' + f + '</text>';
  }
  let cum = 0, pts = [];
  m.explained.forEach((e, i) => {
    const h = e * (H - B - T), x = L + i * bw;
    out += '<rect class="scree-bar" x="' + (x + 2) + '" y="' + (H - B - h) + '" width="' +
      Math.max(1, bw - 4) + '" height="' + h + '" fill="#4c78a8"><title>\u03c3' + (i + 1) +
      '=' + esc(fmt(m.singular_values[i])) + '</title></rect>';
    out += '<text x="' + (x + bw / 2) + '" y="' + (H - B + 14) + '" text-anchor="middle">' +
      (i + 1) + '</text>';
    cum += e;
    pts.push((x + bw / 2) + "," + (H - B - cum * (H - B - T)));
  });
  out += '<polyline points="' + pts.join(" ") + '" fill="none" stroke="#e45756" stroke-width="2"/>';
  svg.innerHTML = out;
}

function drawAnomaly(s) {
  const svg = document.getElementById("anomaly");
  const series = Object.entries(s.anomaly);
  if (!series.length) {
    svg.innerHTML = '<text x="10" y="30" fill="#777">no node reports anomaly_rate yet</text>';
    return;
  }
  const W = width(svg), H = 220, L = 40, B = 24, T = 10, R = 70;
  let t0 = Infinity, t1 = -Infinity, top = 0;
  for (const [, pts] of series) for (const [t, r] of pts) {
    t0 = Math.min(t0, t); t1 = Math.max(t1, t); top = Math.max(top, r);
  }
  top = top > 0 ? top * 1.1 : 1;
  const span = Math.max(1e-9, t1 - t0);
  const X = t => L + (t - t0) / span * (W - L - R), Y = r => H - B - r / top * (H - B - T);
  let out = '<line x1="' + L + '" y1="' + (H - B) + '" x2="' + (W - R) + '" y2="' + (H - B) +
    '" stroke="#999"/><text x="' + (L - 4) + '" y="' + (T + 4) + '" text-anchor="end">' +
    esc(fmt(top)) + '</text><text x="' + (L - 4) + '" y="' + (H - B) +
    '" text-anchor="end">0</text><text x="' + (W - R) + '" y="' + (H - 6) +
    '" text-anchor="end">last ' + esc(fmt(span)) + ' s</text>';
  series.forEach(([id, pts], i) => {
    const c = LINE[i % LINE.length];
    out += '<polyline points="' + pts.map(([t, r]) => X(t) + "," + Y(r)).join(" ") +
      '" fill="none" stroke="' + c + '" stroke-width="2"/>';
    const [tl, rl] = pts[pts.length - 1];
    out += '<text x="' + (X(tl) + 4) + '" y="' + (Y(rl) + 4) + '" fill="' + c + '">' + esc(id) +
      '</text>';
  });
  svg.innerHTML = out;
}

function drawRows(s) {
  document.getElementById("rows").innerHTML = s.nodes.map(n =>
    '<tr data-node="' + esc(n.id) + '" data-state="' + esc(n.state) + '">' +
    '<td>' + "\u00a0".repeat(2 * n.depth) + esc(n.id) + '</td>' +
    '<td class="state ' + esc(n.state) + '">' + esc(n.state) +
    (n.quarantined ? ' \u00b7 quarantined (' + esc(n.quarantined) + ')' : '') + '</td>' +
    '<td>' + esc(fmt(n.n_samples)) + '</td><td>' + esc(rankText(n)) + '</td>' +
    '<td>' + esc(fmt(n.seq)) + '</td><td>' + esc(privacyText(n.privacy)) + '</td>' +
    '<td>' + esc(fmt(n.anomaly_rate)) + '</td>' +
    '<td class="suspect" data-suspect="' + esc(n.suspect ? n.suspect.sensor : "") + '">' +
    esc(suspectText(n.suspect)) + '</td><td>' + esc(fmt(n.rejects)) + '</td></tr>'
  ).join("");
}

function suspectText(sus) {
  if (!sus) return "\u2013";
  return "sensor " + sus.sensor + (sus.fault ? " (" + sus.fault + ")" : "");
}

function listText(items) {
  return items.length ? items.map(esc).join(", ") : "\u2013";
}

const EVENT_WORDS = {joined: "joined", forgotten: "forgot", quarantined: "quarantined",
                     released: "released"};

function drawMembership(s) {
  const members = s.membership || [], events = s.membership_events || [];
  document.getElementById("members").innerHTML = members.length ? members.map(m =>
    '<tr data-aggregator="' + esc(m.aggregator) + '" data-joins="' + esc(m.joins) +
    '" data-forgets="' + esc(m.forgets) + '">' +
    '<td>' + esc(m.aggregator) + '</td>' +
    '<td>' + (m.open ? "any child (open)" : "declared children") + '</td>' +
    '<td>' + listText(m.joined) + ' <span class="unknown">(joins=' + esc(m.joins) +
    ')</span></td>' +
    '<td>' + listText(Object.entries(m.forgotten).map(([c, f]) =>
      c + " (n=" + f.n_samples + ")")) + ' <span class="unknown">(forgets=' +
    esc(m.forgets) + ')</span></td>' +
    '<td>' + listText(Object.entries(m.quarantined).map(([c, r]) => c + " (" + r + ")")) +
    '</td></tr>'
  ).join("") : '<tr><td colspan="5" class="unknown">no aggregator is open or has had a ' +
    'child join, be forgotten or quarantined</td></tr>';
  document.getElementById("member-events").innerHTML = events.slice(-10).reverse().map(e =>
    '<li data-event="' + esc(e.event) + '" data-child="' + esc(e.child) + '">' +
    esc(e.aggregator) + " " + esc(EVENT_WORDS[e.event] || e.event) + ": " + esc(e.child) +
    (e.n_samples !== undefined ? " n_samples=" + esc(e.n_samples) : "") +
    (e.reason !== undefined ? " (" + esc(e.reason) + ")" : "") +
    ' <span class="unknown">' + esc(fmt(s.now - e.t)) + ' s ago</span></li>'
  ).join("");
}

function rankText(n) {
  return fmt(n.rank) + (n.tracked ? " (" + n.tracked + " tracked)" : "");
}

function render(s) {
  document.getElementById("name").textContent = s.name;
  const c = s.counts;
  document.getElementById("bar").textContent =
    "broker " + (s.connected ? "connected" : "disconnected") + " \u00b7 " +
    c.online + " online, " + c.stale + " stale, " + c.offline + " offline, " + c.unknown +
    " unknown \u00b7 stale after " + s.stale_after_s + " s";
  const problem = document.getElementById("problem");
  problem.hidden = !s.broker_error;
  problem.textContent = s.broker_error ? "broker: " + s.broker_error : "";
  drawTree(s); drawScree(s); drawAnomaly(s); drawRows(s); drawMembership(s);
  document.body.dataset.ready = "1";
}

const INITIAL = /*INITIAL*/null;
if (INITIAL) render(INITIAL);
else fetch("state.json").then(r => r.json()).then(render).catch(() => {});
if (window.EventSource) {
  const events = new EventSource("events");
  events.onmessage = e => render(JSON.parse(e.data));
}
</script>
</body>
</html>
"""


def page_with(snapshot_json: str) -> str:
    """The page with ``snapshot_json`` inlined, so it shows the tree before any request."""
    return PAGE_HTML.replace("/*INITIAL*/null", snapshot_json.replace("</", "<\\/"), 1)
