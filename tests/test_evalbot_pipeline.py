"""The whole flow against a throwaway repo with a fake harness (evalbot/testing): real git worktrees,
real subprocesses, real timings; PR behaviour set by knobs in the PR branch's knobs.json."""

import json
from pathlib import Path

import pytest

from evalbot import pipeline
from evalbot.settings import IntegritySettings, ProfileSettings, ProgramTimeouts, Settings, Thresholds
from evalbot.errors import EvalbotError, GitError, HarnessPinError
from evalbot.forge.local import LocalForge
from evalbot.decide.calibration import noise_from_aa
from evalbot.decide.gates import gate_ar, gate_guards
from evalbot.decide.measurements import summarize
from evalbot.decide.noise import load_noise_floor
from evalbot.report.receipt import verify_file
from evalbot.measure.harness_runner import build_schedule
from evalbot.testing import builders as b
from evalbot.testing import make_fake_repo

FAST = {"dspark_speed": 2.5}


def settings(**kw) -> Settings:
    # The fake engine sleeps ~24 ms per AR run, and a VM can stall a sleeper for a few ms: an
    # uncalibrated 10% noise floor keeps these tests about verdict logic, not scheduler luck. The
    # regressions they plant are 20% and the speedups 100%.
    return Settings.model_validate({"box": "test-box", "stats": {"default_noise_floor": 0.10}, **kw})


@pytest.fixture
def repo(tmp_path):
    return make_fake_repo(tmp_path / "repo")


def score(repo, head, base="main", **kw):
    kw.setdefault("settings", settings())
    return pipeline.score_refs(repo.path, base, head, **kw)


def gate(outcome, name):
    return next(g for g in outcome.verdict.gates if g.gate == name)


# -- verdicts ----------------------------------------------------------------------------------------

def test_faster_pr_wins_a_tier_with_a_receipt(repo):
    repo.branch("fast", knobs=FAST)
    out = score(repo, "fast")
    assert out.verdict.status == "scored", out.verdict.reason
    assert out.verdict.tier == "XL"  # DSpark 2x faster than main's 1.25 x AR
    assert out.verdict.labels == ["eval-dspark:XL", "eval:XL"]
    assert out.verdict.speedup.ci_low_pct > 50
    assert gate(out, "integrity").status == "pass" and "wall clock confirms" in gate(out, "integrity").detail
    assert out.base_sha == repo.sha("main") and out.head_sha == repo.sha("fast")
    receipt = Path(out.receipt.path)
    assert receipt.parent == repo.path / ".evalbot" / "receipts" and not out.receipt.signed
    assert out.scorecard.startswith(f"<!-- dspark-evalbot:scorecard v=1 head={out.head_sha} -->")


def test_same_code_is_none_not_a_tier(repo):
    repo.branch("docs-only", files={"README.md": "docs\n"})
    out = score(repo, "docs-only")
    assert out.verdict.status == "scored" and out.verdict.tier == "none", out.verdict.reason


def test_lossy_pr_is_rejected_even_if_fast(repo):
    repo.branch("lossy", knobs={**FAST, "lossy_every": 3})  # only the third run of each batch diverges
    out = score(repo, "lossy")
    assert out.verdict.tier == "REJECT"
    assert gate(out, "lossless").status == "fail"
    assert "2 of 6 runs diverge" in gate(out, "lossless").detail


def test_ar_regression_is_rejected(repo):
    repo.branch("slow-ar", knobs={"ar_speed": 0.8})
    out = score(repo, "slow-ar")
    assert out.verdict.tier == "REJECT" and gate(out, "ar").status == "fail"


def test_guard_regression_is_rejected(repo):
    repo.branch("slow-guard", knobs={"guard_speed": 0.8})
    out = score(repo, "slow-guard")
    assert out.verdict.tier == "REJECT"
    assert all(g.status == "fail" for g in out.verdict.gates if g.gate.startswith("guard:"))


def test_accuracy_and_tau_regressions_are_rejected(repo):
    repo.branch("inaccurate", knobs={"accuracy_flip": 0.25, "tau": 2.0})
    out = score(repo, "inaccurate")
    assert out.verdict.tier == "REJECT"
    assert gate(out, "accuracy").status == "fail" and gate(out, "tau").status == "fail"


