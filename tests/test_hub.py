"""Issue 42, Must 1: a hub id that is not a preset, from the local Hugging Face cache laid out
on disk as huggingface_hub lays it out, and from a stand-in hub on 127.0.0.1 (HF_ENDPOINT;
tests/hub_server.py), never the network.

The config.json used is Llama 3.1 8B's as published (the shipped copy,
accounting/hf_configs/meta-llama/Llama-3.1-8B.json) under ids that are no preset; the
expected parameter count is hand algebra on its sizes, written out below, and the published
figure (Meta's model card: 8.03B).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_run import refused_in_one_line, run
from tests.hub_server import COMMIT, Hub

LLAMA = Path(__file__).resolve().parents[1] / "accounting/hf_configs/meta-llama/Llama-3.1-8B.json"
# Llama 3.1 8B by hand: V = 128,256, d = 4,096, L = 32, h_kv·d_k = 8·128 = 1,024,
# d_ff = 14,336; untied embedding and head, two RMSNorm weights per block and a final one
V, D, L, KV, FF = 128256, 4096, 32, 1024, 14336
LLAMA_PARAMS = 2 * V * D + L * (2 * D * D + 2 * D * KV + 3 * D * FF + 2 * D) + D
assert LLAMA_PARAMS == 8_030_261_248  # and Meta's model card says 8.03B


def lay_out(cache: Path, repo: str, files: dict, revision: str = "main",
            commit: str = "0123456789abcdef0123456789abcdef01234567") -> Path:
    """A repo in the cache as huggingface_hub writes it: blobs/<hash>, a snapshot of links
    into blobs, and refs/<revision> holding the commit."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    snap = folder / "snapshots" / commit
    snap.mkdir(parents=True)
    (folder / "blobs").mkdir(exist_ok=True)
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / revision).write_text(commit)
    for name, data in files.items():
        blob = folder / "blobs" / f"blob{abs(hash((commit, name)))}"
        blob.write_bytes(data)
        (snap / name).symlink_to(Path("../../blobs") / blob.name)
    return snap


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    """No real cache, token or hub: everything under tmp_path."""
    for var in ("HF_HUB_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: never the network
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    return tmp_path


def _json(capsys, *argv) -> dict:
    code, out, err = run(capsys, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_a_hub_id_is_read_from_the_cache_at_HF_HUB_CACHE(hub_env, monkeypatch, capsys):
    cache = hub_env / "cache"
    lay_out(cache, "acme/llama-8b", {"config.json": LLAMA.read_bytes()})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    d = _json(capsys, "acme/llama-8b", "--ctx", "128", "--no-verify")
    assert d["parameters"]["total"] == LLAMA_PARAMS
    code, out, err = run(capsys, "plan", "acme/llama-8b", "--gpu", "H100", "--ctx", "1024")
    assert code == 0, err
    assert out.startswith("Answer: plan for acme/llama-8b, T = 1,024")
    code, out, err = run(capsys, "serve", "acme/llama-8b", "--gpu", "H100", "--ctx", "8192")
    assert code == 0, err
    # bf16 weights: 2 bytes per parameter, 16,060,522,496 bytes = 16.06 GB
    assert "weights/GPU:     16.06 GB" in out


def test_HF_HOME_hub_when_HF_HUB_CACHE_is_unset_and_refs_main_picks_the_snapshot(hub_env, capsys):
    cache = hub_env / "hf_home" / "hub"
    lay_out(cache, "acme/llama-8b", {"config.json": LLAMA.read_bytes()})
    # another revision's snapshot, with a smaller model, is not what main points at
    other = json.loads(LLAMA.read_text()) | {"num_hidden_layers": 2}
    lay_out(cache, "acme/llama-8b", {"config.json": json.dumps(other).encode()},
            revision="dev", commit="f" * 40)
    d = _json(capsys, "acme/llama-8b", "--ctx", "128", "--no-verify")
    assert d["parameters"]["total"] == LLAMA_PARAMS


def test_offline_without_a_cached_copy_is_one_line(hub_env, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    refused_in_one_line(capsys, "acme/llama-8b", "--brief", expected="HF_HUB_OFFLINE is set")
    refused_in_one_line(capsys, "plan", "acme/llama-8b", expected="holds no config.json")


def test_an_unreachable_hub_is_one_line_at_once(hub_env, capsys):
    # 127.0.0.1:9 refuses; without the probe, huggingface_hub would retry 5 times (23 s)
    refused_in_one_line(capsys, "serve", "acme/llama-8b", "--gpu", "H100",
                        expected="cannot reach the hub at http://127.0.0.1:9")


def test_the_stand_in_hub_serves_config_json_into_the_cache(hub_env, monkeypatch, capsys):
    with Hub({"acme/remote-8b": {"config.json": LLAMA.read_bytes()}}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, out, err = run(capsys, "plan", "acme/remote-8b", "--gpu", "H100", "--ctx", "1024",
                             "--format", "json")
        assert code == 0, err
        assert json.loads(out)["parameters"]["count"] == LLAMA_PARAMS
        assert {path for _, path, _ in hub.log if "/resolve/" in path} == \
            {"/acme/remote-8b/resolve/main/config.json"}
        refused_in_one_line(capsys, "acme/nothing", "--brief", expected="no model acme/nothing on the hub")
    # now cached where huggingface_hub puts it (HF_HOME/hub), under the hub's commit
    snap = hub_env / "hf_home" / "hub" / "models--acme--remote-8b" / "snapshots" / COMMIT
    assert (snap / "config.json").read_bytes() == LLAMA.read_bytes()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the hub gone: the cache answers
    code, out, err = run(capsys, "serve", "acme/remote-8b", "--gpu", "H100", "--ctx", "8192")
    assert code == 0, err


def test_a_gated_repo_needs_the_users_token(hub_env, monkeypatch, capsys):
    with Hub({"acme/gated-8b": {"config.json": LLAMA.read_bytes()}},
             gated=frozenset({"acme/gated-8b"})) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        refused_in_one_line(capsys, "acme/gated-8b", "--brief", expected="is gated on the hub")
        monkeypatch.setenv("HF_TOKEN", "hf_" + "x" * 34)
        d = _json(capsys, "acme/gated-8b", "--ctx", "128", "--no-verify")
        assert d["parameters"]["total"] == LLAMA_PARAMS


def test_a_name_that_is_no_repo_id_still_gets_the_closest_presets(hub_env, capsys):
    refused_in_one_line(capsys, "gpt2-xxl", "--brief", expected="closest presets")


def test_import_accounting_does_not_import_huggingface_hub():
    code = "import sys, accounting; print('huggingface_hub' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
