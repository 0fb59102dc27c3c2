"""The KV cache's block allocator: a free list over the pool's block ids.

Block 0 is the sink (padding and idle rows write there) and is never handed out. Blocks are
taken from the front of the free list and returned to its end; which ids a sequence gets never
changes its numbers (the paged decoder gathers keys into position order), only where they live.
"""

from __future__ import annotations

from collections import deque

from rlx_core.errors import Internal

__all__ = ["BlockPool"]


class BlockPool:
    """`num_blocks` blocks of `block_size` positions; ids 1..num_blocks-1 are allocatable."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 2:
            raise Internal(f"a block pool needs the sink plus >= 1 block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: deque[int] = deque(range(1, num_blocks))
        self._owned: set[int] = set()

    @property
    def capacity(self) -> int:
        """Blocks that can be handed out (all but the sink)."""
        return self.num_blocks - 1

    @property
    def num_free(self) -> int:
        return len(self._free)

    def blocks_for(self, positions: int) -> int:
        """How many blocks hold `positions` positions."""
        return -(-positions // self.block_size)

    def can_allocate(self, n: int) -> bool:
        return n <= len(self._free)

    def allocate(self, n: int) -> list[int]:
        """n block ids; the caller checks `can_allocate` first (running out is a bug here)."""
        if n > len(self._free):
            raise Internal(f"allocating {n} blocks with {len(self._free)} free")
        out = [self._free.popleft() for _ in range(n)]
        self._owned.update(out)
        return out

    def free(self, blocks: list[int]) -> None:
        for b in blocks:
            if b not in self._owned:
                raise Internal(f"block {b} freed but not allocated")
            self._owned.remove(b)
            self._free.append(b)
