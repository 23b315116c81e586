// The hetsched dashboard: vanilla JavaScript, no build step, nothing fetched but the API.
//
// It reads the JSON API with the user's token (kept in sessionStorage, sent as a Bearer
// header) and redraws every few seconds: /v1/nodes, /v1/queues, /v1/jobs, /v1/history, and
// /v1/jobs/{id}/why for the pending jobs shown. All text goes through textContent, never
// innerHTML, so names and explanations cannot inject markup. Charts are hand-drawn SVG.
"use strict";

const TOKEN_KEY = "hetsched.token";
const params = new URLSearchParams(location.search);
const REFRESH_MS = Math.max(500, 1000 * Number(params.get("refresh") || 3));
const MAX_JOBS = 200;
const MAX_EXPLAINED = 25;
const SVG = "http://www.w3.org/2000/svg";
const PALETTE = ["#3867d6", "#20bf6b", "#f7b731", "#8854d0", "#eb3b5a", "#0fb9b1", "#fa8231", "#4b6584"];
const STATE_ORDER = { pending: 0, running: 1, failed: 2, rejected: 3, cancelled: 4, succeeded: 5 };

let timer = null;
let filter = "live";
let lastHistory = null;
let lastNodes = [];
const SIMULATED = "hetsched.io/simulated";
const colors = new Map();

// -- small DOM helpers ----------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "style") setStyle(el, v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// through the CSSOM: the page's Content-Security-Policy refuses inline style attributes
function setStyle(el, text) {
  for (const decl of text.split(";")) {
    const i = decl.indexOf(":");
    if (i > 0) el.style.setProperty(decl.slice(0, i).trim(), decl.slice(i + 1).trim());
  }
}

function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const $ = (id) => document.getElementById(id);

// a table cell whose content is one block: on a phone a cell is a grid of its label and this
function td(attrs, ...children) {
  return h("td", attrs, h("div", { class: "cell" }, ...children));
}

// device classes keep one color everywhere: the charts, the model chips
const CLASS_COLORS = { cpu: "#4b6584", gpu: "#3867d6", fpga: "#8854d0", npu: "#0fb9b1", tpu: "#fa8231" };

function colorOf(name) {
  const cls = name.startsWith("class:") ? CLASS_COLORS[name.slice(6)] : undefined;
  if (cls) return cls;
  if (!colors.has(name)) colors.set(name, PALETTE[colors.size % PALETTE.length]);
  return colors.get(name);
}

function pct(x) {
  return `${Math.round(100 * x)}%`;
}

function num(x) {
  return Number.isInteger(x) ? String(x) : x.toFixed(x < 10 ? 2 : 1).replace(/\.?0+$/, "");
}

function gib(mib) {
  return mib >= 1024 ? `${num(mib / 1024)} GiB` : `${mib} MiB`;
}

// "used / total" in the total's unit
function gibPair(used, total) {
  return total >= 1024 ? `${num(Math.round((10 * used) / 1024) / 10)} / ${gib(total)}` : `${used} / ${total} MiB`;
}

