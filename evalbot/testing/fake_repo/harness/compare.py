"""Fake compare MAIN PR: top-1 agreement, a KL stand-in and perplexities from two dumps."""

import json
import math

from harness import _common

args = _common.parse(positional=("main_file", "pr_file"))
main = json.load(open(args.main_file))
pr = json.load(open(args.pr_file))
n = min(len(main["argmax"]), len(pr["argmax"]))
top1 = sum(1 for i in range(n) if main["argmax"][i] == pr["argmax"][i]) / n
kl = sum(abs(main["logp"][i] - pr["logp"][i]) for i in range(n)) / n
_common.emit({
    "kind": "compare", "positions": n, "top1": top1, "kl": kl,
    "ppl_main": math.exp(-sum(main["logp"][:n]) / n), "ppl_pr": math.exp(-sum(pr["logp"][:n]) / n),
})
