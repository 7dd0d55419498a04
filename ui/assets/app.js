// ctxd dashboard: read-only views of the daemon's sessions and their
// savings ledgers (docs/proxy.md "The savings ledger"). No dependencies.
"use strict";
const $ = (s) => document.querySelector(s);
const usd = (v) => (v < 0 ? "-$" : "$") + Math.abs(v || 0).toFixed(4);
const esc = (s) => String(s == null ? "" : s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
async function get(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(path + ": " + r.status + " " + (await r.text()));
  return r.json();
}
let state = { after: "", pages: [""], sort: "id", desc: false, filter: "" };

async function totals() {
  const t = await get("/ui/api/totals");
  const s = t.totals;
  $("#totals").innerHTML = `${t.sessions} sessions with a ledger · saved <b id="t-saved">${usd(s.saved)}</b> of <span id="t-without">${usd(s.without_ctxd)}</span> without ctxd · observe mode: projected <span id="t-projected">${usd(s.projected_saved)}</span>`;
}

async function list() {
  const page = await get("/ui/api/sessions?limit=100&after=" + encodeURIComponent(state.after));
  let rows = page.sessions.filter((r) => !state.filter || (r.id + r.agent + r.model + r.state).includes(state.filter));
  const key = (r) => ({ saved: r.ledger ? r.ledger.saved : 0, tokens: r.tokens, updated: r.updated, model: r.model, agent: r.agent }[state.sort] ?? r.id);
  rows.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0) * (state.desc ? -1 : 1));
  const th = (k, l) => `<th class="l" data-sort="${k}">${l}</th>`;
  $("#main").innerHTML = `<p><input id="filter" placeholder="filter" value="${esc(state.filter)}"> ${page.next ? '<button id="next">next page</button>' : ""} ${state.pages.length > 1 ? '<button id="prev">previous page</button>' : ""}</p>
<table id="sessions"><tr>${th("id", "session")}${th("agent", "agent")}${th("model", "model")}<th>window</th>${th("tokens", "tokens")}<th class="l">state</th><th class="l">mode</th>${th("saved", "saved")}<th>without ctxd</th>${th("updated", "last activity")}</tr>
${rows.map((r) => `<tr data-id="${esc(r.id)}"><td class="l"><a href="#/s/${encodeURIComponent(r.id)}">${esc(r.id)}</a></td><td class="l">${esc(r.agent)}</td><td class="l">${esc(r.model)}</td><td>${r.context_limit}</td><td>${r.tokens}</td><td class="l">${esc(r.state)}</td><td class="l">${esc(r.mode || "")}</td><td class="saved">${r.ledger ? usd(r.ledger.saved) : "-"}</td><td>${r.ledger ? usd(r.ledger.without_ctxd) : "-"}</td><td>${esc(r.updated)}</td></tr>`).join("")}</table>`;
  document.querySelectorAll("th[data-sort]").forEach((h) => (h.onclick = () => { state.desc = state.sort === h.dataset.sort ? !state.desc : false; state.sort = h.dataset.sort; list(); }));
  $("#filter").onchange = (e) => { state.filter = e.target.value; list(); };
  if ($("#next")) $("#next").onclick = () => { state.pages.push(page.next); state.after = page.next; list(); };
  if ($("#prev")) $("#prev").onclick = () => { state.pages.pop(); state.after = state.pages[state.pages.length - 1]; list(); };
}

function chart(entries, limit, threshold) {
  const reqs = entries.filter((e) => e.kind === "request");
  const W = 760, H = 200, n = Math.max(reqs.length, 1);
  const top = Math.max(limit || 0, ...reqs.map((e) => Math.max(e.client_tokens, e.sent_tokens)), 1);
  const y = (v) => H - (v / top) * (H - 10);
  const x = (i) => 10 + (i * (W - 20)) / n;
  const line = (v, c, id) => v ? `<line id="${id}" x1="0" x2="${W}" y1="${y(v)}" y2="${y(v)}" stroke="${c}" stroke-dasharray="4"/>` : "";
  const pts = (f) => reqs.map((e, i) => `${x(i)},${y(f(e))}`).join(" ");
  const marks = reqs.map((e, i) => (e.rewrites || []).map((r) => `<text x="${x(i)}" y="12" font-size="9" class="mark">${r[0].toUpperCase()}</text>`).join("")).join("");
  return `<svg id="context-chart" width="${W}" height="${H}">${line(limit, "#b00", "window")}${line(threshold, "#e93", "threshold")}
<polyline fill="none" stroke="#aaa" points="${pts((e) => e.client_tokens)}"/><polyline fill="none" stroke="#223" stroke-width="2" points="${pts((e) => e.sent_tokens)}"/>${marks}</svg>
<div class="fig">dark: tokens ctxd sent; grey: what the client sent; red dashes: the window; orange: the threshold; C, P, O: a compaction, a pass, an offload before that request</div>`;
}

