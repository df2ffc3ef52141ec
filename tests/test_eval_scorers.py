"""Scorers, cases and the statistics of experiments, as pure functions: what each built-in gives,
how arguments are checked, how a JSONL file is read, and the numbers the tables print."""

from __future__ import annotations

import json
import math

import pytest

from waypoint.calls import CallLine
from waypoint.errors import InvalidInput, UnknownScorer
from waypoint.evals.cases import EvalCase, EvalRun, EvalStep, ExpectedCall, read_cases
from waypoint.evals.scorers import (
    Score,
    Scorer,
    check_scorers,
    parse_scorer,
    parse_verdict,
    score_builtin,
    score_case,
    scorer,
)
from waypoint.evals.stats import CaseScores, compare, mean_interval, sign_test, summarize
from waypoint.evals.types import ScorerSpec


def run_of(output: str | None, calls: list[tuple[str, dict]] = (), **extra) -> EvalRun:  # type: ignore[assignment]
    lines = [CallLine(name, json.dumps(args, sort_keys=True, separators=(",", ":"))) for name, args in calls]
    return EvalRun(run_id="r", status="completed", output=output, steps=[EvalStep(1, None, lines)], **extra)


def case_of(expected=None, tools=None, **extra) -> EvalCase:
    return EvalCase(index=0, task="t", expected_output=expected, expected_tools=tools, **extra)


def one(text: str, custom=()) -> ScorerSpec:
    return check_scorers([parse_scorer(text)], list(custom))[0]


def test_text_scorers_compare_the_answer_with_the_expected_output():
    assert score_builtin(one("exact"), run_of(" 42 "), case_of("42")).value == 1.0
    assert score_builtin(one("exact"), run_of("Forty"), case_of("forty")).value == 0.0
    assert score_builtin(one("exact:ignore_case=true"), run_of("Forty"), case_of("forty")).value == 1.0
    assert score_builtin(one("exact"), run_of("x", output_json={"a": 1}), case_of({"a": 1})).value == 1.0
    assert score_builtin(one("contains"), run_of("the total is 42 words"), case_of("42")).value == 1.0
    assert score_builtin(one("contains:text=words"), run_of("42 words"), case_of(None)).value == 1.0
    assert score_builtin(one(r"regex:pattern=\d+ words"), run_of("it has 42 words"), case_of()).value == 1.0
    assert score_builtin(one("regex"), run_of("no number"), case_of(r"\d+")).value == 0.0
    skipped = score_builtin(one("exact"), run_of("x"), case_of(None))
    assert skipped.value is None and "no expected output" in skipped.reason


def test_trajectory_modes_and_arguments():
    calls = [("list_files", {"dir": "notes"}), ("read_file", {"path": "a"}), ("write_file", {"path": "r"})]
    names = [ExpectedCall("list_files"), ExpectedCall("read_file"), ExpectedCall("write_file")]
    assert score_builtin(one("trajectory"), run_of("x", calls), case_of(tools=names)).value == 1.0
    shuffled = [names[2], names[0], names[1]]
    assert score_builtin(one("trajectory"), run_of("x", calls), case_of(tools=shuffled)).value == 0.0
    assert score_builtin(one("trajectory:mode=any_order"), run_of("x", calls), case_of(tools=shuffled)).value == 1.0
    assert score_builtin(one("trajectory:mode=subset"), run_of("x", calls), case_of(tools=names[:2])).value == 1.0
    assert score_builtin(one("trajectory:mode=any_order"), run_of("x", calls), case_of(tools=names[:2])).value == 0.0
    with_args = [ExpectedCall("list_files", {"dir": "notes"}), ExpectedCall("read_file", {"path": "b"})]
    missed = score_builtin(one("trajectory:mode=subset"), run_of("x", calls), case_of(tools=with_args))
    assert missed.value == 0.0 and "read_file" in missed.reason