def test_pr_changing_the_harness_is_not_evaluated(repo):
    repo.branch("bends-ruler", files={"harness/tau_check.py": repo.read("harness/tau_check.py") + "\n# tweak\n"},
                knobs=FAST)
    out = score(repo, "bends-ruler")
    assert out.verdict.status == "not_evaluated" and out.verdict.tier is None
    assert out.verdict.reason == "not evaluated: harness changed"
    assert out.verdict.changed_harness_paths == ["harness/tau_check.py"]
    assert out.measurements is None and out.runs == []
    assert "not evaluated: harness changed" in out.scorecard


def test_old_branch_is_measured_with_mains_current_harness(repo):
    """The #878 incident: a PR branched before main changed its harness read as -47.5%."""
    repo.branch("old-pr", knobs=FAST)
    repo.commit("main: new ruler", files={
        "harness/settings.py": repo.read("harness/settings.py").replace("NEW_TOKENS = 24", "NEW_TOKENS = 12"),
    })
    out = score(repo, "old-pr")
    assert out.verdict.status == "scored" and out.verdict.tier == "XL", out.verdict.reason
    assert {c.new_tokens for c in out.measurements.contexts} == {12}
    assert out.harness_sha == repo.sha("main")


def test_sha_callers_name_the_harness_ref(repo):
    """The webhook worker passes SHAs; `harness_ref` keeps the ruler at the branch tip."""
    repo.branch("fast", knobs=FAST)
    queued_main = repo.sha("main")
    repo.commit("main: new ruler", files={
        "harness/settings.py": repo.read("harness/settings.py").replace("NEW_TOKENS = 24", "NEW_TOKENS = 12"),
    })
    out = pipeline.score_refs(repo.path, queued_main, repo.sha("fast"), settings=settings(), harness_ref="main")
    assert out.base_sha == queued_main and out.harness_sha == repo.sha("main")
    assert {c.new_tokens for c in out.measurements.contexts} == {12}


def test_remote_tip_provides_the_harness(repo, tmp_path):
    repo.branch("fast", knobs=FAST)
    clone = make_fake_repo.__globals__["FakeRepo"](tmp_path / "clone")
    repo.git("clone", "-q", str(repo.path), str(clone.path))
    clone.git("checkout", "-q", "-b", "fast", "origin/fast")
    clone.git("checkout", "-q", "main")
    # origin/main moves its harness; the local main is stale
    repo.commit("main: new ruler", files={
        "harness/settings.py": repo.read("harness/settings.py").replace("NEW_TOKENS = 24", "NEW_TOKENS = 10"),
    })
    clone.git("fetch", "-q", "origin")
    out = pipeline.score_refs(clone.path, "main", "fast", settings=settings())
    assert out.harness_ref == "origin/main" and out.harness_sha == repo.sha("main")
    assert {c.new_tokens for c in out.measurements.contexts} == {10}


# -- infrastructure errors are never verdicts ------------------------------------------------------

def test_crash_is_an_infrastructure_error(repo):
    repo.branch("crashes", knobs={"crash": "tau_check"})
    out = score(repo, "crashes")
    assert out.verdict.status == "infra_error" and out.verdict.tier is None and out.verdict.labels == []
    assert out.verdict.infra.where == "round 1: tau_check (PR)"
    assert "exited with status 1" in out.verdict.infra.message
    assert "illegal memory access" in out.verdict.infra.stderr_tail
    assert "infrastructure error" in out.scorecard
    assert out.receipt is not None


def test_hang_times_out_as_an_infrastructure_error(repo):
    repo.branch("hangs", knobs={"hang": "guard"})
    s = settings(profiles={"cpu": ProfileSettings(rounds=2, timeouts=ProgramTimeouts(guard=1.0))})
    out = score(repo, "hangs", settings=s)
    assert out.verdict.status == "infra_error"
    assert out.verdict.infra.message == "timed out after 1 s"


def test_packages_must_import_from_the_worktree(repo):
    """A package the ref lacks must not be picked up from elsewhere (the bot's own install, say)."""
    repo.branch("fast", knobs=FAST)
    out = score(repo, "fast", settings=settings(import_roots=["harness", "engine", "json"]))
    assert out.verdict.status == "infra_error" and out.verdict.infra.where == "preflight (main)"
    assert "`json` imports from" in out.verdict.infra.message and out.runs == []
    repo.commit("main: drop the engine", delete=["engine/__init__.py", "engine/fake.py"])
    out = score(repo, "fast", settings=settings(import_roots=["harness", "engine"]))
    assert out.verdict.status == "infra_error"  # main's worktree would measure some other engine


