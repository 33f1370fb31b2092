"""What the campaign takes in from a PR process: checked against main's shapes, never the PR's own
announcements; secret draws from a keyed cryptographic stream; GPU work after an answer charged to it.

The campaign here is the real one (evalbot/measure/campaign.py) with scripted processes: every answer
a hostile PR engine could give is one line of a fake client.
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from evalbot.measure import crosscheck
from evalbot.measure.campaign import Campaign
from evalbot.measure.client import Response
from evalbot.measure.keyed import KeyedStream
from evalbot.measure.plan import Cell, GuardPlan, Plan
from evalbot.measure.servers import Failure, Process

REPO = Path(__file__).resolve().parents[1]
VOCAB, GUARD_VOCAB = 1000, 500


class Client:
    """A harness server's answers; `edit(req, head)` lets a test make one side hostile."""

    def __init__(self, ref, edit=None, info=None, guard_vocab=GUARD_VOCAB, log=None):
        self.ref, self.edit, self.guard_vocab, self.log = ref, edit, guard_vocab, log
        self.info = {"vocab_size": VOCAB, "eos_ids": [], "block_size": 8, **(info or {})}
        self.calls: dict[str, int] = {}

    def request(self, req, expect, timeout, max_payload=0):
        op = req["op"]
        self.calls[op] = self.calls.get(op, 0) + 1
        if self.log is not None:
            self.log.append((self.ref, op, req, max_payload))
        if op == "load_guard":
            head = {"kind": "guard", "vocab_size": self.guard_vocab}
        elif op == "generate":
            head = {"kind": "generation", "tokens": [(i * 7) % 97 for i in range(req["new_tokens"])],
                    "prefill_s": 0.001, "decode_s": 0.002, "stats": {"tau": 2.0, "accept_hist": [1, 2]}}
        elif op == "verify":
            head = {"kind": "verify", "argmax": list(req["tokens"]), "gap": [0.0] * len(req["tokens"])}
        else:
            raise AssertionError(op)
        if self.edit is not None and op == "generate":
            head = self.edit(req, head, self.calls[op]) or head
        return Response(head, b"", 0.01)


class Handle:
    def __init__(self, events, label):
        self.events, self.label = events, label

    def thaw(self):
        self.events.append(("thaw", self.label))

    def freeze(self):
        self.events.append(("freeze", self.label))

    def poll(self):
        return None

    def kill(self):
        pass

    def stderr_tail(self, **kw):
        return ""


PLAN = Plan(profile="cpu", cells=(Cell("prose", 32),), new_tokens=4, processes=1,
            guards=(GuardPlan("fake-g", 16, 2),), min_rounds=1, max_rounds=1, budget_s=1e9)


def campaign(head_edit=None, head_info=None, head_guard_vocab=GUARD_VOCAB, contention=None, seed=None, log=None, plan=PLAN):
    events: list = []
    kw = {} if seed is None else {"seed": seed}
    c = Campaign(plan=plan, spawn=None, corpora={"prose": list(range(VOCAB)) * 8}, contention=contention,
                 stop_rule=lambda rec: (False, "", False), **kw)
    base = Client("base", log=log)
    head = Client("head", head_edit, head_info, head_guard_vocab, log=log)
    c.procs = {"base": [Process("base", 0, Handle(events, "main"), base, 0.0)],
               "head": [Process("head", 0, Handle(events, "pr"), head, 0.0)]}
    c.events = events
    return c


def run_all(c):
    c._check_ready()
    c._load_guards()
    c._warm_up()
    c._rounds(time.monotonic())
    return c.records


def failure_of(c) -> SimpleNamespace:
    with pytest.raises(Failure) as e:
        run_all(c)
    return e.value.finding


# -- secret draws ----------------------------------------------------------------------------------

def test_keyed_stream_is_reproducible_from_the_seed_and_labels_are_independent():
    a = [KeyedStream(12345, "windows").randrange(1 << 16) for _ in range(1)]
    s1, s2 = KeyedStream(12345, "windows"), KeyedStream(12345, "windows")
    one, two = [s1.randrange(65536) for _ in range(200)], [s2.randrange(65536) for _ in range(200)]
    assert one == two and one[0] == a[0]
    other_label = KeyedStream(12345, "guard prompts")
    other_seed = KeyedStream(12346, "windows")
    three, four = [other_label.randrange(65536) for _ in range(200)], [other_seed.randrange(65536) for _ in range(200)]
    # independent streams: about 200/65536 coincidences expected, never a shared run
    assert sum(x == y for x, y in zip(one, three)) <= 3 and sum(x == y for x, y in zip(one, four)) <= 3


