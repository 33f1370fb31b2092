"""The DSpark speculation loop.

Greedy: draft -> verify [last token + d drafts] in one target step -> the device-side greedy commit
accepts the longest prefix where draft == target argmax and commits it plus the bonus token by moving
the cache position (no snapshot, no replay) -> the verify pass's captured rows become the drafter's
new context. Every committed token is the target's own argmax computed by the same batch-invariant
step that AR decode runs, so the stream equals AR token for token.

With SpecOptions.tree_nodes (greedy only) the drafts are a token tree instead of a chain (the drafter's
head grows it best-first, kernels/draft_head.py): the verify runs the tree's rows in one step, each row
seeing its own ancestors (engine/model.py, step(tree=True)), and the tree commit walks it from the root,
accepting at each node the child that holds the target's argmax, and moves the accepted path's keys and
captured rows to where a chain would have left them (kernels/greedy_commit.py). The committed tokens are
still the target's own argmaxes, each row's logits the bits of that row stepped alone.

Sampled (temperature > 0): rejection sampling — accept draft x with probability min(1, p(x)/q(x)),
otherwise sample from the normalised residual (p - q)+; the output is distributed exactly as the
target's own sampling.

The host syncs once per iteration: it reads the depth the drafter's confidence picked together with
the previous verify's result, while the GPU is already drafting.
"""

from __future__ import annotations

import time
from collections import deque

import torch

from engine.dspark.drafter import DrafterRuntime
from engine.session import GenerationResult, Session, first_eos, sampling_generator
from engine.graphs import Replayable
from engine.sampling import SamplingParams, probabilities
from kernels.greedy_commit import STATE_ACCEPTED, STATE_BASE, STATE_COMMITTED, STATE_PREV_BASE


def speculative_accept(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator | None) -> tuple[int, int]:
    """p [d+1, V] target probabilities at the d draft positions and the bonus position; q [d, V] the
    draft distributions the drafts were sampled from. Returns (accepted drafts, next token)."""
    d = drafts.shape[0]
    if d:
        u = torch.rand(d, generator=generator, device=p.device)
        idx = torch.arange(d, device=p.device)
        px = p[idx, drafts]
        qx = q[idx, drafts]
        ok = (u * qx <= px).tolist()  # u < p/q without dividing by a zero q
        for i in range(d):
            if not ok[i]:
                residual = torch.clamp(p[i] - q[i], min=0)
                total = residual.sum()
                dist = residual / total if total > 0 else p[i]
                return i, int(torch.multinomial(dist, 1, generator=generator))
    return d, int(torch.multinomial(p[d], 1, generator=generator))


class SpecStats:
    def __init__(self, block_size: int):
        self.block_size = block_size
        self.hist = [0] * (block_size + 1)  # verify steps that committed k tokens
        self.proposed = [0] * (block_size - 1)
        self.accepted = [0] * (block_size - 1)
        self.draft_s = 0.0
        self.verify_s = 0.0
        self.plain_steps = 0

    def record(self, d: int, j: int) -> None:
        self.hist[j + 1] += 1
        for i in range(d):
            self.proposed[i] += 1
            self.accepted[i] += int(i < j)

    def as_dict(self, committed: int) -> dict:
        forwards = sum(self.hist)
        verified = sum(k * n for k, n in enumerate(self.hist))  # the prefill's first token is not a verify's
        return {
            "tau": verified / forwards if forwards else 0.0,
            "target_forwards": forwards,
            "accept_hist": list(self.hist),
            "per_position_accept": [a / p if p else None for a, p in zip(self.accepted, self.proposed)],
            "proposed": list(self.proposed),
            "plain_steps": self.plain_steps,
            "draft_s": self.draft_s,
            "verify_s": self.verify_s,
            "block_size": self.block_size,
        }


