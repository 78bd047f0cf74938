"""Issue 42, Must 2: a checkpoint's safetensors headers as a counter (--checkpoint).

Expected values: the tensors' names and shapes are transformers' (its model built on the
meta device from the published config.json: tests/checkpoint_files.py), and the totals are
hand algebra (Llama 3.1 8B: tests/test_hub.py's LLAMA_PARAMS, Meta's 8.03B; 291 tensors =
1 embedding + 32 × 9 + final norm + head, the count of its published
model.safetensors.index.json). A planted difference must be named and exit 1.
"""
from __future__ import annotations

import json
import struct

import pytest

from tests.checkpoint_files import state_dict_shapes, write
from tests.cli_run import refused_in_one_line, run
from tests.test_hub import LLAMA_PARAMS, hub_env, lay_out  # noqa: F401 (a fixture)

pytest.importorskip("transformers")
LLAMA = "accounting/hf_configs/meta-llama/Llama-3.1-8B.json"
GPT2 = "accounting/hf_configs/openai-community/gpt2.json"
LLAMA_TENSORS = 1 + 32 * 9 + 1 + 1  # embed; per block q,k,v,o, gate,up,down, two norms; norm, head


@pytest.fixture(scope="module")
def llama_shapes():
    return state_dict_shapes(LLAMA)


def _json(capsys, *argv, code=0):
    got, out, err = run(capsys, *argv, "--format", "json")
    assert got == code, err
    return json.loads(out), err


def test_llama_31_8b_headers_agree(tmp_path, capsys, llama_shapes):
    assert len(llama_shapes) == LLAMA_TENSORS == 291
    ck = write(tmp_path / "ckpt", llama_shapes)
    code, out, err = run(capsys, "meta-llama/Llama-3.1-8B", "--checkpoint", str(ck), "--brief")
    assert code == 0, err
    assert ("checkpoint:    agrees: 291 tensors, 8,030,261,248 parameters, 16,060,522,496 bytes "
            "stored (BF16 16.06 GB) in 2 safetensors headers") in out.splitlines()
    d, _ = _json(capsys, "plan", "meta-llama/Llama-3.1-8B", "--checkpoint", str(ck))
    c = d["checkpoint"]
    assert (c["tensors"], c["parameters"], c["bytes"], c["agrees"]) == \
        (291, LLAMA_PARAMS, 2 * LLAMA_PARAMS, True)  # bf16: 2 bytes per parameter


def test_a_planted_difference_is_named_and_exits_1(tmp_path, capsys, llama_shapes):
    planted = [(n, (4097,) if n == "model.norm.weight" else s) for n, s in llama_shapes
               if n != "model.layers.7.mlp.up_proj.weight"]
    ck = write(tmp_path / "ckpt", planted + [("model.layers.0.self_attn.rotary_emb.inv_freq", (64,))])
    d, err = _json(capsys, "meta-llama/Llama-3.1-8B", "--checkpoint", str(ck), "--no-verify", code=1)
    c = d["checkpoint"]
    assert c["agrees"] is False and c["tensors"] == 291
    assert "model.norm.weight is 4,097 in the checkpoint, 4,096 in the ledger" in c["differences"]
    assert ("model.layers.7.mlp.up_proj.weight (14,336×4,096) is in the ledger, not in the "
            "checkpoint") in c["differences"]
    assert any(x.startswith("model.layers.0.self_attn.rotary_emb.inv_freq (64 BF16)")
               for x in c["differences"])
    assert err.count("\n") == 1 and "DISAGREES" in err


def test_gpt2_fused_and_transposed_conv1d_without_the_base_prefix(tmp_path, capsys):
    # transformers' GPT-2: c_attn holds Q, K and V (768 × 2,304, Conv1D: stored (in, out));
    # the published checkpoint names 'h.0.…' without 'transformer.' (148 tensors, tied head)
    shapes = [(n.removeprefix("transformer."), s) for n, s in state_dict_shapes(GPT2)
              if not n.endswith(".attn.bias") and not n.endswith(".attn.masked_bias")]
    ck = write(tmp_path / "gpt2", shapes, shards=1)
    d, _ = _json(capsys, "openai-community/gpt2", "--checkpoint", str(ck), "--no-verify")
    # GPT-2 small's 124,439,808 parameters (OpenAI's 124M; tests/test_presets.py's algebra)
    assert d["checkpoint"]["agrees"], d["checkpoint"]["differences"]
    assert d["checkpoint"]["parameters"] == 124_439_808


