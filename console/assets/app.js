// Sluice's operator console: polls the JSON API every second and renders
// the operations list, one operation's page, or the schedules. Every value
// from the API is set as text, never as HTML.
"use strict";

const POLL_MS = 1000;
const main = document.getElementById("main");
const statusLine = document.getElementById("status");
const samples = new Map(); // operation id -> [{t, rows}] over the last 30 s
let session = null; // {name, controls, csrf} from /api/session

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "onclick") node.addEventListener("click", value);
    else if (key === "style") node.style.cssText = value; // CSSOM: allowed by the page's policy, unlike the attribute
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// Replaces the page's content with `children` (skipping absent ones).
function show(...children) {
  main.replaceChildren(...children.filter((c) => c !== null && c !== undefined));
}

async function api(path, method) {
  const headers = { "Accept": "application/json" };
  if (session && session.csrf && method === "POST") headers["X-CSRF-Token"] = session.csrf;
  const response = await fetch(path, { method: method || "GET", headers, credentials: "same-origin" });
  if (response.status === 401) { location.href = "/login"; throw new Error("sign in first"); }
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const message = body && body.error ? body.error.message : response.statusText;
    throw new Error(message);
  }
  return body;
}

const fmt = new Intl.NumberFormat();
function number(n) { return n === null || n === undefined ? "–" : fmt.format(Math.round(n)); }
function when(ms) { return ms ? new Date(ms).toLocaleString() : "–"; }
function span(seconds) {
  if (seconds === null || !isFinite(seconds)) return "–";
  if (seconds < 90) return Math.round(seconds) + " s";
  if (seconds < 5400) return Math.round(seconds / 60) + " min";
  if (seconds < 172800) return (seconds / 3600).toFixed(1) + " h";
  return Math.round(seconds / 86400) + " d";
}

// Rows per second over the last 30 s of polls, and the ETA it gives.
function pace(op) {
  const now = Date.now();
  const list = (samples.get(op.id) || []).filter((s) => now - s.t < 30000);
  if (!list.length || list[list.length - 1].rows !== op.rows_done || now - list[list.length - 1].t > 2000) {
    list.push({ t: now, rows: op.rows_done });
  }
  samples.set(op.id, list);
  if (op.status !== "running" || list.length < 2) return { rate: null, eta: null };
  const first = list[0], last = list[list.length - 1];
  const rate = (last.rows - first.rows) / Math.max((last.t - first.t) / 1000, 0.001);
  const left = op.estimated_rows === null ? null : Math.max(op.estimated_rows - op.rows_done, 0);
  return { rate, eta: rate > 0 && left !== null ? left / rate : null };
}

function badge(status) { return el("span", { class: "badge s-" + status, "data-status": status }, status); }

function health(op) {
  if (op.health === "normal") return el("span", {}, "normal");
  const label = op.health === "throttled" ? "throttled " + op.health_percent + " %"
    : op.health === "unknown" ? "unknown, " + (op.health_percent === 0 ? "stopped" : op.health_percent + " %") : "stopped";
  return el("span", { class: "h-" + (op.health === "unknown" ? "stopped" : op.health) }, op.health_reason ? label + ": " + op.health_reason : label);
}

function progress(op) {
  const percent = op.percent_done === null ? 0 : op.percent_done;
  return el("div", {}, el("div", { class: "bar" }, el("div", { style: "width:" + Math.min(percent, 100).toFixed(1) + "%" })),
    el("small", { class: "muted" }, op.percent_done === null ? "–" : percent.toFixed(1) + " %"));
}

