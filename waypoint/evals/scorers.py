"""Scorers: built in, `@scorer` functions, and the LLM judge's prompt and verdict.

A scorer gets a case's run (its final output, its steps with their tool calls, what it used) and the
case, and gives a `Score`: a value from 0 to 1 and whether it passed (value >= the scorer's
`threshold`, 1 unless set; the judge's is 0.5). A scorer that has nothing to compare (`exact` on a
case without an expected output) skips the case: its value is None and it counts nowhere.

    @scorer
    def mentions_the_total(output, case) -> bool:
        return str(case.metadata["total"]) in (output or "")

    @scorer(name="brevity", threshold=0.5)
    def short_answers(output) -> float:
        return 1.0 if len(output or "") < 400 else 0.0

A function takes any of `output` (the final answer, text or None), `steps` (`EvalStep`s),
`case` (`EvalCase`) and `run` (`EvalRun`, all of it), by those names, and returns a bool, a number
from 0 to 1, or a `Score`. It may be async. Put it in a module of WAYPOINT_AGENTS: workers load
every module-level scorer there, and register its name, so `waypoint eval --scorer NAME` is checked
before anything runs. A scorer that raises marks its case errored with the message; the experiment
goes on.

Built-in arguments (`--scorer NAME:key=value,key=value`): every scorer takes `threshold` and
`label`; `exact`, `contains` and `regex` take `ignore_case`; `contains` takes `text`, `regex`
`pattern`; `json_schema` takes `schema` (a file on the CLI); `trajectory` takes `mode` (in_order,
any_order, subset) and `arguments` (compare arguments too: true/false); `numeric` takes `tolerance`
(absolute, default 1e-6) or `relative`; `cost` and `steps` take `max`; `judge` takes `rubric` (a
file on the CLI) and `model` (a model spec such as openai:gpt-4o-mini).
"""

from __future__ import annotations

import inspect
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

from waypoint.calls import CallLine, canonical_arguments
from waypoint.checks import NAME_MAX, check_json, check_name, check_text
from waypoint.errors import InvalidInput, UnknownScorer
from waypoint.evals.cases import EvalCase, EvalRun, EvalStep, ExpectedCall
from waypoint.evals.types import ScorerSpec
from waypoint.names import BuiltinScorer, RunStatus, TrajectoryMode

SCORERS_MAX = 20  # scorers of one experiment
JUDGE_THRESHOLD = 0.5
RUBRIC_MAX = 20_000  # characters: the rubric goes into every judge call
REASON_MAX = 500  # characters of a score's reason kept
PARAMETERS = ("output", "steps", "case", "run")


@dataclass(frozen=True)
class Score:
    """What a scorer gives one case: `value` from 0 to 1 (None: skipped), `passed` (None: decided by
    the threshold), and why."""

    value: float | None
    passed: bool | None = None
    reason: str = ""


class Scorer:
    """A Python scorer (made with `@scorer`): its name, threshold and function."""

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None, threshold: float = 1.0):
        self.fn = fn
        self.name = check_name("a scorer's name", name or fn.__name__)
        if self.name in set(BuiltinScorer):
            raise InvalidInput(
                f"scorer {self.name!r} has a built-in scorer's name: give it another with @scorer(name=)"
            )
        self.threshold = check_threshold(threshold)
        self.description = (inspect.getdoc(fn) or "").split("\n\n")[0]
        params = inspect.signature(fn).parameters
        unknown = [p for p in params if p not in PARAMETERS]
        if unknown:
            raise InvalidInput(
                f"scorer {self.name!r} takes {', '.join(unknown)}: a scorer's parameters are named "
                f"{', '.join(PARAMETERS)}"
            )
        self._params = list(params)

    async def __call__(self, run: EvalRun, case: EvalCase) -> Score:
        offered = {"output": run.output, "steps": run.steps, "case": case, "run": run}
        found = self.fn(**{p: offered[p] for p in self._params})
        if inspect.isawaitable(found):
            found = await found
        return as_score(found, self.name)


