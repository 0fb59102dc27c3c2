"""Counter-based randomness: every draw is a pure function of (seed, stream, counter...).

The controller never keeps a generator object. A random choice is addressed by the run seed, a
stream name ("prompts/pick", "seeds", ...) and one or more integer counters, and hashed with
BLAKE2b, so the state to save is a few integers and a resumed run draws exactly what an
uninterrupted one would. The same inputs give the same numbers on every machine and Python version.

    random_u64(7, "prompts/pick", 41)          # an int in [0, 2**64)
    uniform(7, "prompts/pick", 41)             # a float in [0, 1)
    perm = KeyedPermutation(1000, 7, "math/epoch3");  perm(0), perm(1), ...   # a bijection
"""

from __future__ import annotations

import hashlib

__all__ = ["KeyedPermutation", "randbelow", "random_u64", "sample_seed", "uniform"]

_U64 = 1 << 64


def random_u64(seed: int, stream: str, *counter: int) -> int:
    """A uniformly distributed integer in [0, 2**64) addressed by (seed, stream, counter...).

    Distinct addresses give independent-looking values; equal addresses give equal values.
    """
    if not counter:
        raise ValueError("random_u64 needs at least one counter")
    text = ",".join(str(int(c)) for c in counter)
    data = f"{int(seed)}\x1f{stream}\x1f{text}".encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def uniform(seed: int, stream: str, *counter: int) -> float:
    """A float in [0, 1) with 53 random bits."""
    return (random_u64(seed, stream, *counter) >> 11) * (1.0 / (1 << 53))


def randbelow(n: int, seed: int, stream: str, *counter: int) -> int:
    """An integer in [0, n) (multiply-shift; bias below n / 2**64)."""
    if n < 1:
        raise ValueError(f"randbelow needs n >= 1, got {n}")
    return (random_u64(seed, stream, *counter) * n) >> 64


def sample_seed(seed: int, stream: str, *counter: int) -> int:
    """A non-negative 63-bit seed (fits an int64 field) for a sampler."""
    return random_u64(seed, stream, *counter) >> 1


class KeyedPermutation:
    """A pseudo-random bijection of [0, n), computed one index at a time in O(1) memory.

    A 4-round balanced Feistel network over 2h bits (4**h >= n), keyed by (seed, stream), with
    cycle walking: values >= n are encrypted again until they land in [0, n). It shuffles a
    dataset of any size without materialising the order, so an epoch's order is a pure function
    of (seed, stream) and a cursor position is all the state there is.
    """

    ROUNDS = 4

    def __init__(self, n: int, seed: int, stream: str) -> None:
        if n < 1:
            raise ValueError(f"a permutation needs n >= 1, got {n}")
        self.n = n
        self.seed = seed
        self.stream = stream
        self._half = max(1, ((n - 1).bit_length() + 1) // 2)
        self._mask = (1 << self._half) - 1
        key = hashlib.blake2b(f"{int(seed)}\x1f{stream}".encode(), digest_size=16).digest()
        self._key = key

    def _round(self, r: int, value: int) -> int:
        data = self._key + bytes((r,)) + value.to_bytes(8, "big")
        digest = hashlib.blake2b(data, digest_size=8).digest()
        return int.from_bytes(digest, "big") & self._mask

    def _encrypt(self, x: int) -> int:
        left, right = x >> self._half, x & self._mask
        for r in range(self.ROUNDS):
            left, right = right, left ^ self._round(r, right)
        return (left << self._half) | right

    def __call__(self, i: int) -> int:
        """The element at position i of the permutation, for 0 <= i < n."""
        if not 0 <= i < self.n:
            raise IndexError(f"position {i} outside [0, {self.n})")
        x = self._encrypt(i)
        while x >= self.n:  # cycle walking stays inside [0, n): the walk from i ends at n's image
            x = self._encrypt(x)
        return x

    def __len__(self) -> int:
        return self.n
