// Four small per-step charts in plain SVG (no library): tokens, cost so far, the context against
// its budget with compactions marked, model latency. One <path> per series, however many steps,
// so a 1,500-step run draws as fast as a short one. Their numbers are in a table (fillTable).
const NS = "http://www.w3.org/2000/svg";
const H = 130;
const PAD = { left: 52, right: 8, top: 10, bottom: 20 };

function el(name, attrs, text) {
  const node = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text != null) node.textContent = text;
  return node;
}

const short = (v) => {
  if (v >= 1e6) return `${(v / 1e6).toFixed(1)}M`;
  if (v >= 1e4) return `${Math.round(v / 1e3)}k`;
  if (v >= 1000) return `${(v / 1e3).toFixed(1)}k`;
  if (v > 0 && v < 0.01) return v.toPrecision(2);
  return `${Math.round(v * 100) / 100}`;
};

function frame(svg, steps, top, unit) {
  const width = Math.max(200, svg.parentElement.clientWidth);
  svg.setAttribute("width", width);
  svg.setAttribute("height", H);
  svg.setAttribute("viewBox", `0 0 ${width} ${H}`);
  svg.replaceChildren();
  const w = width - PAD.left - PAD.right;
  const h = H - PAD.top - PAD.bottom;
  const max = top > 0 ? top : 1;
  const n = Math.max(1, steps.length);
  const x = (i) => PAD.left + (i / n) * w;
  const y = (v) => PAD.top + h - (Math.max(0, v) / max) * h;
  svg.appendChild(el("line", { class: "c-axis", x1: PAD.left, x2: PAD.left + w, y1: PAD.top + h, y2: PAD.top + h }));
  if (top > 0) svg.appendChild(el("text", { class: "c-label", x: PAD.left - 4, y: PAD.top + 8, "text-anchor": "end" }, `${short(max)}${unit}`));
  svg.appendChild(el("text", { class: "c-label", x: PAD.left - 4, y: PAD.top + h, "text-anchor": "end" }, "0"));
  if (steps.length) {
    svg.appendChild(el("text", { class: "c-label", x: PAD.left, y: H - 4 }, `step ${steps[0].step}`));
    svg.appendChild(el("text", { class: "c-label", x: PAD.left + w, y: H - 4, "text-anchor": "end" }, `step ${steps[steps.length - 1].step}`));
  }
  return { x, y, bw: w / n, max };
}

function bars(svg, f, steps, value, base, cls) {
  let d = "";
  steps.forEach((s, i) => {
    const v = value(s);
    if (v <= 0) return;
    const y0 = f.y(base(s));
    const y1 = f.y(base(s) + v);
    d += `M${f.x(i).toFixed(1)} ${y0.toFixed(1)}h${Math.max(0.6, f.bw - (f.bw > 3 ? 1 : 0)).toFixed(2)}V${y1.toFixed(1)}H${f.x(i).toFixed(1)}Z`;
  });
  if (d) svg.appendChild(el("path", { class: cls, d }));
}

function line(svg, f, steps, value, cls) {
  if (!steps.length) return;
  const d = steps.map((s, i) => `${i ? "L" : "M"}${(f.x(i) + f.bw / 2).toFixed(1)} ${f.y(value(s)).toFixed(1)}`).join("");
  svg.appendChild(el("path", { class: cls, d, fill: "none" }));
}

function hline(svg, f, v, cls, text) {
  const x2 = Number(svg.getAttribute("width")) - PAD.right;
  svg.appendChild(el("line", { class: cls, x1: PAD.left, x2, y1: f.y(v), y2: f.y(v) }));
  svg.appendChild(el("text", { class: "c-label", x: x2, y: f.y(v) - 3, "text-anchor": "end" }, text));
}

export function drawCharts(container, steps, timeline) {
  const svg = (name) => container.querySelector(`[data-chart="${name}"] svg`);
  const most = (f) => steps.reduce((m, s) => Math.max(m, f(s)), 0);

  const tokens = svg("tokens");
  let f = frame(tokens, steps, most((s) => s.input_tokens + s.output_tokens), "");
  const uncached = (s) => s.input_tokens - s.cache_read_tokens;
  bars(tokens, f, steps, uncached, () => 0, "c-input");
  bars(tokens, f, steps, (s) => s.cache_read_tokens, uncached, "c-cached");
  bars(tokens, f, steps, (s) => s.output_tokens, (s) => s.input_tokens, "c-output");
  tokens.setAttribute("aria-label", `Tokens per step: at most ${most((s) => s.input_tokens)} in and ${most((s) => s.output_tokens)} out`);

  const cost = svg("cost");
  const spent = steps.length ? steps[steps.length - 1].cumulative_cost_usd : 0;
  f = frame(cost, steps, spent, " $");
  line(cost, f, steps, (s) => s.cumulative_cost_usd, "c-cost");
  cost.setAttribute("aria-label", `Cost so far: ${spent.toFixed(6)} USD after ${steps.length} steps`);

  const context = svg("context");
  const budget = timeline.context_budget || 0;
  f = frame(context, steps, Math.max(budget, most((s) => s.context_tokens)), "");
  if (budget) hline(context, f, budget, "c-budget", `budget ${short(budget)}`);
  if (timeline.compact_threshold) hline(context, f, timeline.compact_threshold, "c-threshold", `compacts past ${short(timeline.compact_threshold)}`);
  line(context, f, steps, (s) => s.context_tokens, "c-context");
  let marks = "";
  steps.forEach((s, i) => {
    if (!s.compacted) return;
    const cx = f.x(i) + f.bw / 2;
    const cy = f.y(s.context_tokens);
    marks += `M${cx.toFixed(1)} ${(cy - 5).toFixed(1)}l4 5l-4 5l-4 -5Z`;
  });
  if (marks) context.appendChild(el("path", { class: "c-compaction", d: marks }));
  const compactions = steps.filter((s) => s.compacted).length;
  context.setAttribute("aria-label", `Context per step: at most ${most((s) => s.context_tokens)} tokens of a ${budget}-token budget; ${compactions} compactions`);

  const latency = svg("latency");
  f = frame(latency, steps, most((s) => s.model_ms), " ms");
  bars(latency, f, steps, (s) => s.model_ms, () => 0, "c-latency");
  latency.setAttribute("aria-label", `Model latency per step: at most ${most((s) => s.model_ms)} ms`);
}

export function fillTable(details, steps) {
  const body = details.querySelector("tbody");
  const rows = document.createDocumentFragment();
  for (const s of steps) {
    const tr = document.createElement("tr");
    tr.dataset.step = s.step;
    const cells = [s.step, s.input_tokens, s.cache_read_tokens, s.output_tokens, s.cumulative_cost_usd.toFixed(6), s.context_tokens, s.compacted ? "yes" : "", s.model_ms];
    cells.forEach((value, i) => {
      const td = document.createElement(i ? "td" : "th");
      if (!i) td.scope = "row";
      if (i !== 6) td.className = "num";
      td.textContent = value;
      tr.appendChild(td);
    });
    rows.appendChild(tr);
  }
  body.replaceChildren(rows);
}
