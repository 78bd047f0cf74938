"""The training memory of the multi-token-prediction (MTP) modules (DeepSeek-V3 §2.2;
their layout and FLOPs: accounting/analysis/mtp.py), for the plan's memory model.

Module k reads the previous depth's hidden state h and the embedding of the token k ahead:
    h' = Block(W_eh [RMSNorm_e(emb(t_{i+k})); RMSNorm_h(h_i)]),  loss_k = CE(Head(RMSNorm(h')))
with the embedding and the output head shared with the main model. A training step holds,
per module, everything from the ledger's own records, nothing written twice:
  * its own tensors (one block of the last layer's kind, W_eh of d × 2d, three norms of
    ln_final's tensors): the parameter, its gradient, the optimizer's state and master
    copy, in the plan's precision, as the model's tensors (training_state.py);
  * the saved activations: the block's records (the last group's, one block), the two
    input norms' (ln_final's records; RMSNorm_h's input is h, which the previous depth's
    final norm saves already: not again), the concatenation W_eh saves (2 × the d-wide
    normed rows the head saves), autocast's copy of W_eh (as the block's weight copies),
    the shifted token ids (the embedding's), and the head and loss over the module's T
    positions (ln_final's, lm_head's and the loss's records, the shared head's copy
    included).
Checked against torch autograd on the CPU (tests/test_mtp_memory.py: the modules built of
model/'s own blocks, their saved tensors measured) and by hand for the states."""
from __future__ import annotations

from dataclasses import dataclass, replace

from accounting.ledger import records as R
from accounting.ledger.symbols import Expr
from accounting.planning import training_state as TS
from accounting.planning.optimizers import HIDDEN_MATRIX, get_optimizer
from accounting.planning.precisions import Precision
from accounting.architecture.config import ModelConfig
from accounting.units import DTYPE_BYTES

HEAD = ("token_embeddings", "ln_final", "lm_head", "loss")  # the records one module repeats
ACTIVATIONS = ("each MTP module's block (the last layer's kind), its two input norms, W_eh's "
               "input, the shifted token ids, and its head and loss over the T positions "
               "(DeepSeek-V3 §2.2; accounting/planning/mtp_memory.py)")


@dataclass(frozen=True)
class MTPTerm:
    """One memory line of the MTP modules (the plan's Term, without importing it)."""
    name: str
    formula: str
    bytes: Expr
    on_gpu: bool = True
    note: str = ""


def mtp_tensors(config: ModelConfig, lg) -> tuple[TS.Tensor, ...]:
    """Every MTP module's parameter tensors (copies = the modules): the last layer's block,
    W_eh (d × 2d) and three norms of ln_final's tensors."""
    n, v = config.mtp_layers, lg.values(config.context_length, 1)
    last = lg.group_of(config.num_layers - 1)
    out = []
    for p in lg.params:
        if p.repeat == last or p.module == "ln_final":
            sizes = p.sizes(v)
            out.append(TS.Tensor(p, sizes, n * (3 if p.module == "ln_final" else 1), True,
                                 TS.role(p, sizes)))
    w = next(p for p in lg.params if p.matmul_weight)
    eh = replace(w, name="mtp.eh_proj.weight", module="eh_proj", repeat=None)
    out.append(TS.Tensor(eh, (config.d_model, 2 * config.d_model), n, True, HIDDEN_MATRIX))
    return tuple(out)


def parameters(config: ModelConfig, lg) -> int:
    """N_MTP: every module's own parameters (the shared embedding and head not again)."""
    return TS.counts(mtp_tensors(config, lg))[0]


def state_terms(config: ModelConfig, lg, precision: Precision, optimizer: str) -> list[MTPTerm]:
    """Parameters, gradients, master copy and optimizer state of the MTP modules."""
    if not config.mtp_layers:
        return []
    p, opt, ts = precision, get_optimizer(optimizer), mtp_tensors(config, lg)
    n = TS.counts(ts)[0]
    note = f"{config.mtp_layers} MTP module(s), {n:,} parameters (DeepSeek-V3 §2.2)"
    out = [MTPTerm(f"MTP modules: parameters ({p.param_dtype})", f"{p.master_bytes}·N_MTP",
                   Expr.of(p.master_bytes * n), note=note),
           MTPTerm(f"gradients of the MTP modules ({p.grad_dtype})", f"{p.grad_bytes}·N_MTP",
                   Expr.of(p.grad_bytes * n))]
    if p.master:
        out.append(MTPTerm("MTP modules: fp32 master copy", "4·N_MTP", Expr.of(4 * n)))
    for item in TS.optimizer_items(opt, p, ts):
        e, formula = TS.as_expr(item.numel, DTYPE_BYTES.get(item.dtype, 1), n, Expr.of(n), "N_MTP")
        if item.bytes != e.evaluate({}):  # mixed dtypes in one item: the integer
            e, formula = Expr.of(item.bytes), f"{item.bytes:,}"
        out.append(MTPTerm(f"MTP modules: {item.name}", formula, e,
                           note=f"{opt.title} ({opt.source})"))
    last = lg.group_of(config.num_layers - 1)
    buffers = sum((Expr.of(b.bytes_per_element, b.shape) for b in lg.buffers if b.repeat == last),
                  Expr()).scale(config.mtp_layers)
    if buffers:  # the block's own (model/'s blocks each hold their RoPE tables)
        out.append(MTPTerm("MTP modules: buffers (the block's)", str(buffers), buffers))
    steps = TS.step_counters(opt, ts)
    if steps:
        out.append(MTPTerm(f"MTP modules: {opt.counter_label} step counters",
                           f"{TS.STEP_BYTES}·{steps}", Expr.of(TS.STEP_BYTES * steps),
                           on_gpu=opt.step_counter == "device"))
    return out



def module_records(config: ModelConfig, lg) -> list[tuple[R.Activation, int]]:
    """The saved records one MTP module repeats, each with how many times: its block (the
    last layer's group), the head's and loss's records and the shifted token ids, the two
    input norms (ln_final's records; RMSNorm_h's input is h, saved already: not again), and
    W_eh's input (2 × the d-wide normed rows the head's matmul saves)."""
    last = lg.group_of(config.num_layers - 1)
    out = [(r, 1) for r in lg.activations if r.repeat == last and r.saved]
    outside = [r for r in lg.activations if not r.per_layer and r.saved and r.saved_in in HEAD]
    out += [(r, 1 + (r.saved_in == "ln_final") + (r.saved_in == "ln_final"
                                                   and r.name != "ln_final input")
             + 2 * (r.saved_in == "lm_head" and not r.weight_copy)) for r in outside]
    return out


def eh_copy_bytes(config: ModelConfig, lg) -> int:
    """Bytes per element of autocast's copy of W_eh (0 without autocast): the block's."""
    last = lg.group_of(config.num_layers - 1)
    return next((r.bytes_per_element for r in lg.activations
                 if r.repeat == last and r.saved and r.weight_copy), 0)


def activation_bytes(config: ModelConfig, lg) -> Expr:
    """Saved bytes of every MTP module at (B, T), from the run's ledger `lg` (its autocast
    and recomputation: under recomputation a module's block keeps what each block keeps,
    and is recomputed one at a time as the others are)."""
    if not config.mtp_layers:
        return Expr()
    copy = eh_copy_bytes(config, lg)
    one = sum((r.elements.scale(r.bytes_per_element * k) for r, k in module_records(config, lg)),
              Expr()) + (Expr.of(2 * copy, ("d_model", "d_model")) if copy else Expr())
    return one.scale(config.mtp_layers)
