"""`plan … --stack megatron --precision fp8-te` (Megatron-Core's --fp8-format hybrid through
Transformer Engine) against hand algebra of what TE's modules save and keep, read from TE's
source (it needs a GPU; not run here):

  * LayerNormLinear (linear_qkv, linear_fc1; transformer_engine/pytorch/module/
    layernorm_linear.py, the forward's "Prepare backward state"): saves the norm's input
    (inputmat), mu and rsigma, and ln_out quantized to fp8 by input_quantizer (1 byte an
    element: under sequence parallelism the local shard, rowwise data only, all-gathered
    again in the backward pass, ln_out_needs_gather; without it the columnwise copy only,
    ln_out.update_usage(rowwise_usage=False)). One LayerNormLinear per fused GEMM: Q, K and
    V read one fp8 ln_out, as do SwiGLU's gate and up.
  * te.Linear (linear_proj, linear_fc2; module/linear.py): its input in fp8, 1 byte.
  * The attention core and the fused activations stay bf16 (TE's DotProductAttention and
    Megatron's fused bias-GeLU/SwiGLU save what they save in bf16).
  * Model state: fp8 weight and transpose copies (2 bytes per TP-local linear weight
    element) and DelayedScaling's 20,500 bytes per weight (planning/fp8.py's count);
    current scaling (fp8-te-current) keeps no amax history.
The bf16 numbers are Korthikanti et al. 2022's (arXiv:2205.05198, Table 2), typed here.
"""
from fractions import Fraction

import pytest

from accounting.planning.memory import PRECISIONS
from accounting.planning.parallel import Layout, parallel_plan
from accounting.planning.parallel.stack_memory import StackRun
from accounting.planning.parallel.stacks import get_stack
from accounting.architecture.config import ModelConfig
from tests.cli_run import refused_in_one_line, run

S, T = 1024, 4  # sequence length, TP degree (sequence parallel on)
# GPT-3-like: LayerNorm, GELU MLP of 4h, biases, learned positions, tied embedding
H, A = 1024, 16
GPT = ModelConfig(vocab_size=50257, context_length=S, num_layers=2, d_model=H, num_heads=A,
                  d_ff=4 * H, mlp="gelu", norm="layernorm", positions="learned", qkv_bias=True,
                  out_bias=True, mlp_bias=True, tie_embeddings=True, name="gpt-like")
# Llama-like: RMSNorm, SwiGLU, GQA (4 K/V heads), RoPE, no biases
G, DK, F = 4, 64, 2816
LLAMA = ModelConfig(vocab_size=32000, context_length=S, num_layers=2, d_model=H, num_heads=A,
                    num_kv_heads=G, d_ff=F, mlp="swiglu", norm="rmsnorm", positions="rope",
                    name="llama-like")


def plan(config, precision, dropout, kernel, recompute="none"):
    lo = Layout(T, tp=T, dp=1, sp=True, recompute=recompute, global_batch=1)
    return parallel_plan(config, lo, S, precision=PRECISIONS[precision],
                         stack=StackRun(get_stack("megatron"), dropout, kernel))


def test_gpt_like_layer_unfused_with_dropout():
    """Korthikanti's accounting (unfused attention, dropout on), TP + SP: bf16 sbh/t·(34 +
    5as/h) plus the LayerNorms' fp32 mu and rsigma (2 norms · 2 · 4 bytes · s/t). Under fp8
    four inputs drop from 2 bytes to 1: the QKV input (sbh), the projection input (sbh),
    the MLP input (sbh) and fc2's input (4sbh): 34 − 7 = 27."""
    s, b, h, a, t = S, 1, H, A, T
    stats = 2 * 2 * 4 * s * b // t
    bf16 = Fraction(s * b * h, t) * (34 + Fraction(5 * a * s, h)) + stats
    fp8 = Fraction(s * b * h, t) * (27 + Fraction(5 * a * s, h)) + stats
    assert plan(GPT, "bf16-mixed", 0.1, "unfused").per_layer_activation_bytes == bf16
    for p in ("fp8-te", "fp8-te-current"):
        assert plan(GPT, p, 0.1, "unfused").per_layer_activation_bytes == fp8


def test_gpt_like_layer_flash_no_dropout():
    """Flash attention, no dropout (Megatron-Core's default): the kernel keeps its bf16
    output O (2sbh/t) and the fp32 log-sum-exp (4·a/t·s); linear_proj saves its own fp8
    copy of O (sbh/t). Per layer on TP rank 0, in units of sbh/t: norm inputs 2 + 2, QKV
    input (fp8) 1, Q, K, V 2 + 2 + 2, O 2, proj input (fp8) 1, MLP input (fp8) 1, GELU
    input 8, fc2 input (fp8) 4 = 27."""
    s, h, a, t = S, H, A, T
    expected = s * h // t * 27 + 4 * (a // t) * s + 2 * 2 * 4 * s // t
    assert plan(GPT, "fp8-te", 0.0, "flash").per_layer_activation_bytes == expected
    # and bf16: O is the projection's input (one tensor, 2 bytes), QKV/MLP inputs 2, fc2's 8
    bf16 = s * h // t * (2 + 2 + 2 + 2 + 2 + 2 + 2 + 2 + 8 + 8) + 4 * (a // t) * s \
        + 2 * 2 * 4 * s // t
    assert plan(GPT, "bf16-mixed", 0.0, "flash").per_layer_activation_bytes == bf16


