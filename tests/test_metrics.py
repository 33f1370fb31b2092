"""/metrics counts what happens in the workers, through the ledger's shared counters: GitHub errors by
kind, rate-limit waits and their seconds, scoring durations by profile and verdict, jobs by state."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from evalbot.bot.jobs.ledger_stores import RedisLedger, SqliteLedger
from evalbot.bot.jobs.model import ScoreJob
from evalbot.bot.metrics import ServiceMetrics, forge_observer, record_duration
from evalbot.forge.github import GitHubForge
from evalbot.forge.github_retry import ForgeUnavailable, RetryPolicy
from fakegithub import FakeGitHub, fake_sha
from fakegithub.helpers import redis_url  # noqa: F401  (a pytest fixture)

REPO = "octo/dspark"


@pytest.fixture(params=["sqlite", "redis"])
def ledger(request, tmp_path):
    if request.param == "sqlite":
        return SqliteLedger(tmp_path / "ledger.sqlite3")
    return RedisLedger(request.getfixturevalue("redis_url"))


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_github_errors_and_rate_limit_waits_are_counted(ledger):
    with FakeGitHub() as fake:
        fake.add_repo(REPO)
        fake.add_pull(REPO, 7)
        forge = GitHubForge.from_token("app-token", REPO, base_url=fake.base_url, throttle=False,
                                       retry=RetryPolicy(attempts=3), sleep=lambda s: None, observer=forge_observer(ledger))
        fake.fail("POST", r"/comments$", 403, times=1, headers={"Retry-After": "7"},
                  message="You have exceeded a secondary rate limit. Please wait a few minutes before you try again.")
        forge.comment(7, "hello")
        fake.fail("GET", r"/pulls/7$", 502, times=5)
        with pytest.raises(ForgeUnavailable):
            forge.get_pull(7)
    got = _samples(ServiceMetrics(ledger).render().decode())
    assert got[("evalbot_github_errors_total", (("kind", "rate_limited"),))] == 1
    assert got[("evalbot_github_errors_total", (("kind", "server_error"),))] == 3
    assert got[("evalbot_github_rate_limit_waits_total", ())] == 1
    assert got[("evalbot_github_rate_limit_wait_seconds_total", ())] == 7


def test_scoring_durations_are_a_histogram_by_profile_and_verdict(ledger):
    for seconds in (250.0, 900.0, 950.0):
        record_duration(ledger, seconds, profile="gpu", status="scored")
    record_duration(ledger, 30.0, profile="cpu", status="infra_error")
    got = _samples(ServiceMetrics(ledger).render().decode())
    gpu = (("profile", "gpu"), ("status", "scored"))
    assert got[("evalbot_scoring_duration_seconds_count", gpu)] == 3
    assert got[("evalbot_scoring_duration_seconds_sum", gpu)] == 2100
    assert got[("evalbot_scoring_duration_seconds_bucket", tuple(sorted(gpu + (("le", "300.0"),))))] == 1
    assert got[("evalbot_scoring_duration_seconds_bucket", tuple(sorted(gpu + (("le", "1200.0"),))))] == 3
    assert got[("evalbot_scoring_duration_seconds_count", (("profile", "cpu"), ("status", "infra_error")))] == 1


def test_jobs_by_state_and_queue_depth(ledger):
    for n in (1, 2):
        ledger.submit(ScoreJob(repo=REPO, pr_number=n, head_sha=fake_sha(f"h{n}"), base_sha=fake_sha("b"), reason="opened"), 0.0)
    got = _samples(ServiceMetrics(ledger, pending=lambda: 5).render().decode())
    assert got[("evalbot_jobs", (("state", "queued"),))] == 2 and got[("evalbot_jobs", (("state", "done"),))] == 0
    assert got[("evalbot_queue_depth", ())] == 5 and got[("evalbot_ledger_up", ())] == 1


def test_a_ledger_that_does_not_answer_is_a_metric_not_an_error(tmp_path):
    ledger = SqliteLedger(tmp_path / "ledger.sqlite3")
    ledger.close()
    got = _samples(ServiceMetrics(ledger).render().decode())
    assert got[("evalbot_ledger_up", ())] == 0
