"""LoRA with tensor and pipeline parallelism, and QLoRA under FSDP2 (issue 44; plan --gpus
with --lora-rank; planning/parallel/lora_states.py).

Expected values:
  * TP: PEFT's own adapters (inject_adapter_in_model on model.TransformerLM on the meta
    device) split by PEFT's rule for Megatron's parallel layers (peft 0.21.2,
    peft/tuners/lora/tp_layer.py LoraParallelLinear.update_layer: under a RowParallelLinear
    lora_A splits its d_in, lora_B whole; under a ColumnParallelLinear lora_B splits its
    d_out, lora_A whole), the row-parallel layers being Megatron-LM's (the output
    projection and W2); and the same count written out by hand;
  * QLoRA: bitsandbytes' 4-bit layout of a shard's rows written out by hand (packed codes,
    one absmax byte per 64 elements, fp32 nested absmax per 256 blocks, the 256-entry fp32
    nested code, an fp32 offset, the 16-entry fp32 code), and torchao's NF4Tensor itself,
    chunked along its rows on the CPU as FSDP2 shards it.
"""
import json
import subprocess
import sys

import pytest

from accounting.distcheck.compare import config_of
from accounting.planning.finetune import NF4_TORCHAO, LoRA, resolve
from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.lora_states import lora_states, nf4_shard_bytes
from accounting.planning.parallel.plan import parallel_plan
from accounting.planning.precisions import get_precision
from accounting.runtime.errors import UsageError

# d 96, h 4, d_ff 256, 2 blocks, V 1,024 (every linear's size a multiple of 64·256 elements:
# torchao's to_nf4 needs it)
MODEL = {"vocab_size": 1024, "context_length": 64, "num_layers": 2, "d_model": 96,
         "num_heads": 4, "d_ff": 256}
R, D, F, V, L = 6, 96, 256, 1024, 2


def _ft(base_weights=None):
    return resolve(config_of(MODEL), LoRA(rank=R), None, "cuda", base_weights)