@overload
def scorer(fn: Callable[..., Any], /) -> Scorer: ...
@overload
def scorer(*, name: str | None = None, threshold: float = 1.0) -> Callable[[Callable[..., Any]], Scorer]: ...
def scorer(
    fn: Callable[..., Any] | None = None, /, *, name: str | None = None, threshold: float = 1.0
) -> Scorer | Callable[[Callable[..., Any]], Scorer]:
    """Make a function a scorer (see the module docstring)."""
    if fn is not None:
        return Scorer(fn)
    return lambda f: Scorer(f, name=name, threshold=threshold)


def as_score(found: Any, name: str) -> Score:
    if isinstance(found, Score):
        if found.value is not None and not _unit(found.value):
            raise ValueError(f"scorer {name!r} gave the value {found.value!r}: give a number from 0 to 1")
        return found
    if isinstance(found, bool):
        return Score(1.0 if found else 0.0)
    if isinstance(found, int | float) and _unit(found):
        return Score(float(found))
    raise ValueError(f"scorer {name!r} returned {found!r}: return a bool, a number from 0 to 1, or a Score"[:300])


def _unit(value: float) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and 0 <= value <= 1


def check_threshold(value: Any) -> float:
    number = _number(value, "threshold")
    if not 0 <= number <= 1:
        raise InvalidInput(f"threshold={value!r}: give a number from 0 to 1")
    return number


def _number(value: Any, key: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"{key}={value!r}: give a number") from None
    if isinstance(value, bool) or not math.isfinite(number):
        raise InvalidInput(f"{key}={value!r}: give a finite number")
    return number


def _flag(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("1", "true", "yes", "on"):
        return True
    if str(value).lower() in ("0", "false", "no", "off"):
        return False
    raise InvalidInput(f"{key}={value!r}: give true or false")


# --- parsing and checking what an experiment is scored by --------------------------------------

# Per built-in: the arguments it takes (beyond threshold and label), and the ones it needs.
BUILTIN_ARGS: dict[str, tuple[set[str], set[str]]] = {
    BuiltinScorer.EXACT: ({"ignore_case"}, set()),
    BuiltinScorer.CONTAINS: ({"ignore_case", "text"}, set()),
    BuiltinScorer.REGEX: ({"ignore_case", "pattern"}, set()),
    BuiltinScorer.JSON_SCHEMA: ({"schema"}, set()),
    BuiltinScorer.TRAJECTORY: ({"mode", "arguments"}, set()),
    BuiltinScorer.NUMERIC: ({"tolerance", "relative"}, set()),
    BuiltinScorer.COST: ({"max"}, {"max"}),
    BuiltinScorer.STEPS: ({"max"}, {"max"}),
    BuiltinScorer.JUDGE: ({"rubric", "model"}, {"rubric", "model"}),
}
FILE_ARGS = ("rubric", "schema")  # on the CLI these name a file, whose text is sent
DEFAULT_SCORERS = ("exact", "trajectory")


def parse_scorer(text: str, read_file: Callable[[str, str], Any] | None = None) -> ScorerSpec:
    """`NAME` or `NAME:key=value,key=value` -> a ScorerSpec. `read_file(key, path)` gives the value of
    a file argument (rubric, schema) from its path (the CLI's); without it the value is the text."""
    check_name("a scorer", text)
    name, _, rest = text.partition(":")
    name = name.strip()
    if not name:
        raise InvalidInput(f"scorer {text!r} has no name: write NAME or NAME:key=value,...")
    args: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))) if rest else ():
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise InvalidInput(
                f"cannot read {part!r} in scorer {text!r}: write key=value pairs after NAME:, "
                "e.g. exact:ignore_case=true"
            )
        key = key.strip()
        args[key] = read_file(key, value.strip()) if read_file is not None and key in FILE_ARGS else value.strip()
    label = args.pop("label", "")
    return ScorerSpec(name=name, args=args, label=str(label))


