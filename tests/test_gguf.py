"""Issue 42, Must 4: GGUF files read with llama.cpp's gguf package (header and tensor table,
never the data): the architecture mapped to the spec, exact bytes per tensor type.

The file is written here by gguf's own GGUFWriter: a tiny Llama (2 blocks, d 256, 4 heads,
2 KV heads, MLP 512, vocabulary 512) in a Q4_K_M-like mix. Expected bytes are ggml's block
structs written out by hand (llama.cpp ggml/src/ggml-common.h: block_q4_K = 2 fp16 + 12
scale bytes + 128 nibble bytes = 144 bytes per 256 elements; block_q6_K = 128 + 64 + 16 +
2 = 210 per 256; block_q8_0 = 2 + 32 = 34 per 32; F32 4 per element); names are llama.cpp's
literal tensor names (llama-arch.cpp LLM_TENSOR_NAMES)."""
from __future__ import annotations

import json

import pytest

from tests.cli_run import refused_in_one_line, run

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")
Q = gguf.GGMLQuantizationType
BYTES = {Q.Q4_K: (256, 2 * 2 + 12 + 128), Q.Q6_K: (256, 128 + 64 + 16 + 2),
         Q.Q8_0: (32, 2 + 32), Q.F32: (1, 4)}  # (elements, bytes) per block, ggml-common.h


def tensors(output: bool = True):
    out = [("token_embd.weight", (512, 256), Q.Q4_K)]
    for i in range(2):
        out += [(f"blk.{i}.attn_norm.weight", (256,), Q.F32),
                (f"blk.{i}.attn_q.weight", (256, 256), Q.Q4_K),
                (f"blk.{i}.attn_k.weight", (128, 256), Q.Q4_K),
                (f"blk.{i}.attn_v.weight", (128, 256), Q.Q6_K),
                (f"blk.{i}.attn_output.weight", (256, 256), Q.Q4_K),
                (f"blk.{i}.ffn_norm.weight", (256,), Q.F32),
                (f"blk.{i}.ffn_gate.weight", (512, 256), Q.Q4_K),
                (f"blk.{i}.ffn_up.weight", (512, 256), Q.Q4_K),
                (f"blk.{i}.ffn_down.weight", (256, 512), Q.Q6_K)]
    out.append(("output_norm.weight", (256,), Q.F32))
    if output:
        out.append(("output.weight", (512, 256), Q.Q8_0))
    return out


def write(path, table):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama")
    w.add_block_count(2)
    w.add_context_length(2048)
    w.add_embedding_length(256)
    w.add_feed_forward_length(512)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(512)
    for name, shape, q in table:
        if q == Q.F32:
            w.add_tensor(name, np.zeros(shape, np.float32))
        else:
            block, size = gguf.GGML_QUANT_SIZES[q]
            w.add_tensor(name, np.zeros((*shape[:-1], shape[-1] // block * size), np.uint8),
                         raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _bytes(table) -> int:
    total = 0
    for _, shape, q in table:
        n = 1
        for d in shape:
            n *= d
        block, size = BYTES[q]
        total += n // block * size
    return total


def test_a_gguf_file_is_the_spec_and_a_counter(tmp_path, capsys):
    f = write(tmp_path / "tiny.gguf", tensors())
    # by hand: token_embd 73,728; a block 376,064 (q 36,864, k 18,432, v 26,880, o 36,864,
    # gate 73,728, up 73,728, down 107,520, norms 2,048); output_norm 1,024; output 139,264
    assert _bytes(tensors()) == 73_728 + 2 * 376_064 + 1_024 + 139_264 == 966_144
    # parameters: 2·512·256 + 2·(256·256 + 2·128·256 + 256·256 + 3·256·512 + 2·256) + 256
    params = 2 * 512 * 256 + 2 * (2 * 256 * 256 + 2 * 128 * 256 + 3 * 256 * 512 + 2 * 256) + 256
    code, out, err = run(capsys, "--config", str(f), "--checkpoint", str(f), "--format", "json",
                         "--no-verify")
    assert code == 0, err
    d = json.loads(out)
    assert d["parameters"]["total"] == params == 1_443_072
    c = d["checkpoint"]
    assert (c["tensors"], c["parameters"], c["bytes"], c["agrees"]) == (21, params, 966_144, True)
    assert c["bytes_by_dtype"] == {"Q4_K": 73_728 + 2 * (36_864 + 18_432 + 36_864 + 2 * 73_728),
                                   "Q6_K": 2 * (26_880 + 107_520), "Q8_0": 139_264,
                                   "F32": 2 * 2_048 + 1_024}


def test_a_tied_gguf_and_a_missing_tensor(tmp_path, capsys):
    tied = write(tmp_path / "tied.gguf", tensors(output=False))
    code, out, err = run(capsys, "--config", str(tied), "--checkpoint", str(tied), "--brief")
    assert code == 0, err
    assert "checkpoint:    agrees: 20 tensors" in out
    short = write(tmp_path / "short.gguf",
                  [t for t in tensors() if t[0] != "blk.1.ffn_up.weight"])
    code, out, err = run(capsys, "--config", str(tied), "--checkpoint", str(short), "--brief")
    assert code == 1
    assert "blk.1.ffn_up.weight (512×256) is in the ledger, not in the checkpoint" in out


def test_serve_takes_the_gguf_bytes(tmp_path, capsys):
    f = write(tmp_path / "tiny.gguf", tensors())
    code, out, err = run(capsys, "serve", "--config", str(f), "--checkpoint", str(f), "--gpu",
                         "L4", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["stages"][0]["weights_bytes"] == 966_144


def test_not_a_gguf_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 20)
    refused_in_one_line(capsys, "--config", str(bad), "--brief", expected="bad.gguf")


def test_a_deep_folder_keeps_the_file_name_in_the_message(tmp_path, capsys):
    # regression: the path was cut at its end to 80 characters, so under a deep folder (a
    # long pytest tmp_path, a hub cache) the message lost the very name it was about
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    bad = deep / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 20)
    line = refused_in_one_line(capsys, "--config", str(bad), "--brief", expected="bad.gguf'")
    assert "'…" in line  # cut at the start, marked


def test_shorten_path_keeps_the_tail_within_the_limit():
    from accounting.runtime.errors import shorten_path
    assert shorten_path("/a/b.gguf") == "'/a/b.gguf'"
    long = "/" + "x" * 200 + "/model.gguf"
    shown = shorten_path(long, 40)
    # 40 characters: the opening quote, '…', then the last 38 of "'" + path + "'"
    assert len(shown) == 40 and shown == "'…" + ("x" * 200 + "/model.gguf'")[-38:]
