// The run page's waterfall: GET /v1/runs/{id}/timeline, drawn as rows of bars on a zoomable time
// axis. Only the rows in view are in the DOM (a 1,500-step run keeps ~40 rows), so scrolling and
// zooming stay cheap. A live run grows as its steps land: viewer.js announces each commit to the
// run's log (`waypoint:log` on document) and the steps after the last one drawn are fetched.
// Sub-agent runs expand in place: their rows, fetched from their own timeline, on the same axis.
import { drawCharts, fillTable } from "./charts.js";

const box = document.getElementById("waterfall");
const ROW_PAD = 6;
const LANE = 12;
const OVERSCAN = 10;

const rowsEl = box.querySelector(".wf-rows");
const scroller = box.querySelector(".wf-scroll");
const axis = box.querySelector(".wf-axis");
const runId = box.dataset.run;

let root = null; // the run's timeline, as the API answered (steps grow live)
let entries = []; // rows drawn: {run, step, depth, offset (ms from the root's start), data}
let offsets = []; // each row's top (px), and the total height last
let view = { t0: 0, t1: 1 };
let total = 1;
const expanded = new Map(); // child run id -> its timeline, while shown

const fmtMs = (ms) => {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  const m = Math.floor(ms / 60000);
  return `${m} min ${Math.round((ms % 60000) / 1000)} s`;
};

function tip(bar) {
  const lines = [bar.label || bar.kind, `${fmtMs(bar.end_ms - bar.start_ms)}${bar.open ? " so far" : ""}`];
  if (bar.attempt) lines.push(`attempt ${bar.attempt}`);
  if (bar.input_tokens != null) lines.push(`${bar.input_tokens} tokens in, ${bar.output_tokens} out`);
  if (bar.error) lines.push(`error: ${bar.error}`);
  return lines.join("\n");
}

function lanesOf(step) {
  let n = 1;
  for (const b of step.bars) n = Math.max(n, b.lane + 1);
  return n;
}

function rebuild() {
  entries = [];
  const add = (timeline, depth, offset) => {
    for (const step of timeline.steps) {
      entries.push({ run: timeline.run_id, agent: timeline.agent, step, depth, offset });
      for (const b of step.bars) {
        if (b.kind === "subagent" && expanded.has(b.child_run_id)) {
          const child = expanded.get(b.child_run_id);
          add(child, depth + 1, offset + (Date.parse(child.started_at) - Date.parse(timeline.started_at)));
        }
      }
    }
  };
  if (root) add(root, 0, 0);
  version += 1;
  offsets = [0];
  for (const e of entries) offsets.push(offsets[offsets.length - 1] + ROW_PAD + LANE * lanesOf(e.step));
  rowsEl.style.height = `${offsets[offsets.length - 1]}px`;
  total = Math.max(1, root ? root.duration_ms : 1);
  for (const e of entries) for (const b of e.step.bars) total = Math.max(total, e.offset + b.end_ms);
  box.querySelector(".wf-empty").hidden = entries.length > 0;
}

function firstVisible(top) {
  let lo = 0;
  let hi = entries.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (offsets[mid + 1] <= top) lo = mid + 1; else hi = mid;
  }
  return lo;
}

const pct = (ms) => ((ms - view.t0) / (view.t1 - view.t0)) * 100;

