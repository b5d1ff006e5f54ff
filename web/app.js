/* bucketdb dashboard (docs/DASHBOARD.md). Plain JavaScript and SVG, no libraries: the
 * page is served from the binary and must work without any network but this server.
 *
 * Every page ends by writing a JSON summary of what it drew into #summary (points
 * drawn, tier that answered, bars, ...), which the end-to-end test reads from the DOM
 * (tests/integration/test_dashboard.py). Data from the server is put into the page
 * with textContent and SVG attributes only, never parsed as HTML. */
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const POLL_MS = 5000;
const RANGES = { "1h": 3600e3, "6h": 6 * 3600e3, "24h": 86400e3, "7d": 7 * 86400e3,
                 "30d": 30 * 86400e3, "365d": 365 * 86400e3 };
const MAX_CHARTS = 12;
const STATE_PAGE = 50;
const HOT_ROWS = 20;

const $ = (id) => document.getElementById(id);

/* el("td", {class: "num"}, "text", childNode, ...) */
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "onclick") e.addEventListener("click", v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : String(k));
  return e;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

/* ---------------------------------------------------------------- formatting */

function fmtNum(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "-";
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(2) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(2) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
  if (Number.isInteger(v)) return String(v);
  return a >= 100 ? v.toFixed(1) : v.toPrecision(3);
}

function fmtBytes(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "-";
  if (!Number.isFinite(v)) return "inf";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (Number.isInteger(v) ? v : v.toFixed(1)) + " " + units[i];
}

function fmtTime(ms) {
  if (ms === null || ms === undefined) return "-";
  return new Date(ms).toISOString().slice(0, 19).replace("T", " ") + "Z";
}

function fmtAxisTime(ms, spanMs) {
  const iso = new Date(ms).toISOString();
  if (spanMs <= 15 * 60e3) return iso.slice(11, 19);
  if (spanMs <= 2 * 86400e3) return iso.slice(11, 16);
  return iso.slice(5, 10) + (spanMs <= 14 * 86400e3 ? " " + iso.slice(11, 13) + "h" : "");
}

/* ---------------------------------------------------------------- session and API */

const session = {
  get token() { return sessionStorage.getItem("bdb.token") || ""; },
  get tenant() { return sessionStorage.getItem("bdb.tenant") || ""; },
  set(token, tenant) {
    sessionStorage.setItem("bdb.token", token || "");
    sessionStorage.setItem("bdb.tenant", tenant || "");
  },
};

function hashParams() { return new URLSearchParams(location.hash.slice(1)); }

function setHashParam(key, value) {
  const h = hashParams();
  if (value === null || value === undefined || value === "") h.delete(key);
  else h.set(key, value);
  location.hash = h.toString();
}

/* A link may carry the token in the fragment (#token=...&tenant=...), which never
 * reaches a server log; it is moved into session storage and out of the address bar. */
function takeFragmentToken() {
  const h = hashParams();
  if (!h.has("token") && !h.has("tenant")) return;
  session.set(h.has("token") ? h.get("token") : session.token,
              h.has("tenant") ? h.get("tenant") : session.tenant);
  h.delete("token");
  h.delete("tenant");
  history.replaceState(null, "", location.pathname + "#" + h.toString());
}

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

/* GET a path of this server. opts.allTenants leaves out the tenant parameter (the
 * admin token then sees every tenant); /metrics and /health are text/JSON without auth. */
async function api(path, params, opts) {
  const u = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {}))
    if (v !== undefined && v !== null && v !== "") u.searchParams.set(k, v);
  const scoped = path.startsWith("/api/v1/") && !path.startsWith("/api/v1/admin");
  if (scoped && session.tenant && !(opts && opts.allTenants)) u.searchParams.set("tenant", session.tenant);
  const headers = {};
  if (session.token) headers.Authorization = "Token " + session.token;
  const r = await fetch(u, { headers, cache: "no-store" });
  const text = await r.text();
  if (!r.ok) {
    let msg = text.trim();
    try { msg = JSON.parse(text).error || msg; } catch (e) { /* not JSON: keep the text */ }
    /* The admin API needs the admin token even where nothing else needs a token
     * (loopback, auth = auto): its 401 only means "no admin view", which the callers
     * show where it matters. Ask for a token where a page's own data needs one. */
    if (r.status === 401 && !path.startsWith("/api/v1/admin")) showLogin(msg);
    throw new ApiError(r.status, msg || ("HTTP " + r.status));
  }
  return path === "/metrics" ? text : JSON.parse(text);
}

