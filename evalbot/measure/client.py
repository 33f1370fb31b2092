"""The bot's side of one harness server (contract dspark-harness/2): requests, the bot's own clock, and
every check of what comes back.

The clock: `perf_counter_ns` read just before the request's bytes are written and just after the last
byte of the response is read. Nothing the process says about time is used for a gate or a tier. The bot's
own cyclic garbage collector is off in between: in a large heap one full collection takes hundreds of
milliseconds (300-480 ms in the test suite's process), which the clock would charge to the process measured.
A response is read with a deadline (select on the pipe) and a size cap enforced while reading: a
process cannot stall the bot or fill its memory. Anything off in what comes back (not JSON, another
schema, another id or nonce, an unexpected kind, too many bytes, an error answer, silence past the
deadline, an exit) is a `ProtocolViolation`; whether that is the PR's fault or an infrastructure
problem depends on whose process it was, and the campaign decides that.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import threading
import time
from dataclasses import dataclass, field

SCHEMA = "dspark-harness/2"
LINE_LIMIT = 16 * 1024 * 1024  # a JSON response line (streams of a few hundred tokens are ~KBs)


class ProtocolViolation(RuntimeError):
    pass


_GC_LOCK = threading.Lock()
_gc_windows = 0  # clock windows open now (warm-up requests run in threads side by side)
_gc_was_on = False


@contextlib.contextmanager
def _collector_off():
    """The cyclic garbage collector off while any clock window is open, and back as it was after the last."""
    global _gc_windows, _gc_was_on
    with _GC_LOCK:
        if _gc_windows == 0:
            _gc_was_on = gc.isenabled()
            gc.disable()
        _gc_windows += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_windows -= 1
            if _gc_windows == 0 and _gc_was_on:
                gc.enable()


class _NonFinite(Exception):
    pass


def _no_constant(name: str):
    """NaN and Infinity are not JSON; Python's parser accepts them unless told (the receipt cannot hold one)."""
    raise _NonFinite(name)


@dataclass
class Response:
    head: dict
    payload: bytes
    seconds: float  # the bot's clock: request written -> response read


@dataclass
class _Reader:
    fd: int
    buf: bytearray = field(default_factory=bytearray)

    def read_until(self, deadline: float, want_line: bool, nbytes: int, limit: int) -> bytes:
        """Read a line (want_line) or exactly nbytes, failing past `deadline` (monotonic) or `limit`."""
        while True:
            if want_line:
                i = self.buf.find(b"\n")
                if i >= 0:
                    out = bytes(self.buf[: i + 1])
                    del self.buf[: i + 1]
                    return out
                if len(self.buf) > limit:
                    raise ProtocolViolation(f"a response line longer than {limit // (1024 * 1024)} MiB")
            elif len(self.buf) >= nbytes:
                out = bytes(self.buf[:nbytes])
                del self.buf[:nbytes]
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                raise TimeoutError
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                raise EOFError
            self.buf += chunk


class ServerClient:
    """Talks to one harness server over its stdin/stdout pipes (binary)."""

    def __init__(self, stdin, stdout, label: str, nonce: str):
        self.stdin = stdin
        self.reader = _Reader(stdout.fileno())
        self.label = label
        self.nonce = nonce
        self.next_id = 0
        self.info: dict = {}

    def request(self, req: dict, *, expect: str, timeout: float, max_payload: int = 0) -> Response:
        self.next_id += 1
        rid = self.next_id
        data = (json.dumps({**req, "id": rid}, separators=(",", ":")) + "\n").encode()
        deadline = time.monotonic() + timeout
        # no collection inside the clock: the window allocates one answer, a collection would cost ms
        with _collector_off():
            t0 = time.perf_counter_ns()
            try:
                self.stdin.write(data)
                self.stdin.flush()
                line = self.reader.read_until(deadline, True, 0, LINE_LIMIT)
                head = self._parse(line, rid, expect)
                payload = b""
                n = head.get("bytes", 0)
                if n:
                    if not isinstance(n, int) or n < 0 or n > max_payload:
                        raise ProtocolViolation(f"{expect}: announced {n!r} payload bytes (at most {max_payload} expected)")
                    payload = self.reader.read_until(deadline, False, n, n)
                t1 = time.perf_counter_ns()
            except TimeoutError:
                raise ProtocolViolation(f"no complete answer to {req.get('op')} within {timeout:.0f} s") from None
            except (EOFError, BrokenPipeError, OSError):
                raise ProtocolViolation(f"the process exited (or closed its pipes) during {req.get('op')}") from None
        return Response(head, payload, (t1 - t0) / 1e9)

    def _parse(self, line: bytes, rid: int, expect: str) -> dict:
        try:
            head = json.loads(line, parse_constant=_no_constant)
        except _NonFinite as e:
            raise ProtocolViolation(f"a response carries {e}, which is not a finite number (JSON has none)") from None
        except ValueError:
            raise ProtocolViolation(f"a response is not JSON: {line[:80]!r}") from None
        if not isinstance(head, dict):
            raise ProtocolViolation("a response is not a JSON object")
        if head.get("schema") != SCHEMA:
            raise ProtocolViolation(f"a response has schema {head.get('schema')!r}, expected {SCHEMA!r}")
        startup_error = head.get("kind") == "error" and head.get("id") is None and not head.get("nonce")
        if not startup_error:  # the server's own start-up failure comes before it knows an id or nonce
            if head.get("id") != rid:
                raise ProtocolViolation(f"a response answers request {head.get('id')!r}, the bot asked {rid} (extra or forged output)")
            if self.nonce and head.get("nonce") != self.nonce:
                raise ProtocolViolation("a response does not carry this process's nonce (forged output)")
        if head.get("kind") == "error":
            raise ProtocolViolation(f"the harness answered an error: {str(head.get('reason'))[:500]}")
        if head.get("kind") != expect:
            raise ProtocolViolation(f"a response of kind {head.get('kind')!r}, expected {expect!r}")
        return head

    def unread(self) -> int:
        """Bytes on the channel that no request asked for (read now, without waiting)."""
        try:
            while select.select([self.reader.fd], [], [], 0)[0]:
                chunk = os.read(self.reader.fd, 1 << 20)
                if not chunk:
                    break
                self.reader.buf += chunk
                if len(self.reader.buf) > LINE_LIMIT:
                    break
        except OSError:
            pass
        return len(self.reader.buf)

    def hello(self, timeout: float) -> dict:
        r = self.request({"op": "hello", "nonce": self.nonce}, expect="ready", timeout=timeout)
        self.info = r.head
        return r.head
