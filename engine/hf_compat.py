"""The same weights as a Hugging Face transformers model: the parity tests' reference and the
benchmark's baseline. transformers is a test/bench-only dependency, imported here lazily."""

from __future__ import annotations

import torch

from engine.config import ModelConfig
from engine.errors import EngineError


def _hf_names(config: ModelConfig) -> dict[str, str]:
    names = {"embed": "model.embed_tokens.weight", "norm": "model.norm.weight", "lm_head": "lm_head.weight"}
    per_layer = {
        "attn_norm": "input_layernorm.weight", "ffn_norm": "post_attention_layernorm.weight",
        "wq": "self_attn.q_proj.weight", "wk": "self_attn.k_proj.weight", "wv": "self_attn.v_proj.weight",
        "wo": "self_attn.o_proj.weight", "bq": "self_attn.q_proj.bias", "bk": "self_attn.k_proj.bias",
        "bv": "self_attn.v_proj.bias", "q_norm": "self_attn.q_norm.weight", "k_norm": "self_attn.k_norm.weight",
        "w_gate": "mlp.gate_proj.weight", "w_up": "mlp.up_proj.weight", "w_down": "mlp.down_proj.weight",
    }
    for i in range(config.n_layers):
        for ours, theirs in per_layer.items():
            names[f"layers.{i}.{ours}"] = f"model.layers.{i}.{theirs}"
    return names


def hf_config(config: ModelConfig):
    try:
        import transformers
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise EngineError("the HF comparison needs the 'transformers' package (pip install transformers)") from exc
    common = dict(
        vocab_size=config.vocab_size, hidden_size=config.dim, intermediate_size=config.ffn_dim,
        num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads, head_dim=config.head_dim, rms_norm_eps=config.norm_eps,
        max_position_embeddings=config.max_seq_len, tie_word_embeddings=config.tie_embeddings,
        bos_token_id=config.bos_id, eos_token_id=list(config.eos_ids) or None,
    )
    rope = {"rope_type": "default", "rope_theta": config.rope_theta}
    rs = config.rope_scaling
    if rs.kind == "linear":
        rope.update(rope_type="linear", factor=rs.factor)
    elif rs.kind == "llama3":
        rope.update(rope_type="llama3", factor=rs.factor, low_freq_factor=rs.low_freq_factor,
                    high_freq_factor=rs.high_freq_factor, original_max_position_embeddings=rs.original_max_position)
    elif rs.kind != "none":
        raise EngineError(f"the HF comparison does not map rope scaling {rs.kind!r}")
    arch = {"llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config"}[config.arch]
    cls = getattr(transformers, arch)
    extra = {"attention_bias": config.qkv_bias} if config.arch == "llama" else {}
    cfg = cls(**common, **extra)
    # transformers 5 reads rope_parameters; 4.x reads rope_theta/rope_scaling
    if hasattr(cfg, "rope_parameters"):
        cfg.rope_parameters = rope
    cfg.rope_theta = config.rope_theta
    if rs.kind != "none":
        cfg.rope_scaling = rope
    return cfg


def to_hf_model(config: ModelConfig, weights: dict[str, torch.Tensor], device="cpu", dtype=torch.float32):
    from transformers import AutoModelForCausalLM

    cfg = hf_config(config)
    try:
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
    except TypeError:  # transformers < 4.56 names it torch_dtype
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype, attn_implementation="sdpa")
    names = _hf_names(config)
    state = {names[k]: v for k, v in weights.items() if k in names}
    if config.tie_embeddings:
        state.pop("lm_head.weight", None)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not (config.tie_embeddings and m == "lm_head.weight") and "rotary" not in m]
    if missing or unexpected:
        raise EngineError(f"HF model does not match the weights: missing {missing[:3]}, unexpected {unexpected[:3]}")
    if config.tie_embeddings:
        model.tie_weights()
    return model.to(device=device, dtype=dtype).eval()