function ago(seconds) {
  if (seconds < 60) return `${Math.max(0, Math.round(seconds))}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ${Math.round(seconds % 60)}s`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h ${Math.round((seconds % 3600) / 60)}m`;
  return `${Math.floor(seconds / 86400)}d`;
}

function clock(t) {
  return new Date(t * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

function bar(fraction, cls, label) {
  const f = Math.max(0, Math.min(1, fraction));
  return h(
    "div",
    { class: `bar ${cls || ""}`, role: "meter", "aria-valuemin": 0, "aria-valuemax": 100, "aria-valuenow": Math.round(100 * f), "aria-label": label || "" },
    h("div", { class: "fill", style: `width:${(100 * f).toFixed(1)}%` }),
  );
}

// -- the API --------------------------------------------------------------------------------

class AuthError extends Error {}

async function api(path) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const answer = await fetch(path, { headers: { Authorization: `Bearer ${token}` }, cache: "no-store" });
  if (answer.status === 401) throw new AuthError("the token was refused");
  if (!answer.ok) throw new Error(`${path}: HTTP ${answer.status}`);
  return answer.json();
}

// -- sign in and out ------------------------------------------------------------------------

function showLogin(message) {
  stop();
  $("main").hidden = true;
  $("signout").hidden = true;
  $("login").hidden = false;
  $("summary").replaceChildren();
  $("login-error").textContent = message || "";
  setLive("not connected", "off");
  $("token").focus();
}

function showMain() {
  $("login").hidden = true;
  $("main").hidden = false;
  $("signout").hidden = false;
}

function stop() {
  if (timer !== null) clearTimeout(timer);
  timer = null;
}

function setLive(text, cls) {
  const live = $("live");
  live.textContent = text;
  live.className = `live ${cls}`;
}

async function refresh() {
  stop();
  try {
    const [nodes, queues, jobs, history, alerts, speeds] = await Promise.all([
      api("/v1/nodes"),
      api("/v1/queues"),
      firstPages(),
      api("/v1/history"),
      api("/v1/alerts"),
      api("/v1/speeds"),
    ]);
    const explained = await explain(jobs);
    const arrays = await arrayProgress(jobs);
    const counts = jobCounts(queues);
    showMain();
    renderAlerts(alerts);
    renderSummary(nodes, counts);
    lastNodes = nodes;
    renderCharts(history);
    renderNodes(nodes);
    renderQueues(queues);
    renderSpeeds(speeds);
    renderJobs(jobs, explained, counts, arrays);
    setLive(`live · ${clock(Date.now() / 1000)}`, "on");
  } catch (err) {
    if (err instanceof AuthError) {
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin("That token was refused. Check it and try again.");
      return;
    }
    setLive(`disconnected · retrying`, "err");
  }
  timer = setTimeout(refresh, REFRESH_MS);
}

// the first page of each kind of job shown, never the whole backlog: the service pages
// (limit and cursor) and the counts come from /v1/queues
async function firstPages() {
  const pages = [
    api(`/v1/jobs?state=running&limit=${MAX_JOBS}`),
    api(`/v1/jobs?state=pending&limit=${MAX_JOBS}`),
  ];
  if (filter === "all") pages.push(api(`/v1/jobs?state=succeeded,failed,cancelled,rejected&order=newest&limit=${MAX_JOBS}`));
  return (await Promise.all(pages)).flat();
}

function jobCounts(queues) {
  const out = {};
  for (const q of queues) for (const [state, n] of Object.entries(q.jobs || {})) out[state] = (out[state] || 0) + n;
  return out;
}

async function explain(jobs) {
  // pending jobs (why they wait), running ones stopped before (preempted by whom, or
  // displaced by which device, and when), and running elastic jobs (their counts over time)
  const pending = jobs
    .filter(
      (j) =>
        j.state === "pending" ||
        (j.state === "running" && (j.preemptions > 0 || j.run > 1 || j.min_replicas != null)),
    )
    .sort(newest)
    .slice(0, MAX_EXPLAINED);
  const answers = await Promise.all(
    pending.map((j) => api(`/v1/jobs/${encodeURIComponent(j.id)}/why`).catch(() => null)),
  );
  const out = new Map();
  answers.forEach((a) => a && out.set(a.id, a));
  return out;
}

// the elements of the arrays shown (counts by state): one GET each, for live arrays only
async function arrayProgress(jobs) {
  const shown = jobs.filter((j) => j.array && (j.state === "pending" || j.state === "running")).slice(0, MAX_EXPLAINED);
  const answers = await Promise.all(shown.map((j) => api(`/v1/jobs/${encodeURIComponent(j.id)}`).catch(() => null)));
  const out = new Map();
  answers.forEach((a) => a && a.elements && out.set(a.id, a.elements));
  return out;
}

// -- summary --------------------------------------------------------------------------------

// the banners: a wedged loop first (nothing is scheduled), then jobs held back after failed
// turns, the loop's and the overcommit guard's latest alerts, and devices gone or unhealthy
// with the watcher's reason
const MAX_ALERTS = 5;

function renderAlerts(alerts) {
  const rows = [];
  const row = (cls, title, text) =>
    h("div", { class: `alert ${cls}`, role: cls === "wedge" ? "alert" : null }, h("strong", {}, title), " ", text);
  if (alerts.wedged) rows.push(row("wedge", "Scheduling is stopped:", alerts.wedged));
  const named = (id) => {
    const j = (alerts.jobs || {})[id];
    return j ? `${j.name} (${j.user}, ${id})` : id;
  };
  const held = Object.entries(alerts.held || {});
  if (held.length) rows.push(row("warn", `${held.length} job${held.length === 1 ? "" : "s"} held back:`, held.slice(0, MAX_ALERTS).map(([id, why]) => `${named(id)}: ${why}`).join("; ")));
  // while wedged, the first banner says it: the retries' repeated "wedged" alerts would only echo it
  const shown = (a) => a.kind !== "recovered" && !(alerts.wedged && a.kind === "wedged");
  for (const a of (alerts.loop || []).filter(shown).slice(-MAX_ALERTS)) {
    const jobs = (a.jobs || []).length ? ` (${a.jobs.slice(0, 3).map(named).join("; ")})` : "";
    rows.push(row("warn", `Loop ${a.kind.replace("_", " ")} · ${clock(a.time)}:`, a.message + jobs));
  }
  for (const a of (alerts.guard || []).slice(-MAX_ALERTS)) {
    const job = a.job_id ? `Job ${named(a.job_id)} · ` : "";
    rows.push(row("warn", `Overcommit guard · ${job}${clock(a.time)}:`, a.message));
  }
  for (const d of alerts.devices || []) {
    const when = d.since ? ` · since ${clock(d.since)}` : "";
    rows.push(row("warn", `Device ${d.id} (${d.model || d.class})${when}:`, d.reason || (d.present ? d.health : "removed")));
  }
  $("alerts").replaceChildren(...rows);
  $("alerts").hidden = rows.length === 0;
}

function renderSummary(nodes, counts) {
  const active = nodes.filter((n) => n.active);
  const devices = active.flatMap((n) => n.devices);
  const healthy = devices.filter((d) => d.healthy).length;
  const count = (state) => counts[state] || 0;
  const stat = (value, label, cls) =>
    h("div", { class: `stat ${cls || ""}` }, h("strong", {}, value), h("span", {}, label));
  $("summary").replaceChildren(
    stat(active.length, active.length === 1 ? "node" : "nodes"),
    stat(devices.length === healthy ? devices.length : `${healthy}/${devices.length}`, "devices", devices.length === healthy ? "" : "warn"),
    stat(count("running"), "running"),
    stat(count("pending"), "pending", count("pending") ? "attn" : ""),
  );
}

// -- charts ---------------------------------------------------------------------------------

function niceMax(v) {
  if (v <= 4) return 4;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function lineChart(el, legendEl, series, { yMax, yFormat, empty }) {
  const width = Math.max(280, el.clientWidth || 600);
  const height = 190;
  const m = { l: 44, r: 14, t: 10, b: 24 };
  const times = series.flatMap((x) => x.points.map((p) => p[0]));
  if (!times.length) {
    el.replaceChildren(h("p", { class: "empty" }, empty));
    legendEl.replaceChildren();
    return;
  }
  let t1 = Math.max(...times);
  let t0 = Math.min(...times);
  if (t1 - t0 < 20) t0 = t1 - 20;
  const top = yMax ?? niceMax(Math.max(1, ...series.flatMap((x) => x.points.map((p) => p[1]))));
  const X = (t) => m.l + ((t - t0) / (t1 - t0)) * (width - m.l - m.r);
  const Y = (v) => m.t + (1 - v / top) * (height - m.t - m.b);
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img", class: "plot" });
  for (let i = 0; i <= 4; i++) {
    const v = (top * i) / 4;
    svg.append(
      s("line", { x1: m.l, x2: width - m.r, y1: Y(v), y2: Y(v), class: i ? "grid" : "axis" }),
      s("text", { x: m.l - 8, y: Y(v) + 4, class: "tick", "text-anchor": "end" }, yFormat(v)),
    );
  }
  const steps = width < 520 ? 1 : 3;
  for (let i = 0; i <= steps; i++) {
    const t = t0 + ((t1 - t0) * i) / steps;
    const anchor = i === 0 ? "start" : i === steps ? "end" : "middle";
    svg.append(s("text", { x: X(t), y: height - 6, class: "tick", "text-anchor": anchor }, clock(t)));
  }
  for (const line of series) {
    if (!line.points.length) continue;
    const d = line.points.map((p, i) => `${i ? "L" : "M"}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join("");
    if (line.fill) {
      const first = line.points[0][0];
      const last = line.points[line.points.length - 1][0];
      svg.append(
        s("path", { d: `${d}L${X(last).toFixed(1)},${Y(0)}L${X(first).toFixed(1)},${Y(0)}Z`, fill: line.color, class: "area" }),
      );
    }
    svg.append(s("path", { d, stroke: line.color, class: `line ${line.dashed ? "dashed" : ""}` }));
    const [lt, lv] = line.points[line.points.length - 1];
    svg.append(s("circle", { cx: X(lt), cy: Y(lv), r: 3.5, fill: line.color, class: "dot" }));
  }
  el.replaceChildren(svg);
  legendEl.replaceChildren(
    ...series.map((line) => {
      const last = line.points.length ? line.points[line.points.length - 1][1] : 0;
      return h(
        "span",
        { class: "key" },
        h("i", { class: line.dashed ? "dashed" : "", style: `--c:${line.color}` }),
        line.name,
        h("b", {}, yFormat(last)),
      );
    }),
  );
}

