"""Is another CUDA context keeping the GPU busy? Asked before every timed request on a GPU box.

Freezing a process stops its threads, not the kernels it already queued: a frozen PR process could
leave a long kernel running while main is timed. Contexts share the GPU by time slices, so a tiny
probe kernel launched from the bot's own context waits for the busy context's slice: its latency says
whether the GPU is free. The bot waits (up to `timeout_s`) until a few probes in a row are fast.

Before it thaws a process the bot checks that the GPU is quiet; after every answer it measures how long
the GPU stays busy (`busy_for`) and charges that time to the request: work a process queued to run
right after it answered (outside the bot's clock) is timed like the rest of its answer.
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
        return self.busy_for() is not None

    def busy_for(self, since: float | None = None) -> float | None:
        """Seconds the GPU stayed busy: from `since` (perf_counter; default now) until the first of
        `settle` fast probes in a row began, or 0.0 if the first probes were fast already (a quiet GPU
        costs nobody the probes' own time). None if it is still busy after `timeout_s`."""
        t0 = time.perf_counter() if since is None else since
        deadline, fast, busy, quiet_at = time.monotonic() + self.timeout_s, 0, False, t0
        while time.monotonic() < deadline:
            ts = time.perf_counter()
            if self.probe() < self.limit:
                if fast == 0:
                    quiet_at = ts
                fast += 1
                if fast >= self.settle:
                    return max(0.0, quiet_at - t0) if busy else 0.0
            else:
                fast, busy = 0, True
        return None
