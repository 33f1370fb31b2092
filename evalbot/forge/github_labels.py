"""The labels the GitHub adapter writes: which to remove and add for a new tier, and the colour and
description of a label it creates (tier labels greener with the tier, REJECT red, needs-rebase yellow)."""

from __future__ import annotations

from pathlib import Path

from evalbot.report.render import render
from evalbot.settings.tiers import DEFAULT_TIERS, NEEDS_OK_TO_TEST_LABEL, NEEDS_REBASE_LABEL, TierSettings


def labels_to_change(current: list[str], prefixes: tuple[str, ...], new_labels: list[str]) -> tuple[list[str], list[str]]:
    """(labels to remove, labels to add) so that no label with one of `prefixes` remains but `new_labels`."""
    wanted = list(dict.fromkeys(new_labels))
    remove = [name for name in current if name.startswith(prefixes) and name not in wanted]
    add = [name for name in wanted if name not in current]
    return remove, add


_RANK_COLOURS = ("cfd3d7", "c2e0c6", "a2eeef", "7fd8be", "0e8a16", "006b3c")  # none, then ever greener tiers
_REJECT_COLOUR, _NEEDS_REBASE_COLOUR, _OTHER_COLOUR = "b60205", "fbca04", "ededed"


def label_style(name: str, tiers: TierSettings = DEFAULT_TIERS, templates: Path | None = None) -> tuple[str, str]:
    """Colour (hex, no #) and one-line description for a label the bot creates."""
    tier = tiers.tier_of_label(name) or ""
    rank = tiers.rank(tier)
    if name in (NEEDS_REBASE_LABEL, NEEDS_OK_TO_TEST_LABEL):
        colour = _NEEDS_REBASE_COLOUR
    elif tier == tiers.reject_name:
        colour = _REJECT_COLOUR
    elif rank >= 0:
        colour = _RANK_COLOURS[min(rank, len(_RANK_COLOURS) - 1)]
    else:
        colour = _OTHER_COLOUR
    description = render("gh_label_description.txt.j2", templates=templates, name=name, tier=tier, tiers=tiers,
                         needs_rebase=NEEDS_REBASE_LABEL, needs_ok_to_test=NEEDS_OK_TO_TEST_LABEL)
    return colour, description.strip()[:100]
