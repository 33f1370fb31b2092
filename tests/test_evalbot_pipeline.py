"""The whole flow against a throwaway repo (evalbot/testing): the real harness server and the real
campaign over a fake engine; real git, real processes, real timings by the bot's clock. PR behaviour
is set by knobs in the PR branch's knobs.json."""

import base64
import json
from pathlib import Path

import pytest

from evalbot import pipeline
from evalbot.decide.noise import load_noise_floor
from evalbot.errors import EvalbotError, GitError, HarnessPinError
from evalbot.forge.local import LocalForge
from evalbot.measure import gitops
from evalbot.report.receipt import verify_file
from evalbot.settings import Settings
from evalbot.testing import FAKE_PROFILE, make_fake_repo

FAST = {"dspark_speed": 3.0}  # main's fake DSpark runs at 1.5
ROUNDS = 4  # one round per pairing of the two processes per ref
TINY = FAKE_PROFILE


def settings(**kw) -> Settings:
    # The fake engine sleeps milliseconds per request and a VM can stall a sleeper for a few: an
    # uncalibrated 10% floor keeps these tests about verdict logic, not scheduler luck. The
    # regressions they plant are 30% and more, the speedups 50% and more.
    profile = {**TINY, **kw.pop("profile", {})}
    return Settings.model_validate({"box": "test-box", "stats": {"default_noise_floor": 0.10},
                                    "thresholds": {"min_compare_positions": 32}, "profiles": {"cpu": profile}, **kw})


@pytest.fixture
def repo(tmp_path):
    return make_fake_repo(tmp_path / "repo")


def score(repo, head, base="main", **kw):
    kw.setdefault("settings", settings())
    kw.setdefault("rounds", ROUNDS)
    kw.setdefault("calibrate_first", False)
    return pipeline.score_refs(repo.path, base, head, profile="cpu", **kw)


def gate(outcome, name):
    return next(g for g in outcome.verdict.gates if g.gate == name)


# -- verdicts ----------------------------------------------------------------------------------------

def test_faster_pr_wins_a_tier_with_a_receipt(repo):
    repo.branch("fast", knobs=FAST)
    out = score(repo, "fast")
    assert out.verdict.status == "scored", out.verdict.reason
    assert out.verdict.tier in ("L", "XL") and out.verdict.speedup.ci_low_pct > 10
    m = out.measurements
    assert m.rounds == ROUNDS and m.stop.reason == "max rounds" and len(set(m.speedup_groups)) == 4
    assert Path(out.receipt.path).is_file() and out.requests and out.candidate_sha
    assert all(g.status == "pass" for g in out.verdict.gates)


def test_same_code_is_none_not_a_tier(repo):
    repo.branch("docs", files={"NOTES.md": "no code change\n"})
    out = score(repo, "docs")
    assert out.verdict.status == "scored" and out.verdict.tier == "none", out.verdict.reason


def test_lossy_pr_is_rejected_even_if_fast(repo):
    repo.branch("lossy", knobs={**FAST, "lossy_every": 2})
    out = score(repo, "lossy")
    assert out.verdict.tier == "REJECT"
    assert gate(out, "lossless").status == "fail" and "not main's greedy continuation" in gate(out, "lossless").detail


def test_ar_regression_is_rejected(repo):
    repo.branch("slow-ar", knobs={"ar_speed": 0.5})
    out = score(repo, "slow-ar")
    assert out.verdict.tier == "REJECT" and gate(out, "ar").status == "fail"


def test_guard_regression_is_rejected(repo):
    repo.branch("slow-guard", knobs={"guard_speed": 0.5})
    out = score(repo, "slow-guard")
    assert out.verdict.tier == "REJECT" and gate(out, "guard:fake-guard").status == "fail"


@pytest.mark.parametrize("knobs, needle", [({"accuracy_flip": 0.5}, "top1"), ({"logit_scale": 0.3}, "KL")])
def test_accuracy_regressions_are_rejected_from_the_bots_own_arithmetic(repo, knobs, needle):
    repo.branch("approx", knobs=knobs)
    out = score(repo, "approx")
    assert out.verdict.tier == "REJECT" and needle in gate(out, "accuracy").detail


def test_pr_changing_the_harness_is_not_evaluated(repo):
    repo.branch("bends", files={"harness/prompts/prose.txt": "short\n"})
    out = score(repo, "bends")
    assert out.verdict.status == "not_evaluated" and out.verdict.changed_harness_paths == ["harness/prompts/prose.txt"]
    assert out.measurements is None


