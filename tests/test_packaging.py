"""A built wheel carries its templates: installed anywhere, the bot still renders a scorecard.

The wheel is built from a copy of pyproject.toml, README.md and evalbot/ (the rest of the project
does not change what evalbot ships, and building in a copy leaves the work tree alone); it is
unzipped and imported from there, torch-free, in a fresh interpreter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
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
        archive.extractall(tmp_path / "installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALBOT_")}
    env["PYTHONPATH"] = str(tmp_path / "installed")
    done = subprocess.run([sys.executable, "-c", RENDER, str(tmp_path / "installed")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("<!-- dspark-evalbot:scorecard v=2 head=" + "a" * 40)
    assert "### DSpark eval — eval-dspark:XL" in done.stdout and "profile | `gpu`" in done.stdout
    assert "torch imported: False" in done.stdout
