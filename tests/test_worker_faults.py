"""The worker under faults and GitHub's conventions (issue 14): an outage at pick-up, fork PRs that wait
for /ok-to-test, the Re-run button, the merge queue, rate-limited refusals, the check's conclusions
and links. In-process, against the fake GitHub (the Rig of test_queue_worker)."""

from __future__ import annotations

import pytest

from evalbot.bot.jobs.ledger import DONE, FAILED, QUEUED, SUPERSEDED
from evalbot.bot.jobs.model import ApproveForTesting, MainMoved, MergeGroupCheck, Reply, RescoreRequest, Rerun, SetAutomerge
from evalbot.bot.metrics import counter_key
from evalbot.decide.verdict import infrastructure_error, not_evaluated_harness_changed
from evalbot.pipeline import publish
from evalbot.report.check_run import PASSING, check_conclusion
from evalbot.report.scorecard import SCORECARD_MARKER_PREFIX
from evalbot.settings import load_settings
from evalbot.settings.tiers import NEEDS_OK_TO_TEST_LABEL
from fakegithub import fake_sha
from fakegithub.helpers import fake_outcome
from test_queue_worker import REPO, Rig, _announcement_lands_when, server  # noqa: F401  (server: a pytest fixture)


@pytest.fixture
def rig(server, tmp_path):  # noqa: F811
    return Rig(server, tmp_path, forge_retry_seconds=0.01, public_url="https://evalbot.example.org")


# -- GitHub down when a job is picked up ------------------------------------------------------------------------
def test_a_github_outage_at_pick_up_waits_instead_of_failing(rig):
    """Fails without the fix: ~4.5 minutes of 502s at pick-up spent all three attempts and the job was
    failed for good; nothing queued it again when GitHub came back."""
    rig.pull(1)
    job = rig.job(1)
    rig.gh.fail("GET", r"/pulls/1$", 502, times=14)  # 7 pick-ups of 2 tries each: more than max_attempts
    rig.queue.submit_score(job)
    rig.run(include_scheduled_within=20)
    record = rig.ledger.get(job.key)
    assert record.state == DONE and record.attempts == 1 and record.forge_waits == 7
    assert rig.scored == [job.key]
    assert rig.ledger.counters()[counter_key("forge_outage_requeues")] == 7


def test_the_wait_for_github_grows_and_is_bounded(rig):
    rig.pull(1)
    rig.gh.fail("GET", r"/pulls/1$", 502, times=2)
    rig.worker.settings = rig.worker.settings.model_copy(update={"forge_retry_seconds": 1000.0})
    rig.queue.submit_score(rig.job(1))
    rig.run()
    record = rig.ledger.get(rig.job(1).key)
    assert record.state == QUEUED and record.attempts == 0 and "trying again in 600s" in record.note


def test_a_scorer_error_still_counts_as_an_attempt(rig):
    rig.pull(1)
    rig.fail_scorer = 99
    rig.queue.submit_score(rig.job(1))
    rig.run()
    assert rig.ledger.get(rig.job(1).key).state == FAILED


# -- fork PRs wait for a maintainer's /ok-to-test -----------------------------------------------------------------
def _fork_pull(rig, number=1, association="FIRST_TIME_CONTRIBUTOR"):
    return rig.pull(number, head_repo="stranger/dspark", author="stranger", author_association=association)