# -- what would land is what is measured ---------------------------------------------------------------

def test_the_merge_into_mains_tip_is_measured_not_the_stale_head(repo):
    repo.branch("docs", files={"NOTES.md": "unrelated\n"})
    repo.commit("main: DSpark twice as fast", files={"engine/boost.txt": "2\n"})
    out = score(repo, "docs")  # the head alone lacks main's speedup and would read as a big regression
    assert out.verdict.status == "scored" and out.verdict.tier == "none", out.verdict.reason
    parents = gitops.git(repo.path, "log", "-1", "--format=%P", out.candidate_sha).split()
    assert parents == [out.base_sha, out.head_sha]


def test_the_receipts_drafter_is_the_tree_the_bot_read_not_what_the_pr_process_reported(repo):
    """The PR's process reports its drafter's sha256 itself (it could name main's while shipping another):
    the receipt's drafter subject is the git tree of the candidate's engine/dspark/weights, read by the bot."""
    repo.branch("new-drafter", knobs=FAST, files={"engine/dspark/weights/d/model.bin": "weights v2\n"})
    out = score(repo, "new-drafter")
    want = gitops.git(repo.path, "rev-parse", f"{out.candidate_sha}:engine/dspark/weights").strip()
    assert out.drafter_tree == want
    statement = json.loads(base64.b64decode(json.loads(out.receipt.envelope)["payload"]))
    subjects = {s["name"]: s["digest"] for s in statement["subject"]}
    assert subjects["drafter"] == {"gitTree": want}
    reported = out.measurements.drafter_sha256
    assert reported and {"sha256": reported} not in subjects.values()
    assert score(repo, "main").drafter_tree == ""  # main ships none in this repo: no subject, no guess


def test_a_pr_that_does_not_merge_needs_a_rebase(repo):
    repo.branch("fast", knobs=FAST)
    repo.commit("main: other knobs", knobs={"tau": 3.0})
    out = score(repo, "fast")
    assert out.verdict.status == "not_evaluated" and out.verdict.labels == ["dspark-needs-rebase"]
    assert out.verdict.conflicts == ["knobs.json"]
    assert "not evaluated: needs a rebase" in out.scorecard and "- `knobs.json`" in out.scorecard
    assert "harness changed" not in out.scorecard


# -- one verdict per candidate tree: no best-of-N --------------------------------------------------------

def _no_measuring(monkeypatch):
    def measured(*a, **kw):
        raise AssertionError("measured again")
    monkeypatch.setattr(pipeline, "run_campaign", measured)


def test_an_empty_amend_reuses_the_verdict_and_measures_nothing(repo, monkeypatch):
    repo.branch("fast", knobs=FAST)
    first = score(repo, "fast", pr_number=1)
    assert first.verdict.status == "scored" and first.tree_scorings == 1 and first.pr_scoring == 1
    assert not first.reused_from_head
    repo.branch("fast-amend", start="fast", message="empty amend")  # same tree, new head SHA
    _no_measuring(monkeypatch)
    again = score(repo, "fast-amend", pr_number=1)
    assert again.head_sha != first.head_sha and again.candidate_tree == first.candidate_tree
    assert again.verdict.tier == first.verdict.tier and again.verdict.speedup == first.verdict.speedup
    assert again.measurements == first.measurements and again.requests == first.requests
    assert again.reused_from_head == first.head_sha and again.tree_scorings == 1 and again.pr_scoring == 1
    assert f"measurement of head {first.head_sha[:12]} re-issued" in again.verdict.reason
    # a receipt of its own, for this head, that says whose measurement it is
    assert again.receipt.path != first.receipt.path
    statement = json.loads(base64.b64decode(json.loads(again.receipt.envelope)["payload"]))
    assert statement["predicate"]["code"]["head_sha"] == again.head_sha
    assert f"head {first.head_sha[:12]} re-issued" in statement["predicate"]["verdict"]["reason"]
    # a second PR with the same code, and a close/reopen, reuse it too
    other = score(repo, "fast-amend", pr_number=2)
    assert other.reused_from_head == first.head_sha and other.verdict.tier == first.verdict.tier
    assert other.pr_scoring == 1


