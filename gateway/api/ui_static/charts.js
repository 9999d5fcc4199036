// Small line charts on a canvas, hand-written so the page needs nothing from the network.
// Each series has its own colour AND dash pattern AND end-of-line label, so colour is never the only cue.
"use strict";
(function () {
  const COLORS = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#9a6700", "#bf3989", "#0a7b83", "#57606a"];
  const DASHES = [[], [8, 4], [2, 3], [10, 3, 2, 3], [4, 4], [1, 5], [12, 6], [6, 2, 1, 2]];

  function style(index) {
    return { color: COLORS[index % COLORS.length], dash: DASHES[index % DASHES.length] };
  }

  function niceMax(value) {
    if (!(value > 0)) return 1;
    const step = Math.pow(10, Math.floor(Math.log10(value)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * step >= value) return m * step;
    return 10 * step;
  }

  function fmt(value) {
    if (value >= 100) return value.toFixed(0);
    if (value >= 10) return value.toFixed(1);
    return value.toFixed(2);
  }

  // series: [{name, index, points: [[epochMs, value|null], ...]}]; opts: {windowMs, now, unit}
  function draw(canvas, series, opts) {
    const ctx = canvas.getContext("2d");
    const w = canvas.width, h = canvas.height, left = 44, right = 96, top = 8, bottom = 22;
    const fg = getComputedStyle(document.body).color;
    ctx.clearRect(0, 0, w, h);
    ctx.font = "11px system-ui, sans-serif";
    const from = opts.now - opts.windowMs;
    let max = 0;
    for (const s of series) for (const [t, v] of s.points) if (t >= from && v != null) max = Math.max(max, v);
    max = niceMax(max * 1.1);
    const x = (t) => left + ((t - from) / opts.windowMs) * (w - left - right);
    const y = (v) => top + (1 - v / max) * (h - top - bottom);
    ctx.strokeStyle = "rgba(128,128,128,0.35)"; ctx.fillStyle = fg; ctx.lineWidth = 1; ctx.setLineDash([]);
    for (let i = 0; i <= 4; i++) {
      const v = (max * i) / 4, yy = y(v);
      ctx.beginPath(); ctx.moveTo(left, yy); ctx.lineTo(w - right, yy); ctx.stroke();
      ctx.fillText(fmt(v), 2, yy + 4);
    }
    const minutes = opts.windowMs / 60000;
    ctx.fillText((minutes >= 2 ? Math.round(minutes) + " min" : Math.round(minutes * 60) + " s") + " ago", left, h - 6);
    ctx.fillText("now", w - right - 20, h - 6);
    const labels = [];
    for (const s of series) {
      const st = style(s.index);
      ctx.strokeStyle = st.color; ctx.fillStyle = st.color; ctx.lineWidth = 2; ctx.setLineDash(st.dash);
      ctx.beginPath();
      let drawing = false, last = null;
      for (const [t, v] of s.points) {
        if (t < from || v == null) { drawing = false; continue; }
        if (drawing) ctx.lineTo(x(t), y(v)); else ctx.moveTo(x(t), y(v));
        drawing = true; last = [t, v];
      }
      ctx.stroke();
      if (last) labels.push({ y: y(last[1]), text: s.name + " " + fmt(last[1]), color: st.color });
    }
    ctx.setLineDash([]);
    labels.sort((a, b) => a.y - b.y);
    let prev = -Infinity;
    for (const label of labels) {
      const yy = Math.max(label.y + 4, prev + 12);
      ctx.fillStyle = label.color; ctx.fillText(label.text.slice(0, 18), w - right + 3, Math.min(yy, h - bottom));
      prev = yy;
    }
  }

  // A legend entry: a short SVG line in the series' colour and dash, then its name as text.
  function legendItem(name, index) {
    const st = style(index);
    const span = document.createElement("span");
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("width", "36"); svg.setAttribute("height", "10");
    const line = document.createElementNS(ns, "line");
    line.setAttribute("x1", "0"); line.setAttribute("y1", "5"); line.setAttribute("x2", "36"); line.setAttribute("y2", "5");
    line.setAttribute("stroke", st.color); line.setAttribute("stroke-width", "3");
    if (st.dash.length) line.setAttribute("stroke-dasharray", st.dash.join(" "));
    svg.appendChild(line);
    span.appendChild(svg);
    span.appendChild(document.createTextNode(" " + name));
    return span;
  }

  window.LineChart = { draw: draw, legendItem: legendItem };
})();
