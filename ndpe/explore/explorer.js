// The explorer's drawing code. Every number comes from DATA, computed by ndpe in Python (ndpe/explore/data.py):
// this file only looks numbers up, colours them, outlines cells and draws axes. No encoding formula lives here.
"use strict";

const TABS = [["growth", "Growth"], ["dials", "RoPE angle dials"], ["compare", "Click a query"],
  ["axes", "Axis decomposition"], ["spec", "Spectrogram"], ["bias", "Bias receptive field"], ["bench", "Benchmark"]];
const NAN_COLOUR = "#e4e4e4";

// ---- small helpers ------------------------------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== false && v !== null && v !== undefined) node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}
const unpacked = new WeakMap(), steps = new WeakMap();  // steps: each map's buffer -> its packing step
function unpack(p) {  // a byte per value over the map's range -> Float32Array (255 -> NaN), see ndpe.explore.codec
  if (!unpacked.has(p)) {
    const bin = atob(p.b64), out = new Float32Array(bin.length);
    for (let i = 0; i < bin.length; i++) {
      const v = bin.charCodeAt(i);
      out[i] = v === 255 ? NaN : p.offset + v * p.scale;
    }
    unpacked.set(p, out);
    steps.set(out.buffer, p.scale);
  }
  return unpacked.get(p);
}
// The largest packing step of the maps a number comes from (0 when none is packed): a value is known within half a
// step, so it is printed to the decimals a step holds (fmtHeld), never to digits the page does not have.
function stepOf(arrays) { return Math.max(0, ...arrays.map(a => (a && steps.get(a.buffer)) || 0)); }
function fmtHeld(x, step) {
  if (!(step > 0) || !Number.isFinite(Number(x))) return fmt(x);
  const decimals = Math.max(0, Math.floor(-Math.log10(step)));
  return decimals > 6 ? fmt(x, 4) : trimZeros(Number(x).toFixed(decimals));
}
function trimZeros(t) { const s = t.includes(".") ? t.replace(/0+$/, "").replace(/\.$/, "") : t; return s === "-0" ? "0" : s; }
function row(arr, i, n) { return arr.subarray(i * n, (i + 1) * n); }
// x to d significant digits, as the page prints every number: trailing zeros of a fraction dropped ("0.5", never
// "0.500"), an integer part kept whole ("100", "123456"), exponents outside 1e-4 .. 1e6 ("1.5e-7"); "n/a" for none.
function fmt(x, d = 3) {
  if (x === null || x === undefined || !Number.isFinite(Number(x))) return "n/a";
  const v = Number(x), a = Math.abs(v);
  if (a === 0) return "0";
  const trim = trimZeros;
  if (a < 1e-4 || a >= 1e6) { const [m, e] = v.toExponential(d - 1).split("e"); return `${trim(m)}e${e}`; }
  const p = v.toPrecision(d);  // "1.00e+3" where rounding reaches 10^d: print the integer instead
  return a >= 10 ** d || p.includes("e") ? String(Math.sign(v) * Math.round(a)) : trim(p);
}
// refuse(v): why the page has no picture for option v (a choice the kind refuses), or null: such an option is shown
// disabled, the reason's first clause beside its name and the whole of it in its tooltip, instead of being offered
// and answered with an error.
function select(label, id, options, value, onchange, disabled, refuse) {
  const s = el("select", {id, disabled: disabled ? true : null, onchange: e => onchange(e.target.value)});
  for (const o of options) {
    const [v, t] = Array.isArray(o) ? o : [o, o], why = refuse ? refuse(v) : null;
    s.append(el("option", {value: v, selected: String(v) === String(value) ? true : null, disabled: why ? true : null,
      title: why, text: why ? `${t} — ${shortReason(why)}` : t}));
  }
  return el("label", {for: id}, label, s);
}
function shortReason(why) { const s = why.split(":")[0]; return s.length > 44 ? s.slice(0, 43) + "…" : s; }
function refused(entry) { return entry && entry.error ? entry.error : null; }

// ---- colour: each quantity's map (the figures' own, sampled by matplotlib) ----------------------------------
// A scale spans the values drawn, so a map whose values all lie in 0.6 .. 1 uses the whole of its half of the
// colours. A diverging map keeps white at 0 and each sign on its own side: negative values [lo, 0] take the lower
// half of the colours, positive ones [0, hi] the upper half (values of one sign: their range fills that half).
function limits(quantity, arrays) {
  let lo = Infinity, hi = -Infinity;
  for (const a of arrays) for (const v of a) if (Number.isFinite(v)) { if (v < lo) lo = v; if (v > hi) hi = v; }
  if (!Number.isFinite(lo)) { lo = -1; hi = 1; }
  if (hi - lo < 1e-6) { lo -= 0.5; hi += 0.5; }
  return [lo, hi, stepOf(arrays)];
}
function position(v, quantity, lim) {  // 0 .. 1 along the colour map
  const [lo, hi] = lim;
  if (!DATA.cmaps[quantity].diverging) return (v - lo) / (hi - lo);
  if (v >= 0) { const from = Math.max(lo, 0); return hi > from ? 0.5 + 0.5 * (v - from) / (hi - from) : 0.5; }
  const to = Math.min(hi, 0);
  return to > lo ? 0.5 - 0.5 * (to - v) / (to - lo) : 0.5;
}
function colourOf(v, quantity, lim) {
  if (!Number.isFinite(v)) return NAN_COLOUR;
  const lut = DATA.cmaps[quantity].lut;
  const t = Math.min(1, Math.max(0, position(v, quantity, lim)));
  return lut[Math.min(lut.length - 1, Math.floor(t * lut.length))];
}

