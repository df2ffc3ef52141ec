"""The README and the documentation pages as the tests read them: their text, a page's section, and
the `waypoint` commands they show (in shell blocks and in inline code), resolved against the CLI."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"


def page(name: str) -> str:
    """A documentation page's markdown, by its path under docs/."""
    return (DOCS / name).read_text()


def pages() -> dict[str, str]:
    """Every page a reader reads, README.md first (docs/hooks/ is code, not pages)."""
    found = {"README.md": README}
    for path in sorted(DOCS.rglob("*.md")):
        if "hooks" not in path.relative_to(DOCS).parts:
            found[f"docs/{path.relative_to(DOCS).as_posix()}"] = path.read_text()
    return found


def reference_hook() -> Any:
    """docs/hooks/reference.py, the mkdocs hook that generates the reference pages, as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_reference", DOCS / "hooks" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def everything() -> str:
    return "\n".join(pages().values())


def first_block(text: str, after: str, lang: str = "bash") -> str:
    """The first fenced block of a language after a phrase."""
    return text.split(after, 1)[1].split(f"```{lang}\n", 1)[1].split("```", 1)[0]


# --- the commands the pages show --------------------------------------------------------------------


@dataclass(frozen=True)
class Shown:
    where: str  # the page
    text: str  # the command as the page shows it
    words: list[str]  # its words and options, after `waypoint`


def shell_commands(text: str) -> Iterator[str]:
    """Every `waypoint ...` command of the shell blocks: continuation lines joined, comments dropped,
    split at `;`, `&&`, `|`, `$(`, environment assignments before it left out."""
    for block in re.findall(r"```(?:bash|sh|console)\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.commenters = "#"
            lexer.whitespace_split = True
            try:
                tokens = list(lexer)
            except ValueError:  # an unbalanced quote: not a line a user types
                continue
            segment: list[str] = []
            for token in [*tokens, ";"]:
                if token and set(token) <= set(";&|()$"):
                    while segment and re.fullmatch(r"\w+=.*", segment[0]):
                        segment.pop(0)
                    if segment and segment[0] == "waypoint":
                        yield " ".join(shlex.quote(t) for t in segment)
                    segment = []
                else:
                    segment.append(token)


def inline_commands(text: str) -> Iterator[str]:
    """Every `` `waypoint ...` `` of the prose and tables (outside fenced blocks), usage notation and all:
    `[--limit N]`, `(--every 1h \\| --cron EXPR)`, `list\\|show`."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for span in re.findall(r"``?(waypoint [^`]+)``?", prose):
        yield span.replace("\\|", "|")


def shown_commands() -> Iterator[Shown]:
    for where, text in pages().items():
        for command in shell_commands(text):
            yield Shown(where, command, shlex.split(command)[1:])
        for command in inline_commands(text):
            yield Shown(where, command, re.split(r"[\s\[\]()]+", command)[1:])


def option_names(command: Any) -> set[str]:
    names = {"--help"}
    for param in command.params:
        if param.param_type_name == "option":
            names.update(param.opts)
            names.update(param.secondary_opts)
    return names


def problems_of(shown: Shown, root: Any) -> list[str]:
    """What does not exist of a shown command: an unknown command, or an option its command lacks."""
    words = [w for w in shown.words if w and w not in ("|", "...")]
    command: Any = root
    path = ["waypoint"]
    candidates = [root]
    alternatives_of: Any = None
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-"):
            if command is root:  # a global option, before the command
                name = word.split("=", 1)[0]
                if name not in option_names(root):
                    return [f"`waypoint` has no option {name}"]
                takes_value = any(p.opts and name in p.opts and not p.is_flag for p in root.params)
                i += 2 if takes_value and "=" not in word else 1
                continue
            break
        if not hasattr(command, "commands"):
            break
        names = word.split("|")
        missing = [n for n in names if n not in command.commands]
        default = getattr(command, "default_command", None)
        if missing and default and len(names) == 1:  # `waypoint eval DATASET`: the group's default command
            command = command.commands[default]
            candidates = [command]
            break
        if not re.fullmatch(r"[a-z][a-z-]*", names[0]):
            break  # a placeholder (COMMAND, RUN): not a command name
        if missing:
            return [f"`{' '.join(path)}` has no command {missing[0]!r}"]
        if len(names) > 1:
            alternatives_of = command
        candidates = [command.commands[n] for n in names]
        command = candidates[0]
        path.append(word)
        i += 1
    if alternatives_of is not None:  # `dataset list|show NAME|export NAME [--version V]`
        candidates = list(alternatives_of.commands.values())
    allowed = set().union(*(option_names(c) for c in candidates))
    options = [w.split("=", 1)[0] for w in words[i:] if re.fullmatch(r"--?[a-zA-Z][\w-]*(=.*)?", w)]
    return [f"`{' '.join(path)}` has no option {o}" for o in options if o not in allowed]
