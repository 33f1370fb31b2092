"""The output contract (docs/harness.md): JSON lines with schema and nonce on stdout, nothing else.

Programs build every result first and print them only when all succeeded; any failure prints one
`error` line and exits 1. While they run, stdout is redirected to stderr, so nothing the engine
prints can corrupt the result stream.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from typing import Callable

SCHEMA = "dspark-harness/1"


def add_common_args(ap) -> None:
    ap.add_argument("--nonce", default=os.environ.get("DSPARK_HARNESS_NONCE", ""),
                    help="echoed on every line so the bot can tell this run's output from canned text")


def line(kind: str, nonce: str, **fields) -> str:
    return json.dumps({"schema": SCHEMA, "kind": kind, "nonce": nonce, **fields}, separators=(",", ":"))


def run_program(body: Callable[[], list[str]], nonce: str) -> int:
    """Runs `body` (which returns the finished result lines) with stdout diverted to stderr; prints
    the lines only if it completed, else one error line. Returns the exit status."""
    real_stdout = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):
            lines = body()
        if not lines:
            raise RuntimeError("no result was produced")
    except KeyboardInterrupt:
        real_stdout.write(line("error", nonce, reason="interrupted") + "\n")
        return 130
    except BaseException as exc:  # noqa: BLE001 - report any failure as the contract's error line
        if os.environ.get("DSPARK_DEBUG"):
            traceback.print_exc()
        reason = f"{type(exc).__name__}: {exc}".strip()
        real_stdout.write(line("error", nonce, reason=reason[:2000]) + "\n")
        real_stdout.flush()
        return 1
    real_stdout.write("".join(x + "\n" for x in lines))
    real_stdout.flush()
    return 0