def test_keyed_stream_state_round_trips_and_ranges_are_uniform():
    s = KeyedStream(7, "x")
    s.randrange(10)
    state = s.getstate()
    after = [s.randrange(1000) for _ in range(5)]
    s.setstate(state)
    assert [s.randrange(1000) for _ in range(5)] == after
    # an unbiased range (3 of every 4 values of two bits kept): each of 3 values about a third
    counts = np.bincount([s.randrange(3) for _ in range(6000)], minlength=3)
    assert all(1800 < c < 2200 for c in counts), counts
    assert {s.randrange(1) for _ in range(10)} == {0}
    with pytest.raises(ValueError):
        s.randrange(0)


def test_no_mersenne_twister_left_in_the_measuring_side():
    out = subprocess.run(["git", "grep", "-n", "-E", r"random\.Random|^import random|from random import",
                          "--", "evalbot/measure"], cwd=REPO, capture_output=True, text=True)
    assert out.stdout == "", out.stdout


def test_the_same_seed_sends_the_same_prompts_and_another_seed_other_ones():
    def prompts(seed):
        log: list = []
        run_all(campaign(seed=seed, log=log))
        return [tuple(req["prompt"]) for ref, op, req, _ in log if op == "generate" and ref == "head"]

    a, b, c = prompts(99), prompts(99), prompts(100)
    assert a == b and a != c


def test_each_campaign_measures_at_lengths_drawn_from_its_seed_below_the_published_ones():
    """Code written for the published lengths (32 and 16 here, 1,024 / 4,096 / 7,936 on the GPU) gains
    nothing: each campaign's exact lengths are drawn from its secret seed, the same for both refs, the
    warm-up and every round, and the records name the cell by its nominal length."""
    jittered = dataclasses.replace(PLAN, length_jitter=0.25, max_rounds=2)
    seen = set()
    for seed in range(1, 13):
        log: list = []
        records = run_all(campaign(seed=seed, log=log, plan=jittered))
        sent = [(req["model"], len(req["prompt"])) for _, op, req, _ in log if op == "generate"]
        cell = {n for model, n in sent if model == "main"}
        guard = {n for model, n in sent if model == "guard:fake-g" and n != 1}
        assert len(cell) == 1 and 24 <= min(cell) <= 32, cell  # one length: warm-up, rounds, both refs
        assert len(guard) == 1 and 12 <= min(guard) <= 16, guard
        timed = [g for g in records.generations if g.model == "main"]
        assert {g.ctx for g in timed} == {32} and {g.window.length for g in timed} == cell
        seen.add((min(cell), min(guard)))
    assert len(seen) >= 4, seen  # twelve seeds, 9 x 5 possible pairs: the lengths are drawn, not fixed
    log = []
    run_all(campaign(seed=5, log=log))  # no jitter: exactly the nominal lengths
    assert {len(req["prompt"]) for _, op, req, _ in log if op == "generate" and req["model"] == "main"} == {32}


def test_the_drawn_lengths_come_from_the_profile_and_a_bad_jitter_is_refused():
    from evalbot.measure.plan import plan_for
    from evalbot.settings import ProfileSettings

    assert plan_for("gpu", ProfileSettings(), gpu=True).length_jitter == 0.0625
    assert plan_for("gpu", ProfileSettings(length_jitter=0), gpu=True).length_jitter == 0
    with pytest.raises(ValueError, match="length_jitter"):
        ProfileSettings(length_jitter=0.5)


def test_guard_prompts_are_drawn_from_mains_guard_vocabulary_not_the_prs():
    """The PR answered load_guard with 65535 (to receive raw 16-bit outputs): a finding, and nothing
    drawn from its number."""
    f = failure_of(campaign(head_guard_vocab=65535))
    assert f.ref == "head" and f.where == "load_guard (PR process 1)"
    assert "vocabulary of 65535, main's processes 500" in f.message
    log: list = []
    run_all(campaign(log=log))
    guard_ids = [t for _, op, req, _ in log if op == "generate" and req["model"] == "guard:fake-g" for t in req["prompt"]]
    assert guard_ids and max(guard_ids) < GUARD_VOCAB


def test_a_pr_process_announcing_another_vocabulary_is_an_integrity_finding():
    f = failure_of(campaign(head_info={"vocab_size": 10**9}))
    assert f.ref == "head" and f.where == "start-up (PR process 1)" and "vocab_size" in f.message
    f = failure_of(campaign(head_info={"vocab_size": 999}))
    assert f.ref == "head" and "announces vocab_size 999, main's process 1 1000" in f.message


