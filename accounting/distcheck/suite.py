"""The standard checks: which layouts run on torch.distributed here, on which engine.

Fake backend (one rank of 8 to 64; FakeTensorMode: nothing allocated): FSDP2 and DTensor
TP/SP on real presets (some with fewer layers of the same shape, to keep CI fast). gloo (4
real CPU processes, a tiny model): DDP, ZeroRedundancyOptimizer, FSDP2 × TP + SP on a 2 × 2
mesh, and a 4-stage 1F1B pipeline, even and uneven (6 layers: 1, 2, 2, 1).

Expert parallelism (parallelize.expert_parallel: model/moe.py's MoE with all_to_all_single
for dispatch and combine; FSDP2 as torchtitan, the experts over the dp/ep ranks holding
them): on the fake backend, where the router has no values and the slots are dealt to the
experts in turn (balanced routing, the plan's assumption), a Mixtral shape and a DeepSeek-V3
shape; on gloo a tiny MoE with a capacity factor (every expert runs C rows whatever the
routing, so every quantity is exact rank by rank). tests/test_expert_parallel.py adds a
dropless gloo run on a real routing, compared over each EP group.

Formula only (no engine runs it here): TP or PP combined with DDP or ZeRO-1, pipeline
parallelism combined with TP or FSDP, bf16 mixed precision, expert parallelism with DDP,
ZeRO-1 or pipelining.
"""
from __future__ import annotations

from accounting.distcheck.measure import Case
from accounting.planning.parallel.stacks import TORCHTITAN

FAKE = (
    Case({"preset": "openai-community/gpt2"}, 8, dp=8, zero=3, seq=32, micro_batches=1, rank=7,
         label="GPT-2 (tied, learned positions, biases) FSDP2 ZeRO-3, 8 ranks, last rank"),
    Case({"preset": "openai-community/gpt2", "num_layers": 2}, 8, dp=2, tp=4, sp=True, zero=2,
         seq=32, rank=5, label="GPT-2 shape, 2 layers: FSDP2 ZeRO-2 × TP 4 + SP, 8 ranks"),
    Case({"preset": "meta-llama/Llama-3.2-1B"}, 64, dp=8, tp=8, sp=True, zero=3, seq=32,
         micro_batches=1, rank=9, label="Llama 3.2 1B: FSDP2 ZeRO-3 × TP 8 + SP, 64 ranks"),
    Case({"preset": "gpt2-small", "num_layers": 2}, 12, tp=12, seq=32, rank=11,
         label="CS336 GPT-2 small shape, 2 layers: TP 12 (untied head), 12 ranks, last rank "
               "(the short end of the uneven vocabulary split)"),
    Case({"preset": "meta-llama/Llama-3.1-8B", "num_layers": 2}, 48, dp=48, zero=2, seq=32,
         rank=47, label="Llama 3.1 8B shape, 2 layers: FSDP2 ZeRO-2, 48 ranks, last rank"),
    # torchtitan's FSDP2: MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32); the
    # all-gathers move bf16, the reduce-scatters fp32, the shards stay fp32
    Case({"preset": "meta-llama/Llama-3.1-8B", "num_layers": 2}, 64, dp=64, zero=3, seq=32,
         micro_batches=1, rank=63, stack=TORCHTITAN,
         label="Llama 3.1 8B shape, 2 layers: torchtitan's FSDP2 (bf16 all-gathers), ZeRO-3, "
               "64 ranks, last rank"),
    Case({"preset": "mistralai/Mixtral-8x7B-v0.1", "num_layers": 2}, 16, dp=16, ep=4, zero=3,
         seq=32, micro_batches=1, rank=13,
         label="Mixtral 8x7B shape, 2 layers: EP 4 × FSDP2 ZeRO-3, 16 ranks (2 experts a rank, "
               "sharded on dim 1 over the 4 ranks holding them)"),
    # micro-batch 2: at B = 1 torch's einsum saves latent attention's V as a view of the whole
    # kv_b_proj output, which the ledger does not count (one GPU's B = 1 too; not EP's)
    # (its MTP module left out: model/ builds none, and the plan puts it on the last stage)
    Case({"preset": "deepseek-ai/DeepSeek-V3", "num_layers": 2, "dense_layers": [0],
          "mtp_layers": 0}, 8, dp=8,
         ep=8, zero=2, seq=32, micro_batch=2, micro_batches=1, rank=5,
         label="DeepSeek-V3 shape, a dense and an MoE layer: EP 8 = dp × FSDP2 ZeRO-2, 8 ranks "
               "(32 experts a rank, whole)"),
    # a parallel block with one shared norm (Falcon-7B's layout) and partial rotary: with SP
    # the norm's output is all-gathered, and saved, once for attn and once for ffn
    Case({"vocab_size": 1002, "context_length": 16, "num_layers": 2, "d_model": 32,
          "num_heads": 4, "d_ff": 96, "norm": "layernorm", "mlp": "gelu",
          "block": "parallel_shared_norm", "rotary_dim": 4, "name": "tiny-falcon"}, 8, dp=2,
         tp=4, sp=True, zero=2, seq=32, rank=5,
         label="Falcon-7B's block (one shared norm), partial rotary: FSDP2 ZeRO-2 × TP 4 + SP, "
               "8 ranks"),
)

TINY = {"vocab_size": 1002, "context_length": 16, "num_layers": 4, "d_model": 32,
        "num_heads": 4, "d_ff": 96, "num_kv_heads": 2, "name": "tiny"}
# A tiny mixture of experts: 2 layers of 4 experts (d_e 24), top-2, capacity factor 1.25.
TINY_MOE = {**TINY, "num_layers": 2, "num_experts": 4, "experts_per_token": 2, "moe_d_ff": 24,
            "moe_capacity_factor": 1.25, "name": "tiny-moe"}
GLOO = (
    Case(TINY, 4, dp=4, zero=0, label="DDP, 4 processes"),
    Case(TINY, 4, dp=4, zero=1, label="ZeroRedundancyOptimizer over DDP, 4 processes"),
    Case(TINY, 4, dp=2, tp=2, sp=True, zero=3, label="FSDP2 ZeRO-3 × TP 2 + SP, 4 processes"),
    Case(TINY, 4, pp=4, micro_batches=8, label="1F1B pipeline of 4 stages, 8 micro-batches, "
                                               "4 processes"),
    Case(TINY_MOE, 4, dp=4, ep=2, zero=3, label="EP 2 × FSDP2 ZeRO-3 of a tiny MoE (capacity "
                                                "factor 1.25), 4 processes"),
    Case({**TINY, "num_layers": 6, "name": "tiny-6"}, 4, pp=4, micro_batches=8,
         label="1F1B pipeline of 6 layers on 4 stages (uneven: 1, 2, 2, 1, Llama 3's rule), "
               "8 micro-batches, 4 processes"),
)
