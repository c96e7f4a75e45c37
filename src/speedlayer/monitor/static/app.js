// The dashboard: asks the running job for /api/state once a second and draws it.
"use strict";
const $ = sel => document.querySelector(sel);
let selected = null;     // the query whose timelines are shown
let lastState = null;
const SPEED_MAX = 120;    // km/h at the red end of the colour scale

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  Object.entries(attrs).forEach(([k, v]) => (k === "class" ? (e.className = v) : e.setAttribute(k, v)));
  children.forEach(c => e.append(c instanceof Node ? c : document.createTextNode(c == null ? "" : String(c))));
  return e;
}
const sec = ms => (ms == null ? null : ms / 1000);
const num = v => (v == null ? "–" : Charts.fmt(v));
const when = iso => (iso ? String(iso).replace("T", " ").replace(/\.\d+Z?$|Z$/, "") : "–");
const speedColor = s => `hsl(${Math.max(0, Math.min(120, 120 - (s / SPEED_MAX) * 120))}, 80%, 52%)`;

function header(s) {
  $("#job").textContent = s.job;
  $("#run-info").textContent = `${s.source} · trigger ${s.trigger} · ${Math.round(s.elapsed_s)}s`;
  const failed = s.queries.some(q => q.error);
  const active = s.queries.some(q => q.active);
  const pill = $("#conn");
  pill.textContent = failed ? "query failed" : s.stopping ? "stopping" : active ? "running" : "stopped";
  pill.className = "pill " + (failed ? "bad" : active && !s.stopping ? "ok" : "stop");
}

function kpis(s) {
  const box = $("#kpis"); box.replaceChildren();
  const q = s.queries.find(q => q.name === selected) || s.queries[0];
  const m = (q && q.latest) || {};
  // the newest batch that read events (a bounded run ends with empty batches), since ingest where the source stamps it
  const since = q ? leadingSince(q.series) : "ingest";
  const withEvents = q ? q.series[`latency_${since}_p50`].map((v, i) => (v == null ? -1 : i)).filter(i => i >= 0) : [];
  const at = withEvents.length ? withEvents[withEvents.length - 1] : -1;
  const lat = at < 0 ? {} : Object.fromEntries(["p50", "p95", "p99"].map(p => [p, q.series[`latency_${since}_${p}`][at]]));
  const total = k => s.queries.reduce((n, q) => Math.max(n, (q.totals || {})[k] || 0), 0);
  const items = [
    ["input rows/s", num(m.input_rate)], ["processed rows/s", num(m.processing_rate)],
    [`latency since ${since} p50 / p95 / p99`, lat.p50 == null ? "–" : `${num(sec(lat.p50))} / ${num(sec(lat.p95))} / ${num(sec(lat.p99))}s`],
    ["batch", m.batch_ms == null ? "–" : num(sec(m.batch_ms)) + "s"],
    ["watermark lag", m.watermark_lag_ms == null ? "–" : num(sec(m.watermark_lag_ms)) + "s"],
    ["dead letters", num(total("dead_letters"))], ["duplicates removed", num(total("duplicates_removed"))],
    ["dropped by watermark", num(total("dropped_by_watermark"))], ["late events kept", num(total("late_events_kept"))],
    ["state rows", m.state ? num(m.state.reduce((n, o) => n + o.rows, 0)) : "–"],
    ["source lag", m.source_lag == null ? "n/a" : num(m.source_lag)],
  ];
  // Kafka: the lag of each partition, the worst first, on the source lag's tile (all of them on hover)
  const parts = Object.entries((q && q.partition_lag) || {}).sort((a, b) => b[1] - a[1]);
  const byPartition = parts.map(([p, n]) => `${p}: ${num(n)}`);
  items.forEach(([l, v]) => {
    const tile = el("div", { class: "kpi" }, el("div", { class: "v" }, v), el("div", { class: "l" }, l));
    if (l === "source lag" && parts.length) {
      tile.append(el("div", { class: "l", id: "kpi-partition-lag" }, byPartition.slice(0, 3).join(" · ")));
      tile.title = byPartition.join("\n");
    }
    // the lag grew batch after batch: the input is ahead of processing, say so rather than let latency creep
    if (l === "source lag" && q && q.behind != null) {
      tile.classList.add("warn");
      tile.id = "kpi-behind";
      tile.append(el("div", { class: "l" }, `input ahead of processing by ${num(q.behind)}, growing`));
    }
    box.append(tile);
  });
  box.append(executorsKpi(s.executors));
  box.append(memoryKpi(s.memory));
}

