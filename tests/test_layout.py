"""The tree shows the flow: no module of evalbot/ imports from a later stage, and none grows past ~350
lines (a module that does is mixing concerns). Stages, earliest first; data flows one way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

EVALBOT = Path(__file__).resolve().parents[1] / "evalbot"
STAGES = [
    ("evalbot.errors",),
    ("evalbot.settings",),  # the one settings tree and the tier vocabulary
    ("evalbot.decide",),  # pure: records in, verdict out
    ("evalbot.measure",),  # git, checkout + overlay, harness subprocesses
    ("evalbot.history",),  # every scoring and calibration, in a small stable schema (store + adapter)
    ("evalbot.report",),  # every rendered text, receipts
    ("evalbot.forge",),  # the Protocol and its adapters
    ("evalbot.pipeline", "evalbot.examples"),  # one score, end to end
    ("evalbot.bot",),  # webhook, queue, worker
    ("evalbot.demo", "evalbot.cli", "evalbot.receipts_cli", "evalbot.status", "evalbot.__main__"),  # entry points
    ("evalbot.testing",),  # fixtures for the tests
]
MAX_LINES = 350


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(EVALBOT.rglob("*.py")):
        if "fake_repo" in path.parts:  # the fake harness and engine the tests run, not the bot
            continue
        parts = path.relative_to(EVALBOT.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if module != "evalbot":  # the package itself is empty
            out.append((module, path))
    return out


def _stage(module: str) -> int:
    for rank, prefixes in enumerate(STAGES):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    raise AssertionError(f"{module} belongs to no stage: add it to STAGES in tests/test_layout.py")


def _imports(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):  # function-level (late) imports count too
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.add(name)
            found |= {f"{name}.{a.name}" for a in node.names}  # `from evalbot import pipeline`
    return {n for n in found if n == "evalbot" or n.startswith("evalbot.")}


MODULES = _modules()


def test_every_module_has_a_stage():
    for module, _ in MODULES:
        _stage(module)


@pytest.mark.parametrize("module, path", MODULES, ids=[m for m, _ in MODULES])
def test_no_import_from_a_later_stage(module, path):
    known = {m for m, _ in MODULES}
    rank = _stage(module)
    later = sorted(
        name for name in _imports(module, path)
        if name in known and name != "evalbot" and _stage(name) > rank
    )
    assert not later, f"{module} (stage {STAGES[rank][0]}) imports from a later stage: {', '.join(later)}"


def test_the_decision_core_is_pure():
    io = {"subprocess", "socket", "sqlite3", "requests", "httpx", "github", "huey", "redis", "starlette"}
    for module, path in MODULES:
        if module.startswith("evalbot.decide"):
            tree = ast.parse(path.read_text())
            names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            names |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
            assert not names & io, f"{module} imports {sorted(names & io)}"


@pytest.mark.parametrize("module, path", MODULES, ids=[m for m, _ in MODULES])
def test_no_module_is_a_grab_bag(module, path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines; split it along its concerns"