def test_numeric_cost_steps_and_json_schema():
    assert score_builtin(one("numeric:tolerance=0.5"), run_of("about 41.7 words"), case_of(42)).value == 1.0
    assert score_builtin(one("numeric"), run_of("1,234"), case_of("1234")).value == 1.0
    assert score_builtin(one("numeric:relative=0.01"), run_of("989"), case_of(1000)).value == 0.0
    assert score_builtin(one("numeric"), run_of("none"), case_of(3)).reason == "the answer has no number"
    assert score_builtin(one("cost:max=0.01"), run_of("x", cost_usd=0.02), case_of()).value == 0.0
    assert score_builtin(one("steps:max=1"), run_of("x"), case_of()).value == 1.0
    schema = '{"required": ["total"]}'  # a value holds no comma in NAME:k=v,... (the CLI reads a file)
    assert score_builtin(one(f"json_schema:schema={schema}"), run_of('{"total": 3}'), case_of()).value == 1.0
    bad = score_builtin(one(f"json_schema:schema={schema}"), run_of('{"sum": 3}'), case_of())
    assert bad.value == 0.0 and "total" in bad.reason
    by_case = score_builtin(one("json_schema"), run_of("[]"), case_of(metadata={"schema": {"type": "array"}}))
    assert by_case.value == 1.0


async def test_a_python_scorer_gets_what_it_names_and_its_threshold_decides():
    @scorer(name="long", threshold=0.5)
    async def long_enough(output, case) -> float:
        return min(1.0, len(output) / len(case.task) / 10)

    spec = one("long", ["long"])
    got = await score_case(spec, run_of("abcdef"), case_of(), {"long": long_enough}, {})
    assert (got.value, got.passed) == (0.6, True)
    with pytest.raises(InvalidInput, match="parameters are named output, steps, case, run"):
        Scorer(lambda answer: True, name="bad")
    with pytest.raises(InvalidInput, match="built-in scorer's name"):
        Scorer(lambda output: True, name="exact")

    @scorer
    def nonsense(output) -> str:
        return "yes"

    with pytest.raises(ValueError, match="return a bool, a number from 0 to 1, or a Score"):
        await score_case(one("nonsense", ["nonsense"]), run_of("x"), case_of(), {"nonsense": nonsense}, {})


def test_scorer_specs_are_checked_before_anything_runs():
    with pytest.raises(UnknownScorer, match="unknown scorer 'exactly'.*exact"):
        one("exactly")
    with pytest.raises(InvalidInput, match="takes no mode"):
        one("exact:mode=in_order")
    with pytest.raises(InvalidInput, match="needs max"):
        one("cost")
    with pytest.raises(InvalidInput, match="does not compile"):
        one("regex:pattern=(")
    with pytest.raises(InvalidInput, match="threshold"):
        one("exact:threshold=2")
    with pytest.raises(InvalidInput, match="in_order, any_order, subset"):
        one("trajectory:mode=sideways")
    with pytest.raises(InvalidInput, match="needs a real model"):
        one("judge:rubric=be kind,model=scripted")
    with pytest.raises(InvalidInput, match="not a JSON Schema"):
        one('json_schema:schema={"type": 3}')
    with pytest.raises(InvalidInput, match="write key=value"):
        parse_scorer("exact:ignore_case")
    twice = check_scorers([parse_scorer("exact"), parse_scorer("exact:ignore_case=true")], [])
    assert [s.key for s in twice] == ["exact", "exact#2"]
    judge = parse_scorer("judge:rubric=r.md,model=openai:gpt-4o-mini", lambda key, path: f"text of {path}")
    assert judge.args == {"rubric": "text of r.md", "model": "openai:gpt-4o-mini"}


def test_the_judge_verdict_is_read_or_refused():
    assert parse_verdict('Sure! {"score": 0.8, "reason": "close"}') == Score(0.8, reason="close")
    for said in ("I like it", '{"score": 7}', '{"reason": "no score"}', None):
        with pytest.raises(ValueError, match="did not answer"):
            parse_verdict(said)


