// The dashboard's page (private to src/dashboard/dashboard.cpp): one self-contained document, no
// CDN, no chart library. It polls /api/state once a second (the token from its own URL goes
// along), draws curves on canvases and lists ranks grouped by node, outliers first. When the
// state says "mode":"runs" (trainbox dash) it shows the runs instead: a legend, every run's
// curves overlaid on one canvas per metric (each canvas's data-series = the runs drawn on it),
// and the config keys that differ, one column per run.
#pragma once

namespace trainbox::dashboard {

inline constexpr const char* kDashboardPage = R"PAGE(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>trainbox run</title>
<style>
body{font:13px/1.35 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{background:#1d2330;color:#fff;padding:8px 14px;display:flex;gap:14px;align-items:baseline;flex-wrap:wrap}
header code{color:#cfd6e4;font-size:12px}
.badge{padding:2px 8px;border-radius:9px;font-weight:600;background:#3b82f6}
.badge.running{background:#16a34a}.badge.stalled,.badge.failed{background:#dc2626}
.badge.succeeded{background:#0d9488}.badge.stopping,.badge.restarting{background:#d97706}
main{padding:10px 14px;display:grid;gap:12px}
section{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:8px 10px}
h2{font-size:13px;margin:0 0 6px;color:#4b5563;text-transform:uppercase;letter-spacing:.04em}
.banner{padding:8px 10px;border-radius:6px;font-weight:600}
.banner.stall{background:#fee2e2;color:#991b1b}.banner.cause{background:#fef3c7;color:#92400e}
.banner.conn{background:#e5e7eb;color:#374151}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{padding:2px 8px;text-align:left;border-bottom:1px solid #eef0f3;white-space:nowrap}
th{font-weight:600;color:#6b7280;position:sticky;top:0;background:#fff}
tr.node td{background:#eef2f7;font-weight:600}
tr.rank{cursor:pointer}tr.rank:hover td{background:#f3f6fb}
tr.stalled td{background:#fee2e2}tr.slow td.rate{color:#b45309;font-weight:600}
tr.done td{color:#9ca3af}
.num{text-align:right}
#ranksbox{max-height:60vh;overflow:auto}
#curves{display:flex;flex-wrap:wrap;gap:10px}
.plot{border:1px solid #eef0f3;border-radius:4px}
.bar{display:inline-block;width:60px;height:8px;background:#e5e7eb;border-radius:4px;vertical-align:middle;margin-right:4px}
.bar i{display:block;height:8px;background:#3b82f6;border-radius:4px}
pre{margin:0;max-height:40vh;overflow:auto;background:#111827;color:#e5e7eb;padding:8px;border-radius:4px;font-size:12px}
.muted{color:#6b7280}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:middle;margin-right:4px}
body.runs .job{display:none}body:not(.runs) .runsonly{display:none}
#diff td{font-family:ui-monospace,monospace;font-size:12px}#diff td.key{font-family:inherit;font-weight:600}
</style></head><body>
<header><b id="title">trainbox run</b><span id="status" class="badge">…</span><code id="command"></code>
<span id="jobline" class="muted"></span><span id="updated" class="muted"></span></header>
<main>
<div id="banners"></div>
<section class="runsonly"><h2>Runs</h2><table id="runs"><thead><tr><th></th><th>run</th><th>status</th>
<th class="num">last step</th><th class="num">last loss</th><th>compression</th><th class="num">sent/step</th>
<th class="num">vs fp32 DDP</th><th class="num">waiting/step</th><th>folder</th></tr></thead><tbody></tbody></table></section>
<section class="job"><h2>Ranks</h2><div class="muted" id="ranksummary"></div><div id="ranksbox"><table id="ranks">
<thead><tr><th>rank</th><th>local</th><th>pid</th><th class="num">step</th><th>phase</th>
<th class="num">heartbeat age</th><th class="num">rate</th><th>state</th></tr></thead><tbody></tbody></table></div></section>
<section class="job"><h2>GPUs</h2><div id="gpus"></div></section>
<section><h2>Curves</h2><div id="curves"><span class="muted">no metrics.jsonl (trainbox train writes one into its run dir)</span></div></section>
<section class="runsonly"><h2>Config differences <span id="diffnote" class="muted"></span></h2><div id="diffbox"></div></section>
<section class="job"><h2>Log <span id="logrank" class="muted" data-rank="">(click a rank)</span></h2><pre id="log"></pre></section>
</main>
<script>
"use strict";
const tok = new URLSearchParams(location.search).get("token");
const q = tok ? "?token=" + encodeURIComponent(tok) : "";
// The log shown: the server's pick (job.log_rank: the culprit, the failed rank, else the first
// rank with a non-empty log) until a rank is clicked.
let logRank = null, logPicked = false, last = null;
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]));
const fmt = (v, d) => v === null || v === undefined ? "–" : Number(v).toFixed(d);
const bytes = (v) => v >= 1048576 ? fmt(v / 1048576, 2) + " MiB" : v >= 1024 ? fmt(v / 1024, 1) + " KiB" : fmt(v, 0) + " B";
// A run's gradient exchange (rank 0; the whole run once finished): the cells a comparison of
// dist.grad_compression settings reads. A ratio under 1 is more bytes than fp32 DDP sends.
function commCells(c) {
  if (!c) return `<td class="muted">(one process)</td><td class="num">–</td><td class="num">–</td><td class="num">–</td>`;
  const vs = c.compression_ratio <= 0 ? "–" : c.compression_ratio >= 1 ? fmt(c.compression_ratio, 2) + "x fewer" : fmt(1 / c.compression_ratio, 2) + "x more";
  return `<td>${esc(c.compression)}</td><td class="num">${bytes(c.sent_bytes_per_step)}</td>` +
    `<td class="num">${vs}</td><td class="num">${fmt(c.wait_s_per_step, 3)} s</td>`;
}
function rate(r) {
  if (r.samples_per_s !== null) return fmt(r.samples_per_s, 1) + " samples/s";
  if (r.steps_per_s !== null) return fmt(r.steps_per_s, 2) + " steps/s";
  return "–";
}
function renderJob(s) {
  const j = s.job;
  $("status").textContent = j.status; $("status").className = "badge " + j.status;
  $("command").textContent = j.command;
  const where = (j.run_dir ? `run dir ${j.run_dir} · ` : "") + (j.run_id && j.run_id !== "none" ? `job ${j.run_id} · ` : "");
  $("jobline").textContent = where + `${j.world_size} ranks on ${j.nnodes} node(s) · attempt ${j.attempt} (restarts ${j.restarts}/${j.max_restarts}) · up ${fmt(j.uptime_s,0)} s` + (j.exit_code !== null ? ` · exit ${j.exit_code}` : "");
  let b = "";
  if (j.stall_headline) b += `<div class="banner stall" id="stallheadline">stalled: ${esc(j.stall_headline)}</div>`;
  if (j.root_cause) b += `<div class="banner cause" id="rootcause">root cause: ${esc(j.root_cause)}</div>`;
  $("banners").innerHTML = b;
}
function renderRanks(s) {
  const nodes = new Map();
  for (const r of s.ranks) { if (!nodes.has(r.node_rank)) nodes.set(r.node_rank, []); nodes.get(r.node_rank).push(r); }
  const rates = s.ranks.map((r) => r.steps_per_s).filter((v) => v !== null).sort((a, b) => a - b);
  const median = rates.length ? rates[Math.floor(rates.length / 2)] : null;
  let html = "", stalled = 0;
  for (const [node, rs] of [...nodes.entries()].sort((a, b) => a[0] - b[0])) {
    // outliers first: stalled (culprits before the waiting), then the slowest, then by rank
    rs.sort((a, b) => (b.culprit - a.culprit) || (b.stalled - a.stalled) || (a.finished - b.finished) ||
      ((a.steps_per_s ?? 1e9) - (b.steps_per_s ?? 1e9)) || (a.step - b.step) || (a.rank - b.rank));
    const steps = rs.map((r) => r.step);
    html += `<tr class="node"><td colspan="8">node ${node} · ${esc(rs[0].host)} · ${rs.length} ranks · steps ${Math.min(...steps)}–${Math.max(...steps)}</td></tr>`;
    for (const r of rs) {
      stalled += r.stalled;
      const slow = median !== null && r.steps_per_s !== null && r.steps_per_s < 0.8 * median;
      const cls = ["rank", r.stalled ? "stalled" : "", slow ? "slow" : "", r.finished ? "done" : ""].join(" ");
      html += `<tr class="${cls}" data-rank="${r.rank}"><td>${r.rank}${r.culprit ? " ⚠" : ""}</td><td>${r.local_rank}</td><td>${r.pid}</td>` +
        `<td class="num step">${r.step}</td><td class="phase">${esc(r.phase || (r.reporting ? "" : "no heartbeat yet"))}</td>` +
        `<td class="num">${r.heartbeat_age_s === null ? "–" : fmt(r.heartbeat_age_s, 1) + " s"}</td>` +
        `<td class="num rate">${rate(r)}</td><td>${r.stalled ? "<b>stalled</b> " : ""}${r.finished ? "finished" : esc(r.state === "?" ? "" : r.state)}</td></tr>`;
    }
  }
  document.querySelector("#ranks tbody").innerHTML = html;
  $("ranksummary").textContent = `${s.ranks.length} ranks` + (stalled ? `, ${stalled} stalled` : "") +
    (s.job.samples_per_s !== null ? `, the job ${fmt(s.job.samples_per_s, 1)} samples/s` : "") +
    (median !== null ? `, median ${fmt(median, 2)} steps/s` : "");
}
function renderGpus(s) {
  if (!s.gpus.length) { $("gpus").innerHTML = `<span id="nogpus">no GPUs${s.gpu_note ? " (" + esc(s.gpu_note) + ")" : ""}</span>`; return; }
  let h = "<table><thead><tr><th>host</th><th>GPU</th><th>name</th><th>util</th><th>memory</th><th class='num'>temp</th><th class='num'>power</th></tr></thead><tbody>";
  for (const g of s.gpus) {
    const mem = g.mem_total_bytes ? 100 * g.mem_used_bytes / g.mem_total_bytes : 0;
    h += `<tr><td>${esc(g.host)}</td><td>${g.index}</td><td>${esc(g.name)}</td>` +
      `<td><span class="bar"><i style="width:${g.util_pct ?? 0}%"></i></span>${fmt(g.util_pct, 0)} %</td>` +
      `<td><span class="bar"><i style="width:${mem}%"></i></span>${fmt(g.mem_used_bytes / 2**30, 1)} / ${fmt(g.mem_total_bytes / 2**30, 1)} GiB</td>` +
      `<td class="num">${fmt(g.temperature_c, 0)} °C</td><td class="num">${fmt(g.power_w, 0)} W</td></tr>`;
  }
  $("gpus").innerHTML = h + "</tbody></table>";
}
// 10 colours (Tableau's), one per run in trainbox dash; a job's own curves take the first.
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563", "#65a30d", "#92400e"];
// series: [{pts: [[step, value]…], color}]; the canvas's data-series says how many were drawn.
function plot(name, series) {
  const W = 300, H = 140, L = 48, B = 18, c = document.createElement("canvas");
  c.width = W; c.height = H; c.className = "plot"; c.title = name; c.dataset.name = name;
  const g = c.getContext("2d"), drawn = series.map((s) => ({color: s.color, p: s.pts.filter((v) => v[1] !== null)})).filter((s) => s.p.length);
  c.dataset.series = drawn.length;
  g.font = "11px sans-serif"; g.fillStyle = "#374151"; g.fillText(name, L, 11);
  if (!drawn.length) return c;
  const all = drawn.flatMap((s) => s.p);
  let x0 = Math.min(...all.map((v) => v[0])), x1 = Math.max(...all.map((v) => v[0]));
  let y0 = Math.min(...all.map((v) => v[1])), y1 = Math.max(...all.map((v) => v[1]));
  if (x1 === x0) x1 = x0 + 1; if (y1 === y0) { y1 += Math.abs(y1) * 0.05 || 1; y0 -= Math.abs(y0) * 0.05 || 1; }
  const X = (x) => L + (x - x0) / (x1 - x0) * (W - L - 6), Y = (y) => H - B - (y - y0) / (y1 - y0) * (H - B - 16);
  g.strokeStyle = "#e5e7eb"; g.beginPath(); g.moveTo(L, 16); g.lineTo(L, H - B); g.lineTo(W - 4, H - B); g.stroke();
  g.fillStyle = "#6b7280"; g.textAlign = "right";
  g.fillText(Number(y1.toPrecision(3)), L - 3, 20); g.fillText(Number(y0.toPrecision(3)), L - 3, H - B);
  g.textAlign = "left"; g.fillText("step " + x0, L, H - 4); g.textAlign = "right"; g.fillText(String(x1), W - 4, H - 4);
  g.lineWidth = 1.5;
  for (const {color, p} of drawn) {
    g.strokeStyle = color; g.beginPath();
    p.forEach((v, i) => i ? g.lineTo(X(v[0]), Y(v[1])) : g.moveTo(X(v[0]), Y(v[1])));
    g.stroke();
    if (p.length === 1) { g.fillStyle = color; g.fillRect(X(p[0][0]) - 2, Y(p[0][1]) - 2, 4, 4); }
  }
  return c;
}
const curveOrder = (a, b) => (a.startsWith("train/") ? 0 : 1) - (b.startsWith("train/") ? 0 : 1) || a.localeCompare(b);
let curveKey = "";
function renderCurves(s) {
  const names = Object.keys(s.curves).sort(curveOrder);
  if (!names.length) return;
  const key = names.map((n) => n + ":" + s.curves[n].length + ":" + (s.curves[n].at(-1) || [])[0]).join(",");
  if (key === curveKey) return;
  curveKey = key;
  const box = $("curves"); box.innerHTML = "";
  for (const n of names) box.appendChild(plot(n, [{pts: s.curves[n], color: COLORS[0]}]));
}
// --- trainbox dash: runs compared ---
function renderRuns(s) {
  document.body.classList.add("runs"); document.title = "trainbox dash";
  $("title").textContent = "trainbox dash";
  const active = s.runs.filter((r) => r.status === "running").length;
  $("status").textContent = active ? `${active} running` : "runs"; $("status").className = "badge " + (active ? "running" : "succeeded");
  $("jobline").textContent = `${s.runs.length} runs · ${s.config_keys} config keys compared`;
  const color = (i) => COLORS[i % COLORS.length];
  $("runs").querySelector("tbody").innerHTML = s.runs.map((r, i) => {
    const loss = (r.curves["train/loss"] || []).at(-1);
    return `<tr class="run" data-run="${i}"><td><span class="swatch" style="background:${color(i)}"></span></td><td>${esc(r.name)}</td>` +
      `<td>${esc(r.status)}${r.config_found ? "" : " (no config.toml)"}</td><td class="num">${r.last_step}</td>` +
      `<td class="num">${loss ? fmt(loss[1], 4) : "–"}</td>${commCells(r.comm)}<td class="muted">${esc(r.dir)}</td></tr>`;
  }).join("");
  const names = [...new Set(s.runs.flatMap((r) => Object.keys(r.curves)))].sort(curveOrder);
  const key = names.join(",") + "|" + s.runs.map((r) => names.map((n) => (r.curves[n] || []).length + ":" + ((r.curves[n] || []).at(-1) || [])[0]).join(",")).join("|");
  if (key !== curveKey) {
    curveKey = key;
    const box = $("curves"); box.innerHTML = names.length ? "" : `<span class="muted">no curves yet (metrics.jsonl)</span>`;
    for (const n of names) box.appendChild(plot(n, s.runs.map((r, i) => ({pts: r.curves[n] || [], color: color(i)}))));
  }
  $("diffnote").textContent = `(${s.config_diff.length} of ${s.config_keys} keys differ)`;
  let h = `<table id="diff"><thead><tr><th>key</th>` + s.runs.map((r, i) => `<th><span class="swatch" style="background:${color(i)}"></span>${esc(r.name)}</th>`).join("") + `</tr></thead><tbody>`;
  for (const d of s.config_diff)
    h += `<tr data-key="${esc(d.key)}"><td class="key">${esc(d.key)}</td>` + d.values.map((v) => `<td>${v === null ? '<span class="muted">(absent)</span>' : esc(v)}</td>`).join("") + `</tr>`;
  $("diffbox").innerHTML = s.config_diff.length ? h + "</tbody></table>" : `<span class="muted">the configs are the same</span>`;
}
async function refreshLog() {
  if (logRank === null) return;
  try {
    const r = await fetch(`api/log${q}${q ? "&" : "?"}rank=${logRank}`, {cache: "no-store"});
    const l = await r.json();
    $("logrank").dataset.rank = logRank;
    $("logrank").textContent = `rank ${logRank}` + (l.note ? ` — ${l.note}` : "") + (logPicked ? "" : " (click a rank for another)");
    $("log").textContent = (l.stdout || []).join("\n") + ((l.stderr || []).length ? "\n--- stderr ---\n" + l.stderr.join("\n") : "");
  } catch (e) { }
}
document.querySelector("#ranks tbody").addEventListener("click", (e) => {
  const tr = e.target.closest("tr.rank"); if (!tr) return; logRank = Number(tr.dataset.rank); logPicked = true; refreshLog();
});
async function tick() {
  try {
    const r = await fetch("api/state" + q, {cache: "no-store"});
    if (r.status === 503) { $("banners").innerHTML = `<div class="banner conn">the job is starting: its first state is being collected</div>`; return; }
    if (!r.ok) throw new Error("HTTP " + r.status);
    last = await r.json();
    if (last.mode === "runs") { renderRuns(last); $("updated").textContent = "updated " + new Date().toLocaleTimeString(); $("banners").innerHTML = ""; return; }
    renderJob(last); renderRanks(last); renderGpus(last); renderCurves(last);
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
    if (!logPicked) logRank = last.job.log_rank ?? (last.ranks.length ? last.ranks[0].rank : null);
    refreshLog();
  } catch (e) {
    $("banners").innerHTML = `<div class="banner conn">no answer from trainbox run (${esc(e.message)}); the job may have ended</div>`;
  }
}
tick(); setInterval(tick, 1000);
</script></body></html>
)PAGE";

}  // namespace trainbox::dashboard
