"""Model architecture description shared by every loader and the model itself.

Weights live in a flat dict with engine-internal names (HF orientation: linear weights are
[out_features, in_features]; Q/K rows are in HF "rotate-half" order, i.e. llama.cpp's permutation
already undone):

    embed                        [vocab, dim]
    layers.{i}.attn_norm         [dim]
    layers.{i}.wq / wk / wv      [n_heads*head_dim, dim] / [n_kv_heads*head_dim, dim] (x2)
    layers.{i}.bq / bk / bv      optional biases (Qwen2)
    layers.{i}.q_norm / k_norm   optional per-head RMSNorm weights [head_dim] (Qwen3)
    layers.{i}.wo                [dim, n_heads*head_dim]
    layers.{i}.ffn_norm          [dim]
    layers.{i}.w_gate / w_up     [ffn_dim, dim]
    layers.{i}.w_down            [dim, ffn_dim]
    norm                         [dim]
    lm_head                      [vocab, dim]   (absent when tie_embeddings)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SUPPORTED_ARCHS = ("llama", "mistral", "qwen2", "qwen3")


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling as HF configs spell it. kind: none | linear | llama3 | yarn | dynamic."""

    kind: str = "none"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 0
    beta_fast: float = 32.0
    beta_slow: float = 1.0


@dataclass(frozen=True)
class ModelConfig:
    arch: str
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)
    max_seq_len: int = 2048
    tie_embeddings: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
    bos_id: int | None = None
    eos_ids: tuple[int, ...] = ()
    name: str = ""

    def __post_init__(self) -> None:
        if self.arch not in SUPPORTED_ARCHS:
            raise ValueError(
                f"unsupported architecture {self.arch!r} (supported: {', '.join(SUPPORTED_ARCHS)})"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["eos_ids"] = list(self.eos_ids)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        d = dict(d)
        d["rope_scaling"] = RopeScaling(**d.get("rope_scaling") or {})
        d["eos_ids"] = tuple(d.get("eos_ids") or ())
        return cls(**d)