/* ---------------------------------------------------------------- Prometheus text */

function parseMetrics(text) {
  const out = new Map();
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[2])
      for (const l of m[2].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
        labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    const v = m[3] === "+Inf" ? Infinity : m[3] === "-Inf" ? -Infinity : Number(m[3]);
    if (!out.has(m[1])) out.set(m[1], []);
    out.get(m[1]).push({ labels, value: v });
  }
  return out;
}

function msum(metrics, name, pred) {
  let s = 0;
  for (const r of metrics.get(name) || []) if (!pred || pred(r.labels)) s += r.value;
  return s;
}

function mone(metrics, name) {
  const r = metrics.get(name);
  return r && r.length ? r[0].value : null;
}

/* Quantile from a cumulative histogram, linear within the bucket (as Prometheus does). */
function histQuantile(metrics, name, q) {
  const b = (metrics.get(name + "_bucket") || []).map((r) => [Number(r.labels.le), r.value])
    .sort((x, y) => x[0] - y[0]);
  if (!b.length || b[b.length - 1][1] === 0) return null;
  const rank = q * b[b.length - 1][1];
  let prevLe = 0, prevC = 0;
  for (const [le, c] of b) {
    if (c >= rank) {
      if (!Number.isFinite(le)) return prevLe;
      return prevLe + (le - prevLe) * (c === prevC ? 0 : (rank - prevC) / (c - prevC));
    }
    prevLe = le;
    prevC = c;
  }
  return prevLe;
}

/* ---------------------------------------------------------------- charts (SVG) */

const CH = { w: 900, h: 220, l: 64, r: 12, t: 10, b: 26 };

/* A line chart of points [{t, v, lo, hi}] (lo/hi: the min-max band of a tier window).
 * A gap much larger than the usual step breaks the line instead of bridging it.
 * Returns the number of points drawn. */
function lineChart(container, pts, from, to, yUnit) {
  clear(container);
  const s = svg("svg", { viewBox: `0 0 ${CH.w} ${CH.h}`, role: "img" });
  container.append(s);
  const good = pts.filter((p) => Number.isFinite(p.v));
  if (!good.length) {
    s.append(svg("text", { x: CH.w / 2, y: CH.h / 2, "text-anchor": "middle", class: "axis-label" },
                 "no data in this range"));
    return 0;
  }
  let lo = Infinity, hi = -Infinity;
  for (const p of good) {
    lo = Math.min(lo, Number.isFinite(p.lo) ? p.lo : p.v);
    hi = Math.max(hi, Number.isFinite(p.hi) ? p.hi : p.v);
  }
  const nonNegative = lo >= 0;
  if (lo === hi) { lo -= 1; hi += 1; }
  const pad = (hi - lo) * 0.05;
  lo -= pad; hi += pad;
  if (nonNegative) lo = Math.max(lo, 0); /* a rate or a count never goes below 0 */
  const X = (t) => CH.l + ((t - from) / (to - from)) * (CH.w - CH.l - CH.r);
  const Y = (v) => CH.t + (1 - (v - lo) / (hi - lo)) * (CH.h - CH.t - CH.b);
  s.append(svg("line", { x1: CH.l, y1: CH.h - CH.b, x2: CH.w - CH.r, y2: CH.h - CH.b, class: "axis" }));
  for (let i = 0; i <= 4; i++) {
    const v = lo + ((hi - lo) * i) / 4;
    s.append(svg("line", { x1: CH.l, x2: CH.w - CH.r, y1: Y(v), y2: Y(v), class: "axis" }));
    s.append(svg("text", { x: CH.l - 6, y: Y(v) + 4, "text-anchor": "end", class: "axis-label" },
                 fmtNum(v) + (yUnit || "")));
    const t = from + ((to - from) * i) / 4;
    s.append(svg("text", { x: X(t), y: CH.h - 8, "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle",
                           class: "axis-label" }, fmtAxisTime(t, to - from)));
  }
  const steps = [];
  for (let i = 1; i < good.length; i++) steps.push(good[i].t - good[i - 1].t);
  steps.sort((a, b) => a - b);
  const gap = steps.length ? Math.max(steps[steps.length >> 1] * 5, 1) : Infinity;
  const runs = [[]];
  for (let i = 0; i < good.length; i++) {
    if (i && good[i].t - good[i - 1].t > gap) runs.push([]);
    runs[runs.length - 1].push(good[i]);
  }
  for (const run of runs) {
    if (run.some((p) => Number.isFinite(p.lo))) {
      const top = run.map((p) => `${X(p.t).toFixed(1)},${Y(p.hi).toFixed(1)}`);
      const bot = run.slice().reverse().map((p) => `${X(p.t).toFixed(1)},${Y(p.lo).toFixed(1)}`);
      s.append(svg("polygon", { points: top.concat(bot).join(" "), class: "range-band" }));
    }
    if (run.length === 1)
      s.append(svg("circle", { cx: X(run[0].t), cy: Y(run[0].v), r: 2.5, class: "line" }));
    else
      s.append(svg("polyline", { points: run.map((p) => `${X(p.t).toFixed(1)},${Y(p.v).toFixed(1)}`).join(" "),
                                 class: "line" }));
  }
  return good.length;
}