function rowElement(e, index) {
  const row = document.createElement("div");
  row.className = `wf-row${e.step.in_flight ? " wf-inflight" : ""}`;
  row.dataset.step = e.step.step;
  row.dataset.run = e.run;
  row.dataset.depth = e.depth;
  row.dataset.index = index;
  row.style.top = `${offsets[index]}px`;
  row.style.height = `${offsets[index + 1] - offsets[index]}px`;
  const label = document.createElement("div");
  label.className = "wf-label";
  // Text, not a link: a long run's rows would be hundreds of Tab stops on the way to the step table
  // below, whose links (a page at a time) go to the same steps. A click on the row opens its step.
  const name = document.createElement("span");
  name.className = "wf-name";
  // A sub-agent run's row says whose step it is: its agent, as its caller's tree names it.
  name.textContent = e.depth ? `${e.agent || e.run} · ${e.step.step}` : `step ${e.step.step}`;
  name.title = e.depth ? `step ${e.step.step} of sub-agent run ${e.run}` : `step ${e.step.step}`;
  label.appendChild(name);
  const kids = e.step.bars.filter((b) => b.kind === "subagent");
  if (kids.length) {
    const open = kids.every((b) => expanded.has(b.child_run_id));
    const button = document.createElement("button");
    button.type = "button";
    button.className = "wf-expand";
    button.setAttribute("aria-expanded", String(open));
    button.dataset.children = kids.map((b) => b.child_run_id).join(" ");
    button.textContent = open ? "▾ runs" : "▸ runs";
    button.title = open ? "hide the sub-agent runs' steps" : "show the sub-agent runs' steps";
    label.appendChild(button);
  }
  row.appendChild(label);
  const track = document.createElement("div");
  track.className = "wf-track";
  const span = document.createElement("div");
  span.className = "wf-span";
  place(span, e.offset + e.step.start_ms, e.offset + e.step.end_ms);
  span.title = `step ${e.step.step}: ${fmtMs(e.step.end_ms - e.step.start_ms)}${e.step.in_flight ? " so far (in flight)" : ""}`;
  track.appendChild(span);
  for (const b of e.step.bars) {
    const bar = document.createElement("div");
    bar.className = `wf-bar wf-${b.kind}${b.open ? " wf-open" : ""}`;
    bar.dataset.kind = b.kind;
    bar.dataset.lane = b.lane;
    bar.dataset.startMs = b.start_ms;
    bar.dataset.endMs = b.end_ms;
    if (b.child_run_id) bar.dataset.child = b.child_run_id;
    if (b.attempt) bar.dataset.attempt = b.attempt;
    bar.title = tip(b);
    bar.style.top = `${ROW_PAD / 2 + b.lane * LANE}px`;
    place(bar, e.offset + b.start_ms, e.offset + b.end_ms);
    track.appendChild(bar);
  }
  row.appendChild(track);
  return row;
}

function place(el, from, to) {
  const left = pct(from);
  el.style.left = `${left}%`;
  el.style.width = `max(2px, ${pct(to) - left}%)`;
}

let frame = 0;
let version = 0; // bumped when the rows change (rebuild): every row drawn is then stale
let drawnAs = "";
function draw() {
  frame = 0;
  const top = scroller.scrollTop;
  const first = Math.max(0, firstVisible(top) - OVERSCAN);
  const last = Math.min(entries.length, firstVisible(top + scroller.clientHeight) + OVERSCAN + 1);
  const stamp = `${version} ${view.t0} ${view.t1}`;
  if (stamp !== drawnAs) {
    const fragment = document.createDocumentFragment();
    for (let i = first; i < last; i++) fragment.appendChild(rowElement(entries[i], i));
    rowsEl.replaceChildren(fragment);
    drawnAs = stamp;
    drawAxis();
    return;
  }
  // Only scrolled: the rows still in range stay as they are (a row's link keeps the keyboard's
  // focus while Tab scrolls through them); those out of range go, the ones coming in are added.
  const kept = new Map();
  for (const row of [...rowsEl.children]) {
    const i = Number(row.dataset.index);
    if (i < first || i >= last) row.remove(); else kept.set(i, row);
  }
  let next = null;
  for (let i = last - 1; i >= first; i--) {
    if (kept.has(i)) { next = kept.get(i); continue; }
    const row = rowElement(entries[i], i);
    rowsEl.insertBefore(row, next);
    next = row;
  }
}

const schedule = () => { if (!frame) frame = requestAnimationFrame(draw); };

function drawAxis() {
  const span = view.t1 - view.t0;
  const raw = span / 8;
  const power = 10 ** Math.floor(Math.log10(raw));
  const every = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || raw;
  // The axis spans what the rows' tracks span: not the rows' scrollbar.
  axis.style.marginRight = `${scroller.offsetWidth - scroller.clientWidth}px`;
  const ticks = document.createDocumentFragment();
  for (let t = Math.ceil(view.t0 / every) * every; t <= view.t1; t += every) {
    const tick = document.createElement("span");
    tick.className = "wf-tick";
    tick.style.left = `${pct(t)}%`;
    tick.textContent = fmtMs(t);
    ticks.appendChild(tick);
  }
  axis.replaceChildren(ticks);
  // A label that would run past the axis's right end hangs to the left of its tick instead.
  const right = axis.getBoundingClientRect().right;
  for (const tick of axis.children) {
    if (tick.getBoundingClientRect().right > right) tick.classList.add("wf-tick-end");
  }
}

function zoom(factor, at = (view.t0 + view.t1) / 2) {
  const span = Math.min(total, Math.max(5, (view.t1 - view.t0) * factor));
  let t0 = at - (at - view.t0) * (span / (view.t1 - view.t0));
  t0 = Math.max(0, Math.min(t0, total - span));
  view = { t0, t1: t0 + span };
  schedule();
}

