"""LoRA and QLoRA plans (accounting/planning/finetune.py, accounting/ledger/builder/lora.py)
against the libraries that run them, on the CPU:

  * trainable parameters = PEFT 0.21.2's own get_nb_trainable_parameters() on transformers'
    model (tiny GPT-2, Llama, Mistral, Qwen2/3, OLMo-2 and MoE configs; all-linear and
    explicit names; ranks 4/8/16), and for Llama-3.1-8B by hand algebra and by PEFT on the
    meta device;
  * one real training step of the course model wrapped by PEFT (its Linear registered as a
    custom module for peft's lora.Linear): every tensor autograd saves (saved_tensors_hooks,
    module by module) equals the LoRA ledger's records, in fp32 and under bf16 autocast, with
    and without dropout; the parameters', gradients' and AdamW's state bytes equal the plan's;
  * QLoRA's NF4 item = the bytes bitsandbytes allocates for the same weights (Params4bit);
  * bad input: one line, exit 2.
Expected values come from the libraries (or the algebra written out); the ledger is built
without torch.
"""
import json
from collections import Counter
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

from accounting.ledger.builder.lora import LEAF  # noqa: E402
from accounting.ledger.ledger import ledger  # noqa: E402
from accounting.planning import PRECISIONS, MemoryModel  # noqa: E402
from accounting.planning.finetune import LoRA, resolve  # noqa: E402
from accounting.architecture.hf_config import translate  # noqa: E402
from accounting.architecture.presets import hf_source  # noqa: E402
from cli_run import refused_in_one_line, run  # noqa: E402
from hf_examples import CONFIGS as DENSE  # noqa: E402
from hf_moe_examples import CONFIGS as MOE  # noqa: E402
from test_architectures import DTYPE, relative, variant  # noqa: E402
from test_memory_reality import B, T, batch, saved_by_module  # noqa: E402
import model.layers as ML  # noqa: E402
from model import TransformerLM  # noqa: E402

CASES = [("gpt2", DENSE, 8, "all-linear"), ("gpt2", DENSE, 4, "c_attn"),
         ("llama", DENSE, 16, "all-linear"), ("llama", DENSE, 8, "q_proj,v_proj"),
         ("mistral", DENSE, 8, "all-linear"), ("qwen2", DENSE, 16, "all-linear"),
         ("qwen3", DENSE, 8, "k_proj,o_proj,down_proj"), ("olmo2", DENSE, 8, "all-linear"),
         ("mixtral", MOE, 8, "q_proj,k_proj,v_proj,o_proj"), ("qwen3_moe", MOE, 16, "q_proj,v_proj")]


def _hf_model(data):
    cfg = transformers.AutoConfig.for_model(**{k: v for k, v in data.items() if k != "architectures"})
    return transformers.AutoModelForCausalLM.from_config(cfg)


@pytest.mark.parametrize("name,table,rank,targets", CASES)
def test_trainable_parameters_equal_peft_count(name, table, rank, targets):
    h = translate(table[name], "t", name)
    t = "all-linear" if targets == "all-linear" else targets.split(",")
    ft = resolve(h.config, LoRA(rank=rank, targets=tuple(targets.split(","))),
                 h.type.module_names(h.data))
    pm = peft.get_peft_model(_hf_model(table[name]), peft.LoraConfig(r=rank, target_modules=t))
    trainable, total = pm.get_nb_trainable_parameters()  # PEFT's own count
    assert ft.adapter_count() == trainable
    lg = ft.ledger(None, "none")
    v = lg.values(1, 1)
    assert sum(p.numel(v) * p.count(v) for p in lg.params) == total  # base + adapters
    # the layers PEFT wrapped are the plan's
    wrapped = {n.rsplit(".", 1)[-1] for n, m in pm.named_modules()
               if isinstance(m, peft.tuners.lora.LoraLayer)}
    assert wrapped == {x.name for x in ft.targets}


