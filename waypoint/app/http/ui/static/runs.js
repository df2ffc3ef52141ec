// Keeps the statuses of the runs page's unfinished runs current without a reload: every two
// seconds it asks GET /v1/runs?run_id=... (the session cookie reads it) for just those runs and
// rewrites their status, steps, model (after a failover), tokens, cost and duration. A run that
// finishes is no longer asked.
const FINISHED = new Set(["completed", "max_steps", "budget_exceeded", "cancelled", "failed"]);
const EVERY_MS = 2000;

function liveRows() {
  return [...document.querySelectorAll("#runs tr[data-live='1']")];
}

function statusBadge(status) {
  const badge = document.createElement("span");
  badge.className = `status status-${status}`;
  badge.textContent = status.replaceAll("_", " ");  // written out: never colour alone
  return badge;
}

// The model it calls now; after a failover, a tag naming the one it started on (as the page renders it).
function showModel(cell, run) {
  if (!cell || !run.current_model || cell.dataset.model === run.current_model) return;
  cell.dataset.model = run.current_model;
  const parts = [document.createTextNode(run.current_model)];
  if ((run.models_used || []).length > 1) {
    const tag = document.createElement("span");
    tag.className = "tag failover";
    tag.title = `models used: ${run.models_used.join(", ")}`;
    tag.textContent = `failed over (${run.models_used.length} models)`;
    parts.push(document.createElement("br"), tag);
  }
  cell.replaceChildren(...parts);
}

function show(row, run) {
  const cell = (name) => row.querySelector(`[data-col='${name}']`);
  const badge = cell("status").querySelector(".status");
  if (!badge || badge.textContent !== run.status.replaceAll("_", " ")) cell("status").replaceChildren(statusBadge(run.status));
  cell("steps").textContent = run.steps;
  showModel(cell("model"), run);
  cell("tokens").textContent = (run.input_tokens + run.output_tokens).toLocaleString("en-US");
  cell("cost").textContent = Number(run.cost_usd).toFixed(4);
  const end = run.finished_at || run.updated_at;
  if (run.created_at && end) cell("duration").textContent = `${((Date.parse(end) - Date.parse(run.created_at)) / 1000).toFixed(1)} s`;
  if (FINISHED.has(run.status)) row.dataset.live = "0";
}

async function poll() {
  const rows = liveRows();
  if (!rows.length) return;
  const query = new URLSearchParams({ limit: String(rows.length) });
  for (const row of rows) query.append("run_id", row.dataset.run);
  try {
    const response = await fetch(`/v1/runs?${query}`, { headers: { Accept: "application/json" } });
    if (response.ok) {
      const byId = new Map((await response.json()).runs.map((run) => [run.run_id, run]));
      for (const row of rows) if (byId.has(row.dataset.run)) show(row, byId.get(row.dataset.run));
    }
  } catch (_) {
    // the server restarting: the next poll tries again
  }
  if (liveRows().length) setTimeout(poll, EVERY_MS);
}

setTimeout(poll, EVERY_MS);
