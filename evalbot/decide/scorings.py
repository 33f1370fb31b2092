"""One verdict per (main SHA, candidate tree, harness digest, profile): the scorings a box has measured.

Every push gets a new head SHA, but an empty amend, a second PR with the same code or a close/reopen
measures the very same candidate tree (the merge into main's tip) with the very same ruler. Measuring
it again would be a free re-roll of a noisy measurement: best of N. So `evalbot.pipeline.score_refs`
measures a tree once and re-issues that verdict (a new receipt for the new head, saying whose
measurement it is) to every later head with the same tree. A maintainer-forced rescore may measure
again, but the published verdict is then the LOWEST tier over every decided scoring of that tree
(`effective`), never the best: a re-run can lower a tier, not raise it.

Kept as JSON documents (never pickled), one per tree (`<key digest>`) and, per PR and main SHA, one
listing the distinct trees scored (`pr-<digest>`: the scorecard says "scoring k of this PR against
this main"); a document or a row that does not decode is ignored. Where: the state dir
(`FileDocs`, one box; the CLI) or any string store (`KvDocs`: the bot's shared ledger, so that on a
deployment of many boxes a tree measured on one is not measured again on another).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from evalbot.decide.outcome import ScoreOutcome
from evalbot.errors import EvalbotError
from evalbot.settings.tiers import TierSettings

log = logging.getLogger("evalbot.scorings")

SCORINGS_DIR = "scorings"
SCORINGS_VERSION = 1
REUSABLE = ("scored", "rejected")  # measured verdicts; an infrastructure error or not-evaluated is not one


@dataclass(frozen=True)
class TreeKey:
    base_sha: str
    candidate_tree: str
    harness_digest: str
    profile: str
    ruler: str = ""  # a digest of what else decides a verdict (`ruler_digest`): other settings, another scoring

    def digest(self) -> str:
        return _digest(asdict(self))


NOT_THE_RULER = ("box", "templates_dir", "stderr_tail_lines", "remote", "signing_key")  # words and places, not the verdict


def ruler_digest(scoring_settings: dict, **run: object) -> str:
    """What decides a verdict besides the tree and the harness: the scoring settings (thresholds, tiers,
    statistics, profiles, sandbox, ...) and how the run was asked for (rounds, budget, calibration). A
    verdict is re-issued only under the same ruler: other thresholds, a sandbox turned off or a fixed
    number of rounds measure again."""
    return _digest({"settings": {k: v for k, v in scoring_settings.items() if k not in NOT_THE_RULER}, "run": run})


def _digest(doc: dict) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


class Docs(Protocol):
    """Where the scorings' JSON documents live: text by name."""

    def read_text(self, name: str) -> str | None: ...

    def write_text(self, name: str, text: str) -> None: ...

    def insert_text(self, name: str, text: str) -> bool:
        """Write only if no document has that name (atomically); False when one has."""
        ...

    def delete(self, name: str) -> None: ...


class FileDocs:
    """`<state dir>/scorings/<name>.json`, written atomically."""

    def __init__(self, state_dir: Path):
        self.dir = state_dir / SCORINGS_DIR

    def read_text(self, name: str) -> str | None:
        try:
            return (self.dir / f"{name}.json").read_text()
        except (OSError, UnicodeDecodeError):
            return None

    def write_text(self, name: str, text: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".scorings-")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, self.dir / f"{name}.json")

    def insert_text(self, name: str, text: str) -> bool:
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.dir / f"{name}.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return True

    def delete(self, name: str) -> None:
        (self.dir / f"{name}.json").unlink(missing_ok=True)


class KvDocs:
    """Any string store, e.g. the ledger's (`Ledger.get_doc`, `set_doc`, `insert_doc`, `delete_doc` of one
    namespace)."""

    def __init__(self, get: Callable[[str], str | None], put: Callable[[str, str], None],
                 insert: Callable[[str, str], bool], delete: Callable[[str], None]):
        self.read_text, self.write_text = get, put  # type: ignore[method-assign]
        self.insert_text, self.delete = insert, delete  # type: ignore[method-assign]


