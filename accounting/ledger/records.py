"""The ledger's records: one small frozen type per kind of fact, on one base.

Every record says where it runs (`module`: a path relative to a block when it repeats in
every block, else relative to the model) and how often (`repeat`: the symbol of the
layers it repeats over, "L", or None for once per pass). accounting/ledger/builder/ emits
them; nothing else writes one. Backward matmuls are derived from the forward ones.
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.ledger.symbols import Expr, dims, monomial, product
from accounting.units import BF16, BOOL, DTYPE_BYTES, FLOPS_PER_MAC, FP32, INT32, INT64  # noqa: F401

# ---- components ---------------------------------------------------------------------
# Matmul FLOPs: every matmul belongs to exactly one of these.
ATTN_PROJ = "attention projections"
ATTN_CORE = "attention core"
# the recurrent layers' token mixing (issue 31): a short convolution's and a gated DeltaNet's
# depthwise conv1d, the chunked delta rule's products; their in/out projections are
# attention projections (the token mixer's projections, as attention's are)
RECURRENT = "recurrent mixing"
FFN = "feed-forward"
LM_HEAD = "LM head"
COMPONENTS = (ATTN_PROJ, ATTN_CORE, RECURRENT, FFN, LM_HEAD)
BLOCK_COMPONENTS = (ATTN_PROJ, ATTN_CORE, RECURRENT, FFN)


def components_of(seen, among: tuple[str, ...] = COMPONENTS) -> tuple[str, ...]:
    """The components a model's tables list: every one, but the recurrent mixing only for a
    model with recurrent layers (`seen`: the components of its matmul records)."""
    return tuple(c for c in among if c != RECURRENT or c in seen)

# Parameters (the norm component is named by the norm kind: "RMSNorm gains", ...).
EMBEDDING = "token embedding"
POSITION_EMBEDDING = "position embedding"

# ---- phases: the passes a count is for, named here once ----------------------------------
FORWARD, BACKWARD, TRAIN = "forward", "backward", "train"  # train = forward + backward
PHASES = {FORWARD: (FORWARD,), BACKWARD: (BACKWARD,), TRAIN: (FORWARD, BACKWARD)}

# Which attention-core FLOPs count: the full T×T the model computes and masks
# ("executed", what the FLOP counters see), or the T(T+1)/2 unmasked pairs ("useful").
EXECUTED, USEFUL = "executed", "useful"

# The tensors' dtypes: names and bytes are accounting/units.py's (re-exported for R.FP32).
FLOAT_DTYPES = (FP32, BF16)

# Non-matmul FLOPs: a choice (other tools count exp or sqrt as several FLOPs), stated
# wherever these numbers are printed; the op counter (crosscheck/dispatch.py) applies it.
CONVENTION = (
    "1 FLOP per output element for each elementwise arithmetic op, transcendental ones "
    "(exp, sigmoid, tanh, erf, sqrt) included; 1 FLOP per input element for a reduction "
    "(sum, mean, max; an MoE router's top-k); 1 FLOP per element for a select (the causal "
    "mask's torch.where, masked_fill); 1 FLOP per added element for index_add; "
    "0 for copies, casts, reshapes, indexing and integer/bool ops (building the mask, "
    "positions, sorting the routed slots)"
)


@dataclass(frozen=True)
class Record:
    name: str
    component: str
    module: str  # where it runs: relative to a block when repeat is set, else to the model
    repeat: str | None  # "L": once in each block; None: once per pass

    @property
    def per_layer(self) -> bool:
        return self.repeat is not None

    def count(self, values: dict[str, int]) -> int:
        return values[self.repeat] if self.repeat else 1


@dataclass(frozen=True)
class Param(Record):
    """A parameter tensor; `name` is its state-dict key with "{i}" for the block index."""
    shape: tuple[str, ...]
    lookup: bool = False  # an embedding table read by index (a row per token)
    matmul_weight: bool = False  # read by a matmul (autocast keeps a bf16 copy of it)
    frozen: bool = False  # requires_grad False (a LoRA plan's base): no gradient, no optimizer state
    dims: tuple[int, ...] = ()  # symbols per real dimension (a Linear's (h_kv, d_k, d_model)
    #                             is 2-D: dims (2, 1)); () = one symbol per dimension

    def sizes(self, values: dict[str, int]) -> tuple[int, ...]:
        """The tensor's real shape (what an optimizer's per-dimension state sees)."""
        dims, out, i = self.dims or (1,) * len(self.shape), [], 0
        for n in dims:
            out.append(product(self.shape[i:i + n], values))
            i += n
        return tuple(out)

    @property
    def routed_expert(self) -> bool:
        """One of the E stacked routed experts' matrices (a token runs k of the E)."""
        return self.shape[:1] == ("E",) and self.module.endswith("experts")

    def formula(self) -> str:
        return monomial(1, self.shape)

    def numel(self, values: dict[str, int]) -> int:
        return product(self.shape, values)

    def key(self, layer: int | None = None) -> str:
        return self.name.format(i=layer) if self.per_layer else self.name


