"""What the check run "DSpark eval" concludes for each verdict, and where its Details link points.

GitHub lets a required check pass on `success`, `neutral` and `skipped` only, so the mapping is the
merge policy itself (docs/deploy.md, "The check run and branch protection"):

- scored (any tier, `none` included): `success`; the tier is the label, the check says "measured, nothing broke";
- REJECT: `failure`;
- not evaluated (the PR edits the harness): `action_required`; a maintainer must land the harness
  change on its own, and until then a required check blocks the merge (never `neutral`, which passes);
- infrastructure error (not a verdict, after every retry): `cancelled`; it blocks a required check
  without calling the PR slow or lossy, and the check's Re-run button (or /rescore) scores it again;
- superseded (the head or main moved): `skipped`; it is no longer the PR's head, so it gates nothing;
- waiting for `/ok-to-test` (a fork PR by a newcomer): `action_required`.
"""

from __future__ import annotations

CONCLUSIONS = {
    "scored": "success",
    "rejected": "failure",
    "not_evaluated": "action_required",
    "infra_error": "cancelled",
}
INFRA_CONCLUSION = CONCLUSIONS["infra_error"]
SUPERSEDED_CONCLUSION = "skipped"
AWAITING_APPROVAL_CONCLUSION = "action_required"
PASSING = frozenset({"success", "neutral", "skipped"})  # what GitHub counts as passing a required check


def check_conclusion(status: str) -> str:
    """The check run's conclusion for a verdict status; an unknown status never passes."""
    return CONCLUSIONS.get(status, "failure")


def details_url(public_url: str, pr_number: int | None, head_sha: str) -> str:
    """The dashboard page of a PR's scorings, at the scoring of `head_sha`; "" without a public URL."""
    if not public_url or pr_number is None:
        return ""
    return f"{public_url.rstrip('/')}/dashboard/pr/{pr_number}#head-{head_sha}"
