"""The tier vocabulary and label scheme, defined once: tier names and their order, the label prefixes,
the needs-rebase label. Everything that names a tier or a label reads it from here (through
`Settings.tiers` where the bands are configured)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

NONE_TIER = "none"  # scored, but no speedup was verified
REJECT_TIER = "REJECT"  # a gate failed
DEFAULT_BANDS = (("XS", 2.0), ("S", 3.5), ("M", 6.0), ("L", 10.0), ("XL", 18.0))  # name, lowest speedup in %
TIER_ORDER = (NONE_TIER, *(name for name, _ in DEFAULT_BANDS))  # lowest first; REJECT ranks below them all
DEFAULT_MIN_TIER = "S"  # the lowest tier automerge takes unless configured
TIER_LABEL_PREFIXES = ("eval-dspark:", "eval:")  # every tier is set as one label per prefix
NEEDS_REBASE_LABEL = "dspark-needs-rebase"  # main moved since the PR was scored
NEEDS_OK_TO_TEST_LABEL = "dspark-needs-ok-to-test"  # a fork PR waits for a maintainer's /ok-to-test


class TierBand(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    min_pct: float  # lower bound, inclusive, of the DSpark decode speedup in percent


class TierSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    bands: list[TierBand] = Field(default_factory=lambda: [TierBand(name=n, min_pct=p) for n, p in DEFAULT_BANDS])
    none_name: str = NONE_TIER
    reject_name: str = REJECT_TIER
    label_prefixes: tuple[str, ...] = TIER_LABEL_PREFIXES

    @field_validator("bands")
    @classmethod
    def _ascending(cls, bands: list[TierBand]) -> list[TierBand]:
        if not bands:
            raise ValueError("at least one tier band is needed")
        lows = [b.min_pct for b in bands]
        if lows != sorted(lows) or len(set(lows)) != len(lows):
            raise ValueError("tier bands must have strictly ascending min_pct")
        if lows[0] <= 0:
            raise ValueError("the lowest tier must start above 0%")
        return bands

    @property
    def order(self) -> tuple[str, ...]:
        """Every tier a scored PR can get, lowest first (REJECT is not among them)."""
        return (self.none_name, *(b.name for b in self.bands))

    def rank(self, tier: str) -> int:
        """Position in `order`; -1 for REJECT and for anything that is not a tier (which never merges)."""
        return self.order.index(tier) if tier in self.order else -1

    def labels_for(self, tier: str | None) -> list[str]:
        """`["eval-dspark:S", "eval:S"]`; no tier (not evaluated) -> no labels."""
        return [] if tier is None else [f"{prefix}{tier}" for prefix in self.label_prefixes]

    def is_tier_label(self, label: str) -> bool:
        return label.startswith(self.label_prefixes)

    def tier_of_label(self, label: str) -> str | None:
        for prefix in self.label_prefixes:
            if label.startswith(prefix):
                return label[len(prefix):]
        return None


DEFAULT_TIERS = TierSettings()
