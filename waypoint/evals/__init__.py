"""Evaluations: datasets of cases, scorers, and experiments that run every case as a durable run.

    from waypoint.evals import scorer

    @scorer
    def cites_a_note(output, steps, case) -> bool:
        return "note" in (output or "")

A dataset is a versioned set of cases in Postgres (`waypoint.store.evals`), made from recorded
runs or a JSONL file (`waypoint.evals.cases`). An experiment (`workflows/experiments.py`) runs
each case as an ordinary agent run, a child workflow of the experiment, and scores it
(`waypoint.evals.scorers`: built in, `@scorer` functions in the agent modules, an LLM judge whose
verdicts are recorded); `waypoint.evals.stats` sums the scores up and compares two experiments.
Standard library only at this level: workflow code imports `waypoint.evals.types`.
"""