def test_boxes_sharing_a_ledger_share_one_verdict_per_tree(repo, tmp_path, monkeypatch):
    """Many boxes (Redis): the scorings live in the ledger they share, so a tree measured on one box is
    re-issued on another instead of measured again (here two boxes: two clones, one ledger)."""
    import shutil

    from evalbot.bot.jobs.ledger_stores import SqliteLedger
    from evalbot.bot.worker.scoring import shared_scorings

    ledger = SqliteLedger(tmp_path / "shared.sqlite3")
    docs = shared_scorings(ledger)
    repo.branch("fast", knobs=FAST)
    first = score(repo, "fast", pr_number=1, scorings_docs=docs)
    assert not first.reused_from_head and ledger.get_doc("scorings", "nothing") is None
    other_box = tmp_path / "box-b"
    shutil.copytree(repo.path, other_box, ignore=shutil.ignore_patterns(".evalbot"))  # its own state dir
    _no_measuring(monkeypatch)
    again = pipeline.score_refs(other_box, "main", "fast", profile="cpu", settings=settings(), rounds=ROUNDS,
                                calibrate_first=False, pr_number=1, scorings_docs=docs)
    assert again.reused_from_head == first.head_sha and again.verdict.tier == first.verdict.tier
    assert not (other_box / ".evalbot" / "scorings").exists()


def test_a_tree_another_box_is_measuring_waits_for_that_verdict(repo, tmp_path, monkeypatch):
    """Two boxes, one ledger, the same candidate tree at the same moment (two PRs with the same code): without
    the claim both measured it, each published its own reading (a best-of-two), and one store overwrote the
    other. Now the second waits (TreeBusy, its job goes back to the queue) and then re-issues the first's
    verdict; a claim whose owner died is taken over."""
    import shutil

    from evalbot.bot.jobs.ledger_stores import SqliteLedger
    from evalbot.bot.worker.scoring import shared_scorings
    from evalbot.decide.scorings import Claimant, TreeBusy

    ledger = SqliteLedger(tmp_path / "shared.sqlite3")
    docs = shared_scorings(ledger)
    repo.branch("fast", knobs=FAST)
    repo.branch("fast-twin", start="fast", message="the same code, another PR")
    other_box = tmp_path / "box-b"
    shutil.copytree(repo.path, other_box, ignore=shutil.ignore_patterns(".evalbot"))
    box_a = Claimant("job-a", alive=lambda owner: False)
    box_b = Claimant("job-b", alive=lambda owner: owner == "job-a")  # box A's job is running

    def on_box_b(**kw):
        return pipeline.score_refs(other_box, "main", "fast-twin", profile="cpu", settings=settings(), rounds=ROUNDS,
                                   calibrate_first=False, pr_number=2, scorings_docs=docs, claimant=box_b, **kw)

    campaign, waited = pipeline.run_campaign, []

    def campaign_while_box_b_tries(*a, **kw):
        with pytest.raises(TreeBusy, match="another scoring of this tree"):
            on_box_b()
        waited.append(True)
        return campaign(*a, **kw)

    monkeypatch.setattr(pipeline, "run_campaign", campaign_while_box_b_tries)
    first = score(repo, "fast", pr_number=1, scorings_docs=docs, claimant=box_a)
    assert waited and first.verdict.status == "scored" and not first.reused_from_head
    _no_measuring(monkeypatch)
    again = on_box_b()  # box A is done: its claim is gone, its verdict is re-issued
    assert again.reused_from_head == first.head_sha and again.verdict.tier == first.verdict.tier
    assert again.tree_scorings == 1
    # a claim left by a box that died mid-measurement is taken over (its owner is not alive)
    monkeypatch.setattr(pipeline, "run_campaign", campaign)
    name = next(n for n in ledger._kv_items("doc:scorings") if not n.startswith("pr-"))
    assert ledger.insert_doc("scorings", f"claim-{name}", '{"owner": "job-dead"}')
    rescored = on_box_b(rescore=True)
    assert rescored.tree_scorings == 2 and ledger.get_doc("scorings", f"claim-{name}") is None


