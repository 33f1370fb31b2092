"""Every kernel and model test of the CPU suite, run again here on CUDA (their DEV is "cuda" when a GPU
is present): the Triton kernels natively, against their plain-torch references, and the model's
step against forward_full and its batch invariance."""

from test_kernels import *  # noqa: F401,F403
from test_model import *  # noqa: F401,F403
