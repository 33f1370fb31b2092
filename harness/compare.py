"""python -m harness.compare MAIN PR — differential accuracy of two score dumps (harness.score).

Over the shared positions: top-1 agreement; KL(main||PR) over the union of both top-k sets, each
side renormalised over that union, a log-prob missing on one side floored at -20; the perplexity of
each side on the actual next tokens. Pure arithmetic on files: the bot runs it from main's tree."""

from __future__ import annotations

import argparse
import json
import math
import sys

from harness.output import add_common_args, line, run_program

FLOOR = -20.0


def load(path: str) -> dict:
    with open(path) as f:
        d = json.load(f)
    if d.get("schema") != "dspark-score/1":
        raise ValueError(f"{path} is not a harness.score dump")
    return d


def compare(main: dict, pr: dict) -> dict:
    n = min(len(main["tokens"]), len(pr["tokens"]))
    if n == 0:
        raise ValueError("the dumps share no positions")
    if main["tokens"][:n] != pr["tokens"][:n]:
        raise ValueError("the dumps score different texts")
    agree, kl_sum = 0, 0.0
    for i in range(n):
        a = dict(zip(main["topk_ids"][i], main["topk_logprobs"][i]))
        b = dict(zip(pr["topk_ids"][i], pr["topk_logprobs"][i]))
        agree += int(main["topk_ids"][i][0] == pr["topk_ids"][i][0])
        union = set(a) | set(b)
        la = [max(a.get(t, FLOOR), FLOOR) for t in union]
        lb = [max(b.get(t, FLOOR), FLOOR) for t in union]
        za, zb = _logsumexp(la), _logsumexp(lb)
        kl_sum += sum(math.exp(x - za) * ((x - za) - (y - zb)) for x, y in zip(la, lb))
    ppl = lambda d: math.exp(-sum(d["token_logprob"][:n]) / n)  # noqa: E731
    return {"positions": n, "top1": agree / n, "kl": max(0.0, kl_sum / n), "ppl_main": ppl(main), "ppl_pr": ppl(pr)}


def _logsumexp(xs: list[float]) -> float:
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m harness.compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("main")
    ap.add_argument("pr")
    add_common_args(ap)
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return run_program(lambda: [line("compare", args.nonce, **compare(load(args.main), load(args.pr)))], args.nonce)


if __name__ == "__main__":
    sys.exit(main())
