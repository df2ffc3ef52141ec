"""Waypoint as an MCP server (`waypoint mcp`): an assistant reads one tenant's runs, and with
`WAYPOINT_MCP_WRITE=true` starts and steers them.

Every tool is a call of the Python API (`waypoint.client.Waypoint`), so the MCP answers are
the CLI's `--json` answers (typed results through `waypoint.client.as_json`), and its errors
the same one-line messages (as MCP error results). Over stdio the server acts for the configured
tenant (`WAYPOINT_TENANT`); over streamable HTTP every request must carry
`Authorization: Bearer <key>`, and `tenant_for_key` says which tenant the key acts for.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from importlib.metadata import version
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import ToolAnnotations
from pydantic import ValidationError

from waypoint.access import LOCAL, Actor, Role, Surface, acting_as
from waypoint.client import Waypoint, as_json, tree_json
from waypoint.config import Settings
from waypoint.errors import WaypointError
from waypoint.evals.scorers import DEFAULT_SCORERS
from waypoint.gateway.invariants import report_json
from waypoint.waterfall import waterfall_json

Transport = Literal["stdio", "http"]

INSTRUCTIONS = (
    "Waypoint runs LLM agents durably and keeps every step. Read a tenant's runs: list_runs, then "
    "run_status (status and one line per step), run_tree (the sub-agent runs below a run and the "
    "tree's totals), step_state (what the model saw at a step and the step's events), diff_steps, "
    "search_memory (long-term memory), list_schedules (scheduled agents), list_assistants (the Agent "
    "Protocol assistants runs start through), list_webhook_deliveries (webhook deliveries; failed=true: "
    "the dead-letter list), audit_log (who did what, for admins). Evaluations: list_datasets, list_experiments, "
    "experiment "
    "(an experiment's scores and each case's result), compare_experiments."
)
WRITE_INSTRUCTIONS = (
    " Steer runs: start_run, send_message, approve, deny, cancel_run, fork_run. Schedule agents: "
    "create_schedule, change_schedule (pause, resume, trigger, delete). Evaluate an agent on a dataset: "
    "start_experiment, then experiment until its status is not running. Send a delivered or failed webhook "
    "delivery again: redeliver_webhook."
)

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


def tenant_for_key(settings: Settings, presented: str | None) -> str | None:
    """The tenant a request with this bearer key acts for, or None (no key, or a wrong one). One
    configured key (`WAYPOINT_MCP_API_KEY`) acts for `WAYPOINT_TENANT`; an API-key store can take
    this function's place."""
    expected = settings.mcp_api_key.get_secret_value() if settings.mcp_api_key else None
    if not expected or not presented:
        return None
    return settings.tenant if hmac.compare_digest(presented.encode(), expected.encode()) else None


async def actor_for_key(wp: Waypoint, settings: Settings, presented: str | None) -> Actor | None:
    """Who a request over HTTP acts as, or None (no key, or an unknown or revoked one): the
    configured key (`WAYPOINT_MCP_API_KEY`) is an admin of `WAYPOINT_TENANT`; a Waypoint API key
    (`waypoint keys create`) acts for its own tenant with its own role."""
    if not presented:
        return None
    tenant = tenant_for_key(settings, presented)
    if tenant is not None:
        return Actor("mcp-key", Role.ADMIN, tenant, Surface.MCP)
    row = await wp.keys.valid(presented)
    return Actor(f"key:{row.id}", row.role, row.tenant_id, Surface.MCP) if row is not None else None


def bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