def check_scorers(specs: Sequence[ScorerSpec], custom: Mapping[str, str] | Sequence[str]) -> list[ScorerSpec]:
    """The experiment's scorers, each known (built in, or a name in `custom`, the workers' `@scorer`s)
    and with arguments it takes, each under a label of its own; arguments normalized (numbers as
    numbers, a regex compiled once to check it, a schema checked as a JSON Schema)."""
    if not specs:
        raise InvalidInput("no scorer: give at least one (--scorer exact, --scorer contains, ...)")
    if len(specs) > SCORERS_MAX:
        raise InvalidInput(f"{len(specs)} scorers: keep it to {SCORERS_MAX}")
    checked: list[ScorerSpec] = []
    labels: set[str] = set()
    for spec in specs:
        if not isinstance(spec, ScorerSpec):
            raise InvalidInput("a scorer is a ScorerSpec or a NAME[:key=value,...] text")
        name = check_name("a scorer", spec.name)
        args = dict(spec.args)
        check_json(f"scorer {name}'s arguments", args)
        extra = {"threshold"}
        if name in BUILTIN_ARGS:
            allowed, needed = BUILTIN_ARGS[name]
            missing = needed - set(args)
            if missing:
                raise InvalidInput(f"scorer {name} needs {', '.join(sorted(missing))}: e.g. {_example(name)}")
        elif name in custom:
            allowed = set()
        else:
            known = sorted({*BuiltinScorer, *custom})
            raise UnknownScorer(
                f"unknown scorer {name!r} (known: {', '.join(known)}); a scorer of your own is an @scorer "
                "function in a module of the worker's WAYPOINT_AGENTS"
            )
        unknown = set(args) - allowed - extra
        if unknown:
            takes = ", ".join(sorted(allowed | extra))
            raise InvalidInput(f"scorer {name} takes no {', '.join(sorted(unknown))}: it takes {takes}")
        args = _normalized(name, args)
        label = check_text("a scorer's label", spec.label, high=NAME_MAX) or name
        if label in labels:
            label = f"{label}#{sum(1 for x in labels if x == label or x.startswith(label + '#')) + 1}"
        labels.add(label)
        checked.append(ScorerSpec(name=name, args=args, label=label))
    return checked


def _example(name: str) -> str:
    examples: dict[str, str] = {
        BuiltinScorer.COST: "cost:max=0.05",
        BuiltinScorer.STEPS: "steps:max=8",
        BuiltinScorer.JUDGE: "judge:rubric=rubric.md,model=openai:gpt-4o-mini",
    }
    return examples.get(name, name)


def _normalized(name: str, args: dict[str, Any]) -> dict[str, Any]:
    out = dict(args)
    if "threshold" in out:
        out["threshold"] = check_threshold(out["threshold"])
    for key in ("ignore_case", "arguments"):
        if key in out:
            out[key] = _flag(out[key], key)
    for key in ("tolerance", "relative", "max"):
        if key in out:
            out[key] = _number(out[key], key)
            if out[key] < 0:
                raise InvalidInput(f"{key}={args[key]!r}: give a number of 0 or more")
    if "mode" in out:
        if out["mode"] not in set(TrajectoryMode):
            raise InvalidInput(f"mode={out['mode']!r}: use one of {', '.join(TrajectoryMode)}")
    if "pattern" in out:
        _regex(str(out["pattern"]), bool(out.get("ignore_case")))
    if "schema" in out:
        schema = out["schema"]
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError:
                raise InvalidInput("the json_schema scorer's schema is not JSON: give a JSON Schema") from None
        _check_schema(schema)
        out["schema"] = schema
    if name == BuiltinScorer.JUDGE:
        rubric = check_text("the judge's rubric", out["rubric"], high=RUBRIC_MAX)
        if not isinstance(rubric, str) or not rubric.strip():
            raise InvalidInput("the judge's rubric is empty: say what a good answer does")
        from waypoint.models.spec import parse_model_spec

        spec = parse_model_spec(check_name("the judge's model", str(out["model"])))
        if spec.provider == "scripted":
            raise InvalidInput("the judge needs a real model: model=openai:<name>, anthropic:<name> or google:<name>")
    return out