/* A bar chart of [{label, value, cls, onclick, title}]. Returns the number of bars. */
function barChart(container, bars, unitFmt) {
  clear(container);
  const h = 200, l = 56, b = 40, t = 14, w = CH.w;
  const s = svg("svg", { viewBox: `0 0 ${w} ${h}`, role: "img" });
  container.append(s);
  if (!bars.length) {
    s.append(svg("text", { x: w / 2, y: h / 2, "text-anchor": "middle", class: "axis-label" }, "nothing yet"));
    return 0;
  }
  const max = Math.max(1, ...bars.map((x) => x.value));
  const bw = (w - l - 10) / bars.length;
  s.append(svg("line", { x1: l, y1: h - b, x2: w - 10, y2: h - b, class: "axis" }));
  s.append(svg("text", { x: l - 6, y: t + 4, "text-anchor": "end", class: "axis-label" }, fmtNum(max)));
  bars.forEach((x, i) => {
    const bh = ((h - t - b) * x.value) / max;
    const r = svg("rect", { x: l + i * bw + bw * 0.12, y: h - b - bh, width: bw * 0.76, height: Math.max(bh, 0),
                            class: "bar" + (x.cls ? " " + x.cls : "") });
    r.append(svg("title", {}, (x.title || x.label) + ": " + (unitFmt || fmtNum)(x.value)));
    if (x.onclick) r.addEventListener("click", x.onclick);
    s.append(r);
    s.append(svg("text", { x: l + i * bw + bw / 2, y: h - b - bh - 3, "text-anchor": "middle", class: "axis-label" },
                 fmtNum(x.value)));
    s.append(svg("text", { x: l + i * bw + bw / 2, y: h - b + 14, "text-anchor": "middle", class: "axis-label" },
                 x.label));
  });
  return bars.length;
}

function table(headers, rows) {
  const t = el("table");
  t.append(el("tr", {}, ...headers.map((h) => el("th", { class: h.num ? "num" : "" }, h.name || h))));
  for (const row of rows)
    t.append(el("tr", {}, ...row.map((c, i) => el("td", { class: headers[i].num ? "num" : "" }, c))));
  return t;
}

function card(label, value, sub, cls) {
  return el("div", { class: "card" + (cls ? " " + cls : "") }, el("div", { class: "label" }, label),
            el("div", { class: "value" }, value), el("div", { class: "sub" }, sub || ""));
}

/* ---------------------------------------------------------------- status and summary */

function setStatus(text, isError) {
  const s = $("status");
  s.textContent = text;
  s.className = isError ? "error" : "muted";
}

function setSummary(obj) {
  $("summary").textContent = JSON.stringify(obj);
  document.body.dataset.ready = obj.ready ? "1" : "0";
}

