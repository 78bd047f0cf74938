"""Issue 42, Must 5: a plan as the settings that launch it, each parsed by the stack's own
parser or schema where that runs on the CPU:

- DeepSpeed: deepspeed.runtime.config.DeepSpeedConfig (0.19.8) checks the batch triple
  against the data-parallel world size (its _batch_assertion) and the ZeRO stage;
- accelerate: ClusterConfig.from_yaml_file (unknown keys refused) and `accelerate launch`'s
  own parser for the fsdp_* options and their choices;
- torchtitan: tomllib, and every key against torchtitan/config/job_config.py's dataclass
  fields at commit 6404b932 (written out below, read from the source);
- Megatron-LM: every option against NVIDIA/Megatron-LM at d98e8a6 (2026-08-22): those
  megatron/training/arguments.py declares with add_argument, and those its
  ArgumentGroupFactory derives from the config dataclasses' fields (argument_utils.py
  _format_arg_name: '--' + name with '-' for '_'; add_bias_linear declares
  --disable-bias-linear itself). Its parser cannot be built here (megatron.core imports
  triton).
"""
from __future__ import annotations

import json
import tomllib
from unittest import mock

import pytest

from tests.cli_run import refused_in_one_line, run

LLAMA8 = ("plan", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--ctx", "8192",
          "--recompute", "full", "--precision", "bf16-mixed", "--tokens", "1000000000")

# torchtitan/config/job_config.py @ 6404b932: the sections' fields the emitter may write
TORCHTITAN = {
    "model": {"name", "flavor", "tokenizer_path", "converters", "print_after_conversion"},
    "training": {"dataset", "dataset_path", "local_batch_size", "global_batch_size", "seq_len",
                 "max_norm", "steps", "enable_cpu_offload", "mixed_precision_param",
                 "mixed_precision_reduce", "compile", "gc_freq", "gc_debug", "seed",
                 "deterministic"},
    "parallelism": {"data_parallel_replicate_degree", "enable_compiled_autograd",
                    "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "disable_loss_parallel",
                    "enable_async_tensor_parallel", "pipeline_parallel_degree",
                    "pipeline_parallel_split_points", "module_fqns_per_model_part",
                    "pipeline_parallel_first_stage_less_layers",
                    "pipeline_parallel_last_stage_less_layers",
                    "pipeline_parallel_layers_per_stage", "pipeline_parallel_schedule",
                    "pipeline_parallel_schedule_csv", "pipeline_parallel_microbatch_size",
                    "context_parallel_degree", "context_parallel_rotate_method",
                    "expert_parallel_degree"},
    "activation_checkpoint": {"mode", "selective_ac_option",
                              "per_op_sac_force_recompute_mm_shapes_by_fqns"},
}
# Megatron-LM @ d98e8a6: arguments.py's add_argument options, and the dataclass-derived ones
# (model_parallel_config.py, transformer_config.py, training/config/training_config.py)
MEGATRON = {
    # arguments.py
    "--swiglu", "--position-embedding-type", "--rotary-base", "--max-position-embeddings",
    "--untie-embeddings-and-output-weights", "--group-query-attention",
    "--use-distributed-optimizer", "--seq-length", "--num-layers-per-virtual-pipeline-stage",
    # ModelParallelConfig
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
    "--expert-model-parallel-size", "--sequence-parallel", "--bf16",
    # TrainingConfig
    "--micro-batch-size", "--global-batch-size", "--train-iters",
    # TransformerConfig
    "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--num-layers",
    "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--num-query-groups",
    "--kv-channels", "--normalization", "--disable-bias-linear",
}


def _emit(capsys, *argv) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    return out


