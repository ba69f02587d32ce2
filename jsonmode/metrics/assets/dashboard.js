// jsonmode live dashboard: polls /metrics (the dashboard server proxies the exporter),
// keeps the samples in memory and draws the panels as SVG. No dependencies, no network
// beyond its own origin.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const OUTCOMES = ["first_try", "repaired", "retried", "failed"];
  const RESULTS = ["valid", "invalid_json", "schema_violation", "truncated", "thinking_truncated",
    "backend_error"];
  const REASONS = ["invalid_json", "schema_violation", "truncated", "thinking_truncated",
    "backend_error"];
  const COLORS = {
    first_try: "var(--green)",
    repaired: "var(--blue)",
    retried: "var(--amber)",
    failed: "var(--red)",
    valid: "var(--green)",
    invalid_json: "var(--orange)",
    schema_violation: "var(--purple)",
    truncated: "var(--amber)",
    thinking_truncated: "var(--teal)",
    backend_error: "var(--red)",
  };
  const PALETTE = ["var(--blue)", "var(--purple)", "var(--teal)", "var(--amber)", "var(--pink)",
    "var(--orange)", "var(--green)", "var(--red)"];
  const THRESHOLD = 0.95; // matches the example alert rule
  const MAX_HISTORY_MS = 16 * 60 * 1000;
  const FIRST_RATE_MS = 1000; // the second poll, for the first rates

  const params = new URLSearchParams(location.search);
  const state = {
    interval: 2000,
    history: [],        // [{t, series: Map(name -> [{labels, value}])}]
    reduced: [],        // per history entry, the numbers the panels need (for state.tier)
    tier: params.get("tier") || "",
    window: params.get("window") || "60",
    timer: null,
    polled: false,      // a sample has been taken (the first one counts since start)
  };

  // -- Prometheus text exposition ------------------------------------------------------

  function parseNumber(text) {
    if (text === "+Inf" || text === "Inf") return Infinity;
    if (text === "-Inf") return -Infinity;
    return Number(text);
  }

  function parseLabels(text) {
    const labels = {};
    const re = /([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?\s*/g;
    let m;
    while ((m = re.exec(text)) !== null) {
      labels[m[1]] = m[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    }
    return labels;
  }

  function parseExposition(text) {
    const series = new Map();
    for (const raw of text.split("\n")) {
      const line = raw.trim();
      if (!line || line[0] === "#") continue;
      let name, labels = {}, rest;
      const brace = line.indexOf("{");
      const space = line.indexOf(" ");
      if (brace !== -1 && (space === -1 || brace < space)) {
        const close = line.lastIndexOf("}");
        name = line.slice(0, brace);
        labels = parseLabels(line.slice(brace + 1, close));
        rest = line.slice(close + 1).trim();
      } else {
        name = line.slice(0, space);
        rest = line.slice(space + 1).trim();
      }
      const value = parseNumber(rest.split(/\s+/)[0]);
      if (!series.has(name)) series.set(name, []);
      series.get(name).push({ labels, value });
    }
    return series;
  }

  // -- reducing a sample to the numbers the panels need ----------------------------------

  function matches(labels, filter) {
    for (const key in filter) if (labels[key] !== filter[key]) return false;
    return true;
  }

  function total(series, name, filter) {
    let sum = 0;
    for (const s of series.get(name) || []) if (matches(s.labels, filter)) sum += s.value;
    return sum;
  }

  function by(series, name, label, filter) {
    const out = {};
    for (const s of series.get(name) || []) {
      if (!matches(s.labels, filter)) continue;
      const key = s.labels[label];
      out[key] = (out[key] || 0) + s.value;
    }
    return out;
  }

  function histogram(series, name, filter) {
    return {
      buckets: by(series, name + "_bucket", "le", filter),
      count: total(series, name + "_count", filter),
      sum: total(series, name + "_sum", filter),
    };
  }

  function reduce(sample, tier) {
    const f = tier ? { tier } : {};
    const s = sample.series;
    const schemas = {};
    for (const x of s.get("jsonmode_schema_requests_total") || []) {
      const name = x.labels.schema;
      schemas[name] = schemas[name] || {};
      schemas[name][x.labels.outcome] = (schemas[name][x.labels.outcome] || 0) + x.value;
    }
    return {
      t: sample.t,
      requests: by(s, "jsonmode_requests_total", "outcome", f),
      attempts: by(s, "jsonmode_attempts_total", "result", f),
      failures: by(s, "jsonmode_failures_total", "reason", f),
      repairs: by(s, "jsonmode_repairs_total", "kind", {}),
      keywords: by(s, "jsonmode_validation_errors_total", "keyword", {}),
      tokens: by(s, "jsonmode_tokens_total", "kind", f),
      schemas,
      duration: histogram(s, "jsonmode_request_duration_seconds", f),
      perRequest: histogram(s, "jsonmode_attempts_per_request", f),
      mask: histogram(s, "jsonmode_mask_duration_seconds", {}),
      compile: histogram(s, "jsonmode_compile_duration_seconds", {}),
      hits: total(s, "jsonmode_mask_cache_hits_total", {}),
      misses: total(s, "jsonmode_mask_cache_misses_total", {}),
      present: s.has("jsonmode_requests_total"),
      first: sample.first,
    };
  }

  // -- deltas between two reduced samples (counter resets count from zero) --------------

  function d(now, then) {
    if (then === undefined || then === null) return now || 0;
    const delta = (now || 0) - then;
    return delta < 0 ? now || 0 : delta;
  }

  function dMap(now, then) {
    const out = {};
    for (const key in now) out[key] = d(now[key], then ? then[key] : null);
    return out;
  }

  function dHist(now, then) {
    return {
      buckets: dMap(now.buckets, then ? then.buckets : null),
      count: d(now.count, then ? then.count : null),
      sum: d(now.sum, then ? then.sum : null),
    };
  }

  function sumOf(map) {
    let s = 0;
    for (const k in map) s += map[k];
    return s;
  }

  // Like PromQL's histogram_quantile: linear interpolation inside the bucket.
  function quantile(q, hist) {
    const bounds = Object.keys(hist.buckets)
      .map((le) => ({ le: parseNumber(le), count: hist.buckets[le] }))
      .sort((a, b) => a.le - b.le);
    if (!bounds.length) return null;
    const count = bounds[bounds.length - 1].count;
    if (!(count > 0)) return null;
    const rank = q * count;
    let lower = 0, below = 0;
    for (const b of bounds) {
      if (b.count >= rank) {
        if (b.le === Infinity) return lower;
        const inBucket = b.count - below;
        return inBucket > 0 ? lower + (b.le - lower) * ((rank - below) / inBucket) : b.le;
      }
      lower = b.le;
      below = b.count;
    }
    return lower;
  }

  // The baseline for entry i: the earliest entry inside the window before it (-1: none).
  function baseIndex(i) {
    const horizon = state.reduced[i].t - Number(state.window) * 1000;
    let j = i - 1;
    if (j < 0) return -1;
    while (j > 0 && state.reduced[j - 1].t >= horizon) j--;
    return j;
  }

  // Counts are deltas from the baseline: in a time window, the earliest sample in it;
  // "since start", and the page's very first sample (no earlier one exists), zero: the
  // totals since the exporter started, so the panels fill on the first poll. Rates
  // divide by the time between the samples compared ("since start": the first sample
  // this page took); the first sample has none.
  function derive(i) {
    const now = state.reduced[i];
    let then, rateBase;
    if (state.window === "all") {
      then = null;
      rateBase = i > 0 ? state.reduced[0] : null;
    } else {
      const j = baseIndex(i);
      then = j >= 0 ? state.reduced[j] : now.first ? null : now;
      rateBase = j >= 0 ? then : null;
    }
    const seconds = rateBase ? (now.t - rateBase.t) / 1000 : null;
    const requests = dMap(now.requests, then && then.requests);
    const n = sumOf(requests);
    const ratio = (part) => (n > 0 ? part / n : null);
    const rateRequests = dMap(now.requests, rateBase && rateBase.requests);
    const rateTokens = dMap(now.tokens, rateBase && rateBase.tokens);
    const per = (value) => (seconds ? value / seconds : null);
    const duration = dHist(now.duration, then && then.duration);
    const perRequest = dHist(now.perRequest, then && then.perRequest);
    const mask = dHist(now.mask, then && then.mask);
    const hits = d(now.hits, then && then.hits);
    const misses = d(now.misses, then && then.misses);
    const schemas = {};
    for (const name in now.schemas) {
      schemas[name] = dMap(now.schemas[name], then && then.schemas[name]);
    }
    return {
      t: now.t,
      n,
      requests,
      final: ratio(n - (requests.failed || 0)),
      firstTry: ratio(requests.first_try || 0),
      rates: Object.fromEntries(OUTCOMES.map((o) => [o, per(rateRequests[o] || 0)])),
      rps: per(sumOf(rateRequests)),
      p50: quantile(0.5, duration),
      p90: quantile(0.9, duration),
      p95: quantile(0.95, duration),
      p99: quantile(0.99, duration),
      meanAttempts: perRequest.count > 0 ? perRequest.sum / perRequest.count : null,
      perRequest,
      attempts: dMap(now.attempts, then && then.attempts),
      failures: dMap(now.failures, then && then.failures),
      repairs: dMap(now.repairs, then && then.repairs),
      keywords: dMap(now.keywords, then && then.keywords),
      schemas,
      maskP50: quantile(0.5, mask),
      maskP99: quantile(0.99, mask),
      maskCount: mask.count,
      cacheHitRate: hits + misses > 0 ? hits / (hits + misses) : null,
      cacheLookups: hits + misses,
      tokensIn: per(rateTokens.prompt || 0),
      tokensOut: per(rateTokens.completion || 0),
      compiles: now.compile.count,
      compileMean: now.compile.count > 0 ? now.compile.sum / now.compile.count : null,
    };
  }

  // -- formatting ---------------------------------------------------------------------------

  const pct = (v, digits = 1) => (v === null || v === undefined ? "–" : (v * 100).toFixed(digits) + "%");
  function seconds(v) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    if (v === 0) return "0";
    if (v < 1e-3) return (v * 1e6).toFixed(v < 1e-5 ? 1 : 0) + " µs";
    if (v < 1) return (v * 1e3).toFixed(v < 0.01 ? 2 : v < 0.1 ? 1 : 0) + " ms";
    return v.toFixed(v < 10 ? 2 : 1) + " s";
  }
  function number(v, digits = 2) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (v >= 1e4) return (v / 1e3).toFixed(1) + "k";
    if (v >= 100) return v.toFixed(0);
    return v.toFixed(digits);
  }
  const count = (v) => (v >= 1e4 ? number(v) : String(Math.round(v)));
  function clock(t) {
    const date = new Date(t);
    return date.toTimeString().slice(0, 8);
  }
  function tone(v) {
    if (v === null) return "none";
    if (v >= 0.99) return "good";
    if (v >= THRESHOLD) return "warn";
    return "bad";
  }

  // -- SVG helpers ------------------------------------------------------------------------

  function el(tag, attrs, parent) {
    const node = document.createElementNS(SVG, tag);
    for (const key in attrs || {}) node.setAttribute(key, attrs[key]);
    if (parent) parent.appendChild(node);
    return node;
  }

  function html(tag, className, text, parent) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }

  function niceStep(range, ticks) {
    const raw = range / Math.max(1, ticks);
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 2.5, 5, 10]) if (raw <= m * power) return m * power;
    return 10 * power;
  }

  function setPanel(id, ok) {
    const panel = document.getElementById(id);
    panel.dataset.state = ok ? "ok" : "empty";
    const chart = panel.querySelector(".chart");
    chart.replaceChildren();
    if (!ok) html("div", "empty", "no data in this window yet", chart);
    return chart;
  }

  // -- time-series chart ----------------------------------------------------------------------
  //
  // series: [{name, color, values: [number|null per point]}]; options: {times, format,
  // yMin, yMax, stacked, threshold, height}

  function timeChart(container, series, options) {
    const width = Math.max(260, container.clientWidth || 400);
    const height = options.height || 190;
    const pad = { left: 54, right: 12, top: 8, bottom: 22 };
    const w = width - pad.left - pad.right;
    const h = height - pad.top - pad.bottom;
    const times = options.times;
    const svg = el("svg", { width, height, viewBox: `0 0 ${width} ${height}` }, container);

    let stacks = null;
    if (options.stacked) {
      stacks = [];
      const acc = times.map(() => 0);
      for (const s of series) {
        const lower = acc.slice();
        s.values.forEach((v, i) => { if (v !== null) acc[i] += v; });
        stacks.push({ lower, upper: acc.slice() });
      }
    }
    const all = [];
    series.forEach((s, k) => s.values.forEach((v, i) => {
      if (v !== null && isFinite(v)) all.push(stacks ? stacks[k].upper[i] : v);
    }));
    let yMin = options.yMin !== undefined ? options.yMin : Math.min(0, ...all);
    let yMax = options.yMax !== undefined ? options.yMax : Math.max(...all, 0);
    if (typeof yMin === "function") yMin = yMin(all);
    if (!(yMax > yMin)) yMax = yMin + 1;
    const step = niceStep(yMax - yMin, 4);
    if (options.yMax === undefined) yMax = Math.ceil(yMax / step) * step;
    const t0 = times[0], t1 = times[times.length - 1];
    const span = Math.max(1, t1 - t0);
    const x = (t) => pad.left + ((t - t0) / span) * w;
    const y = (v) => pad.top + h - ((v - yMin) / (yMax - yMin)) * h;

    for (let v = Math.ceil(yMin / step) * step; v <= yMax + step * 1e-9; v += step) {
      el("line", { class: "gridline", x1: pad.left, x2: pad.left + w, y1: y(v), y2: y(v) }, svg);
      const label = el("text", { x: pad.left - 8, y: y(v) + 4, "text-anchor": "end" }, svg);
      label.textContent = options.format(v);
    }
    const ticks = Math.min(5, times.length);
    for (let k = 0; k < ticks; k++) {
      const t = t0 + (span * k) / Math.max(1, ticks - 1);
      const anchor = k === 0 ? "start" : k === ticks - 1 ? "end" : "middle";
      const label = el("text", { x: x(t), y: height - 6, "text-anchor": anchor }, svg);
      label.textContent = clock(t);
    }
    if (options.threshold !== undefined && options.threshold > yMin && options.threshold < yMax) {
      el("line", {
        class: "threshold", x1: pad.left, x2: pad.left + w,
        y1: y(options.threshold), y2: y(options.threshold),
      }, svg);
    }

    let points = 0;
    series.forEach((s, k) => {
      if (stacks) {
        const { lower, upper } = stacks[k];
        let top = "", bottom = [];
        let started = false;
        s.values.forEach((v, i) => {
          if (v === null) return;
          top += (started ? "L" : "M") + x(times[i]).toFixed(1) + "," + y(upper[i]).toFixed(1);
          bottom.unshift("L" + x(times[i]).toFixed(1) + "," + y(lower[i]).toFixed(1));
          started = true;
          points++;
        });
        if (started && s.values.some((v) => v > 0)) {
          el("path", {
            d: top + bottom.join("") + "Z", fill: s.color, "fill-opacity": 0.28, stroke: "none",
          }, svg);
          el("path", { d: top, fill: "none", stroke: s.color, "stroke-width": 1.5 }, svg);
        }
        return;
      }
      let path = "", pen = false, first = null, last = null;
      s.values.forEach((v, i) => {
        if (v === null || !isFinite(v)) { pen = false; return; }
        const px = x(times[i]).toFixed(1), py = y(v).toFixed(1);
        path += (pen ? "L" : "M") + px + "," + py;
        pen = true;
        if (first === null) first = [px, py];
        last = [px, py];
        points++;
      });
      if (!path) return;
      if (s.fill) {
        const base = y(Math.max(yMin, 0)).toFixed(1);
        el("path", {
          d: path + `L${last[0]},${base}L${first[0]},${base}Z`,
          fill: s.color, "fill-opacity": 0.1, stroke: "none",
        }, svg);
      }
      el("path", {
        d: path, fill: "none", stroke: s.color, "stroke-width": s.width || 2,
        "stroke-linejoin": "round", "stroke-linecap": "round",
        "stroke-dasharray": s.dash || "none",
      }, svg);
      if (last) el("circle", { cx: last[0], cy: last[1], r: 3, fill: s.color }, svg);
    });
    svg.dataset.points = String(points);

    // hover: a cursor line and a tooltip with every series' value
    const cursor = el("line", { class: "cursor", y1: pad.top, y2: pad.top + h, visibility: "hidden" }, svg);
    const overlay = el("rect", {
      x: pad.left, y: pad.top, width: w, height: h, fill: "transparent",
    }, svg);
    const tooltip = document.getElementById("tooltip");
    overlay.addEventListener("mousemove", (event) => {
      const box = svg.getBoundingClientRect();
      const t = t0 + ((event.clientX - box.left - pad.left) / w) * span;
      let i = 0;
      for (let k = 1; k < times.length; k++) if (Math.abs(times[k] - t) < Math.abs(times[i] - t)) i = k;
      cursor.setAttribute("x1", x(times[i]));
      cursor.setAttribute("x2", x(times[i]));
      cursor.setAttribute("visibility", "visible");
      tooltip.replaceChildren();
      html("div", "time", clock(times[i]), tooltip);
      for (const s of series) {
        const row = html("div", "row", null, tooltip);
        const name = html("span", null, null, row);
        html("i", null, null, name).style.background = s.color;
        name.appendChild(document.createTextNode(s.name));
        html("b", null, s.values[i] === null ? "–" : options.format(s.values[i]), row);
      }
      tooltip.hidden = false;
      tooltip.style.left = Math.min(event.clientX + 14, window.innerWidth - 200) + "px";
      tooltip.style.top = event.clientY + 12 + "px";
    });
    overlay.addEventListener("mouseleave", () => {
      cursor.setAttribute("visibility", "hidden");
      tooltip.hidden = true;
    });

    const legend = html("div", "legend", null, container);
    for (const s of series) {
      const item = html("span", null, null, legend);
      html("i", null, null, item).style.background = s.color;
      item.appendChild(document.createTextNode(s.name + " "));
      const latest = [...s.values].reverse().find((v) => v !== null && isFinite(v));
      html("b", null, latest === undefined ? "–" : options.format(latest), item);
    }
    if (options.thresholdLabel) {
      const item = html("span", "threshold-key", null, legend);
      html("i", null, null, item);
      item.appendChild(document.createTextNode(options.thresholdLabel));
    }
    return points;
  }

  // -- bars, columns, donut, sparkline ------------------------------------------------------

  function bars(container, rows, options) {
    const list = html("div", "bars", null, container);
    const max = Math.max(...rows.map((r) => r.value), 0);
    for (const r of rows) {
      const row = html("div", "bar-row", null, list);
      row.dataset.name = r.name;
      row.dataset.value = String(r.value);
      html("span", "name", r.name, row).title = r.name;
      const fill = html("div", "fill", null, html("div", "track", null, row));
      fill.style.width = (options.fraction ? r.value : max > 0 ? r.value / max : 0) * 100 + "%";
      fill.style.background = r.color;
      if (!(r.value > 0)) fill.style.minWidth = "0";
      const num = html("span", "num", null, row);
      html("b", null, r.label, num);
      if (r.extra) num.appendChild(document.createTextNode(" " + r.extra));
    }
    return rows.length;
  }

  function columns(container, cols) {
    const width = Math.max(260, container.clientWidth || 400);
    const height = 200;
    const pad = { left: 40, right: 8, top: 18, bottom: 24 };
    const w = width - pad.left - pad.right;
    const h = height - pad.top - pad.bottom;
    const svg = el("svg", { width, height, viewBox: `0 0 ${width} ${height}` }, container);
    const max = Math.max(...cols.map((c) => c.value), 1);
    const step = niceStep(max, 4);
    const top = Math.ceil(max / step) * step;
    const y = (v) => pad.top + h - (v / top) * h;
    for (let v = 0; v <= top + 1e-9; v += step) {
      el("line", { class: "gridline", x1: pad.left, x2: pad.left + w, y1: y(v), y2: y(v) }, svg);
      el("text", { x: pad.left - 6, y: y(v) + 4, "text-anchor": "end" }, svg).textContent = count(v);
    }
    const slot = w / cols.length;
    const barWidth = Math.min(56, slot * 0.68);
    cols.forEach((c, i) => {
      const cx = pad.left + slot * i + slot / 2;
      el("rect", {
        x: cx - barWidth / 2, y: y(c.value), width: barWidth,
        height: Math.max(0, pad.top + h - y(c.value)), rx: 3, fill: c.color,
      }, svg);
      el("text", { x: cx, y: height - 7, "text-anchor": "middle" }, svg).textContent = c.name;
      if (c.value > 0) {
        el("text", { x: cx, y: y(c.value) - 5, "text-anchor": "middle" }, svg).textContent = count(c.value);
      }
    });
    svg.dataset.points = String(cols.filter((c) => c.value > 0).length);
  }

  function donut(container, slices, centerLabel) {
    const box = html("div", "donut", null, container);
    const size = 168, r = 64, stroke = 22;
    const svg = el("svg", { width: size, height: size, viewBox: `0 0 ${size} ${size}` }, box);
    const sum = slices.reduce((a, s) => a + s.value, 0);
    const c = 2 * Math.PI * r;
    let offset = 0;
    el("circle", { cx: size / 2, cy: size / 2, r, fill: "none", stroke: "#0d131a", "stroke-width": stroke }, svg);
    for (const s of slices) {
      if (!(s.value > 0)) continue;
      const length = (s.value / sum) * c;
      el("circle", {
        cx: size / 2, cy: size / 2, r, fill: "none", stroke: s.color, "stroke-width": stroke,
        "stroke-dasharray": `${length} ${c - length}`, "stroke-dashoffset": String(-offset),
        transform: `rotate(-90 ${size / 2} ${size / 2})`,
      }, svg);
      offset += length;
    }
    el("text", { x: size / 2, y: size / 2 + 4, "text-anchor": "middle", class: "center-value" }, svg)
      .textContent = count(sum);
    el("text", { x: size / 2, y: size / 2 + 22, "text-anchor": "middle", class: "center-label" }, svg)
      .textContent = centerLabel;
    const legend = html("div", "legend", null, box);
    for (const s of slices) {
      const item = html("span", null, null, legend);
      item.dataset.name = s.name;
      item.dataset.value = String(s.value);
      html("i", null, null, item).style.background = s.color;
      item.appendChild(document.createTextNode(s.name + " "));
      html("b", null, count(s.value) + (sum > 0 ? ` · ${pct(s.value / sum, 0)}` : ""), item);
    }
  }

  function sparkline(svg, values, color) {
    svg.replaceChildren();
    const width = 200, height = 40;
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    const finite = values.filter((v) => v !== null && isFinite(v));
    if (finite.length < 2) return;
    let lo = Math.min(...finite), hi = Math.max(...finite);
    if (hi - lo < 1e-12) { lo -= 1; hi += 1; }
    const x = (i) => (i / Math.max(1, values.length - 1)) * width;
    const y = (v) => height - 4 - ((v - lo) / (hi - lo)) * (height - 10);
    let path = "", pen = false;
    values.forEach((v, i) => {
      if (v === null || !isFinite(v)) { pen = false; return; }
      path += (pen ? "L" : "M") + x(i).toFixed(1) + "," + y(v).toFixed(1);
      pen = true;
    });
    el("path", {
      d: path, fill: "none", stroke: color, "stroke-width": 1.5, opacity: 0.55,
      "vector-effect": "non-scaling-stroke",
    }, svg);
  }

  // -- panels ---------------------------------------------------------------------------------

  function tile(id, value, text, toneName, spark, color) {
    const node = document.getElementById(id);
    node.dataset.value = value === null || value === undefined ? "" : String(value);
    node.dataset.tone = toneName;
    node.querySelector(".value").textContent = text;
    sparkline(node.querySelector(".spark"), spark, color);
  }

  function render() {
    const n = state.reduced.length;
    if (!n) return;
    const derived = state.reduced.map((_, i) => derive(i));
    const times = derived.map((x) => x.t);
    const now = derived[n - 1];
    const series = (key) => derived.map((x) => x[key]);

    // tiles
    tile("tile-final", now.final, pct(now.final), tone(now.final), series("final"), "var(--green)");
    tile("tile-first", now.firstTry, pct(now.firstTry), tone(now.firstTry) === "none" ? "none" : "info",
      series("firstTry"), "var(--blue)");
    tile("tile-rps", now.rps, number(now.rps), now.rps === null ? "none" : "info", series("rps"), "var(--blue)");
    document.querySelector("#tile-rps .note").textContent = `${count(now.n)} requests in window`;
    tile("tile-p95", now.p95, seconds(now.p95), now.p95 === null ? "none" : "info", series("p95"), "var(--purple)");
    tile("tile-attempts", now.meanAttempts, number(now.meanAttempts), now.meanAttempts === null ? "none" :
      now.meanAttempts > 1.5 ? "warn" : "info", series("meanAttempts"), "var(--amber)");
    tile("tile-cache", now.cacheHitRate, pct(now.cacheHitRate), now.cacheHitRate === null ? "none" : "info",
      series("cacheHitRate"), "var(--teal)");

    const hasRequests = derived.some((x) => x.n > 0);

    // conformance over time
    {
      const chart = setPanel("panel-conformance", hasRequests);
      if (hasRequests) {
        timeChart(chart, [
          { name: "final", color: "var(--green)", values: series("final"), fill: true, width: 2.5 },
          { name: "first try", color: "var(--blue)", values: series("firstTry") },
        ], {
          times, format: (v) => pct(v, 0), yMax: 1, threshold: THRESHOLD, height: 210,
          thresholdLabel: `alert threshold ${pct(THRESHOLD, 0)}`,
          yMin: (all) => Math.max(0, Math.floor((Math.min(...all, 1) - 0.05) * 10) / 10),
        });
      }
    }
    // outcomes
    {
      const ok = derived.some((x) => x.rps !== null && x.n > 0);
      const chart = setPanel("panel-outcomes", ok);
      if (ok) {
        timeChart(chart, OUTCOMES.map((o) => ({
          name: o.replace("_", " "), color: COLORS[o], values: derived.map((x) => x.rates[o]),
        })), { times, format: (v) => number(v), stacked: true, yMin: 0 });
      }
    }
    // latency
    {
      const ok = derived.some((x) => x.p50 !== null);
      const chart = setPanel("panel-latency", ok);
      if (ok) {
        timeChart(chart, [
          { name: "p50", color: "var(--teal)", values: series("p50") },
          { name: "p90", color: "var(--purple)", values: series("p90") },
          { name: "p99", color: "var(--pink)", values: series("p99") },
        ], { times, format: seconds, yMin: 0 });
      }
    }
    // failures by reason
    {
      const sum = sumOf(now.failures);
      const chart = setPanel("panel-failures", sum > 0);
      if (sum > 0) {
        donut(chart, REASONS.map((r) => ({
          name: r.replace("_", " "), value: now.failures[r] || 0, color: COLORS[r],
        })), "failed");
      }
    }
    // attempts by result
    {
      const sum = sumOf(now.attempts);
      const chart = setPanel("panel-attempts", sum > 0);
      if (sum > 0) {
        bars(chart, RESULTS.map((r) => ({
          name: r.replace("_", " "), value: now.attempts[r] || 0, color: COLORS[r],
          label: count(now.attempts[r] || 0), extra: pct((now.attempts[r] || 0) / sum, 0),
        })), {});
      }
    }
    // attempts per request
    {
      const hist = now.perRequest;
      const chart = setPanel("panel-per-request", hist.count > 0);
      if (hist.count > 0) {
        const bounds = Object.keys(hist.buckets).map(parseNumber).sort((a, b) => a - b);
        const cols = [];
        let below = 0, lower = 0;
        for (const le of bounds) {
          const key = Object.keys(hist.buckets).find((k) => parseNumber(k) === le);
          const cumulative = hist.buckets[key];
          const name = le === Infinity ? `>${lower}` : le - lower > 1 ? `${lower + 1}–${le}` : String(le);
          cols.push({ name, value: cumulative - below, color: le <= 1 ? "var(--green)" : "var(--amber)" });
          below = cumulative;
          lower = le;
        }
        let last = cols.length - 1;
        while (last > 2 && cols[last].value === 0) last--;
        columns(chart, cols.slice(0, last + 1));
      }
    }
    // repairs by kind
    {
      const rows = Object.entries(now.repairs).filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1]);
      const chart = setPanel("panel-repairs", rows.length > 0);
      if (rows.length) {
        bars(chart, rows.slice(0, 8).map(([k, v], i) => ({
          name: k.replace(/_/g, " "), value: v, label: count(v), color: PALETTE[i % PALETTE.length],
        })), {});
      }
    }
    // validation errors by keyword
    {
      const rows = Object.entries(now.keywords).filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1]);
      const chart = setPanel("panel-keywords", rows.length > 0);
      if (rows.length) {
        bars(chart, rows.slice(0, 8).map(([k, v]) => ({
          name: k, value: v, label: count(v), color: "var(--purple)",
        })), {});
      }
    }
    // conformance by schema
    {
      const rows = Object.entries(now.schemas)
        .map(([name, outcomes]) => {
          const sum = sumOf(outcomes);
          return { name, sum, rate: sum > 0 ? (sum - (outcomes.failed || 0)) / sum : null };
        })
        .filter((r) => r.sum > 0)
        .sort((a, b) => b.sum - a.sum);
      const chart = setPanel("panel-schemas", rows.length > 0);
      if (rows.length) {
        const colors = { good: "var(--green)", warn: "var(--amber)", bad: "var(--red)", none: "var(--faint)" };
        bars(chart, rows.slice(0, 8).map((r) => ({
          name: r.name, value: r.rate, label: pct(r.rate), extra: `of ${count(r.sum)}`,
          color: colors[tone(r.rate)],
        })), { fraction: true });
      }
    }
    // tokens
    {
      const ok = derived.some((x) => (x.tokensIn || 0) + (x.tokensOut || 0) > 0);
      const chart = setPanel("panel-tokens", ok);
      if (ok) {
        timeChart(chart, [
          { name: "in (prompt)", color: "var(--blue)", values: series("tokensIn") },
          { name: "out (completion)", color: "var(--orange)", values: series("tokensOut") },
        ], { times, format: (v) => number(v, 1), yMin: 0 });
      }
    }
    // decoder: mask time
    {
      const ok = derived.some((x) => x.maskP50 !== null);
      const chart = setPanel("panel-mask", ok);
      if (ok) {
        timeChart(chart, [
          { name: "p50", color: "var(--teal)", values: series("maskP50"), fill: true },
          { name: "p99", color: "var(--pink)", values: series("maskP99") },
        ], { times, format: seconds, yMin: 0 });
        const note = html("div", "legend", null, chart);
        note.textContent = `${count(now.compiles)} schema compile(s)` +
          (now.compileMean !== null ? `, mean ${seconds(now.compileMean)}` : "");
      }
    }
    // decoder: cache hit rate
    {
      const ok = derived.some((x) => x.cacheHitRate !== null);
      const chart = setPanel("panel-cache", ok);
      if (ok) {
        timeChart(chart, [
          { name: "hit rate", color: "var(--teal)", values: series("cacheHitRate"), fill: true },
        ], { times, format: (v) => pct(v, 0), yMin: 0, yMax: 1 });
      }
    }
  }

  // -- polling ---------------------------------------------------------------------------------

  function setStatus(kind, text) {
    const node = document.getElementById("status");
    node.dataset.state = kind;
    node.querySelector("span").textContent = text;
  }

  async function poll() {
    try {
      const response = await fetch("metrics", { cache: "no-store" });
      const text = await response.text();
      if (!response.ok) throw new Error(text.trim() || `HTTP ${response.status}`);
      const sample = { t: Date.now(), series: parseExposition(text), first: !state.polled };
      state.polled = true;
      state.history.push(sample);
      state.reduced.push(reduce(sample, state.tier));
      while (state.history.length > 2 && sample.t - state.history[0].t > MAX_HISTORY_MS) {
        state.history.shift();
        state.reduced.shift();
      }
      if (!state.reduced[state.reduced.length - 1].present) {
        setStatus("down", "no jsonmode metrics at this exporter");
      } else {
        setStatus("live", "live");
      }
      document.getElementById("updated").textContent =
        `updated ${clock(sample.t)} · every ${state.interval / 1000} s · ${state.history.length} samples` +
        (state.history.length === 1 ? " · counts since the exporter started" : "");
      render();
    } catch (error) {
      setStatus("down", String(error.message || error).split("\n")[0]);
    }
  }

  async function start() {
    try {
      const config = await (await fetch("config.json", { cache: "no-store" })).json();
      state.interval = Math.max(100, Number(params.get("interval")) || config.interval * 1000);
      document.getElementById("source").textContent = config.metricsUrl;
    } catch (error) {
      document.getElementById("source").textContent = "(config unavailable)";
    }
    const tierSelect = document.getElementById("tier");
    const windowSelect = document.getElementById("window");
    // the choices are mirrored in data-selected so that they show in the DOM
    tierSelect.value = state.tier;
    windowSelect.value = state.window;
    tierSelect.dataset.selected = state.tier || "all";
    windowSelect.dataset.selected = state.window;
    tierSelect.addEventListener("change", () => {
      state.tier = tierSelect.value;
      tierSelect.dataset.selected = state.tier || "all";
      state.reduced = state.history.map((s) => reduce(s, state.tier));
      render();
    });
    windowSelect.addEventListener("change", () => {
      state.window = windowSelect.value;
      windowSelect.dataset.selected = state.window;
      render();
    });
    let resizeTimer = null;
    window.addEventListener("resize", () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(render, 150);
    });
    // Poll at once, so the panels fill on load; the second poll comes soon after (rates
    // need two samples), then one every interval.
    let polls = 0;
    const loop = async () => {
      await poll();
      polls++;
      const soon = polls === 1 && state.interval > FIRST_RATE_MS;
      state.timer = setTimeout(loop, soon ? FIRST_RATE_MS : state.interval);
    };
    loop();
  }

  start();
})();
