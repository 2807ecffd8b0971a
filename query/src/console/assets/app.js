// The freshet console: calls the node's own API with the user's key (Authorization: Bearer)
// and shows what it answers. Every text from the API is set with textContent, never parsed as
// HTML. The key lives in this tab's sessionStorage only (gone when the tab closes).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
const store = window.sessionStorage;

const state = { key: store.getItem("freshet.key") || "", adminKey: "", lastHits: [], timer: null, doc: null };

// ---- elements ---------------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); return e; }

function message(text, kind) {
  const m = $("message");
  if (!text) { m.hidden = true; m.textContent = ""; return; }
  m.hidden = false;
  m.className = kind || "";
  m.textContent = text;
}

function fmtMs(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 120000) return `${(ms / 1000).toFixed(1)} s`;
  return `${(ms / 60000).toFixed(1)} min`;
}
function fmtTime(ms) { return ms ? new Date(ms).toLocaleString() : "–"; }
function fmtScore(s) { return typeof s === "number" ? s.toFixed(4) : "–"; }

// ---- API --------------------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, code, text) { super(text); this.status = status; this.code = code; }
}

async function api(method, path, body, key) {
  const headers = { "Accept": "application/json" };
  const k = key === undefined ? state.key : key;
  if (k) headers["Authorization"] = `Bearer ${k}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let resp;
  try {
    resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: "omit", cache: "no-store" });
  } catch (e) {
    throw new ApiError(0, "network", `the node did not answer: ${e.message}`);
  }
  let data = null;
  try { data = await resp.json(); } catch (_) { data = null; }
  if (!resp.ok) {
    const err = (data && data.error) || {};
    throw new ApiError(resp.status, err.code || String(resp.status), err.message || resp.statusText);
  }
  return data;
}

function explain(e) {
  if (e.status === 401) {
    return `401 unauthorized: ${e.message}. Enter an API key (or a JWT) above and press Use; ` +
      "every result is what that key may see.";
  }
  if (e.status === 403) return `403 forbidden: ${e.message}`;
  if (e.status === 429 || e.code === "overloaded") return `${e.status} ${e.code}: ${e.message} (retry shortly)`;
  return `${e.status || ""} ${e.code}: ${e.message}`.trim();
}

// ---- key ---------------------------------------------------------------------------------
function showKeyState() {
  $("key-state").textContent = state.key ? "key set (this tab only)" : "no key";
}

$("key-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  state.key = $("key").value.trim();
  $("key").value = "";
  if (state.key) store.setItem("freshet.key", state.key); else store.removeItem("freshet.key");
  showKeyState();
  message("");
  if (!$("status-view").hidden) refreshStatus();
});
$("key-forget").addEventListener("click", () => {
  state.key = ""; store.removeItem("freshet.key"); showKeyState();
  clear($("results")); $("meta").textContent = "";
});

// ---- tabs --------------------------------------------------------------------------------
function show(view) {
  for (const v of ["search-view", "doc-view", "status-view"]) $(v).hidden = v !== view;
  $("tab-search").setAttribute("aria-selected", String(view !== "status-view"));
  $("tab-status").setAttribute("aria-selected", String(view === "status-view"));
  if (state.timer) { clearInterval(state.timer); state.timer = null; }
  if (view === "status-view") {
    refreshStatus();
    state.timer = setInterval(() => { if ($("status-auto").checked) refreshStatus(); }, 5000);
  }
}
$("tab-search").addEventListener("click", () => show("search-view"));
$("tab-status").addEventListener("click", () => show("status-view"));

// ---- search ------------------------------------------------------------------------------
function requestBody() {
  const body = { query: $("q").value, highlight: true };
  body.mode = document.querySelector('input[name="mode"]:checked').value;
  const k = parseInt($("k").value, 10);
  if (k > 0) body.k = k;
  if ($("fusion").value) body.fusion = { method: $("fusion").value };
  if ($("rerank").checked) body.rerank = true;
  if ($("expand").checked) body.expand = true;
  if ($("parents").checked) body.parents = true;
  if ($("pack").checked) body.pack = { budget_tokens: parseInt($("pack-budget").value, 10) || 1024 };
  const f = $("filter").value.trim();
  if (f) {
    try { body.filter = JSON.parse(f); } catch (e) { throw new ApiError(0, "bad_filter", `the filter is not JSON: ${e.message}`); }
  }
  return body;
}

/// The text with its highlight spans (character ranges, code points) as <mark>s.
function highlighted(text, spans) {
  const out = document.createDocumentFragment();
  const chars = Array.from(text);
  let at = 0;
  for (const [a, b] of spans || []) {
    if (a < at || b > chars.length || a >= b) continue;
    out.append(chars.slice(at, a).join(""));
    out.append(el("mark", { text: chars.slice(a, b).join("") }));
    at = b;
  }
  out.append(chars.slice(at).join(""));
  return out;
}

function pages(h) {
  if (h.page_start === undefined || h.page_start === null) return null;
  return h.page_start === h.page_end ? `p. ${h.page_start}` : `pp. ${h.page_start}–${h.page_end}`;
}

function scoreTable(scores, final) {
  const t = el("table", { class: "scores" }, el("tr", {}, el("th", { text: "route" }), el("th", { text: "rank" }), el("th", { text: "score" })));
  for (const route of ["bm25", "vector", "fused", "rerank"]) {
    const s = scores && scores[route];
    if (!s) continue;
    t.append(el("tr", { class: `score-${route}` }, el("td", { text: route }), el("td", { text: s.rank }), el("td", { text: fmtScore(s.score) })));
  }
  t.append(el("tr", { class: "score-final" }, el("td", { text: "final" }), el("td", { text: "" }), el("td", { text: fmtScore(final) })));
  return t;
}

function renderResults(r) {
  const list = clear($("results"));
  state.lastHits = r.results;
  const timings = Object.entries(r.timings_ms || {}).map(([k, v]) => `${k} ${v.toFixed(1)} ms`).join(" · ");
  const idx = r.index || {};
  const parts = [`${r.results.length} results`, `mode ${r.mode}`, timings,
    `commit ${idx.epoch} at ${fmtTime(idx.committed_at_ms)} (${fmtMs(idx.age_ms)} old)`];
  for (const d of (r.degraded || [])) parts.push(`degraded: ${d.route} (${d.reason})`);
  for (const d of (r.left_out || [])) parts.push(`left out: ${d.route} (${d.reason})`);
  $("meta").textContent = parts.filter(Boolean).join(" — ");
  if (!r.results.length) list.append(el("li", { class: "result muted", text: "No results for this key." }));
  r.results.forEach((h) => {
    const open = el("button", { type: "button", class: "open-doc", text: "Open document" });
    open.addEventListener("click", () => openDocument(h.doc_id, h.chunk_id));
    const p = pages(h);
    list.append(el("li", { class: "result", "data-doc-id": h.doc_id },
      el("h3", {}, `${h.rank}. `, el("span", { class: "title", text: h.title || h.doc_id })),
      el("div", { class: "path" },
        el("span", { class: "badge", text: h.kind }),
        el("span", { class: "doc-id", text: h.doc_id }),
        h.section && h.section.length ? ` · ${h.section.join(" › ")}` : "",
        p ? ` · ${p}` : "",
        h.source ? ` · ${h.source}` : ""),
      el("div", { class: "text" }, highlighted(h.text, h.highlights)),
      scoreTable(h.scores, h.score),
      open));
  });
  const ctx = $("context");
  if (r.context) { ctx.hidden = false; clear(ctx).append(el("h3", { text: `Packed context (${r.context_tokens} tokens)` }), el("pre", { text: r.context })); }
  else ctx.hidden = true;
}

async function search(ev) {
  if (ev) ev.preventDefault();
  message("");
  $("answer").hidden = true;
  if (!$("q").value.trim()) return;
  try {
    const r = await api("POST", "/v1/retrieve", requestBody());
    renderResults(r);
  } catch (e) {
    clear($("results")); $("meta").textContent = "";
    message(explain(e));
  }
}
$("search-form").addEventListener("submit", search);
for (const m of document.querySelectorAll('input[name="mode"]')) {
  m.addEventListener("change", () => { if ($("q").value.trim()) search(); });
}

$("ask").addEventListener("click", async () => {
  message("");
  if (!$("q").value.trim()) return;
  const box = $("answer");
  box.hidden = false;
  clear(box).append(el("span", { class: "muted", text: "asking the model…" }));
  try {
    const body = requestBody();
    delete body.highlight;
    delete body.pack;
    const r = await api("POST", "/v1/answer", body);
    clear(box).append(el("h3", { text: r.refused ? "Refused" : "Answer" }), el("p", { class: "text", text: r.answer }));
    const ol = el("ol", { class: "passages" });
    for (const p of r.passages || []) {
      const open = el("button", { type: "button", text: "open" });
      open.addEventListener("click", () => openDocument(p.doc_id, p.chunk_id));
      ol.append(el("li", { value: p.number }, `[${p.number}] ${p.title || p.doc_id} `, el("span", { class: "muted", text: (p.section || []).join(" › ") }), " ", open));
    }
    box.append(ol, el("div", { class: "muted", text: r.model ? `model ${r.model}` : "" }));
  } catch (e) {
    box.hidden = true;
    message(explain(e));
  }
});

// ---- a document --------------------------------------------------------------------------
async function openDocument(docId, chunkId, from) {
  message("");
  const q = new URLSearchParams({ limit: "200" });
  if (from) q.set("from", String(from));
  try {
    const r = await api("GET", `/v1/documents/${encodeURIComponent(docId)}/chunks?${q}`);
    if (!from) {
      state.doc = { docId, chunkId };
      show("doc-view");
      $("doc-title").textContent = r.title || r.doc_id;
      $("doc-meta").textContent = `${r.doc_id} · ${r.source} · ${r.total_chunks} chunks · commit ${r.index.epoch}`;
      clear($("doc-chunks"));
    }
    const hit = state.lastHits.find((h) => h.doc_id === docId && (h.chunk_id === chunkId || (h.passage_chunk_ids || []).includes(chunkId)));
    const hitIds = new Set(hit ? [hit.chunk_id, ...(hit.passage_chunk_ids || []), ...(hit.matched_children || [])] : [chunkId]);
    let first = null;
    for (const c of r.chunks) {
      const isHit = hitIds.has(c.chunk_id) || hitIds.has(c.parent_id);
      const li = el("li", { class: isHit ? "doc-chunk hit" : "doc-chunk", value: c.index + 1, "data-chunk-id": c.chunk_id },
        el("div", { class: "path" }, el("span", { class: "badge", text: `#${c.index}` }),
          c.section && c.section.length ? c.section.join(" › ") : "",
          c.parent_id ? el("span", { class: "muted", text: ` · parent ${c.parent_id.slice(0, 12)}` }) : ""),
        el("div", { class: "text", text: c.text }));
      if (isHit && !first) first = li;
      $("doc-chunks").append(li);
    }
    if (!from) showParent(docId, hit);
    const more = $("doc-more");
    more.hidden = r.next_from === undefined || r.next_from === null;
    more.onclick = () => openDocument(docId, chunkId, r.next_from);
    if (first) first.scrollIntoView({ block: "center" });
  } catch (e) {
    message(explain(e));
  }
}
$("doc-back").addEventListener("click", () => show("search-view"));