@pytest.mark.slow
def test_llama_31_8b_r16_all_linear_by_hand_and_by_peft_on_meta():
    h = hf_source("meta-llama/Llama-3.1-8B")
    ft = resolve(h.config, LoRA(rank=16), h.type.module_names(h.data))
    # hand algebra: r·(d_in + d_out) per layer, d = 4,096, d_kv = 8·128 = 1,024, d_ff = 14,336
    r, d, kv, f, layers = 16, 4096, 1024, 14336, 32
    per_layer = r * ((d + d) + (d + kv) + (d + kv) + (d + d) + 3 * (d + f))
    assert per_layer == 1_310_720
    assert ft.adapter_count() == layers * per_layer == 41_943_040
    # PEFT on transformers' model, built on the meta device (no memory)
    cfg = transformers.AutoConfig.for_model(**{k: v for k, v in h.data.items()
                                               if k not in ("architectures",)})
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(cfg)
    pm = peft.get_peft_model(m, peft.LoraConfig(r=16, target_modules="all-linear"))
    assert pm.get_nb_trainable_parameters() == (41_943_040, 8_030_261_248 + 41_943_040)


def _peft_course_model(c, rank, dropout, base):
    torch.manual_seed(0)
    m = TransformerLM.from_config(c)
    for p in m.parameters():  # the frozen base in its dtype; buffers (RoPE) stay fp32
        p.data = p.data.to(base)
    ft = resolve(c, LoRA(rank=rank, dropout=dropout), None,
                 "cpu" if base == torch.bfloat16 else None)
    cfg = peft.LoraConfig(r=rank, lora_dropout=dropout,
                          target_modules=sorted({x.name for x in ft.targets}))
    cfg._register_custom_module({ML.Linear: peft.tuners.lora.layer.Linear})
    pm = peft.get_peft_model(m, cfg)
    # transformers' enable_input_require_grads, on the course model
    m.token_embeddings.register_forward_hook(lambda mod, i, o: o.requires_grad_(True))
    return pm, ft


def _expected(lg, cpu_dropout_dtype=None):
    """Saved bytes by module from the ledger. On the CPU, at::dropout is not the fused
    native_dropout (aten/src/ATen/native/Dropout.cpp, is_fused_kernel_acceptable: CUDA, XPU,
    lazy or privateuse1 only): it multiplies by a noise tensor of the input's dtype, which
    mul saves in place of CUDA's bool mask — the same elements."""
    v = lg.values(T, B)
    out = {}
    for a in lg.activations:
        # the embedding's leaf is held by its AccumulateGrad node, not saved: the saved-tensor
        # hooks do not see it (the live-storage test below does)
        if a.saved and a.name != LEAF:
            dtype = a.dtype
            if cpu_dropout_dtype and a.name.endswith("LoRA dropout mask"):
                dtype = cpu_dropout_dtype
            tdtype, size = DTYPE[dtype]
            key = (size * a.elements.evaluate(v) // a.copies, tdtype)
            out.setdefault(a.saved_in, Counter())[key] += a.copies * a.count(v)
    return out


def _measured(pm, c, autocast):
    out = {}
    for k, v in saved_by_module(pm, *batch(c), autocast=autocast).items():
        k = k.replace("base_model.model.", "").replace(".default", "").replace(".base_layer", "")
        out.setdefault(relative(k), Counter()).update(v)
    return out


@pytest.mark.parametrize("name", ("cs336", "gqa", "gpt2"))
@pytest.mark.parametrize("autocast", (False, True))
@pytest.mark.parametrize("dropout", (0.0, 0.1))
def test_peft_step_saves_what_the_lora_ledger_says(name, autocast, dropout):
    c = variant(name)
    pm, ft = _peft_course_model(c, 4, dropout, torch.bfloat16 if autocast else torch.float32)
    assert pm.get_nb_trainable_parameters()[0] == ft.adapter_count()
    lg = ft.ledger("cpu" if autocast else None, "none")
    # the dropout's input is the adapter's float32 copy of x
    assert _measured(pm, c, autocast) == _expected(lg, "fp32")
    names = {a.name for a in lg.activations if a.saved}
    assert any(n.endswith("LoRA A output") for n in names)


def test_peft_step_state_bytes_equal_the_plan():
    """Parameters (frozen bf16 base, fp32 adapters), gradients (adapters only) and AdamW's
    state after one real step of torch.optim.AdamW over the trainable parameters."""
    c = variant("gqa")
    pm, ft = _peft_course_model(c, 8, 0.0, torch.bfloat16)
    ids, targets = batch(c)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = pm(ids)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                                 targets.reshape(-1))
    loss.backward()
    trained = [p for p in pm.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, foreach=True)
    opt.step()
    items = {i.name: i.bytes for i in MemoryModel(c, PRECISIONS["bf16-mixed"], finetune=ft)
             .at(B, T).items}
    frozen = sum(p.nbytes for p in pm.parameters() if not p.requires_grad)
    assert all(p.dtype == torch.bfloat16 for p in pm.parameters() if not p.requires_grad)
    assert all(p.dtype == torch.float32 for p in trained)  # autocast_adapter_dtype
    assert items["base parameters (frozen, bf16)"] == frozen
    assert items["LoRA adapters (fp32, trainable)"] == sum(p.nbytes for p in trained)
    assert items["gradients of the adapters (fp32)"] == sum(p.grad.nbytes for p in trained)
    assert not any(p.grad is not None for p in pm.parameters() if not p.requires_grad)
    state = [s for st in opt.state.values() for s in (st["exp_avg"], st["exp_avg_sq"])]
    assert (items["AdamW first moment m of the adapters (fp32)"]
            + items["AdamW second moment v of the adapters (fp32)"]) == sum(s.nbytes for s in state)
    assert len(opt.state) == len(trained)