class WaypointMCP(MCPServer):
    """The SDK's server, with arguments that do not fit a tool's parameters answered in one line
    that names the tool's signature (the SDK answers pydantic's report, several lines long)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc, UnexpectedToolError) or not isinstance(exc.__cause__, ValidationError):
                raise
            schema = next((t.input_schema for t in await self.list_tools() if t.name == name), {})
            raise ToolError(bad_arguments(name, exc.__cause__, schema)) from exc.__cause__


def bad_arguments(tool: str, error: ValidationError, schema: dict[str, Any]) -> str:
    """`step_state: step is missing; call it as step_state(run_id: string, step: integer)`."""
    problems = []
    for e in error.errors():
        where = ".".join(map(str, e["loc"])) or "the arguments"
        problems.append(
            f"{where} is missing" if e["type"] == "missing" else f"{where}: {e['msg'][:1].lower()}{e['msg'][1:]}"
        )
    required = set(schema.get("required", []))
    params = []
    for name, spec in schema.get("properties", {}).items():
        types = [t.get("type") for t in spec.get("anyOf", [spec]) if t.get("type") not in (None, "null")]
        params.append(f"{name}{'' if name in required else '?'}: {' | '.join(types) or 'any'}")
    return f"{tool}: {'; '.join(problems)}; call it as {tool}({', '.join(params)})"


def build_server(wp: Waypoint, settings: Settings, transport: Transport) -> MCPServer:
    """The MCP server: read tools always, write tools with `settings.mcp_write`."""
    server: MCPServer = WaypointMCP(
        "waypoint",
        instructions=INSTRUCTIONS + (WRITE_INSTRUCTIONS if settings.mcp_write else ""),
        version=version("waypoint"),
    )

    async def actor_of(ctx: Context) -> Actor:
        """Over stdio, the installation's own admin (the assistant runs the command where its owner
        does) for the configured tenant; over HTTP, the bearer key's actor."""
        if transport == "stdio":
            return replace(LOCAL.at(Surface.MCP), tenant=settings.tenant)
        actor = await actor_for_key(wp, settings, bearer((ctx.headers or {}).get("authorization")))
        if actor is None:
            raise ToolError("unauthorized: send Authorization: Bearer <WAYPOINT_MCP_API_KEY or a Waypoint API key>")
        return actor

    async def answer(ctx: Context, call: Callable[[str], Awaitable[Any]]) -> str:
        """The call's result as JSON text, acting as the caller (its role checked by the client); a
        Waypoint error (a refusal names the role it needs) as an error result with its message."""
        actor = await actor_of(ctx)
        try:
            with acting_as(actor):
                value = await call(actor.tenant or settings.tenant)
        except WaypointError as exc:
            raise ToolError(str(exc)) from None
        return json.dumps(as_json(value), ensure_ascii=False)

    @server.tool(annotations=READ)
    async def list_runs(
        ctx: Context, limit: int = 20, status: str | None = None, fingerprint: str | None = None
    ) -> str:
        """The tenant's runs, newest first (id, agent, task, status, steps, tokens, cost, times,
        `agent_fingerprint`, the agent version each started with, and `current_model`, the model each
        calls now, with `models_used`, every model it has been on); `fingerprint`: only the runs that
        started with the version whose fingerprint starts with it (4 to 64 hex digits)."""
        return await answer(
            ctx, lambda t: wp.runs(tenant_id=t, limit=limit, status=status, fingerprint=fingerprint or None)
        )

    @server.tool(annotations=READ)
    async def run_status(ctx: Context, run_id: str) -> str:
        """One run: its row (`model` is the one it started on; after a failover `current_model` is the
        one it calls now and `models_used` every one it has been on, in order), one line per step
        (action, tools, tokens, time), its tree's budget pool (per measure: limit, used, reserved by
        model calls in flight, left; null without one), and while it runs its live state (current
        step, pending approvals)."""

        async def status(tenant: str) -> dict[str, Any]:
            view = await wp.status(run_id, tenant_id=tenant, check_stuck=False)
            timeline = await wp.timeline(run_id, tenant_id=tenant)
            budget = view.budget.to_json() if view.budget is not None else None
            return {"run": view.row, "timeline": timeline, "budget": budget, "live": view.live}

        return await answer(ctx, status)

    @server.tool(annotations=READ)
    async def run_tree(ctx: Context, run_id: str) -> str:
        """A run and the sub-agent runs below it (theirs too), depth first in call order: each one's
        id, agent, status, steps, tokens, cost, depth and caller (run, step, call index); then the
        tree's totals and its budget pool (used, reserved, left)."""

        async def tree(tenant: str) -> dict[str, Any]:
            return tree_json(await wp.tree(run_id, tenant_id=tenant))

        return await answer(ctx, tree)

    @server.tool(annotations=READ)
    async def run_timeline(ctx: Context, run_id: str, after_step: int = 0) -> str:
        """The run's waterfall (as GET /v1/runs/{id}/timeline): per step its times (ms from the run's
        start), tokens, cost, context size, model latency and attempts, and its bars: model attempts and
        retry waits, tool calls, approval and capacity waits, compactions, sub-agent runs."""

        async def timeline(tenant: str) -> dict[str, Any]:
            return waterfall_json(await wp.waterfall(run_id, tenant_id=tenant, after_step=after_step))

        return await answer(ctx, timeline)

    @server.tool(annotations=READ)
    async def verify_runs(ctx: Context, since: str | None = None, limit: int = 1000) -> str:
        """Check the tenant's runs created since `since` (an age such as 2h, or an ISO time; all without),
        oldest first, at most `limit`, against Temporal (as `waypoint verify --all`): every completed model
        and tool activity has its event, hash chains and checkpoints hold, each status matches its
        workflow's, no tool effect is recorded twice. `ok`, then one `violations` entry per problem."""

        async def verify(tenant: str) -> dict[str, Any]:
            return report_json(await wp.verify_all(since or None, limit=limit, tenant_id=tenant))

        return await answer(ctx, verify)

    @server.tool(annotations=READ)
    async def step_state(ctx: Context, run_id: str, step: int) -> str:
        """The state at a step: the working memory the next model call saw, and the step's events."""
        return await answer(ctx, lambda t: wp.state(run_id, step, tenant_id=t))

    @server.tool(annotations=READ)
    async def diff_steps(ctx: Context, run_id: str, a: int, b: int) -> str:
        """What changed between the states at steps a and b: messages added and dropped, context size."""
        return await answer(ctx, lambda t: wp.diff(run_id, a, b, tenant_id=t))

    @server.tool(annotations=READ)
    async def search_memory(
        ctx: Context, query: str, k: int = 5, agent: str | None = None, run_id: str | None = None
    ) -> str:
        """The tenant's long-term memories most relevant to the query (score, source run and step, text)."""
        return await answer(ctx, lambda t: wp.memory_search(query, k=k, agent=agent, run_id=run_id, tenant_id=t))

    @server.tool(annotations=READ)
    async def fleet_limits(ctx: Context) -> str:
        """The fleet's model limits and, per model key, the calls in flight and waiting, the 429s, a
        shared cooldown and the circuit breaker (a run waiting for capacity shows its key and place in
        run_status)."""
        return await answer(ctx, lambda tenant: wp.limits.report(tenant))

    @server.tool(annotations=READ)
    async def fleet(ctx: Context, period: str = "24h") -> str:
        """The fleet over a period (1h, 6h, 24h, 7d, 30d): runs by status over time, steps a minute, model
        calls and 429s per model key (every tenant's, yours beside), runs waiting for capacity or
        approval, cost per day and agent, the slowest and most expensive runs."""
        return await answer(ctx, lambda tenant: wp.fleet_stats(period, tenant_id=tenant))

    @server.tool(annotations=READ)
    async def list_schedules(ctx: Context, agent: str | None = None, limit: int = 50) -> str:
        """The tenant's scheduled agents: spec (every or cron), paused, next fire times, last runs."""
        return await answer(ctx, lambda t: wp.schedules.list(agent=agent, limit=limit, tenant_id=t))

    @server.tool(annotations=READ)
    async def list_assistants(ctx: Context, agent: str | None = None, limit: int = 100) -> str:
        """The Agent Protocol assistants a run can start through: each agent (its built-in assistant,
        version 1), then the tenant's own, newest first (id, agent as graph_id, version, config, context)."""
        return await answer(ctx, lambda t: wp.assistants.search(graph_id=agent, limit=limit, tenant_id=t))

    @server.tool(annotations=READ)
    async def list_webhook_deliveries(
        ctx: Context, failed: bool = False, run_id: str | None = None, limit: int = 50
    ) -> str:
        """The tenant's webhook deliveries, newest first: status (pending, delivered, failed), attempts,
        the last answer, when the next attempt is due. `failed`: only the dead-letter list (given up
        after the retry window, or refused); `run_id`: only that run's."""
        return await answer(ctx, lambda t: wp.webhooks.list(failed=failed, run_id=run_id, limit=limit, tenant_id=t))

    @server.tool(annotations=READ)
    async def audit_log(
        ctx: Context,
        since: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        limit: int = 50,
        verify: bool = False,
    ) -> str:
        """The tenant's audit log, newest first (admins only): who (key:<id>, user:<subject>, local) did
        what (run.approve, run.cancel, ...), on which run or setting, from which surface, and how it
        ended (ok, refused, failed); `since`: an age (24h) or ISO time. `verify`: instead, recompute its
        hash chain (`ok`, or the first entry changed or removed)."""

        async def read(tenant: str) -> Any:
            if verify:
                return await wp.audit.verify(tenant_id=tenant)
            page = await wp.audit.entries(
                since=since or None, actor=actor or None, action=action or None, limit=limit, tenant_id=tenant
            )
            return {"entries": page.entries, "next_cursor": page.next_cursor}

        return await answer(ctx, read)

    _eval_tools(server, wp, answer)
    if settings.mcp_write:
        _write_tools(server, wp, answer)
        _schedule_tools(server, wp, answer)
        _experiment_tools(server, wp, answer)
        _webhook_tools(server, wp, answer)
    return server


