"""--compile (issue 44): the plan's rule for a compiled block against AOTAutograd's min-cut
partitioner (torch/_functorch/partitioners.py min_cut_rematerialization_partition, what
inductor partitions a compiled block with), run on the CPU.

One block is wrapped with functorch.compile.aot_module(partition_fn=
min_cut_rematerialization_partition) (the forward and backward graphs then run as traced,
without inductor's codegen, which changes no saved tensor), its forward run under
torch.autograd.graph.saved_tensors_hooks, and every storage it saves counted once (the
block's parameters, its input and the rotary inputs excluded: those exist anyway). The same
for the eager block. Expected: the ledger's block records (tests/test_planning_reality.py
and tests/test_transformers_saves.py hold them equal to the eager saves) changed by
planning/compile_memory.py's rule — the partitioner's output is the independent source."""
import re
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from accounting.architecture.config import ModelConfig  # noqa: E402
from accounting.planning import PRECISIONS, MemoryModel  # noqa: E402
from accounting.planning.compile_memory import saved_change  # noqa: E402


def _saved(fn, args, skip, autocast):
    seen, alive = {}, []

    def pack(t):
        alive.append(t)  # keep every saved tensor alive: no address reused while counting
        s = t.untyped_storage()
        if s.data_ptr() not in skip:
            seen[s.data_ptr()] = s.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            fn(*args)
    return sum(seen.values())


def _compiled(module):
    from functorch.compile import aot_module, min_cut_rematerialization_partition
    return aot_module(module, fw_compiler=lambda gm, _: gm, bw_compiler=lambda gm, _: gm,
                      partition_fn=min_cut_rematerialization_partition)


def _planned(config, B, T, autocast, implementation):
    m = MemoryModel(config, PRECISIONS["bf16-mixed" if autocast else "fp32"], "model",
                    implementation=implementation, device="cpu")
    v = m.values(T, B)
    acts = m.ledger.activations
    block = sum(r.elements.evaluate(v) * r.bytes_per_element for r in acts
                if r.saved and r.repeat and r.name != "ln1 input")  # the block's input
    return block // v["L"], (block + saved_change(acts, "cpu" if autocast else None)
                             .evaluate(v)) // v["L"]


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("d,d_ff,h", [(32, 88, 4), (64, 344, 2)])
def test_a_compiled_course_block_saves_what_the_rule_keeps(autocast, d, d_ff, h):
    from model import TransformerLM
    B, T = 2, 32
    c = ModelConfig(vocab_size=64, context_length=T, num_heads=h, attention="sdpa",
                    num_layers=1, d_model=d, d_ff=d_ff)
    torch.manual_seed(0)
    block = TransformerLM.from_config(c).layers[0]
    x = torch.randn(B, T, d, requires_grad=True)
    skip = {t.untyped_storage().data_ptr() for t in (x, *block.parameters(), *block.buffers())}
    eager = _saved(block, (x,), skip, autocast)
    compiled = _saved(_compiled(block), (x,), skip, autocast)
    want_eager, want_compiled = _planned(c, B, T, autocast, "course")
    assert eager == want_eager
    assert compiled == want_compiled < eager


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("d,d_ff,d_k", [(64, 176, 16), (32, 512, 8)])
def test_a_compiled_transformers_llama_layer_saves_what_the_rule_keeps(autocast, d, d_ff, d_k):
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM
    from accounting.architecture.hf_config import translate
    B, T = 2, 64
    hf = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=d,
              intermediate_size=d_ff, num_hidden_layers=1, num_attention_heads=4,
              num_key_value_heads=2, head_dim=d_k, max_position_embeddings=T, vocab_size=101,
              rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
              hidden_act="silu")
    cfg = LlamaConfig(**{k: v for k, v in hf.items() if k != "architectures"})
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    x = torch.randn(B, T, d, requires_grad=True)
    cos, sin = model.model.rotary_emb(x, torch.arange(T)[None].expand(B, T))

    class Layer(torch.nn.Module):  # the decoder layer as transformers' model calls it
        def __init__(self, layer):
            super().__init__()
            self.layer = layer

        def forward(self, x, cos, sin):
            out = self.layer(x, position_embeddings=(cos, sin), attention_mask=None)
            return out[0] if isinstance(out, tuple) else out
    layer = Layer(model.model.layers[0])
    skip = {t.untyped_storage().data_ptr() for t in (x, cos, sin, *layer.parameters())}
    eager = _saved(layer, (x, cos, sin), skip, autocast)
    compiled = _saved(_compiled(layer), (x, cos, sin), skip, autocast)
    config = replace(translate(hf, "test", "llama").config, attention="sdpa")
    want_eager, want_compiled = _planned(config, B, T, autocast, "transformers")
    assert eager == want_eager
    assert compiled == want_compiled < eager


