"""Everything the CLI prints: tables, one-line renderings, JSON. One place, so every command
shows a run, a step or a message the same way."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from waypoint.calls import CallLine
from waypoint.client import FleetRun, FleetStats, as_json
from waypoint.config import Settings
from waypoint.names import STUCK, DeliveryStatus, EventKind, LineageKind, RunStatus
from waypoint.pricing import format_usd
from waypoint.store.assistants import AssistantRow
from waypoint.store.audit import AuditRow
from waypoint.store.budget import BudgetView
from waypoint.store.compare import ChildPair, RunComparison, StepSide
from waypoint.store.keys import ApiKeyRow
from waypoint.store.limits import LimitsReport
from waypoint.store.reads import StepLine
from waypoint.store.rows import AgentCall, BatchReport, RunRow
from waypoint.store.schedules import ScheduleRow
from waypoint.store.travel import LineageLink
from waypoint.store.trees import RunTree
from waypoint.store.webhooks import WebhookAttempt, WebhookDelivery
from waypoint.types import AgentInfo
from waypoint.versions import SHORT, AgentVersion
from waypoint.webhooks import shown_url


def fit(renderable: Any, target: Console) -> Any:
    """`renderable` as it fits `target`'s width without cutting a cell: a table whose columns cannot
    all fit whole (rich would cut ids, names and numbers with an ellipsis, and headers to `tok…`) is
    shown one record per block instead, each cell whole under its header. A group is fitted part by
    part; anything else is left as it is."""
    if isinstance(renderable, Group):
        return Group(*(fit(part, target) for part in renderable.renderables))
    if not isinstance(renderable, Table) or not renderable.show_header:
        return renderable
    if narrowest(renderable) <= target.width:
        return renderable
    return records(renderable)


def narrowest(table: Table) -> int:
    """The fewest columns `table` takes without cutting a cell: a column that may not wrap is as wide
    as its widest cell, one that may wrap as its longest word; a cell made to be cut (a task on one
    line, `one_line`) counts one column."""

    def plain(cell: Any) -> Text | None:
        if isinstance(cell, Text):
            return cell
        return Text.from_markup(cell) if isinstance(cell, str) else None

    total = table._extra_width  # rich's own: the box's edges and dividers
    for index, column in enumerate(table.columns):
        widest = 1
        # A column that folds breaks anywhere and cuts nothing; one given a max_width, or whose cells
        # are all made to be cut (`one_line`), gives way by design, its header with it.
        cells = [plain(c) for c in column.cells]
        made_to_cut = bool(cells) and all(t is not None and t.no_wrap and t.overflow == "ellipsis" for t in cells)
        if column.overflow != "fold" and not made_to_cut:
            for cell in (column.header, *column.cells):
                text = plain(cell)
                if text is None or (text.no_wrap and text.overflow == "ellipsis") or text.overflow == "fold":
                    continue
                if column.no_wrap or text.no_wrap:
                    widest = max(widest, text.cell_len)
                else:
                    widest = max(widest, *(len(word) for word in text.plain.split() or [""]))
            if column.max_width is not None:
                widest = min(widest, column.max_width)
        total += widest + table._get_padding_width(index)
    return total


def records(table: Table) -> Group:
    """The rows of `table` as blocks of `header  value` lines (values fold, never cut), then its footers."""
    headers = [str(c.header) for c in table.columns]
    cells = [list(c.cells) for c in table.columns]
    blocks: list[Any] = []
    if table.title:
        blocks.append(Text(str(table.title), style="bold"))
    rows = [[column[i] for column in cells] for i in range(table.row_count)]
    if table.show_footer:
        rows.append([c.footer for c in table.columns])
    for row in rows:
        block = Table.grid(padding=(0, 2))
        block.add_column(style="bold", no_wrap=True)
        block.add_column(overflow="fold")
        for header, value in zip(headers, row, strict=True):
            if header or value:
                block.add_row(header or "", value if value is not None else "")
        blocks.extend([block, Text("")])
    return Group(*blocks)


class FittingConsole(Console):
    """A console whose tables never cut what they hold (see `fit`): ids, agents, statuses and
    numbers stay whole at 80 columns, as the README promises."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(*(fit(o, self) for o in objects), **kwargs)


console = FittingConsole()
err_console = FittingConsole(stderr=True)  # progress bars: stdout stays the table (or the JSON)
# Status is never told by colour alone: the word is always printed too.
STATUS_STYLE: dict[str, str] = {
    RunStatus.RUNNING: "cyan",
    RunStatus.COMPLETED: "green",
    RunStatus.MAX_STEPS: "yellow",
    RunStatus.FAILED: "red",
    RunStatus.WAITING_CAPACITY: "magenta",
    RunStatus.SCHEDULED: "blue",
    RunStatus.QUEUED: "blue",
    STUCK: "bold red",
    DeliveryStatus.DELIVERED: "green",
    DeliveryStatus.PENDING: "yellow",
}