def _webhook_tools(server: MCPServer, wp: Waypoint, answer: Callable[..., Awaitable[str]]) -> None:
    @server.tool(annotations=WRITE)
    async def redeliver_webhook(ctx: Context, delivery_id: str) -> str:
        """Send a delivered or failed webhook delivery again: a new delivery of the same body to the same
        URL, retried as any. Answers the new delivery (its delivery_id, redelivery_of)."""
        return await answer(ctx, lambda t: wp.webhooks.redeliver(delivery_id, tenant_id=t))


def _eval_tools(server: MCPServer, wp: Waypoint, answer: Callable[..., Awaitable[str]]) -> None:
    @server.tool(annotations=READ)
    async def list_datasets(ctx: Context) -> str:
        """The tenant's evaluation datasets: each name once, its newest version, its cases, its versions."""
        return await answer(ctx, lambda t: wp.evals.datasets(tenant_id=t))

    @server.tool(annotations=READ)
    async def list_experiments(ctx: Context, dataset: str | None = None, limit: int = 20) -> str:
        """The tenant's experiments, newest first (of one dataset with `dataset`): dataset and version,
        agent, model, scorers, status, cases done of the total."""
        return await answer(ctx, lambda t: wp.evals.experiments(dataset=dataset, limit=limit, tenant_id=t))

    @server.tool(annotations=READ)
    async def experiment(ctx: Context, experiment_id: str, summary_only: bool = False) -> str:
        """An experiment's report, as far as it got: the experiment (status, cases done), its summary
        (per scorer the mean, its 95% interval, the pass rate, n; cost, tokens and latency per case,
        errored cases) and, unless summary_only, each case's result (run, status, scores, error)."""

        async def report(tenant: str) -> dict[str, Any]:
            found = await wp.evals.report(experiment_id, tenant_id=tenant)
            shown = {"experiment": found.experiment, "summary": found.summary}
            return shown if summary_only else {**shown, "results": found.results}

        return await answer(ctx, report)

    @server.tool(annotations=READ)
    async def compare_experiments(ctx: Context, experiment_a: str, experiment_b: str) -> str:
        """B against A on one dataset version: per scorer the means, the difference and its interval,
        wins, losses, ties and whether it is significant (sign test, p < 0.05); then per case."""
        return await answer(ctx, lambda t: wp.evals.compare(experiment_a, experiment_b, tenant_id=t))