// ---- maps ---------------------------------------------------------------------------------------------------
// values: row-major (rows x cols); opts: quantity, lim, query (cell index), outline (string of 0/1 per cell),
// cell (px), onpick(cell index), label
function drawMap(values, rows, cols, opts) {
  const cell = opts.cell || Math.max(6, Math.min(30, Math.floor(300 / Math.max(rows, cols))));
  const c = el("canvas", {width: cols * cell, height: rows * cell, class: "map", tabindex: opts.onpick ? 0 : null, id: opts.id || null,
    role: "img", "aria-label": opts.label || "relation map", "data-query": opts.query ?? ""});
  const g = c.getContext("2d");
  for (let r = 0; r < rows; r++) for (let k = 0; k < cols; k++) {
    g.fillStyle = colourOf(values[r * cols + k], opts.quantity, opts.lim);
    g.fillRect(k * cell, r * cell, cell, cell);
  }
  if (opts.outline) outline(g, opts.outline, rows, cols, cell, "#111", 2);
  if (opts.contour) outline(g, opts.contour, rows, cols, cell, "#000", 1.5);
  if (opts.query !== undefined && opts.query !== null && opts.query >= 0 && opts.query < rows * cols) {
    const r = Math.floor(opts.query / cols), k = opts.query % cols;
    g.strokeStyle = "#000"; g.lineWidth = 2; g.strokeRect(k * cell + 1, r * cell + 1, cell - 2, cell - 2);
    g.strokeStyle = "#fff"; g.lineWidth = 1; g.strokeRect(k * cell + 3, r * cell + 3, cell - 6, cell - 6);
  }
  if (opts.onpick) {
    c.addEventListener("click", e => {
      const b = c.getBoundingClientRect();
      const k = Math.floor((e.clientX - b.left) / b.width * cols), r = Math.floor((e.clientY - b.top) / b.height * rows);
      opts.onpick(Math.min(rows - 1, Math.max(0, r)) * cols + Math.min(cols - 1, Math.max(0, k)), c.id);
    });
    c.addEventListener("keydown", e => {
      const q = opts.query ?? 0, r = Math.floor(q / cols), k = q % cols;
      const moves = {ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0]};
      if (!(e.key in moves)) return;
      e.preventDefault();
      const [dr, dk] = moves[e.key];
      opts.onpick(Math.min(rows - 1, Math.max(0, r + dr)) * cols + Math.min(cols - 1, Math.max(0, k + dk)), c.id);
    });
  }
  return c;
}
// the boundary between cells marked "1" and the rest (mask: string or array of 0/1)
function outline(g, mask, rows, cols, cell, colour, width) {
  const on = (r, k) => r >= 0 && r < rows && k >= 0 && k < cols && (mask[r * cols + k] === "1" || mask[r * cols + k] === 1);
  g.strokeStyle = colour; g.lineWidth = width; g.beginPath();
  for (let r = 0; r < rows; r++) for (let k = 0; k < cols; k++) {
    if (!on(r, k)) continue;
    const x = k * cell, y = r * cell;
    if (!on(r - 1, k)) { g.moveTo(x, y); g.lineTo(x + cell, y); }
    if (!on(r + 1, k)) { g.moveTo(x, y + cell); g.lineTo(x + cell, y + cell); }
    if (!on(r, k - 1)) { g.moveTo(x, y); g.lineTo(x, y + cell); }
    if (!on(r, k + 1)) { g.moveTo(x + cell, y); g.lineTo(x + cell, y + cell); }
  }
  g.stroke();
}
function colourBar(quantity, lim) {
  const w = 180, h = 12, c = el("canvas", {width: w, height: h, role: "img", class: "bar",
    "aria-label": `colour scale ${fmtHeld(lim[0], lim[2])} to ${fmtHeld(lim[1], lim[2])}`});
  const g = c.getContext("2d");
  for (let x = 0; x < w; x++) { g.fillStyle = colourOf(lim[0] + (lim[1] - lim[0]) * (x + 0.5) / w, quantity, lim); g.fillRect(x, 0, 1, h); }
  const q = DATA.cmaps[quantity];
  return el("div", {class: "note"}, c, el("div", {class: "scale", text: `${fmtHeld(lim[0], lim[2])} … ${fmtHeld(lim[1], lim[2])}: ${q.label}${q.unit ? " (" + q.unit + ")" : ""}`}));
}
function figure(canvas, caption, made) {
  return el("figure", {}, canvas, el("figcaption", {}, caption, made ? el("div", {class: "made", text: made}) : null));
}
function errorBox(msg) { return el("div", {class: "error", text: msg}); }