def test_serve_takes_the_weights_as_stored(tmp_path, capsys, llama_shapes):
    # every tensor stored in F32: 4 bytes a parameter, 32,121,044,992 bytes, where the
    # default bf16 scheme would say 16,060,522,496
    ck = write(tmp_path / "ckpt", llama_shapes, dtype="F32")
    d, _ = _json(capsys, "serve", "meta-llama/Llama-3.1-8B", "--gpu", "H200", "--checkpoint",
                 str(ck))
    assert d["checkpoint"]["bytes"] == 4 * LLAMA_PARAMS
    assert max(s["weights_bytes"] for s in d["stages"]) == 4 * LLAMA_PARAMS
    d, _ = _json(capsys, "serve", "meta-llama/Llama-3.1-8B", "--gpu", "H200", "--tp", "2",
                 "--checkpoint", str(ck))
    # two TP ranks: each holds half of every sharded matrix and a copy of each of the 65
    # RMSNorm weights (4,096 elements): (N − 65·4,096)/2 + 65·4,096 parameters, 4 bytes each
    assert max(s["weights_bytes"] for s in d["stages"]) == \
        4 * ((LLAMA_PARAMS - 65 * 4096) // 2 + 65 * 4096)


def test_a_hub_checkpoint_is_read_from_the_cache_and_by_ranged_reads(hub_env, monkeypatch,
                                                                     capsys, llama_shapes):
    from tests.hub_server import Hub
    src = write(hub_env / "src", llama_shapes)
    files = {p.name: _header_bytes(p) for p in src.iterdir() if p.suffix == ".safetensors"}
    # the stand-in holds the headers only (a ranged read past them would fail)
    files["model.safetensors.index.json"] = (src / "model.safetensors.index.json").read_bytes()
    files["config.json"] = open(LLAMA, "rb").read()
    with Hub({"acme/llama-8b": files}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        d, _ = _json(capsys, "plan", "acme/llama-8b", "--checkpoint", "acme/llama-8b")
        assert (d["checkpoint"]["tensors"], d["checkpoint"]["agrees"]) == (291, True)
        ranged = [(p, r) for m, p, r in hub.log if p.endswith("-of-00002.safetensors") and m == "GET"]
        assert ranged and all(r and r.startswith("bytes=") for _, r in ranged)


def _header_bytes(path) -> bytes:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return struct.pack("<Q", n) + f.read(n)


def test_not_a_safetensors_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(struct.pack("<Q", 10**12) + b"{}")
    refused_in_one_line(capsys, "gpt2-small", "--checkpoint", str(bad), "--brief",
                        expected="past safetensors' limit")
    refused_in_one_line(capsys, "gpt2-small", "--checkpoint", str(tmp_path / "none"), "--brief",
                        expected="no such folder or file")


def test_an_index_naming_a_file_elsewhere_is_refused(tmp_path, capsys):
    # a weight_map value is a file beside the index, never a path out of the folder
    (tmp_path / "secret.safetensors").write_bytes(b"")
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "../secret.safetensors"}}))
    refused_in_one_line(capsys, "gpt2-small", "--checkpoint", str(ck), "--brief",
                        expected="not a .safetensors file beside the index")


def test_a_hub_checkpoint_in_the_cache_is_read_offline(hub_env, monkeypatch, capsys, llama_shapes):
    # the cache holds the snapshot's index and (header-only) shards: no hub is asked
    src = write(hub_env / "src", llama_shapes)
    files = {p.name: _header_bytes(p) for p in src.iterdir() if p.suffix == ".safetensors"}
    files["model.safetensors.index.json"] = (src / "model.safetensors.index.json").read_bytes()
    files["config.json"] = open(LLAMA, "rb").read()
    lay_out(hub_env / "cache", "acme/llama-8b", files)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_env / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    d, _ = _json(capsys, "serve", "acme/llama-8b", "--gpu", "H100", "--checkpoint", "acme/llama-8b")
    assert (d["checkpoint"]["tensors"], d["checkpoint"]["agrees"]) == (291, True)
    assert "cached in" in d["checkpoint"]["source"]
