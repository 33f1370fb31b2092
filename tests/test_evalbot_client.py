"""The bot's side of the harness protocol: its own clock, deadlines, size caps, and every way an answer
can be off (each a ProtocolViolation naming what)."""

import gc
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from evalbot.measure.client import ProtocolViolation, ServerClient


def server(body: str):
    """A process that reads one request line and answers with `body` (Python, `req` in scope)."""
    code = textwrap.dedent("""
        import json, sys, time
        out = sys.stdout.buffer
        for raw in sys.stdin.buffer:
            req = json.loads(raw)
            def send(obj, extra=b""):
                out.write((json.dumps(obj) + "\\n").encode() + extra); out.flush()
            base = {"schema": "dspark-harness/2", "id": req.get("id"), "nonce": "n0nce"}
    """) + textwrap.indent(textwrap.dedent(body), "    ")
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    return p, ServerClient(p.stdin, p.stdout, "test", "n0nce")


def ask(body: str, **kw):
    p, c = server(body)
    try:
        return c.request({"op": "generate"}, expect="generation", timeout=kw.pop("timeout", 10), **kw)
    finally:
        p.kill()


def test_a_good_answer_is_timed_by_the_bot():
    r = ask('time.sleep(0.2); send({**base, "kind": "generation", "tokens": [1, 2]})')
    assert r.head["tokens"] == [1, 2] and 0.2 <= r.seconds < 2


@pytest.mark.parametrize("answer", ['send({**base, "kind": "generation"})', "sys.exit(3)"])
def test_the_bots_own_garbage_collection_never_runs_inside_its_clock(answer, monkeypatch):
    """A full collection of a large heap takes hundreds of ms (300-480 ms in this suite's process, which
    flaked a guard): the collector is off from the request's write to the answer's last byte, and back on
    after, an answer or not; a collector the caller had off stays off."""
    import evalbot.measure.client as client

    seen = []
    read = client._Reader.read_until

    def watched(self, *a, **kw):
        seen.append(gc.isenabled())
        return read(self, *a, **kw)

    monkeypatch.setattr(client._Reader, "read_until", watched)
    for on in (True, False):
        (gc.enable if on else gc.disable)()
        try:
            try:
                ask(answer)
            except ProtocolViolation:
                pass
            assert seen and not any(seen) and gc.isenabled() == on
        finally:
            gc.enable()
        seen.clear()


def test_windows_side_by_side_keep_the_collector_off_until_the_last_one_ends():
    """Warm-up requests run in threads side by side: the first window closing does not turn the collector
    back on inside one that opened after it."""
    pa, a = server('time.sleep(1); send({**base, "kind": "generation"})')
    pb, b = server('time.sleep(3); send({**base, "kind": "generation"})')

    def later():
        time.sleep(0.3)  # opens inside a's window
        b.request({"op": "generate"}, expect="generation", timeout=10)

    try:
        slow = threading.Thread(target=later)
        slow.start()
        a.request({"op": "generate"}, expect="generation", timeout=10)
        assert slow.is_alive() and not gc.isenabled()
        slow.join(10)
        assert gc.isenabled()
    finally:
        pa.kill()
        pb.kill()
        gc.enable()


def test_a_binary_payload_is_read_exactly():
    r = ask('send({**base, "kind": "generation", "bytes": 5}, b"abcde")', max_payload=10)
    assert r.payload == b"abcde"


@pytest.mark.parametrize("body, message", [
    ('out.write(b"not json\\n"); out.flush()', "not JSON"),
    ('send([1, 2])', "not a JSON object"),
    ('send({**base, "schema": "dspark-harness/1", "kind": "generation"})', "schema"),
    ('send({**base, "kind": "error", "reason": "CUDA error"})', "answered an error: CUDA error"),
    ('send({**base, "id": 999, "kind": "generation"})', "answers request 999"),
    ('send({**base, "nonce": "other", "kind": "generation"})', "nonce"),
    ('send({**base, "kind": "verify"})', "kind 'verify'"),
    ('send({**base, "kind": "generation", "bytes": 10**9}, b"x")', "payload bytes"),
    ('sys.exit(3)', "exited"),
])
def test_every_way_an_answer_can_be_off(body, message):
    with pytest.raises(ProtocolViolation, match=message):
        ask(body, max_payload=100)


def test_silence_past_the_deadline():
    t0 = time.monotonic()
    with pytest.raises(ProtocolViolation, match="no complete answer to generate within 1 s"):
        ask("time.sleep(30)", timeout=1)
    assert time.monotonic() - t0 < 5


def test_an_endless_line_is_cut_at_the_cap(monkeypatch):
    import evalbot.measure.client as client

    monkeypatch.setattr(client, "LINE_LIMIT", 1 << 16)
    with pytest.raises(ProtocolViolation, match="longer than"):
        ask('out.write(b"x" * (1 << 20)); out.flush(); time.sleep(5)')


def test_output_nobody_asked_for_is_seen():
    p, c = server('send({**base, "kind": "generation"}); out.write(b"extra line\\n"); out.flush()')
    try:
        c.request({"op": "generate"}, expect="generation", timeout=10)
        time.sleep(0.3)
        assert c.unread() == len(b"extra line\n")
    finally:
        p.kill()
