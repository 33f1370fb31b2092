"""A built wheel carries its templates: installed anywhere, the bot still renders a scorecard.

The wheel is built from a copy of pyproject.toml, README.md and evalbot/ (the rest of the project
does not change what evalbot ships, and building in a copy leaves the work tree alone); it is
unzipped and imported from there, torch-free, in a fresh interpreter.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

RENDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    import evalbot
    assert Path(evalbot.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()), evalbot.__file__
    from evalbot.decide.outcome import ScoreOutcome
    from evalbot.decide.verdict import decide
    from evalbot.report import render
    from evalbot.report.scorecard import render_scorecard
    from evalbot.testing import builders as b
    assert Path(render.TEMPLATES_DIR).resolve().is_relative_to(Path(sys.argv[1]).resolve())
    m = b.measurements([1.2, 1.21, 1.19])
    outcome = ScoreOutcome(
        repo="r", base_ref="main", head_ref="pr", base_sha="b" * 40, head_sha="a" * 40, harness_ref="main",
        harness_sha="b" * 40, profile="gpu", rounds=3, box="box", verdict=decide(m, b.settings()),
        measurements=m, started_at="2026-01-01T00:00:00Z",
    )
    print(render_scorecard(outcome))
    print("torch imported:", "torch" in sys.modules)
""")


def test_a_built_wheel_renders_a_scorecard(tmp_path):
    pytest.importorskip("setuptools", reason="building a wheel needs setuptools (the build backend)")
    source = tmp_path / "dspark-evalbot"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "evalbot", source / "evalbot", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-c", f"from setuptools import build_meta; print(build_meta.build_wheel({str(dist)!r}))"],
        cwd=source, capture_output=True, text=True, timeout=120,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert "evalbot/report/templates/scorecard.md.j2" in names
        for page in ("dashboard_overview.html.j2", "receipt_show.txt.j2", "comment_ok_to_test.md.j2"):
            assert f"evalbot/report/templates/{page}" in names  # the dashboard and the CLI render from the wheel too
        archive.extractall(tmp_path / "installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALBOT_")}
    env["PYTHONPATH"] = str(tmp_path / "installed")
    done = subprocess.run([sys.executable, "-c", RENDER, str(tmp_path / "installed")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("<!-- dspark-evalbot:scorecard v=2 head=" + "a" * 40)
    assert "### DSpark eval — eval-dspark:XL" in done.stdout and "profile | `gpu`" in done.stdout
    assert "torch imported: False" in done.stdout


# -- what the package declares against what it imports ---------------------------------------------------------
FIRST_PARTY = {"evalbot", "engine", "kernels", "harness"}


def _requirement_names(specs: list[str]) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0].strip().lower().replace("_", "-") for spec in specs}


def _imported_distributions(root: Path) -> dict[str, set[str]]:
    """distribution -> modules of `root` that import it (function-level imports included)."""
    from importlib.metadata import packages_distributions

    owners = packages_distributions()
    found: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        if "fake_repo" in path.parts:  # the fake harness and engine the tests run, not the bot
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in FIRST_PARTY:
                    continue
                for dist in owners.get(top, [top]):
                    found.setdefault(dist.lower().replace("_", "-"), set()).add(str(path.relative_to(root.parent)))
    return found


def test_every_runtime_import_is_declared_and_test_only_packages_are_not_runtime():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = _requirement_names(project["dependencies"])
    test_only = _requirement_names(project["optional-dependencies"]["test"])
    imported = _imported_distributions(ROOT / "evalbot")
    undeclared = {dist: sorted(where)[:3] for dist, where in imported.items() if dist not in runtime}
    assert not undeclared, f"imported by evalbot/ but not in [project] dependencies: {undeclared}"
    assert "requests" in imported and "requests" in runtime  # the GitHub adapter's errors and timeouts
    assert "httpx" in test_only and "httpx" not in runtime and "httpx" not in imported  # the tests' client only
    for name in ("markdown-it-py", "prometheus-client", "structlog", "pygithub", "pydantic-settings"):
        assert name in runtime and name in imported, name


def test_torch_has_no_upper_cap():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (torch,) = [spec for spec in project["dependencies"] if spec.startswith("torch")]
    assert "<" not in torch and ">=" in torch  # a box with a newer release keeps it (tests/gpu says whether it works)


def test_no_other_distribution_ships_a_top_level_package_of_ours():
    """This project's top-level packages (pyproject's packages.find) must be the only ones of those names
    in the environment. Hugging Face's `kernels` distribution (required by transformers 5.25) is one:
    transformers then imports this repo's kernels/ in its place and every parity test fails with an
    ImportError far from the cause (CI, 2026-12-03). pyproject caps transformers below it."""
    import importlib.metadata as md

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    ours = {pattern.rstrip("*") for pattern in find["include"]}
    assert "kernels" in ours
    clashes = {top: sorted(set(dists)) for top, dists in md.packages_distributions().items()
               if top in ours and {d.lower().replace("_", "-") for d in dists} - {"dspark-evalbot"}}
    assert not clashes, f"installed distributions that ship a package named like one of ours: {clashes}"
