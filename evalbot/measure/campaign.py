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

import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from evalbot.decide.records import Finding, Generation, ProcessInfo, Records, Ref, StopReason, WindowRef
from evalbot.measure import crosscheck, intake
from evalbot.measure.client import ProtocolViolation, Response
from evalbot.measure.device import cpu_cores
from evalbot.measure.keyed import KeyedStream
from evalbot.measure.plan import Cell, GuardPlan, Plan, budget_spent, drawn_lengths
from evalbot.measure.servers import Failure, Process, Spawner, failure, start_servers
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
        self.lengths = drawn_lengths(self.plan, KeyedStream(self.seed, "lengths"))  # nominal ctx -> exact length
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
            crosscheck.accuracy(self)
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
                ref=p.ref, index=p.index, startup_s=p.startup_s, model_sha256=intake.text(info.get("model_sha256")),
                drafter_sha256=intake.text(info.get("drafter_sha256")), device=intake.text(info.get("device")),
                torch=intake.text(info.get("torch")), triton=intake.text(info.get("triton")),
                block_size=info.get("block_size") or 0, sandboxed="OFF" not in self.sandbox))

    def _check_ready(self) -> None:
        """The shapes the bot checks answers against are main's: main's processes must agree on them,
        and every PR process must announce the same (a PR process announcing another vocabulary would
        choose the range of the bot's own draws and the size of what it reads)."""
        ref_info: dict = {}
        for p in self._all():
            try:
                shape = intake.ready_shape(p.client.info)
            except ProtocolViolation as e:
                raise self._fail(p, f"start-up ({p.label})", str(e)) from None
            if not ref_info:
                ref_info = shape  # the first of main's processes (_all() lists main's first)
            elif shape != ref_info:
                diff = next(k for k in intake.SHAPE_FIELDS if shape[k] != ref_info[k])
                raise self._fail(p, f"start-up ({p.label})", f"its ready answer announces {diff} {intake.short(shape[diff])}, "
                                 f"main's process 1 {intake.short(ref_info[diff])}: the bot checks every answer against main's")
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
            tokens, rep = intake.generation(r.head, new_tokens, self._vocab_of(model), "main" if proc.ref == "base" else "the PR")
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
                if not intake.is_int(vocab) or not 2 <= vocab <= intake.MAX_VOCAB:
                    raise self._fail(p, f"load_guard ({p.label})", f"the guard answer's vocab_size {intake.short(vocab)} is not an integer in [2, {intake.MAX_VOCAB}]")
                known = self.guard_vocab.setdefault(g.name, vocab)
                if vocab != known:
                    raise self._fail(p, f"load_guard ({p.label})", f"it announces guard {g.name} with a vocabulary of "
                                     f"{vocab}, main's processes {known}: the bot checks every answer against main's")

    def _guard_prompt(self, g: GuardPlan) -> Window:
        """Guards are random-weight models timed for speed only: their prompts are fresh random ids from
        the secret seed (never repeated, so no answer can be remembered), not text."""
        n = self.lengths[g.ctx]
        ids = tuple(self.rng.randrange(self.guard_vocab[g.name]) for _ in range(n))
        w = Window(corpus=f"random:{g.name}", offset=self.seq, length=n, ids=ids)
        self.guard_prompts[w.sha256] = ids  # for main's verifier, after the round
        return w

    def _warm_up(self) -> None:
        """Compile, capture and warm every process on windows of its own, all processes at once (nothing
        is timed here)."""
        self.progress("warm-up (windows of its own, untimed)")
        jobs = {}
        for p in self._all():
            work = [(cell, mode, self._take(cell.corpus, self.lengths[cell.ctx], [p.label]), self.plan.new_tokens, "main")
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
                        intake.generation(r.head, n, self._vocab_of(model), "main" if p.ref == "base" else "the PR")
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
                got = self.windows.take_many(corpus, [self.lengths[cell.ctx] for cell, _ in keys], viewers)
            except CorpusExhausted:
                return corpus
            out.update(zip(keys, got))
        return out

    def _take(self, corpus: str, length: int, viewers: Sequence[str]) -> Window:
        try:
            return self.windows.take(corpus, length, viewers)
        except CorpusExhausted as e:
            raise Failure(Finding(ref=None, where="windows", message=str(e))) from None

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
            crosscheck.round_streams(self, rnd)  # main's process re-checks the round's streams
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

    def _check_quiet(self) -> None:
        """Nothing may be left unread on a protocol channel: output nobody asked for is forged."""
        for p in self._all():
            extra = p.client.unread()
            if extra:
                raise self._fail(p, p.label, f"{extra} bytes of output nobody asked for")