def _experiment_tools(server: MCPServer, wp: Waypoint, answer: Callable[..., Awaitable[str]]) -> None:
    @server.tool(annotations=WRITE)
    async def start_experiment(
        ctx: Context,
        dataset: str,
        agent: str,
        model: str | None = None,
        recorded_tools: bool = False,
        scorers: list[str] | None = None,
        repeat: int = 1,
        concurrency: int = 4,
    ) -> str:
        """Run every case of a dataset (its newest version) as a durable run of `agent` (with `model` in
        place of its own) and score each; answers at once with the experiment and its experiment_id
        (`experiment` follows it). `recorded_tools`: answer each case's tool calls from its recorded run.
        `scorers`: NAME or NAME:key=value,... texts (default exact and trajectory)."""
        return await answer(
            ctx,
            lambda t: wp.evals.start_experiment(
                dataset,
                agent=agent,
                model=model,
                recorded_tools=recorded_tools,
                repeat=repeat,
                concurrency=concurrency,
                scorers=scorers if scorers is not None else DEFAULT_SCORERS,
                tenant_id=t,
            ),
        )


def _schedule_tools(server: MCPServer, wp: Waypoint, answer: Callable[..., Awaitable[str]]) -> None:
    @server.tool(annotations=WRITE)
    async def create_schedule(
        ctx: Context,
        agent: str,
        task: str,
        every_seconds: float | None = None,
        cron: str | None = None,
        tz: str = "UTC",
        overlap: str = "skip",
        max_steps: int | None = None,
    ) -> str:
        """Run an agent on a schedule: every N seconds, or on a cron expression (five fields or @daily)
        in time zone `tz`. `overlap` (skip, buffer_one, allow_all, cancel_other) says what a fire does
        while the last fired run still runs. Answers the schedule with its schedule_id."""
        return await answer(
            ctx,
            lambda t: wp.schedules.create(
                agent=agent,
                task=task,
                every=every_seconds,
                cron=cron,
                tz=tz,
                overlap=overlap,
                max_steps=max_steps,
                tenant_id=t,
            ),
        )

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False))
    async def change_schedule(
        ctx: Context, schedule_id: str, action: Literal["pause", "resume", "trigger", "delete"]
    ) -> str:
        """Pause, resume, trigger (fire now) or delete a schedule; answers the schedule (or, deleted, its id)."""

        async def change(tenant: str) -> Any:
            if action == "delete":
                await wp.schedules.delete(schedule_id, tenant_id=tenant)
                return {"schedule_id": schedule_id, "deleted": True}
            calls = {"pause": wp.schedules.pause, "resume": wp.schedules.resume, "trigger": wp.schedules.trigger}
            return await calls[action](schedule_id, tenant_id=tenant)

        return await answer(ctx, change)