function renderCharts(history) {
  lastHistory = history;
  const samples = history.samples;
  const classes = [...new Set(samples.flatMap((x) => Object.keys(x.allocation)))].sort();
  const measured = [...new Set(samples.flatMap((x) => Object.keys(x.utilization)))].sort();
  const alloc = classes.map((c) => ({
    name: c,
    color: colorOf(`class:${c}`),
    fill: true,
    points: samples.filter((x) => c in x.allocation).map((x) => [x.time, 100 * x.allocation[c]]),
  }));
  for (const c of measured) {
    alloc.push({
      name: `${c} measured`,
      color: colorOf(`class:${c}`),
      dashed: true,
      points: samples.filter((x) => c in x.utilization).map((x) => [x.time, 100 * x.utilization[c]]),
    });
  }
  lineChart($("chart-alloc"), $("legend-alloc"), alloc, {
    yMax: 100,
    yFormat: (v) => `${Math.round(v)}%`,
    empty: "No samples yet.",
  });
  // a class nothing measures says so, rather than drawing a flat 0 %
  for (const c of classes.filter((x) => x !== "cpu" && !measured.includes(x))) {
    const devices = lastNodes.flatMap((n) => n.devices.filter((d) => d.class === c).map(() => n));
    const simulated = devices.length && devices.every((n) => SIMULATED in (n.labels || {}));
    $("legend-alloc").append(
      h("span", { class: "key unmeasured", "data-class": c }, `${c} utilization: not measured${simulated ? " (simulated devices)" : ""}`),
    );
  }
  const queues = [...new Set(samples.flatMap((x) => Object.keys(x.pending)))].sort();
  const waiting = queues.map((q) => ({
    name: q,
    color: colorOf(`queue:${q}`),
    points: samples.map((x) => [x.time, x.pending[q] || 0]),
  }));
  waiting.push({ name: "running", color: "#8a94a6", dashed: true, points: samples.map((x) => [x.time, x.running]) });
  lineChart($("chart-queue"), $("legend-queue"), waiting, {
    yFormat: (v) => num(Math.round(v * 10) / 10),
    empty: "No samples yet.",
  });
}

