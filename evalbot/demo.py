"""`evalbot demo` and the example PRs under examples/prs/: NOT WRITTEN YET — they need the real engine.

What it is meant to do (for whoever fills it in): build a throwaway copy of this repository with
main's real engine and harness, apply each example PR from examples/prs/ as a local branch
(`LocalForge.open_pull`), score every one with `pipeline.score_refs` on the cpu profile, publish
to the local forge (`pipeline.publish`) and print `evalbot status`, so a newcomer sees a REJECT
(lossy), a none, a tier and a "not evaluated: harness changed" on real measurements.

The command is deliberately not registered in `evalbot.cli` until this works: a demo that
pretends to measure would teach the wrong thing. To register it, add in `cli.build_parser`:

    p = sub.add_parser("demo", help="score the example PRs on a scratch copy of this repo")
    p.set_defaults(func=lambda args: run_demo(Path(args.repo or ".")))
"""

from __future__ import annotations

from pathlib import Path


def run_demo(repo: Path) -> int:
    """Score the example PRs end to end on the real engine; returns the CLI exit status."""
    raise NotImplementedError("evalbot demo needs the real engine and example PRs (see evalbot/demo.py)")
