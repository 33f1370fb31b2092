"""python -m harness.score --out FILE — teacher-forced top-k log-probs of a fixed real text, computed
by the engine's own decode step (what decoding users get), written to FILE for harness.compare."""

from __future__ import annotations

import argparse
import json
import sys

from harness.output import add_common_args, line, run_program
from harness.profiles import get_profile
from harness.prompts import exact_prompt

PREFIX = 64  # prefilled tokens before the first scored position


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m harness.score", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="where to write the dump (JSON)")
    ap.add_argument("--profile", default=None)
    ap.add_argument("--positions", type=int, default=None, help="scored positions (default: the profile's, >= 512)")
    ap.add_argument("--model", default=None)
    add_common_args(ap)
    return ap


def measure(args) -> list[str]:
    from engine.generate import Engine

    profile = get_profile(args.profile)
    n = args.positions or profile.score_positions
    engine = Engine(args.model)
    ids = exact_prompt(engine.tokenizer, "score", PREFIX + n)
    tf = engine.teacher_forced(ids, PREFIX, top_k=profile.top_k)
    dump = {"schema": "dspark-score/1", "text": "score", "prefix": PREFIX, "positions": n, "top_k": profile.top_k,
            "tokens": ids[PREFIX:], "token_logprob": tf["token_logprob"], "topk_ids": tf["topk_ids"],
            "topk_logprobs": tf["topk_logprobs"], "model_sha256": engine.loaded.sha256}
    with open(args.out, "w") as f:
        json.dump(dump, f, separators=(",", ":"))
    return [line("score", args.nonce, positions=n, file=str(args.out))]


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return run_program(lambda: measure(args), args.nonce)


if __name__ == "__main__":
    sys.exit(main())
