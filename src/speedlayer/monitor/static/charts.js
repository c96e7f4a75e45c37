// Small canvas charts (no library): line timelines and histograms, sized to their element.
"use strict";
const Charts = (() => {
  const COLORS = ["#4fb3ff", "#ffb347", "#7ddc7a", "#ff6f91", "#c39bff", "#f4e06d", "#6ee7d8"];

  function setup(canvas) {
    const ratio = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || 300, h = canvas.clientHeight || 150;
    if (canvas.width !== Math.round(w * ratio) || canvas.height !== Math.round(h * ratio)) {
      canvas.width = Math.round(w * ratio); canvas.height = Math.round(h * ratio);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, w, h);
    ctx.font = "10px system-ui, sans-serif";
    return { ctx, w, h };
  }

  function fmt(v) {
    const a = Math.abs(v);
    if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
    if (a >= 100) return v.toFixed(0);
    if (a >= 10) return v.toFixed(1);
    return v.toFixed(2);
  }

  function axes(ctx, w, h, pad, max, min) {
    ctx.strokeStyle = "#2a3440"; ctx.fillStyle = "#8795a4"; ctx.lineWidth = 1;
    for (let i = 0; i <= 3; i++) {
      const y = pad.t + (h - pad.t - pad.b) * i / 3;
      ctx.beginPath(); ctx.moveTo(pad.l, y); ctx.lineTo(w - pad.r, y); ctx.stroke();
      ctx.fillText(fmt(max - (max - min) * i / 3), 2, y + 3);
    }
  }

  function message(canvas, text) {
    const { ctx, w, h } = setup(canvas);
    ctx.fillStyle = "#8795a4"; ctx.fillText(text, w / 2 - ctx.measureText(text).width / 2, h / 2);
    canvas.dataset.points = "0";
  }

  // series: [{name, values: [number|null]}], x: [ms]
  function lines(canvas, x, series, opts = {}) {
    const pts = series.reduce((n, s) => n + s.values.filter(v => v != null).length, 0);
    if (!x.length || !pts) { message(canvas, opts.empty || "waiting for batches…"); return; }
    const { ctx, w, h } = setup(canvas);
    const pad = { l: 38, r: 8, t: 6, b: 16 };
    const all = series.flatMap(s => s.values.filter(v => v != null));
    let max = Math.max(...all), min = opts.zero === false ? Math.min(...all) : 0;
    if (max === min) max = min + 1;
    max *= 1.05;
    axes(ctx, w, h, pad, max, min);
    const x0 = x[0], x1 = x[x.length - 1] === x0 ? x0 + 1 : x[x.length - 1];
    const px = t => pad.l + (w - pad.l - pad.r) * (t - x0) / (x1 - x0);
    const py = v => pad.t + (h - pad.t - pad.b) * (1 - (v - min) / (max - min));
    series.forEach((s, i) => {
      ctx.strokeStyle = s.color || COLORS[i % COLORS.length]; ctx.lineWidth = 1.6; ctx.beginPath();
      let open = false;
      s.values.forEach((v, j) => {
        if (v == null) { open = false; return; }
        if (!open) { ctx.moveTo(px(x[j]), py(v)); open = true; } else ctx.lineTo(px(x[j]), py(v));
      });
      ctx.stroke();
      if (s.values.filter(v => v != null).length === 1) {
        const j = s.values.findIndex(v => v != null);
        ctx.fillStyle = ctx.strokeStyle; ctx.beginPath(); ctx.arc(px(x[j]), py(s.values[j]), 2.5, 0, 7); ctx.fill();
      }
    });
    let lx = pad.l + 4;
    series.forEach((s, i) => {
      ctx.fillStyle = s.color || COLORS[i % COLORS.length];
      ctx.fillRect(lx, h - 10, 8, 3); ctx.fillStyle = "#8795a4"; ctx.fillText(s.name, lx + 11, h - 6);
      lx += 18 + ctx.measureText(s.name).width;
    });
    const last = series[0].values.filter(v => v != null);
    canvas.dataset.points = String(pts);
    canvas.dataset.series = series.map(s => s.name).join("|");
    canvas.dataset.last = last.length ? String(last[last.length - 1]) : "";
    canvas.dataset.lastT = String(x[x.length - 1]);
  }

  function histogram(canvas, values, opts = {}) {
    values = values.filter(v => v != null && isFinite(v));
    if (!values.length) { message(canvas, opts.empty || "waiting for batches…"); return; }
    const { ctx, w, h } = setup(canvas);
    const bins = opts.bins || 12;
    let lo = Math.min(...values), hi = Math.max(...values);
    if (hi === lo) hi = lo + 1;
    const counts = new Array(bins).fill(0);
    values.forEach(v => counts[Math.min(bins - 1, Math.floor((v - lo) / (hi - lo) * bins))]++);
    const pad = { l: 38, r: 8, t: 6, b: 16 };
    const max = Math.max(...counts) * 1.1;
    axes(ctx, w, h, pad, max, 0);
    const bw = (w - pad.l - pad.r) / bins;
    ctx.fillStyle = opts.color || COLORS[0];
    counts.forEach((c, i) => {
      const bh = (h - pad.t - pad.b) * c / max;
      ctx.fillRect(pad.l + i * bw + 1, h - pad.b - bh, bw - 2, bh);
    });
    ctx.fillStyle = "#8795a4";
    ctx.fillText(fmt(lo), pad.l, h - 4);
    const t = fmt(hi); ctx.fillText(t, w - pad.r - ctx.measureText(t).width, h - 4);
    canvas.dataset.points = String(values.length);
    canvas.dataset.last = String(values[values.length - 1]);
  }

  return { lines, histogram, message, fmt, COLORS };
})();