async function session(id) {
  const d = await get("/ui/api/sessions/" + encodeURIComponent(id));
  const s = d.session, t = d.totals;
  const reqs = d.entries.filter((e) => e.kind === "request");
  const maxTok = Math.max(1, ...reqs.map((e) => e.reported.cache_read + e.reported.cache_write_5m + e.reported.cache_write_1h));
  const bars = reqs.map((e, i) => { const w = e.reported.cache_write_5m + e.reported.cache_write_1h;
    const r = (300 * e.reported.cache_read) / maxTok, wr = (300 * w) / maxTok;
    return `<tr><td>${i + 1}</td><td class="l"><svg class="bars" width="300" height="10"><rect class="read" x="0" width="${r}" height="10"/><rect class="write" x="${r}" width="${wr}" height="10"/></svg></td><td>${e.reported.cache_read}</td><td>${w}</td><td class="l">${esc(Object.entries(e.causes || {}).map(([k, v]) => k + " " + v).join(", "))}</td><td>${usd(e.cost)}</td><td>${usd(e.counterfactual_cost)}</td></tr>`; }).join("");
  const maxBar = Math.max(1e-9, ...d.waterfall.map((b) => Math.abs(b.value)));
  const fall = d.waterfall.map((b) => `<tr class="wf"><td class="l">${esc(b.label)}</td><td class="${b.value < 0 ? "neg" : "pos"}">${usd(b.value)}</td><td class="l"><svg class="bars" width="300" height="10"><rect class="${b.value < 0 ? "read" : "write"}" width="${(300 * Math.abs(b.value)) / maxBar}" height="10"/></svg></td></tr>`).join("");
  $("#main").innerHTML = `<h2 id="session-id">${esc(s.id)}</h2>
<p>${esc(s.agent)} · ${esc(s.model)} · window ${s.context_limit} · threshold ${s.threshold} · ${s.tokens} tokens now · ${esc(s.state)} ${s.mode ? "· mode " + esc(s.mode) : ""}</p>
<p>enforce: <span id="s-requests">${t.requests}</span> requests, without ctxd <span id="s-without">${usd(t.without_ctxd)}</span>, paid <span id="s-paid">${usd(t.paid)}</span>, summarizer <span id="s-summarizer">${usd(t.summarizer)}</span>, saved <b id="s-saved">${usd(t.saved)}</b> (${(100 * t.saved_share).toFixed(1)} % of what the client would have paid)</p>
<p>observe: ${t.observed_requests} requests, paid as sent ${usd(t.observed)}, ctxd would have paid ${usd(t.projected)} + summarizer ${usd(t.observe_summarizer)}: projected saving <span id="s-projected">${usd(t.projected_saved)}</span></p>
<h3>Context size per request</h3>${chart(d.entries, s.context_limit, s.threshold)}
<h3>Waterfall: without ctxd → paid</h3><table id="waterfall">${fall}</table>
<h3>Cache reads (blue) and writes (orange) per request</h3><table id="cache"><tr><th>#</th><th class="l"></th><th>read</th><th>written</th><th class="l">writes by cause</th><th>paid</th><th>other side</th></tr>${bars}</table>
<h3>Compactions</h3>${(d.checkpoints || []).map((c) => `<div class="compaction"><b>checkpoint ${c.seq}</b> (${esc(c.reason)}, ${esc(c.binding)}): ${c.tokens_before} → ${c.tokens_after} tokens, ${c.summarized_messages} messages replaced<pre>${esc(c.summary)}</pre></div>`).join("") || "none"}
<h3>Diagnostics</h3>${(d.diagnostics || []).map((x) => `<pre>${esc(JSON.stringify(x))}</pre>`).join("") || "none"}`;
}

async function route() {
  try {
    await totals();
    const m = location.hash.match(/^#\/s\/(.+)$/);
    if (m) await session(decodeURIComponent(m[1])); else await list();
    document.body.dataset.ready = "1";
  } catch (e) {
    $("#main").textContent = String(e);
  }
}
window.addEventListener("hashchange", route);
route();
// Live: the figures are read again every 5 seconds.
setInterval(() => { if (!document.hidden && !$("#filter:focus")) route(); }, 5000);
