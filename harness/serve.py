"""python -m harness.serve — the harness as a server (contract `dspark-harness/2`, docs/harness.md).

One process, one model load, many requests. The bot writes one JSON request per line on stdin and
reads one response per request on stdout; it times every generation itself, from writing the request
to reading the whole response, so nothing this process says about time enters a gate or a tier. The
bot chooses every prompt (token ids of real text it cut at run time), so this process never learns
what it will be asked next.

Requests (every one carries "id"; every response echoes it and this process's nonce):
  {"op": "hello", "nonce": N}                                 -> kind "ready": model, drafter, device
  {"op": "generate", "mode": "ar"|"dspark", "model": "main"|"guard:NAME",
   "prompt": [ids], "new_tokens": N}                          -> kind "generation": tokens + the
                                                                 engine's own timings and stats
  {"op": "load_guard", "name": NAME, "max_seq_len": N}        -> kind "guard": a guard model loaded
  {"op": "verify", "prompt": [ids], "tokens": [ids],
   "model": "main"|"guard:NAME"}                              -> kind "verify": per token, this engine's
                                                                 (or that guard's) teacher-forced argmax
                                                                 and the gap
  {"op": "logprobs", "prompt": [ids], "start": S}             -> kind "logprobs": a JSON header line,
                                                                 then `bytes` raw bytes: float32
                                                                 log-softmax [positions, vocab]
Any failure answers kind "error" with a reason; the process keeps serving.

The protocol uses the process's original stdout, duplicated at start; fd 1 itself then points at
stderr, so whatever the engine prints (Python or C) cannot interleave with a response. A process that
writes to the protocol channel anyway is breaking the contract, and the bot says so.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

SCHEMA = "dspark-harness/2"


class Server:
    def __init__(self, model: str | None, drafter: str | None, out) -> None:
        import torch
        import triton

        from engine.dspark import attach_drafter
        from engine.generate import Engine

        self.out = out
        self.nonce = ""
        self.engine = Engine(model)
        self.files = attach_drafter(self.engine, drafter)
        self.guards: dict[str, object] = {}
        dev = self.engine.device
        self.info = {
            "model_sha256": self.engine.loaded.sha256, "drafter_sha256": self.files.sha256,
            "block_size": self.files.config.block_size, "vocab_size": self.engine.config.vocab_size,
            "max_seq_len": self.engine.config.max_seq_len, "eos_ids": list(self.engine.config.eos_ids),
            "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "torch": torch.__version__, "triton": triton.__version__,
            "verify_models": True,  # verify takes "model": the bot may teacher-force guard streams too
        }

    # -- wire --------------------------------------------------------------------------------
    def send(self, kind: str, rid, payload: bytes = b"", **fields) -> None:
        head = {"schema": SCHEMA, "kind": kind, "id": rid, "nonce": self.nonce, **fields}
        if payload:
            head["bytes"] = len(payload)
        self.out.write((json.dumps(head, separators=(",", ":")) + "\n").encode() + payload)
        self.out.flush()

    def handle(self, req: dict) -> None:
        op = req.get("op")
        rid = req.get("id")
        handler = getattr(self, f"op_{op}", None) if isinstance(op, str) else None
        if handler is None:
            raise ValueError(f"unknown op {op!r}")
        handler(rid, req)

    # -- ops ---------------------------------------------------------------------------------
    def op_hello(self, rid, req: dict) -> None:
        self.nonce = str(req.get("nonce", ""))
        self.send("ready", rid, **self.info)

    def _engine_for(self, name: str):
        if name == "main":
            return self.engine
        if name.startswith("guard:") and name[6:] in self.guards:
            return self.guards[name[6:]]
        raise ValueError(f"unknown model {name!r} (load guards with op load_guard first)")

    def op_load_guard(self, rid, req: dict) -> None:
        import torch

        from engine.generate import Engine
        from harness.guard import guard_model
        from harness.profiles import guard_shape

        shape = guard_shape(str(req["name"]))
        dev = self.engine.device
        dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
        loaded = guard_model(shape, dev, dtype, int(req["max_seq_len"]))
        self.guards[shape.name] = Engine(loaded=loaded, device=str(dev))
        self.send("guard", rid, name=shape.name, sha256=loaded.sha256, vocab_size=shape.vocab_size)

    def op_generate(self, rid, req: dict) -> None:
        mode = req.get("mode")
        if mode not in ("ar", "dspark"):
            raise ValueError(f"mode must be ar or dspark, got {mode!r}")
        engine = self._engine_for(str(req.get("model", "main")))
        prompt = [int(t) for t in req["prompt"]]
        r = engine.generate(prompt, int(req["new_tokens"]), dspark=mode == "dspark", stop_at_eos=False)
        stats = {k: r.stats[k] for k in ("tau", "accept_hist", "target_forwards", "plain_steps") if k in r.stats}
        self.send("generation", rid, tokens=r.tokens, prefill_s=r.prefill_s, decode_s=r.decode_s, stats=stats)

    def op_verify(self, rid, req: dict) -> None:
        prompt = [int(t) for t in req["prompt"]]
        tokens = [int(t) for t in req["tokens"]]
        if not tokens:
            raise ValueError("verify needs at least one token")
        tf = self._engine_for(str(req.get("model", "main"))).teacher_forced(prompt + tokens, len(prompt))
        self.send("verify", rid, argmax=tf["argmax"], gap=tf["gap"])

    def op_logprobs(self, rid, req: dict) -> None:
        import torch

        ids = [int(t) for t in req["prompt"]]
        logits = self.engine.teacher_forced_logits(ids, int(req["start"]))
        lp = torch.log_softmax(logits, -1).to(torch.float32).cpu().contiguous()
        self.send("logprobs", rid, payload=lp.numpy().tobytes(), positions=lp.shape[0], vocab=lp.shape[1],
                  dtype="float32")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="model path (default: the bundled model)")
    ap.add_argument("--drafter", default=None, help="drafter directory (default: the shipped drafter)")
    args = ap.parse_args(argv)
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # fd 1 (and sys.stdout) now reach stderr: prints cannot corrupt the protocol
    sys.stdout = sys.stderr
    try:
        server = Server(args.model, args.drafter, out)
    except Exception as exc:  # noqa: BLE001 - one line the bot can show; no traceback on the channel
        out.write((json.dumps({"schema": SCHEMA, "kind": "error", "id": None, "nonce": "",
                               "reason": f"start-up failed: {type(exc).__name__}: {exc}"[:2000]}) + "\n").encode())
        return 1
    for raw in sys.stdin.buffer:
        if not raw.strip():
            continue
        rid = None
        try:
            req = json.loads(raw)
            if not isinstance(req, dict):
                raise ValueError("a request must be a JSON object")
            rid = req.get("id")
            server.handle(req)
        except Exception as exc:  # noqa: BLE001 - answer, never die mid-conversation
            with contextlib.suppress(OSError):
                server.send("error", rid, reason=f"{type(exc).__name__}: {exc}"[:2000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