class _PhaseTimer:
    """Sums the device time of the draft and verify phases (CUDA events; wall clock on CPU)."""

    def __init__(self, device: torch.device, enabled: bool):
        self.enabled = enabled
        self.cuda = device.type == "cuda"
        self.events: dict[str, list] = {"draft": [], "verify": []}
        self.wall: dict[str, float] = {"draft": 0.0, "verify": 0.0}

    def phase(self, name: str):
        timer = self

        class _Ctx:
            def __enter__(self):
                if timer.enabled:
                    if timer.cuda:
                        self.ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                        self.ev[0].record()
                    else:
                        self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                if timer.enabled:
                    if timer.cuda:
                        self.ev[1].record()
                        timer.events[name].append(self.ev)
                    else:
                        timer.wall[name] += time.perf_counter() - self.t0
                return False

        return _Ctx()

    def total(self, name: str) -> float:
        if self.cuda:
            return sum(a.elapsed_time(b) for a, b in self.events[name]) / 1000
        return self.wall[name]


class _Graphs:
    """The drafter passes and the verify steps of one session, captured once."""

    def __init__(self, engine, session: Session, files, tree: int):
        opts = engine.spec_options
        self.tree = tree
        self.rt = DrafterRuntime(engine.model, files, session.capacity, session.io, session.state, engine.attn_split,
                                 tree_nodes=tree, tree_fanout=opts.tree_fanout)
        rt = self.rt
        use = session.use_graphs
        dev = engine.model.device

        def both() -> None:
            rt.ctx_update()
            rt.draft()

        with session.preserved():
            self.ctx_and_draft = Replayable(both, dev, use)
            self.draft_only = Replayable(rt.draft, dev, use)
            self.ctx_only = Replayable(rt.ctx_update, dev, use)
        # The chain's verify at every depth it can pick; a token tree verifies the whole tree (below) and takes
        # only the 1-row step (the idle rule's plain decode), so it captures no chain verify it never runs.
        depths = (1,) if tree else range(1, files.config.block_size + 1)
        self.greedy_step = {m: session.step(m, commit=True) for m in depths}
        # the token tree's verify: always the whole tree (the confidence's depth is the chain's)
        self.tree_step = session.step(self.tree + 1, commit=True, tree=True) if self.tree else None
        self.files_sha = files.sha256
        # The on-device loop: `k` whole iterations (verify of the full block + greedy commit + the
        # drafter's context and next draft) in one launch, with no host round trip inside.
        self.hist = torch.zeros(files.config.block_size + 1, dtype=torch.int64, device=dev)
        self.fused: dict[int, Replayable] = {}
        self.session = session
        self.model = engine.model
        self.use = use
        # The drafter's context over the prompt's last `window` positions, on static buffers: captured,
        # it replaces ~40 eager torch launches (~1.3 ms of host time in every DSpark request's prefill on
        # the H200, docs/perf.md ninth session). Shorter prompts take the eager path.
        self.ctx_rows: Replayable | None = None
        c = files.config
        if session.capacity >= c.window:
            self.ctx_caps = torch.zeros(c.window, len(c.target_layers) * c.dim, device=dev)
            self.ctx_pos = torch.arange(c.window, device=dev)
            self.ctx_rows = Replayable(lambda: rt.context_rows(self.ctx_caps, self.ctx_pos), dev, use)

    def prefill_context(self, captured: list[torch.Tensor], end: int) -> None:
        n = self.rt.c.window
        if self.ctx_rows is None or end < n:
            self.rt.prefill_context(captured, end)
            return
        torch.cat([t[0, end - n : end] for t in captured], dim=-1, out=self.ctx_caps)
        torch.arange(end - n, end, out=self.ctx_pos)
        self.ctx_rows()

    def fused_chunk(self, k: int) -> Replayable:
        if k not in self.fused:
            s, model, rt = self.session, self.model, self.rt
            m = self.tree + 1 if self.tree else rt.c.block_size
            tree = bool(self.tree)

            def run() -> None:
                for _ in range(k):
                    model.step(s.io, m, s.cache, tree=tree, commit=s.step_commit(self.hist))
                    rt.ctx_update()
                    rt.draft()

            with s.preserved(), _kept(self.hist):
                self.fused[k] = Replayable(run, model.device, self.use)
        return self.fused[k]


class _kept:
    """Capture runs the work for real: give `t` its values back afterwards."""

    def __init__(self, t: torch.Tensor):
        self.t = t

    def __enter__(self):
        self.saved = self.t.clone()

    def __exit__(self, *exc):
        self.t.copy_(self.saved)
        return False