function showLogin(reason) {
  $("login").hidden = false;
  $("login-reason").textContent = reason ? "The server said: " + reason : "";
  $("login-token").value = session.token;
  $("login-tenant").value = session.tenant;
}

/* ---------------------------------------------------------------- who am I */

async function describeWho() {
  let text = session.token ? "token" : "no token";
  try {
    await api("/api/v1/admin/tenants");
    text = "admin token" + (session.tenant ? ", tenant " + session.tenant : "");
  } catch (e) {
    try {
      const c = await api("/api/v1/state/counts");
      text = (session.token ? "tenant token: " : "no token, tenant ") + c.tenant;
    } catch (e2) { text = "not logged in"; }
  }
  $("who").textContent = text;
}

/* ---------------------------------------------------------------- fleet overview */

const rateHistory = []; /* {t, v}: samples/s between two scrapes of /metrics */
let lastScrape = null;

let metricsDenied = null; /* why /metrics refused this token (403), else null */

async function scrape() {
  let text;
  try {
    text = await api("/metrics");
    metricsDenied = null;
  } catch (e) {
    /* /metrics covers every tenant and takes the admin token (metrics_auth = auto):
     * with a tenant token the server-wide figures are left out, not the page. */
    if (e.status !== 403) throw e;
    metricsDenied = e.message;
    return new Map();
  }
  const m = parseMetrics(text);
  const now = Date.now();
  const total = msum(m, "bucketdb_samples_ingested_total");
  if (lastScrape && now > lastScrape.t && total >= lastScrape.total) {
    rateHistory.push({ t: now, v: ((total - lastScrape.total) * 1000) / (now - lastScrape.t) });
    if (rateHistory.length > 360) rateHistory.shift();
  }
  lastScrape = { t: now, total };
  return m;
}

