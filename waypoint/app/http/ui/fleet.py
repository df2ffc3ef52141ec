"""The viewer's fleet page, GET /ui/fleet?period=24h: what `Waypoint.fleet_stats` counts, as charts
drawn here in plain SVG (no script, nothing to download), each with its numbers as a table behind a
<details> toggle for a screen reader or a copy; the runs it names link to their pages.

The charts' geometry is computed here and the template only places it: a bar chart is a list of
bars with x, y, width, height, a CSS class and a title (its value, shown on hover).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from waypoint.app.http.ui.render import Api, Tenant, own_form, render
from waypoint.checks import duration_text
from waypoint.client import FleetBucket, ModelKeyStats
from waypoint.names import FleetPeriod, RunStatus

router = APIRouter(prefix="/ui", include_in_schema=False, dependencies=[Depends(own_form)])

WIDTH, HEIGHT = 720, 160  # the plot area of a time chart (the SVG scales to its container)
LEFT, BOTTOM, TOP = 44, 22, 10  # room for the axis labels
STATUS_ORDER = [s.value for s in RunStatus]


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str


@dataclass(frozen=True)
class Tick:
    x: float
    y: float
    text: str
    anchor: str = "middle"  # an x tick's text-anchor: the last one ends at its tick, inside the chart


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    bars: list[Bar]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    top: float  # the value at the top of the plot
    grid: bool = True  # a line across at each y tick
    x_grid: tuple[float, float] | None = None  # a line up at each x tick, from y to y (a bar chart's value axis)


def nice_top(value: float) -> float:
    """A round number at or above `value` for the top of an axis (1, 2, 5 times a power of ten)."""
    if value <= 0:
        return 1.0
    step = 1.0
    while step * 10 <= value:
        step *= 10
    while step > value:
        step /= 10
    for m in (1, 2, 5, 10):
        if m * step >= value:
            return m * step
    return 10 * step


def label_of(at: datetime, bucket_seconds: int) -> str:
    return at.strftime("%m-%d") if bucket_seconds >= 86_400 else at.strftime("%H:%M")


def time_chart(buckets: list[FleetBucket], bucket_seconds: int, stacks: list[list[tuple[str, float, str]]]) -> Chart:
    """Stacked bars over time: `stacks[i]` is bucket i's segments (css class, value, title)."""
    top = nice_top(max((sum(v for _, v, _ in s) for s in stacks), default=0))
    slot = WIDTH / max(1, len(buckets))
    bars: list[Bar] = []
    for i, segments in enumerate(stacks):
        y = float(TOP + HEIGHT)
        for css, value, title in segments:
            if value <= 0:
                continue
            height = HEIGHT * value / top
            y -= height
            bars.append(Bar(LEFT + i * slot + slot * 0.1, y, slot * 0.8, height, css, title))
    every = max(1, len(buckets) // 6)
    x_ticks = [
        Tick(LEFT + i * slot + slot / 2, TOP + HEIGHT + 15, label_of(b.at, bucket_seconds))
        for i, b in enumerate(buckets)
        if i % every == 0
    ]
    y_ticks = [Tick(LEFT - 6, TOP + HEIGHT - HEIGHT * f + 4, f"{top * f:g}") for f in (0, 0.5, 1)]
    return Chart(LEFT + WIDTH, TOP + HEIGHT + BOTTOM, bars, x_ticks, y_ticks, top)


def runs_chart(buckets: list[FleetBucket], bucket_seconds: int) -> Chart:
    stacks = [
        [
            (f"s-{status}", float(b.runs.get(status, 0)), f"{b.runs.get(status, 0)} {status.replace('_', ' ')}")
            for status in STATUS_ORDER
        ]
        for b in buckets
    ]
    return time_chart(buckets, bucket_seconds, stacks)


def steps_chart(buckets: list[FleetBucket], bucket_seconds: int) -> Chart:
    stacks = [[("steps", b.steps_per_minute, f"{b.steps_per_minute:g} steps a minute")] for b in buckets]
    return time_chart(buckets, bucket_seconds, stacks)


KEY_ROW = 26  # height of one model key's row in its chart
KEY_LEFT = 230  # room for the key's name


def keys_chart(keys: list[ModelKeyStats]) -> Chart:
    """Horizontal bars per model key: calls answered, then failed attempts (throttled ones apart), on
    a value axis of calls along the bottom (0, half, the top)."""
    top = nice_top(max((k.calls + k.failed for k in keys), default=0))
    span = WIDTH - KEY_LEFT + LEFT
    scale = span / top
    bars: list[Bar] = []
    y_ticks: list[Tick] = []
    for i, k in enumerate(keys):
        y = i * KEY_ROW + 4
        x = float(KEY_LEFT)
        for css, value, what in (
            ("calls", k.calls, "answered"),
            ("throttled", k.throttled, "429/529"),
            ("failed", k.failed - k.throttled, "other failures"),
        ):
            if value > 0:
                bars.append(Bar(x, y, value * scale, KEY_ROW - 8, css, f"{k.key}: {value} {what}"))
                x += value * scale
        y_ticks.append(Tick(KEY_LEFT - 8, y + KEY_ROW / 2, k.key if len(k.key) <= 34 else k.key[:33] + "…"))
    plot = max(1, len(keys)) * KEY_ROW + 4
    x_ticks = [Tick(KEY_LEFT + span * f, plot + 15, f"{top * f:g}") for f in (0, 0.5)]
    x_ticks.append(Tick(KEY_LEFT + span, plot + 15, f"{top:g} calls", "end"))
    return Chart(LEFT + WIDTH, plot + BOTTOM, bars, x_ticks, y_ticks, top, grid=False, x_grid=(0, plot))


@router.get("/fleet")
async def fleet_page(request: Request, api: Api, tenant: Tenant, period: str = FleetPeriod.DAY) -> Response:
    """The fleet over a period: runs by status over time, steps a minute, model calls and 429s per model
    key, runs waiting, cost per day and agent, the slowest and most expensive runs."""
    stats = await api.wp.fleet_stats(period, tenant_id=tenant)
    shown = [s for s in STATUS_ORDER if any(b.runs.get(s) for b in stats.buckets)]
    return render(
        request,
        "fleet.html",
        stats=stats,
        periods=[p.value for p in FleetPeriod],
        statuses=shown,
        runs_chart=runs_chart(stats.buckets, stats.bucket_seconds),
        steps_chart=steps_chart(stats.buckets, stats.bucket_seconds),
        keys_chart=keys_chart(stats.model_keys),
        label=lambda at: label_of(at, stats.bucket_seconds),
        bucket=duration_text(stats.bucket_seconds),
    )