def test_qlora_nf4_item_equals_the_bytes_bitsandbytes_allocates():
    bnb = pytest.importorskip("bitsandbytes")
    data = DENSE["llama"]
    h = translate(data, "t", "llama")
    m = _hf_model(data)
    for dq in (True, False):
        ft = resolve(h.config, LoRA(rank=8), h.type.module_names(h.data), "cuda", "nf4", dq)
        measured = 0
        for name, mod in m.named_modules():
            # transformers' bnb quantizer: every nn.Linear but the output embeddings
            if isinstance(mod, torch.nn.Linear) and mod is not m.get_output_embeddings():
                p = bnb.nn.Params4bit(mod.weight.data.to(torch.bfloat16), requires_grad=False,
                                      quant_type="nf4", compress_statistics=dq)._quantize("cpu")
                qs = p.quant_state
                ts = [p.data, qs.absmax, qs.code] + ([qs.offset, qs.state2.absmax, qs.state2.code]
                                                     if dq else [])
                measured += sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                                 for t in ts}.values())
        model = MemoryModel(h.config, PRECISIONS["bf16-mixed"], finetune=ft)
        items = {i.name: i.bytes for i in model.at(1, 8).items}
        item = next(k for k in items if "nf4" in k)
        assert items[item] == measured == sum(ft.nf4_bytes().values())


def test_cli_lora_and_qlora_json(capsys):
    base = ("plan", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--ctx", "8192",
            "--precision", "bf16-mixed", "--attention", "sdpa", "--format", "json")
    code, out, err = run(capsys, *base, "--lora-rank", "16", "--lora-targets", "all-linear")
    assert code == 0, err
    lora = json.loads(out)
    assert lora["parameters"]["trainable"] == 41_943_040
    names = [i["name"] for i in lora["training_memory"]["items"]]
    assert any("optimizer state" in n or "moment" in n for n in names)
    code, out, err = run(capsys, *base, "--lora-rank", "16", "--base-weights", "nf4")
    assert code == 0, err
    q = json.loads(out)
    nf4 = [i for i in q["training_memory"]["items"] if "nf4" in i["name"]]
    assert len(nf4) == 1 and nf4[0]["bytes"] == sum(q["finetune"]["nf4_bytes"].values())
    # 6,979,321,856 4-bit weights: packed halves, one uint8 absmax per 64
    assert q["finetune"]["nf4_bytes"]["packed weight"] == 6_979_321_856 // 2
    assert q["peak"]["peak_bytes"] < lora["peak"]["peak_bytes"]
    # torchao's layout of the same weights: n/2 packed, an int8 scale per 64, a bf16 factor
    # per 64·256, and per layer a bf16 mean and the 16 bf16 NF4 values (224 weights)
    ao = q["finetune"]["nf4_bytes_torchao_layout"]
    n = 6_979_321_856
    assert sum(ao.values()) == n // 2 + n // 64 + n // 64 // 256 * 2 + 224 * (2 + 32)
    code, out, err = run(capsys, *base, "--lora-rank", "16", "--base-weights", "nf4",
                         "--no-double-quant")
    assert json.loads(out)["finetune"]["nf4_bytes"]["absmax"] == 6_979_321_856 // 64 * 4