def test_tp_adapters_per_rank_by_hand():
    # column-parallel q, k, v (96 -> 96/2), w1, w3 (96 -> 256/2): lora_A r×96 whole,
    # lora_B (out/2)×r; row-parallel output_proj (96/2 -> 96), w2 (256/2 -> 96): lora_A
    # r×(in/2), lora_B 96×r whole
    per_block = (3 * (R * D + D // 2 * R) + 2 * (R * D + F // 2 * R)
                 + (R * D // 2 + D * R) + (R * F // 2 + D * R))
    s = lora_states(_ft(), Layout(8, tp=2, dp=4, zero=0, global_batch=8))
    assert s.adapter_numel == L * per_block
    # the base: every linear halved, norms replicated, embedding and head split on V
    base = L * (4 * D * D // 2 + 3 * D * F // 2 + 2 * D) + 2 * V // 2 * D + D
    assert s.base_numel == base
    assert s.base_bytes == 2 * base  # bf16 under bf16-mixed


def test_tp_adapters_per_rank_equal_peft_split_by_its_megatron_rule():
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from accounting.distcheck.parallelize import apply_lora
    from model import TransformerLM
    with torch.device("meta"):
        lm = TransformerLM.from_config(config_of(MODEL))
    apply_lora(lm, R)
    row_parallel = ("output_proj", "w2")  # Megatron-LM's RowParallelLinear layers
    for tp in (2, 4):
        expected = 0
        for name, p in lm.named_parameters():
            if "lora_" not in name:
                continue
            base = name.split(".lora_")[0].rsplit(".", 1)[-1]
            rows, cols = p.shape
            if ".lora_A." in name and base in row_parallel:
                cols = -(-cols // tp)  # RowParallelLinear: rank 0's ⌈d_in/tp⌉
            elif ".lora_B." in name and base not in row_parallel:
                rows = -(-rows // tp)  # ColumnParallelLinear: rank 0's ⌈d_out/tp⌉
            expected += rows * cols
        s = lora_states(_ft(), Layout(8, tp=tp, dp=8 // tp, zero=0, global_batch=8))
        assert s.adapter_numel == expected, tp


def test_tp_lora_plans_no_embedding_gradient():
    """Regression: LoRA with --tp planned the full-table embedding gradient DTensor computes
    (4·(V − V/tp)·d bytes) for a frozen table, which has no gradient."""
    lo = Layout(8, tp=2, dp=4, zero=0, global_batch=8)
    s = parallel_plan(config_of(MODEL), lo, 16, precision=get_precision("bf16-mixed"),
                      finetune=_ft()).stages[0]
    assert not [i for i in s.items if i.name.startswith("embedding grad")]


def test_pp_stages_hold_their_blocks_adapters():
    lo = Layout(8, pp=2, dp=4, zero=3, global_batch=8)
    plan = parallel_plan(config_of(MODEL), lo, 16, precision=get_precision("bf16-mixed"),
                         finetune=_ft())
    assert len(plan.stages) == 2
    for s in plan.stages:
        items = {i.name: i.bytes.at(1) for i in s.items}
        # one block per stage: its 7 adapters' padded FSDP shards over 4 ranks, fp32
        c = lambda n: -(-n // 4)  # noqa: E731
        one_block = (3 * (c(R) * D + c(D) * R) + 2 * (c(R) * D + c(F) * R)
                     + (c(R) * D + c(D) * R) + (c(R) * F + c(D) * R))
        assert items["LoRA adapters (fp32, FSDP shards)"] == 4 * one_block


def _bnb_hand(rows, cols):
    n = rows * cols
    blocks = -(-n // 64)
    return -(-n // 2) + blocks + -(-blocks // 256) * 4 + 256 * 4 + 4 + 16 * 4


def test_qlora_fsdp_base_shard_by_hand():
    ft = _ft("nf4")
    d = 8
    s = lora_states(ft, Layout(8, dp=d, zero=3, global_batch=8))
    c = lambda n: -(-n // d)  # noqa: E731  FSDP2's padded rows
    # per block: q, k, v, o 96×96 and w1, w3 256×96, w2 96×256 in NF4 (a shard's rows);
    # two norm gains, the embedding, the LM head and the final norm in bf16
    nf4 = L * (4 * _bnb_hand(c(D), D) + 2 * _bnb_hand(c(F), D) + _bnb_hand(c(D), F))
    rest = L * 2 * c(D) + 2 * c(V) * D + c(D)
    assert s.base_bytes == nf4 + 2 * rest


def test_qlora_ddp_base_equals_the_one_gpu_nf4_bytes():
    ft = _ft("nf4")
    s = lora_states(ft, Layout(8, dp=8, zero=0, global_batch=8))
    rest = L * 2 * D + 2 * V * D + D
    assert s.base_bytes == sum(ft.nf4_bytes().values()) + 2 * rest


def test_torchao_nf4_shard_rule_equals_nf4tensor_chunked():
    """FSDP2 shards a parameter with torch.chunk on dim 0 (_fsdp_param.py); on an NF4Tensor
    that is torchao's nf4_split: each piece's quantized tensors are the rows' own."""
    torch = pytest.importorskip("torch")
    nf4 = pytest.importorskip("torchao.quantization.quantize_.workflows.nf4.nf4_tensor")
    from dataclasses import replace
    ft = replace(_ft("nf4"), nf4_layout=NF4_TORCHAO)
    rows, cols, d = 1024, 256, 8
    w = nf4.to_nf4(torch.randn(rows, cols, dtype=torch.bfloat16))
    for piece in torch.chunk(w, d, dim=0):
        sharded = sum(t.numel() * t.element_size() for t in
                      (piece.quantized_data, piece.quantized_scalers, piece.quantization_factor))
        whole = sum(t.numel() * t.element_size() for t in (piece.scaler_mean, piece.nf4))
        assert nf4_shard_bytes(rows // d, cols, ft) == sharded + whole


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "accounting", "plan", "gpt2-small", "--gpus",
                           "8", "--lora-rank", "16", "--precision", "bf16-mixed", *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_qlora_under_fsdp_and_lora_with_tp_answer():
    run = _cli("--fsdp", "full_shard", "--base-weights", "nf4", "--format", "json")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "NF4" in json.dumps(json.loads(run.stdout))
    run = _cli("--tp", "2", "--format", "json")
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout)["memory_per_gpu_bytes"] > 0


def test_cli_refuses_qlora_with_tp_in_one_line():
    run = _cli("--tp", "2", "--base-weights", "nf4")
    assert run.returncode == 2 and "QLoRA" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    with pytest.raises(UsageError):
        lora_states(_ft("nf4"), Layout(8, pp=2, dp=4, zero=3, global_batch=8))


def test_qlora_fsdp_all_gathers_move_the_nf4_shards():
    ft = _ft("nf4")
    d, m = 8, 2
    lo = Layout(8, dp=d, zero=3, global_batch=16)  # 2 micro-batches of 1 per rank
    s = parallel_plan(config_of(MODEL), lo, 16, precision=get_precision("bf16-mixed"),
                      finetune=ft).stages[0]
    c = lambda n: -(-n // d)  # noqa: E731
    block = 4 * _bnb_hand(c(D), D) + 2 * _bnb_hand(c(F), D) + _bnb_hand(c(D), F) + 2 * 2 * c(D)
    root = 2 * (2 * c(V) * D) + 2 * c(D)  # embedding, LM head, final norm in bf16
    got = {}
    for x in s.collectives:
        if x.op == "all-gather":
            got[(x.what, x.phase)] = got.get((x.what, x.phase), 0) + x.bytes
    # the base's gathers (adapters' merged in: lora_states.collectives), forward pass
    blocks = next(v for (w, ph), v in got.items() if w.startswith("parameters of the blocks")
                  and ph == "forward")
    adapters = m * L * d * 4 * (3 * (c(R) * D + c(D) * R) + 2 * (c(R) * D + c(F) * R)
                                + (c(R) * D + c(D) * R) + (c(R) * F + c(D) * R))
    assert blocks == m * L * d * block + adapters
    roots = next(v for (w, ph), v in got.items() if w.startswith("parameters of the root")
                 and ph == "forward")
    assert roots == m * d * root
