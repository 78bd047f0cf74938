"""Issue 42, Must 4: `serve --engine llama.cpp`. Expected values: llama.cpp's rules at
3514e9f6 written out by hand (src/llama-context.cpp: n_ctx = GGML_PAD(n_ctx, 256); per
sequence GGML_PAD(n_ctx / n_seq_max, 256); src/llama-kv-cache.cpp: K and V of
n_embd_{k,v}_gqa × kv_size per layer in f16), on Llama 3.1 8B's published sizes (32 layers,
8 KV heads of 128) and on the GGUF file tests/test_gguf.py writes."""
from __future__ import annotations

import json

import pytest

from tests.cli_run import refused_in_one_line, run


def _json(capsys, *argv) -> dict:
    code, out, err = run(capsys, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_llama_31_8b_kv_cache_at_8192(capsys):
    d = _json(capsys, "serve", "meta-llama/Llama-3.1-8B", "--engine", "llama.cpp", "--gpu",
              "H100", "--ctx", "8192")
    # 8,192 cells × 32 layers × (K 8·128 + V 8·128) × 2 bytes = 1,073,741,824 = 1,024 MiB
    assert d["kv_cache_bytes"] == 8192 * 32 * 2 * 8 * 128 * 2 == 1024 * 2**20
    assert d["weights_bytes"] == 2 * 8_030_261_248  # bf16 without a GGUF
    assert (d["n_ctx"], d["n_ctx_seq"], d["fits"]) == (8192, 8192, True)


def test_the_context_is_padded_per_sequence_as_llama_cpp_does(capsys):
    d = _json(capsys, "serve", "meta-llama/Llama-3.1-8B", "--engine", "llama.cpp", "--gpu",
              "H100", "--ctx", "1000", "--concurrency", "3")
    # 1,000 -> 1,024; 1,024 // 3 = 341 -> 512 a sequence; n_ctx = 512 · 3 = 1,536
    assert (d["n_ctx"], d["n_ctx_seq"], d["n_seq_max"]) == (1536, 512, 3)
    assert d["kv_cache_bytes"] == 1536 * 32 * 2 * 1024 * 2


def test_the_gguf_weights_and_flags_it_does_not_take(tmp_path, capsys):
    from tests.test_gguf import tensors, write
    pytest.importorskip("gguf")
    f = write(tmp_path / "tiny.gguf", tensors())
    d = _json(capsys, "serve", "--config", str(f), "--checkpoint", str(f), "--engine",
              "llama.cpp", "--gpu", "L4", "--activation-peak", "100MiB")
    # the GGUF's 966,144 bytes (tests/test_gguf.py); 2,048 cells × 2 layers × (K 2·64 +
    # V 2·64: 2 KV heads of 256/4) elements × 2 bytes; the compute buffer as given
    assert d["weights_bytes"] == 966_144
    assert d["kv_cache_bytes"] == 2048 * 2 * (2 * 64 + 2 * 64) * 2
    assert d["total_bytes"] == 966_144 + 2048 * 2 * 256 * 2 + 100 * 2**20
    refused_in_one_line(capsys, "serve", "meta-llama/Llama-3.1-8B", "--engine", "llama.cpp",
                        "--gpu", "H100", "--tp", "2", expected="does not take it")
    refused_in_one_line(capsys, "serve", "mistralai/Mistral-7B-v0.1", "--engine", "llama.cpp",
                        "--gpu", "H100", expected="not modelled")