def test_a_fork_pull_by_a_newcomer_is_not_run_until_a_maintainer_says_ok_to_test(rig):
    """Fails without the fix: every opened PR was scored, whoever opened it (PR code ran on the box)."""
    pull = _fork_pull(rig)
    rig.queue.submit_score(rig.job(1))
    rig.run()
    assert rig.scored == [] and rig.ledger.get(rig.job(1).key).state == SUPERSEDED
    (note,) = rig.gh.comments_on(REPO, 1)
    assert note["body"].startswith(SCORECARD_MARKER_PREFIX) and "`/ok-to-test`" in note["body"] and "@stranger" in note["body"]
    assert NEEDS_OK_TO_TEST_LABEL in rig.gh.labels_on(REPO, 1)
    (run,) = rig.gh.check_runs_for(REPO, pull.head_sha)
    assert run["conclusion"] == "action_required" and run["conclusion"] not in PASSING and "/ok-to-test" in run["output"]["title"]

    rig.queue.submit_chore(ApproveForTesting(repo=REPO, pr_number=1, requested_by="maintainer"))
    rig.run()
    assert rig.scored == [rig.job(1).key] and NEEDS_OK_TO_TEST_LABEL not in rig.gh.labels_on(REPO, 1)
    (card,) = rig.gh.comments_on(REPO, 1)  # the same sticky comment, now the scorecard
    assert "/ok-to-test" not in card["body"] and "| DSpark eval | M |" in card["body"]

    pull.head_sha = fake_sha("a later push")  # the approval was for the head a maintainer saw, not this one
    rig.queue.submit_score(rig.job(1))
    rig.run()
    assert len(rig.scored) == 1 and NEEDS_OK_TO_TEST_LABEL in rig.gh.labels_on(REPO, 1)
    rig.queue.submit_chore(ApproveForTesting(repo=REPO, pr_number=1, requested_by="maintainer"))  # a new /ok-to-test
    rig.run()
    assert len(rig.scored) == 2


def test_ok_to_test_does_not_approve_a_head_pushed_after_the_comment(rig):
    """The author pushes between the maintainer's comment and the bot acting on it: the new head is not the
    code the maintainer looked at, so it is not run; a new /ok-to-test (written after the push) runs it."""
    pull = _fork_pull(rig)
    rig.queue.submit_score(rig.job(1))
    rig.run()
    commented = rig.clock.now + 5  # the maintainer comments on head A ...
    rig.clock.now += 10
    pull.head_sha = fake_sha("pushed right after")  # ... and B lands (the webhook records it) before the chore runs
    rig.queue.submit_score(rig.job(1))
    rig.run()
    rig.queue.submit_chore(ApproveForTesting(repo=REPO, pr_number=1, requested_by="maintainer", commented_at=commented))
    rig.run()
    assert rig.scored == [] and NEEDS_OK_TO_TEST_LABEL in rig.gh.labels_on(REPO, 1)
    assert "moved to" in rig.gh.comments_on(REPO, 1)[-1]["body"]
    rig.queue.submit_chore(ApproveForTesting(repo=REPO, pr_number=1, requested_by="maintainer", commented_at=rig.clock.now + 1))
    rig.run()
    assert rig.scored == [rig.job(1).key]


def test_ok_to_test_and_rescore_need_write_access_and_automerge_maintain(rig):
    """Fails without the fix: MEMBER/COLLABORATOR (org members without access, read-only collaborators)
    ran /ok-to-test, /rescore and /automerge; the worker now asks GitHub for the commenter's role."""
    _fork_pull(rig)
    repo = rig.gh.repo(REPO)
    repo.permissions.update({"reader": "read", "writer": "write"})
    for chore in (ApproveForTesting(repo=REPO, pr_number=1, requested_by="reader"),
                  RescoreRequest(repo=REPO, pr_number=1, requested_by="reader"),
                  SetAutomerge(repo=REPO, pr_number=1, enabled=True, requested_by="writer")):
        rig.queue.submit_chore(chore)
        rig.run()
    assert rig.scored == [] and rig.ledger.get_flag(f"automerge:{REPO}") is None
    bodies = [c["body"] for c in rig.gh.comments_on(REPO, 1)]
    assert sum("needs write access" in b and "(yours: read)" in b for b in bodies) == 2
    assert any("`/automerge on|off` needs maintain access" in b for b in bodies)
    rig.gh.fail("GET", r"/collaborators/.*/permission$", 403, times=1)  # lookup fails: refused, one line
    rig.queue.submit_chore(ApproveForTesting(repo=REPO, pr_number=1, requested_by="writer2"))
    rig.run()
    assert rig.scored == [] and "could not check your permission" in rig.gh.comments_on(REPO, 1)[-1]["body"]
    rig.queue.submit_chore(ApproveForTesting(repo=REPO, pr_number=1, requested_by="writer"))
    rig.run()
    assert len(rig.scored) == 1


def test_a_fork_author_with_write_access_needs_no_ok_to_test_whatever_the_association(rig):
    _fork_pull(rig, association="NONE")
    rig.gh.repo(REPO).permissions["stranger"] = "write"
    rig.queue.submit_score(rig.job(1))
    rig.run()
    assert len(rig.scored) == 1