async function renderOverview(gen) {
  const m = await scrape();
  const [health, hot, tenants, counts] = await Promise.all([
    api("/health").catch((e) => ({ status: "error", reason: e.message })),
    api("/api/v1/partitions/hot", {}, { allTenants: true }).catch((e) => ({ error: e.message })),
    api("/api/v1/admin/tenants").catch((e) => ({ error: e.message, status: e.status })),
    api("/api/v1/state/counts").catch(() => null),
  ]);
  if (gen !== pageGen) return;
  const rate = rateHistory.length ? rateHistory[rateHistory.length - 1].v : null;
  const total = msum(m, "bucketdb_samples_ingested_total");
  const start = mone(m, "process_start_time_seconds");
  const uptime = start ? Math.max(1, Date.now() / 1000 - start) : null;
  const quota = msum(m, "bucketdb_quota_rejections_total");
  const bpEvents = msum(m, "bucketdb_backpressure_events_total");
  const hotNow = Array.isArray(hot.partitions) ? hot.partitions.length : msum(m, "bucketdb_hot_partitions");
  const p99 = histQuantile(m, "bucketdb_write_duration_seconds", 0.99);
  const headBytes = mone(m, "bucketdb_head_bytes"), headMax = mone(m, "bucketdb_head_max_bytes");
  const cards = clear($("ov-cards"));
  cards.append(
    card("Status", health.status || "-", health.reason || "", health.status === "ok" ? "ok" : health.status === "degraded" ? "warn" : "bad"),
    card("Ingestion rate", rate === null ? "measuring" : fmtNum(rate) + "/s",
         uptime ? "average since start " + fmtNum(total / uptime) + "/s" : ""),
    card("Samples ingested", fmtNum(total), "since the server started"),
    card("Devices", fmtNum(mone(m, "bucketdb_devices")),
         counts ? `tenant ${counts.tenant}: ${fmtNum(counts.devices)}` : "all tenants"),
    card("Tenants", fmtNum(mone(m, "bucketdb_tenants")),
         fmtNum(mone(m, "bucketdb_registered_tenants")) + " registered"),
    card("Hot partitions", fmtNum(hotNow), fmtNum(msum(m, "bucketdb_hot_episodes_total")) + " episodes",
         hotNow > 0 ? "bad" : ""),
    card("Quota rejections", fmtNum(quota), "write requests refused", quota > 0 ? "bad" : ""),
    card("Backpressure", fmtNum(bpEvents), "refusals; in flight " +
         fmtBytes(mone(m, "bucketdb_inflight_request_bytes")), bpEvents > 0 ? "bad" : ""),
    card("Write latency p99", p99 === null ? "-" : fmtNum(p99 * 1000) + " ms", "since start"),
    card("Head", fmtBytes(headBytes), "of " + fmtBytes(headMax) + " before a flush"));

  const rc = $("ov-rate-chart");
  const now = Date.now();
  const rateFrom = rateHistory.length ? Math.min(rateHistory[0].t, now - 60e3) : now - 60e3;
  const ratePoints = lineChart(rc, rateHistory, rateFrom, now, "/s");

  const hotEl = clear($("ov-hot"));
  if (hot.error) hotEl.append(el("p", { class: "error" }, hot.error));
  else if (!hot.partitions.length) hotEl.append(el("p", { class: "empty" }, "no hot partition now"));
  else {
    const top = hot.partitions.slice().sort((a, b) => b.peak_per_minute - a.peak_per_minute).slice(0, HOT_ROWS);
    hotEl.append(table(["tenant", "device", "bucket start", { name: "last min", num: 1 },
                        { name: "peak/min", num: 1 }, { name: "threshold", num: 1 }, "policy",
                        { name: "sub-buckets", num: 1 }],
      top.map((p) => [p.tenant, p.device, fmtTime(p.bucket_start_ms), fmtNum(p.writes_last_minute),
                      fmtNum(p.peak_per_minute), fmtNum(p.threshold), p.policy, fmtNum(p.subbuckets)])));
    if (hot.partitions.length > top.length)
      hotEl.append(el("p", { class: "muted" }, `the ${top.length} with the highest peak of ${hot.partitions.length}`));
  }

  const tenEl = clear($("ov-tenants"));
  if (metricsDenied)
    tenEl.append(el("p", { class: "muted" }, "Server-wide figures need the admin token (the server said: " + metricsDenied + ")."));
  const ingested = new Map((m.get("bucketdb_tenant_samples_ingested_total") || [])
    .map((r) => [r.labels.tenant, r.value]));
  if (tenants.error) {
    tenEl.append(el("p", { class: "muted" }, tenants.status === 403 || tenants.status === 401
      ? "The tenant list needs the admin token." : tenants.error));
    tenEl.append(table(["tenant", { name: "samples ingested", num: 1 }],
                       [...ingested].map(([t, v]) => [t, fmtNum(v)])));
  } else {
    tenEl.append(table(["tenant", { name: "devices", num: 1 }, { name: "storage", num: 1 },
                        { name: "samples ingested", num: 1 }, { name: "writes/s quota", num: 1 },
                        { name: "rejections", num: 1 }],
      tenants.tenants.map((t) => [t.name, fmtNum(t.usage.devices), fmtBytes(t.usage.storage_bytes),
                                  fmtNum(ingested.get(t.name) || 0),
                                  t.quotas.writes_per_second ? fmtNum(t.quotas.writes_per_second) : "none",
                                  fmtNum(Object.values(t.rejections).reduce((a, b) => a + b, 0))])));
    if (ingested.has("(other)"))
      tenEl.append(el("p", { class: "muted" }, `unregistered tenants together: ${fmtNum(ingested.get("(other)"))} samples`));
  }

  const qEl = clear($("ov-quota"));
  const qRows = (m.get("bucketdb_quota_rejections_total") || []).filter((r) => r.value > 0);
  const devRate = mone(m, "bucketdb_device_rate_rejections_total") || 0;
  if (!qRows.length && !devRate) qEl.append(el("p", { class: "empty" }, "no write refused by a quota"));
  else
    qEl.append(table(["tenant", "limit", { name: "refused", num: 1 }],
      qRows.map((r) => [r.labels.tenant, r.labels.limit, fmtNum(r.value)])
        .concat(devRate ? [["(devices)", "max_rps", fmtNum(devRate)]] : [])));

  const bpEl = clear($("ov-bp"));
  const bp = health.backpressure || {};
  bpEl.append(table(["", { name: "now", num: 1 }, { name: "limit", num: 1 }], [
    ["bytes in flight", fmtBytes(mone(m, "bucketdb_inflight_request_bytes")),
     fmtBytes(mone(m, "bucketdb_inflight_request_bytes_limit"))],
    ["write requests in flight", fmtNum(mone(m, "bucketdb_inflight_write_requests")),
     fmtNum(mone(m, "bucketdb_inflight_write_requests_limit"))],
    ["head", fmtBytes(headBytes), fmtBytes(headMax)],
    ["shedding", bp.shedding ? "yes" : "no", ""],
  ]));
  bpEl.append(table(["refusal reason", { name: "count", num: 1 }],
    (m.get("bucketdb_backpressure_events_total") || []).map((r) => [r.labels.reason, fmtNum(r.value)])));

  setSummary({ page: "overview", ready: true, devices: mone(m, "bucketdb_devices"),
               tenants: mone(m, "bucketdb_tenants"), samples: total, rate, rate_points: ratePoints,
               hot: hotNow, quota_rejections: quota, backpressure_events: bpEvents,
               health: health.status || null, metrics_denied: metricsDenied });
  setStatus("updated " + fmtTime(Date.now()));
}