def print_json(data: Any) -> None:
    print(json.dumps(as_json(data), indent=2, default=str))


def print_json_line(data: Any) -> None:
    """One JSON object on one line: what `--json` prints while following (JSON lines throughout)."""
    print(json.dumps(as_json(data), default=str), flush=True)


def one_line(text: str) -> Text:
    """A free-text cell (a task, an answer) that takes what room is left: cut with `…`, one line."""
    return Text(" ".join(text.split()), no_wrap=True, overflow="ellipsis")


def tool_summary(names: Sequence[str]) -> str:
    """`read_file x3, write_file` for the calls of one step."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(name if n == 1 else f"{name} x{n}" for name, n in counts.items())


def short(value: Any, width: int = 160) -> str:
    """One line of JSON, cut to `width` characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def event_text(kind: str, payload: Any) -> str:
    """An event's payload in one line: a failover as a sentence, any other as its JSON, cut short."""
    if kind == EventKind.MODEL_FAILOVER and isinstance(payload, dict):
        after = payload.get("after_attempts")
        why = " ".join(str(payload.get("last_error") or "").split())[:300]
        return escape(f"{payload.get('from')} -> {payload.get('to')} after {after} failed attempt(s): {why}")
    return escape(short(payload))


def message_text(message: dict[str, Any], width: int = 400) -> str:
    role = message.get("role", "?")
    content = message.get("content") or ""
    if len(content) > width:
        content = content[: width - 1] + f"… ({len(message['content'])} characters)"
    calls = message.get("tool_calls") or []
    called = " ".join(f"-> {c['function']['name']}({c['function']['arguments']})" for c in calls)
    ref = f" [{message['tool_call_id']}]" if message.get("tool_call_id") else ""
    return f"[bold]{role}[/bold]{escape(ref)}: {escape(content)} {escape(called)}".rstrip()


def status_text(status: str) -> str:
    return f"[{STATUS_STYLE.get(status, 'white')}]{status}[/]"


def clock(line: StepLine) -> str:
    return line.at.strftime("%H:%M:%S")


def cached_text(read: int, write: int) -> str:
    """Prompt-cache tokens of a step or a run: `1536` read, `1536 +512w` with writes, `-` for none."""
    if not read and not write:
        return "-"
    return f"{read}" + (f" +{write}w" if write else "")


def step_text(line: StepLine) -> str:
    what = f"tools: {tool_summary(line.tools)}" if line.tools else "answer"
    errors = f"  [red]{line.tool_errors} tool error(s)[/red]" if line.tool_errors else ""
    cached = cached_text(line.cache_read_tokens, line.cache_write_tokens)
    cache = f" ({cached} cached)" if cached != "-" else ""
    return (
        f"step {line.step:>3}  {clock(line)}  {what}  "
        f"[dim]{line.input_tokens}+{line.output_tokens} tok{cache}, model {line.model_ms} ms, "
        f"tools {tools_time(line)}[/dim]{errors}"
    )


def tools_time(line: StepLine, unit: str = " ms") -> str:
    """A step's tool time: wall time (parallel calls count once), with the durations' sum when that
    differs; the sum alone, marked so, when the calls left no times (`StepLine.tools_wall_ms`)."""
    parallel = len(line.tools) > 1
    if line.tools_wall_ms is None:
        return f"{line.tools_ms}{unit} (sum)" if parallel else f"{line.tools_ms}{unit}"
    if parallel and line.tools_wall_ms != line.tools_ms:
        return f"{line.tools_wall_ms}{unit} (sum {line.tools_ms})"
    return f"{line.tools_wall_ms}{unit}"


def lineage_text(link: LineageLink) -> str:
    """`forked from RUN at step N`, `rerun of RUN from step N`, `fork RUN at step N`, `rerun RUN from step N`."""
    ancestor = link.relation == "ancestor"
    if link.lineage_kind == LineageKind.RERUN:
        return f"{'rerun of' if ancestor else 'rerun'} {link.run_id} from step {link.forked_at}"
    return f"{'forked from' if ancestor else 'fork'} {link.run_id} at step {link.forked_at}"