def test_a_forced_rescore_measures_again_but_never_raises_the_tier(repo, monkeypatch):
    from evalbot.decide import verdict as verdicts

    repo.branch("fast", knobs=FAST)
    first = score(repo, "fast", pr_number=1)
    assert first.verdict.tier in ("L", "XL")

    def reads(tier):  # what the noisy ruler reads this time
        def decide(m, s):
            v = verdicts.decide(m, s)
            return v.model_copy(update={"tier": tier, "labels": s.tiers.labels_for(tier)})
        monkeypatch.setattr(pipeline, "decide", decide)

    reads("S")
    low = score(repo, "fast", pr_number=1, rescore=True)  # measured again: the lower reading stands
    assert low.verdict.tier == "S" and low.tree_scorings == 2 and not low.reused_from_head
    assert "scoring 2 of this tree" in low.verdict.reason
    reads("XL")
    lucky = score(repo, "fast", pr_number=1, rescore=True)  # a lucky re-roll does not raise it
    assert lucky.verdict.tier == "S" and lucky.tree_scorings == 3 and "re-measured on request and read XL" in lucky.verdict.reason
    _no_measuring(monkeypatch)
    repo.branch("fast-amend", start="fast", message="empty amend")
    amend = score(repo, "fast-amend", pr_number=1)
    assert amend.verdict.tier == "S" and amend.tree_scorings == 3 and amend.verdict.labels == ["eval-dspark:S", "eval:S"]


def test_a_verdict_is_reissued_only_under_the_same_ruler(repo, monkeypatch):
    """Other thresholds, the sandbox off or a fixed number of rounds measure again: a verdict is the tree's
    under the settings it was decided by, and a receipt must not sign old gates with new settings."""
    repo.branch("fast", knobs=FAST)
    first = score(repo, "fast", pr_number=1)
    measured = []
    real = pipeline.run_campaign
    monkeypatch.setattr(pipeline, "run_campaign", lambda *a, **kw: measured.append(1) or real(*a, **kw))
    strict = settings(thresholds={"min_compare_positions": 32, "ar_ratio_min": 5.0})
    again = score(repo, "fast", pr_number=1, settings=strict)
    assert measured == [1] and not again.reused_from_head and again.verdict.status == "rejected"
    same = score(repo, "fast", pr_number=1)  # the first ruler again: its verdict, not measured
    assert measured == [1] and same.reused_from_head == first.head_sha and same.box == first.box


def test_a_reject_on_speed_gates_alone_is_cleared_by_a_re_measurement_but_a_wrong_stream_is_not(repo, monkeypatch):
    from evalbot.decide import verdict as verdicts
    from evalbot.decide.gates import GateResult

    repo.branch("fast", knobs=FAST)
    score(repo, "fast", pr_number=1)

    def reads(gate):  # this scoring reads a REJECT on `gate`
        def decide(m, s):
            v = verdicts.decide(m, s)
            gates = [*v.gates, GateResult(gate=gate, title=gate, status="fail", detail="read below its bar")]
            return v.model_copy(update={"status": "rejected", "tier": "REJECT", "gates": gates,
                                        "labels": s.tiers.labels_for("REJECT")})
        monkeypatch.setattr(pipeline, "decide", decide)

    reads("ar")
    slow = score(repo, "fast", pr_number=1, rescore=True)
    assert slow.verdict.tier == "REJECT"  # the latest reading stands
    monkeypatch.setattr(pipeline, "decide", verdicts.decide)
    cleared = score(repo, "fast", pr_number=1, rescore=True)
    assert cleared.verdict.tier in ("L", "XL") and cleared.tree_scorings == 3
    reads("lossless")
    lossy = score(repo, "fast", pr_number=1, rescore=True)
    monkeypatch.setattr(pipeline, "decide", verdicts.decide)
    after = score(repo, "fast", pr_number=1, rescore=True)
    assert lossy.verdict.tier == "REJECT" and after.verdict.tier == "REJECT"  # a wrong stream stays


def test_undecodable_stored_scorings_are_ignored(repo, monkeypatch):
    repo.branch("docs", files={"NOTES.md": "no code change\n"})
    first = score(repo, "docs", pr_number=1)
    store = repo.path / ".evalbot" / "scorings"
    for f in store.glob("*.json"):
        f.write_text('{"version": 1, "key": 3, "scorings": ["garbage"]}')
    again = score(repo, "docs", pr_number=1)  # measured again, nothing unpickled or trusted
    assert again.verdict.status == "scored" and not again.reused_from_head and again.tree_scorings == 1
    assert again.pr_scoring == 1 and first.pr_scoring == 1


def test_each_distinct_tree_of_a_pr_is_counted(tmp_path):
    from evalbot.decide import scorings

    assert [scorings.pr_tree_number(tmp_path, "r", 1, "b", t) for t in ("t1", "t2", "t1", "t3")] == [1, 2, 1, 3]
    assert scorings.pr_tree_number(tmp_path, "r", 1, "b2", "t2") == 1  # another main starts again
    assert scorings.pr_tree_number(tmp_path, "r", 2, "b", "t2") == 1


