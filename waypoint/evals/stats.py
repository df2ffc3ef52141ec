"""An experiment's numbers: per scorer the mean with a 95% confidence interval and the pass rate,
and two experiments compared case by case.

The interval fits what is measured, so it never leaves the range the scores can take: where every
score is 0 or 1 (a pass/fail scorer) it is Wilson's score interval for a proportion; otherwise a
percentile bootstrap of the mean (2,000 resamples, a fixed seed, so a report is the same each time
it is made), which lies within the lowest and highest score seen. `Interval.method` names which. A
scorer's skipped cases count nowhere. Two experiments are compared on the cases both scored: each
case's mean over its repetitions, a win where B's is higher, a loss where lower, a tie where equal.
A difference is significant when the two-sided sign test over wins and losses gives p < 0.05 (exact
binomial; ties left out), which assumes nothing about how scores are distributed; the mean
difference's bootstrap interval is shown beside it.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

SIGNIFICANCE = 0.05

# The normal's two-sided 95% quantile, for Wilson's interval.
Z95 = 1.959964
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261204


class IntervalMethod(StrEnum):
    WILSON = "wilson"
    BOOTSTRAP = "bootstrap"


@dataclass(frozen=True)
class Interval:
    mean: float | None
    low: float | None
    high: float | None
    n: int
    method: IntervalMethod | None = None


def wilson(successes: int, n: int) -> tuple[float, float]:
    """Wilson's 95% score interval of a proportion: within [0, 1], sound for small n and for 0 or n."""
    p = successes / n
    z2 = Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap(values: Sequence[float]) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of the means of resamples of `values` (seeded)."""
    rng = random.Random(BOOTSTRAP_SEED)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(BOOTSTRAP_RESAMPLES))
    return means[int(0.025 * BOOTSTRAP_RESAMPLES)], means[int(0.975 * BOOTSTRAP_RESAMPLES) - 1]


def mean_interval(values: Sequence[float]) -> Interval:
    """The mean of `values` and its 95% interval (none for fewer than two values): Wilson's for
    values that are all 0 or 1, a bootstrap otherwise."""
    n = len(values)
    if n == 0:
        return Interval(None, None, None, 0)
    mean = sum(values) / n
    if n == 1:
        return Interval(mean, None, None, 1)
    if all(v in (0, 1) for v in values):
        low, high = wilson(round(sum(values)), n)
        return Interval(mean, low, high, n, IntervalMethod.WILSON)
    low, high = bootstrap(values)
    return Interval(mean, low, high, n, IntervalMethod.BOOTSTRAP)


def difference_interval(differences: Sequence[float]) -> Interval:
    """The mean of paired differences and its bootstrap 95% interval (within the lowest and highest
    difference seen; none for fewer than two)."""
    n = len(differences)
    if n < 2:
        return Interval(sum(differences) / n if n else None, None, None, n)
    low, high = bootstrap(differences)
    return Interval(sum(differences) / n, low, high, n, IntervalMethod.BOOTSTRAP)


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test p value of `wins` against `losses` (1.0 when there are none)."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, math.ceil(q / 100 * len(ordered)) - 1)
    return ordered[rank]


@dataclass(frozen=True)
class ScorerSummary:
    """One scorer over an experiment's scored cases."""

    scorer: str
    n: int  # cases it scored (not skipped)
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    passed: int
    pass_rate: float | None
    ci_method: IntervalMethod | None = None  # how the interval was made (see the module's docstring)


@dataclass(frozen=True)
class CaseScores:
    """What the summary reads of one case's run: its scores and passes by label, what it used."""

    index: int
    repetition: int
    errored: bool
    values: Mapping[str, float | None] = field(default_factory=dict)
    passed: Mapping[str, bool | None] = field(default_factory=dict)
    cost_usd: float = 0.0
    tokens: int = 0
    latency_ms: int | None = None


@dataclass(frozen=True)
class Summary:
    """An experiment's table: per scorer, then what its runs used."""

    scorers: list[ScorerSummary]
    cases: int  # runs of cases that ended
    scored: int
    errored: int
    cost_usd: float
    cost_per_case_usd: float | None
    tokens_per_case: float | None
    latency_p50_ms: float | None
    latency_p95_ms: float | None


