"""A stand-in engine for the bot's tests: the API the harness server (harness/serve.py, the real one)
calls, with arithmetic instead of a model and sleeps instead of compute. Its behaviour comes from
knobs.json at the repo root, so a "PR" branch can be faster, slower, lossy, crashing, hanging, forging
or remembering by changing one file."""

import json
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KNOBS = {
    "token_ms": 2.0,        # AR decode time per token
    "prefill_ms_per_100": 10.0,
    "ar_speed": 1.0,        # AR speed multiplier
    "dspark_speed": 1.5,    # DSpark speed multiplier (relative to token_ms)
    "guard_speed": 1.0,
    "tau": 2.4,
    "lossy_every": 0,       # every k-th DSpark generation diverges from main's argmax (0 = never)
    "ar_shift": 0,          # shift every stream: differs from main's
    "accuracy_flip": 0.0,   # fraction of positions whose argmax differs in the log-prob dump
    "logit_scale": 1.0,     # scale the log-prob dump's logits (same argmax, another distribution)
    "crash": "",            # op at which the process exits ("start" = while loading)
    "hang": "",             # op at which the process sleeps forever
    "fault_after": 0,       # calls of that op answered normally before it crashes or hangs
    "forge_clock": 1.0,     # the times it reports are scaled by this (the bot's clock is not)
    "stdout_noise": False,  # print to stdout while loading (the server points fd 1 at stderr)
    "forge_fds": False,     # after each answer, write a forged answer line to every other pipe it has
    "memo": False,          # remember answers by the prompt's last 16 tokens and return them at once
    "spin": False,          # a process of its own (setsid) that keeps a core busy, frozen or not
    "wrong_count": False,   # return one token fewer than asked for
    "instant": False,       # never sleep: answers faster than the work could take
    "slow_few_ms": 0.0,     # sleep this long for requests of one token (prefill-only requests)
    "secret_probe": "",     # look for this text in its environment, every /proc/*/environ and cmdline it can
                            # read, and the files under $HOME and /tmp; found: exit naming where
    "drafter": "d1",
}
KNOBS.update(json.loads((ROOT / "knobs.json").read_text()))
# engine/boost.txt (if the tree has it) multiplies DSpark speed: lets a test move main under an open PR
# without touching knobs.json (which the PR changes), to see that the merge of both is what is measured
if (ROOT / "engine" / "boost.txt").is_file():
    KNOBS["dspark_speed"] *= float((ROOT / "engine" / "boost.txt").read_text())
VOCAB = 49152  # the bundled tokenizer's: the bot cuts windows with it

if KNOBS["stdout_noise"]:
    print("loading model weights ...", flush=True)
    os.write(1, b"{\"schema\": \"dspark-harness/2\", \"kind\": \"generation\", \"id\": 2}\n")
if KNOBS["secret_probe"]:
    import glob
    needle = KNOBS["secret_probe"]
    places = [("os.environ", "\n".join(f"{k}={v}" for k, v in os.environ.items()).encode())]
    for path in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline") + \
            glob.glob(os.path.expanduser("~/**"), recursive=True)[:2000] + glob.glob("/tmp/**", recursive=True)[:2000]:
        try:
            with open(path, "rb") as f:
                places.append((path, f.read(1 << 20)))
        except OSError:
            pass
    for where, data in places:
        if needle.encode() in data:
            print(f"secret_probe: found the secret in {where}", file=os.sys.stderr, flush=True)
            os._exit(3)

if KNOBS["spin"]:
    # out of the server's process group and session, so that stopping the group would miss it
    import subprocess
    import sys
    subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


CALLS: dict = {}


def maybe(op):
    CALLS[op] = CALLS.get(op, 0) + 1
    if CALLS[op] <= KNOBS["fault_after"]:
        return
    if KNOBS["crash"] == op:
        print("RuntimeError: CUDA error: an illegal memory access was encountered", file=os.sys.stderr, flush=True)
        os._exit(1)
    if KNOBS["hang"] == op:
        time.sleep(3600)


def next_token(prefix, shift=0):
    a = prefix[-1] if prefix else 0
    b = prefix[-2] if len(prefix) > 1 else 0
    return (a * 7 + b * 3 + len(prefix) + shift) % VOCAB


def forge_others():
    for fd in range(3, 40):
        try:
            os.write(fd, b'{"schema": "dspark-harness/2", "kind": "generation", "id": 999, "tokens": []}\n')
        except OSError:
            pass