/* ---------------------------------------------------------------- device explorer */

let deviceCache = null; /* {at, tenant, devices} */

async function loadDevices() {
  if (deviceCache && Date.now() - deviceCache.at < 30000) return deviceCache;
  /* the listing is paged (10000 a page at most); the explorer reads up to 10 pages */
  let d = await api("/api/v1/devices?limit=10000");
  const devices = d.devices;
  for (let i = 1; i < 10 && d.next_cursor !== null && d.next_cursor !== undefined; i++) {
    d = await api("/api/v1/devices?limit=10000&cursor=" + encodeURIComponent(d.next_cursor));
    devices.push(...d.devices);
  }
  deviceCache = { at: Date.now(), tenant: d.tenant, devices };
  return deviceCache;
}

function fillDeviceSelect(devices, chosen) {
  const filter = $("dev-filter").value.trim().toLowerCase();
  const sel = clear($("dev-select"));
  let shown = 0;
  for (const d of devices) {
    if (filter && !d.device.toLowerCase().includes(filter) && d.device !== chosen) continue;
    if (shown++ >= 2000) break; /* a list, not the fleet: filter to find others */
    const o = el("option", { value: d.device }, d.device);
    if (d.device === chosen) o.selected = true;
    sel.append(o);
  }
}

/* One query with resolution=auto; the server picks raw or a rollup tier by the
 * range's length and says which in `tier`. Tier rows are windows: the line is the
 * mean, the band min..max. */