def summarize(labels: Sequence[str], results: Sequence[CaseScores]) -> Summary:
    scored = [r for r in results if not r.errored]
    rows = []
    for label in labels:
        values = [v for r in scored if (v := r.values.get(label)) is not None]
        passes = [p for r in scored if r.values.get(label) is not None and (p := r.passed.get(label)) is not None]
        interval = mean_interval(values)
        rows.append(
            ScorerSummary(
                scorer=label,
                n=interval.n,
                mean=interval.mean,
                ci_low=interval.low,
                ci_high=interval.high,
                passed=sum(passes),
                pass_rate=sum(passes) / len(passes) if passes else None,
                ci_method=interval.method,
            )
        )
    latencies = [float(r.latency_ms) for r in results if r.latency_ms is not None]
    cost = sum(r.cost_usd for r in results)
    return Summary(
        scorers=rows,
        cases=len(results),
        scored=len(scored),
        errored=len(results) - len(scored),
        cost_usd=round(cost, 6),
        cost_per_case_usd=round(cost / len(results), 6) if results else None,
        tokens_per_case=sum(r.tokens for r in results) / len(results) if results else None,
        latency_p50_ms=percentile(latencies, 50),
        latency_p95_ms=percentile(latencies, 95),
    )


@dataclass(frozen=True)
class ScorerDelta:
    """One scorer, B against A, over the cases both scored."""

    scorer: str
    n: int
    mean_a: float | None
    mean_b: float | None
    delta: float | None
    delta_low: float | None
    delta_high: float | None
    wins: int  # cases where B scored higher
    losses: int
    ties: int
    p_value: float
    significant: bool


@dataclass(frozen=True)
class CaseDelta:
    """One case in both experiments: each side's mean score per scorer (over its repetitions)."""

    index: int
    a: Mapping[str, float | None]
    b: Mapping[str, float | None]
    verdict: dict[str, str]  # per scorer: "win", "loss", "tie" (B against A), or "-" (not in both)


def per_case(results: Iterable[CaseScores]) -> dict[int, dict[str, float]]:
    """Each case's mean score per scorer over its scored repetitions."""
    sums: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        if r.errored:
            continue
        for label, value in r.values.items():
            if value is not None:
                sums[r.index][label].append(value)
    return {i: {k: sum(v) / len(v) for k, v in by.items()} for i, by in sums.items()}


def compare(
    labels: Sequence[str], a: Sequence[CaseScores], b: Sequence[CaseScores]
) -> tuple[list[ScorerDelta], list[CaseDelta]]:
    """Per scorer (of `labels`, those both experiments have) B against A, and the per-case verdicts."""
    side_a, side_b = per_case(a), per_case(b)
    deltas = []
    cases: dict[int, CaseDelta] = {}
    for index in sorted(set(side_a) | set(side_b)):
        cases[index] = CaseDelta(index, dict(side_a.get(index, {})), dict(side_b.get(index, {})), {})
    for label in labels:
        pairs = [
            (side_a[i][label], side_b[i][label])
            for i in sorted(set(side_a) & set(side_b))
            if label in side_a[i] and label in side_b[i]
        ]
        wins = sum(y > x for x, y in pairs)
        losses = sum(y < x for x, y in pairs)
        differences = difference_interval([y - x for x, y in pairs])
        p = sign_test(wins, losses)
        deltas.append(
            ScorerDelta(
                scorer=label,
                n=len(pairs),
                mean_a=sum(x for x, _ in pairs) / len(pairs) if pairs else None,
                mean_b=sum(y for _, y in pairs) / len(pairs) if pairs else None,
                delta=differences.mean,
                delta_low=differences.low,
                delta_high=differences.high,
                wins=wins,
                losses=losses,
                ties=len(pairs) - wins - losses,
                p_value=p,
                significant=p < SIGNIFICANCE,
            )
        )
        for case in cases.values():
            x, y = case.a.get(label), case.b.get(label)
            verdict = "-" if x is None or y is None else "win" if y > x else "loss" if y < x else "tie"
            case.verdict[label] = verdict
    return deltas, list(cases.values())