# -- whose fault it is -----------------------------------------------------------------------------------

def test_a_pr_that_crashes_is_rejected_for_it_not_read_as_slow(repo):
    repo.branch("crash", knobs={"crash": "generate"})
    out = score(repo, "crash")
    assert out.verdict.status == "rejected"
    detail = gate(out, "integrity").detail
    assert "exited" in detail and "lossless" not in out.verdict.reason


def test_main_crashing_is_an_infrastructure_error(repo):
    repo.branch("pr", files={"NOTES.md": "x\n"})
    repo.commit("main: a broken engine", knobs={"crash": "start"})
    out = score(repo, "pr")
    assert out.verdict.status == "infra_error" and "main's side" in out.verdict.infra.where
    assert "illegal memory access" in out.verdict.infra.stderr_tail


def test_a_hanging_pr_times_out_as_its_own_failure(repo):
    # past the warm-up (two corpora x one context x AR and DSpark, one guard twice): a timed request hangs
    repo.branch("hang", knobs={"hang": "generate", "fault_after": 6})
    out = score(repo, "hang", settings=settings(profile={"request_timeout_s": 3}))
    assert out.verdict.status == "rejected" and "within 3 s" in gate(out, "integrity").detail


@pytest.mark.parametrize("knobs, needle", [
    ({"forge_fds": True}, "extra or forged output"),
    ({"wrong_count": True}, "returned 7 tokens where 8 were asked for"),
    ({"instant": True}, "faster than 5x main"),
])
def test_inconsistent_output_is_rejected_with_the_reason(repo, knobs, needle):
    repo.branch("bad", knobs=knobs)
    out = score(repo, "bad")
    assert out.verdict.status == "rejected" and needle in gate(out, "integrity").detail, out.verdict.reason


def test_printing_to_stdout_cannot_corrupt_the_protocol(repo):
    repo.branch("chatty", knobs={"stdout_noise": True})
    out = score(repo, "chatty")
    assert out.verdict.status == "scored", out.verdict.reason


# -- the ruler cannot be bought ----------------------------------------------------------------------------

def test_a_forged_clock_changes_nothing_but_the_flag(repo):
    repo.branch("clock", knobs={"forge_clock": 0.5})
    out = score(repo, "clock")
    assert out.verdict.status == "scored" and out.verdict.tier == "none", out.verdict.reason
    assert out.measurements.clock.flagged and "faster than it was" in out.scorecard


def test_remembering_earlier_answers_gains_nothing_on_never_repeated_windows(repo):
    repo.branch("memo", knobs={"memo": True})
    out = score(repo, "memo")
    assert out.verdict.status == "scored" and out.verdict.tier == "none", out.verdict.reason


def test_a_pr_that_spins_the_cpu_cannot_slow_main(repo):
    repo.branch("spin", knobs={"spin": True})
    out = score(repo, "spin")
    assert out.verdict.status == "scored" and out.verdict.tier == "none", out.verdict.reason


def test_a_slow_one_token_request_only_hurts_the_pr(repo):
    """A prefill-only request that sleeps: no decode figure improves (none is derived from it); the
    guard's prefill gate sees the PR slower."""
    repo.branch("few", knobs={"slow_few_ms": 30})
    out = score(repo, "few")
    assert out.verdict.tier == "REJECT" and "prefill" in gate(out, "guard:fake-guard").detail


def test_requests_alternate_between_the_refs_and_others_are_frozen(repo):
    repo.branch("fast", knobs=FAST)
    out = score(repo, "fast")
    timed = [r for r in out.requests if r.model == "main"]
    firsts = [timed[i].ref for i in range(0, len(timed), 2)]
    assert {"base", "head"} == set(firsts)  # ABBA: neither ref always goes first
    assert all(timed[i].window == timed[i + 1].window and timed[i].ref != timed[i + 1].ref for i in range(0, len(timed), 2))
    assert out.measurements.freezer in ("SIGSTOP", "cgroup v1", "cgroup v2")


# -- calibration ---------------------------------------------------------------------------------------------

