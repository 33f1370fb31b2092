"""python -m harness.reverify --serve — re-check token streams with THIS tree's engine (the bot runs
it from main's worktree): every token must be the teacher-forced argmax after the prompt and the
tokens before it. A near-tie (the chosen token's logit within --tolerance of the maximum) passes,
because batched and single-token kernels may round differently there; the worst gap is reported.

Serve mode reads one JSON request a line on stdin — {"prompt": NAME, "ctx": N, "sha256": H,
"tokens": [...]} — and answers one line on stdout: {"ok": bool, "worst_gap": float, "reason": str}."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from harness.prompts import exact_prompt, token_digest


def check(engine, request: dict, tolerance: float) -> dict:
    ids = exact_prompt(engine.tokenizer, request["prompt"], int(request["ctx"]))
    if request.get("sha256") and token_digest(ids) != request["sha256"]:
        return {"ok": False, "worst_gap": None, "reason": "the stream continues a different prompt than main builds"}
    tokens = [int(t) for t in request["tokens"]]
    if not tokens:
        return {"ok": False, "worst_gap": None, "reason": "empty stream"}
    tf = engine.teacher_forced(ids + tokens, len(ids))
    gaps = tf["gap"]
    worst = max(gaps)
    bad = [i for i, g in enumerate(gaps) if g > tolerance]
    reason = f"token {bad[0]} is not main's argmax (gap {gaps[bad[0]]:.4f})" if bad else ""
    return {"ok": not bad, "worst_gap": worst, "reason": reason}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.reverify", description=__doc__.split("\n\n")[0])
    ap.add_argument("--serve", action="store_true", help="answer requests from stdin, one JSON object a line")
    ap.add_argument("--tolerance", type=float, default=None, help="near-tie allowance in logits (default 0.05 GPU, 1e-3 CPU)")
    ap.add_argument("--model", default=None)
    args = ap.parse_args(argv)
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        from engine.generate import Engine

        engine = Engine(args.model)
        tol = args.tolerance if args.tolerance is not None else (0.05 if engine.device.type == "cuda" else 1e-3)
    out.write(json.dumps({"ready": True, "tolerance": tol}) + "\n")
    out.flush()
    for raw in sys.stdin:
        if not raw.strip():
            continue
        try:
            with contextlib.redirect_stdout(sys.stderr):
                answer = check(engine, json.loads(raw), tol)
        except Exception as exc:  # noqa: BLE001 - answer, never die mid-conversation
            answer = {"ok": False, "worst_gap": None, "reason": f"error: {type(exc).__name__}: {exc}", "error": True}
        out.write(json.dumps(answer) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