def _graphs_for(engine, session: Session, greedy: bool = True) -> _Graphs:
    """The session's drafter graphs: with the token tree where the options ask for one and the decode is greedy
    (sampling verifies the chain), kept per shape so that greedy and sampled requests do not recapture."""
    opts = engine.spec_options
    tree = opts.tree_nodes if greedy else 0
    key = ("dspark", tree, opts.tree_fanout if tree else 0)
    g = session.extras.get(key)
    if g is None or g.files_sha != engine.drafter.sha256:
        g = session.extras[key] = _Graphs(engine, session, engine.drafter, tree)
        if opts.device_loop and greedy:
            # Every launch size the device loop can pick, captured now, before the prefill: captured on
            # first use instead, one landed inside a timed decode now and then (50-90 % slower requests
            # in a scoring's first rounds on the H200, with the same tokens and the same acceptance).
            k = 1
            while k <= max(1, opts.loop_chunk):
                g.fused_chunk(k)
                k *= 2
    return g


def generate_dspark(engine, prompt_ids: list[int], max_new: int, sampling: SamplingParams, stop_at_eos: bool) -> GenerationResult:
    files = engine.drafter
    s = engine.session(len(prompt_ids), max_new, capture_layers=files.config.target_layers)
    g = _graphs_for(engine, s, sampling.greedy)
    opts = engine.spec_options
    g.rt.threshold.fill_(opts.confidence_threshold if opts.use_confidence else 0.0)
    if sampling.greedy and opts.device_loop:
        return _greedy_on_device(engine, s, g, prompt_ids, max_new, stop_at_eos)
    if sampling.greedy:
        return _greedy(engine, s, g, prompt_ids, max_new, stop_at_eos)
    return _sampled(engine, s, g, prompt_ids, max_new, sampling, stop_at_eos)


def _prefill(engine, s: Session, g: _Graphs, prompt_ids: list[int]):
    last_logits, captured, prefill_s = engine.prefill(s, prompt_ids)
    t0 = time.perf_counter()
    g.prefill_context(captured, len(prompt_ids))
    engine.sync()
    return last_logits, prefill_s + (time.perf_counter() - t0)


def _greedy(engine, s: Session, g: _Graphs, prompt_ids: list[int], max_new: int, stop_at_eos: bool) -> GenerationResult:
    opts = engine.spec_options
    c = g.rt.c
    stats = SpecStats(c.block_size)
    eos = set(engine.config.eos_ids) if stop_at_eos else set()
    dev = engine.model.device
    pinned = dev.type == "cuda"
    host = torch.zeros(3 + c.block_size + 1, dtype=torch.int64, pin_memory=pinned)
    with torch.inference_mode():
        last_logits, prefill_s = _prefill(engine, s, g, prompt_ids)
        t_start = time.perf_counter()
        base = len(prompt_ids)
        first = torch.argmax(last_logits)
        s.io.set_rows(first.reshape(1), base)
        s.out_tokens[0] = first
        s.state.copy_(torch.tensor([1, base, 0, 0, base], device=dev))
        ctx = len(prompt_ids)
        max_depth = opts.max_depth(ctx, c.proposals)
        recent: deque[int] = deque(maxlen=opts.idle_window)
        idle_len = opts.idle_steps
        timer = _PhaseTimer(dev, opts.time_phases)
        with timer.phase("draft"):
            g.draft_only()
        pending_d: int | None = None
        known = 1  # committed tokens the host has seen
        eos_at = None
        while True:
            # one sync: the draft is done, and so is the verify queued before it
            host[0] = 0
            host[0:1].copy_(g.rt.depth.reshape(1), non_blocking=pinned)
            host[1:3].copy_(s.state[[STATE_COMMITTED, STATE_ACCEPTED]], non_blocking=pinned)
            window = s.out_tokens[known : known + c.block_size + 1]
            host[3 : 3 + window.shape[0]].copy_(window, non_blocking=pinned)
            engine.sync()
            depth, committed, accepted = int(host[0]), int(host[1]), int(host[2])
            if pending_d is not None:
                stats.record(pending_d, accepted)
                recent.append(accepted)
            if eos and committed > known:
                hit = first_eos(host[3 : 3 + committed - known].tolist(), eos)
                if hit is not None:
                    eos_at = known + hit
            known = committed
            if committed >= max_new or eos_at is not None:
                break
            if len(recent) == recent.maxlen and sum(recent) / len(recent) < opts.idle_min_accept:
                # acceptance collapsed: decode plainly for a while, keeping the drafter's context current
                n = min(idle_len, max_new - committed)
                for _ in range(n):
                    g.greedy_step[1]()
                    g.ctx_only()
                stats.hist[1] += n
                stats.plain_steps += n
                idle_len = min(idle_len * 2, opts.idle_max_steps)
                recent.clear()
                pending_d = None
                g.draft_only()
                continue
            if recent.maxlen and len(recent) == recent.maxlen:
                idle_len = opts.idle_steps  # drafting pays again: reset the back-off
            if g.tree:
                d = c.proposals  # the tree's rows: its drafts reach as deep as the block
                with timer.phase("verify"):
                    g.tree_step()
            else:
                d = max(opts.min_depth, min(depth, max_depth, max_new - committed - 1))
                d = max(d, 0)
                with timer.phase("verify"):
                    g.greedy_step[d + 1]()
            pending_d = d
            with timer.phase("draft"):
                g.ctx_and_draft()
        engine.sync()
        stats.draft_s, stats.verify_s = timer.total("draft"), timer.total("verify")
        decode_s = time.perf_counter() - t_start
        tokens = s.out_tokens[:known].tolist()
    tokens = tokens[:max_new]
    stop = "length"
    if eos_at is not None or (stop_at_eos and first_eos(tokens, eos) is not None):
        cut = first_eos(tokens, eos)
        tokens = tokens[: cut + 1]
        stop = "eos"
    return GenerationResult(tokens, len(prompt_ids), prefill_s, decode_s, stop, mode="dspark", stats=stats.as_dict(len(tokens)))


