"""Paged KV-cache block bookkeeping: which block ids each request owns.

A request whose context holds ``n`` tokens owns ``cdiv(n, block_size)`` blocks; its block list
grows as its context grows and is returned to the free list when it finishes (or is preempted).
This is bookkeeping only (ints), no tensor: the runner turns :meth:`BlockAllocator.block_table`
into the ``block_table[R, width]`` int32 tensor the kernels read.

Determinism: free block ids form a FIFO queue, initially ascending; a freed request's blocks go
to the back of the queue in the order the request held them. The same sequence of calls always
hands out the same ids.

Block 0 is reserved by default as the *null block* (as vLLM does): it is never handed out, so the
0 that pads a block-table row never aliases a block that some request owns.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable

__all__ = ["BlockAllocator", "OutOfBlocksError"]


class OutOfBlocksError(RuntimeError):
    """Not enough free KV-cache blocks for an allocation.

    Attributes:
        request_id: the request that asked.
        needed: how many more blocks it needed.
        free: how many were free.
    """

    def __init__(self, request_id: int, needed: int, free: int, num_blocks: int) -> None:
        super().__init__(
            f"request {request_id} needs {needed} more KV-cache block{'' if needed == 1 else 's'} but only {free} of "
            f"{num_blocks} are free; allocate a larger cache (more blocks) or lower "
            "max_num_seqs / max_model_len"
        )
        self.request_id = request_id
        self.needed = needed
        self.free = free


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class BlockAllocator:
    """Hands out KV-cache block ids to requests from a deterministic free list.

    Args:
        num_blocks: blocks in the cache (ids ``0 .. num_blocks - 1``).
        block_size: tokens per block.
        reserve_null_block: keep block 0 out of the free list (default), so that a block-table
            row padded with 0 never points at a live request's block. Then ``num_blocks - 1``
            blocks are usable.

    Raises:
        ValueError: ``block_size < 1``, or fewer than one usable block.
    """

    def __init__(self, num_blocks: int, block_size: int, *, reserve_null_block: bool = True) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        first = 1 if reserve_null_block else 0
        if num_blocks - first < 1:
            raise ValueError(
                f"num_blocks={num_blocks} leaves no usable block "
                f"(reserve_null_block={reserve_null_block})"
            )
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.reserve_null_block = reserve_null_block
        self._free: deque[int] = deque(range(first, num_blocks))
        self._owned: dict[int, list[int]] = {}

    def __repr__(self) -> str:
        return (
            f"BlockAllocator(num_blocks={self.num_blocks}, block_size={self.block_size}, "
            f"free={self.num_free_blocks}, requests={len(self._owned)})"
        )

    @property
    def num_usable_blocks(self) -> int:
        """Blocks that can ever be handed out (``num_blocks``, less the null block if reserved)."""
        return self.num_blocks - (1 if self.reserve_null_block else 0)

    @property
    def num_free_blocks(self) -> int:
        """Blocks free right now."""
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        """Blocks owned by some request right now."""
        return self.num_usable_blocks - len(self._free)

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks that hold ``num_tokens`` tokens: ``cdiv(num_tokens, block_size)``."""
        return _cdiv(num_tokens, self.block_size)

    def blocks_needed(self, request_id: int, num_tokens: int) -> int:
        """More blocks ``request_id`` needs to hold ``num_tokens`` tokens of context (0 if none)."""
        have = len(self._owned.get(request_id, ()))
        return max(0, self.blocks_for(num_tokens) - have)

    def can_allocate(self, request_id: int, num_tokens: int) -> bool:
        """Whether :meth:`allocate` with the same arguments would succeed now."""
        return self.blocks_needed(request_id, num_tokens) <= len(self._free)

    def allocate(self, request_id: int, num_tokens: int) -> tuple[int, ...]:
        """Grow ``request_id``'s block list to hold ``num_tokens`` tokens of context.

        All or nothing: on failure no block changes hands. Never shrinks a list.

        Returns:
            The newly handed-out block ids (empty when the request already had enough).

        Raises:
            OutOfBlocksError: fewer free blocks than needed.
        """
        needed = self.blocks_needed(request_id, num_tokens)
        if needed > len(self._free):
            raise OutOfBlocksError(request_id, needed, len(self._free), self.num_blocks)
        new = tuple(self._free.popleft() for _ in range(needed))
        self._owned.setdefault(request_id, []).extend(new)
        return new

    def free(self, request_id: int) -> int:
        """Return all of ``request_id``'s blocks to the free list; returns how many (0 if none)."""
        blocks = self._owned.pop(request_id, [])
        self._free.extend(blocks)
        return len(blocks)

    def blocks(self, request_id: int) -> tuple[int, ...]:
        """The block ids ``request_id`` owns, in context order (empty if none)."""
        return tuple(self._owned.get(request_id, ()))

    def owns(self, request_id: int) -> bool:
        """Whether ``request_id`` holds any block."""
        return request_id in self._owned

    def block_table(self, request_ids: Iterable[int], width: int) -> list[list[int]]:
        """Rows of block ids, one per request, each padded with 0 to ``width`` entries.

        Args:
            request_ids: the requests, in batch order (``R`` of them).
            width: entries per row (>= the longest block list; typically
                ``cdiv(max_model_len, block_size)``).

        Returns:
            ``R`` lists of ``width`` ints: shape ``[R, width]``.

        Raises:
            KeyError: a request that owns no block.
            ValueError: ``width < 0``, or a request owning more than ``width`` blocks.
        """
        if width < 0:
            raise ValueError(f"width must be >= 0, got {width}")
        rows = []
        for rid in request_ids:
            if rid not in self._owned:
                raise KeyError(f"request {rid} owns no KV-cache block")
            blocks = self._owned[rid]
            if len(blocks) > width:
                raise ValueError(
                    f"request {rid} owns {len(blocks)} blocks, more than the table width {width}"
                )
            rows.append(blocks + [0] * (width - len(blocks)))
        return rows
