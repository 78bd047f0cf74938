"""Issue 23: junk in a config.json key that changes no count (torch_dtype "banana",
use_cache "yes", a dropout "x") was passed on to transformers and came back as exit 1,
"cross-check DISAGREES": a false verdict about a correct count. It is bad input: exit 2,
one line naming the key, before any work, with or without --verify.

The refused values are the ones transformers 5.23's config classes refuse (probed with
AutoConfig.for_model("llama", ...): strict dataclass fields use_cache: bool, token ids
int | None (eos also a list), attention_dropout int | float | None, initializer_range
float; a dtype is looked up as getattr(torch, name)); the accepted ones are what published
configs hold (Llama-3's eos_token_id list, GPT-2's 0.1 dropouts, "bfloat16")."""
from __future__ import annotations

import importlib.util
import json

import pytest

from accounting.cli.main import main

LLAMA = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 128}
GPT2 = {"model_type": "gpt2", "vocab_size": 256, "n_embd": 64, "n_layer": 2, "n_head": 4,
        "n_positions": 128, "n_ctx": 128}

JUNK = [(LLAMA, "torch_dtype", "banana"), (LLAMA, "dtype", 5), (LLAMA, "use_cache", "yes"),
        (LLAMA, "attention_dropout", "x"), (LLAMA, "attention_dropout", True),
        (LLAMA, "bos_token_id", "x"), (LLAMA, "pad_token_id", 1.5),
        (LLAMA, "eos_token_id", [1, "a"]), (LLAMA, "initializer_range", "x")]
# GPT-2's dropouts are read into the spec (issue 41: they count in training): junk there is
# refused by the key's own kind, a probability (also exit 2, one line naming the key)
JUNK_READ = [(GPT2, "resid_pdrop", "x"), (GPT2, "attn_pdrop", [0.1]), (GPT2, "embd_pdrop", 1)]
FINE = [(LLAMA, "torch_dtype", "bfloat16"), (LLAMA, "dtype", None), (LLAMA, "use_cache", False),
        (LLAMA, "eos_token_id", [128001, 128008, 128009]), (LLAMA, "attention_dropout", 0.1),
        (GPT2, "resid_pdrop", 0.1), (LLAMA, "initializer_range", 0.02)]


def _run(capsys, tmp_path, base, key, value, *flags):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**base, key: value}))
    code = main(["--config", str(path), "--brief", *flags])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("base,key,value", JUNK, ids=[f"{k}={v!r}" for _, k, v in JUNK])
def test_junk_in_a_key_that_changes_no_count_is_bad_input(capsys, tmp_path, base, key, value):
    code, out, err = _run(capsys, tmp_path, base, key, value, "--no-verify")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and f"{key} = " in err and "transformers refuses it" in err


@pytest.mark.parametrize("base,key,value", JUNK_READ,
                         ids=[f"{k}={v!r}" for _, k, v in JUNK_READ])
def test_junk_in_a_read_dropout_is_bad_input(capsys, tmp_path, base, key, value):
    code, out, err = _run(capsys, tmp_path, base, key, value, "--no-verify")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and f"{key} must be a number at least 0 and below 1" in err


@pytest.mark.parametrize("base,key,value", FINE, ids=[f"{k}={v!r}" for _, k, v in FINE])
def test_published_values_still_answer(capsys, tmp_path, base, key, value):
    code, out, err = _run(capsys, tmp_path, base, key, value, "--no-verify")
    assert code == 0 and out.startswith("Answer:")


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                    reason="transformers' own refusal needs transformers ([hf] extra)")
def test_what_only_transformers_refuses_is_exit_2_before_any_work(capsys, tmp_path):
    """initializer_range 0 (a JSON integer) passes the tool's table (a number) but
    transformers 5.23's LlamaConfig declares it float and refuses an int: with --verify the
    tool asks transformers first, so the run ends at once with exit 2 naming transformers'
    reason, not with the analytic answer and a DISAGREES verdict (the old behaviour)."""
    code, out, err = _run(capsys, tmp_path, LLAMA, "initializer_range", 0, "--verify")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "transformers refuses it" in err
    assert "initializer_range" in err and "--no-verify" in err
    code, out, _ = _run(capsys, tmp_path, LLAMA, "initializer_range", 0, "--no-verify")
    assert code == 0 and out.startswith("Answer:")
