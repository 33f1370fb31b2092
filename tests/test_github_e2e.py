"""End to end on one box, with the real scoring core and the fake harness (cpu profile):

signed webhook -> queue -> worker -> fetch from a bare git origin (refs/pull/N/head) -> evalbot.pipeline
score_refs -> publish -> labels, sticky scorecard, check run and receipt on the fake GitHub.
Also the PRs that must not win: one that edits the harness, one that prints fake result lines, and
one that reads the environment looking for the bot's secrets.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from starlette.testclient import TestClient

from evalbot.forge.base import CHECK_NAME
from evalbot.report.scorecard import SCORECARD_MARKER_PREFIX
from evalbot.settings.tiers import NEEDS_REBASE_LABEL
from evalbot.forge.github import GitHubForge
from evalbot.forge.github_retry import RetryPolicy
from evalbot.bot.jobs.ledger import DONE
from evalbot.bot.jobs.queue import JobQueue
from evalbot.bot.webhook.app import create_app
from evalbot.settings import load_settings
from evalbot.testing import fake_config_toml, make_fake_repo
from evalbot.bot.worker.main import build_worker
from evalbot.bot.worker.secrets import SECRET_ENV_VARS, scrub_secrets_from_environment
from fakegithub import FakeGitHub
from fakegithub.helpers import SECRET, payload, post_event

REPO = "octo/dspark"
BOX_CONFIG = 'box = "e2e-box"\n' + fake_config_toml()  # the fake harness's profile; a floor for sleep-timed fakes


def git(cwd, *args):
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout.strip()


class Deployment:
    """A developer repo, a bare origin with refs/pull/N/head, the box's clone, the fake GitHub, the bot."""

    def __init__(self, tmp_path, github: FakeGitHub, **settings):
        self.dev = make_fake_repo(tmp_path / "dev")
        self.origin = tmp_path / "origin.git"
        git(tmp_path, "clone", "-q", "--bare", str(self.dev.path), str(self.origin))
        self.box = tmp_path / "box"
        git(tmp_path, "clone", "-q", str(self.origin), str(self.box))
        (self.box / ".evalbot").mkdir()
        (self.box / ".evalbot" / "config.toml").write_text(BOX_CONFIG)
        self.github = github
        self.repo = github.add_repo(REPO, main_sha=self.dev.sha("main"))
        values = dict(repo=REPO, webhook_secret=SECRET, state_dir=tmp_path / "state", checkout_dir=self.box, profile="cpu")
        values.update(settings)
        self.settings = load_settings(environ={}, **values)
        self.queue = JobQueue.from_settings(self.settings)
        forge = GitHubForge.from_token("app-token", REPO, base_url=github.base_url, throttle=False,
                                       retry=RetryPolicy(attempts=2), sleep=lambda s: None, receipts_dir=self.settings.receipts_dir)
        self.worker = build_worker(self.settings, self.queue, forge_for=lambda repo: forge)
        self.client = TestClient(create_app(self.settings, self.queue))

    def open_pull(self, number: int, branch: str, **change) -> str:
        head = self.dev.branch(branch, **change)
        git(self.dev.path, "push", "-q", str(self.origin), f"{branch}:refs/pull/{number}/head")
        self.github.add_pull(REPO, number, head_sha=head, head_ref=branch, title=branch)
        event = payload("pull_request.opened")
        event["repository"]["full_name"] = REPO
        event["number"] = event["pull_request"]["number"] = number
        event["pull_request"]["head"].update(sha=head, ref=branch)
        event["pull_request"]["base"].update(sha=self.dev.sha("main"), ref="main")
        response = post_event(self.client, "pull_request", event)
        assert response.status_code == 202 and response.json()["status"] == "queued", response.text
        return head

    def run(self):
        self.queue.drain()


@pytest.fixture(scope="module")
def github():
    with FakeGitHub() as fake:
        yield fake


