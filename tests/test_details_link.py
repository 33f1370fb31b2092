"""The check run's Details link opens that scoring on the dashboard `evalbot serve` serves: the worker
records the scoring in the history, and the page at the link shows it at the linked anchor."""

from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import urlsplit

from starlette.testclient import TestClient

from evalbot.bot.webhook.app import create_app
from evalbot.history.store import SqliteHistory
from fakegithub.helpers import basic_publisher
from test_queue_worker import REPO, Rig, server  # noqa: F401  (server: a pytest fixture)


def test_the_details_link_opens_the_scoring_on_the_served_dashboard(server, tmp_path):  # noqa: F811
    rig = Rig(server, tmp_path, public_url="https://evalbot.example.org", webhook_secret="s3cret")
    history = SqliteHistory(tmp_path / "history.sqlite3")
    rig.worker.history = history

    def publisher(outcome, forge, pr_number, check_id=None):  # as pipeline.publish: says where the receipt went
        basic_publisher(outcome, forge, pr_number, check_id)
        return SimpleNamespace(receipt_ref=f"https://github.example/{REPO}/receipts/pr-{pr_number}.json")

    rig.worker.publisher = publisher
    pull = rig.pull(1)
    rig.queue.submit_score(rig.job(1))
    rig.run()
    (run,) = rig.gh.check_runs_for(REPO, pull.head_sha)
    link = urlsplit(run["details_url"])
    (entry,) = history.entries(repo=REPO)
    assert (entry.pr_number, entry.head_sha, entry.tier) == (1, pull.head_sha, "M")
    assert entry.receipt_ref.endswith("/receipts/pr-1.json")  # recorded again once the receipt was published
    client = TestClient(create_app(rig.worker.settings, rig.queue, history=history))
    page = client.get(link.path)
    assert page.status_code == 200 and f'id="{link.fragment}"' in page.text
    assert f"/dashboard/receipt/{entry.entry_id}.json" in page.text
    receipt = client.get(f"/dashboard/receipt/{entry.entry_id}.json")
    assert receipt.status_code == 200 and receipt.text == entry.receipt
    assert client.get("/dashboard").status_code == 200 and client.get("/dashboard/pr/99").status_code == 200
    assert client.get("/dashboard/scoring/not-an-id").status_code == 404
