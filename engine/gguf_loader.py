"""Load a llama.cpp GGUF file into engine weights (float32, HF orientation) and a Tokenizer.

Two things differ from HF checkpoints and are undone here:
- ggml lists dimensions innermost first; GGUFReader already hands data over in numpy order, so a
  linear weight comes out [out, in] once reshaped with the reversed ggml shape.
- for `llama`, llama.cpp's converter permutes Q/K rows so its interleaved RoPE works; we invert
  that so rows are in HF rotate-half order (engine/config.py). Qwen2/3 use NEOX RoPE in llama.cpp
  and are stored unpermuted.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.config import ModelConfig, RopeScaling
from engine.errors import ModelLoadError
from engine.tokenizer import Tokenizer

# GGUF architecture -> (engine arch, whether Q/K rows carry llama.cpp's permutation)
_ARCHS: dict[str, tuple[str, bool]] = {
    "llama": ("llama", True),
    "qwen2": ("qwen2", False),
    "qwen3": ("qwen3", False),
}

_GLOBAL_TENSORS = {
    "token_embd.weight": "embed",
    "output_norm.weight": "norm",
    "output.weight": "lm_head",
}
_LAYER_TENSORS = {
    "attn_norm.weight": "attn_norm",
    "attn_q.weight": "wq",
    "attn_k.weight": "wk",
    "attn_v.weight": "wv",
    "attn_q.bias": "bq",
    "attn_k.bias": "bk",
    "attn_v.bias": "bv",
    "attn_q_norm.weight": "q_norm",
    "attn_k_norm.weight": "k_norm",
    "attn_output.weight": "wo",
    "ffn_norm.weight": "ffn_norm",
    "ffn_gate.weight": "w_gate",
    "ffn_up.weight": "w_up",
    "ffn_down.weight": "w_down",
}
_LAYER_NAME = re.compile(r"blk\.(\d+)\.(.+)")
_ROPE_FREQS = "rope_freqs.weight"


def load_gguf(path: str | Path) -> tuple[ModelConfig, dict[str, torch.Tensor], Tokenizer]:
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"model file not found: {path}")
    reader = _open_reader(path)
    meta = _Metadata(reader, path)

    gguf_arch = meta.get("general.architecture")
    if gguf_arch is None:
        raise ModelLoadError(f"{path}: GGUF metadata has no general.architecture")
    if gguf_arch not in _ARCHS:
        raise ModelLoadError(
            f"unsupported architecture {gguf_arch!r} in {path} (supported: {', '.join(_ARCHS)})"
        )
    arch, qk_permuted = _ARCHS[gguf_arch]

    n_heads = meta.get_int(f"{gguf_arch}.attention.head_count")
    n_kv_heads = meta.get_int(f"{gguf_arch}.attention.head_count_kv", default=n_heads)
    tokenizer = Tokenizer.from_gguf_fields(meta.with_prefix("tokenizer."))
    weights, rope_freqs = _read_weights(reader, path, qk_permuted, n_heads, n_kv_heads)
    config = _config(meta, path, gguf_arch, arch, n_heads, n_kv_heads, weights, rope_freqs, tokenizer)
    return config, weights, tokenizer


def load_gguf_tokenizer(path: str | Path) -> Tokenizer:
    """Only the tokenizer of a GGUF file (its metadata), without dequantising a single weight."""
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"model file not found: {path}")
    return Tokenizer.from_gguf_fields(_Metadata(_open_reader(path), path).with_prefix("tokenizer."))


def unpermute_qk(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Inverse of convert_hf_to_gguf's `permute(w, n_head)` (rows interleaved -> rotate-half)."""
    rows = w.shape[0]
    if rows % (2 * n_head):
        raise ModelLoadError(f"Q/K tensor with {rows} rows cannot be split into {n_head} heads")
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def llama3_freq_factors(
    head_dim: int, theta: float, factor: float, low_freq_factor: float, high_freq_factor: float,
    original_max_position: int,
) -> np.ndarray:
    """Per-frequency divisors llama.cpp stores as `rope_freqs` for Llama 3.x RoPE scaling
    (inv_freq_hf / inv_freq_scaled, the same formula as transformers' llama3 rope init)."""
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2 * math.pi / inv_freq
    low_freq_wavelen = original_max_position / low_freq_factor
    high_freq_wavelen = original_max_position / high_freq_factor
    smooth = (original_max_position / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    medium = 1.0 / ((1 - smooth) / factor + smooth)
    return np.where(wavelen < high_freq_wavelen, 1.0, np.where(wavelen > low_freq_wavelen, factor, medium))


# -- reading ------------------------------------------------------------------------------------


def _reader_class() -> type:
    import gguf

    class Reader(gguf.GGUFReader):
        """gguf's reader, parsing from a plain ndarray view of its memory map (the same mapping, no copy).

        The reader slices its data once per metadata element, and a slice of an np.memmap pays for
        the memmap subclass each time: 8 s for the bundled tokenizer's 49k tokens and merges, against
        1 s on the plain view, in every process that loads the model."""

        def _get(self, offset, dtype, count=1, override_order=None):
            if type(self.data) is not np.ndarray:
                self.data = self.data.view(np.ndarray)
            return super()._get(offset, dtype, count, override_order)

    return Reader


def _open_reader(path: Path) -> Any:
    try:
        reader = _reader_class()(path)
        data_end = max((t.data_offset + int(t.n_bytes) for t in reader.tensors), default=0)
    except Exception as exc:  # the reader fails with whatever numpy raises on a bad offset
        detail = _one_line(exc)
        raise ModelLoadError(f"{path}: not a valid GGUF file, truncated or corrupt ({detail})") from None
    size = path.stat().st_size
    if data_end > size:
        raise ModelLoadError(f"{path}: truncated GGUF file ({size} bytes, tensor data needs {data_end})")
    return reader


class _Metadata:
    """Typed access to GGUF key/value fields with errors that name the file and key."""

    def __init__(self, reader: Any, path: Path) -> None:
        self._fields = reader.fields
        self._path = path

    def get(self, key: str, default: Any = None) -> Any:
        field = self._fields.get(key)
        if field is None:
            return default
        try:
            return field.contents()
        except Exception as exc:
            raise ModelLoadError(f"{self._path}: unreadable metadata {key} ({_one_line(exc)})") from None

    def get_int(self, key: str, default: int | None = None) -> int:
        value = self.get(key, default)
        if value is None:
            raise ModelLoadError(f"{self._path}: missing metadata {key}")
        if isinstance(value, list):  # per-layer arrays (e.g. OpenELM) are not something we run
            raise ModelLoadError(f"{self._path}: metadata {key} varies per layer, which is not supported")
        return int(value)

    def get_float(self, key: str, default: float) -> float:
        value = self.get(key, default)
        return float(value)

    def with_prefix(self, prefix: str) -> dict[str, Any]:
        return {key: self.get(key) for key in self._fields if key.startswith(prefix)}


def _read_weights(
    reader: Any, path: Path, qk_permuted: bool, n_heads: int, n_kv_heads: int
) -> tuple[dict[str, torch.Tensor], np.ndarray | None]:
    from gguf.quants import dequantize

    weights: dict[str, torch.Tensor] = {}
    rope_freqs = None
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))  # ggml ne order -> numpy order
        try:
            array = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        except NotImplementedError:
            raise ModelLoadError(
                f"{path}: tensor {t.name} uses {t.tensor_type.name}, which gguf cannot dequantize"
            ) from None
        except Exception as exc:
            raise ModelLoadError(f"{path}: corrupt tensor {t.name} ({_one_line(exc)})") from None
        if np.may_share_memory(array, reader.data):
            array = array.copy()  # F32 comes back as a view of the read-only memory map
        if t.name == _ROPE_FREQS:
            rope_freqs = array
            continue
        name = _engine_name(t.name, path)
        tensor = torch.from_numpy(array)
        if qk_permuted and name.rsplit(".", 1)[-1] in ("wq", "bq"):
            tensor = unpermute_qk(tensor, n_heads)
        elif qk_permuted and name.rsplit(".", 1)[-1] in ("wk", "bk"):
            tensor = unpermute_qk(tensor, n_kv_heads)
        weights[name] = tensor.contiguous()
    return weights, rope_freqs


