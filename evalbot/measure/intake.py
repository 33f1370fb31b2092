"""What an answer of a harness process may carry, checked on arrival against main's shapes.

Pure functions that raise `ProtocolViolation` with one line; the campaign attributes it (a PR
process's answer: its integrity finding; main's: an infrastructure error). Anything outside these
bounds is a broken contract, never a number to keep.
"""

from __future__ import annotations

import math

from evalbot.decide.records import Reported
from evalbot.measure.client import ProtocolViolation

SHAPE_FIELDS = ("vocab_size", "eos_ids")  # ready fields every process must announce as main's do
MAX_VOCAB = 1 << 24
MAX_BLOCK = 4096
MAX_HIST = 4096
MAX_COUNT = 1 << 31
MAX_SECONDS = 1e6


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def short(v) -> str:
    t = repr(v)
    return t if len(t) <= 40 else t[:37] + "..."


def text(v) -> str:
    return str(v if v is not None else "")[:200]


def ready_shape(info: dict) -> dict:
    """The shape fields of a ready answer, once its block size and vocabulary are in range."""
    bs = info.get("block_size") or 0
    if not is_int(bs) or not 0 <= bs <= MAX_BLOCK:
        raise ProtocolViolation(f"the ready answer's block_size {short(bs)} is not an integer in [0, {MAX_BLOCK}]")
    shape = {k: info.get(k) for k in SHAPE_FIELDS}
    if not is_int(shape["vocab_size"]) or not 2 <= shape["vocab_size"] <= MAX_VOCAB:
        raise ProtocolViolation(f"the ready answer's vocab_size {short(shape['vocab_size'])} is not an integer in [2, {MAX_VOCAB}]")
    return shape


def generation(h: dict, new_tokens: int, vocab: int, who: str) -> tuple[list[int], Reported]:
    """A generation answer checked against what was asked and main's vocabulary."""
    tokens = h.get("tokens")
    if not isinstance(tokens, list) or not all(is_int(t) for t in tokens):
        raise ProtocolViolation("the generation carries no list of token ids")
    if len(tokens) != new_tokens:
        raise ProtocolViolation(f"{who}'s process returned {len(tokens)} tokens where {new_tokens} were asked for")
    bad = next((t for t in tokens if not 0 <= t < vocab), None)
    if bad is not None:
        raise ProtocolViolation(f"the generation carries token id {short(bad)}, outside main's vocabulary of {vocab}")
    stats = h.get("stats", {})
    if not isinstance(stats, dict):
        raise ProtocolViolation("the generation's stats are not an object")
    hist = stats.get("accept_hist", [])
    if not isinstance(hist, list) or len(hist) > MAX_HIST or not all(is_int(x) and 0 <= x <= MAX_COUNT for x in hist):
        raise ProtocolViolation(f"the generation's accept_hist is not a list of at most {MAX_HIST} counts")
    nums = {}
    for name, v, hi in (("prefill_s", h.get("prefill_s"), MAX_SECONDS), ("decode_s", h.get("decode_s"), MAX_SECONDS),
                        ("tau", stats.get("tau"), MAX_COUNT)):
        if v is None:
            nums[name] = None
            continue
        if not is_num(v) or (isinstance(v, float) and not math.isfinite(v)) or not 0 <= v <= hi:
            raise ProtocolViolation(f"the generation reports {name} = {short(v)}, not a finite number in [0, {hi:g}]")
        nums[name] = float(v)
    return list(tokens), Reported(prefill_s=nums["prefill_s"], decode_s=nums["decode_s"], tau=nums["tau"],
                                  accept_hist=list(hist))


def verify_answer(head: dict, n: int) -> tuple[list[int], list[float]]:
    """(argmax, gap) of a verify answer for a stream of n tokens."""
    argmax, gap = head.get("argmax"), head.get("gap")
    if not (isinstance(argmax, list) and isinstance(gap, list) and len(argmax) == len(gap) == n
            and all(is_int(a) for a in argmax) and all(is_num(d) for d in gap)):
        raise ProtocolViolation("main's verifier answered a malformed result")
    return argmax, [float(d) for d in gap]