// ---- state in the URL hash (so the guide can link to a setting) --------------------------------------------
const DEFAULTS = {
  growth: {kind: "rope", mode: "zoom", grow: "2", coords: "index", scaling: "none", q: "centre"},
  dials: {theta: "100", scaling: "none", grow: "2"},
  compare: {a: "rope", b: "learned", dims: "2", q: "", frame: ""},
  axes: {alpha: "0", weight: "0.5"},
  spec: {time: "rope", freq: "learned", view: "shift", shift: "2", q: ""},
  bias: {kind: "alibi (euclidean)"},
  bench: {task: "", kinds: ""},
};
const state = {tab: "growth"};
for (const [t, d] of Object.entries(DEFAULTS)) state[t] = {...d};
function readHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  const tab = p.get("tab");
  if (tab && tab in DEFAULTS) state.tab = tab;
  if (p.size > 1) state[state.tab] = {...DEFAULTS[state.tab]};  // a link names its whole setting: nothing stale stays
  for (const [k, v] of p) if (k !== "tab" && k in state[state.tab]) state[state.tab][k] = v;
}
function writeHash() {
  const p = new URLSearchParams({tab: state.tab});
  for (const [k, v] of Object.entries(state[state.tab])) if (v !== "") p.set(k, v);
  history.replaceState(null, "", "#" + p.toString());
}
function set(tab, changes) { Object.assign(state[tab], changes); render(); }

// ---- tabs ---------------------------------------------------------------------------------------------------
function buildTabs() {
  const nav = document.getElementById("tabs");
  TABS.forEach(([id, name], i) => {
    const b = el("button", {role: "tab", id: "tab-" + id, "aria-controls": id, text: name,
      onclick: () => { state.tab = id; render(); }});
    b.addEventListener("keydown", e => {
      const d = {ArrowRight: 1, ArrowLeft: -1}[e.key];
      if (!d) return;
      const next = TABS[(i + d + TABS.length) % TABS.length][0];
      state.tab = next; render(); document.getElementById("tab-" + next).focus();
    });
    nav.append(b);
  });
}

