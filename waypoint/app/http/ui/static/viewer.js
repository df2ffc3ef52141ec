// Follows a live run: /v1/runs/{id}/stream (server-sent events, the session cookie authenticates),
// appends the server-rendered rows of new steps, shows the model's tokens as they stream in and
// the model a failover moves it to, and reloads the page when the run's status changes
// (approvals, the end). Its table of sub-agent runs follows the tree's own stream (tree.js).
const body = document.getElementById("steps");
const liveText = document.getElementById("live-text");

function lastStep() {
  const rows = body.querySelectorAll("tr[data-step]");
  return rows.length ? Number(rows[rows.length - 1].dataset.step) : 0;
}

let fetching = null;
async function appendRows() {
  if (body.dataset.append !== "1") return null; // an earlier page of the steps: the new ones are not on it
  if (fetching) return fetching;
  fetching = (async () => {
    const response = await fetch(`/ui/runs/${encodeURIComponent(body.dataset.run)}/rows?after=${lastStep()}`);
    if (response.ok) {
      const template = document.createElement("template");
      template.innerHTML = await response.text();
      for (const row of template.content.querySelectorAll("tr[data-step]")) {
        if (document.getElementById(row.id)) continue;
        body.querySelector("tr.empty")?.remove();
        row.classList.add("new");
        body.appendChild(row);
        document.getElementById("run-steps").textContent = row.dataset.step;
      }
    }
  })().finally(() => { fetching = null; });
  return fetching;
}

// Once the page is being left (a form posted, a link followed), a status change must not reload
// it: that would cancel the navigation in flight.
let leaving = false;
window.addEventListener("beforeunload", () => { leaving = true; });
document.addEventListener("submit", () => { leaving = true; });

// A model_failover event: the run is on another model now (the header's Model and Models used).
function showModel(event) {
  const to = JSON.parse(event.data).payload?.to;
  const now = document.getElementById("run-model-now");
  const used = document.getElementById("run-models");
  if (!to || !now || !used) return;
  now.textContent = to;
  if (![...used.children].some((li) => li.textContent === to)) {
    const li = document.createElement("li");
    li.textContent = to;
    used.appendChild(li);
  }
  const started = used.firstElementChild ? used.firstElementChild.textContent : to;
  let hint = now.parentElement.querySelector(".hint");
  if (!hint) {
    hint = document.createElement("span");
    hint.className = "hint";
    now.parentElement.append(" ", hint);
  }
  hint.textContent = to === started
    ? "(back on the model it started on, after a failover)"
    : `(failed over from ${started}, the model it started on)`;
}

function follow() {
  const url = `/v1/runs/${encodeURIComponent(body.dataset.run)}/stream?after=${body.dataset.afterSeq}`;
  const source = new EventSource(url);
  // waterfall.js draws the same commits: it hears of each through `waypoint:log` on document.
  const announce = (event) => document.dispatchEvent(new CustomEvent("waypoint:log", { detail: event.type }));
  const onLog = (event) => { liveText.hidden = true; liveText.textContent = ""; appendRows(); announce(event); };
  for (const kind of ["model_response", "tool_result", "user_message", "decision"]) source.addEventListener(kind, onLog);
  source.addEventListener("model_attempt_failed", announce);
  source.addEventListener("model_failover", showModel);
  source.addEventListener("attempt_started", () => { liveText.textContent = ""; });
  source.addEventListener("model_delta", (event) => {
    const data = JSON.parse(event.data);
    const text = data.text ?? data.delta ?? "";
    if (data.snapshot) liveText.textContent = text; else liveText.textContent += text;
    liveText.hidden = !liveText.textContent;
  });
  const reload = () => {
    source.close();
    if (!leaving) Promise.resolve(appendRows()).then(() => { if (!leaving) window.location.reload(); });
  };
  source.addEventListener("status_changed", reload);
  source.addEventListener("run_finished", reload);
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED && !leaving) setTimeout(follow, 2000);
  });
}

if (body && body.dataset.live === "1") follow();