async function listView() {
  // The newest 200, and every operation still in play however old.
  const [newest, running, paused, failed, switches] = await Promise.all([
    api("/api/operations?order=newest&limit=200"), api("/api/operations?status=running&limit=1000"),
    api("/api/operations?status=paused&limit=1000"), api("/api/operations?status=failed&limit=1000"), api("/api/switches"),
  ]);
  const byId = new Map();
  for (const op of [...newest, ...running, ...paused, ...failed]) byId.set(op.id, op);
  const ops = [...byId.values()].sort((a, b) => b.id - a.id);
  const rows = ops.map((op) => {
    const { rate, eta } = pace(op);
    return el("tr", { class: "link", "data-operation": op.id, onclick: () => { location.hash = "#/operations/" + op.id; } },
      el("td", { class: "num" }, op.id), el("td", {}, op.kind), el("td", { class: "wide" }, op.table, op.target ? el("small", { class: "muted", "data-target": op.target }, " @ " + op.target) : null),
      el("td", {}, badge(op.status)), el("td", {}, progress(op)),
      el("td", { class: "num" }, number(op.rows_done), op.estimated_rows !== null ? el("small", { class: "muted" }, " / " + number(op.estimated_rows)) : null),
      el("td", { class: "num" }, rate === null ? "–" : number(rate)), el("td", { class: "num" }, span(eta)),
      el("td", {}, health(op)), el("td", { class: "wide" }, op.node || "–"),
      el("td", { class: "wide" }, span((Date.now() - op.created_at) / 1000)));
  });
  show(
    el("h1", {}, "Operations"),
    switches.length ? el("p", { class: "error" }, "Kill switches set: ", switches.map((s) => (s.scope === "*" ? "every kind" : s.scope) + " (" + s.reason + ")").join(", ")) : null,
    ops.length ? el("table", {}, el("thead", {}, el("tr", {}, ["ID", "Kind", "Table", "Status", "Done", "Rows", "Rows/s", "ETA", "Health", "Node", "Age"].map((h, i) =>
      el("th", { class: [2, 9, 10].includes(i) ? "wide" : (i === 5 || i === 6 || i === 7 ? "num" : null) }, h)))), el("tbody", {}, rows))
      : el("p", { class: "muted" }, "No operations. Enqueue one with `sluice enqueue`."));
}

const ALLOWED = {
  pause: ["pending", "running"], resume: ["paused"], cancel: ["pending", "running", "paused", "failed"], retry: ["failed"],
};

function confirmed(text) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
  });
}

async function control(op, action) {
  if (!(await confirmed(action[0].toUpperCase() + action.slice(1) + " operation " + op.id + " (" + op.kind + " on " + op.table + ")?"))) return;
  try {
    await api("/api/operations/" + op.id + "/" + action, "POST");
    statusLine.textContent = action + ": operation " + op.id;
  } catch (error) {
    statusLine.textContent = action + " refused: " + error.message;
  }
  render();
}

// A revert puts back what an operation run with undo changed; it is
// enqueued as an operation of its own, shown once enqueued.
function revertible(op) {
  return op.undo && op.kind !== "revert" && ["finished", "cancelled"].includes(op.status);
}

async function revert(op) {
  if (!(await confirmed("Revert operation " + op.id + " (" + op.kind + " on " + op.table + ")? Rows changed since it ran are left alone and listed."))) return;
  try {
    const enqueued = await api("/api/operations/" + op.id + "/revert", "POST");
    statusLine.textContent = "revert: operation " + enqueued.id + " puts back operation " + op.id;
    location.hash = "#/operations/" + enqueued.id;
  } catch (error) {
    statusLine.textContent = "revert refused: " + error.message;
    render();
  }
}

// Rows done over time from the event log, with throttled, stopped and
// paused periods shaded and the planned batch size as a second line.
function chart(op, events) {
  const W = 1000, H = 220, P = 8;
  const start = op.started_at || op.created_at;
  const end = op.finished_at || Date.now();
  const x = (t) => P + ((t - start) / Math.max(end - start, 1)) * (W - 2 * P);
  let rows = 0;
  const done = [[start, 0]], sizes = [], bands = [];
  let held = null;
  for (const e of events) {
    if (e.kind === "batch_succeeded") { rows += e.rows; done.push([e.recorded_at, rows]); }
    if (e.kind === "batch_planned") sizes.push([e.recorded_at, e.size]);
    const state = e.kind === "throttled" ? (e.health === "normal" ? null : e.health)
      : e.kind === "paused" ? "paused" : e.kind === "resumed" ? null : undefined;
    if (state !== undefined) {
      if (held) bands.push([held.t, e.recorded_at, held.state]);
      held = state ? { t: e.recorded_at, state } : null;
    }
  }
  if (held) bands.push([held.t, end, held.state]);
  done.push([end, rows]);
  if (sizes.length) sizes.push([end, sizes[sizes.length - 1][1]]);
  const top = Math.max(rows, op.estimated_rows || 0, 1);
  const y = (v) => H - P - (v / top) * (H - 2 * P);
  const sizeTop = Math.max(1, ...sizes.map((s) => s[1]));
  const ys = (v) => H - P - (v / sizeTop) * (H - 2 * P) * 0.5;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("class", "chart");
  const add = (tag, attrs) => {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    svg.append(node);
  };
  const colour = { throttled: "#fbe3a6", stopped: "#f8c4c4", paused: "#e2e6ee" };
  for (const [from, to, state] of bands) add("rect", { x: x(from), y: 0, width: Math.max(x(to) - x(from), 1), height: H, fill: colour[state] || "#eee" });
  if (sizes.length) add("polyline", { points: sizes.map(([t, v]) => x(t) + "," + ys(v)).join(" "), fill: "none", stroke: "#9aa5b5", "stroke-dasharray": "4 3", "stroke-width": 1.5 });
  add("polyline", { points: done.map(([t, v]) => x(t) + "," + y(v)).join(" "), fill: "none", stroke: "#2b6cb0", "stroke-width": 2.5 });
  const label = (text, attrs) => {
    const node = document.createElementNS("http://www.w3.org/2000/svg", "text");
    for (const [k, v] of Object.entries(Object.assign({ "font-size": 13, fill: "#6b7585" }, attrs))) node.setAttribute(k, v);
    node.textContent = text;
    svg.append(node);
  };
  label(number(top) + " rows", { x: P + 4, y: 18 });
  return el("div", {}, svg, el("div", { class: "legend muted" },
    el("span", {}, el("i", { style: "background:#2b6cb0" }), "rows done"), el("span", {}, el("i", { style: "background:#9aa5b5" }), "batch size"),
    el("span", {}, el("i", { style: "background:#fbe3a6" }), "throttled"), el("span", {}, el("i", { style: "background:#f8c4c4" }), "stopped"),
    el("span", {}, el("i", { style: "background:#e2e6ee" }), "paused"),
    el("span", {}, new Date(start).toLocaleTimeString() + " – " + new Date(end).toLocaleTimeString())));
}

