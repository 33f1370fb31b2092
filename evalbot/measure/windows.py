"""Exact-length windows of real text that no measured process has seen before.

The bot tokenizes the harness corpora itself and cuts every prompt it sends at run time, from offsets
drawn from a keyed cryptographic stream of a secret seed (evalbot/measure/keyed.py; the seed is
recorded in the receipt afterwards, so a run can be reproduced, and no prompt reveals it). A window
claims its own tokens and a *shadow* after it (at least the tokens a generation produces) for every
process it is sent to: no later window sent to one of those processes may overlap a claim, so no
process is ever sent a prompt it has seen, nor one whose corpus continuation it saw inside an earlier
prompt. Both refs of a round get the same windows; warm-ups, AR and DSpark take fresh ones. Claims
are per process (processes are sandboxed apart and share nothing), so a window one pair of processes
measured may be measured again by a pair that has seen none of it: the corpus goes further.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from evalbot.measure.keyed import KeyedStream


class CorpusExhausted(RuntimeError):
    """No unclaimed stretch of the corpus is long enough for another window."""


@dataclass(frozen=True)
class Window:
    corpus: str
    offset: int
    length: int
    ids: tuple[int, ...]

    @property
    def sha256(self) -> str:
        return token_digest(self.ids)

    @property
    def key(self) -> str:
        return f"{self.corpus}@{self.offset}+{self.length}"


def token_digest(ids: Sequence[int]) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()


Viewer = Hashable  # who is sent a window: one measured process


class WindowAllocator:
    """Draws windows (each with its shadow) uniformly from the stretches of a corpus that none of the
    processes it is for has been sent yet."""

    def __init__(self, corpora: Mapping[str, Sequence[int]], seed: int, shadow: int):
        if shadow < 0:
            raise ValueError("shadow must be >= 0")
        self.corpora = {name: list(ids) for name, ids in corpora.items()}
        self.shadow = shadow
        self.rng = KeyedStream(seed, "windows")
        self.free: dict[tuple[Viewer, str], list[tuple[int, int]]] = {}
        self.taken: list[Window] = []

    def capacity(self, corpus: str, length: int, viewers: Sequence[Viewer] = ("all",)) -> int:
        """How many more windows of `length` fit for all `viewers` (packing the free stretches tightly)."""
        need = length + self.shadow
        return sum((b - a) // need for a, b in self._common(corpus, viewers))

    def take(self, corpus: str, length: int, viewers: Sequence[Viewer] = ("all",)) -> Window:
        if length < 1:
            raise ValueError("a window needs at least one token")
        free = self._common(corpus, viewers)
        need = length + self.shadow
        starts = [(a, b - need) for a, b in free if b - a >= need]  # valid start ranges [a, last]: end <= b
        total = sum(last - a + 1 for a, last in starts)
        if total == 0:
            raise CorpusExhausted(f"corpus {corpus!r} has no unclaimed stretch of {need} tokens left")
        pick = self.rng.randrange(total)
        for a, last in starts:
            span = last - a + 1
            if pick < span:
                start = a + pick
                break
            pick -= span
        for v in viewers:
            self._claim(v, corpus, start, start + need)
        window = Window(corpus, start, length, tuple(self.corpora[corpus][start : start + length]))
        self.taken.append(window)
        return window

    def take_many(self, corpus: str, lengths: Sequence[int], viewers: Sequence[Viewer] = ("all",)) -> list[Window]:
        """Windows of every length in `lengths` for `viewers`, all or none: the longest are placed first
        (what is left then fits the shorter ones best), and if one does not fit, nothing is claimed and
        CorpusExhausted is raised. Returned in the order of `lengths`."""
        free = {k: list(v) for k, v in self.free.items()}
        n_taken, state = len(self.taken), self.rng.getstate()
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        out: dict[int, Window] = {}
        try:
            for i in order:
                out[i] = self.take(corpus, lengths[i], viewers)
        except CorpusExhausted:
            self.free, self.taken[n_taken:] = free, []
            self.rng.setstate(state)
            raise
        return [out[i] for i in range(len(lengths))]

    def _free(self, viewer: Viewer, corpus: str) -> list[tuple[int, int]]:
        if corpus not in self.corpora:
            raise KeyError(f"unknown corpus {corpus!r} (known: {', '.join(sorted(self.corpora))})")
        return self.free.setdefault((viewer, corpus), [(0, len(self.corpora[corpus]))])

    def _common(self, corpus: str, viewers: Sequence[Viewer]) -> list[tuple[int, int]]:
        """The stretches free for every viewer (intersection of their free lists)."""
        if not viewers:
            raise ValueError("a window is taken for at least one process")
        common = self._free(viewers[0], corpus)
        for v in viewers[1:]:
            other, out = self._free(v, corpus), []
            i = j = 0
            while i < len(common) and j < len(other):
                lo, hi = max(common[i][0], other[j][0]), min(common[i][1], other[j][1])
                if lo < hi:
                    out.append((lo, hi))
                if common[i][1] < other[j][1]:
                    i += 1
                else:
                    j += 1
            common = out
        return common

    def _claim(self, viewer: Viewer, corpus: str, lo: int, hi: int) -> None:
        out = []
        for a, b in self._free(viewer, corpus):
            if b <= lo or a >= hi:
                out.append((a, b))
                continue
            if a < lo:
                out.append((a, lo))
            if hi < b:
                out.append((hi, b))
        self.free[(viewer, corpus)] = out
