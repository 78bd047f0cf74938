"""`serve`'s bounds as the engine has them (issue 45): a model that keeps nothing per
sequence is bounded by max_num_seqs, not told it does not fit; a context past the model's
derived maximum is refused as vLLM refuses it (vllm/config/model.py,
_get_and_verify_max_len) unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; a prompt longer than the
context is refused (vLLM's input processor). Each test failed before the fix: "fits: NO …
at most 0 sequences" beside "longest context: 1,000,000,000 tokens"; "fits: yes" at
2,000,000 tokens on a 1,024-token model; a 200,000-token TTFT at --ctx 1000."""
from __future__ import annotations

import json

import pytest
from cli_run import refused_in_one_line, run

from accounting.serving.max_len import derived_max_len

NEMOTRON_H = {"model_type": "nemotron_h", "vocab_size": 96, "hidden_size": 32,
              "intermediate_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 8, "hybrid_override_pattern": "---",
              "mamba_num_heads": 4, "mamba_head_dim": 8, "ssm_state_size": 4, "n_groups": 2,
              "conv_kernel": 4, "chunk_size": 8}


def _json(capsys, *argv) -> dict:
    code, out, err = run(capsys, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("source", ["nemotron_h ---", "--layer-types mlp,mlp"])
def test_a_model_without_any_cache_fits_up_to_max_num_seqs(capsys, tmp_path, source):
    if source.startswith("nemotron"):
        path = tmp_path / "config.json"
        path.write_text(json.dumps(NEMOTRON_H))
        model = ["--config", str(path)]
    else:
        model = ["gpt2-small", "--num-layers", "2", "--layer-types", "mlp,mlp", "--block",
                 "single"]
    d = _json(capsys, "serve", *model, "--gpu", "H100", "--max-num-seqs", "10")
    # nothing per token, nothing per sequence: the pool bounds no count; the scheduler runs
    # at most max_num_seqs (vLLM's SchedulerConfig) whatever the length
    assert d["kv_bytes_per_token_per_gpu"] == 0 and d["state_bytes_per_sequence_per_gpu"] == 0
    assert d["fits"] is True and d["max_concurrency"] == 10
    code, out, _ = run(capsys, "serve", *model, "--gpu", "H100")
    assert code == 0 and "fits:            yes: no layer keeps a KV cache" in out
    assert "at most 0" not in out and "1,000,000,000" not in out


@pytest.mark.parametrize("engine,setting", [("vllm", "max_num_seqs"),
                                            ("sglang", "max_running_requests")])
def test_the_cacheless_bound_names_the_engines_own_setting(capsys, engine, setting):
    """The line names the scheduler cap by the engine's spelling (vLLM's
    vllm/config/scheduler.py SchedulerConfig.max_num_seqs; SGLang's
    python/sglang/srt/server_args.py ServerArgs.max_running_requests), read from the
    engine's record (issue 38: no module tests an engine's name)."""
    code, out, _ = run(capsys, "serve", "gpt2-small", "--num-layers", "2", "--layer-types",
                       "mlp,mlp", "--block", "single", "--gpu", "H100", "--engine", engine)
    fits = next(line for line in out.splitlines() if line.startswith("fits:"))
    assert code == 0 and f"({setting})" in fits


def test_a_pipeline_stage_without_a_cache_does_not_bind(capsys, tmp_path):
    # "*--" on PP 3: stage 0 holds the one attention layer, stages 1 and 2 MLPs only. By
    # hand: K and V of 2 heads of 8 in bf16 = 2·2·8·2 = 64 bytes a token; a 4,096-token
    # sequence is 256 blocks of 16, 262,144 bytes: the count is stage 0's pool over that
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**NEMOTRON_H, "hybrid_override_pattern": "*--"}))
    d = _json(capsys, "serve", "--config", str(path), "--gpu", "H100", "--pp", "3",
              "--ctx", "4096")
    assert d["kv_bytes_per_token_per_gpu"] == 64
    assert d["fits"] is True
    assert d["max_concurrency"] == d["kv_pool_bytes_per_gpu"] // (4096 * 64) > 0


def test_a_context_past_the_models_is_refused_as_vllm_refuses_it(capsys, monkeypatch):
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    refused_in_one_line(capsys, "serve", "gpt2-small", "--gpu", "H100", "--ctx", "2000000",
                        expected="VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    refused_in_one_line(capsys, "serve", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--ctx",
                        "131073", expected="131,072-token context")
    # a learned position table: no switch makes it longer (out of bounds, vLLM's words)
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    refused_in_one_line(capsys, "serve", "openai-community/gpt2", "--gpu", "H100", "--ctx",
                        "2000000", expected="learned position table (1,024 positions)")
    # with the switch vLLM starts a RoPE model past its length, and so does the plan, saying so
    code, out, err = run(capsys, "serve", "gpt2-small", "--gpu", "H100", "--ctx", "2000000")
    assert code == 0 and "only because VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set" in out
    # SGLang's own switch
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN")
    refused_in_one_line(capsys, "serve", "gpt2-small", "--gpu", "H100", "--ctx", "2000000",
                        "--engine", "sglang",
                        expected="SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")


def test_a_prompt_longer_than_the_context_is_refused(capsys):
    refused_in_one_line(capsys, "serve", "gpt2-small", "--gpu", "H100", "--ctx", "1000",
                        "--prompt", "200000", expected="--prompt 200,000 is longer than --ctx")
    code, out, _ = run(capsys, "serve", "gpt2-small", "--gpu", "H100", "--ctx", "1000",
                       "--prompt", "1000")
    assert code == 0


@pytest.mark.parametrize("data,expected", [
    # vLLM's rules, by hand from _get_and_verify_max_len: yarn scales its original length
    ({"model_type": "qwen2", "rope_scaling": {"type": "yarn", "factor": 4.0,
                                              "original_max_position_embeddings": 32768}},
     131072),
    # llama3's table is already long: no factor (Llama 3.1's 131,072)
    ({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 32768),
    ({"model_type": "llama", "rope_scaling": {"rope_type": "linear", "factor": 2.0}}, 65536),
    # Gemma 3's max_position_embeddings is already scaled
    ({"model_type": "gemma3_text", "rope_scaling": {"rope_type": "linear", "factor": 8.0}},
     32768),
    # transformers 5's rope_parameters per layer type
    ({"model_type": "x", "rope_parameters": {"full_attention": {"rope_type": "dynamic",
                                                                "factor": 2.0}}}, 65536),
    ({"model_type": "cohere", "model_max_length": 131072}, 131072),
    (None, 32768),
])
def test_the_derived_maximum_is_vllms(data, expected):
    assert derived_max_len(32768, data) == expected
