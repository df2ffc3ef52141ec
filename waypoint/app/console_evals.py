"""What `waypoint dataset` and `waypoint eval` print: datasets and their cases, an experiment's
table, its cases, two experiments compared. Beside `console.py`, as `client_evals.py` is beside the
client: the same helpers (`columns`, `one_line`, `short`, `status_text`), one place for evaluations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table

from waypoint.app.console import columns, one_line, short, status_text
from waypoint.client import ExperimentComparison, ExperimentReport, GateFailure
from waypoint.evals.cases import EvalCase, tools_line
from waypoint.evals.stats import CaseDelta
from waypoint.names import CaseStatus, ExperimentStatus
from waypoint.pricing import format_usd
from waypoint.store.evals import DatasetRow, ExperimentRow

ERRORS_SHOWN = 10  # errored cases listed under an experiment's table (`--cases` lists every case)
CASES_SHOWN = 200  # cases `dataset show` lists (`dataset export` and --json give every one)
CELL = 60  # characters of an expected output or a tool list in a cell


def when(row: DatasetRow | ExperimentRow) -> str:
    return row.created_at.strftime("%Y-%m-%d %H:%M") if row.created_at else "-"


def source_text(row: DatasetRow) -> str:
    """Where a version's cases came from: `runs agent=demo` or `file cases.jsonl`."""
    source = row.source
    if source.get("kind") == "file":
        return f"file {source.get('file')}"
    picked = [source["select"]] if source.get("select") else []
    if source.get("run_ids"):
        picked.append(f"{len(source['run_ids'])} run id(s)")
    return "runs " + ", ".join(picked)


def datasets_table(rows: Sequence[DatasetRow], tenant: str) -> Table:
    lines = [
        (escape(r.name), str(r.version), str(r.versions), str(r.cases), escape(source_text(r)), when(r)) for r in rows
    ]
    names = ("dataset", "newest", "versions", "cases", "source", "created")
    return columns(f"Datasets of tenant {tenant}", names, lines, wrap="source")


def dataset_table(row: DatasetRow) -> Table:
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("dataset", escape(row.name))
    table.add_row("version", f"{row.version} (of {row.versions})")
    table.add_row("cases", str(row.cases))
    table.add_row("source", escape(source_text(row)))
    table.add_row("created_at", row.created_at.isoformat() if row.created_at else "-")
    return table