def _greedy_on_device(engine, s: Session, g: _Graphs, prompt_ids: list[int], max_new: int, stop_at_eos: bool) -> GenerationResult:
    """Greedy DSpark with the loop on the device: each launch runs `k` iterations that each verify the
    whole block (on the GPU 7 rows cost ~2 % more than 1), commit the longest matching prefix plus the
    bonus token, and draft again; the host looks only between launches (committed count, EOS, the idle
    rule), as AR decode does every CHECK_EVERY tokens. A launch runs as many iterations (a power of two,
    at most `loop_chunk`) as the tokens still wanted need at the tokens per iteration seen so far, so the
    last launch overshoots by about one iteration at most; tokens past max_new are dropped."""
    opts = engine.spec_options
    c = g.rt.c
    eos = set(engine.config.eos_ids) if stop_at_eos else set()
    dev = engine.model.device
    chunk = max(1, opts.loop_chunk)
    plain = 0
    with torch.inference_mode():
        last_logits, prefill_s = _prefill(engine, s, g, prompt_ids)
        t_start = time.perf_counter()
        base = len(prompt_ids)
        first = torch.argmax(last_logits)
        s.io.set_rows(first.reshape(1), base)
        s.out_tokens[0] = first
        s.state.copy_(torch.tensor([1, base, 0, 0, base], device=dev))
        g.hist.zero_()
        g.draft_only()
        known, eos_at = 1, None
        idle_len = opts.idle_steps
        seen_hist = [0] * (c.block_size + 1)
        while known < max_new and eos_at is None:
            done = sum(seen_hist)
            per_iter = (known - 1) / done if done else 2.0  # tokens each iteration committed so far
            k = 1
            while k * 2 <= min(chunk, (max_new - known) / max(per_iter, 1.0)):
                k *= 2
            g.fused_chunk(k)()
            hist = g.hist.tolist()  # the launch's one synchronisation
            committed = int(s.state[STATE_COMMITTED])
            if eos:
                hit = first_eos(s.out_tokens[known:committed].tolist(), eos)
                if hit is not None:
                    eos_at = known + hit
            known = committed
            delta = [a - b for a, b in zip(hist, seen_hist)]
            seen_hist = hist
            iters = sum(delta)
            accepted = sum(j * n for j, n in enumerate(delta)) - iters  # drafts accepted in this launch
            if iters >= opts.idle_window and accepted / iters < opts.idle_min_accept and known < max_new and eos_at is None:
                # acceptance collapsed: decode plainly for a while, keeping the drafter's context current
                n = min(idle_len, max_new - known)
                for _ in range(n):
                    g.greedy_step[1]()
                    g.ctx_only()
                plain += n
                idle_len = min(idle_len * 2, opts.idle_max_steps)
                g.draft_only()
                known = int(s.state[STATE_COMMITTED])
            elif iters >= opts.idle_window:
                idle_len = opts.idle_steps
        engine.sync()
        decode_s = time.perf_counter() - t_start
        tokens = s.out_tokens[: min(known, max_new)].tolist()
        hist = g.hist.tolist()
    stats = SpecStats(c.block_size)
    stats.hist = hist
    stats.hist[1] += plain
    stats.plain_steps = plain
    iterations = sum(hist) - plain
    stats.proposed = [iterations] * c.proposals
    stats.accepted = [sum(hist[i + 2 :]) for i in range(c.proposals)]
    stop = "length"
    cut = first_eos(tokens, eos) if eos else None
    if cut is not None:
        tokens = tokens[: cut + 1]
        stop = "eos"
    return GenerationResult(tokens, len(prompt_ids), prefill_s, decode_s, stop, mode="dspark", stats=stats.as_dict(len(tokens)))