// ---- growth -------------------------------------------------------------------------------------------------
function growthKinds() { return [...new Set(Object.keys(DATA.growth.settings).map(k => k.split("|")[0]))]; }
function growthSetting(s) {
  const keys = Object.keys(DATA.growth.settings).filter(k => k.startsWith(s.kind + "|"));
  const coordsList = [...new Set(keys.map(k => k.split("|")[1]))];
  const coords = coordsList.includes(s.coords) ? s.coords : coordsList[0];
  const scalings = [...new Set(keys.map(k => k.split("|")[2]))];
  const scaling = scalings.includes(s.scaling) ? s.scaling : "none";
  return {key: `${s.kind}|${coords}|${scaling}|${Number(s.grow)}|${s.mode}`, coordsList, coords, scalings, scaling};
}
function renderGrowth() {
  const s = state.growth, G = DATA.growth;
  if (!growthKinds().length) {
    document.getElementById("growth-controls").replaceChildren();
    document.getElementById("growth-view").replaceChildren(errorBox("This page holds no 2D kind (ndpe explore --kinds ...)."));
    return;
  }
  if (!growthKinds().includes(s.kind)) s.kind = growthKinds()[0];
  const info = growthSetting(s);
  const ctl = document.getElementById("growth-controls"), view = document.getElementById("growth-view");
  ctl.replaceChildren(
    select("kind", "growth-kind", growthKinds(), s.kind, v => set("growth", {kind: v})),
    select("input grows by", "growth-mode", [["zoom", "zoom (same picture, finer)"], ["canvas", "canvas (more picture)"]], s.mode, v => set("growth", {mode: v})),
    select("growth", "growth-grow", G.growths.map(g => [String(g), `×${g} (${G.train.map(n => Math.round(n * g)).join(" × ")})`]), s.grow, v => set("growth", {grow: v}), false,
      g => refused(G.settings[`${s.kind}|${info.coords}|${info.scaling}|${Number(g)}|${s.mode}`])),
    select("coordinates", "growth-coords", info.coordsList.map(c => [c, c === "-" ? "(the kind has none)" : c]), info.coords, v => set("growth", {coords: v}), info.coordsList.length < 2,
      c => refused(G.settings[`${s.kind}|${c}|${info.scaling}|${Number(s.grow)}|${s.mode}`])),
    select("scaling", "growth-scaling", info.scalings.map(c => [c, {none: "none", pi: "PI (linear)", ntk: "NTK-aware", yarn: "YaRN"}[c]]), info.scaling, v => set("growth", {scaling: v}), info.scalings.length < 2,
      c => refused(G.settings[`${s.kind}|${info.coords}|${c}|${Number(s.grow)}|${s.mode}`])),
    select("query", "growth-query", G.queries, s.q, v => set("growth", {q: v})));
  const d = G.settings[info.key];
  if (!d || d.error) { view.replaceChildren(errorBox(d ? d.error : "not computed"), scenePicture(s, null)); return; }
  const qi = Math.max(0, G.queries.indexOf(s.q)), [tr, tc] = G.train, [gr, gc] = d.grid;
  const trainVals = row(unpack(d.train_rows), qi, tr * tc), grownVals = row(unpack(d.rows), qi, gr * gc);
  const lim = limits(d.quantity, [trainVals, grownVals]);
  const seen = d.seen[qi][d.absolute ? "coord" : "offset"];
  view.replaceChildren(
    scenePicture(s, d),
    figure(drawMap(trainVals, tr, tc, {quantity: d.quantity, lim, query: d.train_queries[qi], cell: Math.floor(240 / tc), label: "relation at the training size"}),
      `training size ${tr} × ${tc}`),
    figure(drawMap(grownVals, gr, gc, {quantity: d.quantity, lim, query: d.queries[qi], outline: seen, cell: Math.max(4, Math.floor(360 / gc)), label: "relation at the grown size", id: "growth-map"}),
      `grown ${gr} × ${gc}; outlined: ${d.absolute ? "keys at coordinates the training grid had" : "keys at offsets the training grid had shown this query"}`, d.made),
    el("div", {}, colourBar(d.quantity, lim), benchNumbers(s, info)));
}
let sceneImage = null;
function scenePicture(s, d) {
  const g = Number(s.grow), size = 240, c = el("canvas", {width: size, height: size, role: "img", "aria-label": "the input and its patches"});
  const ctx = c.getContext("2d");
  const draw = () => {
    const base = DATA.scene.train_px, crop = s.mode === "zoom" ? base : base * g;
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(sceneImage, 0, 0, crop, crop, 0, 0, size, size);
    const n = DATA.growth.train[0] * g, step = size / n;
    ctx.strokeStyle = "rgba(255,255,255,0.7)"; ctx.lineWidth = 1; ctx.beginPath();
    for (let i = 1; i < n; i++) { ctx.moveTo(i * step, 0); ctx.lineTo(i * step, size); ctx.moveTo(0, i * step); ctx.lineTo(size, i * step); }
    ctx.stroke();
    if (s.mode === "canvas" && g > 1) { ctx.strokeStyle = "#000"; ctx.lineWidth = 2; ctx.strokeRect(1, 1, size / g - 2, size / g - 2); }
    if (d) { const q = d.queries[Math.max(0, DATA.growth.queries.indexOf(s.q))], cols = d.grid[1];
      ctx.strokeStyle = "#ff0"; ctx.lineWidth = 2; ctx.strokeRect((q % cols) * step + 1, Math.floor(q / cols) * step + 1, step - 2, step - 2); }
  };
  if (!sceneImage) { sceneImage = new Image(); sceneImage.onload = () => { document.documentElement.dataset.scene = "loaded"; render(); }; sceneImage.src = DATA.scene.png; }
  else if (sceneImage.complete) draw();
  return figure(c, s.mode === "zoom" ? "zoom: the same picture in more, smaller patches" : "canvas: the training picture (outlined) plus more");
}
function benchNumbers(s, info) {
  const box = el("div", {class: "note"});
  if (!DATA.bench) { box.append("Benchmark numbers: build the page with ndpe explore --results runs/NAME."); return box; }
  const tasks = Object.entries(DATA.bench.tasks).filter(([t]) => (s.mode === "zoom") === t.endsWith("-zoom") && t.startsWith("image/"));
  if (!tasks.length) { box.append(`No ${s.mode} image task in run ${DATA.bench.run}.`); return box; }
  const label = s.kind + (info.scaling !== "none" ? ` (${info.scaling})` : "");
  const t = el("table", {class: "nums"}, el("tr", {}, el("th", {text: `task (run ${DATA.bench.run})`}), el("th", {text: `${label} at ×${s.grow}`}), el("th", {text: "strongest floor"})));
  for (const [name, task] of tasks) {
    const pick = ser => ser && ser.points.find(p => Math.abs(p.ratio - Number(s.grow)) < 1e-9);
    const p = pick(task.series[label]);
    const floors = Object.values(task.series).filter(x => x.floor).map(pick).filter(Boolean).map(x => x.mean);
    const best = floors.length ? (task.higher ? Math.max(...floors) : Math.min(...floors)) : null;
    t.append(el("tr", {}, el("td", {text: `${name} (${task.metric})`}),
      el("td", {text: p ? `${fmt(p.mean)}${p.lo !== null ? ` [${fmt(p.lo)}, ${fmt(p.hi)}]` : ""}${task.series[label].counts ? "" : " ✗ does not count"}` : "not in this run"}),
      el("td", {text: best === null ? "—" : fmt(best)})));
  }
  box.append(t);
  return box;
}