# -- one measurement of a tree at a time ------------------------------------------------------------
class TreeBusy(EvalbotError):
    """Another scoring of the same tree against the same main is measuring it now: this one must wait, then
    find that scoring's verdict (two boxes measuring one tree side by side would be a best-of-two)."""


CLAIM_MAX_AGE_S = 12 * 3600.0  # no scoring measures this long: an older claim is a dead one's
TAKEOVER_MAX_AGE_S = 60.0  # a takeover takes milliseconds: an older takeover lock is a dead taker's


@dataclass(frozen=True)
class Claimant:
    """Who measures (`owner`, unique to this attempt), and how to tell whether another claim's owner is still
    measuring (`alive`): a claim whose owner is not alive (a box or process that died mid-measurement), or
    older than CLAIM_MAX_AGE_S, is taken over."""

    owner: str
    alive: Callable[[str], bool]
    clock: Callable[[], float] = time.time


@contextmanager
def measuring(where: Path | Docs, key: TreeKey, claimant: Claimant) -> Iterator[None]:
    """Hold the tree's claim while it is measured and stored: raises TreeBusy while another claimant that is
    alive holds it; released on the way out, however the measurement ends."""
    docs, name = _docs(where), f"claim-{key.digest()}"
    mine = json.dumps({"owner": claimant.owner, "at": claimant.clock()})
    if not docs.insert_text(name, mine):
        _take_over(docs, name, mine, claimant)
    try:
        yield
    finally:
        if _claim(docs.read_text(name))[0] == claimant.owner:
            docs.delete(name)


def _take_over(docs: Docs, name: str, mine: str, claimant: Claimant) -> None:
    """The claim is held: TreeBusy if its owner is alive; else replace it, one taker at a time (a takeover
    lock, and the claim read again under it, so that two takers never both measure)."""
    text = docs.read_text(name)
    held, at = _claim(text)
    if held and held != claimant.owner and claimant.clock() - at < CLAIM_MAX_AGE_S and claimant.alive(held):
        raise TreeBusy(f"another scoring of this tree against this main is measuring it ({held}); "
                       "this one waits for its verdict")
    lock = f"{name}-takeover"
    if not docs.insert_text(lock, mine):
        if claimant.clock() - _claim(docs.read_text(lock))[1] > TAKEOVER_MAX_AGE_S:
            docs.delete(lock)  # left by a taker that died: the next try takes over
        raise TreeBusy("another scoring of this tree is taking its claim over; this one waits")
    try:
        taken = docs.read_text(name) != text  # replaced since it was judged: by another taker
        if not taken:
            docs.delete(name)
        if taken or not docs.insert_text(name, mine):
            raise TreeBusy("another scoring of this tree took its claim over first; this one waits")
    finally:
        docs.delete(lock)


def _claim(text: str | None) -> tuple[str, float]:
    """(owner, when) of a claim; ("", 0) when there is none or it does not parse (nobody's: taken over)."""
    try:
        raw = json.loads(text) if text else {}
        owner, at = raw.get("owner", ""), float(raw.get("at", 0.0))
    except (ValueError, TypeError, AttributeError):
        return "", 0.0
    return (owner, at) if isinstance(owner, str) else ("", 0.0)


def _docs(where: Path | Docs) -> Docs:
    return FileDocs(where) if isinstance(where, Path) else where


def _read(docs: Docs, name: str) -> dict | None:
    text = docs.read_text(name)
    if text is None:
        return None
    try:
        raw = json.loads(text)
    except ValueError:
        log.error("ignored scorings document %s: not JSON", name)
        return None
    if not isinstance(raw, dict) or raw.get("version") != SCORINGS_VERSION:
        log.error("ignored scorings document %s: not version %d", name, SCORINGS_VERSION)
        return None
    return raw


def _write(docs: Docs, name: str, doc: dict) -> None:
    docs.write_text(name, json.dumps(doc, sort_keys=True) + "\n")


