// The RCP inspector page. Plain DOM, no dependencies, nothing fetched from elsewhere.
// Every server value reaches the page through textContent / attributes, never as HTML.
// The access token lives in this script's memory only (read from the page's URL).
"use strict";

const TOKEN = new URLSearchParams(location.search).get("token") || "";
const SVG_NS = "http://www.w3.org/2000/svg";
const SERIES = ["#2f5bd3", "#c0571c", "#1a8a4a", "#8e44ad", "#b7791f", "#0f7d8c"];
const state = { overview: null, defs: {}, frames: [], history: [], notifications: 0 };

// ── DOM helpers ─────────────────────────────────────────────────────────────

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key === "style") Object.assign(el.style, value); // CSSOM: allowed by the CSP
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "text") el.textContent = value; else el.setAttribute(key, String(value));
  }
  for (const child of children.flat()) if (child) el.append(child);
  return el;
}

const $ = (id) => document.getElementById(id);
const json = (value) => JSON.stringify(value, null, 2);
const fmt = (x, digits = 4) => (typeof x === "number" ? Number(x.toPrecision(digits)).toString() : "—");
const badge = (text, cls = "") => h("span", { class: `badge ${cls}`, text });

function getPath(object, path) {
  return path.split(".").reduce((value, key) => (value && typeof value === "object" ? value[key] : undefined), object);
}

// ── talking to the inspector backend ───────────────────────────────────────

async function api(path, body, signal) {
  const init = { headers: { "x-inspector-token": TOKEN }, signal };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try { message = (await response.json()).error.message; } catch (_) { /* not JSON */ }
    throw new Error(message);
  }
  return response;
}

// POST, then hand each SSE event (one JSON object per `data:` line) to onEvent.
async function stream(path, body, onEvent, signal) {
  const response = await api(path, body, signal);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const chunk = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = chunk.split("\n").filter((line) => line.startsWith("data: ")).map((line) => line.slice(6)).join("\n");
      if (data) onEvent(JSON.parse(data));
    }
  }
}

// One RCP call; resolves with the outcome event, frames go to onFrame as they pass.
// Aborting `signal` closes the stream: the inspector then abandons the request, which
// sends notifications/cancel to the server (§7.14).
// Every call lands in the history (replayable) and its notifications in their own pane.
async function rcpCall(method, params, { streamProgress = false, logLevel = "", deadlineMs = null, onFrame = () => {}, signal } = {}) {
  let outcome = null;
  const request = { method, params, streamProgress, logLevel, deadlineMs };
  try {
    await stream("/api/call", { method, params, stream: streamProgress, ...(logLevel ? { logLevel } : {}), ...(deadlineMs ? { deadlineMs } : {}) }, (event) => {
      if (event.type === "frame") {
        rememberFrame(event);
        if (isNotification(event.frame)) noteNotification(event);
        onFrame(event);
      } else if (event.type === "outcome") outcome = event;
      else if (event.type === "failed") outcome = { error: { message: event.message } };
    }, signal);
  } catch (error) {
    remember(request, { error: { message: signal && signal.aborted ? "cancelled" : error.message } });
    throw error;
  }
  if (outcome && "connected" in outcome) {
    setConnected(outcome.connected);
    if (!outcome.connected) api("/api/overview").then((r) => r.json()).then(renderOverview).catch(() => {}); // its last words
  }
  outcome = outcome || { error: { message: "no answer" } };
  remember(request, outcome);
  return outcome;
}

const isNotification = (message) => Boolean(message && typeof message === "object" && !Array.isArray(message) && message.method && !("id" in message));

// ── history: every call this page made, newest first, each replayable ───────

function remember(request, outcome) {
  const entry = { n: state.history.length + 1, at: new Date(), request, outcome };
  state.history.push(entry);
  const { method, params, streamProgress, logLevel, deadlineMs } = request;
  const options = [streamProgress ? "progress" : "", logLevel ? `logs ≥ ${logLevel}` : "", deadlineMs ? `timeout ${deadlineMs} ms` : ""].filter(Boolean).join(", ");
  $("history").prepend(h("div", { class: "entry", "data-entry": entry.n },
    h("div", { class: "row" }, h("b", { text: `#${entry.n}` }), h("span", { class: "mono", text: method }),
      outcome.error ? badge(outcome.error.code === undefined || outcome.error.code === null ? "error" : String(outcome.error.code), "bad") : badge("ok", "ok"),
      typeof outcome.elapsedMs === "number" ? h("span", { class: "muted", text: `${fmt(outcome.elapsedMs, 3)} ms` }) : null,
      h("span", { class: "muted", text: entry.at.toISOString().slice(11, 19) }), options ? h("span", { class: "muted", text: options }) : null,
      h("button", { type: "button", class: "replay", text: "Replay", title: "send the same request again", onclick: () => replay(entry, true) }),
      h("button", { type: "button", class: "edit", text: "Edit", title: "load it into the form", onclick: () => replay(entry, false) })),
    h("div", { class: "mono muted params", text: JSON.stringify(params) })));
  $("history-empty").hidden = true;
}

// Load a past request into Compose, and send it again when `send`.
function replay(entry, send) {
  const { method, params, streamProgress, logLevel, deadlineMs } = entry.request;
  selectTab("compose");
  const known = [...$("compose-method").options].some((o) => o.value === method);
  $("compose-custom").value = known ? "" : method;
  if (known) { $("compose-method").value = method; buildComposeForm(); }
  $("compose-json-box").open = true;
  $("compose-json").value = json(params);
  $("compose-stream").checked = streamProgress;
  $("compose-logs").value = logLevel || "";
  $("compose-timeout").value = deadlineMs || "";
  if (send) sendCompose();
}

// ── notifications: progress, logs and any other server notification, apart from the responses ──

