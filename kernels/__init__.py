"""Triton kernels for the decode/verify step, each beside its plain-torch reference.

On a machine without a GPU, Triton can only run in its interpreter, so that becomes the default
there (set TRITON_INTERPRET yourself to override). CPU inference uses the torch references; the
interpreter is for tests.
"""

import os

if "TRITON_INTERPRET" not in os.environ:
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"