def _engine_name(gguf_name: str, path: Path) -> str:
    if gguf_name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[gguf_name]
    m = _LAYER_NAME.fullmatch(gguf_name)
    if m and m.group(2) in _LAYER_TENSORS:
        return f"layers.{int(m.group(1))}.{_LAYER_TENSORS[m.group(2)]}"
    raise ModelLoadError(f"{path}: tensor {gguf_name!r} has no place in the engine's model")


# -- configuration -----------------------------------------------------------------------------


def _config(
    meta: _Metadata, path: Path, gguf_arch: str, arch: str, n_heads: int, n_kv_heads: int,
    weights: dict[str, torch.Tensor], rope_freqs: np.ndarray | None, tokenizer: Tokenizer,
) -> ModelConfig:
    key = lambda suffix: f"{gguf_arch}.{suffix}"  # noqa: E731
    dim = meta.get_int(key("embedding_length"))
    head_dim = meta.get_int(key("attention.key_length"), default=dim // n_heads)
    value_dim = meta.get_int(key("attention.value_length"), default=head_dim)
    if value_dim != head_dim:
        raise ModelLoadError(f"{path}: key length {head_dim} != value length {value_dim} is not supported")
    rope_dim = meta.get_int(key("rope.dimension_count"), default=head_dim)
    if rope_dim != head_dim:
        raise ModelLoadError(f"{path}: partial RoPE ({rope_dim} of {head_dim} dims) is not supported")
    if "embed" not in weights:
        raise ModelLoadError(f"{path}: no token_embd.weight tensor")
    rope_theta = meta.get_float(key("rope.freq_base"), 10000.0)
    n_ctx = meta.get_int(key("context_length"), default=2048)
    try:
        return ModelConfig(
            arch=arch,
            vocab_size=int(weights["embed"].shape[0]),
            dim=dim,
            n_layers=meta.get_int(key("block_count")),
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            ffn_dim=meta.get_int(key("feed_forward_length")),
            norm_eps=meta.get_float(key("attention.layer_norm_rms_epsilon"), 1e-5),
            rope_theta=rope_theta,
            rope_scaling=_rope_scaling(meta, path, gguf_arch, head_dim, rope_theta, n_ctx, rope_freqs),
            max_seq_len=n_ctx,
            tie_embeddings="lm_head" not in weights,
            qkv_bias="layers.0.bq" in weights,
            qk_norm="layers.0.q_norm" in weights,
            bos_id=tokenizer.bos_id,
            eos_ids=tokenizer.eos_ids,
            name=str(meta.get("general.name") or path.stem),
        )
    except ValueError as exc:
        raise ModelLoadError(f"{path}: {exc}") from None


def _rope_scaling(
    meta: _Metadata, path: Path, gguf_arch: str, head_dim: int, theta: float, n_ctx: int,
    rope_freqs: np.ndarray | None,
) -> RopeScaling:
    if rope_freqs is not None:
        return _llama3_from_freq_factors(rope_freqs, path, head_dim, theta)
    prefix = f"{gguf_arch}.rope."
    kind = str(meta.get(prefix + "scaling.type", "none"))
    factor = meta.get_float(prefix + "scaling.factor", 0.0) or meta.get_float(prefix + "scale_linear", 1.0)
    original = meta.get_int(prefix + "scaling.original_context_length", default=n_ctx)
    if kind == "none" and factor not in (0.0, 1.0):
        kind = "linear"  # old GGUFs only wrote rope.scale_linear
    if kind == "none" or factor in (0.0, 1.0):
        return RopeScaling()
    if kind == "linear":
        return RopeScaling(kind="linear", factor=factor)
    if kind == "yarn":
        return RopeScaling(
            kind="yarn",
            factor=factor,
            original_max_position=original,
            beta_fast=meta.get_float(prefix + "scaling.yarn_beta_fast", 32.0),
            beta_slow=meta.get_float(prefix + "scaling.yarn_beta_slow", 1.0),
        )
    raise ModelLoadError(f"{path}: unsupported RoPE scaling type {kind!r}")


def _llama3_from_freq_factors(factors: np.ndarray, path: Path, head_dim: int, theta: float) -> RopeScaling:
    """GGUF keeps Llama 3.x scaling only as the resulting per-frequency factors; recover the
    parameters by matching the configurations Meta has shipped (factor is the largest divisor)."""
    factors = np.asarray(factors, dtype=np.float64).reshape(-1)
    if factors.shape[0] != head_dim // 2:
        raise ModelLoadError(f"{path}: rope_freqs has {factors.shape[0]} entries, expected {head_dim // 2}")
    factor = float(factors.max())
    if np.allclose(factors, 1.0):
        return RopeScaling()
    for original in (8192, 4096, 2048, 16384, 32768, 65536, 131072):
        for low, high in ((1.0, 4.0), (1.0, 8.0), (2.0, 4.0), (1.0, 2.0)):
            expected = llama3_freq_factors(head_dim, theta, factor, low, high, original)
            if np.allclose(factors, expected, rtol=1e-4, atol=1e-4):
                return RopeScaling(
                    kind="llama3", factor=factor, low_freq_factor=low, high_freq_factor=high,
                    original_max_position=original,
                )
    raise ModelLoadError(f"{path}: rope_freqs does not match any Llama 3 RoPE scaling this engine knows")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


__all__ = ["llama3_freq_factors", "load_gguf", "unpermute_qk"]