// A fleet: how far it is as a whole, then a line per target.
function fleet(op) {
  const members = op.fleet_operations;
  const finished = members.filter((m) => m.status === "finished").length;
  const rows = members.reduce((sum, m) => sum + m.rows_done, 0);
  const failed = members.filter((m) => m.status === "failed").map((m) => m.target);
  return el("section", { id: "fleet" },
    el("h2", {}, "Fleet"),
    el("p", { id: "fleet-summary" }, finished + " of " + members.length + " targets finished, " + number(rows) + " rows",
      failed.length ? el("span", { class: "error" }, " · failed: " + failed.join(", ")) : null),
    el("table", {}, el("thead", {}, el("tr", {}, ["Target", "ID", "Status", "Done", "Rows", "Health"].map((h) => el("th", {}, h)))),
      el("tbody", {}, members.map((m) => el("tr", { class: "link", "data-fleet-target": m.target, onclick: () => { location.hash = "#/operations/" + m.id; } },
        el("td", {}, m.target), el("td", { class: "num" }, m.id), el("td", {}, badge(m.status)),
        el("td", { class: "num" }, m.percent_done === null ? "–" : m.percent_done.toFixed(1) + " %"),
        el("td", { class: "num" }, number(m.rows_done)),
        el("td", {}, m.health + (m.health_reason ? " (" + m.health_reason + ")" : "")))))));
}

async function operationView(id) {
  const [op, events, batches] = await Promise.all([
    api("/api/operations/" + id), api("/api/operations/" + id + "/events"), api("/api/operations/" + id + "/batches"),
  ]);
  const { rate, eta } = pace(op);
  const card = (k, v, attrs) => el("div", { class: "card" }, el("div", { class: "k" }, k), el("div", Object.assign({ class: "v" }, attrs || {}), v));
  show(
    el("h1", {}, "Operation " + op.id + " · " + op.kind + " on " + op.table + " ", badge(op.status)),
    el("div", { class: "cards" },
      card("status", op.status, { id: "op-status" }), card("done", op.percent_done === null ? "–" : op.percent_done.toFixed(1) + " %", { id: "op-percent" }),
      card("rows", number(op.rows_done) + (op.estimated_rows !== null ? " / " + number(op.estimated_rows) : ""), { id: "op-rows" }),
      card("rows/s", rate === null ? "–" : number(rate)), card("ETA", span(eta)), card("health", health(op)),
      card("latency", op.latency ? op.latency.says : "–", { id: "op-latency", class: "v" + (op.latency && op.latency.over_budget ? " h-throttled" : "") }),
      card("batches", number(op.batches_succeeded) + " / " + number(op.batches_planned)), card("node", op.node || "–"),
      op.target ? card("target", op.target, { id: "op-target", title: op.target_url }) : null),
    el("div", { class: "actions" }, Object.keys(ALLOWED).map((action) =>
      el("button", { "data-action": action, class: action === "cancel" ? "danger" : null, disabled: !session.controls || !ALLOWED[action].includes(op.status), onclick: () => control(op, action) },
        action[0].toUpperCase() + action.slice(1))),
      op.undo ? el("button", { "data-action": "revert", disabled: !session.controls || !revertible(op), onclick: () => revert(op) }, "Revert") : null),
    op.reverts ? el("p", {}, "Puts back what ", el("a", { href: "#/operations/" + op.reverts }, "operation " + op.reverts), " changed.") : null,
    op.last_error ? el("div", { class: "error" }, el("strong", {}, "Last error: "), op.last_error) : null,
    op.fleet_operations ? fleet(op) : null,
    el("h2", {}, "Progress"), chart(op, events),
    el("h2", {}, "Batches"),
    el("table", {}, el("thead", {}, el("tr", {}, ["#", "Status", "Attempts", "Rows", "Took", "Node", "Error"].map((h) => el("th", {}, h)))),
      el("tbody", {}, batches.slice(-50).reverse().map((b) => el("tr", {},
        el("td", { class: "num" }, b.ordinal), el("td", {}, badge(b.status)), el("td", { class: "num" }, b.attempts), el("td", { class: "num" }, number(b.rows)),
        el("td", { class: "num" }, b.duration_ms === null ? "–" : b.duration_ms + " ms"), el("td", {}, b.node || "–"), el("td", {}, b.last_error || ""))))),
    el("h2", {}, "Events"),
    el("table", {}, el("thead", {}, el("tr", {}, ["#", "Time", "Event", "Detail"].map((h) => el("th", {}, h)))),
      el("tbody", {}, events.slice(-100).reverse().map((e) => el("tr", {},
        el("td", { class: "num" }, e.seq), el("td", {}, when(e.recorded_at)), el("td", {}, e.kind.replace(/_/g, " ")),
        el("td", {}, [e.reason, e.node, e.rows !== undefined ? number(e.rows) + " rows in " + e.duration_ms + " ms" : null,
          e.size !== undefined ? "batch " + e.ordinal + ", " + number(e.size) + " rows" : null].filter((d) => d !== undefined && d !== null).join(" · ")))))));
}

