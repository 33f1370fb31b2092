"""The fake Engine (see engine/fake.py)."""

import hashlib
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

from engine.fake import KNOBS, VOCAB, forge_others, maybe, next_token

maybe("start")


@dataclass
class Result:
    tokens: list
    prefill_s: float
    decode_s: float
    stats: dict = field(default_factory=dict)


class Engine:
    _memo: dict = {}
    _dspark_count = 0

    def __init__(self, model_path=None, *, loaded=None, device=None):
        import torch

        self.device = torch.device("cpu")
        self.loaded = loaded or SimpleNamespace(sha256=hashlib.sha256(b"fake-model").hexdigest())
        self.guard = loaded is not None
        self.config = SimpleNamespace(vocab_size=VOCAB, max_seq_len=1 << 20, eos_ids=())
        self.drafter = None
        self._vocab = getattr(self.loaded, "vocab_size", VOCAB) if self.guard else VOCAB  # a guard's ids are its own

    def generate(self, prompt, n, sampling=None, dspark=False, stop_at_eos=True):
        maybe("generate")
        key = (tuple(prompt[-16:]), n, dspark)
        if KNOBS["memo"] and key in self._memo:
            return self._memo[key]
        speed = KNOBS["guard_speed"] if self.guard else (KNOBS["dspark_speed"] if dspark else KNOBS["ar_speed"])
        t0 = time.perf_counter()
        if not KNOBS["instant"]:
            time.sleep(len(prompt) * KNOBS["prefill_ms_per_100"] / 100 / 1000 / (KNOBS["guard_speed"] if self.guard else 1.0))
            if n == 1 and KNOBS["slow_few_ms"]:
                time.sleep(KNOBS["slow_few_ms"] / 1000)
        t1 = time.perf_counter()
        ids = [t % VOCAB for t in prompt]
        out = []
        for _ in range(n):
            out.append(next_token(ids + out, KNOBS["ar_shift"]) % self._vocab)
        if dspark:
            Engine._dspark_count += 1
            if KNOBS["lossy_every"] and Engine._dspark_count % KNOBS["lossy_every"] == 0:
                out[n // 2] = (out[n // 2] + 1) % VOCAB
        if KNOBS["wrong_count"]:
            out = out[:-1]
        if not KNOBS["instant"]:
            time.sleep(n * KNOBS["token_ms"] / 1000 / speed)
        t2 = time.perf_counter()
        tau = KNOBS["tau"]
        low = int(tau)
        hist = [0] * 8
        hist[low] = round((1 - (tau - low)) * 100)
        hist[min(low + 1, 7)] += round((tau - low) * 100)
        c = KNOBS["forge_clock"]
        r = Result(out, (t1 - t0) * c, (t2 - t1) * c, {"tau": tau, "accept_hist": hist} if dspark else {})
        if KNOBS["memo"]:
            self._memo[key] = r
        if KNOBS["forge_fds"]:
            forge_others()
        return r

    def _argmax(self, ids, start):
        ids = [t % VOCAB for t in ids]
        return [next_token(ids[: start + i], 0) % self._vocab for i in range(len(ids) - start)]

    def teacher_forced(self, ids, start, top_k=0):
        maybe("verify")
        arg = self._argmax(ids, start)
        return {"argmax": arg, "gap": [0.0 if ids[start + i] % VOCAB == a else 5.0 for i, a in enumerate(arg)]}

    def teacher_forced_logits(self, ids, start):
        import torch

        maybe("logprobs")
        arg = self._argmax(ids, start)
        flip = KNOBS["accuracy_flip"]
        every = int(1 / flip) if flip else 0
        v = torch.arange(VOCAB, dtype=torch.float32)
        rows = []
        for i, a in enumerate(arg):
            a = (a + 1) % VOCAB if every and i % every == 0 else a
            rows.append(-(v - a).abs() * 2.0 * KNOBS["logit_scale"])
        return torch.stack(rows)