# -- intake of generations -------------------------------------------------------------------------

def after_warmup(change):
    """Edit the PR's answers to timed generations only (the warm-up sends 2 main + 2 guard requests)."""
    return lambda req, head, n: change(head) if n > 4 else None


@pytest.mark.parametrize("change, words", [
    (lambda h: {**h, "tokens": []}, "the PR's process returned 0 tokens where 4 were asked for"),
    (lambda h: {**h, "tokens": [1, 2, 3, VOCAB]}, f"token id {VOCAB}, outside main's vocabulary of {VOCAB}"),
    (lambda h: {**h, "tokens": [1, 2, 3, -1]}, "token id -1, outside"),
    (lambda h: {**h, "tokens": [1, 2, 3, True]}, "no list of token ids"),
    (lambda h: {**h, "prefill_s": math.nan}, "prefill_s = nan, not a finite number"),
    (lambda h: {**h, "decode_s": math.inf}, "decode_s = inf"),
    (lambda h: {**h, "decode_s": -1.0}, "decode_s = -1.0"),
    (lambda h: {**h, "stats": {"tau": 10**400}}, "tau = "),
    (lambda h: {**h, "stats": {"accept_hist": [1, "x"]}}, "accept_hist"),
    (lambda h: {**h, "stats": []}, "stats are not an object"),
])
def test_a_bad_pr_generation_is_the_prs_integrity_finding_never_an_infra_error(change, words):
    f = failure_of(campaign(head_edit=after_warmup(change)))
    assert f.ref == "head" and f.where == "generate (PR process 1)", f
    assert words in f.message, f.message


def test_guard_tokens_are_checked_against_mains_guard_vocabulary():
    def edit(req, head, n):
        if req["model"].startswith("guard:") and n > 4:
            return {**head, "tokens": [GUARD_VOCAB] * req["new_tokens"]}
    f = failure_of(campaign(head_edit=edit))
    assert f.ref == "head" and f"outside main's vocabulary of {GUARD_VOCAB}" in f.message


def test_a_bad_warm_up_answer_is_the_prs_finding_too():
    f = failure_of(campaign(head_edit=lambda req, head, n: {**head, "tokens": [VOCAB + 5] * req["new_tokens"]}))
    assert f.ref == "head" and f.where == "warm-up (PR process 1)" and "outside main's vocabulary" in f.message


def test_an_honest_pair_runs_through_and_records_numbers():
    rec = run_all(campaign())
    gens = [g for g in rec.generations if g.round == 0]
    assert len(gens) == 2 * 2 + 2 * 2 and all(g.reported.prefill_s == 0.001 for g in gens)


# -- accuracy --------------------------------------------------------------------------------------

def test_the_log_prob_cap_and_shape_are_mains_and_a_dump_that_cannot_be_scored_is_the_prs_finding(monkeypatch):
    import evalbot.measure.crosscheck as cm

    n = 4
    seen = {}

    class LpClient:
        def __init__(self, ref, vocab):
            self.ref, self.vocab, self.info = ref, vocab, {"vocab_size": vocab}

        def request(self, req, expect, timeout, max_payload=0):
            seen[self.ref] = max_payload
            lp = np.full((n, self.vocab), -math.log(self.vocab), np.float32)
            return Response({"positions": n, "dtype": "float32"}, lp.tobytes(), 0.01)

    events: list = []
    plan = Plan(profile="cpu", cells=(), new_tokens=4, processes=1, accuracy=(Cell("prose", 16),), accuracy_positions=n)
    c = Campaign(plan=plan, spawn=None, corpora={"prose": list(range(400))}, stop_rule=None)
    c.vocab = 8
    c.procs = {"base": [Process("base", 0, Handle(events, "main"), LpClient("base", 8), 0.0)],
               "head": [Process("head", 0, Handle(events, "pr"), LpClient("head", 7), 0.0)]}
    with pytest.raises(Failure) as e:  # the PR announces and dumps 7 columns: main's shape is 8
        crosscheck.accuracy(c)
    assert e.value.finding.ref == "head" and "main's is 4 positions x 8 float32" in e.value.finding.message
    assert seen == {"base": 4 * n * 8, "head": 4 * n * 8}

    c.procs["head"][0].client = LpClient("head", 8)
    c.windows.free.clear()
    monkeypatch.setattr(cm, "summarize_accuracy", lambda *a: (_ for _ in ()).throw(ValueError("kl rows differ")))
    with pytest.raises(Failure) as e:
        crosscheck.accuracy(c)
    assert e.value.finding.ref == "head" and "cannot be scored: ValueError: kl rows differ" in e.value.finding.message