// ---- RoPE angle dials ---------------------------------------------------------------------------------------
function renderDials() {
  const s = state.dials, D = DATA.dials;
  document.getElementById("dials-controls").replaceChildren(
    select("theta", "dials-theta", D.thetas.map(String), s.theta, v => set("dials", {theta: v})),
    select("scaling", "dials-scaling", D.scalings.map(c => [c, {none: "none", pi: "PI (linear)", ntk: "NTK-aware", yarn: "YaRN"}[c]]), s.scaling, v => set("dials", {scaling: v}), false,
      c => refused(D.settings[`${Number(s.theta)}|${c}|${Number(s.grow)}`])),
    select("test length", "dials-grow", D.growths.map(g => [String(g), `×${g} (${Math.round(g * D.length)} tokens)`]), s.grow, v => set("dials", {grow: v}), false,
      g => refused(D.settings[`${Number(s.theta)}|${s.scaling}|${Number(g)}`])));
  const d = D.settings[`${Number(s.theta)}|${s.scaling}|${Number(s.grow)}`];
  const view = document.getElementById("dials-view");
  if (!d || d.error) { view.replaceChildren(errorBox(d ? d.error : "not computed")); return; }
  const n = d.train.length, TWO_PI = 2 * Math.PI, rows = el("ol", {class: "dials", id: "dials-list", start: 0});
  let unseen = 0;
  for (let j = 0; j < n; j++) {
    const size = 34, cx = size / 2, cy = size / 2, r = 13, train = d.train[j], test = d.test[j], out = train < TWO_PI && test > train;
    const c = el("canvas", {width: size, height: size, role: "img", "aria-label": `pair ${j}: angles seen and met`});
    const g = c.getContext("2d");
    const arc = (from, to, colour, width, radius) => { if (to <= from) return; g.strokeStyle = colour; g.lineWidth = width; g.beginPath();
      g.arc(cx, cy, radius, -Math.PI / 2 + from, -Math.PI / 2 + Math.min(to, from + TWO_PI)); g.stroke(); };
    g.strokeStyle = "#eee"; g.lineWidth = 1; g.beginPath(); g.arc(cx, cy, r, 0, TWO_PI); g.stroke();
    arc(0, Math.min(train, TWO_PI), "#9a9a9a", 5, r);
    arc(0, Math.min(test, TWO_PI), "#222", 2, r - 5);
    if (out) { arc(train, Math.min(test, TWO_PI), "#b00020", 5, r); unseen++; }
    rows.append(el("li", {class: out ? "unseen" : null}, c, el("span", {text:
      `pair ${j}: one turn per ${fmt(TWO_PI / d.step[j])} tokens; angles seen 0–${fmt(train)} rad, met 0–${fmt(test)} rad` +
      (out ? `: ${fmt(Math.min(test, TWO_PI) - train)} rad of the circle never seen (red), ${fmt(100 * (test - train) / train, 2)} % beyond the largest angle seen` : "")})));
  }
  view.replaceChildren(figure(rows, `${unseen} of ${n} pairs meet angles never seen in training`, d.made));
}

// ---- click a query: two kinds side by side -----------------------------------------------------------------
function gridDims(dims) { const g = DATA.compare.grids[dims]; return g.length === 1 ? {frames: 1, rows: 1, cols: g[0]} : g.length === 2 ? {frames: 1, rows: g[0], cols: g[1]} : {frames: g[0], rows: g[1], cols: g[2]}; }
function renderCompare() {
  const s = state.compare, C = DATA.compare;
  const kinds = Object.keys(DATA.kinds).filter(k => DATA.kinds[k].dims.includes(Number(s.dims)));
  if (!kinds.includes(s.a)) s.a = kinds.includes("rope") ? "rope" : kinds[0];
  if (!kinds.includes(s.b)) s.b = kinds.find(k => k !== s.a) || s.a;
  const {frames, rows, cols} = gridDims(s.dims), n = frames * rows * cols;
  let q = s.q === "" ? Math.floor(frames / 2) * rows * cols + Math.floor(rows / 2) * cols + Math.floor(cols / 2) : Math.min(n - 1, Number(s.q));
  const frame = s.frame === "" ? Math.floor(q / (rows * cols)) : Math.min(frames - 1, Number(s.frame));
  const ctl = [select("dims", "compare-dims", [["1", "1D (text, 24 tokens)"], ["2", "2D (image, 8 × 8)"], ["3", "3D (video, 4 × 6 × 6)"]], s.dims, v => set("compare", {dims: v, q: "", frame: ""})),
    select("kind A", "compare-a", kinds, s.a, v => set("compare", {a: v}), false, k => refused(C.maps[`${k}/${s.dims}`])),
    select("kind B", "compare-b", kinds, s.b, v => set("compare", {b: v}), false, k => refused(C.maps[`${k}/${s.dims}`]))];
  if (frames > 1) ctl.push(select("frame shown", "compare-frame", [...Array(frames).keys()].map(String), String(frame), v => set("compare", {frame: v})));
  document.getElementById("compare-controls").replaceChildren(...ctl);
  const pick = (cell) => set("compare", {q: String(frame * rows * cols + cell), frame: String(frame)});
  const maps = [s.a, s.b].map(k => C.maps[`${k}/${s.dims}`]);
  const vals = maps.map(m => (m && !m.error) ? row(unpack(m.rows), q, n).subarray(frame * rows * cols, (frame + 1) * rows * cols) : null);
  const shared = maps.every(m => m && !m.error) && maps[0].quantity === maps[1].quantity;
  const figs = [s.a, s.b].map((k, i) => {
    const m = maps[i];
    if (!m || m.error) return el("figure", {}, el("b", {text: k}), errorBox(m ? m.error : "not computed"));
    const lim = limits(m.quantity, shared ? vals.filter(Boolean) : [vals[i]]);
    const local = Math.floor(q / (rows * cols)) === frame ? q % (rows * cols) : -1;
    const canvas = drawMap(vals[i], rows, cols, {quantity: m.quantity, lim, query: local, onpick: pick, cell: rows === 1 ? 14 : Math.floor(300 / cols), label: `${k}: relation of the query to every key`});
    canvas.id = "compare-map-" + "ab"[i];
    return el("figure", {}, el("b", {}, el("span", {class: "swatch", style: `background:${DATA.kinds[k].colour}`}), k),
      canvas, colourBar(m.quantity, lim), el("figcaption", {}, DATA.kinds[k].what, DATA.kinds[k].options ? ` (${DATA.kinds[k].options})` : "",
        el("div", {class: "made", text: m.made})));
  });
  const coords = frames > 1 ? `frame ${Math.floor(q / (rows * cols))}, row ${Math.floor(q / cols) % rows}, column ${q % cols}` : rows > 1 ? `row ${Math.floor(q / cols)}, column ${q % cols}` : `token ${q}`;
  document.getElementById("compare-view").replaceChildren(...figs,
    el("p", {class: "note", id: "compare-query", text: `query: ${coords}${shared ? "; one colour scale for both" : "; different quantities, each its own scale"}. ${DATA.content_note}.`}));
  s.q = String(q);
}

