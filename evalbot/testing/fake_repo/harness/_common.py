"""Fake harness plumbing: argument parsing and contract lines (schema dspark-harness/1)."""

import argparse
import json
import sys

SCHEMA = "dspark-harness/1"
NONCE = ""


def parse(positional=()):
    global NONCE
    p = argparse.ArgumentParser()
    p.add_argument("--profile", default="cpu")
    p.add_argument("--nonce", required=True)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out")
    for name in positional:
        p.add_argument(name)
    args = p.parse_args()
    NONCE = args.nonce
    return args


def emit(obj):
    print(json.dumps({"schema": SCHEMA, "nonce": NONCE, **obj}), flush=True)


def fail(reason):
    emit({"kind": "error", "reason": reason})
    sys.exit(2)