function pan(share) {
  const span = view.t1 - view.t0;
  const t0 = Math.max(0, Math.min(view.t0 + span * share, total - span));
  view = { t0, t1: t0 + span };
  schedule();
}

const fit = () => { view = { t0: 0, t1: total }; schedule(); };

async function timeline(run, after = 0) {
  const response = await fetch(`/v1/runs/${encodeURIComponent(run)}/timeline?after_step=${after}`);
  if (!response.ok) throw new Error(`timeline of ${run}: HTTP ${response.status}`);
  return response.json();
}

function showCharts() {
  const steps = root.steps.filter((s) => !s.in_flight);
  drawCharts(document.getElementById("charts"), steps, root);
  const details = document.getElementById("chart-data");
  if (details.open) fillTable(details, steps);
}

// Live: fetch the steps after the last recorded one (the step in flight is replaced each time).
let fetching = null;
let again = false;
async function grow() {
  if (fetching) { again = true; return fetching; }
  fetching = (async () => {
    do {
      again = false;
      const recorded = root.steps.filter((s) => !s.in_flight);
      const after = recorded.length ? recorded[recorded.length - 1].step : 0;
      const fresh = await timeline(runId, after);
      const followed = view.t1 >= total - 1; // the view showed the end: keep showing it
      root = { ...fresh, steps: [...recorded, ...fresh.steps] };
      rebuild();
      if (followed) view = { t0: view.t0, t1: total };
      schedule();
      showCharts();
    } while (again);
  })().catch(() => {}).finally(() => { fetching = null; });
  return fetching;
}

async function toggle(button) {
  const ids = button.dataset.children.split(" ");
  const open = button.getAttribute("aria-expanded") === "true";
  if (open) {
    for (const id of ids) expanded.delete(id);
  } else {
    const found = await Promise.all(ids.map((id) => timeline(id).catch(() => null)));
    ids.forEach((id, i) => { if (found[i]) expanded.set(id, found[i]); });
  }
  rebuild();
  draw();
  box.querySelector(`.wf-expand[data-children="${CSS.escape(button.dataset.children)}"]`)?.focus();
}

function wire() {
  scroller.addEventListener("scroll", schedule, { passive: true });
  window.addEventListener("resize", () => { drawnAs = ""; schedule(); showCharts(); });
  const toolbar = document.querySelector(".wf-toolbar");
  toolbar.hidden = false;
  toolbar.addEventListener("click", (event) => {
    const action = event.target.closest("button")?.dataset.zoom;
    if (action === "in") zoom(0.5);
    else if (action === "out") zoom(2);
    else if (action === "earlier") pan(-0.5);
    else if (action === "later") pan(0.5);
    else if (action === "fit") fit();
  });
  box.addEventListener("wheel", (event) => {
    if (!(event.ctrlKey || event.altKey || Math.abs(event.deltaX) > Math.abs(event.deltaY))) return;
    event.preventDefault();
    if (event.ctrlKey || event.altKey) {
      const rect = rowsEl.getBoundingClientRect();
      const track = rowsEl.querySelector(".wf-track")?.getBoundingClientRect() || rect;
      const share = Math.min(1, Math.max(0, (event.clientX - track.left) / track.width));
      zoom(event.deltaY > 0 ? 1.25 : 0.8, view.t0 + share * (view.t1 - view.t0));
    } else {
      pan(event.deltaX / 500);
    }
  }, { passive: false });
  box.addEventListener("click", (event) => {
    const button = event.target.closest(".wf-expand");
    if (button) { toggle(button); return; }
    const bar = event.target.closest(".wf-bar, .wf-span, .wf-name");
    if (!bar) return;
    const row = bar.closest(".wf-row");
    if (bar.dataset.child) window.location.href = `/ui/runs/${encodeURIComponent(bar.dataset.child)}`;
    else window.location.href = `/ui/runs/${encodeURIComponent(row.dataset.run)}/steps/${row.dataset.step}`;
  });
  const details = document.getElementById("chart-data");
  details.addEventListener("toggle", () => {
    if (details.open && root) fillTable(details, root.steps.filter((s) => !s.in_flight));
  });
  if (box.dataset.live === "1") document.addEventListener("waypoint:log", grow);
}

async function start() {
  root = await timeline(runId);
  rebuild();
  view = { t0: 0, t1: total };
  wire();
  draw();
  showCharts();
  box.dataset.ready = "1";
  performance.mark("waterfall-drawn");
}

start().catch((error) => {
  const empty = box.querySelector(".wf-empty");
  empty.textContent = `The waterfall could not be drawn: ${error.message}`;
  empty.hidden = false;
});
