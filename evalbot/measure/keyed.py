"""Secret draws the measured processes cannot predict: a keyed cryptographic stream per purpose.

Every choice the bot keeps secret from the processes while it measures (which window of the corpus,
the ids of a guard prompt) comes from HMAC-SHA256(key = the campaign's seed, label || counter). The
stream is reproducible from the seed, which the receipt reveals once nothing can be asked any more,
but its outputs say nothing about the seed or about later outputs (Mersenne Twister, used before,
gives its whole state away after 624 outputs: a PR that saw one guard prompt knew every window).
Streams of different labels are independent. `randrange` is unbiased (rejection sampling).
"""

from __future__ import annotations

import hashlib
import hmac

_BLOCK = 32  # bytes of one HMAC-SHA256 block


class KeyedStream:
    """Uniform draws from HMAC-SHA256(seed, label || counter). The API is the part of the standard library's Random
    the bot uses: randrange(n), getstate(), setstate()."""

    def __init__(self, seed: int, label: str):
        if not isinstance(seed, int) or seed < 0:
            raise ValueError("the seed is a non-negative integer")
        self._key = seed.to_bytes(max(8, (seed.bit_length() + 7) // 8), "big")
        self._label = label.encode()
        self._counter = 0
        self._buf = b""

    def _bytes(self, n: int) -> bytes:
        while len(self._buf) < n:
            block = hmac.new(self._key, self._label + b"\x00" + self._counter.to_bytes(8, "big"), hashlib.sha256)
            self._buf += block.digest()
            self._counter += 1
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def randbits(self, k: int) -> int:
        if k < 1:
            raise ValueError("randbits needs k >= 1")
        x = int.from_bytes(self._bytes((k + 7) // 8), "big")
        return x >> (8 * ((k + 7) // 8) - k)

    def randrange(self, n: int) -> int:
        """Uniform in [0, n): draws of the bit length of n-1, redrawn while >= n (fewer than two draws on
        average)."""
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"empty range for randrange({n!r})")
        if n == 1:
            return 0
        k = (n - 1).bit_length()
        while True:
            x = self.randbits(k)
            if x < n:
                return x

    def getstate(self) -> tuple[int, bytes]:
        return (self._counter, self._buf)

    def setstate(self, state: tuple[int, bytes]) -> None:
        self._counter, self._buf = state
