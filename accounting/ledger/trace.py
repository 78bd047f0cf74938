"""A symbolic run of the model: tensors are shapes of symbols, every op emits its facts.

`Trace` holds what a run has learned so far. Each op method does what the torch op it
stands for does to the accounting: it appends a non-matmul record (FLOPs under
records.CONVENTION) or a matmul record, and it notes the tensors autograd saves for it,
following PyTorch's derivative formulas (tools/autograd/derivatives.yaml):

  * mul saves the other operand of each input that needs a gradient; div saves its
    divisor (when either input needs a gradient) and its dividend (when the divisor does);
    maximum saves both (its gradient goes where each input is the larger);
  * pow and erf save their input; sqrt, exp, sigmoid and tanh their output; amax its input
    and output; where its condition; index (a lookup) its indices; bmm both operands;
    the fused attention kernel its query, key, value, output and per-row log-sum-exp;
  * add, sub, mean and sum save nothing, and neither does an op with a Python scalar
    (x * 0.5, x / √d_k, 1.0 + t).

A view shares its base's storage (and so a saved view is the base, counted once); a
reshape that cannot be a view (of a heads-permuted tensor) is a copy with its own
storage — torch.einsum makes one for such an operand, and the copy is what bmm saves.
Parameters are never counted as saved activations (they are the parameters' memory).

Dtypes follow torch: float32 unless the run is under torch.autocast (accounting/
autocast.py gives each device's policies), where a cast is a copy and is what the op
then saves. A region run under torch.utils.checkpoint (`recomputed`) keeps its inputs
and saves nothing inside; its matmuls run again in the backward pass.
The builder (accounting/ledger/builder/) calls these methods in the order model/ runs.
"""
from __future__ import annotations

from dataclasses import replace

from accounting.ledger import autocast as AC
from accounting.ledger import records as R
from accounting.ledger.trace_values import Named, Storage, Sym  # noqa: F401 (re-exported)
from accounting.ledger.trace_kernels import KernelOps
from accounting.ledger.trace_regions import Regions
from accounting.units import FP32

LOSS = "loss"  # where F.cross_entropy's ops run: outside the model
SAC = "SAC policy"  # what a selective checkpoint's policy keeps (Trace.policy_region)