def test_deepspeed_config_is_read_by_deepspeed(capsys):
    ds_config = pytest.importorskip("deepspeed.runtime.config")
    capsys.readouterr()  # DeepSpeed's import logs to stdout
    out = _emit(capsys, *LLAMA8, "--gpus", "16", "--batch", "64", "--zero", "3",
                "--emit", "deepspeed")
    cfg = json.loads(out)
    # DeepSpeed reads its data-parallel world size from torch.distributed: 16 ranks here
    with mock.patch.object(ds_config.dist, "get_rank", return_value=0), \
            mock.patch.object(ds_config.dist, "get_world_size", return_value=16):
        ds = ds_config.DeepSpeedConfig(cfg)
    # 64 sequences = 1 per GPU × 4 accumulation steps × 16 ranks
    assert (ds.train_batch_size, ds.train_micro_batch_size_per_gpu,
            ds.gradient_accumulation_steps) == (64, 1, 4)
    assert ds.zero_optimization_stage == 3 and ds.bfloat16_config.enabled
    with mock.patch.object(ds_config.dist, "get_rank", return_value=0), \
            mock.patch.object(ds_config.dist, "get_world_size", return_value=8):
        with pytest.raises(AssertionError):  # the same file on 8 ranks: DeepSpeed refuses it
            ds_config.DeepSpeedConfig(cfg)


def test_torchtitan_toml_names_torchtitans_fields(capsys):
    out = _emit(capsys, *LLAMA8, "--gpus", "16", "--tp", "2", "--batch", "64", "--zero", "3",
                "--emit", "torchtitan")
    cfg = tomllib.loads(out)
    for section, keys in cfg.items():
        assert set(keys) <= TORCHTITAN[section], (section, set(keys) - TORCHTITAN[section])
    p, t = cfg["parallelism"], cfg["training"]
    # 16 GPUs = FSDP 8 × TP 2; torchtitan's local batch is the per-DP-rank batch
    assert p["data_parallel_shard_degree"] * p["tensor_parallel_degree"] == 16
    assert (p["data_parallel_shard_degree"], p["data_parallel_replicate_degree"]) == (8, 1)
    assert t["global_batch_size"] == 64 == t["local_batch_size"] * 8
    assert t["seq_len"] == 8192 and cfg["activation_checkpoint"]["mode"] == "full"
    assert t["steps"] == -(-10**9 // (64 * 8192))  # whole steps covering 10^9 tokens


def test_accelerate_config_is_read_by_accelerate(tmp_path, capsys):
    config_args = pytest.importorskip("accelerate.commands.config.config_args")
    from accelerate.commands.launch import launch_command_parser
    capsys.readouterr()
    out = _emit(capsys, *LLAMA8, "--gpus", "16", "--batch", "64", "--zero", "2",
                "--emit", "accelerate")
    path = tmp_path / "fsdp.yaml"
    path.write_text(out)
    cc = config_args.ClusterConfig.from_yaml_file(str(path))
    assert (cc.distributed_type, cc.num_processes, cc.num_machines) == ("FSDP", 16, 2)
    launch = {a.dest: a for a in launch_command_parser()._actions}
    for key, value in cc.fsdp_config.items():
        assert key in launch, key
        if launch[key].choices:
            assert value in launch[key].choices, (key, value)
    assert cc.fsdp_config["fsdp_sharding_strategy"] == "SHARD_GRAD_OP"  # ZeRO-2


def test_megatron_arguments_are_megatrons(capsys):
    out = _emit(capsys, *LLAMA8, "--gpus", "16", "--tp", "4", "--pp", "2", "--sp",
                "--batch", "64", "--zero", "1", "--emit", "megatron")
    words = out.replace("\\\n", " ").split()
    flags = [w for w in words if w.startswith("--")]
    assert set(flags) <= MEGATRON, set(flags) - MEGATRON
    args = dict(zip(words, words[1:]))
    assert (args["--tensor-model-parallel-size"], args["--pipeline-model-parallel-size"]) == ("4", "2")
    # Llama 3.1 8B's config.json: 32 layers, 4,096 wide, MLP 14,336, 32 heads, 8 KV heads
    assert (args["--num-layers"], args["--hidden-size"], args["--ffn-hidden-size"],
            args["--num-query-groups"]) == ("32", "4096", "14336", "8")
    assert "--sequence-parallel" in flags and "--use-distributed-optimizer" in flags


def test_a_layout_a_stack_cannot_express_is_one_line(capsys):
    refused_in_one_line(capsys, *LLAMA8, "--gpus", "16", "--tp", "2", "--emit", "deepspeed",
                        expected="DeepSpeed's config holds data parallelism")
    refused_in_one_line(capsys, *LLAMA8, "--gpus", "16", "--zero", "3", "--emit", "megatron",
                        expected="ZeRO-1")
    refused_in_one_line(capsys, *LLAMA8, "--emit", "torchtitan", expected="give --gpus N")
