/* specload HTML report: draws the charts from the JSON payload embedded in the page.
 *
 * The page is built by specload/report/html.py; the tables and descriptions are plain HTML written
 * there, so they read without this script. This script only draws Chart.js charts into the
 * <div data-chart=...> placeholders, then sets window.specloadReady (the browser test waits on it).
 * Animation is off: a report is read, not watched, and the charts are complete when created.
 */
(function () {
  "use strict";
  const payload = JSON.parse(document.getElementById("specload-data").textContent);
  const C = window.Chart;
  C.defaults.animation = false;
  C.defaults.font.family = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
  C.defaults.font.size = 12;
  C.defaults.color = "#333";
  C.defaults.maintainAspectRatio = false;

  const fmt = (v, digits) => (v === null || v === undefined || Number.isNaN(v) ? "–" : Number(v).toFixed(digits));
  const digitsFor = (v) => (Math.abs(v) >= 100 ? 1 : Math.abs(v) >= 10 ? 2 : 3);
  const alpha = (hex, a) => {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${(n >> 16) & 255},${(n >> 8) & 255},${n & 255},${a})`;
  };

  function canvasIn(el) {
    const canvas = document.createElement("canvas");
    el.appendChild(canvas);
    return canvas;
  }

  // ------------------------------------------------------------------ charts against concurrency

  // one line per run (and per percentile), a band for its 95% interval where the run has one
  const levelsC = [...new Set(payload.series.flatMap((r) => r.levels.map((lv) => lv.concurrency)))].sort((a, b) => a - b);

  function concurrencyChart(el, metrics, yTitle) {
    const datasets = [];
    for (const run of payload.series) {
      for (const m of metrics) {
        const pts = [];
        const band = [];
        for (const lv of run.levels) {
          const cell = lv.metrics[m.key];
          if (!cell || cell.value === null || cell.value === undefined) continue;
          pts.push({ x: lv.concurrency, y: cell.value * (m.scale || 1), lo: cell.ci_low === null ? null : cell.ci_low * (m.scale || 1),
                     hi: cell.ci_high === null ? null : cell.ci_high * (m.scale || 1), n: lv.requests, key: lv.key });
          if (cell.ci_low !== null && cell.ci_low !== undefined && cell.ci_high !== null && cell.ci_high !== undefined) {
            band.push({ x: lv.concurrency, lo: cell.ci_low * (m.scale || 1), hi: cell.ci_high * (m.scale || 1) });
          }
        }
        if (!pts.length) continue;
        const label = metrics.length > 1 ? `${run.label} ${m.label}` : run.label;
        if (band.length) {
          // the band: a lower bound line (no fill) and an upper one filled down to it
          datasets.push({
            label: `${label} 95% low`, data: band.map((b) => ({ x: b.x, y: b.lo })), borderWidth: 0,
            pointRadius: 0, fill: false, isBand: true, order: 2,
          });
          datasets.push({
            label: `${label} 95% high`, data: band.map((b) => ({ x: b.x, y: b.hi })), borderWidth: 0,
            pointRadius: 0, fill: "-1", backgroundColor: alpha(run.color, 0.15), isBand: true, order: 2,
          });
        }
        datasets.push({
          label, data: pts, borderColor: run.color, backgroundColor: run.color, borderWidth: 2,
          borderDash: m.dash || [], pointRadius: 4, pointStyle: m.point || "circle", order: 1,
        });
      }
    }
    return new C(canvasIn(el), {
      type: "line",
      data: { datasets },
      options: {
        parsing: true,
        interaction: { mode: "nearest", intersect: false },
        scales: {
          // ticks at the concurrencies measured (a log axis would put them at 1..9 x 10^n)
          x: { type: "logarithmic", title: { display: true, text: "concurrency" },
               afterBuildTicks: (axis) => { axis.ticks = levelsC.map((v) => ({ value: v })); },
               ticks: { callback: (v) => String(v), autoSkip: false } },
          y: { title: { display: true, text: yTitle }, beginAtZero: true },
        },
        plugins: {
          legend: { labels: { filter: (item, data) => !data.datasets[item.datasetIndex].isBand } },
          tooltip: {
            filter: (item) => !item.dataset.isBand,
            callbacks: {
              title: (items) => (items.length ? items[0].raw.key || `C=${items[0].raw.x}` : ""),
              label: (item) => {
                const r = item.raw;
                const d = digitsFor(r.y);
                const ci = r.lo !== null && r.lo !== undefined ? ` [${fmt(r.lo, d)}, ${fmt(r.hi, d)}]` : " (no interval)";
                return `${item.dataset.label}: ${fmt(r.y, d)}${ci}${r.n ? ` · ${r.n} requests` : ""}`;
              },
            },
          },
        },
      },
    });
  }

  // throughput against p99 latency, the points joined in concurrency order
  function tradeoffChart(el) {
    const datasets = payload.series.map((run) => {
      const pts = [];
      for (const lv of run.levels) {
        const tp = lv.metrics.throughput;
        const lat = lv.metrics.e2e_p99;
        if (!tp || !lat || tp.value === null || lat.value === null) continue;
        pts.push({ x: tp.value, y: lat.value, c: lv.key || `C=${lv.concurrency}` });
      }
      return {
        label: run.label, data: pts, borderColor: run.color, backgroundColor: run.color, showLine: true,
        borderWidth: 2, pointRadius: 4,
      };
    }).filter((d) => d.data.length);
    return new C(canvasIn(el), {
      type: "scatter",
      data: { datasets },
      options: {
        interaction: { mode: "nearest", intersect: false },
        scales: {
          x: { title: { display: true, text: "output throughput, tok/s" }, beginAtZero: true },
          y: { title: { display: true, text: "p99 E2E latency, s" }, beginAtZero: true },
        },
        plugins: {
          tooltip: {
            callbacks: {
              label: (item) => `${item.dataset.label} ${item.raw.c}: ${fmt(item.raw.x, 1)} tok/s, p99 ${fmt(item.raw.y, 2)} s`,
            },
          },
        },
      },
    });
  }

  // ------------------------------------------------------------------ timelines

  const MARK_STYLE = {
    level: { color: "#555555", dash: [4, 3] },
    marker: { color: "#0072B2", dash: [] },
    crash: { color: "#D55E00", dash: [] },
    server_exit: { color: "#D55E00", dash: [2, 2] },
    error: { color: "#CC79A7", dash: [2, 2] },
  };

  function annotationsFor(tl, withLabels) {
    const out = {};
    tl.spans.forEach((s, i) => {
      out[`span${i}`] = {
        type: "box", xMin: s.start, xMax: s.end, drawTime: "beforeDatasetsDraw", borderWidth: 0,
        backgroundColor: s.kind === "down" ? "rgba(213,94,0,0.16)" : "rgba(120,120,120,0.14)",
        label: { display: withLabels, content: s.label, position: { x: "start", y: "start" }, font: { size: 11 },
                 color: s.kind === "down" ? "#9a3b00" : "#444" },
      };
    });
    // labels on the top chart: levels along the top edge, crashes staggered below them, markers
    // staggered along the bottom, so that marks close in time do not hide each other's labels
    const row = { top: 0, mid: 0, bottom: 0 };
    let lastLevelT = -Infinity;
    let levelRow = 0;
    tl.marks.forEach((m, i) => {
      const st = MARK_STYLE[m.kind] || MARK_STYLE.marker;
      const text = m.kind === "level" ? (m.manual ? `${m.label} (key)` : m.label) : m.label;
      const always = withLabels;
      const place = m.kind === "level" ? "top" : m.kind === "marker" ? "bottom" : "mid";
      const k = row[place]++;
      const position = place === "top" ? "end" : place === "bottom" ? "start" : "end";
      if (place === "top") {
        // levels close together (a quick ramp, keys pressed in a row) take turns on two rows
        levelRow = m.t - lastLevelT < 0.05 * tl.duration_s ? 1 - levelRow : 0;
        lastLevelT = m.t;
      }
      const yAdjust = place === "top" ? levelRow * 18 : place === "bottom" ? -(k % 2) * 20 : 24 + (k % 3) * 22;
      // a label is centred on its line; near either end of the axis it would run off the chart, so
      // it goes to the side with room (its width estimated from the text: 10 px font, ~6 px a char)
      const shown = text.length > 60 ? 60 : text.length;
      const half = (shown * 6 + 8) / 2;
      const side = m.t < tl.duration_s / 2 ? 1 : -1;
      const xAdjust = place === "top" ? 0 : side * (half + 3);
      out[`mark${i}`] = {
        type: "line", xMin: m.t, xMax: m.t, borderColor: st.color, borderWidth: m.kind === "crash" ? 2 : 1,
        borderDash: m.manual ? [1, 2] : st.dash, drawTime: "afterDatasetsDraw",
        label: {
          display: always, content: text.length > 60 ? text.slice(0, 57) + "..." : text,
          position, yAdjust, xAdjust, backgroundColor: alpha(st.color, 0.85),
          color: "#fff", font: { size: 10 }, padding: 3, z: m.kind === "crash" ? 2 : 1,
        },
        enter: (ctx) => { ctx.element.label.options.display = true; ctx.element.label.options.content = tipText(m); return true; },
        leave: (ctx) => { ctx.element.label.options.display = always; ctx.element.label.options.content = text; return true; },
      };
    });
    return out;
  }

  function tipText(m) {
    const text = m.kind === "level" ? `${m.label} ${m.detail}` : m.label;
    const lines = [`${fmt(m.t, 1)} s · ${text}`];
    if (m.detail && m.kind !== "level") lines.push(m.detail);
    return lines;
  }

  const AXIS_W = 58;
  const MAX_RIGHT_AXES = 2;

  function timelineChart(el, tl, spec) {
    const datasets = spec.series.map((s) => ({
      label: s.label, yAxisID: s.axis || "y", borderColor: s.color, backgroundColor: alpha(s.color, 0.5),
      // sparse series (a few server samples) get dots, or a lone sample would not show at all
      borderWidth: s.type === "bar" ? 0 : 1.5, pointRadius: s.data.length < 30 ? 2 : 0,
      spanGaps: s.spanGaps === false ? false : Math.max(tl.bin_s * 3, s.sparse ? 2 : 0),
      type: s.type || "line", data: s.data, stepped: s.stepped || false, barPercentage: 1.0, categoryPercentage: 1.0,
    }));
    const scales = {
      // offset false: a bar series (errors) would otherwise shift the axis by half a bar
      x: { type: "linear", min: 0, max: tl.duration_s, offset: false,
           title: { display: spec.xTitle, text: "seconds since the run started" } },
    };
    // fixed axis widths, and room kept for the right axes a chart lacks, so that the stacked
    // charts of a run share one time axis pixel for pixel
    let right = 0;
    for (const ax of spec.axes) {
      if (ax.position === "right") right += 1;
      scales[ax.id] = {
        type: "linear", position: ax.position || "left", beginAtZero: true, title: { display: true, text: ax.title },
        grid: { drawOnChartArea: ax.position !== "right" }, max: ax.max,
        afterFit: (axis) => { axis.width = AXIS_W; },
      };
    }
    const padRight = (MAX_RIGHT_AXES - right) * AXIS_W;
    return new C(canvasIn(el), {
      type: "line",
      data: { datasets },
      options: {
        parsing: false, normalized: true, layout: { padding: { right: padRight } },
        interaction: { mode: "index", axis: "x", intersect: false },
        scales,
        plugins: {
          annotation: { annotations: annotationsFor(tl, spec.labels), interaction: { mode: "nearest", axis: "x", intersect: true } },
          tooltip: {
            callbacks: {
              title: (items) => (items.length ? `${fmt(items[0].parsed.x, 1)} s` : ""),
              label: (item) => `${item.dataset.label}: ${fmt(item.parsed.y, digitsFor(item.parsed.y || 0))}`,
            },
          },
          decimation: { enabled: true, algorithm: "min-max" },
        },
      },
    });
  }

  // bins without a value (no request ended there) are left out; the line joins its neighbours
  // unless the hole is wider than a few bins (spanGaps), so a pause or an outage shows as a gap
  function xy(ts, vs, offset) {
    const out = [];
    for (let i = 0; i < ts.length; i++) {
      const v = vs[i];
      if (v !== null && v !== undefined) out.push({ x: ts[i] + offset, y: v });
    }
    return out;
  }

  function drawTimeline(el, run) {
    const tl = run.timeline;
    const half = tl.bin_s / 2; // a bin's value is drawn at its middle
    const s = tl.series;
    const charts = [];
    const mk = (name) => {
      const div = document.createElement("div");
      div.className = "chart timeline";
      div.dataset.chart = `${run.id}-${name}`;
      el.appendChild(div);
      return div;
    };
    charts.push(timelineChart(mk("load"), tl, {
      labels: true,
      axes: [{ id: "y", title: "tok/s" }, { id: "y2", title: "in flight", position: "right" }],
      series: [
        { label: `output tok/s (${tl.bin_s} s bins)`, color: "#0072B2", data: xy(tl.t_s, s.tok_s, half) },
        { label: "in-flight requests", color: "#999999", axis: "y2", data: xy(tl.t_s, s.inflight, half), stepped: "middle" },
      ],
    }));
    const lat = [
      // medians of the requests that ended in a bin: sparse at low load, so joined over up to 2 s
      { label: "TTFT p50 ms", color: "#E69F00", data: xy(tl.t_s, s.ttft_ms, half), sparse: true },
      { label: "TPOT p50 ms", color: "#009E73", axis: "y2", data: xy(tl.t_s, s.tpot_ms, half), sparse: true },
    ];
    if (s.errors && s.errors.some((v) => v > 0)) {
      lat.push({ label: "errors", color: "#D55E00", axis: "y3", type: "bar", data: xy(tl.t_s, s.errors, half), spanGaps: false });
    }
    const latAxes = [{ id: "y", title: "TTFT ms" }, { id: "y2", title: "TPOT ms", position: "right" }];
    if (lat.length > 2) latAxes.push({ id: "y3", title: "errors", position: "right" });
    charts.push(timelineChart(mk("latency"), tl, { labels: false, axes: latAxes, series: lat }));
    const sv = tl.server || {};
    const pts = (key, scale) => sv[key].t.map((t, i) => ({ x: t, y: sv[key].v[i] * (scale || 1) }));
    // server samples in two charts: queue state (requests, KV cache) and speed (tok/s, acceptance)
    const queue = [];
    const queueAxes = [];
    if (sv.running) queue.push({ label: "server running", color: "#56B4E9", data: pts("running") });
    if (sv.queued) queue.push({ label: "server queued", color: "#CC79A7", data: pts("queued") });
    if (queue.length) queueAxes.push({ id: "y", title: "requests" });
    if (sv.token_usage) {
      queue.push({ label: "KV cache usage %", color: "#999999", axis: "y2", data: pts("token_usage", 100) });
      queueAxes.push({ id: "y2", title: "KV %", position: "right" });
    }
    const speed = [];
    const speedAxes = [];
    if (sv.gen_tok_s) {
      speed.push({ label: "server generation tok/s", color: "#0072B2", data: pts("gen_tok_s") });
      speedAxes.push({ id: "y", title: "server tok/s" });
    }
    if (sv.accept_len) {
      speed.push({ label: "acceptance length", color: "#E69F00", axis: "y2", data: pts("accept_len") });
      speedAxes.push({ id: "y2", title: "accept len", position: "right" });
    }
    // the server's GPUs (--gpu-metrics): their power together, their mean utilisation
    const gpu = [];
    const gpuAxes = [];
    if (sv.gpu_power_w) {
      gpu.push({ label: "GPU power W (all GPUs)", color: "#D55E00", data: pts("gpu_power_w") });
      gpuAxes.push({ id: "y", title: "W" });
    }
    if (sv.gpu_util_pct) {
      gpu.push({ label: "GPU utilisation % (mean)", color: "#009E73", axis: "y2", data: pts("gpu_util_pct") });
      gpuAxes.push({ id: "y2", title: "util %", position: "right" });
    }
    if (queue.length) charts.push(timelineChart(mk("server-queue"), tl, { labels: false, axes: queueAxes, series: queue, xTitle: !speed.length && !gpu.length }));
    if (speed.length) charts.push(timelineChart(mk("server-speed"), tl, { labels: false, axes: speedAxes, series: speed, xTitle: !gpu.length }));
    if (gpu.length) charts.push(timelineChart(mk("gpu"), tl, { labels: false, axes: gpuAxes, series: gpu, xTitle: true }));
    // without server samples the heading above says why (none taken, or the source has none)
    return charts;
  }

  // ------------------------------------------------------------------ build

  const made = [];
  const byName = {
    throughput: () => [[{ key: "throughput", label: "" }], "output tok/s"],
    per_request: () => [[{ key: "per_request_tok_s", label: "" }], "per-request tok/s"],
    ttft: () => [[{ key: "ttft_p50", label: "p50" }, { key: "ttft_p99", label: "p99", dash: [5, 4], point: "triangle" }], "TTFT ms"],
    tpot: () => [[{ key: "tpot_p50", label: "p50" }, { key: "tpot_p99", label: "p99", dash: [5, 4], point: "triangle" }], "TPOT ms"],
    e2e: () => [[{ key: "e2e_p50", label: "p50" }, { key: "e2e_p99", label: "p99", dash: [5, 4], point: "triangle" }], "E2E latency s"],
  };
  const nothing = (el) => {
    el.classList.add("empty");
    el.textContent = "No run here has this figure.";
  };
  for (const el of document.querySelectorAll("[data-chart]")) {
    const name = el.dataset.chart;
    let chart = null;
    if (name === "tradeoff") chart = tradeoffChart(el);
    else if (byName[name]) {
      const [metrics, title] = byName[name]();
      chart = concurrencyChart(el, metrics, title);
    }
    if (chart === null) continue;
    if (chart.data.datasets.length) made.push(chart);
    else {
      chart.destroy();
      el.replaceChildren();
      nothing(el);
    }
  }
  for (const run of payload.runs) {
    const el = document.querySelector(`[data-timeline="${run.id}"]`);
    if (el && run.timeline) made.push(...drawTimeline(el, run));
  }
  window.specloadCharts = made;
  requestAnimationFrame(() => { window.specloadReady = true; });
})();