# -- the GPU after an answer -----------------------------------------------------------------------

class FakeContention:
    timeout_s = 10.0

    def __init__(self, events, busy=0.0):
        self.events, self.busy = events, busy

    def wait_quiet(self):
        self.events.append(("quiet?", None))
        return True

    def busy_for(self, since=None):
        self.events.append(("busy?", None))
        return self.busy


def test_gpu_quiet_is_checked_before_thawing_and_busy_time_after_an_answer_is_charged_to_it():
    events: list = []
    c = campaign(contention=FakeContention(events, busy=0.25))
    c.events = events
    for p in c._all():
        p.handle.events = events
    c._check_ready()
    c._load_guards()
    events.clear()
    g = c._generate(c.procs["head"][0], 0, 0, PLAN.cells[0], "ar", c._take("prose", 32, ["x"]), 4)
    assert [e[0] for e in events] == ["quiet?", "thaw", "busy?", "freeze", "busy?"]
    assert g.bot_s == pytest.approx(0.01 + 0.25 + 0.25)  # the client's 0.01 s and both probes' busy time


def test_a_gpu_busy_past_the_timeout_after_an_answer_is_that_processes_failure():
    events: list = []
    c = campaign(contention=FakeContention(events, busy=None))
    c._check_ready()
    with pytest.raises(Failure) as e:
        c._load_guards()
    assert e.value.finding.ref == "base"  # main's own first (an infra error); the same for a PR process is its own
    c = campaign(contention=FakeContention(events, busy=0.0))
    c._check_ready()
    c._load_guards()
    c.contention = FakeContention(events, busy=None)
    with pytest.raises(Failure) as e:
        c._generate(c.procs["head"][0], 0, 0, PLAN.cells[0], "ar", c._take("prose", 32, ["x"]), 4)
    assert e.value.finding.ref == "head" and "stayed busy for 10 s after PR process 1 answered" in e.value.finding.message


def test_busy_for_measures_until_the_gpu_is_quiet():
    from evalbot.measure.gpu_contention import GpuContention

    g = GpuContention.__new__(GpuContention)
    g.limit, g.settle, g.timeout_s = 1e-3, 3, 5.0
    script = iter([0.05, 0.05, 0.0, 0.0, 0.0])

    def probe():
        t = next(script)
        time.sleep(t)
        return t

    g.probe = probe
    busy = g.busy_for()
    assert 0.09 <= busy < 0.5
    g.probe = lambda: 0.0
    assert g.busy_for() == 0.0  # a quiet GPU: nobody is charged the probes' own time


# -- AR streams ------------------------------------------------------------------------------------

def greedy(n: int) -> list[int]:
    return [(i * 7) % 97 for i in range(n)]  # the fake engines' greedy continuation, whatever the prompt


class Verifier(Client):
    """Main's process whose `verify` teacher-forces a stream against the fake's greedy continuation."""

    def request(self, req, expect, timeout, max_payload=0):
        if req["op"] != "verify":
            return super().request(req, expect, timeout, max_payload)
        self.calls["verify"] = self.calls.get("verify", 0) + 1
        if self.log is not None:
            self.log.append((self.ref, "verify", req, max_payload))
        top = greedy(len(req["tokens"]))
        return Response({"kind": "verify", "argmax": top,
                         "gap": [0.0 if t == a else 3.0 for t, a in zip(req["tokens"], top)]}, b"", 0.01)


def ar_campaign(head_edit=None):
    c = campaign(head_edit=head_edit)
    c.procs["base"][0] = Process("base", 0, Handle(c.events, "main"), Verifier("base"), 0.0)
    return c


def test_the_prs_greedy_ar_streams_are_verified_by_main_and_junk_is_an_integrity_finding():
    from evalbot.decide.integrity import check_records
    from evalbot.settings import IntegritySettings

    honest = run_all(ar_campaign())
    kinds = sorted((v.ref, v.mode) for v in honest.verifications)
    assert kinds == [("base", "dspark"), ("head", "ar"), ("head", "dspark")]  # main's own AR is not re-verified
    assert not check_records(honest, IntegritySettings()).findings

    def junk_ar(req, head, n):  # answers AR requests of the main model with junk, DSpark honestly
        if req["mode"] == "ar" and req["model"] == "main" and n > 4:
            return {**head, "tokens": [0] * req["new_tokens"]}

    rec = run_all(ar_campaign(junk_ar))
    [f] = [f for f in check_records(rec, IntegritySettings()).findings if f.ref == "head"]
    assert f.where == "prose@32 ar" and "greedy AR stream is not main's greedy continuation from token 1" in f.message


