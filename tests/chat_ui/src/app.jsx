// A chat front end as a LangGraph user writes one: the langgraph-sdk's `useStream` hook, pointed at
// `waypoint serve`. Nothing here knows it is talking to Waypoint rather than a LangGraph server.
// The page reads where to connect from its query string: ?api=<url>&key=<API key>&assistant=<agent>.
import { useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import { useStream } from "@langchain/langgraph-sdk/react";

const params = new URLSearchParams(window.location.search);
const apiUrl = params.get("api");
const apiKey = params.get("key");
const assistantId = params.get("assistant");

function textOf(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((part) => (typeof part === "string" ? part : part.text ?? "")).join("");
  return "";
}

function Threads({ client, current, onPick, refresh }) {
  const [threads, setThreads] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    client.threads.search({ limit: 20 }).then(setThreads, (e) => setError(String(e)));
  }, [client, refresh]);
  if (error) return <p className="error">{error}</p>;
  if (threads == null) return <p>Loading threads…</p>;
  return (
    <ul id="threads">
      {threads.map((t) => (
        <li key={t.thread_id} data-thread-id={t.thread_id} data-status={t.status}>
          <button onClick={() => onPick(t.thread_id)} aria-current={t.thread_id === current ? "true" : undefined}>
            {t.thread_id.slice(0, 8)} · {t.status}
          </button>
        </li>
      ))}
    </ul>
  );
}

function History({ client, threadId, refresh }) {
  const [states, setStates] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    setStates(null);
    if (threadId) client.threads.getHistory(threadId, { limit: 50 }).then(setStates, (e) => setError(String(e)));
  }, [client, threadId, refresh]);
  if (!threadId) return <p>No thread yet.</p>;
  if (error) return <p className="error">{error}</p>;
  if (states == null) return <p>Loading history…</p>;
  return (
    <ol id="history">
      {states.map((s) => (
        <li key={s.checkpoint.checkpoint_id} data-checkpoint-id={s.checkpoint.checkpoint_id}>
          {s.checkpoint.checkpoint_id}: {(s.values?.messages ?? []).length} messages
        </li>
      ))}
    </ol>
  );
}

// LangChain's human-in-the-loop answer: one decision per action the interrupt asks about.
function decisions(interrupt, decision) {
  const asked = interrupt.value?.actionRequests ?? interrupt.value?.action_requests ?? [null];
  return { decisions: asked.map(() => decision) };
}

function Interrupt({ interrupt, onResume }) {
  const [reason, setReason] = useState("");
  return (
    <section id="interrupt" className="interrupt" data-interrupt-id={interrupt.id ?? ""}>
      <h2>Waiting for you</h2>
      <pre id="interrupt-value">{JSON.stringify(interrupt.value ?? interrupt, null, 2)}</pre>
      <button id="approve" onClick={() => onResume(decisions(interrupt, { type: "approve" }))}>
        Approve
      </button>
      <label>
        Reason <input id="deny-reason" value={reason} onChange={(e) => setReason(e.target.value)} />
      </label>
      <button id="deny" onClick={() => onResume(decisions(interrupt, { type: "reject", message: reason }))}>
        Deny
      </button>
    </section>
  );
}

function App() {
  const [threadId, setThreadId] = useState(null);
  const [runs, setRuns] = useState(0); // bumped when a run ends: the thread list and history reload
  const [draft, setDraft] = useState("");
  const stream = useStream({
    apiUrl,
    apiKey,
    assistantId,
    threadId,
    onThreadId: setThreadId,
    messagesKey: "messages",
    // Taking the state makes the hook read the thread's head after each run: its interrupts.
    onFinish: (state) => setRuns((n) => n + 1),
  });
  const send = (event) => {
    event.preventDefault();
    if (!draft.trim()) return;
    stream.submit({ messages: [{ type: "human", content: draft }] });
    setDraft("");
  };
  // An interrupt that asks something (a breakpoint carries no value): shown while the run streams
  // too, when the server sends it in the values (`__interrupt__`) before the run ends.
  const interrupt = stream.interrupts.find((i) => i.value !== undefined);
  return (
    <>
      <aside aria-label="Threads">
        <h2>Threads</h2>
        <button id="new-thread" onClick={() => setThreadId(null)}>New thread</button>
        <Threads client={stream.client} current={threadId} onPick={setThreadId} refresh={runs} />
      </aside>
      <main>
        <h1>Chat with {assistantId}</h1>
        <p id="status" data-thread-id={threadId ?? ""}>{stream.isLoading ? "streaming" : "idle"}</p>
        {stream.error ? <p id="error" className="error">{String(stream.error)}</p> : null}
        <div id="messages" aria-live="polite">
          {stream.messages.map((m, i) => (
            <div key={m.id ?? i} className="message" data-type={m.type}>
              {m.type}: {textOf(m.content)}
            </div>
          ))}
        </div>
        {interrupt ? (
          <Interrupt
            key={interrupt.id ?? "interrupt"}
            interrupt={interrupt}
            onResume={(resume) => stream.submit(undefined, { command: { resume } })}
          />
        ) : null}
        <form onSubmit={send}>
          <label>
            Message <input id="message" value={draft} onChange={(e) => setDraft(e.target.value)} />
          </label>
          <button id="send" type="submit" disabled={stream.isLoading}>Send</button>
        </form>
      </main>
      <aside aria-label="History">
        <h2>History</h2>
        <History client={stream.client} threadId={threadId} refresh={runs} />
      </aside>
    </>
  );
}

createRoot(document.getElementById("root")).render(<App />);