def cases_table(cases: Sequence[EvalCase]) -> Table:
    """One line per case; the task gives way first on a narrow terminal, then the expectations."""
    names = ("case", "task", "expected output", "expected tools", "source run")
    table = columns(None, names, [], wrap=names[1:4])
    for c in cases:
        expected = "-" if c.expected_output is None else short(c.expected_output, CELL)
        tools = "-" if c.expected_tools is None else short([tools_line(t) for t in c.expected_tools], CELL)
        table.add_row(escape(c.case_id), one_line(c.task), one_line(expected), one_line(tools), c.source_run_id or "-")
    return table


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def latency(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def experiment_title(e: ExperimentRow) -> str:
    changed = "".join(
        f", {what}" for what in (e.model and f"model {e.model}", e.instructions and "own instructions") if what
    )
    recorded = ", tools from the record" if e.recorded_tools else ""
    again = f", a rescoring of {e.rescored_from}" if e.rescored_from else ""
    repeat = f", each x{e.repeat}" if e.repeat > 1 else ""
    return (
        f"Experiment {e.experiment_id}: {escape(e.dataset)} v{e.dataset_version}, agent {escape(e.agent)}"
        f"{escape(changed)}{recorded}{repeat}{again} ({e.status})"
    )


def report_table(report: ExperimentReport) -> Group:
    """Per scorer its mean, 95% interval, pass rate and count; then what the runs used, the errored
    cases (with why), and where to look next."""
    e, s = report.experiment, report.summary
    lines = [
        (
            escape(r.scorer),
            ratio(r.mean),
            "-" if r.ci_low is None or r.ci_high is None else f"[{r.ci_low:.3f}, {r.ci_high:.3f}]",
            "-" if r.pass_rate is None else f"{r.pass_rate:.0%} ({r.passed})",
            str(r.n),
        )
        for r in s.scorers
    ]
    table = columns(None, ("scorer", "mean", "95% CI", "pass rate", "n"), lines)
    per_case = "-" if s.cost_per_case_usd is None else format_usd(s.cost_per_case_usd)
    tokens = "-" if s.tokens_per_case is None else f"{s.tokens_per_case:.0f}"
    used = (
        f"cases {s.cases} of {e.cases_total} ended, {s.errored} errored; cost {format_usd(s.cost_usd)} "
        f"({per_case} a case); tokens {tokens} a case; latency p50 {latency(s.latency_p50_ms)}, "
        f"p95 {latency(s.latency_p95_ms)}"
    )
    parts: list[Any] = [f"[bold]{experiment_title(e)}[/bold]", table, used]
    errored = [r for r in report.results if r.status == CaseStatus.ERRORED]
    for r in errored[:ERRORS_SHOWN]:
        run = f" (run {r.run_id})" if r.run_id else ""
        parts.append(f"[red]errored[/red]: case {escape(r.case_id)}{run}: {escape(r.error or 'no reason recorded')}")
    if len(errored) > ERRORS_SHOWN:
        parts.append(f"... {len(errored) - ERRORS_SHOWN} more errored: `waypoint eval show {e.experiment_id} --cases`")
    if e.status == ExperimentStatus.FAILED and e.error:
        parts.append(f"[red]the experiment failed[/red]: {escape(e.error)}")
    parts.append(
        f"experiment {e.experiment_id}: its runs `waypoint runs --batch {e.experiment_id}`, "
        f"each case `waypoint eval show {e.experiment_id} --cases`"
    )
    return Group(*parts)


def results_table(report: ExperimentReport) -> Table:
    """One line per case run: its id, repetition, status, run, each scorer's value (✓ passed), the error."""
    labels = report.experiment.labels
    table = columns(None, ("case", "rep", "status", "run", *labels, "error"), [], wrap="error")
    for r in report.results:
        cells = []
        for label in labels:
            score = r.scores.get(label) or {}
            value = score.get("value")
            cells.append("-" if value is None else f"{value:.2f}" + (" ✓" if score.get("passed") else ""))
        status = f"[red]{r.status}[/red]" if r.status == CaseStatus.ERRORED else r.status
        table.add_row(escape(r.case_id), str(r.repetition), status, r.run_id or "-", *cells, escape(r.error or ""))
    return table


def experiments_table(rows: Sequence[ExperimentRow], tenant: str) -> Table:
    lines = [
        (
            e.experiment_id,
            f"{escape(e.dataset)} v{e.dataset_version}",
            escape(e.agent),
            escape(e.model or "-"),
            status_text(e.status),
            f"{e.done}/{e.cases_total}",
            escape(", ".join(e.labels)),
            when(e),
        )
        for e in rows
    ]
    names = ("experiment", "dataset", "agent", "model", "status", "cases", "scorers", "created")
    return columns(f"Experiments of tenant {tenant}", names, lines, wrap="scorers")


def gate_lines(failures: Sequence[GateFailure]) -> list[str]:
    return [f"gate failed: {escape(str(f))}" for f in failures]


def _differs(case: CaseDelta) -> bool:
    """A case worth a line: B won or lost on a scorer, or one side has a score the other lacks."""
    return any(
        v in ("win", "loss") or ((case.a.get(k) is None) != (case.b.get(k) is None)) for k, v in case.verdict.items()
    )


def comparison_tables(c: ExperimentComparison) -> Group:
    """Per scorer B against A (means, the difference with its interval, wins, losses, ties, p value,
    significant or not); then each case that differs, a→b per scorer."""
    lines = []
    for d in c.scorers:
        interval = "" if d.delta_low is None or d.delta_high is None else f" [{d.delta_low:+.3f}, {d.delta_high:+.3f}]"
        lines.append(
            (
                escape(d.scorer),
                ratio(d.mean_a),
                ratio(d.mean_b),
                "-" if d.delta is None else f"{d.delta:+.3f}{interval}",
                str(d.wins),
                str(d.losses),
                str(d.ties),
                f"{d.p_value:.3g}",
                "[bold]significant[/bold]" if d.significant else "no",
            )
        )
    title = f"{c.b.experiment_id} (B) against {c.a.experiment_id} (A): {escape(c.a.dataset)} v{c.a.dataset_version}"
    names = ("scorer", "mean A", "mean B", "Δ (95% CI)", "wins", "losses", "ties", "p", "significant")
    parts: list[Any] = [f"[bold]{title}[/bold]", columns(None, names, lines)]
    labels = [d.scorer for d in c.scorers]
    differing = [case for case in c.cases if _differs(case)]
    if not differing:
        parts.append("every case scored the same in both")
        return Group(*parts)
    cases = columns("Cases that differ", ("case", *labels), [])
    for case in differing:
        cells = [f"{ratio(case.a.get(k))} → {ratio(case.b.get(k))} {case.verdict.get(k, '-')}" for k in labels]
        cases.add_row(escape(c.case_ids.get(case.index, f"case-{case.index}")), *cells)
    parts.append(cases)
    return Group(*parts)