def test_compile_is_refused_where_not_measured(capsys):
    from cli_run import refused_in_one_line
    refused_in_one_line(capsys, "plan", "gpt2-small", "--compile",
                        expected="--compile is measured for Llama-layout blocks")



@pytest.mark.parametrize("stack", ["deepspeed", "megatron"])
def test_compile_on_a_stack_that_does_not_compile_names_the_stack(capsys, stack):
    """Regression (a refusal naming the wrong problem): with --stack deepspeed, --compile on
    Llama-3.2-1B (SDPA attention, a Llama layout) was refused as "Llama-3.2-1B has attention
    other than SDPA" (the stack's eager-attention config checked first), so the fix it named
    (leave --compile out for the model) was not the problem's: the stack does not compile."""
    from cli_run import refused_in_one_line
    line = refused_in_one_line(capsys, "plan", "meta-llama/Llama-3.2-1B", "--ctx", "2048",
                               "--compile", "--gpus", "8", "--stack", stack,
                               expected=f"leave it out with --stack {stack}")
    assert "attention other than SDPA" not in line


def test_compile_lowers_the_plan_by_the_rule():
    # Llama-3.2-1B (config.json: L = 16, d_model = 2,048, d_ff = 8,192), bf16-mixed, B = 1,
    # T = 4,096, transformers' ops: per block the rule drops two fp32 x / rms (2·4·T·d),
    # the bf16 SiLU output (2·T·d_ff), three repeated bf16 casts of the norms' outputs
    # (3·2·T·d) and half the fp32 residual (2·T·d)
    from accounting.planning.plan import plan
    T, D, FF, L = 4096, 2048, 8192, 16
    eager = plan("meta-llama/Llama-3.2-1B", T, 1).memory.model
    compiled = plan("meta-llama/Llama-3.2-1B", T, 1, compile=True).memory.model
    v = eager.values(T, 1)
    per_block = 2 * 4 * T * D + 2 * T * FF + 3 * 2 * T * D + 2 * T * D
    assert eager.peak_terms[0].bytes.evaluate(v) - compiled.peak_terms[0].bytes.evaluate(v) \
        == L * per_block


def test_many_gpus_hold_the_compiled_blocks(capsys):
    # the same per-block rule on each rank: 8 GPUs, FSDP, micro-batch 1, T = 2,048 (no TP:
    # every block's tensors whole), L = 16 blocks in flight once
    import json
    from cli_run import run
    T, D, FF, L = 2048, 2048, 8192, 16
    out = {}
    for flags in ((), ("--compile",)):
        code, text, err = run(capsys, "plan", "meta-llama/Llama-3.2-1B", "--ctx", str(T),
                              "--gpus", "8", "--fsdp", *flags, "--format", "json")
        assert code == 0, err
        out[flags] = json.loads(text)["memory_per_gpu_bytes"]
    assert out[()] - out[("--compile",)] == L * (2 * 4 * T * D + 2 * T * FF + 3 * 2 * T * D
                                                 + 2 * T * D)


