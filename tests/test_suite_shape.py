"""The test suite's own shape, read from its source (no servers): test modules share helpers and
fixtures through helper modules (tests/helpers.py, tests/browser.py, tests/processes.py, ...) and
tests/conftest.py, never by importing another test module, and a helper is defined once."""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).parent
MODULES = sorted(TESTS.glob("*.py"))  # test modules and the helper modules they import
# Helpers that were once copied from module to module; each is defined in one module only.
DEFINED_ONCE = {"human"}


@functools.cache  # each file is read once for every check
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _is_test_module(module: str) -> bool:
    return module.rsplit(".", 1)[-1].startswith("test_")


def imports_of_test_modules(path: Path) -> list[str]:
    """`line: import` for every import of a test module in `path`, at module level or in a function."""
    found = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name.startswith("tests.test_")]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0 and module != "tests" and not module.startswith("tests."):
                continue
            package = module in ("", "tests")  # `from tests import test_x`, `from . import test_x`: modules
            if _is_test_module(module) or (package and any(_is_test_module(a.name) for a in node.names)):
                imported = ", ".join(a.name for a in node.names)
                found.append(f"{node.lineno}: from {'.' * node.level}{module} import {imported}")
    return found


def test_no_module_imports_a_test_module() -> None:
    assert len([p for p in MODULES if p.name.startswith("test_")]) > 50  # the glob found the suite
    offenders = {p.name: found for p in MODULES if (found := imports_of_test_modules(p))}
    assert offenders == {}, "move what they share to a helper module or tests/conftest.py"


def test_the_import_check_sees_every_form(tmp_path: Path) -> None:
    """The check above fails on each way a test module can be imported, and only on those."""
    source = tmp_path / "test_sample.py"
    source.write_text(
        "import tests.test_viewer\n"
        "from tests.test_viewer import sign_in\n"
        "from tests import a11y, test_workflow_logic\n"
        "from .test_replay import RECORD\n"
        "from tests.helpers import eventually, test_data\n"  # a helper module: fine
        "from . import conftest\n"
        "def f():\n"
        "    from tests.test_mcp_server import call\n"
    )
    assert [line.split(":")[0] for line in imports_of_test_modules(source)] == ["1", "2", "3", "4", "8"]


def test_shared_helpers_are_defined_once() -> None:
    defined: dict[str, list[str]] = defaultdict(list)
    for path in MODULES:
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in DEFINED_ONCE:
                defined[node.name].append(path.name)
    assert {name: modules for name, modules in defined.items() if len(modules) > 1} == {}
    assert defined.keys() == DEFINED_ONCE  # each still exists, so the check still means something