def _write_tools(server: MCPServer, wp: Waypoint, answer: Callable[..., Awaitable[str]]) -> None:
    @server.tool(annotations=WRITE)
    async def start_run(
        ctx: Context,
        task: str,
        agent: str = "demo",
        model: str | None = None,
        max_steps: int | None = None,
        idempotency_key: str | None = None,
        webhook: str | None = None,
        after_seconds: float | None = None,
    ) -> str:
        """Start a run of an agent on a task; answers its run id. With an idempotency_key, a repeat
        (a retry after a timeout) answers the same run instead of starting another. `webhook`: an
        http(s) URL that gets one signed POST of the run's final state when it ends. `after_seconds`:
        the run is `scheduled` and starts after that long (cancel_run stops it before it starts)."""

        async def start(tenant: str) -> dict[str, str]:
            run_id = await wp.start_run(
                task,
                agent=agent,
                model=model,
                max_steps=max_steps,
                tenant_id=tenant,
                idempotency_key=idempotency_key,
                webhook=webhook,
                after_seconds=after_seconds,
            )
            return {"run_id": run_id}

        return await answer(ctx, start)

    @server.tool(annotations=WRITE)
    async def send_message(ctx: Context, run_id: str, text: str) -> str:
        """Add a user message to a running run; its next model call reads it."""
        return await answer(ctx, lambda t: wp.send(run_id, text, tenant_id=t))

    @server.tool(annotations=WRITE)
    async def approve(
        ctx: Context,
        run_id: str,
        call_id: str | None = None,
        reason: str | None = None,
        edited_input: dict[str, Any] | None = None,
        answer_text: str | None = None,
    ) -> str:
        """Let a tool call that waits for approval run (call_id may be left out when one call waits);
        edited_input: the arguments it runs with instead; answer_text: the answer to an ask_human call."""
        return await answer(
            ctx,
            lambda t: wp.approve(run_id, call_id, reason, edited_input=edited_input, answer=answer_text, tenant_id=t),
        )

    @server.tool(annotations=WRITE)
    async def deny(ctx: Context, run_id: str, call_id: str | None = None, reason: str | None = None) -> str:
        """Refuse a tool call that waits for approval; the model is told, with the reason."""
        return await answer(ctx, lambda t: wp.deny(run_id, call_id, reason, tenant_id=t))

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False))
    async def cancel_run(ctx: Context, run_id: str, reason: str | None = None) -> str:
        """End a run and its sub-agent runs with status `cancelled`: no call starts after it, tools in flight finish."""
        return await answer(ctx, lambda t: wp.cancel(run_id, reason, tenant_id=t))

    @server.tool(annotations=WRITE)
    async def fork_run(
        ctx: Context,
        run_id: str,
        step: int,
        message: str | None = None,
        model: str | None = None,
        memory: str = "then",
    ) -> str:
        """Start a new run from the state of a run at a step, plus an optional user message; answers its id.
        `memory`: what it recalls from long-term memory, then (as it was at that step) or now (as it is);
        neither recalls the run's later steps, all does."""

        async def fork(tenant: str) -> dict[str, str]:
            found = await wp.fork(run_id, step, message=message, model=model, memory=memory, tenant_id=tenant)
            return {"run_id": found}

        return await answer(ctx, fork)