def _sampled(engine, s: Session, g: _Graphs, prompt_ids: list[int], max_new: int, sampling: SamplingParams, stop_at_eos: bool) -> GenerationResult:
    opts = engine.spec_options
    rt = g.rt
    c = rt.c
    stats = SpecStats(c.block_size)
    eos = set(engine.config.eos_ids) if stop_at_eos else set()
    gen = sampling_generator(sampling, engine.model.device)
    io = s.io
    with torch.inference_mode():
        last_logits, prefill_s = _prefill(engine, s, g, prompt_ids)
        t_start = time.perf_counter()
        base = len(prompt_ids)
        first = int(torch.multinomial(probabilities(last_logits, sampling), 1, generator=gen))
        out = [first]
        io.set_rows([first], base)
        s.state.copy_(torch.tensor([1, base, 0, 0, base], device=io.tokens.device))
        max_depth = opts.max_depth(len(prompt_ids), c.proposals)
        draft = g.draft_only
        while len(out) < max_new and not (eos and out[-1] in eos):
            draft()
            draft = g.ctx_and_draft
            d = max(opts.min_depth, min(int(rt.depth), max_depth, max_new - len(out) - 1))
            d = max(d, 0)
            # draw the drafts one by one from the drafter's distribution (the Markov bias needs the previous draw)
            prev = out[-1]
            drafts, qs = [], []
            for i in range(d):
                logits = rt.base_logits[i] + (rt.markov_u.float() @ rt.markov_v[prev].float())
                q = probabilities(logits, sampling)
                prev = int(torch.multinomial(q, 1, generator=gen))
                drafts.append(prev)
                qs.append(q)
            io.tokens[1 : 1 + d] = torch.tensor(drafts, dtype=torch.int64, device=io.tokens.device)
            s.step(d + 1, commit=False)()
            p = probabilities(io.logits[: d + 1], sampling)
            q = torch.stack(qs) if qs else p[:0]
            j, nxt = speculative_accept(p, q, torch.tensor(drafts, dtype=torch.long, device=p.device), gen)
            stats.record(d, j)
            out.extend(drafts[:j] + [nxt])
            old = int(io.positions[0])
            new_base = old + j + 1
            io.set_rows([nxt], new_base)
            s.state[STATE_PREV_BASE] = old
            s.state[STATE_BASE] = new_base
        engine.sync()
        decode_s = time.perf_counter() - t_start
    out = out[:max_new]
    stop = "length"
    cut = first_eos(out, eos) if eos else None
    if cut is not None:
        out = out[: cut + 1]
        stop = "eos"
    return GenerationResult(out, len(prompt_ids), prefill_s, decode_s, stop, mode="dspark", stats=stats.as_dict(len(out)))