def timeline_table(lines: Sequence[StepLine]) -> Table:
    table = Table(title="Step timeline", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("step", "time", "action", "tool calls", "tokens", "cached", "model ms", "tools ms"):
        numeric = col in ("step", "tokens", "cached", "model ms", "tools ms")
        table.add_column(col, justify="right" if numeric else "left", no_wrap=col != "tool calls")
    for line in lines:
        table.add_row(
            str(line.step),
            clock(line),
            line.action,
            tool_summary(line.tools) or "-",
            f"{line.input_tokens}/{line.output_tokens}",
            cached_text(line.cache_read_tokens, line.cache_write_tokens),
            str(line.model_ms),
            tools_time(line, unit=""),
        )
    return table


RUN_FIELDS = (
    "run_id",
    "tenant_id",
    "agent",
    "model",
    "status",
    "priority",  # shown when set (None: the default, 3)
    "schedule_id",  # shown when a schedule fired it
    "steps",
    "max_steps",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "created_at",
    "finished_at",
    "task",
    "output",
    "error",
)


def model_text(run: RunRow) -> str:
    """The model the run calls now, and after a failover the one it started on."""
    if run.current_model == run.model:
        return escape(run.current_model)
    return escape(run.current_model) + f" [dim](failed over from {escape(run.model)})[/dim]"


def model_cell(run: RunRow) -> str:
    """The runs table's model: the one it calls now, `*` after it when it failed over (`waypoint
    status` lists every model it has been on)."""
    return run.current_model + ("*" if run.failed_over else "")


def model_switch_text(before: str, run: RunRow) -> str:
    """`--follow`'s line when the run moves to another model (a failover, or back to one that recovered)."""
    used = escape(", ".join(run.models_used))
    return f"[yellow]model[/yellow] {escape(before)} -> {escape(run.current_model)}  [dim]models used: {used}[/dim]"


def run_table(run: RunRow) -> Table:
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for key in RUN_FIELDS:
        value = getattr(run, key)
        if key == "status":
            value = run.shown_status
        if key == "model":
            value = model_text(run)
        if value is not None:
            table.add_row(key, status_text(value) if key == "status" else str(value))
        if key == "model" and run.failed_over:
            table.add_row("models used", escape(", ".join(run.models_used)))
    if run.output_json is not None:  # a typed answer (its agent's output_type), validated
        table.add_row("output_json", escape(json.dumps(run.output_json, indent=2, ensure_ascii=False)))
    if run.agent_fingerprint:  # the agent version it started with (`waypoint agent-version FINGERPRINT`)
        table.add_row("agent version", run.agent_fingerprint)
    if run.assistant_id:  # the Agent Protocol assistant it ran, and which version
        table.add_row("assistant", f"{run.assistant_id} (version {run.assistant_version})")
    if run.caller_run_id:
        table.add_row("started by", f"{run.caller_run_id} (step {run.caller_step}, call {run.caller_call_index})")
    if run.status == RunStatus.WAITING_CAPACITY and run.waiting_key:
        table.add_row("waiting for", waiting_text(run))
    if run.status in (RunStatus.SCHEDULED, RunStatus.QUEUED):
        table.add_row("waiting for", start_text(run))
    if run.stuck:
        table.add_row("stuck", f"[red]{escape(run.stuck)}[/red]: `waypoint cancel {run.run_id}` ends it")
    return table


def budget_text(pool: BudgetView) -> str:
    """The tree's budget pool in one line: per measure, used + reserved (by calls in flight) of the
    limit, and what is left."""
    return f"budget of the tree of {escape(pool.root_run_id)}: {escape(pool.summary())}"


def tree_table(tree: RunTree) -> Table:
    """One line per run of the tree, each under its caller with its run id (never cut), then the totals."""
    table = Table(box=box.SIMPLE_HEAD, show_footer=True)
    t = tree.totals
    table.add_column("run id", footer=f"{t.runs} runs", no_wrap=True)
    table.add_column("agent", footer="total", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("steps", footer=str(t.steps), justify="right")
    table.add_column("tokens", footer=str(t.tokens), justify="right")
    table.add_column("cost", footer=format_usd(t.cost_usd), justify="right")
    for node in tree.nodes:
        r = node.run
        indent = "  " * (node.depth - 1) + "└ " if node.depth else ""
        table.add_row(
            f"{indent}{r.run_id}",
            r.agent,
            status_text(r.shown_status),
            str(r.steps),
            str(r.input_tokens + r.output_tokens),
            format_usd(r.cost_usd),
        )
    return table


def runs_table(rows: Sequence[RunRow], tenant: str, width: int | None = None) -> Table:
    """One line per run. On a narrow terminal the task gives way, then the time: the id (people
    copy it), the agent and the status are never wrapped or cut (rich shrinks wrappable columns only).
    The model (the one each run calls now) is shown whole when the terminal (`width`, else the
    console's) has room for it beside those, else left out (`waypoint status` shows it): a model
    cut to `op…` says nothing."""
    heads: tuple[str, ...] = ("run id", "agent", "version", "status", "steps", "model")
    lines = []
    for r in rows:
        status = r.shown_status + (f" #{r.waiting_position}" if r.waiting_position else "")
        if r.status == RunStatus.SCHEDULED and r.start_at is not None:
            status += f" (starts at {r.start_at.strftime('%m-%d %H:%M')})"
        version = r.agent_fingerprint[:SHORT] if r.agent_fingerprint else "-"
        lines.append((r, [r.run_id, r.agent, version, status, str(r.steps), model_cell(r)]))
    # A column takes its text, a space of padding each side and one between columns, the edges one
    # each; the time and the task, however narrow, a character and their spaces each.
    need = sum(max(len(head), *(len(cells[i]) for _, cells in lines)) + 3 for i, head in enumerate(heads)) + 1 + 8
    if need > (width or console.width):
        heads = heads[:-1]
    table = Table(title=f"Runs of tenant {tenant}", title_justify="left", box=box.SIMPLE_HEAD)
    for head in heads:
        table.add_column(head, no_wrap=True, justify="right" if head == "steps" else "left")
    table.add_column("created")
    table.add_column("task")
    for r, cells in lines:
        cells[3] = status_text(cells[3])
        created = r.created_at.strftime("%m-%d %H:%M") if r.created_at else ""
        table.add_row(*cells[: len(heads)], one_line(created), one_line(r.task))
    return table


def agents_table(agents: Sequence[AgentInfo]) -> Table:
    """One line per agent of the catalog: its model, tools and the version a fresh run starts with."""
    table = Table(box=box.SIMPLE_HEAD)
    for col in ("agent", "version", "model"):
        table.add_column(col, no_wrap=True)
    table.add_column("tools")
    for a in agents:
        version = a.fingerprint[:SHORT] if a.fingerprint else "-"
        table.add_row(a.name, version, a.model, ", ".join(t.name for t in a.tools) or "-")
    return table


def agent_version_text(version: AgentVersion) -> str:
    """An agent version: its fingerprint, agent, models, tools (with their descriptions), MCP tools
    and instructions, as `waypoint agent-version` prints it."""
    lines = [
        f"agent version {version.fingerprint}",
        f"agent         {version.agent}",
        f"models        {', '.join(version.models)}",
        f"first run     {version.created_at.isoformat(timespec='seconds') if version.created_at else '-'}",
        "tools:",
    ]
    for t in version.tools:
        function = t.get("function", {})
        lines.append(f"  {function.get('name')}: {one_line(str(function.get('description') or ''))}")
    if version.mcp_tools:
        lines.append(f"MCP tools:     {', '.join(version.mcp_tools)}")
    lines += ["instructions:", *(f"  {line}" for line in version.instructions.splitlines())]
    return "\n".join(lines)


def start_text(run: RunRow) -> str:
    """What a run that has not started waits for: its start time, the run before it, or both."""
    parts = []
    if run.start_at is not None and run.status == RunStatus.SCHEDULED:
        parts.append(f"starts at {run.start_at.isoformat(timespec='seconds')}")
    if run.after_run_id:
        parts.append(f"starts when run {run.after_run_id} ends")
    return ", then ".join(parts) or "its turn"


def waiting_text(run: RunRow) -> str:
    """Where a run waiting for capacity stands: its key and its place in that key's line."""
    place = f", #{run.waiting_position} in line" if run.waiting_position else ""
    return f"capacity of {escape(run.waiting_key or '')}{place} (`waypoint limits` shows the keys)"


def limits_tables(report: LimitsReport) -> list[Table]:
    """What the limits file declares, then each key the limiter knows as it is now."""

    def limit(value: Any) -> str:
        return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)

    def when(at: Any) -> str:
        return at.strftime("%H:%M:%S") if at else "-"

    declared = [
        (key, limit(m["in_flight"]), limit(m["requests_per_minute"]), limit(m["tokens_per_minute"]))
        for key, m in report.models.items()
    ]
    tables = []
    if declared:
        names = ("key", "in flight", "requests/min", "tokens/min")
        tables.append(columns(f"Model keys of {report.source}", names, declared))
    if report.tenants:
        rows = [
            (
                name,
                limit(t["runs"]),
                limit(t["weight"]),
                limit(t.get("tokens_per_day")),
                limit(t.get("cost_per_day")),
                str(t.get("budget_wait", "fail")) if t.get("tokens_per_day") or t.get("cost_per_day") else "-",
            )
            for name, t in report.tenants.items()
        ]
        tables.append(
            columns("Tenants", ("tenant", "runs at once", "weight", "tokens/day", "cost/day (USD)", "then"), rows)
        )
    if report.today is not None:
        d = report.today
        row = (
            d["day"],
            f"{d['used_tokens']:,}",
            f"{d['reserved_tokens']:,}",
            format_usd(d["used_cost_usd"]),
            format_usd(d["reserved_cost_usd"]),
            str(len(d["waiting"])),
        )
        heads = ("day (UTC)", "tokens used", "tokens reserved", "cost used", "cost reserved", "runs waiting")
        tables.append(columns("Today's budget", heads, [row]))
    live = [
        (
            h.key,
            str(h.in_flight),
            str(h.waiting),
            str(h.requests),
            str(h.throttled),
            when(h.cooldown_until),
            when(h.breaker_open_until) + (f" ({h.failures} failed)" if h.failures else ""),
        )
        for h in report.keys
    ]
    tables.append(
        columns("Now", ("key", "in flight", "waiting", "calls", "429s", "cooling until", "breaker open until"), live)
    )
    return tables


def fleet_tables(stats: FleetStats) -> list[Table]:
    """`waypoint fleet`: the period's totals and buckets, model keys, waits, costs, the slowest and
    costliest runs (what the viewer's fleet page charts)."""
    totals = stats.totals
    statuses = ", ".join(f"{n} {s}" for s, n in stats.by_status.items()) or "none"
    head = columns(
        f"Fleet of tenant {stats.tenant_id}, last {stats.period}",
        ("runs", "steps", "cost", "by status now", "waiting capacity", "waiting approval"),
        [
            (
                str(totals["runs"]),
                str(totals["steps"]),
                format_usd(float(totals["cost_usd"])),
                statuses,
                str(stats.waiting.get(RunStatus.WAITING_CAPACITY, 0)),
                str(stats.waiting.get(RunStatus.WAITING_APPROVAL, 0)),
            )
        ],
        wrap="by status now",
    )
    buckets = [
        (b.at.strftime("%m-%d %H:%M"), str(sum(b.runs.values())), str(b.steps), f"{b.steps_per_minute:g}")
        for b in stats.buckets
        if b.runs or b.steps
    ]
    keys = [
        (k.key, str(k.calls), str(k.failed), str(k.throttled), str(k.own_calls), str(k.own_throttled), str(k.in_flight))
        for k in stats.model_keys
    ]
    names = ("model key", "calls", "failed", "429s", "yours", "your 429s", "in flight now")
    waits = [(r.run_id, r.status, r.agent, waiting_for(r)) for r in stats.waiting_runs]
    costs = [
        (c.day.strftime("%Y-%m-%d"), c.agent, str(c.runs), str(c.steps), format_usd(c.cost_usd)) for c in stats.costs
    ]

    def top(rows: Sequence[Any]) -> list[tuple[str, ...]]:
        return [(r.run_id, r.agent, r.status, str(r.steps), f"{r.seconds:g} s", format_usd(r.cost_usd)) for r in rows]

    run_names = ("run", "agent", "status", "steps", "duration", "cost")
    return [
        head,
        columns("Runs started and steps a minute (busy buckets)", ("from", "runs", "steps", "steps/min"), buckets),
        columns("Model calls per key (every tenant's; yours beside)", names, keys),
        columns("Waiting now", ("run", "status", "agent", "for"), waits),
        columns("Cost per day and agent", ("day (UTC)", "agent", "runs", "steps", "cost"), costs),
        columns("Slowest runs", run_names, top(stats.slowest)),
        columns("Most expensive runs", run_names, top(stats.costliest)),
    ]


def waiting_for(run: FleetRun) -> str:
    """What a waiting run waits for: a human's approval, or capacity of its key (and its place in line)."""
    if run.status == RunStatus.WAITING_APPROVAL:
        return "approval"
    return f"capacity of {run.waiting_key or '?'}" + (f", #{run.waiting_position}" if run.waiting_position else "")


def keys_table(rows: Sequence[ApiKeyRow]) -> Table:
    def when(at: Any) -> str:
        return at.strftime("%Y-%m-%d %H:%M") if at else "-"

    lines = [
        (str(k.id), k.prefix + "...", k.tenant_id, k.role, k.name or "", when(k.created_at), when(k.revoked_at))
        for k in rows
    ]
    return columns("API keys", ("id", "prefix", "tenant", "role", "name", "created", "revoked"), lines)


def audit_table(rows: Sequence[AuditRow]) -> Table:
    """The audit log, newest first: seq, time (UTC), actor, role, surface, action, target, outcome, detail."""
    lines = [
        (
            str(r.seq),
            r.at.strftime("%Y-%m-%d %H:%M:%S"),
            r.actor,
            r.role,
            r.surface + (f" {r.address}" if r.address else ""),
            r.action,
            f"{r.target_kind}:{r.target_id}" if r.target_kind else "-",
            r.outcome,
            escape(r.message or ""),
        )
        for r in rows
    ]
    names = ("seq", "at (UTC)", "actor", "role", "surface", "action", "target", "outcome", "detail")
    return columns("Audit log", names, lines, wrap=("target", "detail"))


def columns(
    title: str | None, names: Sequence[str], rows: Sequence[Sequence[str]], *, wrap: str | Sequence[str] = ()
) -> Table:
    """A plain table: the column (or columns) named in `wrap` may wrap (the others never do)."""
    wraps = {wrap} if isinstance(wrap, str) else set(wrap)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for name in names:
        table.add_column(name, no_wrap=name not in wraps)
    for row in rows:
        table.add_row(*row)
    return table


def endpoints_table(settings: Settings, info: Any, worker: str, api: str = "-") -> Table:
    """What `waypoint dev` started (`info`: its StackInfo, or None), printed whole whatever the width."""
    table = Table(show_header=False, box=None, title="Waypoint dev stack", title_justify="left")
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")  # a URL is copied: fold it, never cut it
    table.add_row("Temporal", f"{settings.temporal_address} (namespace {settings.temporal_namespace})")
    table.add_row("Temporal UI", (info.ui_url if info else None) or "-")
    table.add_row("HTTP API", api)
    table.add_row("Postgres", settings.database_url or "-")
    table.add_row("Qdrant", settings.qdrant_url or str(settings.resolved_qdrant_path))
    table.add_row("Task queue", settings.task_queue)
    table.add_row("Worker", worker)
    table.add_row("State folder", str(settings.state_dir.resolve()))
    return table


def calls_text(calls: Sequence[CallLine], width: int = 60) -> str:
    """`search({"q":"x"}) ok, read_file(...)` for one side of a compared step."""
    parts = [f"{c.name}({c.arguments})" + (f" {c.outcome}" if c.outcome and c.outcome != "ok" else "") for c in calls]
    text = ", ".join(parts) or "answer"
    return escape(text if len(text) <= width else text[: width - 1] + "…")


def side_cost(side: StepSide | None) -> str:
    if side is None:
        return "-"
    return f"{side.input_tokens}/{side.output_tokens} ${side.cost_usd:.4f} {side.model_ms} ms"


def comparison_summary(c: RunComparison) -> str:
    where = "no divergence" if c.first_divergence is None else f"first divergence at step {c.first_divergence}"
    if c.first_divergence is None and c.diverged:
        same_end = c.a.status == c.b.status and c.same_output
        where = "same steps and outcome, different sub-agent calls" if same_end else "same steps, different outcome"
    return (
        f"{where}; steps {c.steps_delta:+d}, tokens {c.input_tokens_delta:+d}/{c.output_tokens_delta:+d}, "
        f"cost {c.cost_delta_usd:+.4f} USD, model time {c.model_ms_delta:+d} ms"
        + (f"; {c.not_recorded_b} call(s) not recorded" if c.not_recorded_b else "")
        + ("; other instructions" if c.instructions_diff else "")
        + children_summary(c.children)
    )


def children_summary(pairs: Sequence[ChildPair]) -> str:
    """`; sub-agent calls: 4 paired, 1 differ, 1 only in b` (empty without any)."""
    if not pairs:
        return ""
    both = [p for p in pairs if p.a is not None and p.b is not None]
    differ = sum(not p.same for p in both)
    only_a = sum(p.b is None for p in pairs)
    only_b = sum(p.a is None for p in pairs)
    return (
        f"; sub-agent calls: {len(both)} paired, {differ} differ"
        + (f", {only_a} only in a" if only_a else "")
        + (f", {only_b} only in b" if only_b else "")
    )


def agent_call_text(call: AgentCall | None, width: int = 160) -> str:
    """`note_reader -> run R.1.0 (completed, 3 steps, 412 tok): <answer>` for one sub-agent call."""
    if call is None:
        return "-"
    if call.child_run_id is not None:
        ran = f"run {call.child_run_id} ({call.status}, {call.steps} steps, {call.tokens} tok, ${call.cost_usd:.4f})"
    elif call.recorded_from is not None:
        ran = f"answered from the record of run {call.recorded_from}"
    else:
        ran = "no child run"
    outcome = f" [{call.outcome}]" if call.outcome and call.outcome != "ok" else ""
    answer = "(no answer yet)" if call.answer is None else short(call.answer, width)
    return escape(f"{call.agent} -> {ran}{outcome}: {answer}")


def children_table(c: RunComparison) -> Table:
    """The two runs' sub-agent calls paired by (step, call index): `=` where the answers and ends are
    the same, `shared` where both are the one child run a fork inherited."""
    table = Table(title="sub-agent calls", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("call", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    for col in ("a", "b"):
        table.add_column(col, overflow="fold")
    table.add_column("steps tok $ (b-a)", no_wrap=True)
    for p in c.children:
        mark = "[green]=[/green]" if p.same else "[red]≠[/red]"
        if p.shared:
            mark += " shared"
        delta = f"{p.steps_delta:+d} {p.tokens_delta:+d} {p.cost_delta_usd:+.4f}"
        table.add_row(f"{p.step}.{p.call_index}", mark, agent_call_text(p.a, 80), agent_call_text(p.b, 80), delta)
    return table


def comparison_table(c: RunComparison) -> Table:
    """Two runs side by side: one line per step, `=` where both did the same. On a narrow terminal
    the step and the mark stay whole; the calls and the costs wrap (the costs into a narrow column,
    so a call column keeps room for the longest outcome, `budget_exceeded`)."""
    table = Table(title=f"{c.a.run_id} (a) vs {c.b.run_id} (b)", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    for col in ("a: calls / answer", "b: calls / answer"):
        table.add_column(col, overflow="fold")
    for col in ("a: tok $ ms", "b: tok $ ms"):
        table.add_column(col, max_width=None if console.width >= 120 else 11)
    for s in c.steps:
        mark = "[green]=[/green]" if s.same else "[red]≠[/red]"
        table.add_row(
            str(s.step),
            mark,
            calls_text(s.a.calls) if s.a else "-",
            calls_text(s.b.calls) if s.b else "-",
            side_cost(s.a),
            side_cost(s.b),
        )
    table.add_row(
        "",
        "[green]=[/green]" if c.a.status == c.b.status else "[red]≠[/red]",
        "outcome: " + status_text(c.a.status),
        "outcome: " + status_text(c.b.status),
        "",
        "",
    )
    return table


def comparison_diffs(c: RunComparison) -> list[str]:
    """The instructions' diff (when they differ), the answer diffs of the steps that differ, then of
    the final answers."""
    lines: list[str] = []
    if c.instructions_diff:
        lines.append("[bold]instructions[/bold]")
        lines += [escape(d) for d in c.instructions_diff]
    for s in c.steps:
        if s.answer_diff:
            lines.append(f"[bold]step {s.step} answer[/bold]")
            lines += [escape(d) for d in s.answer_diff]
    for p in c.children:
        if p.a is not None and p.b is not None and p.answer_diff:
            lines.append(f"[bold]sub-agent call {p.step}.{p.call_index} answer[/bold]")
            lines += [escape(d) for d in p.answer_diff]
    if c.output_diff:
        lines.append("[bold]final answer[/bold]")
        lines += [escape(d) for d in c.output_diff]
    return lines


def batch_table(report: BatchReport) -> Group:
    """One line per rerun of a batch: its source, the rerun, outcome, divergence and deltas; then
    why each rerun that did not start did not. The ids and the status never wrap; the numbers do."""
    rows = [
        (
            i.source_run_id,
            i.run_id or "-",
            status_text(i.status) if i.status else "[red]not started[/red]",
            "-"
            if i.run_id is None
            else ("no" if not i.diverged else f"step {i.first_divergence}" if i.first_divergence else "outcome"),
            f"{i.tokens_delta:+d}",
            f"{i.cost_delta_usd:+.4f}",
            str(i.not_recorded),
        )
        for i in report.items
    ]
    names = ("source", "rerun", "status", "diverged", "tokens Δ", "cost Δ USD", "not recorded")
    errors = [f"[red]not started[/red]: {i.source_run_id}: {escape(i.error)}" for i in report.items if i.error]
    return Group(columns(f"Batch {report.batch_id}", names, rows, wrap=names[3:]), *errors)


def batch_summary(report: BatchReport) -> str:
    t50, t95 = report.tokens_delta
    c50, c95 = report.cost_delta_usd
    return (
        f"{report.runs} runs: {report.diverged_pct:g}% diverged, {report.completed_pct:g}% completed; "
        f"tokens Δ p50 {t50:+g} p95 {t95:+g}; cost Δ p50 {c50:+.4f} p95 {c95:+.4f} USD; "
        f"list them with `waypoint runs --batch {report.batch_id}`"
    )


def schedule_spec_text(spec: dict[str, Any]) -> str:
    """`every 1h` or `cron 0 9 * * mon-fri (Europe/Paris)`, then what differs from the defaults."""
    from waypoint.checks import duration_text

    if spec.get("every"):
        text = f"every {duration_text(spec['every'])}"
    else:
        text = f"cron {spec.get('cron')}" + (f" ({spec['tz']})" if spec.get("tz", "UTC") != "UTC" else "")
    if spec.get("overlap", "skip") != "skip":
        text += f", overlap {spec['overlap']}"
    if spec.get("jitter"):
        text += f", jitter {duration_text(spec['jitter'])}"
    if spec.get("end_at"):
        text += f", until {spec['end_at'][:16].replace('T', ' ')}"
    return text


def schedules_table(rows: Sequence[ScheduleRow], tenant: str) -> Table:
    """One line per schedule: id (never cut), agent, when it fires, the next fire, paused, the last run."""
    lines = []
    for r in rows:
        nxt = r.next_runs[0].strftime("%Y-%m-%d %H:%M:%S") if r.next_runs and not r.paused else "-"
        last = f"{r.recent[0].run_id} {status_text(r.recent[0].status)}" if r.recent else "-"
        lines.append((r.schedule_id, r.agent, schedule_spec_text(r.spec), nxt, "yes" if r.paused else "no", last))
    names = ("schedule id", "agent", "fires", "next", "paused", "last run")
    return columns(f"Schedules of tenant {tenant}", names, lines, wrap=("fires", "last run"))


def schedule_table(row: ScheduleRow) -> Table:
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("schedule_id", row.schedule_id)
    table.add_row("agent", row.agent)
    table.add_row("task", escape(row.task))
    if row.thread_id:
        table.add_row("thread", row.thread_id)
    table.add_row("fires", schedule_spec_text(row.spec))
    table.add_row("catch-up", f"{row.spec.get('catchup', 0):g} s")
    for key in ("model", "max_steps", "priority", "webhook"):
        if row.spec.get(key) is not None:
            table.add_row(key, str(row.spec[key]))
    table.add_row("paused", f"yes: {escape(row.note or '')}" if row.paused else "no")
    table.add_row("next", ", ".join(t.strftime("%Y-%m-%d %H:%M:%S") for t in row.next_runs[:3]) or "-")
    for ref in row.recent:
        at = ref.started_at.strftime("%Y-%m-%d %H:%M:%S") if ref.started_at else ""
        table.add_row("run", f"{ref.run_id} {status_text(ref.status)} {at}")
    table.add_row("created_at", row.created_at.isoformat())
    return table


def assistants_table(rows: Sequence[AssistantRow]) -> Table:
    """One line per assistant (or version): id, graph, version, name, what its config sets."""
    table = Table(box=box.SIMPLE_HEAD)
    for name in ("assistant", "graph", "version", "name", "kind", "created"):
        table.add_column(name, overflow="fold")
    for a in rows:
        created = a.created_at.strftime("%Y-%m-%d %H:%M") if a.created_at else "-"
        kind = "agent (built in)" if a.builtin else "assistant"
        table.add_row(escape(a.assistant_id), escape(a.graph_id), str(a.version), escape(a.name), kind, created)
    return table


def assistant_table(a: AssistantRow) -> Table:
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for key in ("assistant_id", "graph_id", "version", "name", "description", "created_at", "updated_at"):
        if (value := getattr(a, key)) is not None:
            table.add_row(key, escape(str(value)))
    for key in ("config", "context", "metadata"):
        if value := getattr(a, key):
            table.add_row(key, escape(json.dumps(value, ensure_ascii=False)))
    if a.builtin:
        table.add_row("kind", "an agent of the catalog (read-only: create an assistant of it to configure it)")
    return table


def _when(at: Any) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S") if at else "-"


def _last(status_code: int | None, error: str | None) -> str:
    return error or (f"HTTP {status_code}" if status_code is not None else "-")


def deliveries_table(rows: Sequence[WebhookDelivery], tenant: str, *, failed: bool = False) -> Table:
    """One line per delivery: id, run, status, attempts (never cut), next attempt or end, URL, the last
    answer (cut to what room is left; `webhooks show` has it whole)."""
    which = "Failed webhook deliveries (the dead-letter list)" if failed else "Webhook deliveries"
    table = Table(title=f"{which} of tenant {tenant}", title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("delivery", "run", "status", "attempts"):  # never cut: people copy the ids
        table.add_column(name, no_wrap=True)
    for name in ("next / ended", "url", "last answer"):  # these give way on a narrow terminal
        table.add_column(name)
    for d in rows:
        when = _when(d.next_attempt_at) if d.status == DeliveryStatus.PENDING else _when(d.ended_at)
        table.add_row(
            d.delivery_id,
            d.run_id,
            status_text(d.status),
            str(d.attempts),
            when,
            one_line(shown_url(d.url)),
            one_line(_last(d.last_status_code, d.last_error)),
        )
    return table


def delivery_table(d: WebhookDelivery, attempts: Sequence[WebhookAttempt]) -> Group:
    """A delivery (where it stands, its window) and each of its attempts."""
    from waypoint.client import delivery_line

    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("delivery_id", d.delivery_id)
    table.add_row("run", d.run_id)
    table.add_row("event", d.event)
    table.add_row("url", escape(shown_url(d.url)))
    table.add_row("status", f"{status_text(d.status)}: {escape(delivery_line(d))}")
    if d.redelivery_of:
        table.add_row("redelivery of", d.redelivery_of)
    table.add_row("created_at", _when(d.created_at))
    table.add_row("window ends", _when(d.window_ends_at))
    if d.status == DeliveryStatus.FAILED:
        table.add_row("send it again", f"waypoint webhooks redeliver {d.delivery_id}")
    lines = [
        (str(a.attempt), _when(a.at), str(a.status_code or "-"), f"{a.duration_ms} ms", escape(a.error or "delivered"))
        for a in attempts
    ]
    return Group(table, columns("Attempts", ("attempt", "at", "HTTP", "took", "outcome"), lines, wrap="outcome"))