// resident memory of the run's processes: the driver JVM, Spark's Python workers, the Python driver
function memoryKpi(m) {
  m = m || {};
  const mb = b => (b == null ? "–" : num(b / 1048576) + " MB");
  const box = el("div", { class: "kpi", id: "kpi-memory" }, el("div", { class: "v" }, mb(m.driver_jvm)),
    el("div", { class: "l" }, `memory: JVM · Python workers ${mb(m.python_workers)} (${m.workers || 0}) · driver ${mb(m.driver_python)}`));
  box.title = "resident memory (RSS) of each process of the run; forked workers share pages, so their sum overstates them";
  return box;
}

// executors running the tasks: "2 (1 lost)" on a cluster, "local" when the driver runs them
function executorsKpi(x) {
  x = x || {};
  const lost = x.lost || [];
  const label = (x.local ? "executors: the driver" : "executors") + (x.cores == null ? "" : ` · ${x.cores} cores`)
    + (lost.length ? ` · last lost ${when(lost[lost.length - 1].lost_at).slice(11)}` : "");
  const box = el("div", { class: "kpi" + (x.lost_count ? " warn" : ""), id: "kpi-executors" },
    el("div", { class: "v" }, x.summary || "–"), el("div", { class: "l" }, label));
  // every lost executor kept, with where, when and Spark's reason, on hover
  box.title = lost.map(e => `lost executor ${e.id}${e.host_port ? " on " + e.host_port : ""} at ${when(e.lost_at)}: `
    + (e.reason || "no longer listed")).join("\n");
  return box;
}

function tabs(s) {
  if (!selected || !s.queries.some(q => q.name === selected)) selected = s.queries.length ? s.queries[0].name : null;
  const nav = $("#query-tabs"); nav.replaceChildren();
  s.queries.forEach(q => {
    const b = el("button", { class: q.name === selected ? "on" : "" }, q.output);
    b.onclick = () => { selected = q.name; render(lastState); };
    nav.append(b);
  });
}

function charts(s) {
  const q = s.queries.find(q => q.name === selected);
  if (!q) return;
  const d = q.series, t = d.t;
  Charts.lines($("#chart-rates"), t, [{ name: "input", values: d.input_rate }, { name: "processed", values: d.processing_rate }]);
  // since ingest leads (the source's own stamp, a Kafka record's timestamp); since the event adds the producer's delay
  const since = leadingSince(d);
  const lead = ["p50", "p95", "p99"].map(p => ({ name: `since ${since} ${p}`, values: d[`latency_${since}_${p}`].map(sec) }));
  const event = since === "ingest" ? [{ name: "since event p99 (+ producer delay, disorder)", values: d.latency_event_p99.map(sec) }] : [];
  Charts.lines($("#chart-latency"), t, lead.concat(event), { empty: "no latency yet (micro-batch runs only)" });
  const parts = Object.entries(d.phases).filter(([k]) => ["addBatch", "queryPlanning", "walCommit", "commitOffsets", "latestOffset", "getBatch"].includes(k));
  Charts.lines($("#chart-batch"), t, [{ name: "total", values: d.batch_ms.map(sec) }].concat(parts.map(([k, v]) => ({ name: k, values: v.map(sec) }))));
  Charts.lines($("#chart-delay"), t, [{ name: "scheduling delay", values: d.scheduling_delay_ms.map(sec) }]);
  Charts.lines($("#chart-wmlag"), t, [{ name: "watermark lag", values: d.watermark_lag_ms.map(sec) }], { empty: "no watermark on this query yet" });
  Charts.lines($("#chart-state"), t, [{ name: "state rows", values: d.state_rows }, { name: "dropped", values: d.dropped_by_watermark },
    { name: "duplicates", values: d.duplicates_removed }, { name: "late kept", values: d.late_events_kept }]);
  Charts.histogram($("#hist-batch"), d.batch_ms.map(sec));
  Charts.histogram($("#hist-latency"), d[`latency_${since}_p50`].map(sec), { color: Charts.COLORS[1], empty: "no latency yet" });
}

function leadingSince(series) {
  // "ingest" where any batch has it, else "event" (a source that stamps no ingest time)
  return series.latency_ingest_p50.some(v => v != null) || !series.latency_event_p50.some(v => v != null) ? "ingest" : "event";
}

function openIncidents(s, key) {
  // entities in the latest rows of an `incidents` output that are not closed
  const rows = (s.feeds.incidents || []).concat(((s.latest.incidents || {}).rows || []).map(r =>
    Object.fromEntries(s.latest.incidents.columns.map((c, i) => [c, r[i]]))));
  const closed = r => (r.status && String(r.status).toLowerCase() !== "open") || r.closed === true ||
    ["end_time", "ended_at", "closed_at"].some(k => k in r && r[k] != null);
  return new Set(rows.filter(r => !closed(r)).map(r => r[key]));
}