def _regex(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise InvalidInput(f"the regex {pattern!r} does not compile ({exc}): fix the pattern") from None


def _check_schema(schema: Any) -> None:
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise InvalidInput(f"the json_schema scorer's schema is not a JSON Schema: {exc.message}") from None


# --- the built-ins ---------------------------------------------------------------------------


def threshold_of(spec: ScorerSpec, custom: Scorer | None = None) -> float:
    if "threshold" in spec.args:
        return float(spec.args["threshold"])
    if custom is not None:
        return custom.threshold
    return JUDGE_THRESHOLD if spec.name == BuiltinScorer.JUDGE else 1.0


def decided(score: Score, threshold: float) -> Score:
    """The score with `passed` set (by the threshold unless the scorer said) and its reason cut short."""
    passed = score.passed
    if passed is None and score.value is not None:
        passed = score.value >= threshold
    return Score(score.value, passed, score.reason[:REASON_MAX])


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def _fold(text: str, ignore_case: bool) -> str:
    return text.casefold() if ignore_case else text


def score_builtin(spec: ScorerSpec, run: EvalRun, case: EvalCase) -> Score:
    """A built-in scorer's score of the case's run (its judge verdict comes separately: `judge_score`)."""
    args, expected = spec.args, case.expected_output
    output = run.output or ""
    ignore_case = bool(args.get("ignore_case"))
    name = spec.name
    if name == BuiltinScorer.EXACT:
        if expected is None:
            return Score(None, reason="the case has no expected output")
        if not isinstance(expected, str) and run.output_json is not None:
            same = run.output_json == expected
        else:
            same = _fold(output.strip(), ignore_case) == _fold(_text(expected).strip(), ignore_case)
        return Score(1.0 if same else 0.0, reason="" if same else f"expected {_text(expected)[:200]!r}")
    if name == BuiltinScorer.CONTAINS:
        wanted = args.get("text", expected)
        if wanted is None:
            return Score(None, reason="the case has no expected output (or give text=)")
        found = _fold(_text(wanted), ignore_case) in _fold(output, ignore_case)
        return Score(1.0 if found else 0.0, reason="" if found else f"{_text(wanted)[:200]!r} is not in the answer")
    if name == BuiltinScorer.REGEX:
        pattern = args.get("pattern", expected)
        if pattern is None:
            return Score(None, reason="the case has no expected output (or give pattern=)")
        found = _regex(_text(pattern), ignore_case).search(output) is not None
        return Score(1.0 if found else 0.0, reason="" if found else f"no match for {_text(pattern)[:200]!r}")
    if name == BuiltinScorer.JSON_SCHEMA:
        return _json_schema(args.get("schema", case.metadata.get("schema")), run)
    if name == BuiltinScorer.TRAJECTORY:
        if case.expected_tools is None:
            return Score(None, reason="the case has no expected tools")
        mode = TrajectoryMode(args.get("mode", TrajectoryMode.IN_ORDER))
        return trajectory_score(case.expected_tools, run.tool_calls, mode, bool(args.get("arguments")))
    if name == BuiltinScorer.NUMERIC:
        return _numeric(args, expected, output)
    if name == BuiltinScorer.COST:
        ok = run.cost_usd <= float(args["max"])
        return Score(1.0 if ok else 0.0, reason=f"cost {run.cost_usd:.6f} USD, at most {args['max']}")
    if name == BuiltinScorer.STEPS:
        count = len(run.steps)
        ok = count <= float(args["max"])
        return Score(1.0 if ok else 0.0, reason=f"{count} step(s), at most {args['max']:g}")
    raise InvalidInput(f"{name} is not scored here")  # the judge: judge_score


def _json_schema(schema: Any, run: EvalRun) -> Score:
    import jsonschema

    if schema is None:
        return Score(None, reason="no schema: give schema= or the case's metadata.schema")
    value = run.output_json
    if value is None:
        try:
            value = json.loads(run.output or "")
        except ValueError:
            return Score(0.0, reason="the answer is not JSON")
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.path))
    if errors:
        return Score(0.0, reason=f"{len(errors)} schema error(s), first: {errors[0].message}")
    return Score(1.0)


NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*(?:\.\d+)?(?:[eE][-+]?\d+)?")


def number_in(text: str) -> float | None:
    """The answer as a number: the whole text if it is one, else the last number in it."""
    try:
        return float(text.strip())
    except ValueError:
        pass
    found = NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def _numeric(args: Mapping[str, Any], expected: Any, output: str) -> Score:
    if expected is None:
        return Score(None, reason="the case has no expected output")
    plain = isinstance(expected, int | float) and not isinstance(expected, bool)
    want = expected if plain else number_in(_text(expected))
    if want is None:
        return Score(None, reason=f"the expected output {_text(expected)[:100]!r} is not a number")
    got = number_in(output)
    if got is None:
        return Score(0.0, reason="the answer has no number")
    if "relative" in args:
        allowed = abs(float(want)) * float(args["relative"])
    else:
        allowed = float(args.get("tolerance", 1e-6))
    ok = abs(got - float(want)) <= allowed
    return Score(1.0 if ok else 0.0, reason=f"got {got:g}, expected {float(want):g} within {allowed:g}")


