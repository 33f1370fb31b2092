"""What a token tree would buy in tau, on the harness's real text: offline, with the shipped drafter.

One pass gives the target's greedy continuation of each prompt (the harness corpora cut to exact
token lengths) and its residuals at the drafter's capture layers (engine/dspark/train.py's
`generate_with_features`). The drafter's training module then gives, for every anchor of that
continuation at once, the block's base logits. Within a block those do not depend on the drafted
tokens; only the low-rank Markov bias does (module.py), so the candidates of any branch of a tree are
`base[depth] + bias(its previous token)`, exact and cheap. The decode is then replayed anchor by anchor:
a verify commits the longest run of the target's own tokens that the drafts hold, plus the bonus.

- `chain`: the drafter's greedy chain at full depth (block_size - 1), what the engine verifies today
  when confidence never stops it early (so an upper bound on its tau).
- `tree N`: EAGLE-2-style dynamic tree of N nodes: best-first by the drafts' cumulative log-probability,
  each node's children being its top candidates.
- `topK-chain`: K candidates for the first draft, each continued as a greedy chain (K*(depth) nodes).
- static shapes (`--shapes`, SHAPES): a fixed tree, each node a (parent, rank) pair: the rank-th best candidate
  after its parent's token (parent -1: the last committed token). What a device-side drafter can build without
  a priority queue: each depth's nodes are top-k passes over their parents' rows, as the chain is today.

Tau is tokens committed per verify, the harness's definition. This is no timing: what a tree costs
(its rows in one verify, the attention mask) has to be measured on the GPU. Prints one JSON line per
(prompt, ctx), then a table. Usage:
  python bench/tree_tau.py [--contexts 1024,4096,7936] [--new-tokens 128] [--trees 4,8,16,32,64] [--shapes NAME,...]
                           [--drafter DIR]
"""

from __future__ import annotations

import argparse
import heapq
import json
import time

import torch

from engine.dspark import attach_drafter
from engine.dspark.module import DrafterModule, rope_for
from engine.dspark.train import generate_with_features
from engine.generate import Engine
from harness.prompts import PROMPT_NAMES, exact_prompt, token_digest


@torch.inference_mode()
def block_logits(module: DrafterModule, tokens: torch.Tensor, feats: torch.Tensor, anchors: list[int]):
    """Base logits [A, P, V] (no Markov bias) and the Markov tables for these anchors, in chunks."""
    c = module.c
    cos, sin = rope_for(c, tokens.shape[1] + c.block_size, tokens.device)
    bases = []
    for i in range(0, len(anchors), 32):
        a = torch.tensor([anchors[i:i + 32]], device=tokens.device)
        _, base, _ = module(feats, tokens, a, cos, sin)
        bases.append(base[0].float())
    u, v = module.markov_tables()
    return torch.cat(bases), u.float(), v.float()


def children(base_row: torch.Tensor, u: torch.Tensor, v: torch.Tensor, prev: int, k: int) -> tuple[list[float], list[int]]:
    """The top-k candidates (log-probabilities, tokens) after `prev` at one depth."""
    logp = torch.log_softmax(base_row + u @ v[prev], -1)
    top = logp.topk(k)
    return top.values.tolist(), top.indices.tolist()


def accepted_chain(base, u, v, first: int, truth: list[int]) -> int:
    prev = first
    for d, want in enumerate(truth):
        if int((base[d] + u @ v[prev]).argmax()) != want:
            return d
        prev = want
    return len(truth)


def accepted_topk_chain(base, u, v, first: int, truth: list[int], k: int) -> int:
    """k first drafts, each continued greedily: the true first token must be among them, then the chain."""
    _, firsts = children(base[0], u, v, first, k)
    if truth[0] not in firsts:
        return 0
    return 1 + accepted_chain(base[1:], u, v, truth[0], truth[1:])


def accepted_tree(base, u, v, first: int, truth: list[int], budget: int, fanout: int = 8) -> int:
    """Best-first tree of `budget` nodes; how deep the true path goes inside it."""
    depth_max = len(truth)
    tree: set[tuple[int, ...]] = set()
    heap: list[tuple[float, tuple[int, ...]]] = []
    lp, toks = children(base[0], u, v, first, min(fanout, budget))
    for p, t in zip(lp, toks):
        heapq.heappush(heap, (-p, (t,)))
    while heap and len(tree) < budget:
        neg, path = heapq.heappop(heap)
        tree.add(path)
        if len(path) < depth_max:
            lp, toks = children(base[len(path)], u, v, path[-1], fanout)
            for p, t in zip(lp, toks):
                heapq.heappush(heap, (neg - p, path + (t,)))
    for d in range(depth_max):
        if tuple(truth[:d + 1]) not in tree:
            return d
    return depth_max