function map(s) {
  // the job declares what its map shows (Job.positions): the entity's key and its time; none: no map
  $("#map-box").style.display = s.map ? "" : "none";
  if (!s.map) return;
  const canvas = $("#map"), pos = s.positions || [], key = s.map.key;
  const ratio = window.devicePixelRatio || 1, w = canvas.clientWidth, h = canvas.clientHeight;
  canvas.width = w * ratio; canvas.height = h * ratio;
  const ctx = canvas.getContext("2d"); ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, w, h); ctx.font = "10px system-ui, sans-serif";
  canvas.dataset.vehicles = String(pos.length);
  $("#map-count").textContent = pos.length ? `(${pos.length} vehicles)` : "";
  if (!pos.length) { ctx.fillStyle = "#8795a4"; ctx.fillText("waiting for positions…", 12, 20); return; }
  let [a, b, c, d] = [Infinity, -Infinity, Infinity, -Infinity];
  pos.forEach(p => { a = Math.min(a, p.lat); b = Math.max(b, p.lat); c = Math.min(c, p.lon); d = Math.max(d, p.lon); });
  const mLat = (b - a) * 0.05 || 0.01, mLon = (d - c) * 0.05 || 0.01;
  a -= mLat; b += mLat; c -= mLon; d += mLon;
  const k = Math.cos(((a + b) / 2) * Math.PI / 180);
  const scale = Math.min(w / ((d - c) * k), h / (b - a));
  const ox = (w - (d - c) * k * scale) / 2, oy = (h - (b - a) * scale) / 2;
  const X = lon => ox + (lon - c) * k * scale, Y = lat => oy + (b - lat) * scale;
  (s.zones || []).forEach(z => {   // speed-limit zones as the backdrop (no map tiles: works offline)
    const x0 = X(Math.max(z.min_lon, c)), x1 = X(Math.min(z.max_lon, d)), y0 = Y(Math.min(z.max_lat, b)), y1 = Y(Math.max(z.min_lat, a));
    if (x1 <= x0 || y1 <= y0) return;
    ctx.strokeStyle = "#2e3b49"; ctx.fillStyle = "rgba(79,179,255,0.04)";
    ctx.fillRect(x0, y0, x1 - x0, y1 - y0); ctx.strokeRect(x0, y0, x1 - x0, y1 - y0);
    ctx.fillStyle = "#5d6b7a"; ctx.fillText(`${z.name} · ${z.speed_limit_kmh} km/h`, x0 + 3, y0 + 11);
  });
  const open = openIncidents(s, key);
  pos.slice().sort((p, q) => (p.speed_kmh || 0) - (q.speed_kmh || 0)).forEach(p => {
    ctx.fillStyle = speedColor(p.speed_kmh || 0);
    ctx.beginPath(); ctx.arc(X(p.lon), Y(p.lat), 2.4, 0, 7); ctx.fill();
    if (open.has(p[key])) { ctx.strokeStyle = "#fff"; ctx.lineWidth = 1.5; ctx.beginPath(); ctx.arc(X(p.lon), Y(p.lat), 6, 0, 7); ctx.stroke(); }
  });
  canvas.dataset.incidents = String(open.size);
}

function speeders(s) {
  const body = $("#speeders tbody"); body.replaceChildren();
  $("#speeders-box").style.display = s.map ? "" : "none";
  if (!s.map) return;
  (s.positions || []).slice().sort((p, q) => (q.speed_kmh || 0) - (p.speed_kmh || 0)).slice(0, 10).forEach(p => {
    const sp = el("td", {}, (p.speed_kmh || 0).toFixed(1)); sp.style.color = speedColor(p.speed_kmh || 0);
    body.append(el("tr", {}, el("td", {}, p[s.map.key]), sp, el("td", {}, when(p[s.map.time]).slice(11))));
  });
}

function alerts(s) {
  const list = $("#alerts"), rows = s.feeds.alerts || [];
  list.replaceChildren();
  $("#alerts-count").textContent = rows.length ? `(latest ${rows.length})` : "";
  if (!rows.length) { list.append(el("li", { class: "muted empty" }, "no alerts yet")); return; }
  rows.slice(0, 60).forEach(r => list.append(el("li", { class: "alert" },
    `${when(r.event_time).slice(11)} `, el("b", {}, r.vehicle_id), ` ${r.speed_kmh} km/h in ${r.zone_name || r.zone_id} `,
    `(limit ${r.speed_limit_kmh}, +${r.excess_kmh})`)));
}

