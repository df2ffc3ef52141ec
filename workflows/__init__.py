"""Deterministic orchestration only: no IO, no clocks, no randomness."""
