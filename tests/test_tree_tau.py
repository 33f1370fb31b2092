"""bench/tree_tau.py's replay arithmetic on hand-built drafter logits (no model): a chain, K chains, a
best-first tree and a static tree each accept exactly the run of the target's tokens their nodes hold."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

_spec = importlib.util.spec_from_file_location("tree_tau", Path(__file__).resolve().parents[1] / "bench" / "tree_tau.py")
tree_tau = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tree_tau)

V, P = 10, 3
TRUTH = [4, 5, 6]


def _logits(ranked: list[list[int]]) -> torch.Tensor:
    """base [P, V]: at each depth the listed tokens first, in that order, the rest far below."""
    base = torch.full((P, V), -20.0)
    for d, order in enumerate(ranked):
        for i, t in enumerate(order):
            base[d, t] = -float(i)
    return base


def _no_markov():
    return torch.zeros(V, 2), torch.zeros(V, 2)  # u @ v[prev] == 0: no branch-specific bias


def test_the_true_token_second_at_depth_one():
    base = _logits([[1, 4], [5, 2], [6, 3]])
    u, v = _no_markov()
    assert tree_tau.accepted_chain(base, u, v, 0, TRUTH) == 0
    assert tree_tau.accepted_topk_chain(base, u, v, 0, TRUTH, 1) == 0
    assert tree_tau.accepted_topk_chain(base, u, v, 0, TRUTH, 2) == 3
    # best-first: the likelier first draft and its child (cumulative log-probability) come before the true one
    assert tree_tau.accepted_tree(base, u, v, 0, TRUTH, budget=2) == 0
    assert tree_tau.accepted_tree(base, u, v, 0, TRUTH, budget=4) == 1  # (1,) (1,5) (1,5,6), then (4,)
    assert tree_tau.accepted_tree(base, u, v, 0, TRUTH, budget=64) == 3


def test_the_markov_bias_decides_the_branch():
    base = _logits([[4], [2, 5], [6]])
    u, v = torch.zeros(V, 1), torch.zeros(V, 1)
    u[5, 0], v[4, 0] = 1.0, 3.0  # after the true first token, the true second one gains 3 and leads
    assert tree_tau.accepted_chain(base, u, v, 0, TRUTH) == 3
    v[4, 0] = 0.0
    assert tree_tau.accepted_chain(base, u, v, 0, TRUTH) == 1


def test_replay_commits_the_accepted_run_plus_the_bonus():
    assert tree_tau.replay(10, 5, lambda c: 0) == [1, 1, 1, 1]  # the prefill's token, then one a verify
    assert tree_tau.replay(10, 15, lambda c: 6) == [7, 7]


def test_a_static_tree_follows_the_branch_whose_rank_holds_the_true_token():
    chain = ((-1, 0), (0, 0), (1, 0))
    second_first = ((-1, 0), (0, 0), (-1, 1), (2, 0))  # a chain of 2 and the second first draft continued once
    alt_at_two = ((-1, 0), (0, 0), (0, 1))  # a chain of 2 and the second candidate at depth two
    u, v = _no_markov()
    base = _logits([[1, 4], [5, 2], [6, 3]])  # the true first token ranks second
    assert tree_tau.accepted_static(base, u, v, 0, TRUTH, chain) == tree_tau.accepted_chain(base, u, v, 0, TRUTH) == 0
    assert tree_tau.accepted_static(base, u, v, 0, TRUTH, second_first) == 2  # (4,), (4, 5); nothing at depth 3
    base = _logits([[4, 1], [2, 5], [6, 3]])  # the true second token ranks second
    assert tree_tau.accepted_static(base, u, v, 0, TRUTH, chain) == 1
    assert tree_tau.accepted_static(base, u, v, 0, TRUTH, alt_at_two) == 2
    assert tree_tau.shape_depths(second_first) == [1, 2, 1, 2]
    assert all(max(tree_tau.shape_depths(sh)) <= 6 and len(sh) <= 7 for sh in tree_tau.SHAPES.values())
    with pytest.raises(ValueError, match="parent"):
        tree_tau.shape_depths(((-1, 0), (2, 0), (0, 0)))