@dataclass(frozen=True)
class Matmul(Record):
    """C = A·B with A: batch×m×n and B: batch×n×p (n contracted); each of m, n, p a
    product of shape symbols. Its multiply-adds are batch·m·n·p, its FLOPs
    FLOPS_PER_MAC times that (the 2mnp rule)."""
    phase: str
    batch: tuple[str, ...]
    m: tuple[str, ...]
    n: tuple[str, ...]  # contracted
    p: tuple[str, ...]
    causal: bool = False  # two of the T factors are a causal (query, key) pair
    grads: tuple[str, str] = ("dA", "dB")  # names of the gradient matmuls of A and B
    window: bool = False  # causal within a sliding window: P_W useful pairs, not P
    chunk: bool = False  # causal within the query's chunk (Llama 4): P_C useful pairs
    note: str = ""
    recompute_in_backward: bool = False  # a fused kernel's backward runs it again first
    useful: tuple[str, ...] | None = None  # factors of the useful work, when not the causal rule
    reads_cache: bool = False  # its rows are what the KV cache holds (latent attention's
    #                            kv_b_proj): a decode step runs it over all t cached tokens
    topk: bool = False  # causal within the indexer's top k keys (DeepSeek-V3.2): P_K useful
    backward: bool = True  # False: run without gradients (the sparse-attention indexer)
    # a unit lower-triangular solve A·X = B (the gated delta rule's UT system): m is P_L,
    # the strictly lower pairs of an n×n A, p the right-hand columns; its backward is a
    # solve of the same size (dB) and one dense product dA = −dB·Xᵀ (n×p @ p×n)
    triangular: tuple[str, ...] | None = None  # n, when a solve
    grad_b: bool = True  # B needs a gradient (the delta rule's first state, zeros, does not)
    fp8: bool = False  # a linear layer's GEMM run in fp8 (an fp8 precision; its gradients too)
    weight: str = ""  # an fp8 linear layer's weight (its parameter's name)

    @property
    def factors(self) -> tuple[str, ...]:
        return self.batch + self.m + self.n + self.p

    def useful_factors(self) -> tuple[str, ...]:
        """The factors with one causal T·T pair replaced by P = T(T+1)/2 (by P_W, the pairs
        within a sliding window, for a local layer); a capacity-factor expert matmul's E·C
        slots by the B·T·k routed ones."""
        if self.useful is not None:
            return self.useful
        if not self.causal:
            return self.factors
        f = list(self.factors)
        f.remove("T")
        f.remove("T")
        return tuple(f) + ("P_W" if self.window else "P_C" if self.chunk else
                           "P_K" if self.topk else "P",)

    def formula(self, counting: str = EXECUTED) -> str:
        """FLOPs per instance, e.g. '2·B·T·d_model²'."""
        return monomial(FLOPS_PER_MAC, self.factors if counting == EXECUTED else self.useful_factors())

    @property
    def shapes(self) -> str:
        """'[B·h, T, d_k] @ [B·h, d_k, T]' in matmul orientation (A: m×n, B: n×p)."""
        lead = [dims(self.batch)] if self.batch else []
        a = ", ".join(lead + [dims(self.m), dims(self.n)])
        b = ", ".join(lead + [dims(self.n), dims(self.p)])
        return f"[{a}] @ [{b}]"

    def flops(self, values: dict[str, int], counting: str = EXECUTED) -> int:
        """FLOPs of one instance (one block's worth when per_layer)."""
        factors = self.factors if counting == EXECUTED else self.useful_factors()
        return FLOPS_PER_MAC * product(factors, values)

    def expr(self, counting: str = EXECUTED) -> Expr:
        """FLOPs of the whole pass (all blocks) as an expression in the symbols."""
        e = Expr.of(FLOPS_PER_MAC, self.factors if counting == EXECUTED else self.useful_factors())
        return e.times(self.repeat) if self.repeat else e

    def gradients(self) -> tuple[Matmul, ...]:
        """dA = dC·Bᵀ (m×p @ p×n) and dB = Aᵀ·dC (n×m @ m×p): the same size as the forward;
        preceded by the forward product itself when the kernel recomputes it (fused attention)."""
        if not self.backward:  # under torch.no_grad: no gradient matmul
            return ()
        d_a, d_b = self.grads
        common = dict(component=self.component, module=self.module, repeat=self.repeat,
                      phase=BACKWARD, batch=self.batch, causal=self.causal, note=self.note,
                      window=self.window, chunk=self.chunk, useful=self.useful,
                      topk=self.topk, fp8=self.fp8)
        again = (Matmul(f"{self.name} (recomputed)", m=self.m, n=self.n, p=self.p, **common),) \
            if self.recompute_in_backward else ()
        if not self.grad_b:  # only dA = dC·Bᵀ
            return again + (Matmul(f"{self.name} {d_a}", m=self.m, n=self.p, p=self.n, **common),)
        if self.triangular is not None:  # linalg_solve_triangular_backward
            return (Matmul(f"{self.name} {d_a}", m=self.m, n=self.n, p=self.p, **common),
                    Matmul(f"{self.name} {d_b}", m=self.triangular, n=self.p,
                           p=self.triangular, **common))
        return again + (Matmul(f"{self.name} {d_a}", m=self.m, n=self.p, p=self.n, **common),
                        Matmul(f"{self.name} {d_b}", m=self.n, n=self.m, p=self.p, **common))