function queries(s) {
  const body = $("#queries tbody"); body.replaceChildren();
  s.queries.forEach(q => body.append(el("tr", {},
    el("td", {}, q.output), el("td", {}, q.error ? "failed" : q.active ? "active" : "stopped"), el("td", {}, q.trigger),
    el("td", {}, q.mode), el("td", {}, q.sink), el("td", {}, q.guarantee), el("td", {}, q.batches),
    el("td", {}, num(q.input_rows)), el("td", {}, when(q.watermark)), el("td", {}, q.checkpoint),
    el("td", { class: "err" }, q.error || ""))));
}

function results(s) {
  const box = $("#results"); box.replaceChildren();
  Object.entries(s.latest).forEach(([name, r]) => {
    const head = el("tr", {}, ...r.columns.map(c => el("th", {}, c)));
    const rows = r.rows.slice(0, 12).map(row => el("tr", {}, ...row.map(v => el("td", {},
      typeof v === "number" && !Number.isInteger(v) ? v.toFixed(v > 1000 || v < -1000 ? 1 : 4).replace(/0+$/, "") : v))));
    box.append(el("div", { class: "box" }, el("h2", {}, `${name} `, el("span", { class: "muted" }, `batch ${r.batch_id} · ${r.total} rows`)),
      el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows))));
  });
  if (!box.children.length) box.append(el("p", { class: "muted" }, "no results yet"));
}

function render(s) {
  if (!s) return;
  $("#live-section").style.display = (s.positions || []).length || (s.feeds.alerts || []).length ? "" : "none";
  for (const part of [header, tabs, kpis, charts, map, speeders, alerts, queries, results]) {
    try { part(s); } catch (e) { console.error(part.name, e); }
  }
}

async function poll() {
  try {
    const r = await fetch("/api/state", { cache: "no-store" });
    if (!r.ok) throw new Error(r.status);
    lastState = await r.json();
    render(lastState);
  } catch (e) {
    const pill = $("#conn"); pill.textContent = "job not reachable"; pill.className = "pill bad";
  }
  setTimeout(poll, 1000);
}
// The SQL box: one read-only statement, answered by the running job; a time series also as a chart.
const cellText = v => (v == null ? "" : typeof v === "object" ? JSON.stringify(v) : String(v));
const timeOf = v => (typeof v === "string" && /^\d{4}-\d\d-\d\dT/.test(v) ? Date.parse(v.endsWith("Z") ? v : v + "Z") : NaN);

function sqlChart(answer) {
  // a time series: a first column of times and at least one column of numbers
  const box = $("#sql-chart-box");
  const [first, ...rest] = answer.columns;
  const numeric = rest.filter(c => answer.rows.length && answer.rows.every(r => r[c] == null || typeof r[c] === "number"));
  const rows = answer.rows.filter(r => !isNaN(timeOf(r[first]))).sort((a, b) => timeOf(a[first]) - timeOf(b[first]));
  box.hidden = !(numeric.length && rows.length > 1 && rows.length === answer.rows.length);
  if (box.hidden) return;
  $("#sql-chart-caption").textContent = `${numeric.join(", ")} by ${first}`;
  Charts.lines($("#sql-chart"), rows.map(r => timeOf(r[first])), numeric.slice(0, 6).map(c => ({ name: c, values: rows.map(r => r[c]) })),
    { zero: false });
}

async function runSql(event) {
  event.preventDefault();
  const status = $("#sql-status"), result = $("#sql-result");
  status.textContent = "running…";
  try {
    const r = await fetch("/api/sql", { method: "POST", headers: { "Content-Type": "application/json" },
                                        body: JSON.stringify({ sql: $("#sql-text").value }) });
    const answer = await r.json();
    if (!r.ok) { status.textContent = answer.error; result.replaceChildren(); $("#sql-chart-box").hidden = true; return; }
    const head = el("tr", {}, ...answer.columns.map(c => el("th", {}, c)));
    const rows = answer.rows.map(row => el("tr", {}, ...answer.columns.map(c => el("td", {}, cellText(row[c])))));
    result.replaceChildren(el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows)));
    const n = answer.rows.length;
    status.textContent = `${n} row${n === 1 ? "" : "s"}` + (answer.truncated ? ` (the first ${answer.limit})` : "");
    sqlChart(answer);
  } catch (e) {
    status.textContent = "the job did not answer";
  }
}
$("#sql-form").addEventListener("submit", runSql);

window.addEventListener("resize", () => render(lastState));
poll();