def test_a_member_without_access_still_needs_ok_to_test(rig):
    _fork_pull(rig, association="MEMBER")  # any org member; no access to this repository
    rig.queue.submit_score(rig.job(1))
    rig.run()
    assert rig.scored == [] and NEEDS_OK_TO_TEST_LABEL in rig.gh.labels_on(REPO, 1)


def test_a_held_job_completes_the_check_run_its_announcement_is_still_creating(rig):
    """Fails without the fix: the hold created a check run of its own while the queued announcement (another
    consumer thread) was creating one, which then stayed `queued` on the PR forever."""
    pull = _fork_pull(rig)
    job = rig.job(1)
    rig.ledger.submit(job, rig.clock())
    rig.queue.enqueue_key(job.key)
    timers = _announcement_lands_when(rig, rig.forge, "upsert_sticky_comment", job)  # as the hold begins
    rig.run()
    timers[0].join()
    assert rig.ledger.get(job.key).state == SUPERSEDED
    (run,) = rig.gh.check_runs_for(REPO, pull.head_sha)
    assert run["status"] == "completed" and run["conclusion"] == "action_required"


@pytest.mark.parametrize("association, role", [("OWNER", "admin"), ("MEMBER", "maintain"), ("COLLABORATOR", "write")])
def test_a_fork_pull_by_a_maintainer_is_scored(rig, association, role):
    _fork_pull(rig, association=association)
    rig.gh.repo(REPO).permissions["stranger"] = role  # GitHub's answer decides, not the association
    rig.queue.submit_score(rig.job(1))
    rig.run()
    assert rig.scored == [rig.job(1).key]


def test_a_branch_of_the_repository_itself_needs_no_approval(rig):
    rig.pull(1, author="someone", author_association="NONE")  # pushing a branch here takes write access
    rig.queue.submit_score(rig.job(1))
    rig.run()
    assert len(rig.scored) == 1


def test_an_allowlisted_author_needs_no_approval(server, tmp_path):  # noqa: F811
    rig = Rig(server, tmp_path, command_allowlist=frozenset({"stranger"}))
    _fork_pull(rig)
    rig.queue.submit_score(rig.job(1))
    rig.run()
    assert len(rig.scored) == 1


def test_main_moving_does_not_queue_unapproved_fork_pulls(rig):
    _fork_pull(rig, 1)
    rig.pull(2)
    new_main = fake_sha("main moved")
    rig.repo.branches["main"] = new_main
    rig.queue.submit_chore(MainMoved(repo=REPO, main_sha=new_main))
    rig.run()
    assert [k.split("#")[1].split("@")[0] for k in rig.scored] == ["2"] and rig.ledger.for_pull(REPO, 1) == []


# -- the Re-run button -----------------------------------------------------------------------------------------------
def test_rerun_scores_the_pull_again(rig):
    pull = rig.pull(1)
    rig.queue.submit_score(rig.job(1))
    rig.run()
    rig.queue.submit_chore(Rerun(repo=REPO, head_sha=pull.head_sha, pr_numbers=[1], requested_by="maintainer"))
    rig.run()
    assert len(rig.scored) == 2 and rig.gh.comments_on(REPO, 1)[0]["body"].count("DSpark eval") == 1


def test_rerun_of_a_check_suite_finds_a_fork_pull_by_its_head(rig):
    pull = _fork_pull(rig, association="COLLABORATOR")
    rig.gh.repo(REPO).permissions["stranger"] = "write"  # a collaborator with write access: no /ok-to-test
    rig.queue.submit_chore(Rerun(repo=REPO, head_sha=pull.head_sha, pr_numbers=[], requested_by="maintainer"))
    rig.run()
    assert rig.scored == [rig.job(1).key]


def test_check_runs_carry_the_job_key_and_a_details_link(rig):
    """Fails without the fix: check runs had no external_id (Re-run could not name the job) and no details_url."""
    pull = rig.pull(1)
    rig.queue.submit_score(rig.job(1))
    rig.run()
    (run,) = rig.gh.check_runs_for(REPO, pull.head_sha)
    assert run["external_id"] == rig.job(1).key
    assert run["details_url"] == f"https://evalbot.example.org/dashboard/pr/1#head-{pull.head_sha}"


