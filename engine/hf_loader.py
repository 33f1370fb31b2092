"""Load a Hugging Face model directory (config.json, *.safetensors, tokenizer.json).

Supports the Llama family as transformers writes it: llama, mistral, qwen2 (q/k/v biases) and
qwen3 (per-head q/k RMSNorm), with configs from transformers 4.x (`rope_theta` + `rope_scaling`)
and 5.x (`rope_parameters`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from engine.config import SUPPORTED_ARCHS, ModelConfig, RopeScaling
from engine.errors import ModelLoadError
from engine.tokenizer import Tokenizer

SAFETENSORS_INDEX = "model.safetensors.index.json"

_GLOBAL_TENSORS = {
    "model.embed_tokens.weight": "embed",
    "model.norm.weight": "norm",
    "lm_head.weight": "lm_head",
}
_LAYER_TENSORS = {
    "input_layernorm.weight": "attn_norm",
    "self_attn.q_proj.weight": "wq",
    "self_attn.k_proj.weight": "wk",
    "self_attn.v_proj.weight": "wv",
    "self_attn.q_proj.bias": "bq",
    "self_attn.k_proj.bias": "bk",
    "self_attn.v_proj.bias": "bv",
    "self_attn.q_norm.weight": "q_norm",
    "self_attn.k_norm.weight": "k_norm",
    "self_attn.o_proj.weight": "wo",
    "post_attention_layernorm.weight": "ffn_norm",
    "mlp.gate_proj.weight": "w_gate",
    "mlp.up_proj.weight": "w_up",
    "mlp.down_proj.weight": "w_down",
}
_LAYER_NAME = re.compile(r"model\.layers\.(\d+)\.(.+)")
# Buffers some older checkpoints saved; recomputed by the engine.
_IGNORED = re.compile(r".*\.rotary_emb\.inv_freq")


def load_hf_dir(path: str | Path) -> tuple[ModelConfig, dict[str, torch.Tensor], Tokenizer]:
    root = Path(path)
    if not root.is_dir():
        raise ModelLoadError(f"model directory not found: {root}")
    raw = read_config_json(root)
    tokenizer = Tokenizer.from_hf_dir(root)
    config = config_from_hf(raw, root, tokenizer)
    weights = _load_weights(safetensors_files(root), root)
    if config.tie_embeddings:
        weights.pop("lm_head", None)  # tied checkpoints sometimes still carry a copy
    elif "lm_head" not in weights:
        raise ModelLoadError(f"{root}: config says tie_word_embeddings=false but there is no lm_head.weight")
    return config, weights, tokenizer


def read_config_json(root: Path) -> dict[str, Any]:
    config_path = root / "config.json"
    if not config_path.is_file():
        raise ModelLoadError(f"{root} has no config.json (not a Hugging Face model directory)")
    try:
        raw = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {config_path}: {_one_line(exc)}") from None
    if not isinstance(raw, dict):
        raise ModelLoadError(f"{config_path} is not a JSON object")
    return raw


def safetensors_files(root: Path) -> list[Path]:
    """The checkpoint's weight files: the shards named by the index, else every *.safetensors."""
    index_path = root / SAFETENSORS_INDEX
    if index_path.is_file():
        try:
            weight_map = json.loads(index_path.read_text(encoding="utf-8"))["weight_map"]
            names = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ModelLoadError(f"cannot read {index_path}: {_one_line(exc)}") from None
        files = [root / n for n in names]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ModelLoadError(
                f"{root}: shards listed in {SAFETENSORS_INDEX} are missing: {', '.join(missing)}"
            )
        return files
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{root} has no *.safetensors weights")
    return files