def test_canned_output_is_rejected_as_foreign(repo):
    repo.branch("canned", knobs={"canned": True})
    out = score(repo, "canned")
    assert out.verdict.status == "infra_error" and "nonce" in out.verdict.infra.message


def test_stdout_outside_the_contract_is_an_infrastructure_error(repo):
    repo.branch("chatty", knobs={"stdout_noise": True})
    out = score(repo, "chatty")
    assert out.verdict.status == "infra_error" and "not JSON" in out.verdict.infra.message


# -- anti-forgery --------------------------------------------------------------------------------------

def test_forged_clock_is_caught_by_the_parents_wall_clock(repo):
    """A PR that slows time.perf_counter claims 2x everything; its processes take as long as main's."""
    repo.commit("main: slower tokens", knobs={"token_ms": 2.5})
    repo.branch("forger", knobs={"forge_clock": 0.5})
    repo.branch("honest", knobs={"dspark_speed": 2.5})
    s = settings(integrity=IntegritySettings(wallclock_slack_s=0.02))
    forged = score(repo, "forger", settings=s)
    assert forged.verdict.tier == "REJECT", forged.verdict.reason
    assert "implausible timings" in gate(forged, "integrity").detail
    honest = score(repo, "honest", settings=s)
    assert honest.verdict.tier == "XL", honest.verdict.reason


def test_tampered_throughput_is_caught(repo):
    repo.branch("tamper-tps", knobs={"tamper": {"dspark_tps": 1.0e6}})
    out = score(repo, "tamper-tps")
    assert out.verdict.tier == "REJECT"
    assert "not the median of its runs" in gate(out, "integrity").detail


def test_claimed_losslessness_is_not_believed(repo):
    repo.branch("lies", knobs={"lossy_every": 2, "tamper": {"lossless": True, "lossless_runs": 3}})
    out = score(repo, "lies")
    assert out.verdict.tier == "REJECT"
    assert gate(out, "lossless").status == "fail"
    assert "claims 3 lossless runs, the streams show 2" in gate(out, "integrity").detail