# ---- --stack torchtitan: its block compiled inside its checkpoint wrapper ------------------
def _titan_policy():
    """torchtitan's per-op SAC policy (pytorch/torchtitan, models/llama3/infra/parallelize.py
    _op_sac_save_list and _get_custom_policy at the published runs' torchtitan: the save
    list's ops saved, every second mm recomputed); the CPU's flash kernel stands in for
    CUDA's in the list."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    ops = torch.ops
    save = {ops.aten.mm.default, ops.aten._scaled_dot_product_flash_attention.default,
            ops.aten._scaled_dot_product_efficient_attention.default,
            ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
            ops._c10d_functional.reduce_scatter_tensor.default, ops.aten.max.default}
    meta = {"forward": 0, "recompute": 0}

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == ops.aten.mm.default:
            meta[mode] += 1
        keep = func in save and not (func == ops.aten.mm.default and meta[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(policy)


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_a_compiled_torchtitan_block_saves_what_the_rule_keeps(recompute):
    # torchtitan compiles each block after wrapping it for checkpointing (parallelize_llama:
    # apply_ac, then apply_compile, fullgraph): here its block (tests/test_stack_
    # implementations.py, bf16, no autocast) in torch.utils.checkpoint as its wrapper calls
    # it (preserve_rng_state False, torchtitan's default), compiled by torch.compile with
    # AOTAutograd and the min-cut partitioner (inductor's partition_fn; the graphs run as
    # traced). Expected: what the compiled block saves, every storage once (its input, the
    # parameters and freqs_cis excluded), measured; planned: the torchtitan stack's eager
    # block (held to the eager module by test_stack_implementations.py and test_stacks.py)
    # changed by the --compile rule, read off the backward's start on one stage
    from torch._dynamo.backends.common import aot_autograd
    from torch.utils.checkpoint import checkpoint
    from functorch.compile import min_cut_rematerialization_partition
    from test_stack_implementations import _titan_block
    from accounting.planning.parallel import Layout, parallel_plan
    from accounting.planning.parallel.peak import AT_BACKWARD
    from accounting.planning.parallel.stack_memory import StackRun
    from accounting.planning.parallel.stacks import get_stack
    h, a, g, d, f, T = 48, 8, 2, 8, 96, 16  # h ≠ a·d: Q's and W2's outputs differ in size

    class Wrapped(torch.nn.Module):
        def __init__(self, block):
            super().__init__()
            self.block = block

        def forward(self, x):
            if recompute == "none":
                return self.block(x)
            return checkpoint(self.block, x, use_reentrant=False, preserve_rng_state=False,
                              **({"context_fn": _titan_policy} if recompute == "selective"
                                 else {}))
    torch.manual_seed(0)
    block = _titan_block(h, a, g, d, f, T)
    backend = aot_autograd(fw_compiler=lambda gm, _: gm, bw_compiler=lambda gm, _: gm,
                           partition_fn=min_cut_rematerialization_partition)
    compiled = torch.compile(Wrapped(block), backend=backend, fullgraph=True)
    x = torch.randn(1, T, h, dtype=torch.bfloat16, requires_grad=True)
    compiled(x).sum().backward()  # compiled outside the hooks
    skip = {t.untyped_storage().data_ptr() for t in (x, *block.parameters(), *block.buffers())}
    measured = _saved(compiled, (x,), skip, False) + x.untyped_storage().nbytes()
    if recompute == "full":  # the attention kernel recomputed: AOTAutograd functionalizes
        # its RNG (run_and_save_rng_state) and saves the generator's state: the CPU's
        # 5,056-byte Mersenne state, CUDA's Philox seed and offset (16 bytes)
        measured -= torch.get_rng_state().nbytes

    c = ModelConfig(vocab_size=128, context_length=T, num_layers=2, d_model=h, num_heads=a,
                    num_kv_heads=g, head_dim=d, d_ff=f, attention="sdpa", name="titan")
    plans = [parallel_plan(c, Layout(2, dp=2, zero=3, global_batch=2, recompute=recompute), T,
                           precision=PRECISIONS["bf16-mixed"],
                           stack=StackRun(get_stack("torchtitan")), compile=on,
                           # the blocks alone: the compiled loss is test_compiled_whole_loss's
                           compile_components=frozenset({"model"}) if on else None)
             for on in (False, True)]
    at = [next(s.moment_bytes(m, 1) for m in s.moments if m.name.startswith(AT_BACKWARD))
          for s in (p.stages[0] for p in plans)]
    per_block = plans[0].per_layer_activation_bytes + (at[1] - at[0]) // c.num_layers
    assert per_block == measured
    # by hand, what the partitioner dropped: none, the SiLU output (2·T·f); per-op SAC, the
    # W2 output (2·T·h: its last mm, saved by the policy, read by no backward op); full,
    # nothing (the input alone either way)
    assert plans[0].per_layer_activation_bytes - measured == \
        {"none": 2 * T * f, "selective": 2 * T * h, "full": 0}[recompute]


def test_compile_under_full_checkpointing_says_it_changes_nothing(capsys):
    """Under --recompute full each compiled block keeps its input alone, as eager (the
    module's docstring; torchtune wraps the compiled layer in the eager checkpoint), so the
    plan's bytes are eager's: the peak's text said the partitioner's rule (RMSNorm x / rms
    recomputed, …) as if it removed something, for a flag that changes no number."""
    from cli_run import run
    argv = ("plan", "meta-llama/Llama-3.2-1B", "--ctx", "2048", "--recompute", "full",
            "--gpu", "H100")
    _, eager, _ = run(capsys, *argv)
    code, compiled, err = run(capsys, *argv, "--compile")
    assert code == 0, err
    number = re.compile(r"\d[\d,.]*")
    assert "--compile: no change to what the blocks keep" in compiled
    assert "recomputes each block's RMSNorm" not in compiled
    peak = next(line for line in compiled.splitlines() if line.startswith("step's peak"))
    assert number.findall(peak) == number.findall(
        next(line for line in eager.splitlines() if line.startswith("step's peak")))
