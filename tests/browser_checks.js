// Run inside a report page by the browser tests: what each Chart.js chart actually drew.
// For every visible line/scatter dataset, look at the canvas pixels around (up to 25 of) its points
// and count the points where the dataset's own colour is there (a point under another series' point is
// not counted either way); for each annotation line (level
// boundaries, markers, crashes), whether its colour is on the canvas along its x position.
(() => {
  const hex = (s) => {
    const m = /^#([0-9a-f]{6})$/i.exec(String(s || "").trim());
    if (!m) return null;
    const n = parseInt(m[1], 16);
    return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
  };
  const near = (d, k, c) => Math.abs(d[k] - c[0]) + Math.abs(d[k + 1] - c[1]) + Math.abs(d[k + 2] - c[2]) < 60;
  const found = (ctx, x, y, w, h, c) => {
    if (w <= 0 || h <= 0) return false;
    const d = ctx.getImageData(x, y, w, h).data;
    for (let k = 0; k < d.length; k += 4) if (d[k + 3] > 0 && near(d, k, c)) return true;
    return false;
  };
  // A line annotation drawn across a series or a shaded span is blended with what lies under it, so
  // its own colour may be nowhere in its column (a grey level line over a blue series and a span).
  // Then: in some rows, the column is darker than the pixels 4 px either side of it by a clear
  // margin (the lines are dark; the page is white), in at least a quarter of the rows.
  const lum = (d, k) => {
    const a = d[k + 3] / 255;  // composited over the white page
    return 255 - a * (255 - (0.3 * d[k] + 0.59 * d[k + 1] + 0.11 * d[k + 2]));
  };
  const darkerColumn = (ctx, x, y, w, h) => {
    if (w <= 0 || h <= 0 || x < 4) return false;
    const W = w + 8;
    const d = ctx.getImageData(x - 4, y, W, h).data;
    let rows = 0;
    for (let j = 0; j < h; j++) {
      const row = j * W * 4;
      const side = Math.min(lum(d, row), lum(d, row + (W - 1) * 4));
      let darkest = 255;
      for (let i = 4; i < 4 + w; i++) darkest = Math.min(darkest, lum(d, row + i * 4));
      if (darkest < side - 40) rows++;
    }
    return rows >= 0.25 * h;
  };
  const out = [];
  for (const chart of Object.values(Chart.instances)) {
    const ctx = chart.ctx;
    const r = chart.currentDevicePixelRatio || 1;
    const area = chart.chartArea;
    const res = { chart: chart.canvas.parentNode.dataset.chart, width: chart.width, height: chart.height,
                  datasets: [], annotations: [] };
    // where every drawn point is, so that a point hidden under another series' point (two series
    // both at 0, say) counts as covered rather than missing
    const others = (i, x, y) => chart.data.datasets.some((ds, j) => j !== i && chart.isDatasetVisible(j) &&
      chart.getDatasetMeta(j).data.some((el) => Math.abs(el.x - x) < 3 && Math.abs(el.y - y) < 3));
    chart.data.datasets.forEach((ds, i) => {
      const meta = chart.getDatasetMeta(i);
      const type = ds.type || chart.config.type;
      if (ds.isBand || !chart.isDatasetVisible(i) || !meta.data.length || type === "bar") return;
      const color = hex(ds.borderColor);
      if (!color) return;
      let tried = 0;
      let hits = 0;
      let covered = 0;
      const step = Math.max(1, Math.floor(meta.data.length / 25));
      for (let j = 0; j < meta.data.length; j += step) {
        const el = meta.data[j];
        if (el.skip || !Number.isFinite(el.x) || !Number.isFinite(el.y)) continue;
        tried++;
        if (found(ctx, Math.round(el.x * r) - 3, Math.round(el.y * r) - 3, 7, 7, color)) hits++;
        else if (others(i, el.x, el.y)) covered++;
      }
      res.datasets.push({ label: ds.label, points: meta.data.length, tried: tried - covered, hits });
    });
    const anns = ((chart.options.plugins || {}).annotation || {}).annotations || {};
    for (const [key, a] of Object.entries(anns)) {
      if (a.type !== "line") continue;
      const color = hex(a.borderColor);
      const x = chart.scales.x.getPixelForValue(a.xMin);
      const cx = Math.round(x * r) - 2, top = Math.round(area.top * r), h = Math.round((area.bottom - area.top) * r);
      const hit = color && (found(ctx, cx, top, 5, h, color) || darkerColumn(ctx, cx, top, 5, h));
      res.annotations.push({ key, x, drawn: Boolean(hit) });
    }
    out.push(res);
  }
  return out;
})()