/// The parent of the opened result (parent-child indexes): its text, read with `around`.
async function showParent(docId, hit) {
  const box = $("doc-parent");
  box.hidden = true;
  const parentId = hit && (hit.kind === "parent" ? hit.chunk_id : hit.parent_id);
  if (!parentId) return;
  try {
    const q = new URLSearchParams({ around: parentId, neighbours: "0" });
    const r = await api("GET", `/v1/documents/${encodeURIComponent(docId)}/chunks?${q}`);
    const p = r.chunks.find((c) => c.chunk_id === parentId);
    if (!p) return;
    clear(box).append(el("h3", { text: "Parent of the result" }),
      el("div", { class: "path", text: (p.section || []).join(" › ") }),
      el("div", { class: "text", text: p.text }));
    box.hidden = false;
  } catch (e) {
    message(explain(e));
  }
}

// ---- status ------------------------------------------------------------------------------
function rows(table, pairs) {
  clear(table);
  for (const [k, v, cls] of pairs) table.append(el("tr", {}, el("th", { text: k }), el("td", { class: cls || "", text: v })));
}

function healthItem(name, h) {
  const ok = h && h.ok;
  return el("li", { class: ok ? "ok" : "bad", "data-health": name }, `${ok ? "✓" : "✗"} ${name}: `, el("span", { text: (h && h.detail) || "unknown" }));
}

