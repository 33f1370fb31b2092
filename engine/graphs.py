"""CUDA-graph capture of work that runs on static buffers; a plain call everywhere else."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Callable, Iterator

import torch


@contextmanager
def no_automatic_gc() -> Iterator[None]:
    """Python's cyclic collector paused. It runs at arbitrary allocations, and what it frees may hold
    CUDA graphs (a dropped session and its DSpark graphs reference each other); a graph destroyed while
    another stream is capturing invalidates that capture ("operation not permitted when stream is
    capturing (function reset)", then "operation failed due to a previous error during capture").
    torch.cuda.graph no longer collects before a capture (torch.compiler.config.force_cudagraph_gc)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Replayable:
    """`fn` reads and writes only tensors whose addresses never change. On CUDA (when enabled) it is
    captured once as a graph and replayed; elsewhere it is called. The capture runs `fn` once for
    real first (Triton compiles then), so callers capture before they put real state in place."""

    def __init__(self, fn: Callable[[], None], device: torch.device, use_graph: bool):
        self.fn = fn
        self.graph: torch.cuda.CUDAGraph | None = None
        if use_graph and device.type == "cuda":
            stream = torch.cuda.Stream(device)
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream):
                fn()
                fn()
            torch.cuda.current_stream(device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with no_automatic_gc(), torch.cuda.graph(graph):
                fn()
            self.graph = graph

    def __call__(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.fn()