def test_reading_cases_names_the_line_and_the_fix():
    cases = read_cases(
        ['{"task": "a", "expected_tools": ["x", {"name": "y", "arguments": {"k": 1}}]}', "", '{"task": "b", "id": 7}'],
        "cases.jsonl",
    )
    assert [(c.case_id, c.index) for c in cases] == [("case-0", 0), ("7", 1)]
    assert cases[0].expected_tools == [ExpectedCall("x"), ExpectedCall("y", {"k": 1})]
    for lines, message in [
        ([], "has no cases"),
        (['{"expected_output": 1}'], 'line 1: the case has no task: give each case a "task"'),
        (["{not json"], "line 1 is not JSON"),
        (['{"task": "a", "extra": 1}'], "unknown key"),
        (['{"task": "a", "id": "x"}', '{"task": "b", "id": "x"}'], "line 2: the id 'x' is also the case on line 1"),
        (['{"task": "a", "expected_tools": "x"}'], "expected_tools must be a list"),
    ]:
        with pytest.raises(InvalidInput, match=message):
            read_cases(lines, "cases.jsonl")


def test_the_interval_and_the_sign_test():
    interval = mean_interval([1.0, 0.0, 1.0, 1.0])
    assert interval.mean == 0.75 and interval.n == 4 and interval.method == "wilson"
    # Wilson's score interval of 3 in 4
    assert math.isclose(interval.low or 0, 0.3006, abs_tol=1e-3) and math.isclose(
        interval.high or 0, 0.9544, abs_tol=1e-3
    )
    # Two cases scored 1 and 0: Student's t gave [-5.853, 6.853]; a proportion's interval stays in [0, 1].
    two = mean_interval([1.0, 0.0])
    assert two.low is not None and two.high is not None and 0 <= two.low < 0.5 < two.high <= 1
    assert mean_interval([1.0, 1.0]).high == 1.0 and mean_interval([0.0, 0.0]).low == 0.0
    # Scores between 0 and 1: a seeded bootstrap, within the lowest and highest score, the same each time.
    graded = mean_interval([0.2, 0.4, 0.9, 0.5])
    assert graded.method == "bootstrap" and graded.low is not None and graded.high is not None
    assert 0.2 <= graded.low < 0.5 < graded.high <= 0.9 and mean_interval([0.2, 0.4, 0.9, 0.5]) == graded
    assert mean_interval([0.5]).low is None and mean_interval([]).mean is None
    assert sign_test(0, 0) == 1.0
    assert math.isclose(sign_test(10, 0), 2 / 1024)
    assert math.isclose(sign_test(3, 2), 1.0)


def test_summary_and_compare_count_cases_not_attempts():
    def result(index, value, repetition=0, errored=False):
        return CaseScores(index, repetition, errored, {"exact": value}, {"exact": value == 1.0}, 0.01, 100, 1000)

    a = [result(i, 0.0) for i in range(8)] + [result(8, 1.0), result(9, None, errored=True)]
    b = [result(i, 1.0) for i in range(8)] + [result(8, 1.0), result(8, 0.0, repetition=1), result(9, 1.0)]
    summary = summarize(["exact"], a)
    assert (summary.cases, summary.scored, summary.errored) == (10, 9, 1)
    assert summary.scorers[0].pass_rate == pytest.approx(1 / 9)
    deltas, cases = compare(["exact"], a, b)
    delta = deltas[0]
    # case 8: A 1.0, B the mean of 1.0 and 0.0 = 0.5 (a loss); case 9 errored in A: not compared
    assert (delta.wins, delta.losses, delta.ties, delta.n) == (8, 1, 0, 9)
    assert delta.significant and delta.p_value < 0.05
    assert {c.index: c.verdict["exact"] for c in cases}[8] == "loss"
    assert {c.index: c.verdict["exact"] for c in cases}[9] == "-"