def trajectory_score(
    expected: Sequence[ExpectedCall], actual: Sequence[CallLine], mode: TrajectoryMode, with_arguments: bool
) -> Score:
    """Compare tool calls: names, and arguments where the expected call gives them (or, with
    `with_arguments`, always)."""

    def key(name: str, arguments: str | None) -> tuple[str, str | None]:
        return (name, arguments)

    def want(c: ExpectedCall) -> tuple[str, str | None]:
        if c.arguments is None:
            return key(c.name, None)
        return key(c.name, canonical_arguments(json.dumps(c.arguments)))

    wanted = [want(c) for c in expected]
    use_args = with_arguments or any(w[1] is not None for w in wanted)
    got = [key(c.name, c.arguments if use_args else None) for c in actual]

    def matches(w: tuple[str, str | None], g: tuple[str, str | None]) -> bool:
        return w[0] == g[0] and (w[1] is None or w[1] == g[1])

    if mode == TrajectoryMode.IN_ORDER:
        ok = len(wanted) == len(got) and all(matches(w, g) for w, g in zip(wanted, got, strict=True))
    else:
        pool = list(got)
        missing = []
        for w in wanted:
            hit = next((i for i, g in enumerate(pool) if matches(w, g)), None)
            if hit is None:
                missing.append(w[0])
            else:
                pool.pop(hit)
        ok = not missing and (mode == TrajectoryMode.SUBSET or not pool)
    if ok:
        return Score(1.0)
    names = [w[0] for w in wanted]
    return Score(0.0, reason=f"expected {names} ({mode}), got {[g[0] for g in got]}"[:REASON_MAX])


# --- the judge ---------------------------------------------------------------------------------

JUDGE_SYSTEM = (
    "You grade an AI agent's answer to a task by a rubric. Read the rubric, the task, the expected "
    "output if there is one, and the answer. Reply with one JSON object and nothing else: "
    '{"score": <a number from 0 to 1>, "reason": "<one sentence>"}.'
)


def judge_messages(rubric: str, case: EvalCase, run: EvalRun) -> list[dict[str, Any]]:
    parts = [f"Rubric:\n{rubric}", f"Task:\n{case.task}"]
    if case.expected_output is not None:
        parts.append(f"Expected output:\n{_text(case.expected_output)}")
    parts.append(f"Answer:\n{run.output or ''}")
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def parse_verdict(text: str | None) -> Score:
    """The judge's answer as a Score; a ValueError naming what came back when it is not a verdict."""
    body = (text or "").strip()
    start, end = body.find("{"), body.rfind("}")
    try:
        data = json.loads(body[start : end + 1]) if start >= 0 else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or not _unit(data.get("score", -1)):
        raise ValueError(f'the judge did not answer {{"score": 0..1, "reason": ...}}: it said {body[:200]!r}')
    return Score(float(data["score"]), reason=str(data.get("reason") or "")[:REASON_MAX])


def no_answer(run: EvalRun) -> Score | None:
    """What the judge gives a run with nothing to grade, without a call."""
    if run.output:
        return None
    how = "" if run.status == RunStatus.COMPLETED else f" (it ended {run.status})"
    return Score(0.0, reason=f"the run gave no answer{how}")


async def score_case(
    spec: ScorerSpec, run: EvalRun, case: EvalCase, custom: Mapping[str, Scorer], judged: Mapping[str, Score]
) -> Score:
    """One scorer's score of one case's run, its pass decided. `judged`: the recorded verdicts by
    judge label. A scorer that raises raises here (the caller marks the case errored)."""
    found = custom.get(spec.name)
    if spec.name == BuiltinScorer.JUDGE:
        verdict = judged.get(spec.key)
        if verdict is None:
            raise ValueError(f"no recorded verdict of judge {spec.key!r}")
        score = verdict
    elif found is not None:
        score = await found(run, case)
    else:
        score = score_builtin(spec, run, case)
    return decided(score, threshold_of(spec, found))


__all__ = ["EvalRun", "EvalStep", "Score", "Scorer", "scorer"]
