"""Starting the harness servers of a campaign: P per ref, all at once (their model loads overlap), each
greeted with its own nonce. A server that cannot start is its side's failure: the PR's (integrity)
or main's (infrastructure); a sandbox that cannot start at all is the bot's own environment."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable

from evalbot.decide.records import Finding, Ref
from evalbot.measure.client import ProtocolViolation, ServerClient
from evalbot.measure.plan import Plan

Spawner = Callable[[Ref, int, str], "tuple[object, ServerClient]"]  # (ref, index, nonce) -> (handle, client)
FAILURE_SETTLE_S = 1.0  # a failed server's time to exit and flush its stderr before the bot quotes it


class Process:
    """What the campaign needs of one running server: its client, and freezing/killing its sandbox."""

    def __init__(self, ref: Ref, index: int, handle, client: ServerClient, startup_s: float):
        self.ref, self.index, self.handle, self.client, self.startup_s = ref, index, handle, client, startup_s

    @property
    def label(self) -> str:
        return f"{'main' if self.ref == 'base' else 'PR'} process {self.index + 1}"


class Failure(Exception):
    def __init__(self, finding: Finding):
        super().__init__(finding.message)
        self.finding = finding


def failure(proc: Process | None, where: str, message: str) -> Failure:
    tail = proc.handle.stderr_tail(settle=FAILURE_SETTLE_S) if proc is not None else ""
    return Failure(Finding(ref=proc.ref if proc else None, process=proc.index if proc else None,
                           where=where, message=message, stderr_tail=tail[-4000:]))


def start_servers(plan: Plan, spawn: Spawner) -> dict[Ref, list[Process]]:
    """Every server started and greeted, or every one that started killed and a Failure raised."""
    slots = [(ref, i) for i in range(plan.processes) for ref in ("base", "head")]
    started: dict[tuple[str, int], Process] = {}
    problems: dict[tuple[str, int], Failure] = {}
    lock = threading.Lock()

    def start(ref: Ref, i: int) -> None:
        t = time.monotonic()
        try:
            handle, client = spawn(ref, i, secrets.token_hex(16))
        except Exception as e:  # noqa: BLE001 - the sandbox could not start: the bot's environment
            with lock:
                problems[(ref, i)] = Failure(Finding(ref=None, where="sandbox", message=f"cannot start a harness server: {e}"))
            return
        proc = Process(ref, i, handle, client, 0.0)
        with lock:
            started[(ref, i)] = proc
        try:
            client.hello(plan.startup_timeout_s)
            proc.startup_s = time.monotonic() - t
        except ProtocolViolation as e:
            with lock:
                problems[(ref, i)] = failure(proc, f"start-up ({proc.label})", f"the harness server did not start: {e}")

    threads = [threading.Thread(target=start, args=s, daemon=True) for s in slots]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if problems:
        for proc in started.values():
            proc.handle.kill()
        # main's failure first: a broken ruler is the bot's problem before it is the PR's
        first = sorted(problems.items(), key=lambda kv: (kv[1].finding.ref != "base", kv[1].finding.ref is not None))
        raise first[0][1]
    return {ref: [started[(ref, i)] for i in range(plan.processes)] for ref in ("base", "head")}
