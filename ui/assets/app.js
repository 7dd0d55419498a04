// ctxd dashboard: read-only views of the daemon's sessions and their
// savings ledgers (docs/proxy.md "The dashboard"). No dependencies.
"use strict";
const $ = (s) => document.querySelector(s);
// Four decimals; a value that rounds to zero is "$0.0000", never "-$0.0000".
const usd = (v) => { v = v || 0; const d = Math.round(v * 1e4) === 0 && Math.round(v * 1e6) !== 0 ? 6 : 4; const r = Math.round(v * 10 ** d) / 10 ** d; return (r < 0 ? "-$" : "$") + Math.abs(r).toFixed(d); };
const count = (n, one, many) => n + " " + (n === 1 ? one : many);
const esc = (s) => String(s == null ? "" : s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
async function get(path) {
  const r = await fetch(path, { cache: "no-store", credentials: "same-origin" });
  if (!r.ok) throw new Error(path + ": " + r.status + " " + (await r.text()));
  return r.json();
}

// The list's query: the server filters, sorts and pages every stored session.
const list = { q: "", sort: "updated", order: "desc", offset: 0, limit: 100 };
let view = null; // "list" or the id of the session shown

async function totals() {
  const t = await get("/ui/api/totals");
  const s = t.totals;
  $("#totals").innerHTML = `<span id="t-sessions">${count(t.sessions, "session", "sessions")}</span> with a ledger of ${t.stored} stored · saved <b id="t-saved">${usd(s.saved)}</b> of <span id="t-without">${usd(s.without_ctxd)}</span> without ctxd · observe mode: projected <span id="t-projected">${usd(s.projected_saved)}</span>`;
}

const columns = [["id", "session"], ["agent", "agent"], ["model", "model"], ["window", "window"], ["tokens", "tokens"], ["state", "state"], ["mode", "mode"], ["saved", "saved"], ["without_ctxd", "without ctxd"], ["updated", "last activity"]];

function listFrame() {
  $("#main").innerHTML = `<p><input id="filter" placeholder="filter: id, agent, model, state, mode" size="40" value="${esc(list.q)}">
<button id="prev">previous page</button> <button id="next">next page</button> <span id="range"></span></p>
<table id="sessions"><thead><tr>${columns.map(([k, l]) => `<th class="${["id", "agent", "model", "state", "mode"].includes(k) ? "l" : ""} sortable" data-sort="${k}">${l}</th>`).join("")}</tr></thead><tbody id="rows"></tbody></table>`;
  document.querySelectorAll("th[data-sort]").forEach((h) => (h.onclick = () => {
    list.order = list.sort === h.dataset.sort && list.order === "asc" ? "desc" : "asc";
    list.sort = h.dataset.sort; list.offset = 0; rows();
  }));
  let typing;
  $("#filter").oninput = (e) => { clearTimeout(typing); typing = setTimeout(() => { list.q = e.target.value; list.offset = 0; rows(); }, 300); };
  $("#prev").onclick = () => { list.offset = Math.max(0, list.offset - list.limit); rows(); };
  $("#next").onclick = () => { list.offset += list.limit; rows(); };
}

async function rows() {
  const qs = new URLSearchParams({ q: list.q, sort: list.sort, order: list.order, offset: list.offset, limit: list.limit });
  const page = await get("/ui/api/sessions?" + qs);
  if (view !== "list") return;
  $("#rows").innerHTML = page.sessions.map((r) => `<tr data-id="${esc(r.id)}"><td class="l"><a href="#/s/${encodeURIComponent(r.id)}">${esc(r.id)}</a></td><td class="l">${esc(r.agent)}</td><td class="l">${esc(r.model)}</td><td>${r.context_limit}</td><td>${r.tokens}</td><td class="l">${esc(r.state)}</td><td class="l">${esc(r.mode || "")}</td><td class="saved">${r.ledger ? usd(r.ledger.saved + (r.ledger.projected_saved || 0)) : "-"}</td><td>${r.ledger ? usd(r.ledger.without_ctxd) : "-"}</td><td>${esc(r.updated)}</td></tr>`).join("");
  const last = page.offset + page.sessions.length;
  $("#range").innerHTML = `<span id="shown">${page.sessions.length ? page.offset + 1 : 0}–${last}</span> of <span id="matched">${page.matched}</span> matching, <span id="total">${page.total}</span> stored · sorted by ${esc(list.sort)} ${list.order === "asc" ? "↑" : "↓"}`;
  $("#prev").disabled = page.offset === 0;
  $("#next").disabled = last >= page.matched;
  document.querySelectorAll("th[data-sort]").forEach((h) => h.classList.toggle("sorted", h.dataset.sort === list.sort));
}

function chart(entries, limit, threshold) {
  const reqs = entries.filter((e) => e.kind === "request");
  const W = 760, H = 200, n = Math.max(reqs.length, 1);
  const top = Math.max(limit || 0, ...reqs.map((e) => Math.max(e.client_tokens, e.sent_tokens, e.context_limit || 0)), 1);
  const y = (v) => H - (v / top) * (H - 16);
  const x = (i) => 10 + (i * (W - 20)) / n;
  const line = (v, c, id) => v ? `<line id="${id}" x1="0" x2="${W}" y1="${y(v)}" y2="${y(v)}" stroke="${c}" stroke-dasharray="4"/>` : "";
  const pts = (f) => reqs.map((e, i) => `${x(i)},${y(f(e))}`).join(" ");
  const marks = reqs.map((e, i) => (e.rewrites || []).map((r, k) => `<text x="${x(i) + 7 * k}" y="12" font-size="10" class="mark mark-${esc(r)}">${esc(r[0].toUpperCase())}</text><line x1="${x(i)}" x2="${x(i)}" y1="14" y2="${H}" stroke="#ccc"/>`).join("")).join("");
  return `<svg id="context-chart" width="${W}" height="${H}">${line(limit, "#b00", "window")}${line(threshold, "#e93", "threshold")}
<polyline fill="none" stroke="#aaa" points="${pts((e) => e.client_tokens)}"/><polyline fill="none" stroke="#223" stroke-width="2" points="${pts((e) => e.sent_tokens)}"/>${marks}</svg>
<div class="fig">dark: tokens ctxd sent (observe mode: would have sent); grey: what the client sent; red dashes: the window (${limit}); orange: the threshold (${threshold}); C, P, O: a compaction, a pass, an offload before that request</div>`;
}

// waterfall draws each bar from the running total before it to the one
// after: the first and last bars from zero, totals, their figures in the
// text colour; a negative bar (what ctxd removed) runs leftwards, in its
// own colour, and a positive one (a cost) has its figure in red.
function waterfall(bars) {
  let run = 0, hi = 0;
  const spans = bars.map((b, i) => {
    const absolute = i === 0 || i === bars.length - 1;
    const from = absolute ? 0 : run, to = absolute ? b.value : run + b.value;
    run = to; hi = Math.max(hi, from, to);
    return { b, from, to, absolute };
  });
  const W = 360, sc = (v) => (W * Math.max(v, 0)) / Math.max(hi, 1e-9);
  return spans.map(({ b, from, to, absolute }) => `<tr class="wf"><td class="l">${esc(b.label)}</td><td class="${absolute ? "tot" : b.value < 0 ? "neg" : "pos"}">${usd(b.value)}</td><td class="l"><svg class="bars" width="${W}" height="12"><rect class="${b.value < 0 ? "neg" : from === 0 ? "total" : "write"}" x="${sc(Math.min(from, to))}" width="${Math.max(1, Math.abs(sc(to) - sc(from)))}" height="12"/></svg></td></tr>`).join("");
}

async function session(id) {
  const d = await get("/ui/api/sessions/" + encodeURIComponent(id));
  if (view !== id) return;
  const s = d.session, t = d.totals;
  const reqs = d.entries.filter((e) => e.kind === "request");
  const writes = (u) => u.cache_write_5m + u.cache_write_1h;
  // ctxd's request: the one sent in enforce mode, the projection in observe mode.
  const ctxdUse = (e) => (e.mode === "observe" ? e.counterfactual : e.reported);
  const maxTok = Math.max(1, ...reqs.map((e) => ctxdUse(e).cache_read + writes(ctxdUse(e))));
  const bars = reqs.map((e, i) => { const u = ctxdUse(e), w = writes(u);
    const r = (300 * u.cache_read) / maxTok, wr = (300 * w) / maxTok;
    return `<tr class="req"><td>${i + 1}</td><td class="l">${esc(e.mode)}${e.uncached ? " (uncached)" : ""}${e.cold ? " (cold)" : ""}${e.cut ? " (cut)" : ""}</td><td>${e.sent_tokens} / ${e.context_limit || s.context_limit}</td><td class="l"><svg class="bars" width="300" height="10"><rect class="read" x="0" width="${r}" height="10"/><rect class="write" x="${r}" width="${wr}" height="10"/></svg></td><td>${u.cache_read}</td><td>${w}</td><td class="l">${esc(Object.entries(e.causes || {}).map(([k, v]) => k + " " + v).join(", "))}</td><td>${usd(e.cost)}</td><td>${usd(e.counterfactual_cost)}</td></tr>`; }).join("");
  const comps = (d.checkpoints || []).map((c, i) => `<div class="compaction"><b>checkpoint ${c.seq}</b> (${esc(c.reason || "")}, ${esc(c.shape || "")}, by ${esc(c.binding)}${c.stalled ? ", stalled" : ""}): replaced messages ${c.replaced_from}–${c.replaced_to} (${c.summarized_messages || 0} messages)${i > 0 ? " and the summary before it" : ""}; context ${c.tokens_before} → ${c.tokens_after} tokens; ${c.summary_bytes}-byte summary<pre>${esc(c.summary)}</pre></div>`).join("");
  // A diagnostic reads as its line (level, code, message); an event of
  // another shape as its JSON.
  const diags = (d.diagnostics || []).map((x) => {
    const m = x.data || {};
    const body = typeof m.message === "string"
      ? ` <span class="diag-${esc(m.level)}">${esc(m.level)}</span> <code>${esc(m.code)}</code>: ${esc(m.message)}`
      : `<pre>${esc(JSON.stringify(x.data, null, 1))}</pre>`;
    return `<div class="diag"><b>${esc(x.kind)}</b> seq ${x.seq} ${esc(x.time)}${body}</div>`;
  }).join("");
  $("#main").innerHTML = `<p><a href="#/">all sessions</a></p><h2 id="session-id">${esc(s.id)}</h2>
<p>${esc(s.agent)} · ${esc(s.model)} · window ${s.context_limit} · threshold ${s.threshold} · ${s.tokens} tokens now · ${esc(s.state)} ${s.mode ? "· mode " + esc(s.mode) : ""}</p>
<p>enforce: <span id="s-requests">${t.requests}</span> requests, without ctxd <span id="s-without">${usd(t.without_ctxd)}</span>, paid <span id="s-paid">${usd(t.paid)}</span>, summarizer <span id="s-summarizer">${usd(t.summarizer)}</span>, saved <b id="s-saved">${usd(t.saved)}</b> (${(100 * t.saved_share).toFixed(1)} % of what the client would have paid)</p>
<p>observe: ${t.observed_requests} requests, paid as sent ${usd(t.observed)}, ctxd would have paid ${usd(t.projected)} + summarizer ${usd(t.observe_summarizer)}: projected saving <span id="s-projected">${usd(t.projected_saved)}</span></p>
${t.uncached ? `<p class="note">${count(t.uncached, "request", "requests")} of a conversation whose upstream reported no cache use: both sides priced as uncached input, no cache saving claimed.</p>` : ""}
<h3>Context size per request</h3>${chart(d.entries, s.context_limit, s.threshold)}
<h3>Waterfall: without ctxd → paid with summarizer</h3><table id="waterfall">${waterfall(d.waterfall)}</table>
<div class="fig">each bar runs from the total before it to the total after it; green bars are negative (what ctxd removed), orange ones what a cause of cache writes cost, dark ones totals</div>
<h3>Cache reads (blue) and writes (orange) per request</h3><table id="cache"><tr><th>#</th><th class="l">mode</th><th>tokens / window</th><th class="l"></th><th>read</th><th>written</th><th class="l">writes by cause</th><th>paid</th><th>other side</th></tr>${bars}</table>
<h3>Compactions</h3><div id="compactions">${comps || "none"}</div>
<h3>Diagnostics</h3><div id="diagnostics">${diags || "none"}</div>`;
}

// refresh reads the figures of the current view again: at most one read at
// a time, and a change during a read makes one more.
let busy = false, again = false;
async function refresh() {
  if (busy) { again = true; return; }
  busy = true;
  try {
    await totals();
    if (view === "list") await rows(); else if (view) await session(view);
    document.body.dataset.ready = "1";
  } catch (e) {
    $("#main").textContent = String(e);
  } finally {
    busy = false;
    if (again) { again = false; refresh(); }
  }
}

function route() {
  const m = location.hash.match(/^#\/s\/(.+)$/);
  view = m ? decodeURIComponent(m[1]) : "list";
  if (view === "list") listFrame(); else $("#main").textContent = "loading…";
  refresh();
}
window.addEventListener("hashchange", route);
route();

// Live: the daemon's change events (GET /ui/api/events) say which sessions
// changed; the view reads its figures again when one concerns it. The
// browser reconnects a stream that ended; only when the stream fails for
// good (closed, or three failures without an open) does the page read its
// figures every 30 seconds instead, until the stream opens again.
let poll = null, updates = 0, failures = 0;
function live(on) {
  $("#live").textContent = on ? "live" : "event stream unavailable: reading every 30 s";
  $("#live").className = on ? "on" : "off";
  document.body.dataset.live = on ? "sse" : "poll";
  if (on && poll) { clearInterval(poll); poll = null; }
  if (!on && !poll) poll = setInterval(() => { if (!document.hidden) refresh(); }, 30000);
}
const es = new EventSource("/ui/api/events");
es.onopen = () => { failures = 0; document.body.dataset.sse = "opened"; live(true); };
es.onerror = () => { if (es.readyState === EventSource.CLOSED || ++failures >= 3) live(false); };
es.addEventListener("change", (ev) => {
  const d = JSON.parse(ev.data);
  if (view === "list" || d.all || (d.sessions || []).includes(view)) {
    document.body.dataset.updates = String(++updates);
    refresh();
  } else {
    totals().catch(() => {});
  }
});