@pytest.mark.parametrize("argv,expected", [
    (("--lora-rank", "0"), "positive integer"),
    (("--lora-rank", "-3"), "positive integer"),
    (("--lora-rank", "8", "--lora-targets", "qproj"), "valid names: q_proj"),
    (("--base-weights", "nf4"), "--lora-rank"),
    # an HF input plans bf16-mixed by default (the recipe); fp32 named is refused
    (("--lora-rank", "8", "--base-weights", "nf4", "--precision", "fp32"), "--precision bf16-mixed"),
    (("--lora-rank", "8", "--precision", "bf16"), "fp32 or bf16-mixed"),
    (("--lora-alpha", "16"), "--lora-rank"),
    (("--lora-rank", "8", "--lora-dropout", "1"), "[0, 1)"),
    # LoRA on many GPUs: DP, TP and PP (tests/test_lora_gpus.py, test_lora_tp_qlora.py plan
    # them); not context parallelism, nor QLoRA with TP
    (("--lora-rank", "8", "--gpus", "8", "--cp", "2", "--attention", "sdpa"), "--cp"),
    (("--lora-rank", "8", "--base-weights", "nf4", "--precision", "bf16-mixed", "--gpus", "8",
      "--tp", "2"), "under DDP or FSDP2"),
])
def test_bad_fine_tuning_input_is_one_line(capsys, argv, expected):
    refused_in_one_line(capsys, "plan", "meta-llama/Llama-3.1-8B", *argv, expected=expected)


def test_mixture_of_experts_all_linear_and_experts_refused(capsys):
    h = translate(MOE["mixtral"], "t", "mixtral")
    from accounting.runtime.errors import UsageError
    with pytest.raises(UsageError, match="mixture of experts"):
        resolve(h.config, LoRA(rank=8), h.type.module_names(h.data))
    with pytest.raises(UsageError, match="valid names"):
        resolve(h.config, LoRA(rank=8, targets=("experts",)), h.type.module_names(h.data))


def test_qlora_quantizes_every_linear_but_the_head_and_refuses_other_formats():
    from accounting.runtime.errors import UsageError
    c = variant("cs336")
    ft = resolve(c, LoRA(rank=2), None, "cuda", "nf4")
    # the course model's linears: Q, K, V, output, W1, W2, W3 per block; not the LM head
    assert sorted(p.name for p in ft.quantized()) == sorted(
        f"layers.{{i}}.{m}.weight" for m in ("attn.q_proj", "attn.k_proj", "attn.v_proj",
                                             "attn.output_proj", "ffn.w1", "ffn.w2", "ffn.w3"))
    with pytest.raises(UsageError):
        resolve(c, LoRA(rank=2), None, "cuda", "int4")


@pytest.mark.parametrize("name", ("cs336", "gqa", "gpt2"))
def test_peft_step_flops_equal_flop_counter_mode(name):
    """FlopCounterMode on a real PEFT step: forward and backward matmul FLOPs equal the LoRA
    ledger's (the frozen weights' gradient matmuls are not run)."""
    from torch.utils.flop_counter import FlopCounterMode
    from accounting.planning.finetune import flops_exprs
    c = variant(name)
    pm, ft = _peft_course_model(c, 4, 0.0, torch.float32)
    ids, targets = batch(c)
    with FlopCounterMode(display=False) as fwd_counter:
        logits = pm(ids)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 targets.reshape(-1))
    with FlopCounterMode(display=False) as bwd_counter:
        loss.backward()
    fwd, bwd, _ = flops_exprs(ft)
    v = ft.ledger(None, "none").values(T, B)
    assert fwd.evaluate(v) == fwd_counter.get_total_flops()
    assert bwd.evaluate(v) == bwd_counter.get_total_flops()
    # without LoRA the backward would be twice the forward; the frozen dW are skipped
    assert bwd.evaluate(v) < 2 * fwd.evaluate(v)


