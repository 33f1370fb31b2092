"""A stand-in engine for the bot's tests. Its behaviour comes from knobs.json at the repo root, so a
"PR" branch can be faster, slower, lossy, crashing, hanging or forging by changing one file."""

import hashlib
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KNOBS = {
    "token_ms": 1.0,        # AR decode time per token
    "ar_speed": 1.0,        # AR speed multiplier
    "dspark_speed": 1.25,   # DSpark speed multiplier (relative to token_ms)
    "guard_speed": 1.0,
    "prefill_speed": 1.0,
    "tau": 2.4,
    "lossy_every": 0,       # every k-th DSpark run diverges from AR (0 = never)
    "ar_shift": 0,          # shift the AR (and so every) stream: differs from main's
    "accuracy_flip": 0.0,   # fraction of positions whose argmax differs in the log-prob dump
    "crash": "",            # program name that crashes
    "hang": "",             # program name that hangs
    "forge_clock": 1.0,     # scale time.perf_counter: timings look faster than they are
    "canned": False,        # print a canned result line (stale nonce) on import
    "stdout_noise": False,  # print a log line on stdout (outside the contract)
    "env_dump": "",         # directory to dump os.environ into
    "tamper": {},           # fields patched into every tau_check line the harness prints
    "drafter": "d1",
}
KNOBS.update(json.loads((ROOT / "knobs.json").read_text()))

if KNOBS["forge_clock"] != 1.0:
    _real = time.perf_counter
    time.perf_counter = lambda: _real() * KNOBS["forge_clock"]

if KNOBS["tamper"]:
    import harness._common as _c

    _emit = _c.emit

    def _tampered(obj):
        _emit({**obj, **KNOBS["tamper"]} if obj.get("kind") == "tau_check" else obj)

    _c.emit = _tampered

if KNOBS["canned"]:
    print(json.dumps({"schema": "dspark-harness/1", "nonce": "0123456789abcdef", "kind": "tau_check"}))
if KNOBS["stdout_noise"]:
    print("loading model weights ...")
if KNOBS["env_dump"]:
    out = Path(KNOBS["env_dump"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{ROOT.name}-{os.getpid()}.json").write_text(json.dumps(dict(os.environ)))


def before(program):
    if KNOBS["crash"] == program:
        print("Traceback (most recent call last):\nRuntimeError: CUDA error: illegal memory access", file=sys.stderr)
        sys.exit(1)
    if KNOBS["hang"] == program:
        time.sleep(3600)


def prompt_tokens(text, ctx):
    data = text.encode()
    return [data[i % len(data)] for i in range(ctx)]


def prefill(prompt):
    time.sleep(len(prompt) * 0.00002 / KNOBS["prefill_speed"])


def generate(prompt, n, mode, run_index=0):
    speed = KNOBS["ar_speed"] if mode == "ar" else KNOBS["dspark_speed"]
    time.sleep(n * KNOBS["token_ms"] / 1000.0 / speed)
    seed = sum(prompt[-8:]) + KNOBS["ar_shift"]
    tokens = [(seed + 31 * i) % 997 for i in range(n)]
    if mode == "dspark" and KNOBS["lossy_every"] and (run_index + 1) % KNOBS["lossy_every"] == 0:
        tokens[n // 2] = (tokens[n // 2] + 1) % 997
    return tokens


def accept_hist(block_size):
    tau = KNOBS["tau"]
    low = int(tau)
    frac = tau - low
    hist = [0] * (block_size + 1)
    hist[low] += round((1 - frac) * 100)
    if low + 1 <= block_size:
        hist[low + 1] += round(frac * 100)
    return hist


def drafter_sha256():
    return hashlib.sha256(KNOBS["drafter"].encode()).hexdigest()


def guard_decode(name, n):
    time.sleep(n * 0.0005 / KNOBS["guard_speed"])


def guard_prefill(name, ctx):
    time.sleep(ctx * 0.00002 / KNOBS["guard_speed"])


def logprobs(positions):
    flip_every = int(1 / KNOBS["accuracy_flip"]) if KNOBS["accuracy_flip"] else 0
    argmax = [(7 * i) % 50 + (1 if flip_every and i % flip_every == 0 else 0) for i in range(positions)]
    logp = [-0.5 - (0.5 if flip_every and i % flip_every == 0 else 0.0) for i in range(positions)]
    return {"argmax": argmax, "logp": logp}
