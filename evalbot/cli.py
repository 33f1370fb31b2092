"""`evalbot`: score refs or local PRs, calibrate the box, manage keys and receipts, show the local forge.

Exit status: 0 scored (any tier, "none" included) or command succeeded; 1 REJECT; 2 a user
error (one line `error: ...` on stderr, never a traceback); 3 not evaluated (the PR changes the
harness); 4 infrastructure error (a harness run crashed or timed out; not a verdict).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from evalbot import pipeline
from evalbot.decide.outcome import ScoreOutcome
from evalbot.demo import run_demo
from evalbot.errors import EvalbotError
from evalbot.forge.base import CHECK_NAME
from evalbot.forge.local import LocalForge
from evalbot.history.adapter import calibration_entry, record_scoring
from evalbot.history.store import SqliteHistory, local_history, recorded
from evalbot.measure import gitops
from evalbot.measure.device import profile_for
from evalbot.measure.hardening import make_undumpable
from evalbot.measure.progress import RichProgress
from evalbot.report.render import printable
from evalbot.report.scorecard import render_calibration
from evalbot.settings import Settings, load_settings
from evalbot.receipts_cli import cmd_keygen, cmd_receipt_show, cmd_receipt_verify
from evalbot.status import cmd_pr_list, cmd_pr_open, cmd_status

EXIT_OK, EXIT_REJECT, EXIT_USAGE, EXIT_NOT_EVALUATED, EXIT_INFRA = 0, 1, 2, 3, 4
# Commands that live in their own modules with their own parsers (docs/deploy.md); imported only
# when used, so scoring never needs the web stack.
DELEGATED = {
    "serve": ("evalbot.bot.webhook.server", "receive GitHub webhooks and queue scoring work (docs/deploy.md)"),
    "worker": ("evalbot.bot.worker.main", "score queued pull requests, one at a time per box (docs/deploy.md)"),
}
STATUS_EXIT = {"scored": EXIT_OK, "rejected": EXIT_REJECT, "not_evaluated": EXIT_NOT_EVALUATED, "infra_error": EXIT_INFRA}


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage problem as one `error: ...` line."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {message} (see `{self.prog} --help`)\n")


def _repo(args: argparse.Namespace) -> Path:
    return gitops.repo_root(Path(args.repo or ".").resolve())


def _settings(args: argparse.Namespace, repo: Path) -> Settings:
    settings = load_settings(repo, Path(args.config) if getattr(args, "config", None) else None)
    if getattr(args, "no_sandbox", False):
        settings = settings.model_copy(update={"sandbox": settings.sandbox.model_copy(update={"enabled": False})})
    return settings


def _history(repo: Path, settings: Settings) -> SqliteHistory:
    return local_history(pipeline.state_dir_for(repo), settings.history_db)  # what `evalbot dashboard` shows


# ---------------------------------------------------------------------------------------------
# Commands


def cmd_score(args: argparse.Namespace) -> int:
    repo = _repo(args)
    settings = _settings(args, repo)
    forge: LocalForge | None = None
    check_id = None
    if args.pr is not None:
        if args.base or args.head:
            raise EvalbotError("give either --pr or --base/--head, not both")
        forge = LocalForge(repo)
        pull = forge.get_pull(args.pr)
        if pull.state != "open":
            raise EvalbotError(f"local PR #{args.pr} is {pull.state}")
        base, head = pull.base_ref, pull.head_sha
        check_id = forge.start_check(head, CHECK_NAME, f"Scoring `{head[:12]}` against `{base}`…")
    else:
        if not (args.base and args.head):
            raise EvalbotError("--base and --head are required (or --pr N for a local PR)")
        base, head = args.base, args.head
    profile = profile_for(settings, args.profile)
    with RichProgress(enabled=not args.no_progress) as progress:
        outcome = pipeline.score_refs(
            repo, base, head, profile=profile, rounds=args.rounds, budget_s=args.budget, settings=settings,
            pr_number=args.pr, harness_ref=args.harness_ref, progress=progress,
            calibrate_first=not args.no_calibrate, rescore=args.rescore,
        )
    published = None
    if forge is not None and args.pr is not None:
        published = pipeline.publish(outcome, forge, args.pr, settings, check_id=check_id)
    record_scoring(_history(repo, settings), outcome, repo=str(repo), receipt_ref=published.receipt_ref if published else "")
    _print_outcome(outcome, args.json, published)
    return STATUS_EXIT[outcome.verdict.status]


def _print_outcome(outcome: ScoreOutcome, as_json: bool, published: pipeline.PublishResult | None) -> None:
    if as_json:
        doc = outcome.summary_json()
        if published is not None:
            doc["published"] = {"pr": outcome.pr_number, "ok": published.published, "reason": published.reason,
                                "receipt_ref": published.receipt_ref}
        print(json.dumps(doc, indent=2))
        return
    sys.stdout.write(printable(outcome.scorecard))
    if outcome.receipt:
        print(f"\nreceipt: {outcome.receipt.path}")
    if published is not None:
        if published.published:
            print(f"published to local PR #{outcome.pr_number}: {', '.join(published.labels) or 'no labels'}")
        else:
            print(printable(f"not published: {published.reason}"))


def cmd_calibrate(args: argparse.Namespace) -> int:
    repo = _repo(args)
    settings = _settings(args, repo)
    profile = profile_for(settings, args.profile)
    with RichProgress(enabled=not args.no_progress) as progress:
        floor, path = pipeline.calibrate(
            repo, args.base, profile=profile, rounds=args.rounds, budget_s=args.budget, settings=settings,
            progress=progress,
        )
    recorded(_history(repo, settings), calibration_entry(floor, repo=str(repo)))
    sys.stdout.write(render_calibration(floor, path, settings.templates_dir))
    return EXIT_OK


def cmd_dashboard(args: argparse.Namespace) -> int:
    from evalbot.bot.dashboard import serve_dashboard  # the web stack, only when asked for

    repo = _repo(args)
    settings = _settings(args, repo)
    return serve_dashboard(_history(repo, settings), host=args.host, port=args.port, templates=settings.templates_dir)


# ---------------------------------------------------------------------------------------------
# Parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="evalbot",
        description="DSpark EvalBot: scores changes to the DSpark engine against main, with main's harness.",
        epilog="Exit status: 0 scored, 1 REJECT, 2 error, 3 not evaluated (harness changed), 4 infrastructure error.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def repo_opts(p: argparse.ArgumentParser, config: bool = True) -> None:
        p.add_argument("--repo", metavar="PATH", help="the git repository (default: the current directory)")
        if config:
            p.add_argument("--config", metavar="FILE", help="settings file (TOML or JSON; default .evalbot/config.toml)")

    def measure_opts(p: argparse.ArgumentParser, rounds_help: str, budget_help: str) -> None:
        """What a measurement (score, calibrate) takes: profile, rounds, budget, progress, sandbox."""
        p.add_argument("--profile", choices=["cpu", "gpu"], help="harness profile (default: the `profile` setting, else gpu when CUDA is available, else cpu)")
        p.add_argument("--rounds", type=int, metavar="N", help=rounds_help)
        p.add_argument("--budget", type=float, metavar="SECONDS", help=budget_help)
        p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
        p.add_argument("--no-sandbox", action="store_true",
                       help="run PR code without the bubblewrap sandbox (development only; the scorecard says so)")

    p = sub.add_parser(
        "score", help="score a head ref against a base ref (or a local PR)",
        description=(
            "Measure the head merged into the base tip against the base tip, both with the base tip's harness "
            "(HARNESS_PATHS), in long-lived sandboxed harness servers timed by the bot, round after round until "
            "the verdict is decided or the profile's budget is spent; print the scorecard (or --json). Writes a "
            "receipt under .evalbot/receipts/. A box, profile and engine version with no noise floor is calibrated first."
        ),
    )
    repo_opts(p)
    p.add_argument("--base", metavar="REF", help="the reference, normally main (its tip, or origin/<base>, provides the harness)")
    p.add_argument("--head", metavar="REF", help="the change to score")
    p.add_argument("--pr", type=int, metavar="N", help="score local PR N (see `evalbot pr`) and publish the result to it")
    p.add_argument(
        "--harness-ref", metavar="REF",
        help="where the harness comes from (default: the base branch tip, origin/<base> when it exists)",
    )
    measure_opts(p, "N rounds, fewer only if the budget or the corpus runs out first (default: adaptive, until decided or the budget is spent)",
                 "time budget of the measurement (default: the profile's, gpu 600, cpu 180)")
    p.add_argument("--no-calibrate", action="store_true",
                   help="with no noise floor for this box, profile and engine version, use the default floor instead of calibrating first")
    p.add_argument("--rescore", action="store_true",
                   help="measure again even if this candidate tree was measured against this main before (the verdict "
                        "is still the lowest tier over the tree's scorings)")
    p.add_argument("--json", action="store_true", help="print one JSON document (tier, receipt, gates, ...) instead of markdown")
    p.set_defaults(func=cmd_score)

    p = sub.add_parser(
        "calibrate", help="measure this box's A/A noise floor (base against itself)",
        description="Run the base ref against itself (A/A) with the machinery a score uses and store in "
        ".evalbot/noise-floor.json, per box, profile and engine version, how far from 1 the very statistic its gate or "
        "tier reads strayed (median over rounds), times stats.noise_margin, pooled with the last stats.noise_pool "
        "calibrations of the same key (each run adds one campaign). Gates and tiers allow for it.",
    )
    repo_opts(p)
    p.add_argument("--base", metavar="REF", default="main", help="the ref to measure against itself (default main)")
    measure_opts(p, "N A/A rounds, fewer only if the budget runs out first (default: adaptive, as a score)",
                 "time budget (default: the profile's)")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser(
        "demo", help="score the example PRs (examples/prs/) for real on a scratch clone of this repo",
        description="Clone the committed HEAD as main into a scratch directory, make one branch and local PR per "
        "example in examples/prs/, score and publish each with the real engine and harness, and print each verdict "
        "against the one its README expects. Exit status 0 only if every verdict matched, else 1.",
    )
    repo_opts(p)
    p.add_argument("--profile", choices=["cpu", "gpu"], help="harness profile (default: gpu when CUDA is available, else cpu)")
    p.add_argument("--work-dir", metavar="DIR", help="clone into DIR (new or empty; kept) instead of a temporary directory")
    p.add_argument("--keep", action="store_true", help="keep the temporary clone and its .evalbot/ state for `evalbot status`")
    p.add_argument("--only", metavar="SLUG", help="score one example, e.g. 02-lossy-shortcut (or lossy-shortcut, or 02)")
    p.add_argument("--rounds", type=int, metavar="N", help="exactly N rounds per example and for the A/A calibration (default: adaptive)")
    p.add_argument("--no-calibrate", action="store_true",
                   help="on a box with no noise floor for the profile, gate with the default floor instead of calibrating first")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--no-sandbox", action="store_true",
                   help="run PR code without the bubblewrap sandbox (development only; the scorecard says so)")
    p.set_defaults(func=lambda a: run_demo(
        _repo(a), profile=a.profile, work_dir=Path(a.work_dir) if a.work_dir else None, keep=a.keep, only=a.only,
        rounds=a.rounds, calibrate=not a.no_calibrate, settings=_settings(a, _repo(a)), progress=not a.no_progress))

    p = sub.add_parser(
        "keygen", help="create an Ed25519 key pair for signing receipts",
        description="Write FILE (PEM private key, mode 0600) and FILE.pub. Point EVALBOT_SIGNING_KEY at FILE to sign receipts.",
    )
    p.add_argument("--out", required=True, metavar="FILE", help="where to write the private key")
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    p.set_defaults(func=cmd_keygen)

    p = sub.add_parser("receipt", help="work with Polaris receipts", description="Work with Polaris receipts.")
    rsub = p.add_subparsers(dest="receipt_command", metavar="ACTION", parser_class=_Parser)
    rsub.required = True
    v = rsub.add_parser(
        "verify", help="check a receipt's signature against a public key",
        description="Exit 0 if FILE is byte-for-byte the envelope that was signed, by the key in PUB; otherwise "
        "print what is wrong and exit non-zero.",
    )
    v.add_argument("file", metavar="FILE", help="the receipt (.intoto.json)")
    v.add_argument("--key", required=True, metavar="PUB", help="the trusted public key (PEM), e.g. FILE.pub from keygen")
    v.add_argument("--expect-head", metavar="SHA", help="fail unless the receipt is for this head SHA (a replayed receipt of another head is signed too)")
    v.add_argument("--expect-repo", metavar="REPO", help="fail unless the receipt is for this repository (as the receipt names it)")
    v.add_argument("--expect-pr", type=int, metavar="N", help="fail unless the receipt is for PR N")
    v.set_defaults(func=cmd_receipt_verify)
    s = rsub.add_parser("show", help="print a receipt readably: statement, verdict, gates, rounds, raw figures, runs",
                        description="Decode FILE (not verify it: see `evalbot receipt verify`) and print what it records.")
    s.add_argument("file", metavar="FILE", help="the receipt (.intoto.json)")
    s.set_defaults(func=cmd_receipt_show)

    p = sub.add_parser(
        "dashboard", help="serve the dashboard of this repository's history (local scorings and calibrations)",
        description="Serve the bot's dashboard pages (main's figures per commit, each PR's rounds, the noise floor) "
        "for the history of `evalbot score --pr`, `calibrate` and `demo` in this repository (.evalbot/history.sqlite3).",
    )
    repo_opts(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8710, help="port (default 8710)")
    p.set_defaults(func=cmd_dashboard)

    for name, (module, text) in DELEGATED.items():
        d = sub.add_parser(name, help=text, description=f"{text[0].upper()}{text[1:]}; see `evalbot {name} --help`.",
                           add_help=False)
        d.set_defaults(func=lambda args, module=module: importlib.import_module(module).main([]))

    p = sub.add_parser(
        "status", help="show the local forge: PRs, labels, checks, scorecards, receipts, noise floors",
        description="Show what the local forge (.evalbot/forge.sqlite3) holds.",
    )
    repo_opts(p, config=False)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("pr", help="local PRs: branches of this repo registered for scoring", description="Local PRs.")
    psub = p.add_subparsers(dest="pr_command", metavar="ACTION", parser_class=_Parser)
    psub.required = True
    o = psub.add_parser("open", help="register a branch as a PR", description="Register branch --head as a PR against --base.")
    repo_opts(o, config=False)
    o.add_argument("--head", required=True, metavar="BRANCH", help="the branch with the change")
    o.add_argument("--base", default="main", metavar="BRANCH", help="the branch to merge into (default main)")
    o.add_argument("--title", metavar="TEXT", help="title (default: the branch name)")
    o.set_defaults(func=cmd_pr_open)
    ls = psub.add_parser("list", help="list local PRs", description="List local PRs (open ones unless --all).")
    repo_opts(ls, config=False)
    ls.add_argument("--all", action="store_true", help="include merged and closed PRs")
    ls.set_defaults(func=cmd_pr_list)
    return parser


def _terminated(signum, frame):
    raise KeyboardInterrupt


# Commands that start harness children from a checkout of untrusted code.
RUNS_PR_CODE = {"score", "calibrate", "demo"}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        return int(importlib.import_module(DELEGATED[argv[0]][0]).main(argv[1:]))
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in RUNS_PR_CODE:
        make_undumpable()  # belt and braces: with --no-sandbox PR code runs as our user
        signal.signal(signal.SIGTERM, _terminated)  # unwind: harness children and worktrees are cleaned up
    try:
        return int(args.func(args))
    except EvalbotError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - a bug: one line unless asked for the traceback
        if os.environ.get("EVALBOT_DEBUG"):
            traceback.print_exc()
        print(f"error: internal error: {type(e).__name__}: {e} (set EVALBOT_DEBUG=1 for a traceback)", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
