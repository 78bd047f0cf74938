"""PyTorch's CUDA caching allocator: what it reserves (cudaMalloc'd segments) to hold a set of
live tensors, beside the bytes they allocate.

Read from c10/cuda/CUDACachingAllocator.cpp (pytorch/pytorch at
001074d25084fdb87a799823e395a50f5ec044d3; the same rules in torch 2.11–2.13):

  * round_size: every request is rounded up to a multiple of kMinBlockSize = 512 bytes
    (roundup_power2_divisions is off by default: PYTORCH_CUDA_ALLOC_CONF);
  * get_pool: requests up to kSmallSize = 1 MiB come from the small pool, the rest from
    the large pool;
  * get_allocation_size: a new segment is kSmallBuffer = 2 MiB for a small request,
    kLargeBuffer = 20 MiB for a request under kMinLargeAlloc = 10 MiB, else the request
    rounded up to kRoundLarge = 2 MiB;
  * should_split: a free block is split for a request when what remains is at least 512
    bytes (small pool) or more than kSmallSize (large pool; max_split_size unlimited by
    default), else the request takes the whole block;
  * expandable_segments:True (Note [Expandable Segments]): one segment per stream and pool
    grows by pages of 2 MiB (small pool) or 20 MiB (large pool), and blocks split at 512
    bytes in both pools.

`reserved(sizes)` packs the tensors live at one moment into segments as a fresh allocator
would (best fit, the rules above): a lower bound of `torch.cuda.memory_reserved()` at that
moment. One part of the step's history is modelled (`cached`): segments of tensors freed
before the moment stay reserved — a freed block returns to its pool (free_block) and
segments go back to the driver only in release_cached_blocks (empty_cache, or an
allocation that failed) — and serve, best fit, only what is allocated after the free
(reserved.py: the previous step's gradients). Blocks also belong to the stream that
allocated them: get_free_block returns no block whose `stream != p.stream()` (the pools
are ordered by stream first, BlockComparatorSize), so tensors allocated on a second stream
never share the first stream's free blocks (reserved.py: the activation-offloading
stream's copies; torchtitan's freed bf16 logits at the loss's backward,
parallel/titan_tp.py freed_logits; FSDP2's gradients and all-gathers in its side streams,
parallel/fsdp_streams.py). The rest of the history (segments cut for transients whose free
remainders the moment's tensors cannot use) is not modelled: ../shared/gpu/README.md
measures the reserved peak 12–30% above the allocated one on an H200 (its "allocator
reserved" column), and tests/test_allocator.py holds this model below those measurements.
`Replay` runs the same rules over a sequence of allocations and frees, merging a freed
block with its free neighbours (free_block): a step's whole trace, history included
(tests/test_reserved_replay.py replays model/'s two H200 steps, traced on the CPU).
A verdict ("fits") compares the allocated peak with the usable memory, as the one-GPU plan
measured within ±3% does; the reserved figure is printed beside it.
"""
from __future__ import annotations

from bisect import bisect_left, insort

KMIN_BLOCK = 512
KSMALL_SIZE = 1024 * 1024
KSMALL_BUFFER = 2 * 1024 * 1024
KLARGE_BUFFER = 20 * 1024 * 1024
KMIN_LARGE_ALLOC = 10 * 1024 * 1024
KROUND_LARGE = 2 * 1024 * 1024