async function renderDevices(gen) {
  const h = hashParams();
  const range = RANGES[h.get("range")] ? h.get("range") : "24h";
  $("dev-range").value = range;
  const { tenant, devices } = await loadDevices();
  if (gen !== pageGen) return;
  const charts = clear($("dev-charts"));
  const info = clear($("dev-info"));
  if (!devices.length) {
    fillDeviceSelect([], null);
    info.append(el("p", { class: "empty" }, `tenant ${tenant} has no devices yet`));
    $("dev-tier").textContent = "";
    setSummary({ page: "devices", ready: true, tenant, devices: 0, charts: 0, points: 0, tier: null });
    return;
  }
  const chosen = devices.some((d) => d.device === h.get("device")) ? h.get("device") : devices[0].device;
  fillDeviceSelect(devices, chosen);
  const dev = devices.find((d) => d.device === chosen);
  info.append(el("h2", {}, chosen),
    table(["tags", "state", "first event", "last event", { name: "samples", num: 1 }, "bucket", "class"],
          [[Object.entries(dev.tags || {}).map(([k, v]) => k + "=" + v).join(", ") || "-",
            dev.state === null ? "-" : dev.state, fmtTime(dev.first_time), fmtTime(dev.last_time),
            fmtNum(dev.samples), dev.bucket + (dev.pinned ? " (pinned)" : ""), dev.class]]));
  const to = Date.now(), from = to - RANGES[range];
  $("dev-tier").textContent = "querying";
  let q;
  try {
    q = await api("/api/v1/query", { device: chosen, from: Math.floor(from), to: Math.floor(to),
                                      resolution: "auto" });
  } catch (e) {
    if (gen !== pageGen) return;
    $("dev-tier").textContent = "";
    charts.append(el("div", { class: "panel error" }, e.message));
    setSummary({ page: "devices", ready: true, tenant, device: chosen, error: e.message, charts: 0, points: 0 });
    return;
  }
  if (gen !== pageGen) return;
  const windowed = q.tier !== "raw";
  $("dev-tier").textContent = "answered by tier " + q.tier + " (resolution=auto)";
  const byMetric = new Map();
  for (const row of q.values) {
    if (!byMetric.has(row[1])) byMetric.set(row[1], []);
    /* windows: [time, metric, count, sum, min, max, mean, ...] */
    byMetric.get(row[1]).push(windowed ? { t: row[0], v: row[6], lo: row[4], hi: row[5] }
                                       : { t: row[0], v: row[2] });
  }
  let points = 0, nCharts = 0;
  const perMetric = {};
  for (const [metric, pts] of [...byMetric].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
    if (nCharts >= MAX_CHARTS) break;
    const box = el("div", { class: "chart" });
    const panel = el("div", { class: "panel" },
      el("div", { class: "chart-title" }, el("h2", {}, metric),
         el("span", { class: "muted" }, `${pts.length} ${windowed ? q.tier + " windows (mean, min-max band)" : "samples"}`)),
      box);
    charts.append(panel);
    const n = lineChart(box, pts, from, to);
    perMetric[metric] = n;
    points += n;
    nCharts++;
  }
  if (!nCharts) charts.append(el("div", { class: "panel empty" }, "no data in this range"));
  setSummary({ page: "devices", ready: true, tenant, device: chosen, range, tier: q.tier,
               resolution: q.resolution || "raw", count: q.count, charts: nCharts, points,
               metrics: perMetric });
  setStatus(`${chosen}: ${q.count} rows from tier ${q.tier}`);
}

/* ---------------------------------------------------------------- current state */

async function renderState(gen) {
  const c = await api("/api/v1/state/counts");
  if (gen !== pageGen) return;
  const states = Object.entries(c.states).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  const bars = states.map(([s, n]) => ({ label: s.length > 14 ? s.slice(0, 13) + "…" : s, title: s, value: n,
                                         onclick: () => setHashParam("state", s) }));
  if (c.no_state) bars.push({ label: "(no state)", value: c.no_state, cls: "muted" });
  const nBars = barChart($("st-chart"), bars);
  $("st-totals").textContent = `tenant ${c.tenant}: ${c.devices} devices, ${c.no_state} never reported a state`;
  const h = hashParams();
  const chosen = h.get("state") || (states.length ? states[0][0] : null);
  const list = clear($("st-list"));
  $("st-more").hidden = true;
  let listed = 0, total = 0;
  if (chosen !== null) {
    $("st-list-title").textContent = "Devices in state " + chosen;
    const rows = [];
    let cursor = null;
    const more = async () => {
      const page = await api("/api/v1/state/devices", { state: chosen, limit: STATE_PAGE, cursor });
      total = page.total;
      for (const d of page.devices) rows.push([d.device, fmtTime(d.state_time)]);
      listed = rows.length;
      cursor = page.next_cursor;
      clear(list).append(table(["device", "in this state since (report time)"], rows),
                         el("p", { class: "muted" }, `${listed} of ${total} shown`));
      $("st-more").hidden = cursor === null;
    };
    $("st-more").onclick = () => more().catch((e) => setStatus(e.message, true));
    await more();
  } else {
    $("st-list-title").textContent = "Devices in a state";
    list.append(el("p", { class: "empty" }, "no device has reported a state"));
  }
  if (gen !== pageGen) return;
  setSummary({ page: "state", ready: true, tenant: c.tenant, states: c.states, no_state: c.no_state,
               devices: c.devices, bars: nBars, selected: chosen, listed, total });
  setStatus("updated " + fmtTime(Date.now()));
}

/* ---------------------------------------------------------------- partition sizes */

