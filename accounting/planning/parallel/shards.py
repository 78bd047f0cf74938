"""How tensor and sequence parallelism split the ledger's tensors, read off their shapes.

Megatron-LM's tensor parallelism (Shoeybi et al. 2019) splits exactly the tensors that
carry a heads dimension (h, or h_kv for K and V), the MLP's inner width d_ff, or the
vocabulary V (vocab-parallel embedding, LM head and cross-entropy); everything of width
d_model is replicated over the TP group, or, with sequence parallelism (Korthikanti et al.
2022), split along T. The ledger written with h·d_k unfolded (ledger.unfolded_ledger)
shows those symbols on every tensor, so the split is a property of the shape:

  * a parameter is split on the dimension that holds a TP symbol: its output dimension
    (column-parallel: Q, K, V, W1, W3, the LM head, their biases; the embedding table's
    rows) or its input dimension (row-parallel: the output projection, W2); the rest
    (norms, the biases of row-parallel matmuls, a learned position table) is replicated;
  * an activation with a TP symbol is split (each rank holds its heads, its slice of d_ff,
    its slice of V); a float (B, T, …) one without is in the sequence-parallel region;
    the rest (mask, RoPE tables at the positions, token ids, targets) is replicated.

Sizes per rank follow torch.chunk (what DTensor's Shard and FSDP2 do): a dimension of n
over k ranks gives ⌈n/k⌉ to each rank but the last ones; rank 0 holds the most.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from bisect import bisect_left

from accounting.ledger import records as R
from accounting.architecture.config import ModelConfig
from accounting.ledger.ledger import Ledger, unfolded_ledger
from accounting.ledger.symbols import product
from accounting.ledger.builder.common import DROPOUT_MASK
from accounting.units import FP8_E4M3, FP8_E5M2

FP8_SAVED = (FP8_E4M3, FP8_E5M2)  # the 1-byte copies Transformer Engine saves
TP_SYMBOLS = ("h", "h_kv", "h_kvG", "d_ff", "2d_ff", "V")  # Gemma 4: global K/V heads, wide MLPs

FIRST, BLOCK, LAST = "first stage", "every block", "last stage"
# a tensor made once per forward pass and saved by the blocks (the RoPE tables transformers
# and Megatron compute once): held once on every stage
EVERY = "every stage, once"

# Activation split kinds.
TP_SPLIT = "split over TP (heads, d_ff or V)"
SEQUENCE = "sequence-parallel region (split along T with --sp, else replicated)"
GATHERED = "column-parallel matmul input (replicated: torch saves the all-gathered tensor)"
REPLICATED = "replicated over TP"


def chunk(n: int, parts: int, rank: int = 0) -> int:
    """Elements of a dimension of n that rank `rank` holds when torch.chunk splits it in
    `parts` (⌈n/parts⌉ each, the last ranks fewer, possibly none)."""
    size = -(-n // parts)
    return max(0, min(size, n - rank * size))


@dataclass(frozen=True)
class Tensor:
    """A parameter tensor as torch holds it: its dimensions (each a product of symbols)."""
    name: str  # state-dict key, "{i}" for the block index
    module: str
    per_layer: bool
    place: str  # FIRST, BLOCK or LAST
    dims: tuple[tuple[str, ...], ...]
    tp_dim: int | None  # the dimension TP splits (None: replicated over TP)
    matmul_weight: bool
    lookup: bool
    group: str | None = None  # the kind of block it belongs to ("L", or "L_dense", "L_moe", …)
    expert: bool = False  # one of the routed experts' stacked (E, …) matrices
    frozen: bool = False  # requires_grad False (a LoRA plan's base): no gradient, no state

    def local_sizes(self, values: dict[str, int], tp: int = 1, tp_rank: int = 0,
                    ep: int = 1) -> tuple[int, ...]:
        """This TP rank's dimensions, and for a routed expert's matrix its E/ep whole experts
        (expert parallelism: EP rank r holds experts r·E/ep … (r + 1)·E/ep − 1; layout.py
        requires ep to divide E, so every EP rank holds the same number)."""
        sizes = self.sizes(values, tp, tp_rank)
        return (sizes[0] // ep, *sizes[1:]) if self.expert else sizes

    def sizes(self, values: dict[str, int], tp: int = 1, tp_rank: int = 0) -> tuple[int, ...]:
        """This TP rank's dimensions."""
        out = []
        for i, d in enumerate(self.dims):
            n = product(d, values)
            out.append(chunk(n, tp, tp_rank) if i == self.tp_dim else n)
        return tuple(out)


def _tensor_dims(p: R.Param, linear: dict[str, R.Matmul]) -> tuple[tuple[str, ...], ...]:
    """A Linear's weight is (d_out, d_in), its bias (d_out,); a lookup table (rows, width);
    the routed experts' stacked matrices (E, d_out, d_in), as model/moe.py's Experts holds
    them; anything else one dimension (norm weights and biases)."""
    m = linear.get(p.module)
    if p.routed_expert:
        return tuple((s,) for s in p.shape)
    if p.lookup:
        return (p.shape[:1], p.shape[1:])
    if m is not None and p.shape == m.p + m.n:
        return (m.p, m.n)
    return (p.shape,)


def _tp_dim(dims: tuple[tuple[str, ...], ...]) -> int | None:
    hits = [i for i, d in enumerate(dims) if any(s in TP_SYMBOLS for s in d)]
    assert len(hits) <= 1, dims
    return hits[0] if hits else None