# -- the merge queue ----------------------------------------------------------------------------------------------------
def test_merge_group_check_carries_the_verdict_of_the_queued_head(rig):
    pull = rig.pull(1)
    rig.queue.submit_score(rig.job(1))
    rig.run()
    group_sha = fake_sha("merge group commit")
    rig.queue.submit_chore(MergeGroupCheck(repo=REPO, head_sha=group_sha, base_sha=rig.repo.branches["main"],
                                           head_ref=f"refs/heads/gh-readonly-queue/main/pr-1-{pull.head_sha}"))
    rig.run()
    (run,) = rig.gh.check_runs_for(REPO, group_sha)
    assert run["name"] == "DSpark eval" and run["conclusion"] == "success" and "merge queue" in run["output"]["title"]


def test_merge_group_of_an_unscored_head_does_not_pass(rig):
    pull = rig.pull(1)
    group_sha = fake_sha("merge group commit 2")
    rig.queue.submit_chore(MergeGroupCheck(repo=REPO, head_sha=group_sha, base_sha=rig.repo.branches["main"],
                                           head_ref=f"gh-readonly-queue/main/pr-1-{pull.head_sha}"))
    rig.run()
    (run,) = rig.gh.check_runs_for(REPO, group_sha)
    assert run["conclusion"] not in PASSING and "no score" in run["output"]["title"]


# -- replies anyone can provoke are rate-limited --------------------------------------------------------------------------
def test_refusals_are_rate_limited_per_person_and_pull(rig):
    """Fails without the fix: anyone could make the bot reply as often as they liked."""
    rig.pull(1)
    refusal = Reply(repo=REPO, pr_number=1, template="comment_refusal.md.j2", context={"login": "x", "command": "/rescore"},
                    rate_key=f"{REPO}#1:x")
    for _ in range(4):
        rig.queue.submit_chore(refusal)
    rig.queue.submit_chore(refusal.model_copy(update={"rate_key": f"{REPO}#1:y"}))
    rig.run()
    assert len(rig.gh.comments_on(REPO, 1)) == 2
    rig.clock.now += 3601
    rig.queue.submit_chore(refusal)
    rig.run()
    assert len(rig.gh.comments_on(REPO, 1)) == 3


# -- what each verdict concludes ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("status, conclusion", [("scored", "success"), ("rejected", "failure"),
                                                ("not_evaluated", "action_required"), ("infra_error", "cancelled")])
def test_each_verdict_concludes_deliberately(status, conclusion):
    assert check_conclusion(status) == conclusion
    assert (conclusion in PASSING) == (status == "scored")


@pytest.mark.parametrize("verdict", [not_evaluated_harness_changed(["harness/tau_check.py"]), infrastructure_error("round 1", "boom")],
                         ids=["not_evaluated", "infra_error"])
def test_a_published_verdict_that_is_not_a_score_does_not_pass_a_required_check(rig, verdict):
    """Fails without the fix: "not evaluated" concluded `neutral`, which passes a required check."""
    pull = rig.pull(1)
    outcome = fake_outcome(rig.job(1)).model_copy(update={"verdict": verdict, "check": None, "measurements": None})
    settings = load_settings(environ={}, repo=REPO, public_url="https://evalbot.example.org")
    assert publish(outcome, rig.forge, 1, settings).published
    (run,) = rig.gh.check_runs_for(REPO, pull.head_sha)
    assert run["conclusion"] == check_conclusion(verdict.status) and run["conclusion"] not in PASSING
    assert run["details_url"].startswith("https://evalbot.example.org/dashboard/pr/1")


def test_the_worker_checks_private_corpora_and_warns_when_they_are_the_public_ones(tmp_path):
    from evalbot.bot.worker.preflight import _corpora, worker_warnings
    from evalbot.settings import load_settings

    public = load_settings(environ={}, repo="octo/dspark", state_dir=tmp_path / "s")
    assert _corpora(public) == [] and "EVALBOT_CORPORA_DIR is unset" in worker_warnings(public)[0]
    private = tmp_path / "corpora"
    private.mkdir()
    (private / "code.txt").write_text("x")
    s = load_settings(environ={}, repo="octo/dspark", state_dir=tmp_path / "s", corpora_dir=private)
    assert _corpora(s) == [f"EVALBOT_CORPORA_DIR: {str(private)!r} lacks prose.txt"] and worker_warnings(s) == []
    (private / "prose.txt").write_text("y")
    assert _corpora(s) == []
