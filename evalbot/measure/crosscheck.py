"""What the bot checks of the PR's answers with main's engine (phases of `Campaign`).

- After each round's timed requests, main's process re-checks the round's streams: every DSpark
  stream of both refs, and the PR's greedy AR and guard streams, teacher-forced by main's engine (or
  main's copy of the guard) in main's own process. Per stream: where a token is not main's argmax
  beyond the near-tie tolerance (a mismatch) or within it (a near-tie).
- Before the rounds, the accuracy phase: both refs' log-probs over the full vocabulary on the same
  windows, compared by the bot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from evalbot.decide.accuracy import main_non_finite, summarize_accuracy
from evalbot.decide.records import Generation, Verification
from evalbot.measure import intake
from evalbot.measure.client import ProtocolViolation
from evalbot.measure.servers import Failure

if TYPE_CHECKING:
    from evalbot.measure.campaign import Campaign


def round_streams(c: Campaign, rnd: int) -> None:
    """The main model's streams of round `rnd`: DSpark (both refs; a wrong one of main's is the ruler
    broken) and the PR's AR (junk returned fast would otherwise pass the AR floor); then the guards'."""
    verifier = c.procs["base"][0]
    for g in [x for x in c.records.generations if x.round == rnd and x.model == "main"
              and (x.mode == "dspark" or (x.mode == "ar" and x.ref == "head"))]:
        r = c._ask(verifier, {"op": "verify", "prompt": window_ids(c, g), "tokens": g.tokens}, "verify")
        _record(c, g, rnd, r.head, verifier)
    guard_streams(c, rnd)


def guard_streams(c: Campaign, rnd: int) -> None:
    """The PR's guard streams, teacher-forced by main's copy of each guard (the same seeded weights): a
    guard answered with junk would otherwise pass the guard floors. Where main's harness cannot (an
    older one) or its engine fails at it, the streams stay unverified and the scorecard says why; that
    is main's limit, never the PR's finding."""
    if c.records.guards_unverified:
        return
    verifier = c.procs["base"][0]
    if verifier.client.info.get("verify_models") is not True:
        c.records.guards_unverified = "main's harness does not teacher-force guard models (verify_models)"
        return
    for g in [x for x in c.records.generations if x.round == rnd and x.ref == "head" and x.model != "main"]:
        try:
            r = c._ask(verifier, {"op": "verify", "model": g.model, "prompt": list(c.guard_prompts[g.window.sha256]),
                                  "tokens": g.tokens}, "verify")
        except Failure as e:
            if e.finding.ref != "base":
                raise
            c.records.guards_unverified = f"main's process could not teacher-force {g.model}: {e.finding.message}"[:300]
            return
        _record(c, g, rnd, r.head, verifier)


def window_ids(c: Campaign, g: Generation) -> list[int]:
    ids = c.corpora[g.window.corpus]
    return list(ids[g.window.offset : g.window.offset + g.window.length])


def _record(c: Campaign, g: Generation, rnd: int, head: dict, verifier) -> None:
    try:
        argmax, gap = intake.verify_answer(head, len(g.tokens))
    except ProtocolViolation as e:
        raise c._fail(verifier, "verify", str(e)) from None
    tol = c.plan.verify_tolerance
    off = [(i, d) for i, (t, a, d) in enumerate(zip(g.tokens, argmax, gap)) if t != a]
    c.records.verifications.append(Verification(
        ref=g.ref, process=g.process, round=rnd, mode=g.mode, model=g.model, corpus=g.corpus, ctx=g.ctx,
        window_sha256=g.window.sha256, tokens=len(g.tokens), mismatches=[i for i, d in off if d > tol],
        near_ties=[i for i, d in off if d <= tol], worst_gap=max((d for _, d in off), default=0.0), tolerance=tol))


def accuracy(c: Campaign) -> None:
    """Both refs' log-probs over the full vocabulary at the same positions of the same windows; the bot
    compares them (decide.accuracy). A dump that cannot be scored is the PR's finding: main's is checked first."""
    if not c.plan.accuracy or not c.plan.accuracy_positions:
        return
    c.progress("accuracy: both refs' log-probs over the full vocabulary")
    n = c.plan.accuracy_positions
    main_rows, pr_rows, targets = [], [], []
    pair = (c.procs["base"][0], c.procs["head"][0])
    for cell in c.plan.accuracy:
        w = c._take(cell.corpus, cell.ctx, [p.label for p in pair])  # exact: the positions scored are fixed
        start = cell.ctx - n
        rows = {}
        vocab = c.vocab or int(pair[0].client.info.get("vocab_size") or 0)  # main's, for both
        for p in pair:
            r = c._ask(p, {"op": "logprobs", "prompt": list(w.ids), "start": start}, "logprobs",
                          max_payload=4 * n * max(vocab, 1))
            if r.head.get("positions") != n or r.head.get("dtype") != "float32" or len(r.payload) != 4 * n * vocab:
                raise c._fail(p, f"logprobs ({p.label})", f"the log-prob dump has the wrong shape (main's is "
                                 f"{n} positions x {vocab} float32)")
            rows[p.ref] = np.frombuffer(r.payload, dtype=np.float32).reshape(n, vocab)
            bad = main_non_finite(rows[p.ref]) if p.ref == "base" else None
            if bad is not None:  # main's engine is the reference: no accuracy can be computed against it
                raise c._fail(p, f"logprobs ({p.label})", f"main's log-probs are not usable: {bad}")
        main_rows.append(rows["base"])
        pr_rows.append(rows["head"])
        targets += list(w.ids[start:])
    try:
        summary = summarize_accuracy(np.concatenate(main_rows), np.concatenate(pr_rows), targets)
    except Exception as e:  # noqa: BLE001 - main's rows are checked above: what fails is the PR's dump
        raise c._fail(pair[1], f"logprobs ({pair[1].label})",
                         f"the PR's log-prob dump cannot be scored: {type(e).__name__}: {str(e)[:300]}") from None
    c.records.accuracy = summary.model_dump(mode="json")
