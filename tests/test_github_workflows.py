"""The .github/ files keep the trust split: untrusted PR code never meets a secret or a write token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is a test dependency (pyyaml in the test extra)")

GITHUB = Path(__file__).resolve().parents[1] / ".github"


def workflow(name: str) -> dict:
    return yaml.safe_load((GITHUB / "workflows" / name).read_text())


def code_of(name: str) -> str:
    """The workflow without its comment lines (they explain what the code must never do)."""
    lines = (GITHUB / "workflows" / name).read_text().splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith("#"))


def triggers(doc: dict) -> dict:
    return doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` key as True


def test_ci_runs_the_ci_script():
    doc = workflow("ci.yml")
    steps = doc["jobs"]["test"]["steps"]
    assert any(step.get("run") == "bash .ci/run" for step in steps)
    assert doc["permissions"] == {"contents": "read"}


def test_untrusted_eval_has_no_secrets_and_a_read_only_token():
    text = code_of("dspark-eval.yml")
    doc = workflow("dspark-eval.yml")
    assert "pull_request" in triggers(doc) and "pull_request_target" not in triggers(doc)
    assert doc["permissions"] == {"contents": "read"}
    assert "secrets." not in text and "GITHUB_TOKEN" not in text
    job = doc["jobs"]["score"]
    assert "self-hosted" in job["runs-on"] and "gpu" in job["runs-on"]
    checkout = job["steps"][0]
    assert checkout["with"]["ref"] == "${{ github.event.pull_request.base.sha }}"  # bot and harness from main
    assert checkout["with"]["persist-credentials"] is False
    assert any("evalbot score" in step.get("run", "") for step in job["steps"])
    assert any(step.get("uses", "").startswith("actions/upload-artifact") for step in job["steps"])


def test_trusted_publisher_never_runs_pr_code_and_never_labels_or_merges():
    text = code_of("dspark-eval-publish.yml")
    doc = workflow("dspark-eval-publish.yml")
    assert list(triggers(doc)) == ["workflow_run"]
    assert doc["permissions"] == {"actions": "read", "checks": "write"}
    assert "actions/checkout" not in text
    assert "runs-on" in doc["jobs"]["publish"] and "self-hosted" not in str(doc["jobs"]["publish"]["runs-on"])
    for forbidden in ("addLabels", "merge(", "pulls.merge", "createComment", "pull_request_target"):
        assert forbidden not in text


def test_app_manifest_asks_for_exactly_what_the_bot_uses():
    manifest = json.loads((GITHUB / "app-manifest.json").read_text())
    assert manifest["default_permissions"] == {
        "checks": "write", "pull_requests": "write", "issues": "write", "contents": "write", "metadata": "read",
        "merge_queues": "read",  # the merge_group event
    }
    # every event the webhook handles (ping comes unasked), and no other
    from evalbot.bot.webhook.payloads import EVENT_MODELS

    assert sorted(manifest["default_events"]) == sorted(set(EVENT_MODELS) - {"ping"})
    assert sorted(manifest["default_events"]) == ["check_run", "check_suite", "issue_comment", "merge_group", "pull_request", "push"]
    assert manifest["hook_attributes"]["url"].endswith("/webhook") and manifest["public"] is False
    assert manifest["redirect_url"].endswith("/dashboard")  # a page the bot serves (docs/deploy.md, the manifest flow)