// ---- axis decomposition -------------------------------------------------------------------------------------
// what a group's term depends on: its frequency vectors point beta degrees from axis 0 (rows) towards axis 1
function dependsOn(beta) {
  const b = ((beta % 180) + 180) % 180;
  if (b === 0) return "depends on the row alone: a row term";
  if (b === 90) return "depends on the column alone: a column term";
  if (b === 45) return "depends on row + column: equal along each ↗ anti-diagonal";
  if (b === 135) return "depends on column − row: equal along each ↘ diagonal";
  const r = Math.PI * b / 180;
  return `depends on ${fmt(Math.cos(r), 2)} row + ${fmt(Math.sin(r), 2)} column`;
}
function renderAxes() {
  const s = state.axes, A = DATA.axes, alpha = Number(s.alpha);
  document.getElementById("axes-controls").replaceChildren(
    el("label", {for: "axes-alpha"}, `mixing angle: ${s.alpha}°`, el("input", {type: "range", id: "axes-alpha", min: 0, max: A.angles.length - 1, step: 1,
      value: Math.max(0, A.angles.indexOf(alpha)), oninput: e => set("axes", {alpha: String(A.angles[Number(e.target.value)])})})),
    select("the head's weight on group 0", "axes-weight", A.weights.map(w => [String(w), w === 0.5 ? "0.5 (both groups alike: RoPE)" : `${w} (group 1: ${1 - w})`]), s.weight, v => set("axes", {weight: v})));
  const d = A.settings[String(alpha)], w = Number(s.weight), key = w === 0.5 ? "total" : String(w);
  const [r, c] = A.grid, diag = v => `↘ diagonal minus ↗ anti-diagonal: ${fmt(v, 2)}`;
  const parts = [["row", `group 0 (axis-0 pairs turned ${alpha}°) ${dependsOn(alpha)}; ${diag(d.diagonal.row)}`],
    ["col", `group 1 (axis-1 pairs turned ${alpha}°) ${dependsOn(alpha + 90)}; ${diag(d.diagonal.col)}`],
    [key, `the head's relation, ${w} × group 0 + ${1 - w} × group 1; ${diag(d.diagonal[key])}` +
      (Math.abs(d.diagonal[key]) < 0.005 ? " (no diagonal preferred)" : d.diagonal[key] > 0 ? " (the ↘ diagonal preferred)" : " (the ↗ anti-diagonal preferred)")]];
  const maps = parts.map(([k]) => unpack(d[k])), lim = limits("relation", maps);
  document.getElementById("axes-view").replaceChildren(...parts.map(([k, cap], i) =>
    figure(drawMap(maps[i], r, c, {quantity: "relation", lim, query: A.query, cell: 16, label: cap, id: `axes-map-${i}`}), cap)),
    el("div", {}, colourBar("relation", lim), el("p", {class: "made", text: d.made})));
}