// -- nodes ----------------------------------------------------------------------------------

// a node's network domains, broadest first ("b1 / r3"); nodes are grouped by them
const domainOf = (node) => Object.values(node.domains || {}).join(" / ");

function renderNodes(nodes) {
  const sorted = [...nodes].sort(
    (a, b) => domainOf(a).localeCompare(domainOf(b)) || b.devices.length - a.devices.length || a.name.localeCompare(b.name),
  );
  const models = new Set(nodes.flatMap((n) => n.devices.map((d) => `${d.class} ${d.model}`)));
  $("nodes-hint").textContent = `${nodes.length} nodes · ${models.size} device models`;
  $("nodes").replaceChildren(
    ...sorted.map((node) => {
      const cpuUsed = (node.cpu_milli - node.cpu_free_milli) / Math.max(1, node.cpu_milli);
      const memUsed = (node.memory_mib - node.memory_free_mib) / Math.max(1, node.memory_mib);
      const simulated = SIMULATED in (node.labels || {});
      const labels = Object.entries(node.labels || {})
        .filter(([k]) => k !== SIMULATED)
        .map(([k, v]) => h("span", { class: "tag" }, `${k}=${v}`));
      if (simulated) labels.unshift(h("span", { class: "tag sim", title: "its devices exist on paper: their utilization is not measured" }, "simulated"));
      return h(
        "article",
        { class: `node ${node.active ? "" : "inactive"}`, "data-node": node.name },
        h(
          "header",
          {},
          h("h3", {}, node.name),
          node.domains ? h("span", { class: "badge", title: "network domains, broadest first" }, domainOf(node)) : null,
          node.active ? null : h("span", { class: "badge bad" }, "removed"),
          node.stranded
            ? h("span", { class: "badge stranded", title: "free accelerators without the CPU or memory their typical job needs" }, `${node.stranded} stranded`)
            : null,
          h("div", { class: "tags" }, labels),
        ),
        h(
          "div",
          { class: "resources" },
          h("div", { class: "res" }, h("span", { class: "res-name" }, "CPU"), bar(cpuUsed, "cpu", "CPU allocated"),
            h("span", { class: "res-val" }, `${num((node.cpu_milli - node.cpu_free_milli) / 1000)} / ${num(node.cpu_milli / 1000)}`)),
          h("div", { class: "res" }, h("span", { class: "res-name" }, "Memory"), bar(memUsed, "mem", "memory allocated"),
            h("span", { class: "res-val" }, gibPair(node.memory_mib - node.memory_free_mib, node.memory_mib))),
        ),
        node.devices.length
          ? h(
              "ul",
              { class: "devices" },
              node.devices.map((d) => {
                const used = (1000 - d.free_share) / 1000;
                return h(
                  "li",
                  { class: `device ${d.healthy ? "" : "unhealthy"}`, "data-device": d.id, title: `${d.id} (${d.vendor} ${d.model})` },
                  h("span", { class: `health ${d.healthy ? "ok" : "bad"}`, title: d.healthy ? "healthy" : "unhealthy" }),
                  h("span", { class: "model", style: `--c:${colorOf(`class:${d.class}`)}` }, d.model || d.class),
                  h("span", { class: "dclass" }, d.class),
                  bar(used, d.healthy ? "dev" : "dev bad", `${d.id} allocated`),
                  h("span", { class: "dval" }, d.healthy ? pct(used) : "unhealthy"),
                );
              }),
            )
          : h("p", { class: "no-devices" }, "CPU only"),
      );
    }),
  );
}

