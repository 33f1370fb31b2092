"""The GPU suite: random-weight models in the bundled model's exact shape and the guard shapes, no
model staging, on CUDA. Every test here is skipped (not failed) where CUDA is absent, so CI on CPU
stays green; `bash bench/gpu_tests.sh` runs it on the GPU box in one call. Any change under engine/
or kernels/ runs this suite on a GPU before it lands (README, "Development")."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
CUDA = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if CUDA:
        return
    skip = pytest.mark.skip(reason="needs CUDA: run tests/gpu on the GPU box (bash bench/gpu_tests.sh)")
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)
