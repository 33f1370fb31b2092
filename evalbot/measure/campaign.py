"""One measuring campaign: main's and the PR's harness servers alive side by side, requests alternated
between them, each timed by the bot while every other process is frozen.

    start P servers per ref (in parallel)  ->  hello, guards loaded  ->  warm-up (windows of its own)
    ->  accuracy dumps (both refs, the same windows)  ->  rounds until decided, or the budget or the
    corpus runs out  ->  every DSpark stream re-verified by main's engine in main's process

A round uses one (main process, PR process) pair, in turn, so that every pairing is sampled and
process-to-process variance shows in the spread of rounds instead of hiding in one pair. In a round
every cell (corpus x context) gets two fresh windows, one for AR and one for DSpark, each sent to both
refs back to back, ABBA across the cells and rounds; the guards get fresh random prompts. Only the
process being timed is thawed: the others are frozen, threads and all, so neither side can load the
CPU or GPU during the other's measurement; on a GPU box the bot also checks, before it thaws a process,
that no context keeps the GPU busy, and after every answer charges the time the GPU stays busy to that
answer (`GpuContention`).

Every answer is checked at intake against main's shapes (main's processes are main's code: the ruler),
never against what a PR process announces: the vocabulary (of the model and of each guard), the
number of tokens asked for, every number finite and in range. Anything off in a PR process's answer, or
any error while the bot processes it, is the PR's integrity failure; only main's own are infrastructure
errors. Every secret draw (windows, guard prompts) comes from a keyed cryptographic stream of the seed
(evalbot/measure/keyed.py), so no prompt a process sees tells it anything about the next.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from evalbot.decide.accuracy import main_non_finite, summarize_accuracy
from evalbot.decide.records import (Finding, Generation, ProcessInfo, Records, Ref, Reported, StopReason, Verification,
                                    WindowRef)
from evalbot.measure.client import ProtocolViolation, Response
from evalbot.measure.plan import Cell, GuardPlan, Plan, budget_spent
from evalbot.measure.servers import Failure, Process, Spawner, failure, start_servers
from evalbot.measure.device import cpu_cores
from evalbot.measure.keyed import KeyedStream
from evalbot.measure.windows import CorpusExhausted, Window, WindowAllocator


# records so far -> (stop?, why, final?): `final` (a REJECT for good) stops before the minimum rounds too
StopRule = Callable[[Records], "tuple[bool, str, bool]"]


@dataclass
class Campaign:
    plan: Plan
    spawn: Spawner
    corpora: dict[str, list[int]]
    stop_rule: StopRule
    progress: Callable[[str], None] = lambda msg: None
    contention: object | None = None  # GpuContention or None (CPU box)
    seed: int = field(default_factory=lambda: secrets.randbits(63))
    sandbox: str = ""
    freezer: str = ""
    aa: bool = False  # both refs are main (a calibration)

    def __post_init__(self) -> None:
        self.records = Records(profile=self.plan.profile, processes_per_ref=self.plan.processes, seed=0,
                               sandbox=self.sandbox, freezer=self.freezer)
        shadow = self.plan.new_tokens + 64
        self.windows = WindowAllocator(self.corpora, self.seed, shadow)
        self.rng = KeyedStream(self.seed, "guard prompts")
        self.vocab = 0  # main's model's vocabulary (main's processes' answer)
        self.guard_vocab: dict[str, int] = {}  # each guard's, likewise
        self.guard_prompts: dict[str, tuple[int, ...]] = {}  # guard prompts by digest, for main's verifier
        self.procs: dict[Ref, list[Process]] = {"base": [], "head": []}
        self.seq = 0
        self.active: Process | None = None

    # -- running ------------------------------------------------------------------------------
    def run(self) -> Records:
        t0 = time.monotonic()
        try:
            self._start_all()
            self._load_guards()
            self._warm_up()
            self._accuracy()
            self._rounds(t0)
            self._check_quiet()
        except Failure as f:
            self.records.findings.append(f.finding)
            if self.records.stop is None:
                self.records.stop = StopReason(rounds=self._rounds_done(), reason="failure", detail=f.finding.message)
        finally:
            self._kill_all()
            self.records.wall_s = time.monotonic() - t0
            self.records.seed = self.seed  # revealed only once nothing can be asked any more
        return self.records

    def _rounds_done(self) -> int:
        return len({g.round for g in self.records.generations if g.round >= 0})

    def _fail(self, proc: Process | None, where: str, message: str) -> Failure:
        return failure(proc, where, message)

    # -- processes -----------------------------------------------------------------------------
    def _start_all(self) -> None:
        self.progress(f"starting {self.plan.processes} harness server(s) per ref")
        self.procs = start_servers(self.plan, self.spawn)
        for p in self._all():
            p.handle.freeze()
        self._check_ready()
        for p in self._all():
            info = p.client.info
            self.records.processes.append(ProcessInfo(
                ref=p.ref, index=p.index, startup_s=p.startup_s, model_sha256=_text(info.get("model_sha256")),
                drafter_sha256=_text(info.get("drafter_sha256")), device=_text(info.get("device")),
                torch=_text(info.get("torch")), triton=_text(info.get("triton")),
                block_size=info.get("block_size") or 0, sandboxed="OFF" not in self.sandbox))

    def _check_ready(self) -> None:
        """The shapes the bot checks answers against are main's: main's processes must agree on them,
        and every PR process must announce the same (a PR process announcing another vocabulary would
        choose the range of the bot's own draws and the size of what it reads)."""
        ref_info: dict = {}
        for p in self._all():
            info = p.client.info
            bs = info.get("block_size") or 0
            if not _is_int(bs) or not 0 <= bs <= MAX_BLOCK:
                raise self._fail(p, f"start-up ({p.label})", f"the ready answer's block_size {_short(bs)} is not an integer in [0, {MAX_BLOCK}]")
            shape = {k: info.get(k) for k in SHAPE_FIELDS}
            if not _is_int(shape["vocab_size"]) or not 2 <= shape["vocab_size"] <= MAX_VOCAB:
                raise self._fail(p, f"start-up ({p.label})", f"the ready answer's vocab_size {_short(shape['vocab_size'])} is not an integer in [2, {MAX_VOCAB}]")
            if not ref_info:
                ref_info = shape  # the first of main's processes (_all() lists main's first)
            elif shape != ref_info:
                diff = next(k for k in SHAPE_FIELDS if shape[k] != ref_info[k])
                raise self._fail(p, f"start-up ({p.label})", f"its ready answer announces {diff} {_short(shape[diff])}, "
                                 f"main's process 1 {_short(ref_info[diff])}: the bot checks every answer against main's")
        self.vocab = int(ref_info["vocab_size"])

    def _all(self) -> list[Process]:
        return [*self.procs["base"], *self.procs["head"]]

    def _kill_all(self) -> None:
        for p in self._all():
            try:
                p.handle.kill()
            except Exception:  # noqa: BLE001 - best effort; the sandbox's namespace dies with it
                pass

    # -- one request ---------------------------------------------------------------------------
    def _ask(self, proc: Process, req: dict, expect: str, *, max_payload: int = 0, timeout: float | None = None) -> Response:
        """With every process frozen, check that the GPU is quiet; thaw only `proc`, ask, and charge the
        time the GPU stays busy after the answer (its process thawed, then frozen) to the answer."""
        if self.contention is not None and not self.contention.wait_quiet():
            # main's processes are main's code; with PR processes alive, a frozen one holds the GPU
            suspect = "head" if self.procs["head"] and not self.aa else None
            raise Failure(Finding(ref=suspect, where="GPU", message=(
                f"the GPU stayed busy with every process frozen, before {proc.label} was asked: a frozen process "
                "left work running on it (kernels queued before it was frozen)")))
        where = f"{req.get('op')} ({proc.label})"
        proc.handle.thaw()
        frozen = False
        try:
            try:
                r = proc.client.request(req, expect=expect, timeout=timeout or self.plan.request_timeout_s,
                                        max_payload=max_payload)
            except ProtocolViolation as e:
                raise self._fail(proc, where, str(e)) from None
            if self.contention is not None:
                r.seconds += self._gpu_after(proc, where, time.perf_counter())
                if proc.handle.poll() is None:
                    proc.handle.freeze()
                frozen = True
                r.seconds += self._gpu_after(proc, where, time.perf_counter())
            return r
        finally:
            if not frozen and proc.handle.poll() is None:
                proc.handle.freeze()

    def _gpu_after(self, proc: Process, where: str, since: float) -> float:
        """Seconds the GPU stayed busy after `proc` answered: its own work, charged to its answer."""
        busy = self.contention.busy_for(since)
        if busy is None:
            raise self._fail(proc, where, f"the GPU stayed busy for {self.contention.timeout_s:.0f} s after "
                             f"{proc.label} answered: work left running outside the bot's clock")
        return busy

    def _generate(self, proc: Process, rnd: int, pairing: int, cell: Cell, mode: str, window: Window,
                  new_tokens: int, model: str = "main", prompt: Sequence[int] | None = None) -> Generation:
        ids = list(prompt if prompt is not None else window.ids)
        r = self._ask(proc, {"op": "generate", "mode": mode, "model": model, "prompt": ids, "new_tokens": new_tokens},
                      "generation")
        try:
            tokens, rep = self._intake(proc, r.head, new_tokens, self._vocab_of(model))
        except ProtocolViolation as e:
            raise self._fail(proc, f"generate ({proc.label})", str(e)) from None
        self.seq += 1
        g = Generation(round=rnd, pairing=pairing, ref=proc.ref, process=proc.index, corpus=cell.corpus, ctx=cell.ctx,
                       mode=mode, model=model, new_tokens=new_tokens, tokens=tokens, bot_s=r.seconds, seq=self.seq,
                       window=WindowRef(corpus=window.corpus, offset=window.offset, length=window.length,
                                        sha256=window.sha256), reported=rep)
        self.records.generations.append(g)
        return g

    def _vocab_of(self, model: str) -> int:
        return self.vocab if model == "main" else self.guard_vocab[model[len("guard:"):]]

    def _intake(self, proc: Process, h: dict, new_tokens: int, vocab: int) -> tuple[list[int], Reported]:
        """A generation answer checked against what was asked and main's shapes; ProtocolViolation if off."""
        tokens = h.get("tokens")
        if not isinstance(tokens, list) or not all(_is_int(t) for t in tokens):
            raise ProtocolViolation("the generation carries no list of token ids")
        if len(tokens) != new_tokens:
            raise ProtocolViolation(f"{_who(proc)}'s process returned {len(tokens)} tokens where {new_tokens} were asked for")
        bad = next((t for t in tokens if not 0 <= t < vocab), None)
        if bad is not None:
            raise ProtocolViolation(f"the generation carries token id {_short(bad)}, outside main's vocabulary of {vocab}")
        stats = h.get("stats", {})
        if not isinstance(stats, dict):
            raise ProtocolViolation("the generation's stats are not an object")
        hist = stats.get("accept_hist", [])
        if not isinstance(hist, list) or len(hist) > MAX_HIST or not all(_is_int(x) and 0 <= x <= MAX_COUNT for x in hist):
            raise ProtocolViolation(f"the generation's accept_hist is not a list of at most {MAX_HIST} counts")
        nums = {}
        for name, v, hi in (("prefill_s", h.get("prefill_s"), MAX_SECONDS), ("decode_s", h.get("decode_s"), MAX_SECONDS),
                            ("tau", stats.get("tau"), MAX_COUNT)):
            if v is None:
                nums[name] = None
                continue
            if not _is_num(v) or (isinstance(v, float) and not math.isfinite(v)) or not 0 <= v <= hi:
                raise ProtocolViolation(f"the generation reports {name} = {_short(v)}, not a finite number in [0, {hi:g}]")
            nums[name] = float(v)
        return list(tokens), Reported(prefill_s=nums["prefill_s"], decode_s=nums["decode_s"], tau=nums["tau"],
                                      accept_hist=list(hist))

    # -- phases --------------------------------------------------------------------------------
    def _load_guards(self) -> None:
        """Each guard's vocabulary is main's processes' answer (main's harness builds the guard from its
        own shape table); a PR process must answer the same."""
        for g in self.plan.guards:
            self.progress(f"loading guard {g.name}")
            for p in self._all():  # main's processes first
                r = self._ask(p, {"op": "load_guard", "name": g.name, "max_seq_len": g.ctx + g.new_tokens + 64}, "guard",
                              timeout=self.plan.startup_timeout_s)
                vocab = r.head.get("vocab_size")
                if not _is_int(vocab) or not 2 <= vocab <= MAX_VOCAB:
                    raise self._fail(p, f"load_guard ({p.label})", f"the guard answer's vocab_size {_short(vocab)} is not an integer in [2, {MAX_VOCAB}]")
                known = self.guard_vocab.setdefault(g.name, vocab)
                if vocab != known:
                    raise self._fail(p, f"load_guard ({p.label})", f"it announces guard {g.name} with a vocabulary of "
                                     f"{vocab}, main's processes {known}: the bot checks every answer against main's")

    def _guard_prompt(self, g: GuardPlan) -> Window:
        """Guards are random-weight models timed for speed only: their prompts are fresh random ids from
        the secret seed (never repeated, so no answer can be remembered), not text."""
        ids = tuple(self.rng.randrange(self.guard_vocab[g.name]) for _ in range(g.ctx))
        w = Window(corpus=f"random:{g.name}", offset=self.seq, length=g.ctx, ids=ids)
        self.guard_prompts[w.sha256] = ids  # for main's verifier, after the round
        return w

    def _warm_up(self) -> None:
        """Compile, capture and warm every process on windows of its own, all processes at once (nothing
        is timed here)."""
        self.progress("warm-up (windows of its own, untimed)")
        jobs = {}
        for p in self._all():
            work = [(cell, mode, self._take(cell, [p.label]), self.plan.new_tokens, "main")
                    for cell in self.plan.cells for mode in ("ar", "dspark")]
            for g in self.plan.guards:  # twice: an engine may capture a prompt length on its second sight
                for _ in range(2):
                    w = self._guard_prompt(g)
                    work.append((Cell(w.corpus, g.ctx), "ar", w, g.new_tokens, f"guard:{g.name}"))
            jobs[p.label] = (p, work)
        errors: list[Failure] = []

        # As many at once as the box has cores for: each server computes with several threads, and on
        # two cores four processes warming together spin against each other (38 s instead of 6 s).
        slots = threading.Semaphore(max(1, cpu_cores() // 4))

        def warm(p: Process, work) -> None:
            with slots:
                p.handle.thaw()
                try:
                    for cell, mode, w, n, model in work:
                        r = p.client.request({"op": "generate", "mode": mode, "model": model, "prompt": list(w.ids),
                                              "new_tokens": n}, expect="generation", timeout=self.plan.startup_timeout_s)
                        if not isinstance(r.head.get("tokens"), list) or len(r.head["tokens"]) != n:
                            got = len(r.head["tokens"]) if isinstance(r.head.get("tokens"), list) else "no list of"
                            raise ProtocolViolation(f"a warm-up generation returned {got} tokens for {n}")
                        self._intake(p, r.head, n, self._vocab_of(model))
                except ProtocolViolation as e:
                    errors.append(self._fail(p, f"warm-up ({p.label})", str(e)))
                finally:
                    if p.handle.poll() is None:
                        p.handle.freeze()

        threads = [threading.Thread(target=warm, args=job, daemon=True) for job in jobs.values()]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if errors:
            raise errors[0]

    def _round_windows(self, viewers: Sequence[str]) -> dict[tuple[Cell, str], Window] | str:
        """Every window of a round (each cell, DSpark and AR) for its pair of processes, taken before
        anything is sent: all of them, or none and the name of the corpus that has no room left."""
        out: dict[tuple[Cell, str], Window] = {}
        for corpus in dict.fromkeys(c.corpus for c in self.plan.cells):
            keys = [(cell, mode) for cell in self.plan.cells if cell.corpus == corpus for mode in ("dspark", "ar")]
            try:
                got = self.windows.take_many(corpus, [cell.ctx for cell, _ in keys], viewers)
            except CorpusExhausted:
                return corpus
            out.update(zip(keys, got))
        return out

    def _take(self, cell: Cell, viewers: Sequence[str]) -> Window:
        try:
            return self.windows.take(cell.corpus, cell.ctx, viewers)
        except CorpusExhausted as e:
            raise Failure(Finding(ref=None, where="windows", message=str(e))) from None

    def _accuracy(self) -> None:
        if not self.plan.accuracy or not self.plan.accuracy_positions:
            return
        self.progress("accuracy: both refs' log-probs over the full vocabulary")
        n = self.plan.accuracy_positions
        main_rows, pr_rows, targets = [], [], []
        pair = (self.procs["base"][0], self.procs["head"][0])
        for cell in self.plan.accuracy:
            w = self._take(cell, [p.label for p in pair])
            start = cell.ctx - n
            rows = {}
            vocab = self.vocab or int(pair[0].client.info.get("vocab_size") or 0)  # main's, for both
            for p in pair:
                r = self._ask(p, {"op": "logprobs", "prompt": list(w.ids), "start": start}, "logprobs",
                              max_payload=4 * n * max(vocab, 1))
                if r.head.get("positions") != n or r.head.get("dtype") != "float32" or len(r.payload) != 4 * n * vocab:
                    raise self._fail(p, f"logprobs ({p.label})", f"the log-prob dump has the wrong shape (main's is "
                                     f"{n} positions x {vocab} float32)")
                rows[p.ref] = np.frombuffer(r.payload, dtype=np.float32).reshape(n, vocab)
                bad = main_non_finite(rows[p.ref]) if p.ref == "base" else None
                if bad is not None:  # main's engine is the reference: no accuracy can be computed against it
                    raise self._fail(p, f"logprobs ({p.label})", f"main's log-probs are not usable: {bad}")
            main_rows.append(rows["base"])
            pr_rows.append(rows["head"])
            targets += list(w.ids[start:])
        try:
            summary = summarize_accuracy(np.concatenate(main_rows), np.concatenate(pr_rows), targets)
        except Exception as e:  # noqa: BLE001 - main's rows are checked above: what fails is the PR's dump
            raise self._fail(pair[1], f"logprobs ({pair[1].label})",
                             f"the PR's log-prob dump cannot be scored: {type(e).__name__}: {str(e)[:300]}") from None
        self.records.accuracy = summary.model_dump(mode="json")

    def _pairings(self) -> list[tuple[int, int]]:
        P = self.plan.processes
        return [(i, (i + k) % P) for k in range(P) for i in range(P)]

    def _pair(self, rnd: int) -> tuple[Process, Process]:
        mi, hi = self._pairings()[rnd % len(self._pairings())]
        return self.procs["base"][mi], self.procs["head"][hi]

    def _rounds(self, t0: float) -> None:
        rnd = 0
        round_s: list[float] = []
        while True:
            why = self._why_stop(rnd, t0, round_s)
            if why:
                self.records.stop = StopReason(rounds=rnd, reason=why[0], detail=why[1])
                return
            ts = time.monotonic()
            pi = rnd % len(self._pairings())
            m, h = self._pair(rnd)
            windows = self._round_windows([m.label, h.label])
            if isinstance(windows, str):
                self.records.stop = StopReason(rounds=rnd, reason="corpus",
                                               detail=f"no unseen {windows} windows left for another round of {m.label} and {h.label}")
                return
            self.progress(f"round {rnd + 1}: main process {m.index + 1} vs PR process {h.index + 1}")
            k = 0
            for cell in self.plan.cells:
                for mode in ("dspark", "ar"):
                    w = windows[(cell, mode)]
                    first, second = (m, h) if (rnd + k) % 2 == 0 else (h, m)
                    k += 1
                    for p in (first, second):
                        self._generate(p, rnd, pi, cell, mode, w, self.plan.new_tokens)
            for g in self.plan.guards:
                for n_new in (g.new_tokens, 1):
                    w = self._guard_prompt(g)
                    first, second = (m, h) if (rnd + k) % 2 == 0 else (h, m)
                    k += 1
                    for p in (first, second):
                        self._generate(p, rnd, pi, Cell(w.corpus, g.ctx), "ar", w, n_new, model=f"guard:{g.name}")
            self._verify_round(rnd)
            rnd += 1
            round_s.append(time.monotonic() - ts)

    def _why_stop(self, rnd: int, t0: float, round_s: list[float]) -> tuple[str, str] | None:
        if rnd >= self.plan.max_rounds:
            return ("max rounds", f"{rnd} rounds, the profile's maximum")
        if rnd > 0:
            stop, detail, final = self.stop_rule(self.records)
            if stop and (final or rnd >= self.plan.min_rounds):
                return ("decided", detail)
        if round_s:
            why = budget_spent(self.plan, rnd, time.monotonic() - t0 + max(round_s[-3:]))
            if why:
                return ("budget", why)
        return None

    def _verify_round(self, rnd: int) -> None:
        """Main's engine re-checks, in main's process, every DSpark stream of the round (both refs) and the
        PR's greedy AR streams (an AR answer is held to being main's greedy continuation too: junk
        returned fast would otherwise pass the AR floor)."""
        verifier = self.procs["base"][0]
        for g in [x for x in self.records.generations if x.round == rnd and x.model == "main"
                  and (x.mode == "dspark" or (x.mode == "ar" and x.ref == "head"))]:
            ids = self._window_ids(g)
            r = self._ask(verifier, {"op": "verify", "prompt": ids, "tokens": g.tokens}, "verify")
            argmax, gap = r.head.get("argmax"), r.head.get("gap")
            if not (isinstance(argmax, list) and isinstance(gap, list) and len(argmax) == len(gap) == len(g.tokens)
                    and all(_is_int(a) for a in argmax) and all(_is_num(d) for d in gap)):
                raise self._fail(verifier, "verify", "main's verifier answered a malformed result")
            self._record_verification(g, rnd, argmax, gap)
        self._verify_guards(rnd)

    def _record_verification(self, g: Generation, rnd: int, argmax: list, gap: list) -> None:
        tol = self.plan.verify_tolerance
        mism = [i for i, (t, a, d) in enumerate(zip(g.tokens, argmax, gap)) if t != a and float(d) > tol]
        ties = [i for i, (t, a, d) in enumerate(zip(g.tokens, argmax, gap)) if t != a and float(d) <= tol]
        self.records.verifications.append(Verification(
            ref=g.ref, process=g.process, round=rnd, mode=g.mode, model=g.model, corpus=g.corpus, ctx=g.ctx,
            window_sha256=g.window.sha256, tokens=len(g.tokens), mismatches=mism, near_ties=ties,
            worst_gap=max((float(d) for t, a, d in zip(g.tokens, argmax, gap) if t != a), default=0.0),
            tolerance=tol))

    def _verify_guards(self, rnd: int) -> None:
        """Main's process teacher-forces the PR's guard streams with its own copy of each guard (the same
        seeded weights): a guard answered with junk would otherwise pass the guard floors. Where main's
        harness cannot (an older one) or its engine fails at it, the streams stay unverified and the
        scorecard says why; that is main's limit, never the PR's finding."""
        if self.records.guards_unverified:
            return
        verifier = self.procs["base"][0]
        if verifier.client.info.get("verify_models") is not True:
            self.records.guards_unverified = "main's harness does not teacher-force guard models (verify_models)"
            return
        for g in [x for x in self.records.generations if x.round == rnd and x.ref == "head" and x.model != "main"]:
            try:
                r = self._ask(verifier, {"op": "verify", "model": g.model, "prompt": list(self.guard_prompts[g.window.sha256]),
                                         "tokens": g.tokens}, "verify")
            except Failure as e:
                if e.finding.ref != "base":
                    raise
                self.records.guards_unverified = f"main's process could not teacher-force {g.model}: {e.finding.message}"[:300]
                return
            argmax, gap = r.head.get("argmax"), r.head.get("gap")
            if not (isinstance(argmax, list) and isinstance(gap, list) and len(argmax) == len(gap) == len(g.tokens)
                    and all(_is_int(a) for a in argmax) and all(_is_num(d) for d in gap)):
                raise self._fail(verifier, "verify", "main's verifier answered a malformed result")
            self._record_verification(g, rnd, argmax, gap)

    def _window_ids(self, g: Generation) -> list[int]:
        ids = self.corpora[g.window.corpus]
        return list(ids[g.window.offset : g.window.offset + g.window.length])

    def _check_quiet(self) -> None:
        """Nothing may be left unread on a protocol channel: output nobody asked for is forged."""
        for p in self._all():
            extra = p.client.unread()
            if extra:
                raise self._fail(p, p.label, f"{extra} bytes of output nobody asked for")


# Bounds of what an answer may carry (anything outside is a broken contract, never a number to keep).
SHAPE_FIELDS = ("vocab_size", "eos_ids")  # ready fields every process must announce as main's do
MAX_VOCAB = 1 << 24
MAX_BLOCK = 4096
MAX_HIST = 4096
MAX_COUNT = 1 << 31
MAX_SECONDS = 1e6


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _who(proc: Process) -> str:
    return "main" if proc.ref == "base" else "the PR"


def _short(v) -> str:
    t = repr(v)
    return t if len(t) <= 40 else t[:37] + "..."


def _text(v) -> str:
    return str(v if v is not None else "")[:200]