function noteNotification(frame) {
  const message = frame.frame;
  const p = message.params || {};
  const when = new Date(frame.atMs).toISOString().slice(11, 23);
  let detail;
  if (message.method === "notifications/progress") {
    detail = [p.stage || "progress", typeof p.progress === "number" ? `${Math.round(p.progress * 100)}%` : "", p.message || "",
      p.partial && Array.isArray(p.partial.hits) ? `(${p.partial.hits.length} partial hits)` : ""].filter(Boolean).join(" ");
  } else if (message.method === "notifications/log") {
    detail = `${p.level || "log"} ${p.logger ? p.logger + ": " : ""}${p.message ?? ""}`;
  } else {
    detail = JSON.stringify(p);
  }
  const token = p.progressToken ?? (p._meta || {}).progressToken;
  state.notifications += 1;
  $("notifications").prepend(h("div", { class: "note", "data-method": message.method },
    h("span", { class: "muted", text: when }), badge(message.method.replace(/^notifications\//, ""), message.method === "notifications/log" && ["error", "warning"].includes(p.level) ? "warn" : ""),
    token !== undefined ? h("span", { class: "muted mono", text: `request ${token}` }) : null, h("span", { text: detail })));
  $("notifications-count").textContent = String(state.notifications);
  $("notifications-empty").hidden = true;
}

// ── frames ──────────────────────────────────────────────────────────────────

// One line per frame (what it is), its JSON collapsed until asked for.
function frameSummary(message) {
  if (Array.isArray(message)) return `batch of ${message.length}`;
  if (!message || typeof message !== "object") return String(message);
  const id = "id" in message ? ` id ${JSON.stringify(message.id)}` : "";
  if (message.method) {
    const p = message.params || {};
    const extra = message.method === "notifications/progress" ? ` ${p.stage || ""} ${typeof p.progress === "number" ? Math.round(p.progress * 100) + "%" : ""}` : "";
    return `${message.method}${id}${extra}`;
  }
  if (message.error) return `error ${message.error.code ?? ""}${id}: ${message.error.message ?? ""}`;
  if (message.result !== undefined) {
    const hits = message.result && Array.isArray(message.result.hits) ? ` (${message.result.hits.length} hits)` : "";
    return `result${id}${hits}`;
  }
  return JSON.stringify(message).slice(0, 80);
}

function frameView(frame) {
  const when = new Date(frame.atMs).toISOString().slice(11, 23);
  const arrow = frame.direction === "sent" ? "→" : frame.direction === "received" ? "←" : "✕ transport error";
  return h("details", { class: `frame ${frame.direction}` },
    h("summary", { class: "meta" }, h("span", { class: "muted", text: `#${frame.seq} ${arrow} ${when} ` }), h("span", { class: "what", text: frameSummary(frame.frame) })),
    h("pre", { text: json(frame.frame) }));
}

function rememberFrame(frame) {
  if (state.frames.some((known) => known.seq === frame.seq)) return;
  state.frames.push(frame);
  $("all-frames").append(frameView(frame));
}

function setConnected(connected) {
  $("status").classList.toggle("down", !connected);
  $("status").title = connected ? "connected" : "disconnected";
  $("reconnect").hidden = connected;
}

// After the server went away (or was sent `shutdown`): a new connection, a new handshake.
async function reconnect() {
  $("reconnect").disabled = true;
  try {
    applyOverview(await (await api("/api/reconnect", {})).json());
  } catch (error) {
    $("reconnect").title = error.message;
  } finally {
    $("reconnect").disabled = false;
  }
}

// ── overview ────────────────────────────────────────────────────────────────

function renderOverview(view) {
  const server = view.server || {};
  $("identity").replaceChildren(
    h("span", { class: "pill", text: `${server.name}${server.version ? " " + server.version : ""}` }),
    h("span", { class: "pill", text: `RCP/${view.protocolVersion}` }),
    h("span", { class: "pill", text: view.conformance ? `declares ${view.conformance}` : "no level declared" }),
    h("span", { class: "pill", text: `${view.target.transport}: ${view.target.address}` }));
  setConnected(view.connected);
  $("server-table").replaceChildren(...[
    ["name", server.name], ["version", server.version || "—"],
    ["protocol", `RCP/${view.protocolVersion} (negotiated, §7.1)`],
    ["conformance", view.conformance || "not declared (§14)"],
    ["transport", view.target.transport], ["address", view.target.address],
    ["capabilities", Object.keys(view.capabilities).length],
  ].map(([key, value]) => h("tr", {}, h("td", { text: key }), h("td", { text: value }))));
  $("capabilities").replaceChildren(...Object.entries(view.capabilities).map(([key, meta]) =>
    h("div", { class: "cap", "data-cap": key }, h("h4", { text: key }), h("pre", { text: json(meta) }))));
  const handshake = view.frames.filter((f) => f.frame && (f.frame.method === "initialize" || (f.frame.result && f.frame.result.protocolVersion)));
  $("handshake").replaceChildren(h("div", { class: "frames" }, handshake.slice(-2).map(frameView)));
  view.frames.forEach(rememberFrame);
  $("stderr-card").hidden = !view.stderr.length;
  $("stderr").textContent = view.stderr.join("\n");
  $("export-mcp").textContent = json(view.export.mcpHost);
  $("export-rcp").textContent = json(view.export.rcpJson);
  $("connect-stdio").replaceChildren(...view.allowedStdio.map((address) => h("option", { value: address, text: address })));
  $("connect-stdio").disabled = !view.allowedStdio.length;
  if (view.allowedStdio.includes(view.target.address)) $("connect-stdio").value = view.target.address;
  $("connect-stdio-none").hidden = view.allowedStdio.length > 0;
}

// ── connect: another server, chosen on the page (HTTP, or a stdio command allowed at start) ──

async function connectTo() {
  const transport = $("connect-transport").value;
  const body = {};
  if (transport === "http") {
    body.http = $("connect-url").value.trim();
    const headers = {};
    for (const line of $("connect-headers").value.split("\n").map((s) => s.trim()).filter(Boolean)) {
      const at = line.indexOf(":");
      if (at <= 0) { $("connect-status").replaceChildren(h("span", { class: "error", text: `header ${JSON.stringify(line)}: expected Name: value` })); return; }
      headers[line.slice(0, at).trim()] = line.slice(at + 1).trim();
    }
    body.headers = headers;
  } else {
    body.stdio = $("connect-stdio").value;
  }
  $("connect-go").disabled = true;
  $("connect-status").replaceChildren(h("span", { class: "muted", text: "connecting…" }));
  try {
    const view = await (await api("/api/connect", body)).json();
    applyOverview(view);
    $("connect-status").replaceChildren(badge("ok", "ok"), `connected to ${view.target.address}`);
  } catch (error) {
    $("connect-status").replaceChildren(h("span", { class: "error", text: error.message }));
  } finally {
    $("connect-go").disabled = false;
  }
}

function showConnectFields() {
  const http = $("connect-transport").value === "http";
  $("connect-http-fields").hidden = !http;
  $("connect-stdio-fields").hidden = http;
}

async function copyText(id) {
  try { await navigator.clipboard.writeText($(id).textContent); } catch (_) { /* no clipboard: the text is selectable */ }
}

// ── forms generated from the typed params (JSON Schema of rcpkit.protocol.types) ──

function resolve(schema) {
  let current = schema || {};
  while (current.$ref) current = state.defs[current.$ref.split("/").pop()] || {};
  return current;
}

function variants(schema) {
  const resolved = resolve(schema);
  return resolved.anyOf ? resolved.anyOf.map(resolve).filter((v) => v.type !== "null") : [resolved];
}

function advertisedChoices(method, path) {
  const source = state.overview.choices[`${method}.${path}`];
  const values = source ? getPath(state.overview.capabilities, source) : undefined;
  return Array.isArray(values) ? values.filter((v) => typeof v === "string") : [];
}

// A control for one schema node: {el, get()}; get() is undefined when left empty (absent).
function control(method, path, schema) {
  const options = variants(schema);
  const only = options.length === 1 ? options[0] : null;
  if (path === "filter" && method === "retrieve") return filterBuilder();
  if (only && only.type === "object" && only.properties) return objectControl(method, path, only);
  if (only && only.type === "boolean") {
    const select = h("select", {}, h("option", { value: "", text: "(default)" }),
      h("option", { value: "true", text: "true" }), h("option", { value: "false", text: "false" }));
    return { el: select, get: () => (select.value === "" ? undefined : select.value === "true") };
  }
  if (only && (only.type === "integer" || only.type === "number")) {
    const input = h("input", { type: "number", step: only.type === "integer" ? "1" : "any", min: only.minimum });
    return { el: input, get: () => (input.value === "" ? undefined : Number(input.value)) };
  }
  if (only && only.enum) {
    const select = h("select", {}, h("option", { value: "", text: "(choose)" }), only.enum.map((v) => h("option", { value: v, text: v })));
    return { el: select, get: () => select.value || undefined };
  }
  const itemKinds = only && only.type === "array" ? variants(only.items).map((v) => v.type) : [];
  if (itemKinds.some((kind) => ["string", "integer", "number"].includes(kind))) {
    // One item a line; for unions (text or a Content block, §4.8) a line may be JSON.
    const numeric = !itemKinds.includes("string");
    const area = h("textarea", { rows: 3, placeholder: "one item per line" });
    return { el: area, get: () => {
      const items = area.value.split("\n").map((s) => s.trim()).filter(Boolean);
      if (!items.length) return undefined;
      return items.map((s) => (numeric ? Number(s) : itemKinds.length > 1 && s.startsWith("{") ? JSON.parse(s) : s));
    } };
  }
  if (options.some((v) => v.type === "string")) {
    // A string, or (for unions such as query / rewrite / nonce) JSON when it looks like JSON.
    const choices = advertisedChoices(method, path);
    const listId = choices.length ? `choices-${method}-${path}`.replace(/[^\w-]/g, "_") : null;
    const input = h("input", { type: "text", list: listId });
    const datalist = listId ? h("datalist", { id: listId }, choices.map((v) => h("option", { value: v }))) : null;
    const wrap = h("span", {}, input, datalist);
    const other = options.filter((v) => v.type !== "string");
    return { el: wrap, get: () => {
      const text = input.value;
      if (text === "") return undefined;
      if (other.length && /^[\[{]|^(true|false|-?\d)/.test(text.trim())) {
        try { return JSON.parse(text); } catch (_) { /* a plain string after all */ }
      }
      return text;
    } };
  }
  const area = h("textarea", { rows: 3, placeholder: `JSON, e.g. ${JSON.stringify(example(schema))}`, spellcheck: "false" });
  return { el: area, get: () => (area.value.trim() === "" ? undefined : JSON.parse(area.value)) };
}

// A minimal value of a schema (its required members), to show what a JSON field expects.
function example(schema, depth = 0) {
  const options = variants(schema);
  const node = options.find((v) => v.type === "object") || options[0] || {};
  if (depth > 3) return null;
  if (node.enum) return node.enum[0];
  switch (node.type) {
    case "object": {
      const names = node.required && node.required.length ? node.required : Object.keys(node.properties || {}).slice(0, 2);
      return Object.fromEntries(names.map((name) => [name, example(node.properties[name], depth + 1)]));
    }
    case "array": return [example(node.items, depth + 1)];
    case "string": return "…";
    case "integer": case "number": return node.minimum > 0 ? node.minimum : 0;
    case "boolean": return true;
    default: return {};
  }
}

function helpFor(method, path) {
  const entry = state.overview.methods.find((m) => m.name === method);
  return entry && entry.help ? entry.help[path] : undefined;
}

function objectControl(method, prefix, schema) {
  const required = new Set(schema.required || []);
  const fields = [];
  const box = h("div", {});
  for (const [name, sub] of Object.entries(schema.properties)) {
    const path = prefix ? `${prefix}.${name}` : name;
    const ctl = control(method, path, sub);
    const hint = resolve(sub).default !== undefined && resolve(sub).default !== null ? `default ${JSON.stringify(resolve(sub).default)}` : "";
    const help = helpFor(method, path);
    box.append(h("div", { class: "field", "data-field": path },
      h("label", { class: "name" }, name, required.has(name) ? h("span", { class: "req", text: " *" }) : null, hint ? h("small", { text: hint }) : null),
      h("div", { class: "control" }, ctl.el, help ? h("small", { class: "help", text: help }) : null)));
    fields.push([name, ctl]);
  }
  const get = () => {
    const value = {};
    for (const [name, ctl] of fields) {
      const item = ctl.get();
      if (item !== undefined) value[name] = item;
    }
    return Object.keys(value).length ? value : undefined;
  };
  if (!prefix) return { el: box, get };
  return { el: h("details", {}, h("summary", { text: resolve(schema).title || prefix }), box), get };
}

// ── the §8 filter builder: one row per condition, fields and operators as advertised ──

const ORDERED = new Set(["int", "float", "date"]);
const ALL_OPERATORS = ["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "exists"];

function filterFields() {
  const declared = getPath(state.overview.capabilities, "filter.fields");
  if (Array.isArray(declared)) return declared.map((name) => [name, null]);
  return declared && typeof declared === "object" ? Object.entries(declared) : [];
}

function operatorsFor(type) {
  const advertised = getPath(state.overview.capabilities, "filter.operators") || ALL_OPERATORS;
  return advertised.filter((op) => {
    if (!type) return true;
    if (["gt", "gte", "lt", "lte"].includes(op)) return ORDERED.has(type);
    if (op === "contains") return type === "text" || type === "keyword";
    return true;
  });
}

function typedValue(type, text) {
  const trimmed = text.trim();
  if (type === "int" || type === "float") return Number(trimmed);
  if (type === "bool") return trimmed === "true";
  if (type === "date" && /^\d+$/.test(trimmed)) return Number(trimmed);
  return trimmed;
}

function filterBuilder() {
  const root = h("div", { class: "filter" });
  const fields = filterFields();
  const combinator = h("select", { class: "combinator" }, h("option", { value: "and", text: "all of (and)" }), h("option", { value: "or", text: "any of (or)" }));
  const rows = h("div", { class: "rows" });
  const addRow = () => {
    const field = h("select", { class: "f-field" }, fields.map(([name, type]) => h("option", { value: name, text: type ? `${name} (${type})` : name })));
    const op = h("select", { class: "f-op" });
    const value = h("input", { type: "text", class: "f-value", placeholder: "value (in/nin: comma separated)" });
    const negate = h("label", { class: "inline" }, h("input", { type: "checkbox", class: "f-not" }), "not");
    const refreshOps = () => {
      const type = (fields.find(([name]) => name === field.value) || [])[1];
      const keep = op.value;
      op.replaceChildren(...operatorsFor(type).map((name) => h("option", { value: name, text: name })));
      if ([...op.options].some((o) => o.value === keep)) op.value = keep;
    };
    field.addEventListener("change", refreshOps);
    refreshOps();
    const row = h("div", { class: "row f-row" }, negate, field, op, value,
      h("button", { type: "button", text: "✕", title: "remove", onclick: () => row.remove() }));
    rows.append(row);
  };
  if (fields.length) {
    root.append(h("div", { class: "row" }, "Match", combinator), rows,
      h("button", { type: "button", class: "f-add", text: "+ condition", onclick: addRow }));
  } else {
    root.append(h("p", { class: "muted", text: "The server advertises no filter fields (§8)." }));
  }
  const get = () => {
    const conditions = [...rows.querySelectorAll(".f-row")].map((row) => {
      const name = row.querySelector(".f-field").value;
      const type = (fields.find(([n]) => n === name) || [])[1];
      const op = row.querySelector(".f-op").value;
      const text = row.querySelector(".f-value").value;
      let value;
      if (op === "in" || op === "nin") value = text.split(",").filter((s) => s.trim()).map((s) => typedValue(type, s));
      else if (op === "exists") value = text.trim() !== "false";
      else value = typedValue(type, text);
      const condition = { field: name, op, value };
      return row.querySelector(".f-not").checked ? { not: condition } : condition;
    });
    if (!conditions.length) return undefined;
    return conditions.length === 1 ? conditions[0] : { [combinator.value]: conditions };
  };
  return { el: root, get };
}

// ── compose tab ─────────────────────────────────────────────────────────────

let composeForm = null;

function methodList() {
  const all = $("compose-all").checked;
  return state.overview.methods.filter((m) => all || m.advertised);
}

function fillMethods() {
  const select = $("compose-method");
  const keep = select.value;
  select.replaceChildren(...methodList().map((m) => h("option", { value: m.name, text: m.advertised ? m.name : `${m.name} (not advertised)` })));
  const preferred = keep || "retrieve";
  if ([...select.options].some((o) => o.value === preferred)) select.value = preferred;
  buildComposeForm();
}

function buildComposeForm() {
  const method = state.overview.methods.find((m) => m.name === $("compose-method").value);
  if (!method) return;
  const schema = resolve(method.schema);
  $("compose-doc").textContent = (schema.description || "").replace(/``/g, "");
  const properties = Object.fromEntries(Object.entries(schema.properties || {}).filter(([name]) => name !== "_meta"));
  composeForm = objectControl(method.name, "", { ...schema, properties });
  $("compose-form").replaceChildren(composeForm.el);
  $("compose-json").value = "";
}

async function sendCompose() {
  // A typed method name (e.g. a vendor x-<vendor>/<name>, §6.2) takes its params as JSON.
  const custom = $("compose-custom").value.trim();
  const timeout = $("compose-timeout").value.trim();
  const deadlineMs = timeout ? Number(timeout) : null;
  if (deadlineMs !== null && !(Number.isInteger(deadlineMs) && deadlineMs > 0 && deadlineMs <= 600000)) {
    $("compose-status").replaceChildren(h("span", { class: "error", text: "timeout: a whole number of milliseconds, 1 to 600000" }));
    return;
  }
  const method = custom || $("compose-method").value;
  let params;
  try {
    // The JSON wins when typed or loaded from the history, not when it only shows the last request.
    const text = $("compose-json").value.trim();
    params = text && text !== $("compose-json").dataset.shown ? JSON.parse(text) : (custom ? {} : composeForm.get() || {});
  } catch (error) {
    $("compose-status").replaceChildren(h("span", { class: "error", text: `params: ${error.message}` }));
    return;
  }
  $("compose-json").value = json(params);
  $("compose-json").dataset.shown = json(params);
  const framesBox = $("compose-frames");
  framesBox.replaceChildren();
  $("compose-rendered").replaceChildren();
  $("compose-status").replaceChildren(h("span", { class: "muted", text: `${method} …` }));
  $("compose-send").disabled = true;
  const abort = new AbortController();
  $("compose-cancel").hidden = false;
  $("compose-cancel").onclick = () => abort.abort();
  const progress = progressView();
  $("compose-rendered").replaceChildren(progress.el);
  try {
    const outcome = await rcpCall(method, params, {
      streamProgress: $("compose-stream").checked, logLevel: $("compose-logs").value, deadlineMs, signal: abort.signal,
      // Notifications go to their own pane: the raw frames here are the request and its response.
      onFrame: (frame) => { if (!isNotification(frame.frame)) framesBox.append(frameView(frame)); progress.update(frame); },
    });
    $("compose-status").replaceChildren(outcomeLine(outcome));
    progress.partial.replaceChildren(); // the final response is authoritative (§9)
    $("compose-rendered").replaceChildren(progress.el, renderResult(method, outcome));
  } catch (error) {
    const text = abort.signal.aborted ? "cancelled: the inspector sent notifications/cancel (§7.14)" : error.message;
    $("compose-status").replaceChildren(h("span", { class: "error", text }));
  } finally {
    $("compose-send").disabled = false;
    $("compose-cancel").hidden = true;
  }
}

function outcomeLine(outcome) {
  if (outcome.error) {
    const { code, message, data } = outcome.error;
    return h("span", { class: "error" }, badge(code === undefined || code === null ? "error" : String(code), "bad"), message, data ? ` ${JSON.stringify(data)}` : "");
  }
  return h("span", {}, badge("ok", "ok"), `${fmt(outcome.elapsedMs, 3)} ms`,
    outcome.problem ? h("span", { class: "error" }, " — result does not match §7: ", outcome.problem.message) : null);
}

function renderResult(method, outcome) {
  if (outcome.error) return h("div", {});
  const result = outcome.result || {};
  if (Array.isArray(result.hits)) return hitsBlock(result.hits, 0);
  return h("pre", { class: "mono", text: json(result) });
}

// ── retrieve results for a person ───────────────────────────────────────────

function passageOf(hit) {
  if (typeof hit.text === "string") return hit.text;
  if (Array.isArray(hit.content)) return hit.content.filter((b) => b.type === "text").map((b) => b.text || "").join("\n");
  return "";
}

function citationView(citation) {
  if (!citation) return null;
  const parts = [];
  if (citation.title) parts.push(h("b", { text: citation.title }));
  const where = citation.uri || citation.source;
  if (where) {
    const safe = citation.uri && /^https?:\/\//i.test(citation.uri);
    parts.push(safe ? h("a", { href: citation.uri, target: "_blank", rel: "noopener noreferrer", text: where }) : h("span", { class: "mono", text: where }));
  }
  if (citation.page !== undefined) parts.push(`p. ${citation.page}`);
  if (citation.start !== undefined) parts.push(`chars ${citation.start}–${citation.end ?? "?"}`);
  return h("div", { class: "citation" }, "cited from ", parts.flatMap((part, i) => (i ? [" · ", part] : [part])));
}

function trustBadges(trust) {
  if (!trust) return [];
  const out = [badge(`trust: ${trust.level}${typeof trust.score === "number" ? " " + fmt(trust.score, 2) : ""}`, trust.level)];
  if (trust.injectionSuspected) out.push(badge("⚠ injection suspected", "warn"));
  if (trust.sanitized) out.push(badge("sanitized"));
  return out;
}

function hitView(hit, rank, { partial = false } = {}) {
  const stages = Object.entries(hit.scores || {});
  return h("div", { class: `hit${partial ? " partial" : ""}`, "data-hit-id": String(hit.id) },
    h("div", { class: "top" },
      h("span", { class: "rank", text: `#${rank}` }),
      h("span", { class: "score", text: `score ${fmt(hit.score)}` }),
      typeof hit.confidence === "number" ? h("span", { class: "conf" }, "confidence",
        h("span", { class: "meter" }, h("div", { style: { width: `${Math.round(hit.confidence * 100)}%` } })), fmt(hit.confidence, 2)) : null,
      trustBadges(hit.trust),
      h("span", { class: "hid", text: String(hit.id) })),
    stages.length ? h("div", { class: "stages" }, stages.map(([stage, value]) => h("span", { class: "chip", text: `${stage} ${fmt(value)}` }))) : null,
    h("div", { class: "passage" }, passageOf(hit).split(/\n\s*\n/).map((para) => h("p", { text: para.replace(/\s*\n\s*/g, " ") }))),
    citationView(hit.citation),
    hit.chunk ? h("div", { class: "citation", text: `chunk ${hit.chunk.index ?? "?"} of ${hit.chunk.docId ?? "?"}` }) : null);
}

// Score by rank as SVG bars; each stage's scores (hit.scores) as a line on its own scale,
// since stages score on different scales (BM25 vs cosine vs fused, §7.7).
function scorePlot(hits, offset = 0) {
  const width = 480, height = 150, pad = { l: 48, r: 8, t: 10, b: 22 };
  const stageNames = [...new Set(hits.flatMap((hit) => Object.keys(hit.scores || {})))];
  const scaleOf = (values) => {
    const max = Math.max(...values, 0), min = Math.min(...values, 0);
    const span = max - min || 1;
    return { max, min, y: (v) => pad.t + (height - pad.t - pad.b) * (1 - (v - min) / span) };
  };
  const main = scaleOf(hits.map((hit) => hit.score));
  const step = (width - pad.l - pad.r) / Math.max(hits.length, 1);
  const x = (i) => pad.l + (i + 0.5) * step;
  const bars = hits.map((hit, i) => svg("rect", { x: x(i) - step * 0.35, width: Math.max(step * 0.7, 1),
    y: Math.min(main.y(hit.score), main.y(0)), height: Math.abs(main.y(0) - main.y(hit.score)), fill: SERIES[0], "data-rank": offset + i + 1 },
    svg("title", { text: `#${offset + i + 1} ${hit.id}: score ${fmt(hit.score)}` })));
  const lines = stageNames.map((stage, s) => {
    const scale = scaleOf(hits.filter((hit) => hit.scores && stage in hit.scores).map((hit) => hit.scores[stage]));
    const points = hits.map((hit, i) => (hit.scores && stage in hit.scores ? `${x(i)},${scale.y(hit.scores[stage])}` : null)).filter(Boolean);
    return svg("polyline", { fill: "none", stroke: SERIES[(s + 1) % SERIES.length], "stroke-width": 1.5, "stroke-dasharray": "4 2", points: points.join(" ") },
      svg("title", { text: `${stage}: ${fmt(scale.min, 3)} … ${fmt(scale.max, 3)}` }));
  });
  const label = (attrs, text) => svg("text", { "font-size": 10, fill: "#6b7280", ...attrs, text });
  const axis = [svg("line", { x1: pad.l, x2: width - pad.r, y1: main.y(0), y2: main.y(0), stroke: "#9aa3af" }),
    label({ x: pad.l - 4, y: main.y(main.max) + 4, "text-anchor": "end" }, fmt(main.max, 3)),
    label({ x: pad.l - 4, y: main.y(main.min) + 4, "text-anchor": "end" }, fmt(main.min, 3)),
    label({ x: pad.l, y: height - 6 }, `rank ${offset + 1}`),
    label({ x: width - pad.r, y: height - 6, "text-anchor": "end" }, `rank ${offset + hits.length}`)];
  const legend = h("div", { class: "legend" }, h("span", {}, h("i", { style: { background: SERIES[0] } }), "score"),
    stageNames.map((stage, s) => h("span", {}, h("i", { style: { background: SERIES[(s + 1) % SERIES.length] } }), stage)));
  return h("div", { class: "plot" }, svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "score distribution" }, axis, bars, lines),
    h("div", { class: "caption" }, "Score by rank (bars); stage scores as dashed lines, each on its own scale", legend));
}

function hitsBlock(hits, offset) {
  if (!hits.length) return h("p", { class: "muted", text: "no hits" });
  return h("div", { class: "hits" }, scorePlot(hits, offset), hits.map((hit, i) => hitView(hit, offset + i + 1)));
}

// Live §9 progress: a bar, the stages seen so far, partial hits while they last, and the
// request's own §17.1 log lines when they were asked for.
function progressView() {
  const fill = h("div", {});
  const stages = h("div", { class: "stages" });
  const partial = h("div", { class: "partial-hits" });
  const logs = h("div", { class: "logs" });
  const el = h("div", { class: "progress", hidden: true }, h("div", { class: "bar" }, fill), stages, logs, partial);
  const seen = [];
  return { el, partial, update(frame) {
    const message = frame.frame;
    if (message && message.method === "notifications/log") {
      const p = message.params || {};
      el.hidden = false;
      logs.append(h("div", { class: `log ${p.level}` }, badge(p.level || "log", p.level === "error" || p.level === "warning" ? "warn" : ""),
        p.logger ? `${p.logger}: ` : "", String(p.message ?? ""), p.data !== undefined ? h("span", { class: "mono muted", text: ` ${JSON.stringify(p.data)}` }) : null));
      return;
    }
    if (!message || message.method !== "notifications/progress") return;
    const p = message.params || {};
    el.hidden = false;
    if (typeof p.progress === "number") fill.style.width = `${Math.round(p.progress * 100)}%`;
    seen.push(`${p.stage || "progress"} ${typeof p.progress === "number" ? Math.round(p.progress * 100) + "%" : ""}${p.message ? " — " + p.message : ""}`);
    stages.textContent = seen.join(" → ");
    const hits = p.partial && Array.isArray(p.partial.hits) ? p.partial.hits : null;
    if (hits) partial.replaceChildren(...hits.map((hit, i) => hitView(hit, i + 1, { partial: true })));
  } };
}

// ── retrieve tab: one or two configurations, the same query ─────────────────

const retrieveFilter = { builder: null, a: null, b: null };

function configPanel(box, label, defaults) {
  const modes = getPath(state.overview.capabilities, "retrieve.modes") || [];
  const mode = h("select", { class: "mode" }, h("option", { value: "", text: "(server default)" }), modes.map((m) => h("option", { value: m, text: m })));
  if (defaults.mode && modes.includes(defaults.mode)) mode.value = defaults.mode;
  const extra = h("textarea", { class: "extra", spellcheck: "false", placeholder: '{"rerank": false, "candidateK": 50}' });
  box.replaceChildren(h("div", { class: "row" }, h("b", { text: label }), h("label", {}, "mode", mode), h("label", { class: "grow" }, "more params (JSON)")), extra);
  return { params() {
    const value = {};
    if (mode.value) value.mode = mode.value;
    if (extra.value.trim()) Object.assign(value, JSON.parse(extra.value));
    return value;
  } };
}

// The configurations and the filter follow the connected server's capabilities.
function setupRetrieve() {
  const modes = getPath(state.overview.capabilities, "retrieve.modes") || [];
  const preferred = getPath(state.overview.capabilities, "retrieve.defaultMode") || modes[0];
  retrieveFilter.a = configPanel($("config-a"), "A", { mode: preferred });
  retrieveFilter.b = configPanel($("config-b"), "B", { mode: modes.find((m) => m !== preferred) });
  retrieveFilter.builder = filterBuilder();
  $("filter-builder").replaceChildren(retrieveFilter.builder.el);
}

function bindRetrieve() {
  $("retrieve-compare").addEventListener("change", () => {
    const on = $("retrieve-compare").checked;
    $("config-b").hidden = !on;
    $("column-b").hidden = !on;
    $("retrieve-columns").classList.toggle("compare", on);
  });
  $("retrieve-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const { a, b } = retrieveFilter;
    runRetrieve([[a, $("column-a"), "A"], ...($("retrieve-compare").checked ? [[b, $("column-b"), "B"]] : [])]);
  });
}

async function runRetrieve(columns) {
  const query = $("retrieve-query").value;
  const k = Number($("retrieve-k").value) || 10;
  let filter;
  const prepared = [];
  try {
    filter = retrieveFilter.builder.get();
    for (const [config, column, label] of columns) {
      prepared.push([{ query, k, ...config.params(), ...(filter ? { filter } : {}) }, column, label]);
    }
  } catch (error) {
    columns[0][1].replaceChildren(h("p", { class: "error", text: `params: ${error.message}` }));
    return;
  }
  $("retrieve-send").disabled = true;
  const abort = new AbortController();
  $("retrieve-cancel").hidden = false;
  $("retrieve-cancel").onclick = () => abort.abort();
  const results = new Map();
  try {
    await Promise.all(prepared.map(([params, column, label]) => retrieveInto(params, column, label, results, abort.signal)));
    if (prepared.length === 2 && !abort.signal.aborted) markOverlap(prepared.map(([, column]) => column), results);
  } finally {
    $("retrieve-send").disabled = false;
    $("retrieve-cancel").hidden = true;
  }
}

// Run one retrieve (and later pages) into a column; `results` gets label → ranks by id.
async function retrieveInto(params, column, label, results, signal) {
  const streamProgress = $("retrieve-stream").checked;
  const head = h("div", { class: "head" }, h("span", { class: "tag", text: label }), h("span", { class: "mono", text: JSON.stringify(params) }));
  const status = h("div", { class: "status-line muted", text: "retrieving…" });
  const progress = progressView();
  const frames = h("div", { class: "frames" });
  const body = h("div", { class: "body" });
  const pager = h("div", { class: "pager" });
  column.replaceChildren(head, status, progress.el, body, pager, h("details", {}, h("summary", { text: "raw frames" }), frames));
  const ranks = new Map();
  results.set(label, ranks);
  let offset = 0;
  const page = async (pageParams) => {
    const outcome = await rcpCall("retrieve", pageParams, { streamProgress, signal, onFrame: (frame) => { frames.append(frameView(frame)); progress.update(frame); } });
    progress.partial.replaceChildren();
    if (outcome.error) { status.replaceChildren(outcomeLine(outcome)); return; }
    const result = outcome.result;
    const usage = result.usage || {};
    status.replaceChildren(outcomeLine(outcome), ` · ${result.hits.length} hits`,
      usage.candidates !== undefined ? ` · ${usage.candidates} candidates` : "",
      usage.reranked !== undefined ? ` · ${usage.reranked} reranked` : "",
      result.indexVersion ? ` · index ${result.indexVersion}` : "",
      result.rewrittenQuery ? ` · rewritten: ${result.rewrittenQuery}` : "",
      (usage.notes || []).length ? h("div", { class: "muted", text: `notes: ${usage.notes.join("; ")}` }) : "");
    result.hits.forEach((hit, i) => ranks.set(String(hit.id), offset + i + 1));
    body.append(hitsBlock(result.hits, offset));
    offset += result.hits.length;
    pager.replaceChildren();
    if (result.nextCursor) {
      pager.append(h("button", { class: "next-page", text: "Next page →", onclick: () => page({ ...params, cursor: result.nextCursor }) }));
    }
  };
  try {
    await page(params);
  } catch (error) {
    const text = signal.aborted ? "cancelled: the inspector sent notifications/cancel (§7.14)" : error.message;
    status.replaceChildren(h("span", { class: "error", text }));
  }
}

function markOverlap(columns, results) {
  const [a, b] = [results.get("A"), results.get("B")];
  for (const [column, other] of [[columns[0], b], [columns[1], a]]) {
    for (const card of column.querySelectorAll(".hit")) {
      const at = other.get(card.dataset.hitId);
      card.querySelector(".top").append(h("span", { class: "also", text: at ? `also #${at} in the other column` : "only in this column" }));
    }
  }
}

// ── certify tab ─────────────────────────────────────────────────────────────

// Failures first, then skips, then passes; within each, the order they completed in.
const OUTCOME_ORDER = { FAIL: 0, SKIP: 1, PASS: 2 };

function placeCheck(row, outcome) {
  const rank = OUTCOME_ORDER[outcome] ?? 0;
  const after = [...$("certify-results").children].find((other) => (OUTCOME_ORDER[other.dataset.outcome] ?? 0) > rank);
  $("certify-results").insertBefore(row, after || null);
}

function checkRow(check) {
  return h("div", { class: "check", "data-check": check.id, "data-outcome": check.outcome }, badge(check.outcome, check.outcome), h("span", { class: "muted", text: check.level }),
    h("span", { class: "muted", text: `§${check.section}` }), h("span", {}, h("span", { class: "mono", text: check.id }), ` ${check.title}`),
    check.detail && check.outcome !== "PASS" ? h("pre", { class: check.outcome, text: check.detail }) : null);
}

async function runCertify() {
  const only = $("certify-only").value.split(/[\s,]+/).filter(Boolean);
  $("certify-run").disabled = true;
  $("certify-results").replaceChildren();
  $("certify-summary").replaceChildren(h("span", { class: "muted", text: "running…" }));
  try {
    await stream("/api/certify", { only }, (event) => {
      if (event.type === "check") placeCheck(checkRow(event), event.outcome);
      else if (event.type === "report") $("certify-summary").replaceChildren(...certifySummary(event.report));
      else if (event.type === "failed") $("certify-summary").replaceChildren(h("span", { class: "error", text: event.message }));
    });
  } catch (error) {
    $("certify-summary").replaceChildren(h("span", { class: "error", text: error.message }));
  } finally {
    $("certify-run").disabled = false;
  }
}

function certifySummary(report) {
  const counts = report.counts;
  return [
    h("span", { class: "big", id: "certified-level", text: report.partial ? "partial run: no level certified" : report.certifiedLevel ? `certified ${report.certifiedLevel}` : "no level certified" }),
    badge(`declared ${report.declaredLevel || "nothing"}`, "level"),
    report.partial ? null : badge(report.declarationHonest ? "declaration honest" : "overclaims", report.declarationHonest ? "ok" : "bad"),
    badge(`${counts.pass} pass`, "PASS"), badge(`${counts.fail} fail`, "FAIL"), badge(`${counts.skip} skip`, "SKIP"),
  ].filter(Boolean);
}

// ── eval tab ────────────────────────────────────────────────────────────────

function setupEval() {
  $("eval-dataset").value = state.overview.sampleDataset;
  $("eval-datasets").replaceChildren(h("option", { value: state.overview.sampleDataset, text: "the bundled sample notes (rcpkit demo)" }));
  const modes = getPath(state.overview.capabilities, "retrieve.modes") || [];
  $("eval-configs").value = (modes.length ? modes.map((m) => `${m}={"mode": "${m}"}`) : ["default={}"]).join("\n");
}

async function runEval() {
  const configs = $("eval-configs").value.split("\n").map((s) => s.trim()).filter(Boolean);
  const bar = $("eval-progress");
  $("eval-run").disabled = true;
  bar.hidden = false;
  bar.value = 0;
  $("eval-report").replaceChildren();
  $("eval-stage").textContent = "starting…";
  try {
    await stream("/api/eval", { dataset: $("eval-dataset").value, configs, index: $("eval-index").checked }, (event) => {
      if (event.type === "progress") { bar.value = event.done / Math.max(event.total, 1); $("eval-stage").textContent = `${event.stage} ${event.done}/${event.total}`; }
      else if (event.type === "report") { $("eval-stage").textContent = "done"; $("eval-report").replaceChildren(evalReport(event.report, event.latencies)); }
      else if (event.type === "failed") $("eval-report").replaceChildren(h("p", { class: "error", text: event.message }));
    });
  } catch (error) {
    $("eval-report").replaceChildren(h("p", { class: "error", text: error.message }));
  } finally {
    $("eval-run").disabled = false;
    bar.hidden = true;
  }
}

function groupedBars(title, groups, seriesNames, values, { max = null, unit = "" } = {}) {
  const width = 420, height = 170, pad = { l: 56, r: 6, t: 14, b: 30 };
  const top = max ?? (Math.max(...values.flat().filter((v) => typeof v === "number"), 0) * 1.1 || 1);
  const groupWidth = (width - pad.l - pad.r) / Math.max(groups.length, 1);
  const barWidth = (groupWidth * 0.8) / Math.max(seriesNames.length, 1);
  const y = (v) => pad.t + (height - pad.t - pad.b) * (1 - v / top);
  const shapes = [];
  groups.forEach((group, g) => {
    seriesNames.forEach((name, s) => {
      const v = values[g][s];
      if (typeof v !== "number") return;
      shapes.push(svg("rect", { x: pad.l + g * groupWidth + groupWidth * 0.1 + s * barWidth, width: barWidth * 0.9, y: y(v), height: y(0) - y(v), fill: SERIES[s % SERIES.length] },
        svg("title", { text: `${name} ${group}: ${fmt(v)}${unit}` })));
    });
    shapes.push(svg("text", { x: pad.l + (g + 0.5) * groupWidth, y: height - 12, "text-anchor": "middle", "font-size": 10, fill: "#374151", text: group }));
  });
  shapes.push(svg("line", { x1: pad.l, x2: width - pad.r, y1: y(0), y2: y(0), stroke: "#9aa3af" }),
    svg("text", { x: pad.l - 4, y: y(top) + 8, "text-anchor": "end", "font-size": 10, fill: "#6b7280", text: `${fmt(top, 3)}${unit}` }));
  return h("div", { class: "plot" }, h("h3", { text: title }), svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title }, shapes),
    h("div", { class: "legend" }, seriesNames.map((name, s) => h("span", {}, h("i", { style: { background: SERIES[s % SERIES.length] } }), name))));
}