class Trace(Regions, KernelOps):
    def __init__(self, autocast: str | None = None, param_dtype: str = FP32, adapters=None,
                 fp8: str | None = None):
        self.autocast = autocast  # None, or the device whose autocast policies apply
        self.fp8 = fp8  # "torchao" / "te": the linear layers in fp8 (matmul's `linear`)
        self.param_dtype = param_dtype  # bf16: model.to(torch.bfloat16); LoRA: the frozen base's
        self.hf = False  # the ops of transformers' modeling code, where they differ (builder)
        self.hf_gemma3 = False  # Gemma3ForCausalLM's RMSNorm and GELUTanh (builder)
        self.hf_gemma4 = False  # Gemma4ForCausalLM's (builder/hf_gemma4.py)
        self.hf_olmo2 = False  # OLMo-2's RMSNorm (the gain in fp32, then the cast), fp32 RoPE
        self.hf_gpt2 = False  # GPT-2's modules (builder/hf_gpt2.py: F.layer_norm, c_attn)
        self.fused_gelu = False  # the spec's fused_gelu: the tanh GELU as one F.gelu
        self.hf_oss = False  # gpt-oss's modules (GptOssRMSNorm as OLMo-2's, its RoPE, experts)
        self.hf_qwen_next = False  # Qwen3-Next's/Qwen3.5's ((1 + w) norms, gated q_proj)
        self.hf_nemotron = False  # Nemotron-H's (builder/hf_mamba.py: the Mamba-2 torch path)
        self.logits_dtype: str | None = None  # of the logits the model returns (builder)
        self.megatron = False  # Megatron-Core + TE's fused modules (builder/megatron.py)
        self.dropout = False  # Megatron: dropout on (its masks saved)
        self.titan = False  # torchtitan's Llama (builder/megatron.py's fused norm, its RoPE)
        self.foundry = False  # llm-foundry's MPT (builder/megatron.py: its norm and GELU)
        self.adapters = adapters  # LoRA (builder/lora.py): every other parameter frozen
        self.lora_outputs: dict = {}  # a fused PEFT layer's lora_A output, by its input
        self._fp8_inputs: dict = {}  # Megatron + TE: each input's one fp8 copy, by storage
        self.path: list[str] = []
        self.repeat: str | None = None
        self.params: list[R.Param] = []
        self.tied: dict[str, str] = {}  # alias state-dict key -> the parameter's own name
        self.registered: list[tuple[str, str | None]] = []  # (state-dict key, block kind), in order
        self.matmuls: list[R.Matmul] = []
        self.recomputed: list[R.Matmul] = []  # forward matmuls run again in the backward pass
        self.elementwise: list[R.Elementwise] = []
        self.buffers: list[R.Buffer] = []
        self.persistent: list[str] = []  # state-dict keys of persistent buffers
        self.cache: list[R.CacheEntry] = []
        self.named: dict[Storage, Named] = {}
        self.groups: tuple[tuple[str, tuple[int, ...]], ...] = ()  # set by the builder
        self._region: str | None = None  # inside a checkpointed region: its name
        self._region_matmuls: list[tuple[int, R.Matmul]] = []  # (op tick, record)
        self._region_last_save = 0.0
        self._tick = 0  # counts ops, to order computes and saves within a region
        self._no_grad = False  # inside torch.no_grad(): nothing saved, no gradient matmul
        self._untrained = False  # in untrained() (a LoRA adapter stays trained, as PEFT counts it)
        self._unnamed_saves: list[str] = []
        self.sac_mms: int | None = None  # inside policy_region: the block's mms so far

    # ---- where the run is ----------------------------------------------------------------
    @property
    def module(self) -> str:
        return ".".join(self.path)

    @property
    def per_block(self) -> bool:
        return self.repeat is not None

    def mm_output(self, y: Sym) -> None:
        """A linear's mm under the policy: the 1st, 3rd, 5th … of the block saved, every
        second one recomputed."""
        if self.sac_mms is not None:
            self.sac_mms += 1
            if self.sac_mms % 2:
                self._saves(y, f"{SAC}: mm #{self.sac_mms} (odd: saved)", after=True)

    # ---- declarations -------------------------------------------------------------------
    def param(self, name: str, shape: tuple[str, ...], component: str, lookup: bool = False,
              trainable: bool = False, dims: tuple[int, ...] = (),
              requires_grad: bool = True) -> Sym:
        """A parameter in param_dtype; with adapters, every one but an adapter's
        (`trainable`, in the adapters' dtype) is frozen (requires_grad False), and one made
        with requires_grad=False is frozen always (ERNIE 4.5's router statics)."""
        key = ".".join(self.path + [name])
        full = f"layers.{{i}}.{key}" if self.repeat else key
        frozen = not trainable and (self.adapters is not None or self._untrained) or not requires_grad
        self.params.append(R.Param(full, component, self.module, self.repeat, shape, lookup,
                                   frozen=frozen, dims=dims))
        self.registered.append((full, self.repeat))
        return Sym(shape, self.adapters.adapter_dtype if trainable else self.param_dtype,
                   grad=not frozen, param=full)

    def alias(self, name: str, p: Sym) -> Sym:
        """`p` registered again under `name` in this module (a tied weight)."""
        key = ".".join(self.path + [name])
        full = f"layers.{{i}}.{key}" if self.repeat else key
        self.tied[full] = p.param
        self.registered.append((full, self.repeat))
        return p

    def buffer(self, name: str, shape: tuple[str, ...], bytes_per_element: int,
               persistent: bool = False) -> Sym:
        """register_buffer: a persistent one is in the state dict (not a parameter)."""
        self.buffers.append(R.Buffer(name, "buffer", self.module, self.repeat, shape,
                                     bytes_per_element))
        if persistent:
            key = ".".join(self.path + [name])
            full = f"layers.{{i}}.{key}" if self.repeat else key
            self.registered.append((full, self.repeat))
            self.persistent.append(full)
        return Sym(shape, grad=False)

    def cached(self, name: str, per_token: tuple[str, ...], window: bool = False,
               chunk: bool = False) -> None:
        """What each token adds to the KV cache here (K or V after any rotation)."""
        self.cache.append(R.CacheEntry(name, "KV cache", self.module, self.repeat, per_token,
                                       window, chunk))

    def state(self, name: str, shape: tuple[str, ...], fp32: bool = False) -> None:
        self.cache.append(R.CacheEntry(name, "recurrent state", self.module, self.repeat, shape,
                                       per_sequence=True, fp32=fp32))  # per sequence

    def name(self, x: Sym, label: str, course: str = "", block_input: bool = False,
             weight_copy: bool = False, storages: str | None = None,
             saved_if: str | None = None) -> Sym:
        """Name a tensor for the memory ledger (storages: it is that many tensors, "N_c";
        saved_if: a 0/1 symbol its saved elements are multiplied by, "[N_c>1]" for what only
        a loop's later iterations save)."""
        n = self.named.get(x.storage)
        if n is None:
            shape = x.shape + ((saved_if,) if saved_if else ())
            self.named[x.storage] = Named(label, shape, x.dtype, self.repeat, course,
                                          block_input, weight_copy, storages=storages)
        else:
            n.course, n.block_input = n.course or course, n.block_input or block_input
        return x

    def fresh(self, shape: tuple[str, ...], dtype: str | None = None, grad: bool = False) -> Sym:
        """A tensor made from nothing: token ids, positions, the causal mask; a block's input
        (grad) is in the parameters' dtype (the residual stream's)."""
        return Sym(shape, dtype or (self.param_dtype if grad else FP32), grad)

    # ---- bookkeeping of saves and reads ----------------------------------------------------
    def _saves(self, x: Sym, by: str, after: bool = False) -> None:
        """x is saved for backward by the op running now: before it computes (an input), or
        after (`after`: an output)."""
        if self._no_grad:
            return  # torch.no_grad(): autograd records nothing
        if self._region is not None and not by.startswith(("checkpoint", SAC)):
            self._region_last_save = max(self._region_last_save, self._tick + (0.5 if after else -0.5))
            return  # inside a checkpoint nothing is kept
        if x.param:
            return  # parameters are not activations
        n = self.named.get(x.storage)
        if n is None:  # the builder must name every tensor autograd saves
            self._unnamed_saves.append(f"{by} in {self.module or 'model'}")
            return
        if not n.savers:
            n.saved_in = self.module or ("block" if self.repeat else "model")
        if by not in n.savers:
            n.savers.append(by)

    def _reads(self, by: str, *xs: Sym) -> None:
        for x in xs:
            n = self.named.get(x.storage)
            if n is not None and by not in n.readers:
                n.readers.append(by)

    def _record(self, op: str, label: str, component: str, elements: tuple[str, ...],
                reduction: bool = False) -> str:
        self._tick += 1
        self.elementwise.append(R.Elementwise(label, component, self.module, self.repeat, op,
                                              elements, reduction=reduction))
        return f"{op.removeprefix('aten.')} ({label})"

    # ---- dtypes ------------------------------------------------------------------------------
    def cast(self, x: Sym, dtype: str, label: str = "") -> Sym:
        """x.to(dtype): x itself when it has that dtype, else a copy (0 FLOPs)."""
        if x.dtype == dtype or x.dtype not in R.FLOAT_DTYPES:
            return x
        y = Sym(x.shape, dtype, x.grad, x.contiguous)
        n = self.named.get(x.storage)
        if x.param:
            self.name(y, f"{dtype} copy of {x.param}", weight_copy=True)
        elif label or n is not None:
            self.name(y, label or f"{n.label} ({dtype} copy)")
        self._reads(f"to {dtype}", x)
        return y

    def _autocast(self, op: str, *xs: Sym | None) -> tuple[list[Sym | None], str]:
        """The inputs as the op sees them (cast where autocast's policy says) and the dtype
        of its result (type promotion among float inputs; a scalar does not promote)."""
        pol = AC.policy(self.autocast, op)
        target = AC.LOW_DTYPE if pol == AC.LOWER else FP32 if pol == AC.FP32 else None
        if target is not None:
            xs = tuple(None if x is None else self.cast(x, target) for x in xs)
            return list(xs), target
        floats = [x.dtype for x in xs if x is not None and x.dtype in R.FLOAT_DTYPES]
        return list(xs), FP32 if FP32 in floats or not floats else floats[0]

    # ---- non-matmul ops ---------------------------------------------------------------------
    # Each takes `out` (and `course`): the output's activation name, given where the output
    # may be saved or the course's list counts it. Outputs keep their first operand's
    # layout (TensorIterator preserves strides), so a permuted input gives a permuted output.
    def _output(self, like: Sym, dtype: str, grad: bool, shape: tuple[str, ...], out: str,
                course: str, saved_if: str | None = None) -> Sym:
        y = Sym(shape, dtype, grad=grad, contiguous=like.contiguous)
        return self.name(y, out, course, saved_if=saved_if) if out else y

    def binary(self, op: str, a: Sym, b: Sym | None, label: str, component: str,
               out: str = "", course: str = "") -> Sym:
        """a op b for op in aten.add/sub/mul/div; b None means a Python scalar. The output
        has a's shape (the larger operand comes first)."""
        (a, b), dtype = self._autocast(op, a, b)
        grad = a.grad or (b is not None and b.grad)
        y = self._output(a, dtype, grad, a.shape, out, course)
        desc = self._record(op, label, component, y.shape)
        self._reads(desc, a, *(() if b is None else (b,)))
        if b is not None and op == "aten.mul":
            if a.grad:
                self._saves(b, desc)
            if b.grad:
                self._saves(a, desc)
        elif b is not None and op == "aten.div":
            if grad:
                self._saves(b, desc)
            if b.grad:
                self._saves(a, desc)
        elif b is not None and op in ("aten.maximum", "aten.minimum") and grad:  # masks compare both
            self._saves(a, desc)
            self._saves(b, desc)
        return y

    def unary(self, op: str, x: Sym, label: str, component: str, saves: str = "",
              out: str = "", course: str = "", saved_if: str | None = None) -> Sym:
        """An elementwise function; saves its "input" (pow, erf) or "output" (sqrt, exp,
        sigmoid, tanh) when a gradient flows (saved_if: as name()'s)."""
        (x,), dtype = self._autocast(op, x)
        y = self._output(x, dtype, x.grad, x.shape, out, course, saved_if)
        desc = self._record(op, label, component, y.shape)
        self._reads(desc, x)
        if x.grad and saves:
            self._saves(x if saves == "input" else y, desc, after=saves == "output")
        return y

    def reduce(self, op: str, x: Sym, over: tuple[str, ...], label: str, component: str,
               saves: bool = False, out: str = "") -> Sym:
        """A reduction over the trailing dims `over` (keepdim); amax saves input and output."""
        assert x.shape[-len(over):] == over, (x.shape, over)
        (x,), dtype = self._autocast(op, x)
        y = self._output(x, dtype, x.grad, x.shape[:-len(over)], out, "")
        desc = self._record(op, label, component, x.shape, reduction=True)
        self._reads(desc, x)
        if saves and x.grad:
            self._saves(x, desc)
            self._saves(y, desc, after=True)
        return y

    def where(self, cond: Sym, x: Sym, label: str, component: str, out: str = "") -> Sym:
        y = self._output(x, x.dtype, x.grad, x.shape, out, "")
        desc = self._record("aten.where", label, component, y.shape)
        self._reads(desc, x)
        if x.grad:
            self._saves(cond, desc)
        return y

    def topk(self, x: Sym, over: tuple[str, ...], k: tuple[str, ...], label: str, component: str,
             out: str, values: bool = False):
        """x.topk(k) over the trailing dims `over`: 1 FLOP per input element (a comparison);
        autograd saves the indices (int64) when x needs a gradient, whichever output is
        used. Returns the indices, or (values, indices)."""
        shape = x.shape[:-len(over)] + k
        idx = self.name(Sym(shape, R.INT64, grad=False), out)
        desc = self._record("aten.topk", label, component, x.shape, reduction=True)
        self._reads(desc, x)
        if x.grad:
            self._saves(idx, desc, after=True)
        return (Sym(shape, x.dtype, x.grad), idx) if values else idx

    def gather(self, x: Sym, index: Sym, label: str = "gather") -> Sym:
        """x.gather(dim, index): 0 FLOPs; saves x and its index (gather_backward takes self)."""
        self._tick += 1
        if x.grad:
            self._saves(x, f"gather ({label})")
            self._saves(index, f"gather ({label})")
        return Sym(index.shape, x.dtype, x.grad)

    def scatter(self, base_shape: tuple[str, ...], index: Sym, src: Sym, label: str) -> Sym:
        """zeros(base).scatter(dim, index, src): 0 FLOPs (a copy); saves its index when src
        needs a gradient (scatter's backward gathers it)."""
        self._tick += 1
        self._reads(f"scatter ({label})", src)
        if src.grad:
            self._saves(index, f"scatter ({label})")
        return Sym(base_shape, src.dtype, src.grad)

    def index_add(self, base_shape: tuple[str, ...], index: Sym, src: Sym, label: str,
                  component: str) -> Sym:
        """zeros(base).index_add(0, index, src): 1 FLOP per added element; saves index, src."""
        desc = self._record("aten.index_add", label, component, src.shape)
        self._reads(desc, src)
        if src.grad:
            self._saves(index, desc)
            self._saves(src, desc)
        return Sym(base_shape, src.dtype, src.grad)

    def index_copy(self, base_shape: tuple[str, ...], index: Sym, src: Sym, label: str) -> Sym:
        """zeros(base).index_copy(0, index, src): 0 FLOPs (a copy); saves index and src."""
        self._tick += 1
        self._reads(f"index_copy ({label})", src)
        if src.grad:
            self._saves(index, f"index_copy ({label})")
            self._saves(src, f"index_copy ({label})")
        return Sym(base_shape, src.dtype, src.grad)

    def masked_fill(self, x: Sym, mask: Sym, label: str, component: str) -> Sym:
        """x.masked_fill(mask, value): a select, 1 FLOP per element; saves its mask."""
        y = Sym(x.shape, x.dtype, x.grad, x.contiguous)
        desc = self._record("aten.masked_fill", label, component, y.shape)
        self._reads(desc, x)
        if x.grad:
            self._saves(mask, desc)
        return y

    def index(self, x: Sym, index: Sym, shape: tuple[str, ...], label: str = "") -> Sym:
        """x[index] (a gather by rows): 0 FLOPs; saves the index when x needs a gradient."""
        self._tick += 1
        if x.grad:
            self._saves(index, f"index ({label})" if label else "index")
        return Sym(shape, x.dtype, x.grad)

    def lookup(self, table: Sym, ids: Sym, shape: tuple[str, ...]) -> Sym:
        """table[ids]: 0 FLOPs; saves the indices when the table needs a gradient."""
        if table.grad:
            self._saves(ids, "index (the lookup)")
        return Sym(shape, table.dtype, grad=table.grad)

    def view(self, x: Sym, shape: tuple[str, ...] | None = None, contiguous: bool | None = None) -> Sym:
        """A reshape or permute that shares x's storage."""
        return Sym(x.shape if shape is None else shape, x.dtype, x.grad,
                   x.contiguous if contiguous is None else contiguous, x.storage, x.param)

    def cat(self, xs: tuple[Sym, ...], shape: tuple[str, ...]) -> Sym:
        """torch.cat: a new contiguous storage, 0 FLOPs, saves nothing (its backward slices)."""
        self._tick += 1
        self._reads("cat", *xs)
        dtypes = [x.dtype for x in xs]
        return Sym(shape, FP32 if FP32 in dtypes else dtypes[0], any(x.grad for x in xs))

    def off_gradient_path(self, x: Sym) -> Sym:
        """x, for ops whose results never reach the loss's gradient (only integer indices
        leave them): autograd frees what those ops save as soon as their outputs are gone,
        so nothing they save is held for the backward pass."""
        return Sym(x.shape, x.dtype, False, x.contiguous, x.storage, x.param)

    def copy(self, x: Sym, shape: tuple[str, ...] | None = None) -> Sym:
        """A reshape that cannot be a view: a new, contiguous storage (0 FLOPs)."""
        return Sym(x.shape if shape is None else shape, x.dtype, x.grad)

    # ---- matmuls --------------------------------------------------------------------------
    def matmul(self, a: Sym, b: Sym, record: R.Matmul, copy_labels: tuple[str, str] = ("", ""),
               op: str = "bmm", linear: bool = False) -> str:
        """torch.einsum of two operands, run as one bmm. An operand it cannot view (not
        contiguous) is copied first, and the copy is what bmm saves (cast first, under
        autocast); bmm saves each operand the other's gradient needs. Returns the dtype.
        op: the autocast policy's name for it (grouped_mm has none: it runs in its inputs'
        dtype). linear: a linear layer's x·Wᵀ (b the weight), which an fp8 run runs in fp8."""
        self._tick += 1
        if self._no_grad:
            record = replace(record, backward=False)
        if linear and self.fp8 is not None and not (self.fp8 == AC.TE and record.component == R.LM_HEAD):
            return self._fp8_linear(a, b, replace(record, fp8=True,
                                                          weight=self.tied.get(b.param, b.param)))
        self.matmuls.append(record)
        if self._region is not None:
            self._region_matmuls.append((self._tick, record))
        desc = f"bmm ({record.name})"
        operands = []
        for x, label in zip((a, b), copy_labels):
            if not x.contiguous:
                self._reads(f"clone ({label})", x)
                x = self.name(self.copy(x), label)
            operands.append(x)
        (a2, b2), dtype = self._autocast(op, *operands)
        self._reads(desc, a2, b2)
        if a2.grad:
            self._saves(b2, desc)
        if b2.grad:
            self._saves(a2, desc)
        self.mark_matmul_weight(a, b)
        return dtype

    def mark_matmul_weight(self, *xs: Sym) -> None:
        """The parameters among xs are read by a matmul (a weight, not a table or a gain)."""
        for x in xs:
            if x.param:
                name = self.tied.get(x.param, x.param)
                self.params = [replace(p, matmul_weight=True) if p.name == name else p
                               for p in self.params]

    def check(self) -> None:
        if self._unnamed_saves:
            raise AssertionError(f"builder: unnamed saved tensors: {self._unnamed_saves}")
