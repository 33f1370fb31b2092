"""One entry point for every model source: the bundled model, a .gguf file, an HF directory."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from engine import model_files
from engine.config import ModelConfig
from engine.errors import ModelLoadError
from engine.gguf_loader import load_gguf, load_gguf_tokenizer
from engine.hf_loader import load_hf_dir, safetensors_files
from engine.tokenizer import Tokenizer


@dataclass
class LoadedModel:
    config: ModelConfig
    weights: dict[str, torch.Tensor]  # engine names (engine/config.py), float32
    tokenizer: Tokenizer
    source_path: Path
    sha256: str  # the .gguf file's sha256, or a digest over a directory's model files


def load_model(path: str | Path | None = None) -> LoadedModel:
    """None -> the bundled SmolLM2 GGUF; a directory -> HF loader; *.gguf -> GGUF loader."""
    if path is None:
        source = model_files.bundled_model_path()
    else:
        source = Path(path).expanduser()
    if source.is_dir():
        config, weights, tokenizer = load_hf_dir(source)
        digest = directory_digest(source)
    elif source.suffix.lower() == ".gguf":
        config, weights, tokenizer = load_gguf(source)  # raises for a missing file
        # bundled_model_path() has just verified the bundled file against its pinned hash.
        digest = model_files.BUNDLED_MODEL.sha256 if path is None else model_files.file_sha256(source)
    elif not source.exists():
        raise ModelLoadError(f"model path not found: {source}")
    else:
        raise ModelLoadError(f"{source} is neither a .gguf file nor a model directory")
    check_weights(config, weights, source)
    return LoadedModel(config, weights, tokenizer, source, digest)


def load_tokenizer(path: str | Path | None = None) -> Tokenizer:
    """The tokenizer of a model source (None -> the bundled GGUF), without loading its weights."""
    source = model_files.bundled_model_path() if path is None else Path(path).expanduser()
    if source.is_dir():
        return Tokenizer.from_hf_dir(source)
    if source.suffix.lower() == ".gguf":
        return load_gguf_tokenizer(source)
    raise ModelLoadError(f"model path not found: {source}" if not source.exists() else f"{source} is neither a .gguf file nor a model directory")


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every weight the model needs for `config`, with its shape (the contract in config.py)."""
    c = config
    shapes: dict[str, tuple[int, ...]] = {"embed": (c.vocab_size, c.dim), "norm": (c.dim,)}
    if not c.tie_embeddings:
        shapes["lm_head"] = (c.vocab_size, c.dim)
    for i in range(c.n_layers):
        p = f"layers.{i}."
        shapes |= {
            p + "attn_norm": (c.dim,),
            p + "wq": (c.q_dim, c.dim),
            p + "wk": (c.kv_dim, c.dim),
            p + "wv": (c.kv_dim, c.dim),
            p + "wo": (c.dim, c.q_dim),
            p + "ffn_norm": (c.dim,),
            p + "w_gate": (c.ffn_dim, c.dim),
            p + "w_up": (c.ffn_dim, c.dim),
            p + "w_down": (c.dim, c.ffn_dim),
        }
        if c.qkv_bias:
            shapes |= {p + "bq": (c.q_dim,), p + "bk": (c.kv_dim,), p + "bv": (c.kv_dim,)}
        if c.qk_norm:
            shapes |= {p + "q_norm": (c.head_dim,), p + "k_norm": (c.head_dim,)}
    return shapes


def check_weights(config: ModelConfig, weights: dict[str, torch.Tensor], source: Path) -> None:
    """Fail at load time, with names, rather than deep inside a forward pass."""
    expected = expected_shapes(config)
    missing = sorted(set(expected) - set(weights), key=_natural_key)
    extra = sorted(set(weights) - set(expected), key=_natural_key)
    wrong = [
        f"{name} {tuple(weights[name].shape)} (expected {shape})"
        for name, shape in expected.items()
        if name in weights and tuple(weights[name].shape) != shape
    ]
    problems = []
    if missing:
        problems.append("missing " + _few(missing))
    if extra:
        problems.append("unexpected " + _few(extra))
    if wrong:
        problems.append("wrong shape " + _few(wrong))
    if problems:
        raise ModelLoadError(f"{source}: weights do not match the config: {'; '.join(problems)}")


def directory_digest(root: Path) -> str:
    """sha256 over (name, sha256) of the files that decide a directory model's outputs."""
    names = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
             "chat_template.jinja"]
    files = [root / n for n in names if (root / n).is_file()] + safetensors_files(root)
    outer = hashlib.sha256()
    for f in sorted(set(files)):
        outer.update(f"{f.name}\0{model_files.file_sha256(f)}\n".encode())
    return outer.hexdigest()


def _few(items: list[str], limit: int = 5) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _natural_key(name: str) -> list[tuple[int, int, str]]:
    # layers.2 before layers.10; the tuple keeps int and str parts comparable.
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in name.split(".")]


__all__ = ["LoadedModel", "check_weights", "directory_digest", "expected_shapes", "load_model"]