class _Logits(torch.nn.Module):
    """transformers' model returning its logits (what saved_by_module runs)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids):
        return self.m(input_ids=ids).logits


@pytest.mark.parametrize("name,dropout", [("llama", 0.0), ("llama", 0.1), ("qwen2", 0.0),
                                          ("mistral", 0.1)])
@pytest.mark.parametrize("base", ("fp32", "bf16"))
def test_transformers_peft_step_lora_saves_equal_the_ledger(name, dropout, base):
    """On transformers' own model wrapped by PEFT (one real step, no autocast; the base in
    fp32, or in bf16 as the config's torch_dtype builds it): what the LoRA modules
    (lora_dropout, lora_A, lora_B) save, layer by layer, equals the ledger's LoRA records
    (mapped by transformers' module names). With a bf16 base each LoRA layer saves its own
    float32 copy of the input (PEFT's _cast_input_dtype to the fp32 adapter)."""
    data = DENSE[name]
    h = translate(data, "t", name)
    names = h.type.module_names(h.data)
    ft = resolve(h.config, LoRA(rank=4, dropout=dropout), names)
    torch.manual_seed(0)
    m = _hf_model(data).to(torch.float32 if base == "fp32" else torch.bfloat16)
    pm = peft.get_peft_model(m, peft.LoraConfig(r=4, target_modules="all-linear",
                                                lora_dropout=dropout))
    m.enable_input_require_grads()
    measured = {}
    theirs = {v: k for k, v in names.block.items()}
    for k, v in saved_by_module(_Logits(pm), *batch(h.config), autocast=False).items():
        k = k.replace(".default", "")
        if ".lora_" not in k:
            continue
        path = k.split(".layers.", 1)[1].split(".", 1)[1]  # in the block
        module, _, lora = path.rpartition(".")
        measured.setdefault(f"{theirs[module]}.{lora}", Counter()).update(v)
    lg = ledger(h.config, None, "none", param_dtype=base, adapters=ft.adapters)
    expected = {k: c for k, c in _expected(lg, "fp32").items() if ".lora_" in k}
    if base == "fp32" and dropout == 0:
        # lora_A's input is then the base model's own tensor (the layer's input, no copy),
        # which an op of the base may save first: which one is the implementation's
        # (transformers' SDPA output is o_proj's input as a view), not LoRA's
        measured = {k: c for k, c in measured.items() if not k.endswith("lora_A")}
        expected = {k: c for k, c in expected.items() if not k.endswith("lora_A")}
    assert measured == expected and expected


@pytest.mark.parametrize("recompute", ("none", "full", "selective"))
@pytest.mark.parametrize("name,attention,autocast", [("cs336", "naive", False),
                                                     ("gqa", "sdpa", True), ("gpt2", "naive", True)])
def test_peft_step_with_recomputation_keeps_what_the_lora_ledger_keeps(recompute, name,
                                                                       attention, autocast):
    """The PEFT-wrapped course model, with torch.utils.checkpoint or without: the storages
    alive at the end of the forward pass equal what the LoRA ledger keeps (the embedding's
    leaf that enable_input_require_grads makes included), and FlopCounterMode's backward
    count is the LoRA backward plus the recomputed matmuls (adapters' included)."""
    from torch.utils.flop_counter import FlopCounterMode
    from accounting.crosscheck.fused import register_flop_formulas
    from accounting.planning.finetune import step_flops
    from test_memory_reality import LiveStorages
    c = replace(variant(name), attention=attention)
    torch.manual_seed(0)
    base = torch.bfloat16 if autocast else torch.float32
    m = TransformerLM.from_config(c).set_recompute(recompute)
    for p in m.parameters():
        p.data = p.data.to(base)
    ft = resolve(c, LoRA(rank=4), None, "cpu" if autocast else None)
    cfg = peft.LoraConfig(r=4, target_modules=sorted({x.name for x in ft.targets}))
    cfg._register_custom_module({ML.Linear: peft.tuners.lora.layer.Linear})
    pm = peft.get_peft_model(m, cfg)
    m.token_embeddings.register_forward_hook(lambda mod, i, o: o.requires_grad_(True))
    ids, targets = batch(c)
    register_flop_formulas()
    with FlopCounterMode(display=False) as fwd_count:
        with LiveStorages([*pm.parameters(), *pm.buffers(), ids, targets]) as live:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                logits = pm(ids)
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, c.vocab_size),
                                                         targets.reshape(-1))
            del logits
            kept = Counter((n, dtype) for n, dtype in live.live.values())
    kept[(4, torch.float32)] -= 1  # the loss itself, held by this test
    lg = ft.ledger("cpu" if autocast else None, recompute)
    v = lg.values(T, B)
    expected = Counter()
    for a in lg.activations:
        if a.saved and a.name not in ("token ids", "targets"):
            dtype, size = DTYPE[a.dtype]
            expected[(size * a.elements.evaluate(v) // a.copies, dtype)] += a.copies * a.count(v)
    assert +kept == +expected
    with FlopCounterMode(display=False) as bwd_count:
        loss.backward()
    s = step_flops(ft, T, B, recompute)
    assert fwd_count.get_total_flops() == s.forward
    assert bwd_count.get_total_flops() == s.backward + s.recompute
    assert (s.recompute > 0) == (recompute != "none")
