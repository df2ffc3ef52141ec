"""The installed package: everything lives under `waypoint.`, so a user project shaped like
Temporal's samples (its own `workflows` and `activities` packages, a `worker.py`) imports its own
modules and Waypoint's side by side."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "worker.py", "waypoint", "workflows", "activities")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Waypoint's wheel, built from a copy of the sources (the checkout stays clean)."""
    import shutil

    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, src / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", out, src],
        check=True,
        timeout=300,
    )
    (found,) = out.glob("waypoint-*.whl")
    return found


def test_the_wheel_installs_nothing_but_waypoint(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {
        "waypoint",
        f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info",
    }
    for module in (
        "waypoint/workflows/agent_run.py",
        "waypoint/activities/model.py",
        "waypoint/app/http/ui/templates/run.html",
    ):
        assert module in names


def test_a_user_project_with_its_own_workflows_imports_both(wheel: Path, tmp_path: Path) -> None:
    """A fresh venv with the wheel (its dependencies borrowed from this one), and a project with its
    own `workflows` and `activities` packages: each import finds its own module."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--target", site, wheel],
        check=True,
        timeout=300,
    )
    # Dependencies from this environment, after the venv's own packages; its .pth files (this
    # checkout's editable install among them) are not read from a directory added this way.
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    project = tmp_path / "project"
    for package in ("workflows", "activities"):
        (project / package).mkdir(parents=True)
        (project / package / "__init__.py").write_text(f"OWNER = 'user {package}'\n")
    (project / "worker.py").write_text("OWNER = 'user worker'\n")
    (project / "check.py").write_text(
        "import json, activities, workflows, worker\n"
        "from waypoint.workflows.agent_run import AgentRunWorkflow\n"
        "from waypoint.activities.model import ModelActivities\n"
        "import waypoint.workflows.agent_run as run_module, waypoint.activities.model as model_module\n"
        "print(json.dumps({'owners': [workflows.OWNER, activities.OWNER, worker.OWNER],\n"
        "                  'waypoint': [run_module.__file__, model_module.__file__]}))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([python, "check.py"], cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["owners"] == ["user workflows", "user activities", "user worker"]
    assert all(Path(f).is_relative_to(site / "waypoint") for f in found["waypoint"]), found

    # Nothing of Waypoint answers to the bare names, from any folder.
    for name in ("workflows", "activities", "worker"):
        bare = subprocess.run([python, "-c", f"import {name}"], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert bare.returncode == 1 and "ModuleNotFoundError" in bare.stderr, (name, bare.stderr)


def test_nothing_imports_the_top_level_folders_by_their_bare_names() -> None:
    """In the checkout, `workflows/` and `activities/` are also importable by their bare names (the
    repository root is on the path in tests). Code that did so would get a second copy of every
    workflow and activity class, so everything imports them as `waypoint.workflows` and
    `waypoint.activities`."""
    bare = []
    for path in ROOT.glob("**/*.py"):
        if any(part in {".venv", ".git", "build", "node_modules"} for part in path.relative_to(ROOT).parts):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            bare += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in {"workflows", "activities"}]
    assert bare == []