# Static trees of at most 7 nodes (with the last committed token, the 8 rows of today's step, engine.model.STEP_ROWS),
# nodes in depth order as (parent, rank): the main chain first, then alternatives (rank 1: the second-best candidate).
SHAPES = {
    "chain6": ((-1, 0), (0, 0), (1, 0), (2, 0), (3, 0), (4, 0)),  # today's verify: 7 rows
    "c5+a1": ((-1, 0), (0, 0), (1, 0), (2, 0), (3, 0), (-1, 1)),  # 7 rows: the chain one shorter, a second first draft
    "c4+a1+a2": ((-1, 0), (0, 0), (1, 0), (2, 0), (-1, 1), (0, 1)),  # 7 rows
    "c4+a1c1": ((-1, 0), (0, 0), (1, 0), (2, 0), (-1, 1), (4, 0)),  # 7 rows: the second first draft continued once
    "c6+a1": ((-1, 0), (0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (-1, 1)),  # 8 rows
    "c5+a1+a2": ((-1, 0), (0, 0), (1, 0), (2, 0), (3, 0), (-1, 1), (0, 1)),  # 8 rows
    "c5+a1c1": ((-1, 0), (0, 0), (1, 0), (2, 0), (3, 0), (-1, 1), (5, 0)),  # 8 rows
    "c4+a1+a2+a3": ((-1, 0), (0, 0), (1, 0), (2, 0), (-1, 1), (0, 1), (1, 1)),  # 8 rows
    "c4+a1c1+a2": ((-1, 0), (0, 0), (1, 0), (2, 0), (-1, 1), (4, 0), (0, 1)),  # 8 rows
}


def accepted_static(base, u, v, first: int, truth: list[int], shape: tuple[tuple[int, int], ...]) -> int:
    """How deep the true path goes inside a static tree (SHAPES): from the root, at each depth, the child whose
    candidate (its rank among its parent's top candidates at that depth) is the true token."""
    kids: dict[int, list[tuple[int, int]]] = {}
    for i, (parent, rank) in enumerate(shape):
        kids.setdefault(parent, []).append((i, rank))
    node, prev = -1, first
    for d, want in enumerate(truth):
        here = kids.get(node)
        if not here:
            return d
        top = (base[d] + u @ v[prev]).topk(1 + max(r for _, r in here)).indices.tolist()
        hit = [i for i, r in here if top[r] == want]
        if not hit:
            return d
        node, prev = hit[0], want
    return len(truth)


def shape_depths(shape: tuple[tuple[int, int], ...]) -> list[int]:
    """Each node's depth (1: a first draft); a parent must come before its children."""
    depths: list[int] = []
    for i, (parent, _) in enumerate(shape):
        if parent >= i:
            raise ValueError(f"node {i}'s parent {parent} does not come before it")
        depths.append(1 if parent < 0 else depths[parent] + 1)
    return depths


def replay(prompt_len: int, new_tokens: int, accept) -> list[int]:
    """Commits per verify along the decode: start at the first generated token, commit accept(c) + 1."""
    commits, c = [], prompt_len
    while c < prompt_len + new_tokens - 1:
        j = accept(c)
        commits.append(j + 1)
        c += j + 1
    return commits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--contexts", default="1024,4096,7936")
    ap.add_argument("--prompts", default=",".join(PROMPT_NAMES))
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--trees", default="4,8,16,32,64")
    ap.add_argument("--topk", default="2,4")
    ap.add_argument("--shapes", default="", help=f"static trees by name: {', '.join(SHAPES)}")
    ap.add_argument("--drafter", default=None)
    args = ap.parse_args()
    shapes = [x for x in args.shapes.split(",") if x]
    unknown = [x for x in shapes if x not in SHAPES]
    if unknown:
        ap.error(f"unknown shape {unknown[0]!r}; known: {', '.join(SHAPES)}")
    eng = Engine()
    files = attach_drafter(eng, args.drafter)
    c = files.config
    p = c.block_size - 1
    deep = [x for x in shapes if max(shape_depths(SHAPES[x])) > p]
    if deep:
        ap.error(f"shape {deep[0]!r} is deeper than this drafter's {p} drafts")
    module = DrafterModule.from_weights(c, files.weights, eng.model.embed.float().cpu(), eng.model.lm_head.float().cpu())
    module = module.float().to(eng.model.device).eval()
    rows = []
    for ctx in [int(x) for x in args.contexts.split(",")]:
        for prompt in args.prompts.split(","):
            t0 = time.monotonic()
            ids = exact_prompt(eng.tokenizer, prompt, ctx)
            # p more tokens than decoded, so the last anchors' drafts have the target's tokens to meet
            tokens, feats = generate_with_features(eng.model, [ids], args.new_tokens + p, c.target_layers, batch=1)
            seq = tokens[0].tolist()
            anchors = list(range(ctx, ctx + args.new_tokens))
            base, u, v = block_logits(module, tokens, feats.float(), anchors)
            by_anchor = {a: base[i] for i, a in enumerate(anchors)}
            truth = lambda a: seq[a + 1:a + 1 + p]  # noqa: E731
            taus = {"chain": replay(ctx, args.new_tokens, lambda a: accepted_chain(by_anchor[a], u, v, seq[a], truth(a)))}
            for k in [int(x) for x in args.topk.split(",") if x]:
                taus[f"top{k}-chain"] = replay(ctx, args.new_tokens,
                                               lambda a, k=k: accepted_topk_chain(by_anchor[a], u, v, seq[a], truth(a), k))
            for n in [int(x) for x in args.trees.split(",") if x]:
                taus[f"tree{n}"] = replay(ctx, args.new_tokens,
                                          lambda a, n=n: accepted_tree(by_anchor[a], u, v, seq[a], truth(a), n))
            for name in shapes:
                taus[name] = replay(ctx, args.new_tokens,
                                    lambda a, sh=SHAPES[name]: accepted_static(by_anchor[a], u, v, seq[a], truth(a), sh))
            row = {"prompt": prompt, "ctx": ctx, "prompt_sha256": token_digest(ids), "new_tokens": args.new_tokens,
                   "block_size": c.block_size, "drafter": str(files.path), "drafter_sha256": files.sha256,
                   "tau": {name: round(sum(v_) / len(v_), 3) for name, v_ in taus.items()},
                   "verifies": {name: len(v_) for name, v_ in taus.items()}, "seconds": round(time.monotonic() - t0, 1)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    names = list(rows[0]["tau"])
    print("\n| prompt | ctx | " + " | ".join(names) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in names) + " |")
    for r in rows:
        print(f"| {r['prompt']} | {r['ctx']} | " + " | ".join(f"{r['tau'][n]:.2f}" for n in names) + " |")


if __name__ == "__main__":
    main()