def test_calibrate_stores_a_floor_per_engine_version_and_aa_is_never_rejected(repo):
    s = settings(stats={"noise_margin": 3.0})
    floor, path = pipeline.calibrate(repo.path, "main", profile="cpu", rounds=ROUNDS, settings=s)
    assert path == repo.path / ".evalbot" / "noise-floor.json"
    assert floor.calibrated and floor.box == "test-box" and floor.rounds == ROUNDS
    engine = gitops.code_digest(repo.path, repo.sha("main"))
    assert floor.engine == engine and load_noise_floor(repo.path / ".evalbot", "test-box", "cpu", engine) == floor
    repo.branch("same-engine", files={"NOTES.md": "no code change\n"})
    out = score(repo, "same-engine", settings=s)
    assert out.verdict.tier == "none" and out.measurements.noise.calibrated and not out.calibrated_now
    # calibrating again adds a campaign: the floor pools both, never shrinking below the first one's deviations
    again, _ = pipeline.calibrate(repo.path, "main", profile="cpu", rounds=ROUNDS, settings=s)
    assert again.campaigns == 2 and again.rounds == 2 * ROUNDS and again.aa[0] == floor.aa[0]
    assert again.ar_decode >= floor.ar_decode and again.dspark_decode >= floor.dspark_decode


def test_the_first_scoring_of_an_engine_version_calibrates_first(repo):
    repo.branch("docs", files={"NOTES.md": "x\n"})
    out = score(repo, "docs", calibrate_first=True)
    assert out.calibrated_now and out.measurements.noise.calibrated
    assert "calibrated by this scoring first" in out.scorecard


# -- setup errors are loud -----------------------------------------------------------------------------------

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


def test_signed_receipt_verifies_and_records_the_raw_figures(repo, tmp_path):
    from evalbot.report.receipt import generate_keypair

    priv, pub = generate_keypair(tmp_path / "bot.pem")
    repo.branch("fast", knobs=FAST)
    out = score(repo, "fast", settings=settings(signing_key=str(priv)))
    statement = verify_file(Path(out.receipt.path), pub)
    pred = statement["predicate"]
    assert pred["verdict"]["tier"] == out.verdict.tier and pred["code"]["candidate_sha"] == out.candidate_sha
    assert len(pred["requests"]) == len(out.requests) and pred["method"]["window_seed"] == out.measurements.seed


# -- publishing ------------------------------------------------------------------------------------------------

def test_publish_to_the_local_forge(repo):
    repo.branch("fast", knobs=FAST)
    forge = LocalForge(repo.path)
    forge.open_pull("fast")
    forge.add_label(1, "eval-dspark:REJECT")  # stale from an earlier head
    out = score(repo, "fast", pr_number=1)
    result = pipeline.publish(out, forge, 1, settings())
    assert result.published
    assert forge.get_pull(1).labels == [f"eval-dspark:{out.verdict.tier}", f"eval:{out.verdict.tier}"]
    (comment,) = forge.comments(1)
    assert comment["body"] == out.scorecard
    (check,) = forge.checks(out.head_sha)
    assert (check["status"], check["conclusion"]) == ("completed", "success")
    assert Path(result.receipt_ref).read_text() == Path(out.receipt.path).read_text() == out.receipt.envelope
    repo.git("checkout", "-q", "fast")
    repo.commit("lossy now", knobs={"lossy_every": 2})
    repo.git("checkout", "-q", "main")
    stale = pipeline.publish(out, forge, 1, settings())
    assert not stale.published and "moved" in stale.reason


def test_publish_not_evaluated_clears_tier_labels(repo):
    repo.branch("bends", files={"harness/prompts/prose.txt": "short\n"})
    forge = LocalForge(repo.path)
    forge.open_pull("bends")
    forge.replace_labels(1, ("eval-dspark:", "eval:"), ["eval-dspark:S", "eval:S"])
    out = score(repo, "bends", pr_number=1)
    pipeline.publish(out, forge, 1, settings())
    assert forge.get_pull(1).labels == []
    assert "harness changed" in forge.comments(1)[0]["body"]
    # not evaluated must not pass a required check (neutral would): report/check_run.py, docs/deploy.md
    assert forge.checks(out.head_sha)[0]["conclusion"] == "action_required"


def test_the_clis_claim_is_alive_while_its_process_runs():
    import os
    import socket
    import subprocess
    import sys

    claimant = pipeline.local_claimant()
    host = socket.gethostname()
    assert claimant.owner == f"{host}:{os.getpid()}" and claimant.alive(claimant.owner)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert not claimant.alive(f"{host}:{int(gone.stdout)}")  # a CLI run that died mid-measurement
    assert not claimant.alive(f"{host}:garbage")
    assert not claimant.alive(f"another-host:{os.getpid()}")  # left by this box under an earlier hostname