function evalReport(report, latencies) {
  const configs = report.configs;
  const names = configs.map((c) => c.name);
  const table = h("table", { class: "metrics" },
    h("tr", {}, h("th", { text: "metric" }), names.map((n) => h("th", { text: n }))),
    report.metricNames.map((metric) => h("tr", { "data-metric": metric }, h("td", { text: metric }), configs.map((c) => h("td", { text: c.error ? "—" : fmt(c.metrics[metric], 3) })))),
    ["p50", "p95", "p99"].map((p) => h("tr", {}, h("td", { text: `latency ${p} (ms)` }), configs.map((c) => h("td", { text: fmt((c.latencyMs || {})[p], 3) })))),
    h("tr", {}, h("td", { text: "queries evaluated" }), configs.map((c) => h("td", { text: c.queriesEvaluated }))));
  const metrics = report.metricNames;
  const quality = groupedBars("Quality", metrics, names, metrics.map((m) => configs.map((c) => c.metrics[m])), { max: 1 });
  const latency = groupedBars("Latency", ["p50", "p95", "p99"], names, ["p50", "p95", "p99"].map((p) => configs.map((c) => (c.latencyMs || {})[p])), { unit: " ms" });
  const perQuery = groupedBars("Latency of each query", Object.values(latencies)[0]?.map((_, i) => String(i + 1)) || [], names,
    (Object.values(latencies)[0] || []).map((_, i) => names.map((n) => (latencies[n] || [])[i])), { unit: " ms" });
  const caption = [`dataset ${report.dataset}`, `indexing: ${report.indexing}`, `seed ${report.seed ?? "—"}`, `indexVersion ${report.indexVersion ?? "—"}`,
    ...report.notes, ...configs.filter((c) => c.error).map((c) => `${c.name} failed: ${c.error}`)];
  const warnings = (report.warnings || []).map((text) => h("div", { class: "warning", role: "alert" }, h("b", { text: "These scores say nothing about the engine: " }), text));
  return h("div", {}, warnings, h("div", { class: "doc", text: caption.join("\n") }), table, h("div", { class: "charts" }, quality, latency, perQuery));
}

