// rlf ui: live curves with uPlot. A chart holds a group of metrics; new rows come from /api/metrics
// from the byte offset the page last saw, so a poll reads only what was appended.
"use strict";
const rlf = (() => {
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"];
  const GROUPS = {
    "metrics.jsonl": [
      {title: "reward", keys: ["reward_mean"], prefix: "reward/"},
      {title: "tool calls and errors", keys: ["tool_calls_per_trajectory", "tool_use", "tool_error_rate"]},
      {title: "stop reasons (samples per step)", prefix: "stop/", missingIsZero: true},  // a step logs only the reasons it saw
      {title: "response length (tokens)", keys: ["response_length"]},
      {title: "KL and logprob drift", keys: ["kl", "logprob_drift"]},
      {title: "step time split (s)", keys: ["rollout_s", "score_s", "train_s", "step_s", "wait_s"]},
      {title: "loss and grad norm", keys: ["loss", "grad_norm", "clip_frac"]},
      // asynchronous GRPO (trainer.max_staleness): shown only for runs that log them
      {title: "staleness (share of tokens by updates old)", prefix: "staleness/"},
      {title: "off-policy correction", keys: ["is_gap_mean", "is_gap_max", "is_beyond_bound", "is_weight_mean"]},
    ],
    "sft_metrics.jsonl": [
      {title: "SFT loss", keys: ["loss"]},
      {title: "SFT token accuracy", keys: ["token_accuracy"]},
    ],
  };

  function keysOf(group, rows) {
    const keys = [];
    for (const k of group.keys || []) if (rows.some(r => typeof r[k] === "number")) keys.push(k);
    if (group.prefix) {
      const seen = new Set();
      for (const r of rows) for (const k of Object.keys(r)) if (k.startsWith(group.prefix) && typeof r[k] === "number") seen.add(k);
      keys.push(...[...seen].sort());
    }
    return keys;
  }

  function yRange(u, min, max) {
    // A flat series (all 0, say) gets a unit-sized band around it, not uPlot's default 0..100.
    if (min == null || max == null) return [0, 1];
    if (min === max) return min === 0 ? [0, 1] : [min - Math.abs(min) * 0.5, max + Math.abs(max) * 0.5];
    const pad = (max - min) * 0.1;
    return [min >= 0 && min - pad < 0 ? 0 : min - pad, max + pad];
  }

  function tickLabels(u, splits, axisIdx, space, incr) {
    // uPlot's own labels keep 3 decimals, so ticks at 1e-7, 2e-7, ... all read "0": as few digits as
    // give each tick its value back, in exponent notation for very small and very large values.
    const mag = Math.max(0, ...splits.map(v => Math.abs(v)));
    const exp = mag > 0 && (mag < 1e-3 || mag >= 1e7);
    const tol = Math.abs(incr || mag || 1) * 1e-6;
    for (let d = 0; d <= 12; d++) {
      const out = splits.map(v => v === 0 ? "0" : exp ? v.toExponential(d) : v.toFixed(d));
      if (out.every((s, i) => Math.abs(Number(s) - splits[i]) <= tol)) return out;
    }
    return splits.map(v => String(v));
  }

  function chartWidth(box) {
    return Math.max(280, (box.clientWidth || 480) - 10);
  }

  function draw(box, title, xs, series) {
    // series: [{label, values}]; rebuilt when the set of series changes, else only its data. A series
    // logged every k steps (SFT's token accuracy, every 50) has gaps between its points: the line spans
    // them, and its points show whenever it has few.
    const sig = series.map(s => s.label + ":" + (s.values.filter(v => v !== null).length < 60)).join("|");
    let chart = box._chart;
    const data = [xs, ...series.map(s => s.values)];
    if (chart && box._sig === sig) { chart.setData(data); }
    else {
      if (chart) chart.destroy();
      box.innerHTML = "";
      const opts = {
        title, width: chartWidth(box), height: 220,
        scales: {x: {time: false}, y: {range: yRange}},
        axes: [{label: "step", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000]}, {values: tickLabels, size: 60}],
        series: [{label: "step"}, ...series.map((s, i) => ({label: s.label, stroke: COLORS[i % COLORS.length], width: 1.5,
                                                          spanGaps: true, points: {show: s.values.filter(v => v !== null).length < 60}}))],
      };
      chart = box._chart = new uPlot(opts, data, box);
      box._sig = sig;
    }
    if (!box._resize && window.ResizeObserver) {  // the grid gives each chart its share of the page's width
      box._resize = new ResizeObserver(() => {
        const w = chartWidth(box);
        if (box._chart && Math.abs(box._chart.width - w) > 2) box._chart.setSize({width: w, height: 220});
      });
      box._resize.observe(box);
    }
    box.dataset.points = String(xs.length);
  }

  function showStatus(status) {
    // The header's status, and the buttons that make sense in it (Stop only while the process runs).
    const st = document.getElementById("run-status");
    if (st && status) { st.textContent = status; st.className = "status " + status; }
    for (const b of document.querySelectorAll("[data-show-when]")) b.hidden = !b.dataset.showWhen.split(" ").includes(status);
  }

  function followEval(box) {
    // An eval run's figures come as a polled partial; it carries the run's status and trajectory count.
    box.addEventListener("htmx:afterSwap", () => {
      const e = box.querySelector(".eval-summary");
      if (!e) return;
      showStatus(e.dataset.status);
      const n = document.getElementById("run-trajectories");
      if (n) n.textContent = e.dataset.trajectories;
    });
  }

  function render(root, file, rows) {
    const groups = GROUPS[file] || [];
    rows = rows.filter(r => typeof r.step === "number");
    const xs = rows.map(r => r.step);
    root.dataset.points = String(xs.length);
    if (!rows.length) { if (!root.querySelector(".empty")) root.innerHTML = '<p class="empty">No ' + file + " lines yet.</p>"; return; }
    const empty = root.querySelector(".empty"); if (empty) empty.remove();
    for (const g of groups) {
      const keys = keysOf(g, rows);
      if (!keys.length) continue;
      let box = root.querySelector('[data-chart="' + g.title + '"]');
      if (!box) { box = document.createElement("div"); box.className = "chart"; box.dataset.chart = g.title; root.appendChild(box); }
      const missing = g.missingIsZero ? 0 : null;
      draw(box, g.title, xs, keys.map(k => ({label: k, values: rows.map(r => typeof r[k] === "number" ? r[k] : missing)})));
    }
  }

  function live(root, file, pollMs) {
    const run = root.dataset.run;
    let offset = 0, rows = [], busy = false;
    async function poll() {
      if (busy) return; busy = true;
      try {
        const res = await fetch("/api/metrics?run=" + encodeURIComponent(run) + "&file=" + file + "&offset=" + offset);
        if (res.ok) {
          const body = await res.json();
          if (body.offset < offset) { rows = []; }  // rewritten (a resumed run)
          if (body.rows.length || !offset) { rows = rows.concat(body.rows); render(root, file, rows); }
          offset = body.offset;
          const step = document.getElementById("run-step");
          if (step && file === "metrics.jsonl" && rows.length) step.textContent = String(rows[rows.length - 1].step);
          showStatus(body.status);
        }
      } finally { busy = false; }
    }
    poll();
    setInterval(poll, pollMs);
  }

  async function compare(root) {
    const runs = JSON.parse(root.dataset.runs);
    const all = {};
    for (const r of runs) {
      const res = await fetch("/api/metrics?run=" + encodeURIComponent(r) + "&file=metrics.jsonl&offset=0");
      all[r] = res.ok ? (await res.json()).rows.filter(x => typeof x.step === "number") : [];
    }
    for (const key of ["reward_mean", "tool_use", "tool_error_rate", "response_length", "kl", "step_s"]) {
      const steps = [...new Set(Object.values(all).flatMap(rows => rows.map(x => x.step)))].sort((a, b) => a - b);
      const series = runs.map(r => {
        const by = new Map(all[r].map(x => [x.step, x[key]]));
        return {label: r, values: steps.map(s => typeof by.get(s) === "number" ? by.get(s) : null)};
      });
      if (!series.some(s => s.values.some(v => v !== null))) continue;
      const box = document.createElement("div"); box.className = "chart"; box.dataset.chart = key; root.appendChild(box);
      draw(box, key, steps, series);
    }
  }

  function keepPicked(box) {
    // The runs table refreshes itself; the runs a user ticked to compare stay ticked.
    let picked = [];
    box.addEventListener("htmx:beforeSwap", () => {
      picked = [...box.querySelectorAll("input[name=run]:checked")].map(e => e.value);
    });
    box.addEventListener("htmx:afterSwap", () => {
      for (const e of box.querySelectorAll("input[name=run]")) if (picked.includes(e.value)) e.checked = true;
    });
  }

  return {live, compare, keepPicked, followEval};
})();
