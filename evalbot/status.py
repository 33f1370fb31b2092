"""`evalbot status` and `evalbot pr open|list`: the local forge (PRs, labels, checks, scorecards,
receipts) and the box's noise floors, as tables."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from evalbot.decide.noise import noise_path, read_noise_file
from evalbot.forge.local import LocalForge
from evalbot.measure import gitops
from evalbot.report.scorecard import SCORECARD_MARKER_PREFIX

EXIT_OK = 0


def _repo(args: argparse.Namespace) -> Path:
    return gitops.repo_root(Path(args.repo or ".").resolve())


def _stdout() -> Console:
    # Tables piped to a file or a test get room instead of being squeezed to 80 columns.
    return Console(width=None if sys.stdout.isatty() else 240)


def cmd_status(args: argparse.Namespace) -> int:
    repo = _repo(args)
    forge = LocalForge(repo)
    console = _stdout()
    overview = forge.overview(SCORECARD_MARKER_PREFIX)
    table = Table(title=f"local PRs in {repo}")
    for col in ("#", "title", "head → base", "head", "state", "labels", "check", "scorecard", "receipts"):
        table.add_column(col)
    for ov in overview:
        p = ov.pull
        check = f"{ov.check_status}/{ov.check_conclusion}: {ov.check_title}" if ov.check_status else "—"
        table.add_row(
            str(p.number), p.title, f"{p.head_ref} → {p.base_ref}", p.head_sha[:12], p.state,
            ", ".join(p.labels) or "—", check, ov.scorecard_updated_at if ov.has_scorecard else "—", str(ov.receipts),
        )
    if overview:
        console.print(table)
    else:
        console.print(f"no local PRs in {repo} yet: `evalbot pr open --head BRANCH`")
    floors = read_noise_file(noise_path(forge.state_dir))
    noise = Table(title="noise floors (evalbot calibrate)")
    for col in ("box", "profile", "engine", "DSpark", "AR", "AR cell", "guard generation", "guard prefill", "campaigns",
                "rounds", "measured"):
        noise.add_column(col)
    for f in sorted(floors.latest(), key=lambda f: (f.box, f.profile, f.measured_at)):
        noise.add_row(
            f.box, f.profile, f.engine[:12], f"±{f.dspark_decode:.2%}", f"±{f.ar_decode:.2%}", f"±{f.ar_cell:.2%}",
            f"±{f.guard_decode:.2%}",
            f"±{f.guard_prefill:.2%}", str(f.campaigns), str(f.rounds), f.measured_at,
        )
    if floors.floors:
        console.print(noise)
    else:
        console.print("no noise floor measured yet: run `evalbot calibrate`")
    merges = forge.merges()
    if merges:
        console.print(f"{len(merges)} merge(s); last: #{merges[-1]['number']} as {merges[-1]['merge_sha'][:12]}")
    return EXIT_OK


def cmd_pr_open(args: argparse.Namespace) -> int:
    forge = LocalForge(_repo(args))
    pull = forge.open_pull(args.head, args.base, args.title or "")
    print(f"opened local PR #{pull.number}: {pull.head_ref} ({pull.head_sha[:12]}) → {pull.base_ref}")
    print(f"score it with: evalbot score --pr {pull.number}")
    return EXIT_OK


def cmd_pr_list(args: argparse.Namespace) -> int:
    forge = LocalForge(_repo(args))
    pulls = forge.list_pulls(None if args.all else "open")
    if not pulls:
        print("no local PRs" if args.all else "no open local PRs")
        return EXIT_OK
    table = Table()
    for col in ("#", "title", "head → base", "head", "state", "labels"):
        table.add_column(col)
    for p in pulls:
        table.add_row(str(p.number), p.title, f"{p.head_ref} → {p.base_ref}", p.head_sha[:12], p.state,
                      ", ".join(p.labels) or "—")
    _stdout().print(table)
    return EXIT_OK