// -- queues ---------------------------------------------------------------------------------

function quotaCell(name, r) {
  const unit = name === "memory" ? (v) => (v ? gib(v) : "0") : name === "cpu" ? (v) => num(v / 1000) : num;
  if (r.quota === null || r.quota === undefined) {
    return h("div", { class: "quota" }, h("span", { class: "qname" }, name), h("span", { class: "qtext" }, `${unit(r.used)} used · no quota`));
  }
  const total = Math.max(r.quota, r.used, 1e-9);
  const within = Math.min(r.used, r.quota);
  const seg = (v, cls) => h("span", { class: `seg ${cls}`, style: `width:${((100 * v) / total).toFixed(1)}%` });
  const parts = [`${unit(r.used)} / ${unit(r.quota)}`];
  if (r.borrowed > 0) parts.push(`${unit(r.borrowed)} borrowed`);
  parts.push(`${unit(r.free)} free`);
  return h(
    "div",
    { class: "quota" },
    h("span", { class: "qname" }, name),
    h("div", { class: "stack", role: "img", "aria-label": `${name}: ${parts.join(", ")}` }, seg(within, "used"), seg(r.borrowed, "borrowed"), seg(r.free, "free")),
    h("span", { class: "qtext" }, parts.join(" · ")),
  );
}

