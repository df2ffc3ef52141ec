"""Evaluations: `waypoint dataset create|list|show|export` (versioned cases made from recorded runs
or a JSONL file) and `waypoint eval DATASET --agent A ...` (an experiment: every case a durable run
of the agent, scored; then its table, and with `--fail-under` the CI gate's exit code), with
`waypoint eval show|compare|list|rescore|cancel`.

An experiment is a Temporal workflow: the CLI starts it and follows it, nothing more. Interrupted,
or killed, it leaves the experiment running; `waypoint eval show EXP --wait` finds it again.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from waypoint.app.cli._common import JsonOpt, command, connect, fail
from waypoint.checks import read_text_file

if TYPE_CHECKING:
    from typer._click import Context

    from waypoint.client import ExperimentReport, Waypoint
    from waypoint.evals.types import ScorerSpec
    from waypoint.store.evals import ExperimentRow


class DefaultCommandGroup(TyperGroup):
    """A group whose first word, when it is none of its commands' names, begins the default
    command's arguments: `waypoint eval notes --agent demo` is `waypoint eval run notes --agent
    demo`, while `waypoint eval show EXP` is the show command. `--help` stays the group's."""

    default_command = "run"

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


dataset_app = typer.Typer(no_args_is_help=True, help="Evaluation datasets: versioned cases from runs or a file.")
eval_app = typer.Typer(
    cls=DefaultCommandGroup,
    no_args_is_help=True,
    subcommand_metavar="DATASET --agent A [OPTIONS] | COMMAND [ARGS]...",
    help="Experiments: run every case of a dataset as a durable run of an agent, and score it.\n\n"
    "`waypoint eval DATASET --agent A [OPTIONS]` runs one (the run command: `waypoint eval run --help` "
    "lists its options; a dataset named like a command: `waypoint eval run NAME ...`). "
    "The other commands read, compare, rescore or cancel experiments.",
)

NameArg = Annotated[
    str, typer.Argument(metavar="NAME", help="Dataset name (`waypoint dataset list`).", show_default=False)
]
ExperimentArg = Annotated[
    str, typer.Argument(metavar="EXP", help="Experiment id (`waypoint eval list`).", show_default=False)
]
VersionOpt = Annotated[int | None, typer.Option(help="A version of the dataset (default: the newest).")]
ScorerOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--scorer",
        help="NAME[:key=value,...], repeatable (default: exact and trajectory); rubric= and schema= name a file.",
        show_default=False,
    ),
]
GateOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--fail-under", help="SCORER=THRESHOLD, repeatable: exit 1 when its mean is under it.", show_default=False
    ),
]
NoWaitOpt = Annotated[bool, typer.Option("--no-wait", help="Print the experiment's id and return.")]


def register(app: typer.Typer) -> None:
    app.add_typer(dataset_app, name="dataset")
    app.add_typer(eval_app, name="eval")


# --- datasets ------------------------------------------------------------------------------------


@dataset_app.command(name="create")
@command
async def dataset_create(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="Dataset name: a taken one gets its next version.", show_default=False)
    ],
    from_runs: Annotated[
        bool, typer.Option("--from-runs", help="Each run picked (--select, --run) a case, as it answered.")
    ] = False,
    select: Annotated[
        str | None, typer.Option(help='With --from-runs: "status=completed agent=demo since=7d".', show_default=False)
    ] = None,
    run_ids: Annotated[
        list[str] | None, typer.Option("--run", help="With --from-runs: this run (repeatable).", show_default=False)
    ] = None,
    limit: Annotated[int, typer.Option(help="With --select: at most this many runs, newest first.")] = 200,
    from_file: Annotated[
        str | None, typer.Option("--from-file", help="A JSONL file, one case a line.", show_default=False)
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Make the next version of dataset NAME, from recorded runs or from a JSONL file of cases."""
    from waypoint.app import console as out

    if from_runs == (from_file is not None):
        raise fail("give --from-runs (with --select or --run) or --from-file FILE, one of them")
    if from_runs and select is None and not run_ids:
        raise fail('--from-runs needs runs: --select "status=completed agent=demo" or --run RUN_ID')
    if not from_runs and (select is not None or run_ids):
        raise fail("--select and --run go with --from-runs")
    async with await connect() as wp:
        if from_file is not None:
            lines = _read_cases_file(from_file)
            row = await wp.evals.create_dataset(name, lines=lines, source=Path(from_file).name)
        else:
            row = await wp.evals.create_dataset(name, select=select, run_ids=run_ids or [], limit=limit)
    if as_json:
        out.print_json(row)
        return
    out.console.print(
        f"dataset {row.name} version {row.version}: {row.cases} case{'' if row.cases == 1 else 's'} "
        f"(`waypoint dataset show {row.name}`; `waypoint eval {row.name} --agent AGENT` runs them)",
        highlight=False,
        markup=False,
    )


def _read_cases_file(path: str) -> list[str]:
    return read_text_file(path, "pass --from-file a JSONL file, one case a line").splitlines()


@dataset_app.command(name="list")
@command
async def dataset_list(as_json: JsonOpt = False) -> None:
    """The tenant's datasets: each name's newest version, its versions and cases, where they came from."""
    from waypoint.app import console as out
    from waypoint.app import console_evals as show

    async with await connect() as wp:
        rows = await wp.evals.datasets()
    if as_json:
        out.print_json(rows)
    elif rows:
        out.console.print(show.datasets_table(rows, wp.tenant()))
    else:
        out.console.print('no datasets: make one with `waypoint dataset create NAME --from-runs --select "agent=A"`')


@dataset_app.command(name="show")
@command
async def dataset_show(name: NameArg, version: VersionOpt = None, as_json: JsonOpt = False) -> None:
    """A dataset version and its cases: id, task, expected output and tools, source run."""
    from waypoint.app import console as out
    from waypoint.app import console_evals as show

    async with await connect() as wp:
        row = await wp.evals.dataset(name, version=version)
        cases = await wp.evals.cases(row.name, version=row.version)
    if as_json:
        out.print_json({**out.as_json(row), "cases": cases})
        return
    out.console.print(show.dataset_table(row))
    out.console.print(show.cases_table(cases[: show.CASES_SHOWN]))
    if len(cases) > show.CASES_SHOWN:
        more = len(cases) - show.CASES_SHOWN
        out.console.print(f"... {more} more: `waypoint dataset export {row.name} --version {row.version}`")


@dataset_app.command(name="export")
@command
async def dataset_export(name: NameArg, version: VersionOpt = None) -> None:
    """The dataset version as JSONL on stdout, one case a line (`dataset create --from-file` reads it back)."""
    async with await connect() as wp:
        async for line in wp.evals.export_dataset(name, version=version):
            sys.stdout.write(line)


# --- experiments ---------------------------------------------------------------------------------


@eval_app.command(name="run")
@command
async def eval_run(
    dataset: Annotated[
        str, typer.Argument(metavar="DATASET", help="Dataset name (`waypoint dataset list`).", show_default=False)
    ],
    agent: Annotated[str, typer.Option(help="The agent each case runs (`waypoint agents`).", show_default=False)],
    model: Annotated[str | None, typer.Option(help="A model spec in place of the agent's.")] = None,
    instructions: Annotated[
        str | None, typer.Option(help="A text file: the system prompt, in place of the agent's.", show_default=False)
    ] = None,
    recorded_tools: Annotated[
        bool,
        typer.Option("--recorded-tools", help="Answer each case's tool calls from its source run's record."),
    ] = False,
    repeat: Annotated[int, typer.Option(help="Run each case this many times.")] = 1,
    concurrency: Annotated[int, typer.Option(help="Case runs at a time.")] = 4,
    scorer: ScorerOpt = None,
    fail_under: GateOpt = None,
    version: VersionOpt = None,
    priority: Annotated[int | None, typer.Option(help="Priority of its runs: 1 (first) to 5 (last).")] = None,
    no_wait: NoWaitOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Run every case of DATASET as a run of AGENT and score it (the default: `waypoint eval DATASET ...`).

    A progress bar, then the table: per scorer the mean, its 95% CI, the pass rate and the cases it
    scored; cost, tokens per case, latency p50/p95, the errored cases. With --fail-under, one line
    per failed gate and exit 1. Interrupted, the experiment goes on: `waypoint eval show EXP --wait`."""
    from waypoint.checks import read_instructions
    from waypoint.client import check_gates, parse_gates
    from waypoint.evals.scorers import DEFAULT_SCORERS

    gates = parse_gates(fail_under or [])
    specs = _scorers(scorer) or list(DEFAULT_SCORERS)
    text = read_instructions(instructions) if instructions is not None else None
    async with await connect() as wp:  # Temporal on first use: bad input is refused before
        # The gates' scorers are checked before anything runs, not after every case did.
        check_gates(gates, [s.key for s in await wp.evals.check_scorers(specs)])
        exp = await wp.evals.start_experiment(
            dataset,
            agent=agent,
            model=model,
            instructions=text,
            recorded_tools=recorded_tools,
            repeat=repeat,
            concurrency=concurrency,
            version=version,
            priority=priority,
            scorers=specs,
        )
        await _follow(wp, exp, gates, no_wait=no_wait, as_json=as_json)


@eval_app.command(name="show")
@command
async def eval_show(
    experiment_id: ExperimentArg,
    cases: Annotated[bool, typer.Option("--cases", help="Each case's run, scores and error too.")] = False,
    wait: Annotated[
        bool, typer.Option("--wait", help="Follow it until it ends (a progress bar), then show it.")
    ] = False,
    fail_under: GateOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """An experiment's table as far as it got (it goes on without the CLI that started it)."""
    from waypoint.client import parse_gates

    gates = parse_gates(fail_under or [])
    async with await connect() as wp:
        exp = await wp.evals.experiment(experiment_id)
        report = await _wait(wp, exp, quiet=as_json) if wait else await wp.evals.report(experiment_id)
    _print_report(report, gates, as_json=as_json, cases=cases)


@eval_app.command(name="compare")
@command
async def eval_compare(
    experiment_a: Annotated[
        str, typer.Argument(metavar="EXP_A", help="Experiment A (say, the baseline).", show_default=False)
    ],
    experiment_b: Annotated[
        str, typer.Argument(metavar="EXP_B", help="Experiment B (say, the change).", show_default=False)
    ],
    as_json: JsonOpt = False,
) -> None:
    """Two experiments of one dataset version, B against A, per scorer and per case.

    Per scorer the means, the difference with its 95% interval, wins, losses, ties and the sign
    test's p value (significant under 0.05); then each case that differs, a -> b per scorer."""
    from waypoint.app import console as out
    from waypoint.app import console_evals as show

    async with await connect() as wp:
        found = await wp.evals.compare(experiment_a, experiment_b)
    if as_json:
        out.print_json(found)
    else:
        out.console.print(show.comparison_tables(found), highlight=False)


@eval_app.command(name="list")
@command
async def eval_list(
    dataset: Annotated[str | None, typer.Option(help="Only the experiments of this dataset.")] = None,
    limit: Annotated[int, typer.Option(help="How many, newest first.")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """The tenant's experiments, newest first: dataset, agent, status, cases done, scorers."""
    from waypoint.app import console as out
    from waypoint.app import console_evals as show

    async with await connect() as wp:
        rows = await wp.evals.experiments(dataset=dataset, limit=limit)
    if as_json:
        out.print_json(rows)
    elif rows:
        out.console.print(show.experiments_table(rows, wp.tenant()))
    elif dataset is not None:
        out.console.print(f"no experiment of dataset {dataset}: `waypoint eval list` lists them all", markup=False)
    else:
        out.console.print("no experiments yet: start one with `waypoint eval DATASET --agent A`")


@eval_app.command(name="rescore")
@command
async def eval_rescore(
    experiment_id: ExperimentArg,
    scorer: ScorerOpt = None,
    fail_under: GateOpt = None,
    no_wait: NoWaitOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Score the runs of EXP again with other scorers, as a new experiment (no run starts)."""
    from waypoint.client import check_gates, parse_gates

    gates = parse_gates(fail_under or [])
    specs = _scorers(scorer)
    if not specs:
        raise fail("give the scorers to score it with: --scorer NAME[:key=value,...] (repeatable)")
    async with await connect() as wp:
        check_gates(gates, [s.key for s in await wp.evals.check_scorers(specs)])
        exp = await wp.evals.rescore(experiment_id, scorers=specs)
        await _follow(wp, exp, gates, no_wait=no_wait, as_json=as_json)


@eval_app.command(name="cancel")
@command
async def eval_cancel(experiment_id: ExperimentArg, as_json: JsonOpt = False) -> None:
    """Stop a running experiment: its case runs in flight are cancelled; the results so far stay."""
    from waypoint.app import console as out

    async with await connect() as wp:
        row = await wp.evals.cancel(experiment_id)
    if as_json:
        out.print_json(row)
    else:
        out.console.print(
            f"{experiment_id} cancelled: `waypoint eval show {experiment_id}` shows the results so far", markup=False
        )


# --- following an experiment ------------------------------------------------------------------------


def _scorers(texts: list[str] | None) -> list[str | ScorerSpec]:
    """The `--scorer` texts parsed, their rubric= and schema= files read."""
    from waypoint.evals.scorers import parse_scorer

    return [parse_scorer(t, read_file=_scorer_file) for t in texts or []]


def _scorer_file(key: str, path: str) -> str:
    """The text of the file a scorer argument names (a judge's rubric, a JSON Schema)."""
    return read_text_file(path, f"give {key}= the path of a file (its text is the {key})")


async def _follow(wp: Waypoint, exp: ExperimentRow, gates: dict[str, float], *, no_wait: bool, as_json: bool) -> None:
    """After a start: the id alone (--no-wait), or a progress bar until it ends, then the table and gates."""
    from waypoint.app import console as out

    if no_wait:
        out.print_json(exp) if as_json else print(exp.experiment_id)
        return
    if not as_json:
        out.err_console.print(
            f"experiment {exp.experiment_id} started: {exp.cases_total} case run(s); it goes on without this "
            f"command (`waypoint eval show {exp.experiment_id} --wait` follows it again)",
            markup=False,
            highlight=False,
        )
    _print_report(await _wait(wp, exp, quiet=as_json), gates, as_json=as_json)


async def _wait(wp: Waypoint, exp: ExperimentRow, *, quiet: bool) -> ExperimentReport:
    """`wp.evals.wait` with a progress bar on stderr: cases ended of all, and how many errored
    (counted from the results when the count of ended cases moves, one read at a time)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from waypoint.app import console as out

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("cases, {task.fields[errored]} errored"),
        TimeElapsedColumn(),
    )
    shown = not quiet and out.err_console.is_terminal  # a bar in a log is noise, and its reads are waste
    counting: list[asyncio.Task[None]] = []
    with Progress(*columns, console=out.err_console, transient=True, disable=not shown) as progress:
        bar = progress.add_task(exp.experiment_id, total=exp.cases_total, completed=exp.done, errored=0)

        async def count_errored() -> None:
            report = await wp.evals.report(exp.experiment_id)
            progress.update(bar, errored=report.summary.errored)

        def moved(row: ExperimentRow) -> None:
            progress.update(bar, completed=row.done, total=row.cases_total)
            if shown and not (counting and not counting[-1].done()):
                counting.append(asyncio.create_task(count_errored()))

        try:
            return await wp.evals.wait(exp.experiment_id, on_progress=moved)
        finally:
            for task in counting:
                task.cancel()
            await asyncio.gather(*counting, return_exceptions=True)  # a count that failed only lost a number


def _print_report(report: ExperimentReport, gates: dict[str, float], *, as_json: bool, cases: bool = False) -> None:
    """The table (with --cases each case's line), then one line per failed gate: exit 1 on any, and
    on an experiment that failed; a gate on an experiment still running fails (it has no verdict yet)."""
    from waypoint.app import console as out
    from waypoint.app import console_evals as show
    from waypoint.client import gate
    from waypoint.names import ExperimentStatus

    e = report.experiment
    failures = gate(report, gates) if gates else []
    unfinished = bool(gates) and not report.finished
    if as_json:
        answer: dict[str, Any] = out.as_json(report)
        if gates:
            answer["gate"] = {
                "passed": not failures and not unfinished,
                "finished": report.finished,
                "failures": [{**out.as_json(f), "message": str(f)} for f in failures],
            }
        out.print_json(answer)
    else:
        out.console.print(show.report_table(report), highlight=False)
        if cases and report.results:
            out.console.print(show.results_table(report), highlight=False)
        if unfinished:
            running = f"gate failed: {e.experiment_id} is still running ({e.done}/{e.cases_total}): add --wait"
            out.console.print(running, highlight=False, markup=False)
        for line in show.gate_lines(failures):
            out.console.print(line, highlight=False)
        if gates and not failures and not unfinished:
            passed = ", ".join(f"{label} >= {threshold:g}" for label, threshold in gates.items())
            out.console.print(f"gates passed: {passed}", highlight=False, markup=False)
    sys.stdout.flush()
    if failures or unfinished or e.status == ExperimentStatus.FAILED:
        raise typer.Exit(1)