@dataclass(frozen=True, eq=False)
class Split:
    """The parameters and the TP-relevant facts of one architecture (one object per
    config and run: split() is cached, so identity is equality)."""
    config: ModelConfig
    ledger: Ledger  # unfolded
    tensors: tuple[Tensor, ...]  # unique parameters, state-dict order
    column_parallel: frozenset[str]  # modules whose matmul splits its output over TP
    linear_modules: frozenset[str]  # modules that run a Linear (weight and maybe bias)

    def values(self, seq: int, batch: int) -> dict[str, int]:
        return self.ledger.values(seq, batch)

    def kinds(self, layers: range) -> tuple[tuple[str, int], ...]:
        """(kind symbol, blocks of that kind) among the blocks `layers`, in the ledger's order
        of kinds: (("L", n),) when every block is alike; DeepSeek-V3's dense first layers and
        MoE others, or local and global attention layers, are two kinds."""
        return tuple((g, n) for g, members in self.ledger.groups
                     if (n := _count_in(members, layers)))

    def tp_values(self, values: dict[str, int], tp: int, tp_rank: int = 0) -> dict[str, int]:
        """Symbol values on a TP rank: heads, d_ff and V split (V by torch.chunk)."""
        v = dict(values)
        for s in TP_SYMBOLS:
            if s in values:  # (h_kvG: only with a global head shape)
                v[s] = chunk(values[s], tp, tp_rank)
        return v

    def activation_kind(self, a: R.Activation) -> str:
        # a dropout's 1-byte mask is split as the tensor it masks
        # (an fp8 copy saved by an fp8 linear layer is split as the bf16 tensor it copies)
        if a.dtype not in R.FLOAT_DTYPES + FP8_SAVED and \
                not a.name.split(" (")[0].endswith(DROPOUT_MASK):
            return REPLICATED
        if any(s in TP_SYMBOLS for s in a.shape):
            return TP_SPLIT
        if a.saved_in in self.row_parallel:  # a row-parallel matmul's output (kept by a
            return REPLICATED  # checkpoint policy): partial sums over the whole sequence
        if "B" in a.shape and a.shape.count("T") == 1:
            return GATHERED if a.saved_in in self.column_parallel else SEQUENCE
        return REPLICATED

    def sequence_norm(self, t: Tensor) -> bool:
        """A parameter of a d_model-wide norm: sequence parallelism runs the norm on sequence
        shards with the parameter replicated, so each rank holds a partial gradient of it."""
        return (t.tp_dim is None and not t.lookup and t.module not in self.linear_modules
                and t.dims == (("d_model",),))

    def place(self, a: R.Activation) -> str:
        if a.per_layer:
            return BLOCK
        first = {t.module for t in self.tensors if t.place == FIRST}
        if a.saved_in in first:
            return FIRST
        return EVERY if a.saved_in in self.block_modules else LAST

    @cached_property
    def row_parallel(self) -> frozenset[str]:
        """Modules whose matmul splits its input dimension over TP (the output projection,
        W2): each rank's output is a partial sum, whole along T."""
        return frozenset(m.module for m in self.ledger.forward if m.grads == ("dX", "dW")
                         and any(s in TP_SYMBOLS for s in m.n))

    @cached_property
    def block_modules(self) -> frozenset[str]:
        """The blocks' modules and their parents (block-relative paths: "attn", "attn.q_proj")."""
        out = set()
        for t in self.tensors:
            if t.per_layer:
                parts = t.module.split(".")
                out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        return frozenset(out)


@lru_cache(maxsize=64)
def split(config: ModelConfig, autocast: str | None = None, recompute: str = "none",
          implementation: str = "course", param_dtype: str = "fp32",
          dropout: bool = False, fp8: str | None = None, adapters=None) -> Split:
    """The ledger of this run (precision's autocast, parameter dtype and fp8 library,
    recomputation; the implementation: builder.walk's; LoRA's adapters on a frozen base),
    unfolded, with its parameters' TP layout."""
    lg = unfolded_ledger(config, autocast, recompute, implementation, param_dtype, dropout, fp8,
                         adapters)

    linear = {m.module: m for m in lg.forward if m.grads == ("dX", "dW")}
    tensors = []
    for p in lg.params:
        dims = _tensor_dims(p, linear)
        place = BLOCK if p.per_layer else FIRST if p.lookup else LAST
        tensors.append(Tensor(p.name, p.module, p.per_layer, place, dims, _tp_dim(dims),
                              p.matmul_weight, p.lookup, p.repeat, p.routed_expert,
                              p.frozen))
    column = frozenset(m.module for m in linear.values() if any(s in TP_SYMBOLS for s in m.p))
    return Split(config, lg, tuple(tensors), column, frozenset(linear))


def _count_in(members: tuple[int, ...], layers) -> int:
    """How many of the sorted block indices `members` are among `layers` (a range or a
    collection of indices), by bisection: counting member by member made a search over
    pipeline splits of a 10,000-layer model spend most of its time here (issue 32)."""
    if isinstance(layers, range) and layers.step == 1:
        return max(0, bisect_left(members, layers.stop) - bisect_left(members, layers.start))
    n = len(members)
    return sum(1 for i in set(layers)
               if (j := bisect_left(members, i)) < n and members[j] == i)