function renderQueues(queues) {
  const rows = queues.map((q) => {
    const jobs = q.jobs || {};
    const resources = Object.entries(q.resources || {});
    return h(
      "tr",
      { "data-queue": q.name },
      td({ class: "qcol", "data-label": "Queue" }, h("strong", {}, q.name), h("div", { class: "muted" }, q.users ? q.users.join(", ") : "everyone")),
      td(
        { class: "counts", "data-label": "Jobs" },
        h("span", { class: "badge pending" }, `${jobs.pending || 0} pending`),
        h("span", { class: "badge running" }, `${jobs.running || 0} running`),
      ),
      td({ "data-label": "Quota" }, h("div", { class: "quotas" }, resources.length ? resources.map(([n, r]) => quotaCell(n, r)) : h("span", { class: "muted" }, "no quota"))),
    );
  });
  $("queues").replaceChildren(
    h("table", { class: "table" }, h("thead", {}, h("tr", {}, h("th", {}, "Queue"), h("th", {}, "Jobs"), h("th", {}, "Quota"))), h("tbody", {}, rows)),
  );
}

// what the service learned of job types' speeds from progress reports (docs/heterogeneity.md)
function renderSpeeds(speeds) {
  const estimates = speeds.estimates || [];
  const listed = new Set(speeds.profile_job_types || []);
  if (!estimates.length) {
    $("speeds").replaceChildren(h("p", { class: "muted" }, "No progress reported yet: every device model counts as equally fast for job types the profile's table does not list."));
    return;
  }
  const rows = estimates.map((e) =>
    h(
      "tr",
      { "data-job-type": e.job_type, "data-model": e.model },
      td({ "data-label": "Job type" }, e.job_type, listed.has(e.job_type) ? h("div", { class: "muted" }, "placement uses the profile's table") : ""),
      td({ "data-label": "Model" }, e.model),
      td({ class: "num", "data-label": "Steps/s" }, num(e.steps_per_second)),
      td({ class: "num", "data-label": "Intervals" }, String(e.samples)),
      td({ "data-label": "Updated" }, `${ago(Date.now() / 1000 - e.updated_at)} ago`),
    ),
  );
  $("speeds").replaceChildren(
    h("table", { class: "table" }, h("thead", {}, h("tr", {}, h("th", {}, "Job type"), h("th", {}, "Model"), h("th", {}, "Steps/s per device"), h("th", {}, "Intervals"), h("th", {}, "Updated"))), h("tbody", {}, rows)),
  );
}

// -- jobs -----------------------------------------------------------------------------------

function resources(job) {
  if (job.groups) return job.groups.map((g) => `${g.name}: ${resources({ resources: g.resources, replicas: g.replicas })}`).join("; ");
  const r = job.resources || {};
  const parts = [];
  if (r.cpu) parts.push(`${r.cpu} CPU`);
  if (r.memory) parts.push(String(r.memory));
  for (const d of r.devices || []) {
    const count = d.count ?? 1;
    const what = d.model ? `${d.model}` : d.class;
    parts.push(d.share && d.share < 1000 ? `${d.share / 10}% of 1 ${what}` : `${count}× ${what}`);
  }
  if ((job.replicas || 1) > 1) parts.push(`× ${job.replicas} tasks`);
  return parts.join(" · ");
}

// "preemption: no job may be preempted for it" matters only where some running job has a
// lower priority (a user would wonder why it is not preempted); another preemption line
// (waiting for its victims) always does. It comes after the reasons that say what is missing.
function preemptionMatters(line, job, jobs) {
  if (!/no job may be preempted/.test(line)) return true;
  return jobs.some((j) => j.state === "running" && j.priority < job.priority);
}