@pytest.mark.slow
def test_signed_webhook_to_published_score(tmp_path, github):
    bot = Deployment(tmp_path, github)
    head = bot.open_pull(1, "faster-verify", knobs={"dspark_speed": 2.5})
    bot.run()
    (record,) = bot.queue.ledger.for_pull(REPO, 1)
    assert record.state == DONE, record.note
    assert sorted(github.labels_on(REPO, 1)) == ["eval-dspark:XL", "eval:XL"]
    (card,) = github.comments_on(REPO, 1)
    assert card["body"].startswith(f"{SCORECARD_MARKER_PREFIX} v=2 head={head} -->")
    (run,) = github.check_runs_for(REPO, head)
    assert run["name"] == CHECK_NAME and run["status"] == "completed" and run["conclusion"] == "success"
    assert run["history"][:2] == ["queued", "in_progress"]
    receipts = {p: c for (b, p), c in bot.repo.files.items() if b == "evalbot-receipts" and p.startswith("receipts/pr-1/")}
    (receipt,) = receipts.values()
    envelope = json.loads(receipt)
    assert "payload" in envelope and "signatures" in envelope  # the DSSE envelope, stored as written


@pytest.mark.slow
def test_prs_that_must_not_win(tmp_path, github, monkeypatch):
    secrets = {name: f"s3cr3t-{name}" for name in SECRET_ENV_VARS}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    bot = Deployment(tmp_path, github)
    scrub_secrets_from_environment()  # as `evalbot worker` does at start
    harness_edit = bot.open_pull(2, "edit-the-ruler", knobs={"dspark_speed": 2.5},
                                 files={"harness/serve.py": "print('trust me')\n"})
    instant = bot.open_pull(3, "answers-without-computing", knobs={"instant": True})
    snooper = bot.open_pull(4, "read-the-env", knobs={"secret_probe": "s3cr3t-", "dspark_speed": 1.95})
    bot.run()

    assert github.labels_on(REPO, 2) == []  # not evaluated: main's harness is the only ruler
    (run,) = github.check_runs_for(REPO, harness_edit)
    assert run["conclusion"] == "action_required" and "harness changed" in run["output"]["title"]  # never passes

    assert "eval-dspark:REJECT" in github.labels_on(REPO, 3)  # faster than the work could be: not computed
    (run,) = github.check_runs_for(REPO, instant)
    assert run["conclusion"] == "failure"

    # the snooper looked through its environment, every /proc it could see, $HOME and /tmp for the
    # secrets the bot holds, and would have exited naming the place: it found none and was scored
    (run,) = github.check_runs_for(REPO, snooper)
    assert run["status"] == "completed" and run["conclusion"] == "success", run["output"]
    assert any(label.startswith("eval-dspark:") and label != "eval-dspark:REJECT" for label in github.labels_on(REPO, 4))


@pytest.mark.slow
def test_push_to_main_marks_and_rescores(tmp_path, github):
    bot = Deployment(tmp_path, github)
    bot.open_pull(5, "fast", knobs={"dspark_speed": 2.5})
    bot.run()
    bot.dev.commit("main: faster tokens", knobs={"token_ms": 0.9})
    git(bot.dev.path, "push", "-q", str(bot.origin), "main:main")
    new_main = bot.dev.sha("main")
    bot.repo.branches["main"] = new_main
    push = payload("push.branch")
    push["repository"]["full_name"] = REPO
    push["ref"], push["before"], push["after"] = "refs/heads/main", bot.repo.pulls[5].base_sha, new_main
    assert post_event(bot.client, "push", push).status_code == 202
    bot.queue.drain(max_tasks=1)  # only the main_moved chore: the new score is still queued
    assert NEEDS_REBASE_LABEL in github.labels_on(REPO, 5)
    bot.run()
    keys = [r.key for r in bot.queue.ledger.for_pull(REPO, 5) if r.state == DONE]
    assert any(key.endswith(f"..{new_main}") for key in keys)
    assert NEEDS_REBASE_LABEL not in github.labels_on(REPO, 5)