function sizeVerdict(upper) {
  /* seed 002: under 1 MB too small, 10-100 MB the target, over 100 MB risky, over 1 GB failing */
  if (upper <= 1 << 20) return "small";
  if (upper <= 16 << 20) return "";
  if (upper <= 64 << 20) return "target";
  if (upper <= 256 << 20) return "";
  return upper <= 1 << 30 ? "risky" : "failing";
}

async function renderPartitions(gen) {
  const m = parseMetrics(await api("/metrics"));
  if (gen !== pageGen) return;
  const b = (m.get("bucketdb_partition_size_bytes_bucket") || []).map((r) => [Number(r.labels.le), r.value])
    .sort((x, y) => x[0] - y[0]);
  const bars = [];
  let prevLe = 0, prevC = 0;
  for (const [le, c] of b) {
    bars.push({ label: Number.isFinite(le) ? "≤ " + fmtBytes(le) : "> " + fmtBytes(prevLe),
                title: `${fmtBytes(prevLe)} .. ${fmtBytes(le)}`, value: c - prevC, cls: sizeVerdict(le) });
    prevLe = le;
    prevC = c;
  }
  const nBars = barChart($("pt-chart"), bars);
  const count = mone(m, "bucketdb_partition_size_bytes_count") || 0;
  const q = (x) => (m.get("bucketdb_partition_size_quantile_bytes") || []).find((r) => r.labels.quantile === x);
  const stats = clear($("pt-stats"));
  stats.append(card("Partitions", fmtNum(count), "in block files"),
    card("p50", fmtBytes(q("0.5") ? q("0.5").value : null), "within 1 %"),
    card("p95", fmtBytes(q("0.95") ? q("0.95").value : null), ""),
    card("p99", fmtBytes(q("0.99") ? q("0.99").value : null), ""),
    card("Largest", fmtBytes(mone(m, "bucketdb_partition_size_max_bytes")), "exact"),
    card("Over the warning size", fmtNum(mone(m, "bucketdb_large_partitions")),
         "partition_warn_bytes " + fmtBytes(mone(m, "bucketdb_partition_warn_bytes")),
         mone(m, "bucketdb_large_partitions") > 0 ? "bad" : ""));
  setSummary({ page: "partitions", ready: true, bars: nBars, partitions: count,
               counted: bars.reduce((a, x) => a + x.value, 0) });
  setStatus("updated " + fmtTime(Date.now()));
}

/* ---------------------------------------------------------------- routing */

const PAGES = { overview: renderOverview, devices: renderDevices, state: renderState, partitions: renderPartitions };
let pageGen = 0; /* a render that finds pageGen moved on was overtaken: it draws nothing */
let timer = null;

function currentPage() {
  const p = hashParams().get("page");
  return PAGES[p] ? p : "overview";
}

async function route() {
  takeFragmentToken();
  const page = currentPage();
  const gen = ++pageGen;
  for (const name of Object.keys(PAGES)) $("page-" + name).hidden = name !== page;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.page === page);
  setSummary({ page, ready: false });
  try {
    await PAGES[page](gen);
  } catch (e) {
    if (gen !== pageGen) return;
    setStatus(e.message, true);
    setSummary({ page, ready: true, error: e.message, status: e.status || null });
  }
}

function start() {
  takeFragmentToken();
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    session.set($("login-token").value.trim(), $("login-tenant").value.trim());
    $("login").hidden = true;
    deviceCache = null;
    describeWho();
    route();
  });
  $("logout").addEventListener("click", () => showLogin(""));
  $("dev-select").addEventListener("change", () => setHashParam("device", $("dev-select").value));
  $("dev-range").addEventListener("change", () => setHashParam("range", $("dev-range").value));
  $("dev-filter").addEventListener("input", () => {
    if (deviceCache) fillDeviceSelect(deviceCache.devices, hashParams().get("device"));
  });
  window.addEventListener("hashchange", route);
  /* The overview refreshes itself; the rate needs a scrape every interval anyway. */
  timer = setInterval(() => {
    if (currentPage() === "overview") route();
    else scrape().catch(() => {});
  }, POLL_MS);
  describeWho();
  route();
}

document.addEventListener("DOMContentLoaded", start);