// ── start ───────────────────────────────────────────────────────────────────

function selectTab(name) {
  for (const button of document.querySelectorAll("#tabs button")) button.setAttribute("aria-selected", String(button.dataset.tab === name));
  for (const section of document.querySelectorAll("main > .tab")) section.hidden = section.id !== `tab-${name}`;
}

async function start() {
  for (const button of document.querySelectorAll("#tabs button")) button.addEventListener("click", () => selectTab(button.dataset.tab));
  $("reconnect").addEventListener("click", reconnect);
  try {
    state.overview = await (await api("/api/overview")).json();
  } catch (error) {
    $("identity").textContent = `cannot load the server's description: ${error.message}`;
    setConnected(false);
    return;
  }
  $("compose-all").addEventListener("change", fillMethods);
  $("compose-method").addEventListener("change", buildComposeForm);
  $("compose-send").addEventListener("click", sendCompose);
  $("certify-run").addEventListener("click", runCertify);
  $("eval-run").addEventListener("click", runEval);
  $("connect-transport").addEventListener("change", showConnectFields);
  $("connect-go").addEventListener("click", connectTo);
  $("notifications-clear").addEventListener("click", () => {
    $("notifications").replaceChildren();
    state.notifications = 0;
    $("notifications-count").textContent = "0";
    $("notifications-empty").hidden = false;
  });
  for (const button of document.querySelectorAll("button[data-copy]")) button.addEventListener("click", () => copyText(button.dataset.copy));
  bindRetrieve();
  showConnectFields();
  applyOverview(state.overview);
  document.body.dataset.ready = "true";
}

// A (new) connection: everything drawn from the server's description is drawn again.
function applyOverview(view) {
  state.overview = view;
  state.defs = view.definitions;
  renderOverview(view);
  $("compose-vendors").replaceChildren(...Object.keys(view.capabilities).filter((key) => key.startsWith("x-"))
    .map((key) => h("option", { value: `${key}/` })));
  fillMethods();
  setupRetrieve();
  setupEval();
}

start();