def test_llama_like_layer():
    """RMSNorm (1/σ only, fp32), fused RoPE (its frequencies are computed once per pass,
    not per layer), flash attention on Q, K, V after RoPE (GQA: K and V are g·d_k wide),
    SwiGLU saving both fc1 halves in bf16; fp8: one ln_out copy for Q, K, V and one for
    gate and up, the projection's and fc2's inputs. TP rank 0, sequence parallel."""
    s, h, t, kv = S, H, T, G * DK
    norms = 2 * (2 * s * h // t + 4 * s // t)  # inputs (bf16 shards) and 1/σ
    attn = s * h // t + 2 * s * h // t + 2 * 2 * s * kv // t + 2 * s * h // t \
        + 4 * (A // t) * s + s * h // t  # QKV in (fp8), Q, K and V, O, lse, proj in (fp8)
    mlp = s * h // t + 2 * 2 * s * F // t + s * F // t  # fc1 in (fp8), gate and up, fc2 in
    assert plan(LLAMA, "fp8-te", 0.0, "flash").per_layer_activation_bytes == norms + attn + mlp
    # bf16: the QKV and MLP inputs in 2 bytes, the projection reads O itself (saved once),
    # fc2's input in 2 bytes
    bf16_attn = 2 * s * h // t + 2 * s * h // t + 2 * 2 * s * kv // t + 2 * s * h // t \
        + 4 * (A // t) * s
    bf16_mlp = 2 * s * h // t + 2 * 2 * s * F // t + 2 * s * F // t
    assert plan(LLAMA, "bf16-mixed", 0.0, "flash").per_layer_activation_bytes \
        == norms + bf16_attn + bf16_mlp


@pytest.mark.parametrize("precision,delayed", [("fp8-te", True), ("fp8-te-current", False)])
def test_model_state(precision, delayed):
    """The fp8 plan's model state is the bf16 plan's plus 2 bytes per TP-local linear weight
    element (weight and transpose copies) and, with DelayedScaling, 20,500 bytes per weight
    ((3 + 2) tensors · (1 + 1024) · 4 bytes). Llama-like per layer on TP rank 0: Q and O
    h·h/t each, K and V h·g·d_k/t each, gate, up and down h·F/t each; the LM head (not a TE
    module in Megatron) and the embedding stay bf16."""
    h, t, kv, layers = H, T, G * DK, LLAMA.num_layers
    n_fp8 = layers * (2 * h * h + 2 * h * kv + 3 * h * F) // t
    fp8, bf16 = plan(LLAMA, precision, 0.0, "flash"), plan(LLAMA, "bf16-mixed", 0.0, "flash")
    assert fp8.model_states - bf16.model_states == 2 * n_fp8
    scaling = [i.bytes.c for i in fp8.stages[0].items if i.name.startswith("fp8 scaling")]
    # planning/fp8.py counts one te.Linear per weight (Q, K, V, O, gate, up, down: 7)
    assert scaling == ([20_500 * 7 * layers] if delayed else [])


def test_cli(capsys):
    """The CLI plans it (exit 0; the precision in the JSON, the step faster at H100's fp8
    peak), and refuses fp8 on a GPU without fp8 Tensor Cores (exit 2, one line)."""
    import json
    argv = ["plan", "meta-llama/Llama-3.2-1B", "--gpus", "8", "--tp", "8", "--sp", "--ctx",
            "2048", "--stack", "megatron", "--gpu", "H100-SXM", "--format", "json",
            "--mfu", "0.5", "--mfu-scope", "compute"]  # the fp8 peak at a given rate (issue 39)
    code, out, err = run(capsys, *argv, "--precision", "fp8-te")
    assert code == 0, err
    fp8 = json.loads(out)
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    bf16 = json.loads(out)
    assert fp8["precision"] == "fp8-te" and bf16["precision"] == "bf16-mixed"
    assert fp8["step_time"]["seconds"]["approx"] < bf16["step_time"]["seconds"]["approx"]
    refused_in_one_line(capsys, *argv[:-4], "--gpu", "A100-80GB", "--precision", "fp8-te",
                        expected="no fp8")


def test_gpt_like_selective_and_full_recompute():
    """Selective recomputation (Korthikanti's: the attention core recomputed) keeps the
    linear inputs' fp8 copies: sbh/t·27 (bf16 34) plus the norms' statistics; full
    recomputation keeps each block's bf16 input, 2sbh/t, either way."""
    s, h, t = S, H, T
    stats = 2 * 2 * 4 * s // t
    assert plan(GPT, "bf16-mixed", 0.1, "unfused", "selective").per_layer_activation_bytes \
        == 34 * s * h // t + stats
    assert plan(GPT, "fp8-te", 0.1, "unfused", "selective").per_layer_activation_bytes \
        == 27 * s * h // t + stats
    for p in ("bf16-mixed", "fp8-te"):
        assert plan(GPT, p, 0.1, "unfused", "full").per_layer_activation_bytes == 2 * s * h // t


def test_torch_stack_fp8_copies_split_over_tp():
    """The torch stack under TP (no SP): a row-parallel linear's fp8 input copy is this
    rank's h/t heads (the projection: s·h/t bytes) or d_ff/t columns (W2: s·F/t), as the
    bf16 tensor it copies; a column-parallel input (Q, K, V, W1, W3 read the whole
    replicated norm output) is s·h. (te.Linear per weight: three copies for Q, K, V.)"""
    lo = Layout(T, tp=T, dp=1, global_batch=1)
    rows = dict(parallel_plan(LLAMA, lo, S, precision=PRECISIONS["fp8-te"]).per_layer)
    assert rows["attention-weighted values, heads merged (fp8_e4m3 copy)"] == S * H // T
    assert rows["gated product (W2 input) (fp8_e4m3 copy)"] == S * F // T
    assert rows["ln1 output (fp8_e4m3 copy)"] == S * H