@dataclass(frozen=True)
class Elementwise(Record):
    """One non-matmul tensor operation, FLOPs under CONVENTION."""
    op: str  # the aten operator the model runs
    elements: tuple[str, ...]  # the tensor the FLOPs are counted over
    per_element: int = 1
    copies: int = 1  # instances per block (per_layer) or per pass
    reduction: bool = False  # `elements` is the reduction's input

    def formula(self) -> str:
        return monomial(self.per_element * self.copies, self.elements)

    def flops(self, values: dict[str, int]) -> int:
        """FLOPs of one block's worth (per_layer) or of the whole pass."""
        return self.per_element * self.copies * product(self.elements, values)

    def expr(self) -> Expr:
        e = Expr.of(self.per_element * self.copies, self.elements)
        return e.times(self.repeat) if self.repeat else e


@dataclass(frozen=True)
class Activation(Record):
    """A tensor of the forward pass that autograd saves for the backward pass, or that the
    course's list counts (or both). `module` is where it is first saved ("loss" for
    F.cross_entropy), "" when nothing saves it; `component` is the course's item ("" when
    the course does not count it)."""
    shape: tuple[str, ...]
    elements: Expr  # of all copies in one block (or in the model); h·d_k written d_model
    why: str  # the op(s) that save it, or why nothing does
    dtype: str = FP32
    copies: int = 1
    block_input: bool = False  # the block's input: what full recomputation keeps
    weight_copy: bool = False  # autocast's bf16 copy of a weight (saved by its matmul)
    storages: str | None = None  # these elements are that many equal tensors (a loop's N_c)

    @property
    def bytes_per_element(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def course(self) -> str:
        return self.component

    @property
    def saved_in(self) -> str:
        return self.module

    @property
    def saved(self) -> bool:
        return bool(self.module)


@dataclass(frozen=True)
class Buffer(Record):
    """A tensor the model holds that is not a parameter (RoPE's cos/sin tables)."""
    shape: tuple[str, ...]
    bytes_per_element: int

    def expr(self) -> Expr:
        e = Expr.of(self.bytes_per_element, self.shape)
        return e.times(self.repeat) if self.repeat else e


@dataclass(frozen=True)
class CacheEntry(Record):
    """What one token adds to the KV cache: `shape` elements in each block (a local layer
    keeps only its last W tokens; a chunked layer at most its chunk's C). A recurrent
    layer's state (per_sequence) is `shape` elements for a sequence of any length (its conv
    window, its recurrent state), in float32 where the model keeps it so (fp32: the gated
    delta rule's state, computed in float32 whatever the model's dtype)."""
    shape: tuple[str, ...]
    window: bool = False
    chunk: bool = False
    per_sequence: bool = False
    fp32: bool = False

    def expr(self) -> Expr:
        e = Expr.of(1, self.shape)
        return e.times(self.repeat) if self.repeat else e