class RequireKey:
    """ASGI middleware: an HTTP request without a valid bearer key gets 401 and never reaches MCP."""

    def __init__(self, app: Any, settings: Settings, wp: Waypoint):
        self.app = app
        self.settings = settings
        self.wp = wp

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            if await actor_for_key(self.wp, self.settings, bearer(headers.get("authorization"))) is None:
                from starlette.responses import JSONResponse

                message = (
                    "send Authorization: Bearer <key>: the key in WAYPOINT_MCP_API_KEY where `waypoint mcp` runs, "
                    "or a Waypoint API key (`waypoint keys create`)"
                )
                response = JSONResponse(
                    {"error": {"code": "unauthorized", "message": message}},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def serve(settings: Settings, transport: Transport, *, host: str = "127.0.0.1", port: int = 8766) -> None:
    """Serve until stopped: over stdio (the assistant runs this command), or over streamable HTTP."""
    import sys

    if transport == "http" and settings.mcp_api_key is None:
        from waypoint.errors import ConfigError

        raise ConfigError(
            "`waypoint mcp --transport http` needs a key: set WAYPOINT_MCP_API_KEY (clients send it as a bearer token)"
        )
    async with await Waypoint.connect(settings, temporal=False) as wp:
        server = build_server(wp, settings, transport)
        if transport == "stdio":
            await server.run_stdio_async()
            return
        import uvicorn

        app = RequireKey(server.streamable_http_app(host=host), settings, wp)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
        http = uvicorn.Server(config)
        print(
            f"waypoint mcp: tenant {settings.tenant} at http://{host}:{port}/mcp "
            f"({'read and write' if settings.mcp_write else 'read-only'}); Ctrl-C stops it",
            file=sys.stderr,
            flush=True,
        )
        await http.serve()
