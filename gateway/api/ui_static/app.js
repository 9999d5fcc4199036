// The status page: polls the gateway's admin routes (the same data the /gateway/* API serves) every
// POLL_MS while the tab is visible, and redraws. Text goes in with textContent only, never as HTML.
"use strict";
(function () {
  const POLL_MS = 2000; // gateway/api/ui.py POLL_INTERVAL_S
  const HISTORY_MS = 10 * 60 * 1000; // what the charts keep: the last ten minutes since the page opened
  const MIN_SPAN_MS = 60 * 1000; // the charts' narrowest time axis, so a new page's points are not a sliver
  const FEED_ROWS = 25; // gateway/api/ui.py PAGE_POLLS reads as many
  const KEY = "spark-gateway-admin-key";
  const $ = (id) => document.getElementById(id);
  const state = { history: {}, order: [], backends: [], engines: true, timer: null, clockSkew: 0 };

  // ---------- formatting: every number with its unit, every time relative ----------
  function seconds(s) {
    if (s == null || !isFinite(s)) return "–";
    if (s < 1) return (s * 1000).toFixed(0) + " ms";
    if (s < 90) return s.toFixed(s < 10 ? 2 : 1) + " s";
    const m = Math.floor(s / 60), r = Math.round(s % 60);
    return m + " min " + r + " s";
  }
  function duration(s) { // a countdown: whole seconds
    s = Math.max(0, Math.round(s));
    if (s < 60) return s + " s";
    const m = Math.floor(s / 60);
    return m < 60 ? m + " min " + (s % 60) + " s" : Math.floor(m / 60) + " h " + (m % 60) + " min";
  }
  function ago(epochS) {
    if (epochS == null) return "never";
    const s = Math.max(0, Date.now() / 1000 - state.clockSkew - epochS);
    return s < 2 ? "just now" : duration(s) + " ago";
  }
  function tps(v) { return v == null ? "–" : v.toFixed(v < 10 ? 1 : 0) + " tok/s"; }
  function tokens(n) { return n == null ? "–" : n.toLocaleString("en") + " tokens"; }
  function gib(v) { return v == null ? "–" : v.toFixed(1) + " GiB"; }
  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text != null) node.textContent = text;
    if (cls) node.className = cls;
    return node;
  }

  // ---------- fetching, with the admin key when one is given ----------
  function key() { return sessionStorage.getItem(KEY) || ""; }
  async function get(path) {
    const headers = key() ? { Authorization: "Bearer " + key() } : {};
    const response = await fetch(path, { headers: headers, cache: "no-store" });
    if (response.status === 401 || response.status === 403) throw { auth: response.status };
    if (response.status === 404) return null;
    if (!response.ok) throw new Error(path + ": HTTP " + response.status);
    return response.json();
  }

  async function poll() {
    clearTimeout(state.timer);
    if (document.hidden) { state.timer = setTimeout(poll, POLL_MS); return; }
    try {
      const [backends, stats, decisions, policy, engines] = await Promise.all([
        get("/gateway/backends"), get("/gateway/stats"), get("/gateway/decisions?limit=" + FEED_ROWS),
        get("/gateway/policy"), state.engines ? get("/gateway/engines") : Promise.resolve(null),
      ]);
      state.engines = engines !== null;
      showContent(true);
      render(backends, stats, decisions, policy, engines);
      state.updated = Date.now() / 1000 - state.clockSkew;
    } catch (err) {
      if (err && err.auth) { askForKey(err.auth === 403 ? "That key is not the admin key." : key() ? "That key was refused." : ""); return; }
      notice("Cannot reach the gateway: " + (err && err.message ? err.message : err) + " (retrying)", true);
    }
    state.timer = setTimeout(poll, POLL_MS);
  }

  function render(backends, stats, decisions, policy, engines) {
    if (policy && policy.now) state.clockSkew = Date.now() / 1000 - policy.now;
    renderFleet(backends, stats);
    renderEngines(engines);
    sample(stats);
    renderCharts();
    renderShare(stats);
    renderDecisions(decisions);
    renderPolicy(policy);
    if (state.failing) notice(""); // the gateway answers again; an action's outcome stays shown
  }

  // ---------- fleet ----------
  // One word for what a client would meet: breaker open and stalled outrank the probe's status.
  function status(b) {
    if (b.breaker && b.breaker.state === "open") return ["breaker", "breaker open"];
    if (b.stalled) return ["stalled", "stalled"];
    if (b.status === "starting") return ["warming", "warming up"];
    if (b.status === "ready") return ["ready", "ready"];
    if (b.status === "dead") return ["dead", "dead"];
    return ["unknown", b.status || "unknown"];
  }

  function renderFleet(data, stats) {
    const box = $("backends");
    const engines = (stats && stats.engines) || {};
    const waiting = (data && data.queues) || {};
    const pools = (data && data.pools) || [];
    box.replaceChildren();
    state.backends = (data && data.backends) || [];
    for (const b of state.backends) {
      const [cls, word] = status(b);
      const card = el("article", null, "card s-" + cls);
      card.dataset.backend = b.name;
      card.dataset.status = cls;
      card.appendChild(el("h3", b.name));
      const badge = el("span", word, "badge");
      badge.dataset.role = "status";
      card.appendChild(badge);
      if (cls === "warming") {
        const eta = el("span", "", "eta");
        eta.dataset.deadline = b.eta_s == null ? "" : String(Date.now() + b.eta_s * 1000);
        card.appendChild(document.createTextNode(" "));
        card.appendChild(eta);
      }
      if (cls === "breaker" && b.breaker.retry_in_seconds > 0) {
        card.appendChild(el("span", " retry in " + seconds(b.breaker.retry_in_seconds)));
      }
      const dl = el("dl");
      const engine = engines[b.name] || {};
      const pool = pools.find((p) => p.backends.includes(b.name));
      const queue = pool && waiting[pool.model] ? waiting[pool.model].waiting : 0;
      const caps = [...(b.modalities || []), ...(b.tags || [])].join(", ") || "text";
      const rows = [
        ["Flavor", b.flavor || "–"], ["Device", b.device || "own"], ["Capabilities", caps],
        ["Context", tokens(b.context_length)],
        ["In flight", b.inflight + (b.max_concurrency ? " of " + b.max_concurrency : "") + (b.inflight === 1 && !b.max_concurrency ? " request" : " requests")],
        ["Queue", (engine.waiting != null ? engine.waiting + " in the engine, " : "") + queue + " at the gateway"],
      ];
      for (const [k, v] of rows) { dl.appendChild(el("dt", k)); dl.appendChild(el("dd", v)); }
      card.appendChild(dl);
      const detail = cls === "breaker" ? breakerDetail(b.breaker) : b.stall_detail || b.detail;
      if (detail && cls !== "ready") card.appendChild(el("p", detail, "detail"));
      box.appendChild(card);
    }
    tick();
  }

  function breakerDetail(breaker) {
    const failures = breaker.consecutive_failures + " failures in a row, " + breaker.window_failures + " in its window";
    return failures + "; opened " + breaker.times_opened + (breaker.times_opened === 1 ? " time" : " times");
  }

  // Once a second: warm-up countdowns and relative times move between polls.
  function tick() {
    for (const eta of document.querySelectorAll(".eta")) {
      const deadline = Number(eta.dataset.deadline);
      if (!eta.dataset.deadline) { eta.textContent = "(no estimate yet)"; continue; }
      const left = (deadline - Date.now()) / 1000;
      eta.textContent = left >= 0 ? "ready in ~" + duration(left) : "expected " + duration(-left) + " ago";
      eta.dataset.seconds = String(Math.round(left));
    }
    for (const node of document.querySelectorAll("[data-at]")) node.textContent = ago(Number(node.dataset.at));
    if (state.updated) $("updated").textContent = "Updated " + ago(state.updated) + ", every " + POLL_MS / 1000 + " s";
  }

  // ---------- engines ----------
  function renderEngines(data) {
    $("engines").hidden = !data;
    if (!data) return;
    const devices = $("devices");
    devices.replaceChildren();
    for (const [name, d] of Object.entries(data.devices || {})) {
      const p = el("p", null, "device");
      p.appendChild(el("strong", "Device " + name + ": "));
      p.appendChild(document.createTextNode(gib(d.resident_gib) + " of " + gib(d.memory_gib) + " budget in use "));
      const meter = el("meter");
      meter.min = 0; meter.max = d.memory_gib || 1; meter.value = d.resident_gib || 0;
      meter.setAttribute("aria-label", "memory in use on " + name);
      p.appendChild(meter);
      devices.appendChild(p);
    }
    const rows = $("engine-rows");
    const focused = document.activeElement && document.activeElement.dataset.engine;
    rows.replaceChildren();
    for (const e of data.engines || []) {
      const tr = el("tr");
      tr.dataset.engine = e.name;
      const cells = [e.name, e.model, e.phase + (e.detail ? " (" + e.detail + ")" : ""), e.device || "–",
        gib(e.memory_gib), e.inflight + (e.inflight === 1 ? " request" : " requests"), e.idle_s == null ? "–" : duration(e.idle_s)];
      for (const c of cells) tr.appendChild(el("td", c));
      const td = el("td");
      if (e.managed) {
        const running = e.phase === "running" || e.phase === "starting";
        const busy = e.phase === "draining" || e.phase === "stopping";
        const button = el("button", busy ? "Stopping…" : running ? "Stop" : "Start");
        button.disabled = busy;
        button.type = "button";
        button.dataset.engine = e.name;
        button.dataset.action = running ? "stop" : "start";
        button.setAttribute("aria-label", (running ? "Stop " : "Start ") + e.name);
        button.addEventListener("click", act);
        td.appendChild(button);
        if (focused === e.name) setTimeout(() => button.focus(), 0);
      } else td.textContent = "not managed";
      tr.appendChild(td);
      rows.appendChild(tr);
    }
  }

  async function act(event) {
    const button = event.currentTarget;
    const name = button.dataset.engine, action = button.dataset.action;
    button.disabled = true;
    notice((action === "stop" ? "Stopping " : "Starting ") + name + "…");
    try {
      const headers = key() ? { Authorization: "Bearer " + key() } : {};
      const response = await fetch("/gateway/engines/" + encodeURIComponent(name) + "/" + action, { method: "POST", headers: headers });
      const body = await response.json();
      notice(response.ok ? name + ": " + action + " done (" + body.engine.phase + ")"
        : name + ": " + action + " refused: " + (body.error ? body.error.message : body.engine ? body.engine.detail : response.status));
    } catch (err) {
      notice(name + ": " + action + " failed: " + err);
    }
    poll();
  }

  // ---------- charts ----------
  // Each backend's live window folded over its profiles, weighted by their sample counts.
  function folded(cells) {
    let n = 0; const sums = { ttft: [0, 0], itl: [0, 0], tps: [0, 0] };
    for (const c of Object.values(cells || {})) {
      n += c.count;
      const add = (k, v) => { if (v != null) { sums[k][0] += v * c.count; sums[k][1] += c.count; } };
      add("ttft", c.ttft_p50); add("itl", c.itl_mean == null ? null : c.itl_mean * 1000); add("tps", c.decode_tps_mean);
    }
    const mean = (k) => (sums[k][1] ? sums[k][0] / sums[k][1] : null);
    return { count: n, ttft: mean("ttft"), itl: mean("itl"), tps: mean("tps") };
  }

  function sample(stats) {
    if (!stats) return;
    const now = Date.now();
    const names = new Set([...state.backends.map((b) => b.name), ...Object.keys(stats.backends || {})]);
    for (const name of names) {
      if (!state.history[name]) { state.history[name] = []; state.order.push(name); }
      const f = folded((stats.backends || {})[name]);
      const engine = (stats.engines || {})[name] || {};
      const acc = engine.acceptance_total && engine.acceptance_total.acceptance_rate;
      const h = state.history[name];
      h.push({ t: now, ttft: f.ttft, itl: f.itl, tps: f.tps, acc: acc == null ? null : acc * 100 });
      while (h.length && h[0].t < now - HISTORY_MS) h.shift();
    }
  }

  function renderCharts() {
    const now = Date.now();
    const charts = [["c-ttft", "ttft", "s", "Time to first token p50"], ["c-itl", "itl", "ms", "Inter-token latency"],
      ["c-tps", "tps", "tok/s", "Output speed"], ["c-acc", "acc", "%", "Speculative acceptance"]];
    for (const [id, field, unit, title] of charts) {
      const series = state.order.map((name, index) => ({
        name: name, index: index, points: state.history[name].map((p) => [p.t, p[field]]),
      })).filter((s) => s.points.some((p) => p[1] != null));
      const canvas = $(id);
      window.LineChart.draw(canvas, series, { now: now, windowMs: span(now), unit: unit });
      const latest = series.map((s) => s.name + " " + fmtLatest(s.points, unit)).join(", ");
      canvas.setAttribute("aria-label", title + ", latest: " + (latest || "no data yet"));
      canvas.dataset.points = String(series.reduce((n, s) => n + s.points.filter((p) => p[1] != null).length, 0));
      canvas.dataset.latest = JSON.stringify(Object.fromEntries(series.map((s) => [s.name, lastValue(s.points)])));
    }
    const legend = $("legend");
    legend.replaceChildren(...state.order.map((name, i) => window.LineChart.legendItem(name, i)));
  }
  function span(now) {
    let first = now;
    for (const h of Object.values(state.history)) if (h.length) first = Math.min(first, h[0].t);
    return Math.min(HISTORY_MS, Math.max(MIN_SPAN_MS, now - first));
  }
  function lastValue(points) { for (let i = points.length - 1; i >= 0; i--) if (points[i][1] != null) return points[i][1]; return null; }
  function fmtLatest(points, unit) { const v = lastValue(points); return v == null ? "no data" : v.toFixed(2) + " " + unit; }

  function renderShare(stats) {
    const byBackend = {}, byProfile = {};
    let total = 0;
    for (const [backend, cells] of Object.entries((stats && stats.backends) || {})) {
      for (const [profile, c] of Object.entries(cells)) {
        byBackend[backend] = (byBackend[backend] || 0) + c.count;
        byProfile[profile] = (byProfile[profile] || 0) + c.count;
        total += c.count;
      }
    }
    bars($("share-backend"), byBackend, total);
    bars($("share-profile"), byProfile, total);
  }
  function bars(box, counts, total) {
    box.replaceChildren();
    if (!total) { box.appendChild(el("p", "No requests in the window yet.", "muted")); return; }
    for (const [name, n] of Object.entries(counts).sort((a, b) => b[1] - a[1])) {
      const pct = (100 * n) / total;
      const row = el("div", null, "bar");
      row.dataset.name = name;
      row.appendChild(el("span", name));
      const track = el("div", null, "track"), fill = el("div", null, "fill");
      fill.style.width = pct.toFixed(1) + "%";
      track.appendChild(fill);
      row.appendChild(track);
      row.appendChild(el("span", pct.toFixed(0) + "% (" + n + ")", "pct"));
      box.appendChild(row);
    }
  }

  // ---------- decisions ----------
  function pair(measured, predicted, format) {
    return format(measured) + " / " + (predicted == null ? "no prediction" : format(predicted));
  }
  function renderDecisions(data) {
    const rows = $("decision-rows");
    rows.replaceChildren();
    for (const d of (data && data.decisions) || []) {
      const tr = el("tr");
      tr.dataset.requestId = d.request_id;
      tr.dataset.backend = d.backend || d.chosen;
      const when = el("td", ago(d.at), "num");
      when.dataset.at = String(d.at);
      tr.appendChild(when);
      tr.appendChild(el("td", d.api));
      tr.appendChild(el("td", d.profile));
      const chosen = d.backend && d.backend !== d.chosen ? d.backend + " (after " + d.chosen + ")" : d.chosen;
      tr.appendChild(el("td", chosen));
      tr.appendChild(el("td", d.runner_up || "none"));
      tr.appendChild(el("td", d.reason, "reason"));
      const m = d.measured || {}, p = d.predicted || {};
      tr.appendChild(el("td", d.status == null ? "in flight" : pair(m.ttft_s, p.ttft_s, seconds), "num"));
      tr.appendChild(el("td", d.status == null ? "in flight" : pair(m.decode_tps, p.decode_tps, tps), "num"));
      const result = d.status == null ? "in flight" : d.status < 400 ? "✓ " + d.status : "✗ " + d.status + (d.error ? " " + d.error : "");
      tr.appendChild(el("td", result));
      rows.appendChild(tr);
    }
    if (!rows.children.length) {
      const tr = el("tr"), td = el("td", "No request routed yet.");
      td.colSpan = 9; tr.appendChild(td); rows.appendChild(tr);
    }
  }

  // ---------- policy ----------
  function renderPolicy(p) {
    const dl = $("policy-facts");
    dl.replaceChildren();
    const facts = !p || !p.configured ? [["Policy", "none: least-busy routing"]] : [
      ["File", p.source], ["SHA-256", p.sha256.slice(0, 16) + "…"], ["Version", String(p.version)],
      ["Profiles", p.profiles.join(", ")],
      ["Last reload", p.last_reload ? (p.last_reload.result === "ok" ? "✓ applied " : "✗ rejected ") : "none since start"],
      ["Reloads", p.reload_counts.ok + " applied, " + p.reload_counts.error + " rejected"],
    ];
    for (const [k, v] of facts) {
      dl.appendChild(el("dt", k));
      const dd = el("dd", v);
      if (k === "Last reload" && p.last_reload) {
        const at = el("span", ago(p.last_reload.at));
        at.dataset.at = String(p.last_reload.at);
        dd.appendChild(at);
      }
      dl.appendChild(dd);
    }
    const pre = $("policy-error");
    pre.hidden = !(p && p.last_error);
    pre.textContent = p && p.last_error ? "The file on disk is rejected; the policy above stays in force:\n" + p.last_error : "";
  }

  // ---------- key and page state ----------
  function notice(text, failing) {
    state.failing = Boolean(failing);
    if ($("notice").textContent !== text) $("notice").textContent = text;
  }
  function showContent(shown) {
    $("content").hidden = !shown;
    $("keyform").hidden = shown;
    $("forget").hidden = !key();
  }
  function askForKey(message) {
    showContent(false);
    $("backends").replaceChildren(); $("decision-rows").replaceChildren(); $("policy-facts").replaceChildren();
    notice(message || "This gateway has API keys: enter the admin key to see its status.");
    $("key").focus();
  }
  $("keyform").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, $("key").value.trim());
    $("key").value = "";
    poll();
  });
  $("forget").addEventListener("click", () => { sessionStorage.removeItem(KEY); askForKey(""); });
  document.addEventListener("visibilitychange", () => { if (!document.hidden) poll(); });
  setInterval(tick, 1000);
  poll();
})();
