"""The engine: load once, prefill, and decode (AR here; DSpark in engine/dspark/speculate.py).

On CUDA the greedy AR step (forward + device-side commit) is captured as graphs of AR_LAUNCHES steps each,
replayed with no host round trip; the host looks at the output only every CHECK_EVERY tokens (for EOS).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from engine.dspark.speculate import generate_dspark
from engine.errors import ContextOverflowError, EngineError
from engine.loader import LoadedModel, load_model
from engine.model import STEP_ROWS, Transformer
from engine.sampling import SamplingParams, sample
from engine.session import GenerationResult, Session, first_eos, sampling_generator
from kernels.greedy_commit import STATE_BASE, STATE_COMMITTED

CHECK_EVERY = 16
# Greedy AR steps per launch (each a graph of that many steps; a check's CHECK_EVERY tokens take the fewest
# launches): one graph's steps chain by programmatic dependent launch, where consecutive graphs do not.
AR_LAUNCHES = (16, 8, 4, 2, 1)
# Positions a generation may write past its last wanted token: the padded / draft rows of a step (up to
# 15), and the on-device DSpark loop's last launch (up to loop_chunk x block_size).
CAPACITY_MARGIN = 72
# Sessions kept, least recently used first out: a caller that alternates context sizes (the bot sends
# 1k, 4k and 8k windows in turn) reuses each size's KV cache and captured graphs instead of capturing
# them again on every switch (~0.5 s of capture per DSpark request on the H200 before this).
MAX_SESSIONS = 4


def pick_device(requested: str | None = None) -> torch.device:
    name = requested or os.environ.get("DSPARK_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise EngineError("CUDA was requested but no CUDA device is available")
    return torch.device(name)


class Engine:
    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        loaded: LoadedModel | None = None,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        backend: str | None = None,
        cuda_graphs: bool = True,
        attn_split: int | None = None,
    ):
        self.device = pick_device(device)
        self.loaded = loaded or load_model(model_path)
        self.config = self.loaded.config
        self.tokenizer = self.loaded.tokenizer
        self.model = Transformer(self.config, self.loaded.weights, self.device, dtype, backend)
        self.model.ensure_rope(self.config.max_seq_len + CAPACITY_MARGIN + STEP_ROWS)
        self.use_graphs = cuda_graphs and self.device.type == "cuda"
        env_split = os.environ.get("DSPARK_ATTN_SPLIT")
        self.attn_split = attn_split or (int(env_split) if env_split else None)
        self._sessions: dict[int, Session] = {}  # by capacity, oldest use first
        self.max_sessions = MAX_SESSIONS
        self.drafter = None  # set by engine.dspark when speculative decoding is enabled

    # -- sessions ----------------------------------------------------------------------------
    def capacity_for(self, prompt_len: int, max_new: int) -> int:
        need = prompt_len + max_new + CAPACITY_MARGIN
        step = 1024 if self.device.type == "cuda" else 64
        return -(-need // step) * step

    @property
    def _session(self) -> Session | None:
        """The most recently used session (None: none yet)."""
        return next(reversed(self._sessions.values()), None)

    @_session.setter
    def _session(self, value: None) -> None:
        if value is not None:
            raise ValueError("sessions are made by Engine.session(); assign None to drop them all")
        self._sessions.clear()  # the next request builds (and captures) afresh

    def session(self, prompt_len: int, max_new: int, capture_layers: tuple[int, ...] = ()) -> Session:
        cap = self.capacity_for(prompt_len, max_new)
        if self.drafter is not None:
            # AR and DSpark share one session (and so the very same step graphs) when a drafter is attached
            capture_layers = tuple(self.drafter.config.target_layers)
        s = self._sessions.pop(cap, None)
        if s is None or not set(capture_layers) <= set(s.capture_layers):
            s = None
            while self._sessions and len(self._sessions) >= max(1, self.max_sessions):
                self._sessions.pop(next(iter(self._sessions)))  # free the least recently used cache first
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            s = Session(self.model, cap, capture_layers, self.use_graphs, self.attn_split)
        self._sessions[cap] = s  # now the most recently used
        return s

    def check_request(self, prompt_ids: list[int], max_new_tokens: int) -> None:
        if not prompt_ids:
            raise EngineError("empty prompt: give at least one token of text")
        if max_new_tokens < 1:
            raise EngineError("max_new_tokens must be at least 1")
        bad = [t for t in prompt_ids if not 0 <= t < self.config.vocab_size]
        if bad:
            raise EngineError(f"token id {bad[0]} is outside the vocabulary (size {self.config.vocab_size})")
        limit = self.config.max_seq_len
        if len(prompt_ids) + max_new_tokens > limit:
            raise ContextOverflowError(
                f"prompt of {len(prompt_ids)} tokens + {max_new_tokens} new tokens exceeds the model's "
                f"context limit of {limit} tokens"
            )

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # -- generation ----------------------------------------------------------------------------
    def generate(
        self,
        prompt_ids: list[int],
        max_new_tokens: int = 128,
        sampling: SamplingParams | None = None,
        dspark: bool = False,
        stop_at_eos: bool = True,
    ) -> GenerationResult:
        sampling = sampling or SamplingParams()
        self.check_request(prompt_ids, max_new_tokens)
        if dspark:
            if self.drafter is None:
                raise EngineError("DSpark needs a drafter: load one with engine.dspark.attach_drafter()")
            return generate_dspark(self, prompt_ids, max_new_tokens, sampling, stop_at_eos)
        return self._generate_ar(prompt_ids, max_new_tokens, sampling, stop_at_eos)

    def prefill(self, session: Session, prompt_ids: list[int]) -> tuple[torch.Tensor, list[torch.Tensor], float]:
        """Fills the cache with the prompt. Returns (last-position logits [V], captured residuals, seconds)."""
        self.sync()
        t0 = time.perf_counter()
        with torch.inference_mode():
            graph = session.prefill_graph(len(prompt_ids))
            if graph is not None:
                logits, captured = graph(prompt_ids)
            else:
                tokens = torch.tensor([prompt_ids], dtype=torch.int64, device=self.device)
                logits, captured = self.model.forward_full(tokens, session.cache, 0, session.capture_layers, logits="last")
        self.sync()
        return logits[0, -1], captured, time.perf_counter() - t0

    def teacher_forced_logits(self, ids: list[int], start: int) -> torch.Tensor:
        """Float32 logits [len(ids) - start, V] predicting ids[start:], computed the way decoding
        computes them: the prefill's last row predicts ids[start], then the decode step itself
        (verify-sized blocks of rows) predicts the rest."""
        if not 0 < start < len(ids):
            raise EngineError(f"teacher forcing needs 0 < start < len(ids), got start={start}, len={len(ids)}")
        self.check_request(ids[:start], len(ids) - start)
        s = self.session(start, len(ids) - start)
        rows = []
        with torch.inference_mode():
            last, _, _ = self.prefill(s, ids[:start])
            rows.append(last.float()[None])
            pos = start
            block = STEP_ROWS - 1
            while pos < len(ids) - 1:
                chunk = ids[pos : min(pos + block, len(ids) - 1)]
                s.io.set_rows(chunk, pos)
                s.step(len(chunk), commit=False)()
                rows.append(s.io.logits[: len(chunk)].float().clone())
                pos += len(chunk)
            return torch.cat(rows)

    def teacher_forced(self, ids: list[int], start: int, top_k: int = 0) -> dict:
        """Teacher-forced predictions of ids[start:] (see teacher_forced_logits). Returns per predicted
        position: token_logprob, argmax, gap (max logit - logit of the actual token, 0 when it is the
        argmax), and top-k (ids, logprobs)."""
        logits = self.teacher_forced_logits(ids, start)
        with torch.inference_mode():
            target = torch.tensor(ids[start:], device=logits.device)
            logprobs = torch.log_softmax(logits, -1)
            tok_logit = logits.gather(1, target[:, None])[:, 0]
            out = {
                "token_logprob": logprobs.gather(1, target[:, None])[:, 0].tolist(),
                "argmax": logits.argmax(-1).tolist(),
                "gap": (logits.max(-1).values - tok_logit).tolist(),
            }
            if top_k:
                vals, idx = torch.topk(logprobs, top_k, dim=-1)
                out["topk_ids"] = idx.tolist()
                out["topk_logprobs"] = vals.tolist()
        return out

    def _eos(self) -> set[int]:
        return set(self.config.eos_ids)

    def _generate_ar(self, prompt_ids: list[int], max_new: int, sampling: SamplingParams, stop_at_eos: bool) -> GenerationResult:
        s = self.session(len(prompt_ids), max_new)
        greedy = sampling.greedy
        # captured before any real state is in place
        launches = {k: s.step(1, commit=True, times=k) for k in AR_LAUNCHES} if greedy else {}
        run = None if greedy else s.step(1, commit=False)
        gen = sampling_generator(sampling, self.device)
        with torch.inference_mode():
            last_logits, _, prefill_s = self.prefill(s, prompt_ids)
            t0 = time.perf_counter()
            first = sample(last_logits, sampling, gen)
            base = len(prompt_ids)
            s.io.set_rows(first.reshape(1), base)
            s.out_tokens[0] = first
            s.state.copy_(torch.tensor([1, base, 0, 0, base]))
            committed, eos_at = 1, None
            eos = self._eos() if stop_at_eos else set()
            while committed < max_new and eos_at is None:
                chunk = min(CHECK_EVERY, max_new - committed)
                if greedy:
                    left = chunk
                    while left:
                        k = next(k for k in AR_LAUNCHES if k <= left)
                        launches[k]()
                        left -= k
                else:
                    for i in range(chunk):
                        run()
                        tok = sample(s.io.logits[0], sampling, gen)
                        s.out_tokens[committed + i] = tok
                        s.io.tokens[0] = tok
                        s.io.positions.add_(1)
                        s.io.kv_end.add_(1)
                committed += chunk
                if eos:
                    eos_at = first_eos(s.out_tokens[:committed].tolist(), eos)
            self.sync()
            decode_s = time.perf_counter() - t0
            tokens = s.out_tokens[:committed].tolist()
        if greedy:
            assert int(s.state[STATE_COMMITTED]) == committed and int(s.state[STATE_BASE]) == base + committed - 1
        eos_at = first_eos(tokens, self._eos()) if stop_at_eos else None
        if eos_at is not None:
            tokens = tokens[: eos_at + 1]
        return GenerationResult(tokens, len(prompt_ids), prefill_s, decode_s, "eos" if eos_at is not None else "length")