def test_ar_verifications_do_not_count_as_dspark_streams():
    from evalbot.decide.measurements import summarize
    from evalbot.decide.noise import NoiseFloor

    rec = run_all(ar_campaign())
    m = summarize(rec, noise=NoiseFloor.default("box", "cpu", 0.01, "e"))
    [cell] = m.cells
    assert (cell.pr_streams, cell.main_streams, cell.pr_tokens_verified) == (1, 1, PLAN.new_tokens)


def guard_campaign(head_edit=None, main_info=None, fail_guard_verify=False):
    c = campaign(head_edit=head_edit)

    class GuardVerifier(Verifier):
        def request(self, req, expect, timeout, max_payload=0):
            if req["op"] == "verify" and req.get("model", "main") != "main" and fail_guard_verify:
                from evalbot.measure.client import ProtocolViolation
                raise ProtocolViolation("main's process answered an error: CUDA graph capture failed")
            return super().request(req, expect, timeout, max_payload)

    main = GuardVerifier("base", info={"verify_models": True, **(main_info or {})})
    c.procs["base"][0] = Process("base", 0, Handle(c.events, "main"), main, 0.0)
    return c, main


def junk_guard(req, head, n):  # answers guard requests with junk, the main model honestly
    if req["model"].startswith("guard:") and n > 4:
        return {**head, "tokens": [0] * req["new_tokens"]}


def test_the_prs_guard_streams_are_teacher_forced_by_mains_copy_of_the_guard():
    from evalbot.decide.integrity import check_records
    from evalbot.decide.measurements import summarize
    from evalbot.decide.noise import NoiseFloor
    from evalbot.settings import IntegritySettings

    c, _ = guard_campaign()
    rec = run_all(c)
    guard_checks = [v for v in rec.verifications if v.model != "main"]
    assert [(v.ref, v.model, v.tokens) for v in guard_checks] == [("head", "guard:fake-g", 2), ("head", "guard:fake-g", 1)]
    assert not rec.guards_unverified and not check_records(rec, IntegritySettings()).findings
    [g] = summarize(rec, noise=NoiseFloor.default("box", "cpu", 0.01, "e")).guards
    assert (g.pr_streams, g.pr_verified, g.unverified) == (2, 2, "")

    c, _ = guard_campaign(junk_guard)
    rec = run_all(c)
    [f] = [f for f in check_records(rec, IntegritySettings()).findings if f.ref == "head"]
    assert f.where == "guard fake-g" and "fake-g guard stream is not that guard's greedy continuation from token 1" in f.message


def test_guard_prompts_sent_to_the_verifier_are_the_ones_the_pr_was_timed_on():
    log: list = []
    c = campaign(log=log)
    main = Verifier("base", info={"verify_models": True}, log=log)
    c.procs["base"][0] = Process("base", 0, Handle(c.events, "main"), main, 0.0)
    run_all(c)
    timed = [req["prompt"] for ref, op, req, _ in log if ref == "head" and op == "generate"
             and req["model"].startswith("guard:")][-2:]
    checked = [req["prompt"] for ref, op, req, _ in log if op == "verify" and req.get("model", "main") != "main"]
    assert checked == timed and all(len(p) == PLAN.guards[0].ctx for p in checked)


@pytest.mark.parametrize("main_info, fail, why", [
    ({"verify_models": False}, False, "main's harness does not teacher-force guard models"),
    ({}, True, "main's process could not teacher-force guard:fake-g"),
])
def test_guard_streams_main_cannot_verify_stay_unverified_and_say_why_never_a_finding(main_info, fail, why):
    from evalbot.decide.gates import gate_guards
    from evalbot.decide.integrity import check_records
    from evalbot.decide.measurements import summarize
    from evalbot.decide.noise import NoiseFloor
    from evalbot.settings import IntegritySettings, Thresholds

    c, _ = guard_campaign(junk_guard, main_info=main_info, fail_guard_verify=fail)
    rec = run_all(c)  # completes: main's limit is not an infrastructure error
    assert why in rec.guards_unverified and not [v for v in rec.verifications if v.model != "main"]
    assert not [f for f in check_records(rec, IntegritySettings()).findings if f.ref == "head"]
    m = summarize(rec, noise=NoiseFloor.default("box", "cpu", 0.01, "e"))
    [gate] = gate_guards(m, Thresholds())
    assert f"streams not verified ({why}" in gate.detail