// ---- spectrogram --------------------------------------------------------------------------------------------
function specImage(vals, frames, bins) {  // key index t * bins + b -> picture with time across, low bins at the bottom
  const out = new Float32Array(frames * bins);
  for (let t = 0; t < frames; t++) for (let b = 0; b < bins; b++) out[(bins - 1 - b) * frames + t] = vals[t * bins + b];
  return out;
}
function specMap(vals, frames, opts) {  // a spectrogram map with its axes named: time across, frequency up
  return el("div", {class: "specmap"}, el("span", {class: "ylabel", text: "frequency bin →"}), drawMap(vals, DATA.spec.grid[1], frames, {cell: 14, ...opts}),
    el("span", {class: "xlabel", text: `time frame → (0 … ${frames - 1})`}));
}
function largest(values) { let m = 0; for (const v of values) if (Number.isFinite(v)) m = Math.max(m, Math.abs(v)); return m; }
function renderSpec() {
  const s = state.spec, S = DATA.spec, [T, F] = S.grid;
  const names = {none: "none", learned: "learned table (absolute)", sinusoidal: "sinusoidal (absolute values)", rope: "RoPE (relative)"};
  document.getElementById("spec-controls").replaceChildren(
    select("time axis", "spec-time", S.kinds.map(k => [k, names[k]]), s.time, v => set("spec", {time: v}), false, k => refused(S.settings[`${k}|${s.freq}`])),
    select("frequency axis", "spec-freq", S.kinds.map(k => [k, names[k]]), s.freq, v => set("spec", {freq: v}), false, k => refused(S.settings[`${s.time}|${k}`])),
    select("compare with", "spec-compare", [["long", "a clip twice as long"], ["shift", "a pitch shift"]], s.view, v => set("spec", {view: v})),
    select("shift (bins)", "spec-shift", ["1", "2", "3", "4"], s.shift, v => set("spec", {shift: v}), s.view !== "shift"));
  const d = S.settings[`${s.time}|${s.freq}`], view = document.getElementById("spec-view");
  if (!d || d.error) { view.replaceChildren(errorBox(d ? d.error : "not computed")); return; }
  const k = Number(s.shift);
  let q = s.q === "" ? Math.floor(T / 2) * F + 2 : Number(s.q);
  if (s.view === "shift" && q % F + k >= F) q = q - (q % F) + (F - 1 - k);  // the shifted query stays on the grid
  s.q = String(q);
  const all = unpack(d.rows), base = row(all, q, T * F), qt = Math.floor(q / F), qb = q % F;
  const toCell = (t, b, bins) => (bins - 1 - b) * T + t;
  const pick = cell => { const t = cell % T, b = F - 1 - Math.floor(cell / T); set("spec", {q: String(t * F + b)}); };
  const encodings = `time: ${names[s.time]}, frequency: ${names[s.freq]}`;
  const figs = [];
  if (s.view === "long") {
    const longVals = row(unpack(d.long), qb, 2 * T * F), lim = limits("relation", [base, longVals]);
    const around = new Float32Array(T * F);  // the long clip around its query minus the training clip around its own
    for (let t = 0; t < T; t++) for (let b = 0; b < F; b++) around[t * F + b] = longVals[(t - qt + T) * F + b] - base[t * F + b];
    const m = largest(around), held = stepOf([base, longVals]);  // a difference within a packing step is none
    figs.push(figure(specMap(specImage(base, T, F), T, {quantity: "relation", lim, query: toCell(qt, qb, F), onpick: pick, label: "training clip"}),
      `training clip (${encodings}): ${T} frames × ${F} bins; click a query`),
      figure(specMap(specImage(longVals, 2 * T, F), 2 * T, {quantity: "relation", lim, query: (F - 1 - qb) * 2 * T + T, label: "clip twice as long"}),
        `a clip twice as long, the query in its middle frame: around it the map differs from the training clip's by at most ${fmtHeld(m, held)}` +
        (m < Math.max(0.01, held) ? ` (the same pattern: ${names[s.time]} on the time axis)` : ` (${names[s.time]} on the time axis changes it)`)), colourBar("relation", lim));
  } else {
    const moved = row(all, q + k, T * F), diff = new Float32Array(T * F).fill(NaN);
    for (let t = 0; t < T; t++) for (let b = 0; b + k < F; b++) diff[t * F + b] = moved[t * F + b + k] - base[t * F + b];
    const lim = limits("relation", [base, moved, diff]), m = largest(diff), held = stepOf([base, moved]);
    figs.push(figure(specMap(specImage(base, T, F), T, {quantity: "relation", lim, query: toCell(qt, qb, F), onpick: pick, label: "the sound"}),
      `the sound (${encodings}): a query at one pitch; click to move it`),
      figure(specMap(specImage(moved, T, F), T, {quantity: "relation", lim, query: toCell(qt, qb + k, F), label: "pitch-shifted"}), `pitch-shifted by ${k} bins`),
      figure(specMap(specImage(diff, T, F), T, {quantity: "relation", lim, label: "difference"}),
        `shifted map moved back minus the original: at most ${fmtHeld(m, held)} in size` + (m < Math.max(0.01, held)
          ? `, zero (white): ${names[s.freq]} on the frequency axis is blind to the shift`
          : `: ${names[s.freq]} on the frequency axis tells the pitches apart`)),
      colourBar("relation", lim));
  }
  view.replaceChildren(...figs, el("p", {class: "made", text: d.made}));
}

// ---- bias receptive field -----------------------------------------------------------------------------------
function renderBias() {
  const s = state.bias, B = DATA.bias, names = Object.keys(B.settings);
  if (!names.length) {
    document.getElementById("bias-controls").replaceChildren();
    document.getElementById("bias-view").replaceChildren(errorBox("This page holds no 2D bias kind (ndpe explore --kinds ...)."));
    return;
  }
  if (!names.includes(s.kind)) s.kind = names[0];
  document.getElementById("bias-controls").replaceChildren(select("kind", "bias-kind", names, s.kind, v => set("bias", {kind: v})));
  const d = B.settings[s.kind], [r, c] = B.grid, n = r * c, all = unpack(d.heads), heads = all.length / n;
  const lim = limits("bias", [all]);
  const figs = [];
  for (let h = 0; h < heads; h++) {
    const vals = row(all, h, n), contour = Array.from(vals, v => (v >= -1 ? 1 : 0));
    const slope = d.slopes ? `, slope ${fmt(d.slopes[h])}` : "";
    figs.push(figure(drawMap(vals, r, c, {quantity: "bias", lim, query: B.query, contour, cell: 8, label: `head ${h}`, id: `bias-map-${h}`}), `head ${h}${slope}`));
  }
  document.getElementById("bias-view").replaceChildren(...figs, el("div", {}, colourBar("bias", lim),
    el("p", {class: "note", text: "Learned kinds (fire, cpb, relative) at their initialization: training shapes them."}),
    el("p", {class: "made", text: d.made})));
}

