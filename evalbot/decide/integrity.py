"""Integrity: what the bot checks from outside about what each process did and sent.

PR code runs inside the measured process, so that process can print anything, patch any clock and
remember anything it was sent. The bot therefore believes none of it: it times every request itself,
chooses every prompt, verifies every DSpark stream with main's engine, and holds each process to the
contract. This module turns what the campaign recorded into findings:

- anything the measuring side already found (a malformed, extra or forged response, a wrong id or
  nonce, an error answer, a crash, a timeout, output nobody asked for);
- a generation with another number of tokens than was asked for;
- an answer faster than could have been computed: a PR response in less than `min_time_fraction` of
  main's time on the very same window *and* of main's median time for requests of that kind (model,
  mode, corpus, length): one main request slowed by something outside the bot (a loaded box) does not
  make an honest PR answer look impossible, while an answer that was never computed is fast against both.
  Judged only once main has answered at least MIN_MAIN_SAMPLES requests of that kind: after one round,
  main's "median" is that one request, and a finding ends the scoring at once (a REJECT for good);
- a report that cannot be true: a process that says it spent longer than the bot's clock saw it take;
- a greedy AR stream of the PR's (the main model's, or a guard's) that main's process, teacher-forcing
  it with its own copy of that model, does not find to be its greedy continuation (beyond the near-tie
  tolerance): the AR and guard floors are floors on computing the answer.

Attribution: findings on the PR's side are integrity failures (a gate: REJECT, with the reason). On
main's side, or in the bot's own environment, they are infrastructure errors: the ruler is broken.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from pydantic import BaseModel, Field

from evalbot.decide.records import Finding, Records, Ref
from evalbot.settings import IntegritySettings

# Main's requests of one kind the "faster than it could be computed" check needs before it judges any: with
# one, a single main request slowed 13x by other work on a two-core box (0.25 -> 3.2 s) made an honest PR
# answer "5x faster than main" and REJECTed it after round 1 (a test run beside a compile, 2026-12-05).
MIN_MAIN_SAMPLES = 2


class IntegrityReport(BaseModel):
    findings: list[Finding] = Field(default_factory=list)

    def of(self, ref: Ref | None) -> list[Finding]:
        return [f for f in self.findings if f.ref == ref]


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token (a length difference counts); None if identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    if len(a) != len(b):
        return min(len(a), len(b))
    return None


def _who(ref: Ref) -> str:
    return "main" if ref == "base" else "the PR"


def check_records(records: Records, cfg: IntegritySettings) -> IntegrityReport:
    findings = list(records.findings)
    seen: set[tuple] = set()

    def add(ref: Ref, process: int, where: str, message: str) -> None:
        key = (ref, message)
        if key not in seen:  # one line per kind of problem, not one per request
            seen.add(key)
            findings.append(Finding(ref=ref, process=process, where=where, message=message))

    by_window: dict[tuple, dict[str, float]] = {}
    main_times: dict[tuple, list[float]] = {}  # main's times per kind of request
    for g in records.generations:
        where = f"{g.corpus}@{g.ctx} {g.mode}" + ("" if g.model == "main" else f" ({g.model})")
        if len(g.tokens) != g.new_tokens:
            add(g.ref, g.process, where, f"{_who(g.ref)}'s process returned {len(g.tokens)} tokens where "
                f"{g.new_tokens} were asked for")
        rep = (g.reported.prefill_s or 0.0) + (g.reported.decode_s or 0.0)
        if rep > g.bot_s * (1 + cfg.clock_rel_tolerance) + cfg.clock_slack_s:
            add(g.ref, g.process, where, f"{_who(g.ref)}'s process reports {rep:.3f} s for a request the bot "
                f"timed at {g.bot_s:.3f} s from question to answer: a report that cannot be true")
        if g.round >= 0:
            kind = (g.model, g.mode, g.corpus, g.ctx, g.new_tokens)
            by_window.setdefault((g.round, kind, g.window.sha256), {})[g.ref] = g.bot_s
            if g.ref == "base":
                main_times.setdefault(kind, []).append(g.bot_s)
    for (rnd, kind, _w), t in by_window.items():
        mode = kind[1]
        if len(main_times.get(kind, [])) < MIN_MAIN_SAMPLES:
            continue  # checked again after the next round, over every window
        bar = cfg.min_time_fraction * min(t.get("base", 0.0), statistics.median(main_times.get(kind, [0.0])))
        if "head" in t and t["head"] < bar:
            add("head", -1, f"round {rnd + 1} {mode}",
                f"the PR answered in {t['head']:.3f} s what took main {t['base']:.3f} s on the same, never-seen "
                f"window: faster than {1 / cfg.min_time_fraction:.0f}x main is taken as an answer it did not compute")
    for v in records.verifications:
        if v.mode == "ar" and v.ref == "head" and v.mismatches:
            guard = v.model.removeprefix("guard:") if v.model != "main" else ""
            what = f"{guard} guard stream is not that guard's" if guard else "greedy AR stream is not main's"
            add("head", v.process, f"guard {guard}" if guard else f"{v.corpus}@{v.ctx} ar",
                f"the PR's {what} greedy continuation from token {v.mismatches[0]} on ({v.worst_gap:.2f} logits "
                f"below the top at worst; main's process, teacher-forcing the stream; near-ties within {v.tolerance:g} "
                f"allowed)")
    return IntegrityReport(findings=findings)