function explanationBlock(why, job, jobs) {
  const e = why && why.explanation;
  if (!e) return null;
  const all = e.reasons || [];
  const isPreemption = (x) => /^preemption: /.test(x);
  const reasons = all.filter((x) => !isPreemption(x));
  for (const r of e.rejections || []) reasons.push(`${r.reason}${r.nodes ? ` (${r.nodes} node${r.nodes === 1 ? "" : "s"})` : ""}`);
  reasons.push(...all.filter((x) => isPreemption(x) && preemptionMatters(x, job, jobs)));
  return h(
    "div",
    { class: "explanation" },
    h("div", { class: "summary-line" }, e.summary),
    reasons.length ? h("ul", {}, reasons.slice(0, 6).map((x) => h("li", {}, x))) : null,
    (e.suggestions || []).length ? h("div", { class: "suggest" }, `Would fit: ${e.suggestions.join("; ")}`) : null,
    e.position ? h("div", { class: "muted" }, `#${e.position.index} in queue ${e.position.queue}`) : null,
  );
}

// what happened to the job: the job that preempted it, the device whose loss displaced it
function storyLines(why) {
  if (!why) return [];
  const out = [];
  const p = why.preempted_by;
  if (p) {
    const who = p.name ? `${p.name} (${p.user}, priority ${p.priority})` : p.id;
    out.push(h("div", { class: "story preempted" }, `Preempted by ${who} at ${clock(p.time)}`));
  }
  const d = why.displaced_by;
  if (d) out.push(h("div", { class: "story displaced" }, `Displaced: device ${d.device} ${d.reason} at ${clock(d.time)}`));
  return out;
}

// an elastic job's bounds and its count over time (each start and each resize done)
function countLine(job, why) {
  if (job.min_replicas == null) return "";
  const counts = ((why && why.counts) || []).map((c) => `${c.count} (${clock(c.time)})`);
  const line = `elastic ${job.min_replicas}–${job.replicas} tasks`;
  return counts.length ? `${line} · count ${counts.join(" → ")}` : line;
}

// pending jobs in line order (oldest first); the others newest first
function newest(a, b) {
  if (a.state === "pending") return a.submitted_at - b.submitted_at;
  const at = (j) => j.ended_at || j.started_at || j.submitted_at;
  return at(b) - at(a);
}

// a job's last checkpoint and the work its stopped runs lost (docs/checkpointing.md)
function checkpointLine(job) {
  const parts = [];
  if (job.checkpoint) {
    const step = job.checkpoint.step != null ? ` step ${job.checkpoint.step}` : "";
    parts.push(`checkpoint:${step} (run ${job.checkpoint.run})`);
  }
  if (job.lost_work_s > 0 || job.checkpoint || job.migrations) parts.push(`lost work ${job.lost_work_s.toFixed(1)} s`);
  if (job.migrations) parts.push(`moved ${job.migrations}×`);
  return parts.join(" · ");
}

// what a job waits for (a dependency chain, by name where the job is shown) and where an
// element belongs (docs/workflows.md)
function workflowLine(job, names) {
  const parts = [];
  const named = (id) => names.get(id) || id;
  if ((job.after || []).length) {
    parts.push(`after ${job.after.map((a) => named(a.job) + (a.state && a.state !== "succeeded" ? ` (${a.state})` : "")).join(", ")}`);
  }
  if (job.array_of) parts.push(`element ${job.array_index} of ${named(job.array_of)}`);
  return parts.join(" · ");
}

// an array's progress: a bar of the elements ended, and the counts by state
function arrayBlock(job, elements) {
  if (!job.array) return null;
  if (!elements) return h("div", { class: "muted" }, `array ${job.array}`);
  const done = ["succeeded", "failed", "cancelled", "rejected"].reduce((n, k) => n + (elements.counts[k] || 0), 0);
  const counts = Object.entries(elements.counts).map(([k, n]) => `${n} ${k}`).join(" · ");
  const failed = elements.unsuccessful.length ? ` · failed: ${elements.unsuccessful.slice(0, 10).join(", ")}` : "";
  return h(
    "div",
    { class: "array-progress" },
    bar(done / Math.max(1, elements.size), "", `${done} of ${elements.size} elements done`),
    h("div", { class: "muted" }, `array ${job.array}: ${done} of ${elements.size} done · ${counts}${failed}`),
  );
}

