"""Is another CUDA context keeping the GPU busy? Asked before every timed request on a GPU box.

Freezing a process stops its threads, not the kernels it already queued: a frozen PR process could
leave a long kernel running while main is timed. Contexts share the GPU by time slices, so a tiny
probe kernel launched from the bot's own context waits for the busy context's slice: its latency says
whether the GPU is free. The bot waits (up to `timeout_s`) until a few probes in a row are fast.
"""

from __future__ import annotations

import statistics
import time


class GpuContention:
    def __init__(self, device: int = 0, settle: int = 3, timeout_s: float = 10.0):
        import torch

        self.torch = torch
        self.x = torch.zeros(1, device=f"cuda:{device}")
        for _ in range(20):
            self.probe()
        self.baseline = statistics.median(self.probe() for _ in range(50))
        self.limit = max(10 * self.baseline, 200e-6)
        self.settle, self.timeout_s = settle, timeout_s

    @classmethod
    def for_box(cls) -> "GpuContention | None":
        try:
            import torch
        except ImportError:  # pragma: no cover - torch is a dependency
            return None
        return cls() if torch.cuda.is_available() else None

    def probe(self) -> float:
        t0 = time.perf_counter()
        self.x.add_(1)
        self.torch.cuda.synchronize()
        return time.perf_counter() - t0

    def wait_quiet(self) -> bool:
        deadline, fast = time.monotonic() + self.timeout_s, 0
        while time.monotonic() < deadline:
            fast = fast + 1 if self.probe() < self.limit else 0
            if fast >= self.settle:
                return True
        return False