// ---- benchmark ----------------------------------------------------------------------------------------------
function renderBench() {
  const ctl = document.getElementById("bench-controls"), view = document.getElementById("bench-view");
  if (!DATA.bench) {
    ctl.replaceChildren(); view.replaceChildren(el("p", {class: "note", text: "This page holds no benchmark results: build it with ndpe explore --results runs/NAME (a run's results.csv)."}));
    return;
  }
  const s = state.bench, tasks = Object.keys(DATA.bench.tasks);
  if (!tasks.includes(s.task)) s.task = tasks[0];
  const task = DATA.bench.tasks[s.task], labels = Object.keys(task.series).filter(l => !task.series[l].floor);
  let chosen = s.kinds === "" ? labels.filter(l => task.series[l].counts !== false).slice(0, 6) : s.kinds.split(",").filter(l => labels.includes(l));
  const boxes = el("div", {class: "kindlist", role: "group", "aria-label": "encodings drawn"}, ...labels.map(l => el("label", {},
    el("input", {type: "checkbox", checked: chosen.includes(l) ? true : null, onchange: e => {
      const next = e.target.checked ? [...chosen, l] : chosen.filter(x => x !== l);
      set("bench", {kinds: next.join(",") || "-"}); }}),
    el("span", {class: "swatch", style: `background:${colourOfLabel(task.series[l].kind)}`}), l + (task.series[l].counts ? "" : " ✗"))));
  ctl.replaceChildren(select("task", "bench-task", tasks, s.task, v => set("bench", {task: v, kinds: ""})), boxes);
  const plot = benchPlot(task, s.task, chosen);
  const tbl = el("table", {class: "nums"}, el("tr", {}, el("th", {text: task.metric + (task.higher ? " ↑" : " ↓")}), ...task.sizes.map(z => el("th", {text: z.label}))));
  for (const l of [...chosen, ...Object.keys(task.series).filter(x => task.series[x].floor)]) {
    const ser = task.series[l];
    tbl.append(el("tr", {}, el("td", {text: l + (ser.counts === false ? " ✗" : "")}), ...task.sizes.map(z => {
      const p = ser.points.find(x => x.ratio === z.ratio);
      return el("td", {text: p ? fmt(p.mean) + (p.lo !== null ? ` [${fmt(p.lo)}, ${fmt(p.hi)}]` : "") : ""});
    })));
  }
  view.replaceChildren(el("p", {class: "note", text: `run ${DATA.bench.run}; ${task.protocol}`}),
    figure(plot, `mean over runs with 95 % t intervals; dashed grey: floors; pale legend entries: not drawn (tick them above); ✗: does not count (misses the task's bar or a floor)${task.learned ? "" : "; no kind learned this task at this budget"}`),
    tbl, el("h3", {text: "Verdicts"}),
    ...(task.verdicts.length ? task.verdicts.map(v => el("div", {class: "verdict " + v.verdict.replace(" ", "-")},
      el("b", {text: `${v.source}: ${v.verdict}. `}), v.text + ". ", el("span", {class: "note", text: v.detail}))) : [el("p", {class: "note", text: "No literature claim on this task."})]));
}
function colourOfLabel(kind) { return DATA.kinds[kind] ? DATA.kinds[kind].colour : "#636363"; }
// the task's chart, drawn by matplotlib when the page was built (ndpe/explore/charts.py): an SVG whose series the
// checkboxes show or hide (its groups "<id>-..."); floors always shown, a hidden series' legend entry greyed
function benchPlot(task, taskName, labels) {
  const chart = DATA.bench.charts[taskName], box = el("div", {class: "chart", id: "bench-plot", role: "img",
    "aria-label": `${task.metric} against the test size`});
  box.innerHTML = chart.svg;
  const svg = box.querySelector("svg");
  svg.removeAttribute("width"); svg.removeAttribute("height");
  for (const [label, id] of Object.entries(chart.ids)) {
    const on = task.series[label].floor || labels.includes(label);
    for (const node of svg.querySelectorAll(`[id^="${id}-"]`)) {
      if (node.id.startsWith(`${id}-legend-`)) node.style.opacity = on ? "" : "0.3";
      else node.style.display = on ? "" : "none";
    }
  }
  return box;
}

// ---- main ---------------------------------------------------------------------------------------------------
const RENDER = {growth: renderGrowth, dials: renderDials, compare: renderCompare, axes: renderAxes, spec: renderSpec, bias: renderBias, bench: renderBench};
function render() {
  for (const [id] of TABS) {
    const on = id === state.tab;
    document.getElementById(id).hidden = !on;
    const b = document.getElementById("tab-" + id);
    b.setAttribute("aria-selected", on ? "true" : "false");
    b.tabIndex = on ? 0 : -1;
  }
  const focused = document.activeElement && document.activeElement.id;
  RENDER[state.tab]();
  writeHash();
  if (focused && focused !== document.activeElement.id) { const again = document.getElementById(focused); if (again) again.focus(); }
}
function start() {
  const m = DATA.meta;
  document.getElementById("made-by").textContent = `Every number on this page was computed by ndpe ${m.ndpe} (torch ${m.torch}) with ${m.command}; each picture names the call that made it. Encodings: dim ${m.dim}, ${m.heads} heads.`;
  document.getElementById("footer").textContent = m.footer;
  buildTabs();
  readHash();
  window.addEventListener("hashchange", () => { readHash(); render(); });
  render();
}
start();
