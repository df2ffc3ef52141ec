"""The tables `checkpoints.py` prints: its measures side by side, then the targets with pass or FAIL."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.table import Table

SYSTEMS = ("Waypoint", "LangGraph")


@dataclass
class Measured:
    """What one system did on one workload."""

    write_s: list[list[float]]  # per run, per step
    wall_s: float
    disk_bytes: int
    reads_s: dict[str, float] = field(default_factory=dict)
    history_peak: int = 0

    def window(self, last: bool, n: int) -> list[float]:
        return [s for run in self.write_s for s in (run[-n:] if last else run[:n])]

    @property
    def steps_per_s(self) -> float:
        return sum(len(r) for r in self.write_s) / self.wall_s


def p50(values: list[float]) -> float:
    return statistics.median(values)


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1] if len(values) > 1 else values[0]


def ms(seconds: float) -> str:
    value = seconds * 1000
    return f"{value:,.2f}" if value < 10 else f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def mib(n: int) -> str:
    return f"{n / 2**20:,.2f}" if n < 10 * 2**20 else f"{n / 2**20:,.0f}"


def measures_table(results: dict[tuple[str, str], Measured], steps: int, runs: int) -> Table:
    n, mid = min(100, steps // 2), steps // 2
    table = Table(title=f"Checkpoint stores on one Postgres: {steps} steps per run", title_justify="left")
    table.add_column("measure")
    keys = [(label, name) for label in ("W1", "W2", "W3") for name in SYSTEMS]
    for label, name in keys:
        table.add_column(f"{label}\n{name}", justify="right")

    def row(title: str, cell: Callable[[Measured], str], labels: tuple[str, ...] = ("W1", "W2", "W3")) -> None:
        table.add_row(title, *(cell(results[key]) if key[0] in labels else "-" for key in keys))

    def latency(stat: Callable[[list[float]], float], last: bool) -> Callable[[Measured], str]:
        return lambda m: ms(stat(m.window(last, n)))

    for last in (False, True):
        span = f"last {n}" if last else f"first {n}"
        for name, stat in (("p50", p50), ("p95", p95)):
            row(f"write {name} ms, {span} steps", latency(stat, last))
    table.add_row(
        f"throughput steps/s (W3: {runs} runs)", *(f"{results[key].steps_per_s:,.0f}" for key in keys), end_section=True
    )
    single = ("W1", "W2")
    row("latest state read ms", lambda m: ms(m.reads_s["latest"]), single)
    row(f"state at step {mid} ms", lambda m: ms(m.reads_s["at_step"]), single)
    row("history, first page of 50 ms", lambda m: ms(m.reads_s["page"]), single)
    row(f"history, all {steps} steps ms", lambda m: ms(m.reads_s["full"]), single)
    row("history, all: peak client MiB", lambda m: mib(m.history_peak), single)
    table.add_section()
    row("bytes on disk, MiB", lambda m: mib(m.disk_bytes))
    return table


def targets_table(results: dict[tuple[str, str], Measured], steps: int, runs: int) -> tuple[Table, int, int]:
    n = min(100, steps // 2)
    table = Table(title="Targets (Waypoint)", title_justify="left")
    for col in ("target", "Waypoint", "LangGraph, same ratio", "verdict"):
        table.add_column(col, justify="left" if col == "target" else "right")
    met = total = 0

    def verdict(title: str, ours: float, theirs: float | None, ok: bool) -> None:
        nonlocal met, total
        total, met = total + 1, met + ok
        table.add_row(
            title,
            f"{ours:,.3g}x",
            "-" if theirs is None else f"{theirs:,.3g}x",
            "[green]pass[/green]" if ok else "[bold red]FAIL[/bold red]",
        )

    def get(label: str, name: str) -> Measured:
        return results[label, name]

    for label in ("W1", "W2"):
        ours, theirs = get(label, "Waypoint"), get(label, "LangGraph")
        share = ours.disk_bytes / theirs.disk_bytes
        verdict(f"{label} bytes on disk: Waypoint <= 1/20 of LangGraph", share, None, share <= 1 / 20)
    for label in ("W1", "W2"):
        growth = {
            name: p50(get(label, name).window(True, n)) / p50(get(label, name).window(False, n)) for name in SYSTEMS
        }
        verdict(
            f"{label} write p50, last {n} <= 1.5x first {n}",
            growth["Waypoint"],
            growth["LangGraph"],
            growth["Waypoint"] <= 1.5,
        )
    for label in ("W1", "W2"):
        speedup = get(label, "LangGraph").reads_s["full"] / get(label, "Waypoint").reads_s["full"]
        verdict(f"{label} full history >= 10x faster than LangGraph", speedup, None, speedup >= 10)
    # Independent of state size: W2 stores far more state than W1 (see LangGraph's bytes), the
    # client's peak for the listing should not follow it.
    state_growth = get("W2", "LangGraph").disk_bytes / get("W1", "LangGraph").disk_bytes
    peaks = {name: get("W2", name).history_peak / get("W1", name).history_peak for name in SYSTEMS}
    verdict(
        f"full history peak memory W2/W1 <= 1.2 (state {state_growth:.1f}x larger)",
        peaks["Waypoint"],
        peaks["LangGraph"],
        peaks["Waypoint"] <= 1.2,
    )
    scaling = {name: get("W3", name).steps_per_s / get("W1", name).steps_per_s for name in SYSTEMS}
    verdict(
        f"{runs} concurrent runs >= 3x the throughput of 1",
        scaling["Waypoint"],
        scaling["LangGraph"],
        scaling["Waypoint"] >= 3,
    )
    return table, met, total
