"""Compaction's pure rules: what is pinned, what is pruned and why, the extractive summary."""

from __future__ import annotations

from waypoint import compaction as logic
from waypoint.tokens import text_tokens


def test_pins_and_pruning_rules():
    ev = [
        logic.LogEvent(
            2,
            1,
            "model_response",
            {
                "content": None,
                "tool_calls": [
                    {"id": "a", "name": "fetch", "arguments": '{"u": 1}'},
                    {"id": "b", "name": "pin_decision", "arguments": '{"text": "Ship on Friday."}'},
                ],
            },
        ),
        logic.LogEvent(3, 1, "tool_result", {"call_id": "a", "name": "fetch", "output": "v1"}),
        logic.LogEvent(4, 2, "decision", {"call_id": "c", "decision": "denied", "reason": "too risky"}),
        logic.LogEvent(
            5,
            2,
            "model_response",
            {
                "content": None,
                "tool_calls": [
                    {"id": "c", "name": "fetch", "arguments": '{ "u" : 1 }'},  # same arguments, other spacing
                    {"id": "d", "name": "grep", "arguments": '{"p": "x"}'},
                    {"id": "e", "name": "grep", "arguments": '{"p": "y"}'},
                    {"id": "f", "name": "cat", "arguments": "{}"},
                ],
            },
        ),
        logic.LogEvent(6, 2, "tool_result", {"call_id": "c", "name": "fetch", "output": "v2"}),
        logic.LogEvent(7, 2, "tool_result", {"call_id": "d", "name": "grep", "output": "same"}),
        logic.LogEvent(8, 2, "tool_result", {"call_id": "e", "name": "grep", "output": "same"}),
        logic.LogEvent(9, 2, "tool_result", {"call_id": "f", "name": "cat", "output": "word " * 400}),
    ]
    pins = logic.find_pins(ev)
    assert [(p.text, p.step, p.source) for p in pins] == [
        ("Ship on Friday.", 1, "pin_decision"),
        ('a human denied fetch({ "u" : 1 }): too risky', 2, "decision"),
    ]
    pruned = {p.seq: p for p in logic.plan_pruning(ev, oversize_tokens=100)}
    assert {s: p.reason for s, p in pruned.items()} == {3: "superseded", 8: "duplicate", 9: "oversize"}
    assert (
        pruned[3].replacement
        == "[output of fetch at step 1, event #3: superseded by the same call at step 2, event #6; it began: v1]"
    )
    assert pruned[8].replacement.startswith(
        "[output of grep at step 2, event #8: identical to the output at step 2, event #7"
    )
    assert pruned[9].replacement.startswith("[output of cat at step 2, event #9, 500 tokens; summary: word word")


def test_extractive_summary_keeps_facts_and_fits_its_budget():
    ev = [
        logic.LogEvent(
            1, 1, "tool_result", {"call_id": "x", "name": "search", "output": "The code of vault 7 is 4821."}
        )
    ]
    ev += [
        logic.LogEvent(i, i, "tool_result", {"call_id": f"x{i}", "name": "t", "output": "nothing " * 50})
        for i in range(2, 300)
    ]
    summary = logic.extractive_summary(ev, [], budget_tokens=400)
    assert "The code of vault 7 is 4821." in summary.text
    assert {"step": 1, "fact": "The code of vault 7 is 4821."} in summary.key_facts
    assert text_tokens(summary.text) <= 450
    assert "earlier steps omitted" in summary.text