async function schedulesView() {
  const [schedules, switches] = await Promise.all([api("/api/schedules"), api("/api/switches")]);
  show(
    el("h1", {}, "Schedules"),
    schedules.length ? el("table", {}, el("thead", {}, el("tr", {}, ["Name", "Kind", "Cron", "Zone", "Enabled", "Next fire", "Last operation"].map((h) => el("th", {}, h)))),
      el("tbody", {}, schedules.map((s) => el("tr", {}, el("td", {}, s.name), el("td", {}, s.kind), el("td", {}, s.cron), el("td", {}, s.time_zone),
        el("td", {}, s.enabled ? "yes" : "no"), el("td", {}, when(s.next_fire_at)),
        el("td", {}, s.last_operation_id ? el("a", { href: "#/operations/" + s.last_operation_id }, s.last_operation_id) : "–")))))
      : el("p", { class: "muted" }, "No schedules. Add one with `sluice schedule add`."),
    el("h2", {}, "Kill switches"),
    switches.length ? el("table", {}, el("thead", {}, el("tr", {}, ["Scope", "Reason", "Set"].map((h) => el("th", {}, h)))),
      el("tbody", {}, switches.map((s) => el("tr", {}, el("td", {}, s.scope === "*" ? "every kind" : s.scope), el("td", {}, s.reason), el("td", {}, when(s.set_at))))))
      : el("p", { class: "muted" }, "None set."));
}

let rendering = false;
async function render() {
  if (rendering || document.getElementById("confirm").open) return;
  rendering = true;
  try {
    const hash = location.hash || "#/";
    const operation = hash.match(/^#\/operations\/(\d+)$/);
    if (operation) await operationView(operation[1]);
    else if (hash === "#/schedules") await schedulesView();
    else await listView();
    document.body.dataset.updated = String(Date.now());
    if (!statusLine.textContent.includes("refused")) statusLine.textContent = "updated " + new Date().toLocaleTimeString();
  } catch (error) {
    statusLine.textContent = "cannot reach the console: " + error.message;
  } finally {
    rendering = false;
  }
}

// Who this page acts as: shown in the header, with a sign-out button for a
// browser session.
async function start() {
  session = await api("/api/session");
  const who = document.getElementById("who");
  who.replaceChildren(el("span", { class: "muted", "data-session": session.name }, session.name === "local" ? "this machine" : "signed in: " + session.name));
  if (session.csrf) {
    const form = el("form", { method: "post", action: "/logout" }, el("button", { type: "submit" }, "Sign out"));
    who.append(" ", form);
  }
  window.addEventListener("hashchange", () => { statusLine.textContent = ""; render(); });
  render();
  setInterval(render, POLL_MS);
}

start().catch((error) => { statusLine.textContent = "cannot reach the console: " + error.message; });
