"""DSpark speculative decoding: a block drafter conditioned on the target's hidden states."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from engine.dspark.config import DrafterConfig, SpecOptions
from engine.dspark.drafter import DrafterFiles, load_drafter_files
from engine.errors import EngineError

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
BUNDLED_DRAFTER = WEIGHTS_DIR / "smollm2-135m-instruct"


def default_drafter_path(target_sha256: str) -> Path:
    """The shipped drafter for the bundled model; other targets need --drafter."""
    cfg = BUNDLED_DRAFTER / "drafter.json"
    if cfg.is_file():
        return BUNDLED_DRAFTER
    raise EngineError(f"no shipped drafter found at {BUNDLED_DRAFTER}; pass --drafter DIR")


def attach_drafter(engine, path: str | Path | None = None, options: SpecOptions | None = None) -> DrafterFiles:
    """Loads a drafter directory (default: the shipped one) and enables `generate(dspark=True)`."""
    files = load_drafter_files(path or default_drafter_path(engine.loaded.sha256))
    c = files.config
    if c.target_sha256 and engine.loaded.sha256 and c.target_sha256 != engine.loaded.sha256 and path is None:
        raise EngineError("the shipped drafter was trained for another model; pass --drafter for this one")
    from engine.dspark.drafter import check_compatible

    check_compatible(c, engine.model)
    engine.drafter = files
    engine.spec_options = options or SpecOptions.for_backend(engine.model.ops.backend)
    return files


def random_drafter(engine, seed: int = 0, target_layers: tuple[int, ...] | None = None, **overrides) -> DrafterFiles:
    """An untrained drafter with random weights (tests: speculation must stay lossless whatever it proposes)."""
    from engine.dspark.module import DrafterModule

    tc = engine.config
    layers = target_layers or tuple(sorted({1, tc.n_layers // 2, tc.n_layers - 2}))
    c = DrafterConfig(target_layers=layers, dim=tc.dim, n_heads=tc.n_heads, n_kv_heads=tc.n_kv_heads,
                      head_dim=tc.head_dim, vocab_size=tc.vocab_size, rope_theta=tc.rope_theta,
                      norm_eps=tc.norm_eps, **overrides)
    torch.manual_seed(seed)
    module = DrafterModule(c, engine.model.embed.float().cpu(), engine.model.lm_head.float().cpu())
    with torch.no_grad():
        module.markov_b.normal_(0, 0.02)
        module.conf_b.fill_(2.0)
    weights = module.export()
    digest = hashlib.sha256(str(sorted((k, float(v.float().sum())) for k, v in weights.items())).encode()).hexdigest()
    return DrafterFiles(c, weights, digest, Path(f"<random seed {seed}>"))


def use_drafter(engine, files: DrafterFiles, options: SpecOptions | None = None) -> None:
    from engine.dspark.drafter import check_compatible

    check_compatible(files.config, engine.model)
    engine.drafter = files
    engine.spec_options = options or SpecOptions.for_backend(engine.model.ops.backend)


__all__ = ["DrafterConfig", "SpecOptions", "attach_drafter", "random_drafter", "use_drafter", "BUNDLED_DRAFTER"]