def round_size(size: int) -> int:
    """The block a request of `size` bytes occupies (CUDACachingAllocator.cpp round_size)."""
    return KMIN_BLOCK if size < KMIN_BLOCK else -(-size // KMIN_BLOCK) * KMIN_BLOCK


def allocation_size(size: int) -> int:
    """The segment cudaMalloc'd for a (rounded) request no free block serves
    (get_allocation_size)."""
    if size <= KSMALL_SIZE:
        return KSMALL_BUFFER
    if size < KMIN_LARGE_ALLOC:
        return KLARGE_BUFFER
    return -(-size // KROUND_LARGE) * KROUND_LARGE


def _should_split(small: bool, remaining: int, expandable: bool) -> bool:
    return remaining >= KMIN_BLOCK if small or expandable else remaining > KSMALL_SIZE


def reserved(groups, expandable: bool = False, cached=(), fresh: int = 0) -> int:
    """Bytes a caching allocator reserves to hold tensors given as (bytes, count) pairs,
    allocated in that order and all live (0-byte tensors allocate nothing). `cached`: the
    segments (bytes each, from segments()) of tensors freed before these were allocated and
    never released (no empty_cache): reserved still, and served best fit like any free
    block — but only to the groups after the first `fresh`, which were allocated before
    those tensors were freed."""
    if expandable:  # one growing segment per pool, mapped page by page, never unmapped
        before = _expandable(list(groups)[:fresh] + [(n, 1) for n in cached])
        return max(before, _expandable(groups))
    free = {True: [], False: []}  # per pool: free block sizes, sorted (best fit)
    total = _pack(list(groups)[:fresh], free)
    for n in cached:  # a freed segment whole again (its blocks merged): in its pool
        total += n
        insort(free[n <= KSMALL_BUFFER], n)
    return total + _pack(list(groups)[fresh:], free)


def segments(groups) -> list[int]:
    """The segments (bytes each) a fresh allocator cudaMallocs for these tensors (as
    reserved() packs them): what stays reserved once they are all freed."""
    out: list[int] = []
    _pack(groups, {True: [], False: []}, out)
    return out


def _expandable(groups) -> int:
    small = sum(round_size(n) * c for n, c in groups if 0 < n and round_size(n) <= KSMALL_SIZE)
    large = sum(round_size(n) * c for n, c in groups if round_size(n) > KSMALL_SIZE)
    return -(-small // KSMALL_BUFFER) * KSMALL_BUFFER + \
        -(-large // KLARGE_BUFFER) * KLARGE_BUFFER


def _pack(groups, free, made: list[int] | None = None) -> int:
    """Allocate the groups into the free blocks (best fit), cudaMalloc'ing a segment where
    none fits; the bytes of the new segments (each appended to `made`)."""
    total = 0
    for n, count in groups:
        if n <= 0 or count <= 0:
            continue
        size = round_size(n)
        small = size <= KSMALL_SIZE
        blocks = free[small]
        if size >= KMIN_LARGE_ALLOC and (not blocks or blocks[-1] < size):
            # a segment of its own each (no free block is this large): in bulk
            seg = allocation_size(size)
            total += seg * count
            if made is not None:
                made += [seg] * count
            if _should_split(False, seg - size, False):
                for _ in range(min(count, 100_000)):
                    insort(blocks, seg - size)
            continue
        for _ in range(count):
            i = bisect_left(blocks, size)
            if i == len(blocks):
                block = allocation_size(size)
                total += block
                if made is not None:
                    made.append(block)
            else:
                block = blocks.pop(i)
            if _should_split(small, block - size, False):
                insort(blocks, block - size)
    return total


def slack(groups, expandable: bool = False, cached=(), fresh: int = 0) -> int:
    """What the allocator reserves beyond the tensors' own bytes: reserved() less their sum."""
    return reserved(groups, expandable, cached, fresh) - sum(max(0, n) * c for n, c in groups)


def split_over(total: int, numels) -> list[tuple[int, int]]:
    """`total` bytes spread over tensors of `numels` elements in proportion ((bytes, 1)
    each): a state item held one tensor per parameter tensor (a gradient, a moment)."""
    numels = [n for n in numels if n > 0]
    whole = sum(numels)
    if not whole or total <= 0:
        return []
    per: dict[int, int] = {}
    for n in numels:
        b = total * n // whole
        per[b] = per.get(b, 0) + 1
    return sorted(per.items(), key=lambda kv: -kv[0])


class Replay:
    """The caching allocator run over a sequence of allocations and frees (one stream,
    expandable_segments off), for a trace of a whole step where the moment packing above
    (`reserved`) sees one moment: the history that packing leaves out (what earlier
    tensors cut and what later ones then occupy) is in the sequence itself. The rules, read
    from CUDACachingAllocator.cpp as above:

      * malloc: round_size, the pool by size; get_free_block takes the smallest free block
        of at least that size in the pool (BlockComparatorSize orders by stream, size, then
        address: best fit, the lowest address on a tie); none: alloc_block cudaMallocs
        get_allocation_size's segment;
      * should_split: the rest of the block stays free in the pool as a block of its own;
      * free_block: the block returns to its pool merged with its free neighbours of the
        same segment (try_merge_blocks on prev and next); no segment is released
        (release_cached_blocks runs on empty_cache or a failed cudaMalloc only).

    `alloc(key, nbytes)` and `free(key)`; `reserved`, `allocated` (the blocks' bytes, as
    memory_allocated counts them) and their peaks; `reset_peaks()` as
    torch.cuda.reset_peak_memory_stats."""

    def __init__(self) -> None:
        self.free_blocks = {True: [], False: []}  # per pool (small?): sorted (size, address)
        self.blocks: dict[int, list] = {}  # address -> [size, allocated, prev, next, small]
        self.at: dict = {}  # key -> address
        self.reserved = self.allocated = self.peak_reserved = self.peak_allocated = 0
        self._next = 0

    def alloc(self, key, nbytes: int) -> None:
        size = round_size(nbytes)
        small = size <= KSMALL_SIZE
        pool = self.free_blocks[small]
        i = bisect_left(pool, (size, -1))
        if i == len(pool):
            segment = allocation_size(size)
            address, self._next = self._next, self._next + 2 * segment  # never adjacent
            self.blocks[address] = [segment, False, None, None, small]
            self.reserved += segment
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        else:
            address = pool.pop(i)[1]
        b = self.blocks[address]
        if _should_split(small, b[0] - size, False):
            rest = address + size
            self.blocks[rest] = [b[0] - size, False, address, b[3], small]
            if b[3] is not None:
                self.blocks[b[3]][2] = rest
            b[0], b[3] = size, rest
            insort(pool, (self.blocks[rest][0], rest))
        b[1] = True
        self.at[key] = address
        self.allocated += b[0]
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, key) -> None:
        address = self.at.pop(key)
        b = self.blocks[address]
        b[1] = False
        self.allocated -= b[0]
        pool = self.free_blocks[b[4]]
        nxt = b[3]
        if nxt is not None and not self.blocks[nxt][1]:  # absorb the next block
            n = self.blocks.pop(nxt)
            pool.remove((n[0], nxt))
            b[0], b[3] = b[0] + n[0], n[3]
            if n[3] is not None:
                self.blocks[n[3]][2] = address
        prev = b[2]
        if prev is not None and not self.blocks[prev][1]:  # the previous block absorbs it
            p = self.blocks[prev]
            pool.remove((p[0], prev))
            p[0], p[3] = p[0] + b[0], b[3]
            if b[3] is not None:
                self.blocks[b[3]][2] = prev
            del self.blocks[address]
            address, b = prev, p
        insort(pool, (b[0], address))

    def reset_peaks(self) -> None:
        self.peak_reserved, self.peak_allocated = self.reserved, self.allocated
