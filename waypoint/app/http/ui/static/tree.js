// Keeps a live run's table of sub-agent runs current: it follows the tree's stream
// (/v1/runs/{id}/stream?children=true: every run of the tree, each event naming its run; a run
// that starts joins it) and, when a run of the tree starts, steps, changes status or ends, fetches
// the server-rendered table again (GET /ui/runs/{id}/tree) and puts it in place. Events that come
// together are one fetch; the focused link keeps the focus. The stream ends with the tree.
const tree = document.getElementById("tree");
const TRIGGERS = ["run_started", "model_response", "tool_result", "status_changed", "run_finished", "step_cancelled"];
const SETTLE_MS = 150;  // events of one commit arrive together: one fetch for them

let leaving = false;
window.addEventListener("beforeunload", () => { leaving = true; });
document.addEventListener("submit", () => { leaving = true; });

let timer = null;
let fetching = false;
let again = false;

async function refresh() {
  if (fetching) { again = true; return; }
  fetching = true;
  try {
    const response = await fetch(`/ui/runs/${encodeURIComponent(tree.dataset.run)}/tree`);
    if (response.ok && !leaving) {
      const template = document.createElement("template");
      template.innerHTML = await response.text();
      if (template.innerHTML.trim() !== tree.innerHTML.trim()) {
        const focused = tree.contains(document.activeElement) ? document.activeElement.getAttribute("href") : null;
        tree.replaceChildren(template.content);
        tree.hidden = !tree.querySelector("table");
        if (focused) tree.querySelector(`a[href="${CSS.escape(focused)}"]`)?.focus();
      }
    }
  } catch (_) {
    // the server restarting: the stream's next event asks again
  } finally {
    fetching = false;
    if (again) { again = false; soon(); }
  }
}

function soon() {
  if (timer === null) timer = setTimeout(() => { timer = null; refresh(); }, SETTLE_MS);
}

function follow() {
  // From now on (?after: the top run's events so far are on the page); runs below are read from
  // their start, so a child that started before the page is in the table at once.
  const after = document.getElementById("steps")?.dataset.afterSeq || "0";
  const query = new URLSearchParams({ children: "true", deltas: "false", after });
  const source = new EventSource(`/v1/runs/${encodeURIComponent(tree.dataset.run)}/stream?${query}`);
  for (const kind of TRIGGERS) source.addEventListener(kind, (event) => {
    soon();
    const data = JSON.parse(event.data);
    if (kind === "run_finished" && data.run_id === tree.dataset.run) source.close();  // its children end with it
  });
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED && !leaving) setTimeout(follow, 2000);
  });
}

if (tree && tree.dataset.live === "1") follow();