def config_from_hf(raw: dict[str, Any], root: Path, tokenizer: Tokenizer) -> ModelConfig:
    model_type = raw.get("model_type")
    if model_type not in SUPPORTED_ARCHS:
        raise ModelLoadError(
            f"unsupported architecture {model_type!r} in {root / 'config.json'} "
            f"(supported: {', '.join(SUPPORTED_ARCHS)})"
        )
    if raw.get("mlp_bias"):
        raise ModelLoadError(f"{root}: mlp_bias=true is not supported")
    try:
        dim = int(raw["hidden_size"])
        n_heads = int(raw["num_attention_heads"])
        n_kv_heads = int(raw.get("num_key_value_heads") or n_heads)
        max_pos = int(raw.get("max_position_embeddings") or 2048)
        rope_params = _rope_parameters(raw)
        return ModelConfig(
            arch=model_type,
            vocab_size=int(raw["vocab_size"]),
            dim=dim,
            n_layers=int(raw["num_hidden_layers"]),
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            head_dim=int(raw.get("head_dim") or dim // n_heads),
            ffn_dim=int(raw["intermediate_size"]),
            norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=float(rope_params.get("rope_theta", 10000.0)),
            rope_scaling=_rope_scaling(rope_params, max_pos, root),
            max_seq_len=_max_seq_len(raw, model_type, max_pos),
            tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
            qkv_bias=model_type == "qwen2" or bool(raw.get("attention_bias", False)),
            qk_norm=model_type == "qwen3",
            bos_id=tokenizer.bos_id,
            eos_ids=tokenizer.eos_ids,
            name=str(raw.get("_name_or_path") or root.name),
        )
    except (KeyError, TypeError, ValueError) as exc:
        what = f"missing field {exc}" if isinstance(exc, KeyError) else _one_line(exc)
        raise ModelLoadError(f"{root / 'config.json'}: {what}") from None


def _rope_parameters(raw: dict[str, Any]) -> dict[str, Any]:
    """One dict with rope_theta and the scaling fields, whichever transformers version wrote it."""
    params = dict(raw.get("rope_scaling") or {})
    if "rope_theta" in raw:
        params.setdefault("rope_theta", raw["rope_theta"])
    params.update(raw.get("rope_parameters") or {})  # transformers >= 5
    return params


def _rope_scaling(params: dict[str, Any], max_pos: int, root: Path) -> RopeScaling:
    kind = params.get("rope_type") or params.get("type") or "default"
    if kind == "default":
        return RopeScaling()
    factor = float(params.get("factor", 1.0))
    original = int(params.get("original_max_position_embeddings") or max_pos)
    if kind == "linear":
        return RopeScaling(kind="linear", factor=factor)
    if kind == "dynamic":
        return RopeScaling(kind="dynamic", factor=factor, original_max_position=original)
    if kind == "llama3":
        return RopeScaling(
            kind="llama3",
            factor=factor,
            low_freq_factor=float(params.get("low_freq_factor", 1.0)),
            high_freq_factor=float(params.get("high_freq_factor", 4.0)),
            original_max_position=original,
        )
    if kind == "yarn":
        return RopeScaling(
            kind="yarn",
            factor=factor,
            original_max_position=original,
            beta_fast=float(params.get("beta_fast") or 32.0),
            beta_slow=float(params.get("beta_slow") or 1.0),
        )
    raise ModelLoadError(f"{root / 'config.json'}: unsupported rope scaling type {kind!r}")


def _max_seq_len(raw: dict[str, Any], model_type: str, max_pos: int) -> int:
    # The engine has no sliding-window attention. Up to the window length, windowed and full
    # attention are the same computation, so cap the context there and stay exact.
    window = raw.get("sliding_window")
    uses_window = raw.get("use_sliding_window", model_type == "mistral")
    if uses_window and isinstance(window, int) and 0 < window < max_pos:
        return window
    return max_pos


def _load_weights(files: list[Path], root: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    weights: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            tensors = load_file(str(file))
        except (SafetensorError, OSError, ValueError) as exc:
            raise ModelLoadError(f"cannot read {file}: {_one_line(exc)}") from None
        for hf_name, tensor in tensors.items():
            if _IGNORED.fullmatch(hf_name):
                continue
            weights[_engine_name(hf_name, file)] = tensor.to(torch.float32).contiguous()
    return weights


def _engine_name(hf_name: str, file: Path) -> str:
    if hf_name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[hf_name]
    m = _LAYER_NAME.fullmatch(hf_name)
    if m and m.group(2) in _LAYER_TENSORS:
        return f"layers.{int(m.group(1))}.{_LAYER_TENSORS[m.group(2)]}"
    raise ModelLoadError(f"{file}: tensor {hf_name!r} has no place in the engine's model")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


__all__ = ["SAFETENSORS_INDEX", "config_from_hf", "load_hf_dir", "read_config_json", "safetensors_files"]