function renderJobs(jobs, explained, counts, arrays) {
  const names = new Map(jobs.map((j) => [j.id, j.name]));
  const now = Date.now() / 1000;
  const shown = jobs
    .filter((j) => filter === "all" || j.state === "pending" || j.state === "running")
    .sort((a, b) => (STATE_ORDER[a.state] ?? 9) - (STATE_ORDER[b.state] ?? 9) || newest(a, b))
    .slice(0, MAX_JOBS);
  if (!shown.length) {
    $("jobs").replaceChildren(h("p", { class: "empty" }, filter === "all" ? "No jobs yet." : "Nothing pending or running."));
    return;
  }
  const rows = shown.map((job) => {
    const since = job.state === "running" ? job.started_at : job.state === "pending" ? job.submitted_at : job.ended_at;
    const why = explained.get(job.id);
    const detail =
      job.state === "pending"
        ? explanationBlock(why, job, jobs) || h("span", { class: "muted" }, job.pending_reason || job.reason || "waiting")
        : h("span", { class: "muted" }, job.reason || "");
    const saved = [checkpointLine(job), countLine(job, explained.get(job.id))].filter((x) => x).join(" · ");
    const flow = workflowLine(job, names);
    return h(
      "tr",
      { "data-job": job.id, class: `job ${job.state}` },
      td({ "data-label": "State" }, h("span", { class: `badge ${job.state}` }, job.state)),
      td({ class: "jname", "data-label": "Job" }, h("strong", {}, job.name), h("div", { class: "mono muted" }, job.id)),
      td({ "data-label": "User" }, job.user),
      td({ "data-label": "Queue" }, job.queue),
      td({ class: "res-col", "data-label": "Asks for" }, resources(job)),
      td({ class: "num", "data-label": "For" }, since ? ago(now - since) : ""),
      td(
        { class: "detail", "data-label": "Why" },
        storyLines(why),
        detail,
        arrayBlock(job, arrays.get(job.id)) || "",
        flow ? h("div", { class: "muted workflow" }, flow) : "",
        saved ? h("div", { class: "muted" }, saved) : "",
      ),
    );
  });
  const live = (counts.pending || 0) + (counts.running || 0);
  const more = filter === "live" && shown.length >= MAX_JOBS && live > shown.length ? h("p", { class: "muted more" }, `The first ${shown.length} of ${live} pending or running jobs (hetsched jobs --all-pages lists them all).`) : null;
  $("jobs").replaceChildren(
    h(
      "table",
      { class: "table jobs" },
      h("thead", {}, h("tr", {}, ["State", "Job", "User", "Queue", "Asks for", "For", "Why"].map((x) => h("th", {}, x)))),
      h("tbody", {}, rows),
    ),
    ...(more ? [more] : []),
  );
}

// -- start ----------------------------------------------------------------------------------

function start() {
  // a link may carry the token in its fragment (never sent to the server): keep it, drop it
  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.get("token")) {
    sessionStorage.setItem(TOKEN_KEY, hash.get("token"));
    history.replaceState(null, "", location.pathname + location.search);
  }
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("token").value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("token").value = "";
    $("login-error").textContent = "";
    refresh();
  });
  $("signout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin("");
  });
  for (const chip of document.querySelectorAll("[data-filter]")) {
    chip.addEventListener("click", () => {
      filter = chip.dataset.filter;
      for (const c of document.querySelectorAll("[data-filter]")) c.classList.toggle("on", c === chip);
      refresh();
    });
  }
  // charts are drawn at the container's width: redraw them at once when it changes
  window.addEventListener("resize", () => lastHistory && !$("main").hidden && renderCharts(lastHistory));
  if (sessionStorage.getItem(TOKEN_KEY)) refresh();
  else showLogin("");
}

document.addEventListener("DOMContentLoaded", start);