/// A line plot of `series` ([{name, cls, points: [[t, v], ...]}]) into the SVG `plot`, its time
/// axis the window `[from, to]` (Unix ms) when given, else the samples' own span.
function linePlot(plot, series, unit, from, to) {
  clear(plot);
  const W = 640, H = 200, L = 52, R = 10, T = 10, B = 24;
  // A sample without a number (none measured then) is left out, not drawn at zero.
  for (const s of series) s.points = s.points.filter((p) => Number.isFinite(p[0]) && Number.isFinite(p[1]));
  const all = series.flatMap((s) => s.points);
  if (!all.length) {
    plot.append(Object.assign(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }), { textContent: "no samples yet" }));
    return;
  }
  const windowed = Number.isFinite(from) && Number.isFinite(to) && to > from;
  const t0 = windowed ? from : Math.min(...all.map((p) => p[0]));
  const t1 = windowed ? to : Math.max(...all.map((p) => p[0]));
  const vmax = Math.max(1, ...all.map((p) => p[1]));
  const x = (t) => L + (t1 === t0 ? (W - L - R) / 2 : ((t - t0) / (t1 - t0)) * (W - L - R));
  const y = (v) => H - B - (v / vmax) * (H - T - B);
  plot.append(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
  plot.append(svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
  for (const [v, yy] of [[vmax, T + 4], [0, H - B]]) {
    const t = svg("text", { x: L - 4, y: yy, "text-anchor": "end" }); t.textContent = unit(v); plot.append(t);
  }
  for (const [t, anchor] of t1 === t0 ? [[t0, "middle"]] : [[t0, "start"], [t1, "end"]]) {
    const e = svg("text", { x: x(t), y: H - 6, "text-anchor": anchor }); e.textContent = new Date(t).toLocaleTimeString(); plot.append(e);
  }
  for (const s of series) {
    if (!s.points.length) continue;
    plot.append(svg("polyline", { class: s.cls, points: s.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ") }));
    for (const p of s.points) {
      const c = svg("circle", { class: s.cls, cx: x(p[0]).toFixed(1), cy: y(p[1]).toFixed(1), r: 2 });
      const title = svg("title"); title.textContent = `${s.name} ${fmtMs(p[1])} at ${new Date(p[0]).toLocaleTimeString()}`;
      c.append(title); plot.append(c);
    }
  }
}

function renderStatus(s) {
  const n = s.node;
  rows($("status-indexes"), [
    ["tantivy documents", n.tantivy.documents ?? "–"],
    ["tantivy chunks", n.tantivy.chunks ?? "–"],
    ["milvus vectors", n.milvus.vectors ?? "–"],
    ["node ready", n.ready ? "yes" : "no", n.ready ? "ok" : "bad"],
    ["authentication", n.auth],
  ]);
  const i = n.index;
  rows($("status-commit"), [
    ["epoch", i.epoch],
    ...(n.generation ? [["generation", n.generation.serving || "–"]] : []),
    ...(n.generation && n.generation.opening
      ? [["opening", `${n.generation.opening.generation}: ${[n.generation.opening.status.tantivy, n.generation.opening.status.milvus].filter(Boolean).join("; ") || "ready"}`, "bad"]]
      : []),
    ...(n.generation && n.generation.pointer_error ? [["pointer", n.generation.pointer_error, "bad"]] : []),
    ["committed", fmtTime(i.committed_at_ms)],
    ["age", fmtMs(i.age_ms)],
    ["offsets", Object.entries(i.offsets || {}).map(([t, ps]) => Object.entries(ps).map(([p, o]) => `${t}/${p}: ${o}`).join(", ")).join("; ") || "–"],
  ]);
  const p = s.pipeline;
  const ps = p.status;
  const health = clear($("status-health"));
  health.append(healthItem("node tantivy", n.tantivy), healthItem("node milvus", n.milvus), healthItem("node model", n.model));
  if (ps && ps.health) for (const [k, h] of Object.entries(ps.health)) health.append(healthItem(`pipeline ${k}`, h));
  for (const w of n.auth_warnings || []) health.append(el("li", { class: "bad", text: `⚠ ${w}` }));
  const pipe = clear($("status-pipeline"));
  pipe.append(el("div", { class: p.state === "ok" ? "ok" : "bad", id: "pipeline-state", text: `state: ${p.state}` }));
  if (p.detail) pipe.append(el("div", { class: "muted", text: p.detail }));
  if (ps) pipe.append(el("div", { text: `phase: ${ps.phase}${ps.phase_detail ? ` (${ps.phase_detail})` : ""}` }));
  // Each plot spans its whole window (the last minutes up to the answer), not only its samples.
  const span = (at, w) => (Number.isFinite(at) && Number.isFinite(w) ? [at - w * 1000, at] : []);
  const fresh = (ps && ps.freshness && ps.freshness.samples) || [];
  linePlot($("freshness-plot"), [
    { name: "p50", cls: "p50", points: fresh.map((x) => [x.t_ms, x.p50_ms]) },
    { name: "max", cls: "max", points: fresh.map((x) => [x.t_ms, x.max_ms]) },
  ], fmtMs, ...span(ps && ps.generated_at_ms, ps && ps.freshness && ps.freshness.window_s));
  linePlot($("age-plot"), [
    { name: "age", cls: "age", points: (n.commit_ages.samples || []).map((x) => [x.t_ms, x.age_ms]) },
  ], fmtMs, ...span(s.generated_at_ms, n.commit_ages.window_s));
  const parts = clear($("status-partitions"));
  parts.append(el("tr", {}, ...["topic", "partition", "committed", "high watermark", "lag"].map((h) => el("th", { text: h }))));
  for (const q of (ps && ps.partitions) || []) {
    parts.append(el("tr", {}, ...[q.topic, q.partition, q.committed, q.high_watermark, q.lag].map((v) => el("td", { text: v ?? "–" }))));
  }
  const dl = (ps && ps.dead_letters) || null;
  const classes = clear($("dlq-classes"));
  if (!dl) classes.append(el("span", { class: "muted", text: "from the pipeline's status (not available)" }));
  else {
    classes.append(el("span", { text: `${dl.total} in all: ` }));
    for (const [c, k] of Object.entries(dl.by_class || {})) classes.append(el("span", { class: "badge", text: `${c} ${k}` }));
  }
  const latest = clear($("dlq-latest"));
  latest.append(el("tr", {}, ...["time", "key", "class", "stage", "message", "source"].map((h) => el("th", { text: h }))));
  for (const d of (dl && dl.latest) || []) {
    latest.append(el("tr", { class: "dead-letter" }, ...[fmtTime(d.time_ms), d.key, d.class, d.stage, d.message, d.source].map((v) => el("td", { text: v ?? "" }))));
  }
  $("status-time").textContent = `as of ${fmtTime(s.generated_at_ms)}`;
}

async function refreshStatus() {
  const admin = $("admin-key").value.trim();
  try {
    const s = await api("GET", "/v1/status", undefined, admin || state.key);
    message("");
    renderStatus(s);
  } catch (e) {
    message(e.status === 401
      ? `${explain(e)} The status page needs an admin key when the node has [query] admin_keys: enter it under Status.`
      : explain(e));
  }
}
$("status-refresh").addEventListener("click", refreshStatus);

showKeyState();
