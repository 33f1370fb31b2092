"""One measuring campaign for a scoring or a calibration: the two trees (main's tip, and the candidate
with main's harness laid over it), the harness servers in their sandboxes, the corpora, the plan, the
stopping rule; returns the records (evalbot.decide.records)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from evalbot.decide.measurements import summarize
from evalbot.decide.noise import NoiseFloor
from evalbot.decide.records import Finding, Records, Ref, StopReason
from evalbot.decide.stopping import decided, final
from evalbot.measure import gitops
from evalbot.measure.campaign import Campaign
from evalbot.measure.checkout import PinnedHarness, exported_trees
from evalbot.measure.export import ExportTooLarge
from evalbot.measure.client import ServerClient
from evalbot.measure.corpus import load_corpora
from evalbot.measure.environment import scrub_env
from evalbot.measure.gpu_contention import GpuContention
from evalbot.measure.plan import plan_for
from evalbot.measure.proc import SandboxedProcess
from evalbot.measure.sandbox import MODEL_DIR, SandboxSpec, check_sandbox, gpu_for
from evalbot.settings import Settings


class ProgressSink(Protocol):
    def begin(self, total: int) -> None: ...

    def step(self, label: str) -> None: ...

    def advance(self) -> None: ...


def model_path(settings: Settings) -> Path:
    if settings.harness.model:
        return Path(settings.harness.model).expanduser()
    from engine.model_files import bundled_model_path  # the bot's own copy: fetches and checks the pinned file

    return bundled_model_path()


def _stop(m, settings: Settings) -> tuple[bool, str, bool]:
    stop, why = decided(m, settings)
    return stop, why, final(m) is not None


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return torch.cuda.is_available()


def _refused(plan, message: str) -> Records:
    """Records of a campaign that never started because the PR's tree could not be exported: the PR's
    integrity failure (REJECT with the reason), never an infrastructure error."""
    rec = Records(profile=plan.profile, processes_per_ref=plan.processes, seed=0)
    rec.findings.append(Finding(ref="head", where="export", message=message))
    rec.stop = StopReason(rounds=0, reason="failure", detail=message)
    return rec


def run_campaign(repo: Path, pinned: PinnedHarness, shas: Mapping[Ref, str], settings: Settings, profile: str, *,
                 noise: NoiseFloor, rounds: int | None = None, budget_s: float | None = None,
                 progress: ProgressSink | None = None, environ: Mapping[str, str] | None = None,
                 aa: bool = False) -> Records:
    import os

    prof = settings.profile_settings(profile)
    gpu = _has_gpu()
    plan = plan_for(profile, prof, gpu=gpu, budget_s=budget_s)
    if rounds is not None:
        plan = replace(plan, min_rounds=rounds, max_rounds=rounds)
    model = model_path(settings)
    corpora = load_corpora(repo, pinned.harness_sha, prof.corpora, model, settings.corpora_dir)
    env = scrub_env(os.environ if environ is None else environ, settings.env)
    python = settings.harness.python or sys.executable
    check_sandbox(settings.sandbox)  # one line naming what to install, before anything is exported
    if progress is not None:
        progress.begin(0)
    caps = {"max_bytes": settings.sandbox.export_max_mb << 20, "max_file_bytes": settings.sandbox.export_max_file_mb << 20}
    with gitops.scratch_dir("evalbot-run-") as scratch, contextlib.ExitStack() as stack:
        try:
            main_tree, pr_tree = stack.enter_context(
                exported_trees(pinned, scratch, ("main", "pr"), (shas["base"], shas["head"]), **caps))
        except ExportTooLarge as e:
            if aa or e.rev != shas["head"] or shas["head"] == shas["base"]:
                raise  # main's own tree: the bot's configuration, not a PR's doing
            return _refused(plan, str(e))
        trees = {"base": main_tree, "head": pr_tree}

        def spawn(ref: Ref, index: int, nonce: str):
            label = f"{'main' if ref == 'base' else 'pr'}-{index + 1}"
            spec = SandboxSpec(label=label, tree=trees[ref], model=model, env=env, gpu=gpu_for(settings.sandbox))
            inside = MODEL_DIR / model.name if settings.sandbox.enabled else model
            argv = settings.harness.command(python, str(inside))
            handle = SandboxedProcess.start(spec, argv, settings.sandbox)
            campaign.records.sandbox, campaign.records.freezer = handle.description, handle.freezer
            return handle, ServerClient(handle.stdin, handle.stdout, label, nonce)

        campaign = Campaign(
            plan, spawn, corpora.ids,
            stop_rule=lambda rec: _stop(summarize(rec, noise=noise, integrity=settings.integrity), settings),
            progress=(progress.step if progress is not None else (lambda msg: None)),
            contention=GpuContention.for_box() if gpu else None, aa=aa,
        )
        campaign.records.corpora = corpora.source
        return campaign.run()