def load_scorings(where: Path | Docs, key: TreeKey) -> list[ScoreOutcome]:
    """The measured scorings of this tree, oldest first; rows that do not decode (or belong to another
    key) are left out. `where`: the state dir, or a Docs store."""
    raw = _read(_docs(where), key.digest())
    if raw is None or raw.get("key") != asdict(key) or not isinstance(raw.get("scorings"), list):
        return []
    out = []
    for row in raw["scorings"]:
        try:
            outcome = ScoreOutcome.model_validate(row)
        except (ValidationError, ValueError, TypeError) as exc:
            log.error("ignored a stored scoring that does not decode (%s)", type(exc).__name__)
            continue
        if (outcome.base_sha, outcome.candidate_tree, outcome.harness_digest, outcome.profile) == (
                key.base_sha, key.candidate_tree, key.harness_digest, key.profile) and outcome.verdict.status in REUSABLE:
            out.append(outcome)
    return out


def store_scoring(where: Path | Docs, key: TreeKey, outcome: ScoreOutcome) -> int:
    """Keep one more measured scoring of this tree (no scorecard, check text or receipt: those are
    re-made for each head). Returns how many are kept now."""
    kept = load_scorings(where, key)
    slim = outcome.model_copy(update={"scorecard": "", "check": None, "receipt": None})
    rows = [o.model_dump(mode="json") for o in [*kept, slim]]
    _write(_docs(where), key.digest(), {"version": SCORINGS_VERSION, "key": asdict(key), "scorings": rows})
    return len(rows)


def undecided(outcome: ScoreOutcome) -> bool:
    """A scoring that ran out of rounds before it could decide ("a larger budget or /rescore decides")."""
    return outcome.verdict.status == "scored" and outcome.verdict.reason.startswith("undecided")


def _speed_only_reject(outcome: ScoreOutcome) -> bool:
    """A REJECT whose failed gates are all speed gates (AR, DSpark total time, guards): a measurement
    like a tier, which a later scoring of the tree replaces. A wrong stream, an accuracy failure or an
    integrity finding is the PR's conclusively and stays."""
    failed = [g.gate for g in outcome.verdict.gates if g.status == "fail"]
    return outcome.verdict.status == "rejected" and bool(failed) and all(
        g in ("ar", "dspark") or g.startswith("guard:") for g in failed)


def effective(scorings: list[ScoreOutcome], tiers: TierSettings) -> ScoreOutcome:
    """The scoring that stands for the tree: the lowest tier over the decided scorings (REJECT lowest;
    on a tie the latest), so that measuring again never raises a tier. An undecided scoring (out of
    rounds) is no evidence against a tier and counts only when no scoring decided; a REJECT on speed
    gates alone counts only while it is the latest (a maintainer's re-measurement can clear a slow
    reading, as it can lower a tier; a REJECT on a wrong stream, accuracy or integrity stays)."""
    if not scorings:
        raise ValueError("no scorings")
    decided = [s for s in scorings if not undecided(s)] or scorings
    decided = [s for s in decided[:-1] if not _speed_only_reject(s)] + decided[-1:]
    best = decided[-1]
    for s in reversed(decided):
        if tiers.rank(s.tier or "") < tiers.rank(best.tier or ""):
            best = s
    return best


def pr_tree_number(where: Path | Docs, repo: str, pr_number: int, base_sha: str, tree: str) -> int:
    """1-based: which distinct candidate tree of PR `pr_number` against `base_sha` this is (a tree seen
    before keeps its number)."""
    docs, ident = _docs(where), {"repo": repo, "pr": pr_number, "base_sha": base_sha}
    name = f"pr-{_digest(ident)}"
    raw = _read(docs, name)
    trees = raw.get("trees") if raw is not None and raw.get("pr") == ident else None
    trees = [t for t in trees if isinstance(t, str)] if isinstance(trees, list) else []
    if tree not in trees:
        trees.append(tree)
        _write(docs, name, {"version": SCORINGS_VERSION, "pr": ident, "trees": trees})
    return trees.index(tree) + 1