def test_a_tree_claim_is_taken_over_only_when_dead_and_by_one_taker(tmp_path):
    from evalbot.decide import scorings
    from evalbot.decide.scorings import Claimant, TreeBusy, TreeKey

    docs, key = scorings.FileDocs(tmp_path), TreeKey("b" * 40, "t" * 40, "h", "cpu", "r")
    name, now = f"claim-{key.digest()}", [1000.0]
    alive = {"a": True}
    mk = lambda who: Claimant(who, lambda owner: alive.get(owner, False), lambda: now[0])  # noqa: E731
    with scorings.measuring(docs, key, mk("a")):
        with pytest.raises(TreeBusy, match=r"measuring it \(a\)"):
            with scorings.measuring(docs, key, mk("b")):
                pass
        now[0] += scorings.CLAIM_MAX_AGE_S + 1  # alive, but older than any scoring: a hung owner
        with scorings.measuring(docs, key, mk("b")):
            assert json.loads(docs.read_text(name))["owner"] == "b"
        assert docs.read_text(name) is None  # b released it; a's exit leaves b's (or nobody's) claim alone
    for junk in ("not json", '{"owner": 3}', "[]"):  # unreadable: nobody's
        docs.write_text(name, junk)
        with scorings.measuring(docs, key, mk("c")):
            pass
    # a takeover in progress (its lock fresh): wait; a takeover lock its taker left behind: cleared, then taken
    docs.write_text(name, json.dumps({"owner": "dead", "at": now[0]}))
    docs.write_text(f"{name}-takeover", json.dumps({"owner": "x", "at": now[0]}))
    with pytest.raises(TreeBusy, match="taking its claim over"):
        with scorings.measuring(docs, key, mk("d")):
            pass
    now[0] += scorings.TAKEOVER_MAX_AGE_S + 1
    with pytest.raises(TreeBusy):
        with scorings.measuring(docs, key, mk("d")):
            pass
    with scorings.measuring(docs, key, mk("d")):
        assert docs.read_text(f"{name}-takeover") is None


def test_a_workers_claim_is_alive_only_while_that_worker_runs_the_job(tmp_path):
    from evalbot.bot.jobs.ledger_stores import SqliteLedger
    from evalbot.bot.jobs.model import ScoreJob
    from evalbot.bot.worker.scoring import ledger_claimant

    ledger = SqliteLedger(tmp_path / "ledger.sqlite3")
    job = ScoreJob(repo="o/r", pr_number=1, head_sha="a" * 40, base_sha="b" * 40)
    now = [100.0]
    ledger.submit(job, now[0])
    assert ledger.claim(job.key, "box-a/1/w", now[0])
    mine = ledger_claimant(ledger, "box-a/1/w", job.key, stale_after=120, clock=lambda: now[0])
    assert mine.owner == f"box-a/1/w|{job.key}" and mine.alive(mine.owner)
    assert not mine.alive(f"box-b/2/w|{job.key}")  # the same job run by another worker: not this claim's owner
    now[0] += 121  # its heartbeat stopped: the box died
    assert not mine.alive(mine.owner)


def test_the_drafter_subject_is_a_directory_or_nothing(tmp_path):
    import os
    import subprocess

    repo = tmp_path / "r"
    (repo / "engine" / "dspark").mkdir(parents=True)
    os.symlink("../../elsewhere", repo / "engine" / "dspark" / "weights")  # a PR's symlink: a blob, not a tree
    run = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True, text=True).stdout  # noqa: E731
    run("init", "-q")
    run("add", "-A")
    run("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "symlink")
    assert gitops.subtree(repo, "HEAD", gitops.SHIPPED_DRAFTER) == ""
    (repo / "engine" / "dspark" / "weights").unlink()
    (repo / "engine" / "dspark" / "weights").mkdir()
    (repo / "engine" / "dspark" / "weights" / "w.bin").write_text("w")
    run("add", "-A")
    run("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "dir")
    assert gitops.subtree(repo, "HEAD", gitops.SHIPPED_DRAFTER) == run("rev-parse", "HEAD:engine/dspark/weights").strip()
    assert gitops.subtree(repo, "HEAD", "no/such/dir") == ""