def test_child_environment_is_scrubbed_and_isolated(repo, tmp_path):
    dump = tmp_path / "env"
    repo.commit("main: dump env", knobs={"env_dump": str(dump)})
    repo.branch("pr", knobs={"dspark_speed": 1.3})
    environ = {
        "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GITHUB_TOKEN": "ghp_secret", "EVALBOT_SIGNING_KEY": "/k",
        "AWS_SECRET_ACCESS_KEY": "x", "OPENAI_API_KEY": "y", "CUDA_VISIBLE_DEVICES": "3",
    }
    out = score(repo, "pr", environ=environ)
    assert out.verdict.status == "scored"
    envs = {p.name: json.loads(p.read_text()) for p in dump.iterdir()}
    assert envs
    for name, env in envs.items():
        assert not {"GITHUB_TOKEN", "EVALBOT_SIGNING_KEY", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY"} & set(env)
        assert env["CUDA_VISIBLE_DEVICES"] == "3"
        worktree = "main" if name.startswith("main-") else "pr"
        assert env["PYTHONPATH"].endswith(f"/{worktree}")
        assert env["TRITON_CACHE_DIR"].endswith("/triton/" + ("base" if worktree == "main" else "head"))
        assert len(env["DSPARK_HARNESS_NONCE"]) == 32
    nonces = {e["DSPARK_HARNESS_NONCE"] for e in envs.values()}
    assert len(nonces) == len(envs)  # a fresh nonce per run


def test_runs_are_interleaved_abba(repo):
    repo.branch("fast", knobs=FAST)
    out = score(repo, "fast", rounds=3)
    order = [(r.round, r.ref, r.program) for r in out.runs]
    expected = [(s.round, s.ref, s.program) for s in build_schedule(3)] + [(0, "base", "compare")]
    assert order == expected
    assert [w.order for w in out.measurements.walls] == ["main, PR", "PR, main", "main, PR"]


# -- re-verification hook -------------------------------------------------------------------------

def test_reverifier_is_called_with_mains_worktree_and_can_reject(repo):
    repo.branch("fast", knobs=FAST)
    calls = []

    def factory(main_worktree, profile):
        assert (main_worktree / "harness" / "tau_check.py").is_file()

        def reverify(tokens, prompt):
            calls.append((len(tokens), prompt.name, prompt.ctx))
            return prompt.ctx != 64
        return reverify

    out = score(repo, "fast", reverifier_factory=factory)
    assert calls and {c[2] for c in calls} == {32, 64}
    assert out.verdict.tier == "REJECT" and gate(out, "reverify").status == "fail"
    ok = score(repo, "fast", reverifier_factory=lambda wt, p: lambda tokens, prompt: True)
    assert ok.verdict.tier == "XL" and gate(ok, "reverify").status == "pass"


def test_a_crashing_reverifier_is_an_infrastructure_error(repo):
    repo.branch("fast", knobs=FAST)

    def boom(tokens, prompt):
        raise RuntimeError("engine not built")

    out = score(repo, "fast", reverifier_factory=lambda wt, p: boom)
    assert out.verdict.status == "infra_error" and "engine not built" in out.verdict.reason


# -- calibration: A/A never rejects ------------------------------------------------------------------

def test_calibrate_stores_a_floor_and_aa_is_never_rejected(repo):
    # A generous margin and three rounds (the median shrugs off one stalled run): this box may be
    # busy, and the fake engine's runs are only milliseconds long.
    s = settings(stats={"noise_margin": 5.0})
    floor, path = pipeline.calibrate(repo.path, "main", rounds=3, settings=s)
    assert path == repo.path / ".evalbot" / "noise-floor.json"
    assert floor.calibrated and floor.box == "test-box" and floor.rounds == 3
    assert 0 <= floor.dspark_decode < 0.5
    assert load_noise_floor(repo.path / ".evalbot", "test-box", "cpu", 0.01) == floor
    repo.branch("same-engine", files={"NOTES.md": "no code change\n"})
    out = score(repo, "same-engine", settings=s, rounds=3)
    assert out.verdict.status == "scored", out.verdict.reason
    assert out.verdict.tier == "none", out.verdict.reason
    assert out.measurements.noise.calibrated
    # base against itself, literally
    out = score(repo, "main", settings=s, rounds=3)
    assert out.verdict.tier == "none", out.verdict.reason


# -- setup errors are loud -----------------------------------------------------------------------------

def test_unknown_ref_is_an_error(repo):
    with pytest.raises(GitError, match="cannot resolve 'nope'"):
        score(repo, "nope")


def test_missing_manifest_fails_loudly(repo):
    repo.branch("fast", knobs=FAST)
    repo.commit("main: lose the manifest", delete=["harness/HARNESS_PATHS"])
    with pytest.raises(HarnessPinError, match="HARNESS_PATHS does not exist"):
        score(repo, "fast")


def test_broken_signing_key_fails_before_measuring(repo, tmp_path):
    bad = tmp_path / "key.pem"
    bad.write_text("nope")
    with pytest.raises(EvalbotError, match="not an unencrypted PEM"):
        score(repo, "main", settings=settings(signing_key=str(bad)))
    assert not (repo.path / ".evalbot" / "receipts").exists()


def test_signed_receipt_verifies(repo, tmp_path):
    from evalbot.report.receipt import generate_keypair

    priv, pub = generate_keypair(tmp_path / "bot.pem")
    repo.branch("fast", knobs=FAST)
    out = score(repo, "fast", settings=settings(signing_key=str(priv)))
    assert out.receipt.signed
    statement = verify_file(Path(out.receipt.path), pub)
    assert statement["predicate"]["verdict"]["tier"] == "XL"
    assert statement["predicate"]["code"]["harness_digest"] == out.harness_digest
    assert len(statement["predicate"]["runs"]) == len(out.runs)


# -- publishing ------------------------------------------------------------------------------------------

def test_publish_to_the_local_forge(repo):
    repo.branch("fast", knobs=FAST)
    forge = LocalForge(repo.path)
    forge.open_pull("fast")
    forge.add_label(1, "eval-dspark:REJECT")  # stale from an earlier head
    out = score(repo, "fast", pr_number=1)
    result = pipeline.publish(out, forge, 1, settings())
    assert result.published
    pull = forge.get_pull(1)
    assert pull.labels == ["eval-dspark:XL", "eval:XL"]
    (comment,) = forge.comments(1)
    assert comment["body"] == out.scorecard
    (check,) = forge.checks(out.head_sha)
    assert (check["status"], check["conclusion"]) == ("completed", "success")
    assert Path(result.receipt_ref).read_text() == Path(out.receipt.path).read_text() == out.receipt.envelope

    # a new head: the same sticky comment is edited, labels replaced, nothing for a stale outcome
    repo.git("checkout", "-q", "fast")
    repo.commit("lossy now", knobs={"lossy_every": 2})
    repo.git("checkout", "-q", "main")
    stale = pipeline.publish(out, forge, 1, settings())
    assert not stale.published and "moved" in stale.reason
    new = score(repo, "fast", pr_number=1)
    pipeline.publish(new, forge, 1, settings())
    assert forge.get_pull(1).labels == ["eval-dspark:REJECT", "eval:REJECT"]
    (comment,) = forge.comments(1)
    assert new.head_sha in comment["body"]


def test_publish_not_evaluated_clears_tier_labels(repo):
    repo.branch("bends", files={"bench/prompts/prose.txt": "short\n"})
    forge = LocalForge(repo.path)
    forge.open_pull("bends")
    forge.replace_labels(1, ("eval-dspark:", "eval:"), ["eval-dspark:S", "eval:S"])
    out = score(repo, "bends", pr_number=1)
    pipeline.publish(out, forge, 1, settings())
    assert forge.get_pull(1).labels == []
    assert "harness changed" in forge.comments(1)[0]["body"]
    # not evaluated must not pass a required check (neutral would): report/check_run.py, docs/deploy.md
    assert forge.checks(out.head_sha)[0]["conclusion"] == "action_required"


# -- the A/A floor is the noise of the statistic each gate reads ----------------------------------------

def _aa_records(rows):
    """rows: per round (base_dspark, head_dspark, base_ar, head_ar, base_guard, head_guard), two prompts."""
    recs = []
    for rnd, (bd, hd, ba, ha, bg, hg) in enumerate(rows):
        for ref, d, a, g in (("base", bd, ba, bg), ("head", hd, ha, hg)):
            lines = [b.tau_line(prompt=p, ctx=128, dspark_tps=d * f, ar_tps=a * f) for p, f in (("code", 1.0), ("prose", 1.1))]
            recs.append(b.record("tau_check", ref, rnd, lines, wall_s=30.0))
            recs.append(b.record("guard", ref, rnd, [b.guard_line(decode_tps=g, prefill_tps=10 * g)]))
    return recs


def test_aa_floor_is_taken_on_the_gated_statistics_not_single_runs():
    # round 0: head 20% fast, round 1: head 10% slow (a noisy CPU box). Single runs stray 20%; the
    # medians over rounds, which the tier and the gates read, stray 4.5% (DSpark), 5% (AR), 5% (guard).
    rows = [(10.0, 12.0, 10.0, 12.0, 100.0, 120.0), (10.0, 9.0, 10.0, 9.0, 100.0, 90.0)]
    floor = noise_from_aa(_aa_records(rows), box="b", profile="cpu", rounds=2, base_sha="0" * 40, margin=1.5)
    speedup_median = ((1.2 * 1.2) ** 0.5 + (0.9 * 0.9) ** 0.5) / 2  # per-round geomeans 1.2 and 0.9
    assert floor.dspark_decode == pytest.approx(1.5 * abs(speedup_median - 1))
    assert floor.ar_decode == pytest.approx(1.5 * abs((1.2 + 0.9) / 2 - 1))
    assert floor.guard_decode == pytest.approx(1.5 * 0.05) and floor.guard_prefill == pytest.approx(1.5 * 0.05)
    assert floor.tau_check_wall == pytest.approx(0.0)
    # the same A/A data then neither rejects nor wins a tier
    m = summarize(_aa_records(rows), profile="cpu", rounds=2, requested_reps=3, noise=floor)
    assert gate_ar(m, Thresholds()).status == "pass"
    assert all(g.status == "pass" for g in gate_guards(m, Thresholds()))


def test_aa_floor_needs_paired_rounds():
    recs = [r for r in _aa_records([(10, 10, 10, 10, 100, 100)]) if r.ref == "base"]
    with pytest.raises(EvalbotError, match="no paired measurements"):
        noise_from_aa(recs, box="b", profile="cpu", rounds=1, base_sha="0" * 40, margin=1.5)
