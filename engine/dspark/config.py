"""DSpark drafter architecture and the speculation policy."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path


@dataclass(frozen=True)
class DrafterConfig:
    """A block drafter conditioned on the target's hidden states.

    The target's residual stream after `target_layers` is concatenated -> linear -> RMSNorm: the
    context features. Each draft layer attends over the features of the last `window` committed
    positions (as extra keys/values) and, non-causally, over its own block
    [last committed token, MASK x (block_size - 1)]. The target's embedding and LM head are reused,
    frozen; a low-rank "Markov" head adds the previous drafted token's bias, and a confidence head
    gives each position's acceptance probability."""

    target_layers: tuple[int, ...]
    dim: int
    n_layers: int = 2
    n_heads: int = 9
    n_kv_heads: int = 3
    head_dim: int = 64
    ffn_dim: int = 576
    block_size: int = 7
    window: int = 1024
    markov_rank: int = 64
    norm_eps: float = 1e-5
    rope_theta: float = 100000.0
    vocab_size: int = 0
    target_sha256: str = ""  # the target model this drafter was trained for

    @property
    def proposals(self) -> int:
        return self.block_size - 1

    def to_dict(self) -> dict:
        d = asdict(self)
        d["target_layers"] = list(self.target_layers)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "DrafterConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown drafter config keys: {sorted(unknown)}")
        d = dict(d)
        d["target_layers"] = tuple(d["target_layers"])
        return cls(**d)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")


@dataclass(frozen=True)
class SpecOptions:
    """When and how deep to speculate (greedy and sampled). Defaults measured on the H200 (docs/perf.md).

    - confidence_threshold: verify the first d drafts whose cumulative confidence stays >= this.
    - context band: below narrow_below_ctx at most narrow_depth drafts, at or above deep_from_ctx
      up to the block's 6, in between mid_depth.
    - idle rule: when the mean accepted drafts over the last idle_window iterations falls below
      idle_min_accept, decode plainly for idle_steps tokens (doubling while it keeps failing,
      up to idle_max_steps), then try drafting again. The drafter's context keeps up meanwhile.
    """

    confidence_threshold: float = 0.35
    min_depth: int = 1
    narrow_below_ctx: int = 2048
    narrow_depth: int = 3
    deep_from_ctx: int = 0
    mid_depth: int = 6
    idle_window: int = 8
    idle_min_accept: float = 0.25
    idle_steps: int = 16
    idle_max_steps: int = 256
    use_confidence: bool = True
    time_phases: bool = False  # CUDA events around every draft and verify (a little overhead)
    # Greedy only: run the loop on the device, `loop_chunk` iterations per launch, each verifying the
    # whole block (the confidence and context band then only matter for the host loop and sampling).
    device_loop: bool = True
    loop_chunk: int = 8
    # Greedy only: verify a token tree of `tree_nodes` drafts (kernels/draft_head.py's tree_head: best-first,
    # each node's `tree_fanout` best children as candidates) instead of the chain; 0: the chain. Every
    # iteration then verifies the whole tree (tree_nodes + 1 rows, at most the step's 8).
    tree_nodes: int = 0
    tree_fanout: int = 4

    def max_depth(self, ctx: int, proposals: int) -> int:
        if ctx < self.narrow_below_ctx:
            d = self.narrow_depth
        elif self.deep_from_ctx and ctx >= self.deep_from_ctx:
            d = proposals
        else:
            d = self.mid_depth
        return max(1, min(d, proposals))

    @classmethod
    def for_backend(cls, backend: str, environ: dict | None = None) -> "SpecOptions":
        """The defaults above were measured on the GPU, where a deeper verify costs a little more. The
        torch (CPU) step always computes its 8 padded rows, so there verifying every draft is free:
        the confidence threshold drops to 0 (verify the block's full depth). On the GPU greedy decoding
        verifies a token tree of 7 drafts (fanout 2) in the step's 8 rows (docs/perf.md, 2026-12-05)."""
        import os

        env = os.environ if environ is None else environ
        base = {"tree_nodes": 7, "tree_fanout": 2} if backend == "triton" else {"confidence_threshold": 0.0, "narrow_below_ctx": 0}
        return cls.from_env(env, **{k: v for k, v in base.items() if f"DSPARK_{k.upper()}" not in env})

    @classmethod
    def from_env(cls, environ: dict | None = None, **overrides) -> "SpecOptions":
        """DSPARK_<FIELD> environment variables override the defaults (e.g. DSPARK_CONFIDENCE_THRESHOLD)."""
        import os

        env = os.environ if environ is None else environ
        values = {}
        for f in fields(cls):
            raw = env.get("DSPARK_" + f.name.upper())
            if raw is None:
                continue
            try:
                values[f.name] = (raw.lower() in ("1", "true", "yes")) if f.type in ("bool", bool) else type(f.default)(raw)
            except ValueError as exc:
                raise ValueError(f"DSPARK_{f.name.upper()}={raw!r} is not a valid {type(f.default).__name__}") from exc
        values.update(overrides)
        return cls(**values)

