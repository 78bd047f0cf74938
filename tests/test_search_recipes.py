"""plan --gpus N --search with issue 44's recipe flags (--loss, --loss-chunks, --compile):
every layout is planned with them, as one layout's plan is (the search had refused them). The
expected values are the single-layout plans' own (parallel_plan with the same flags), and the
flags' effect is checked against the standard search: chunked cross-entropy keeps no B·T·V
fp32 logits gradient, so the same layout needs less memory."""
import json

from cli_run import run

BASE = ("plan", "meta-llama/Llama-3.1-8B", "--gpus", "8", "--gpu", "H100", "--ctx", "32768",
        "--batch", "8", "--recompute", "full", "--format", "json")


def _ranked(capsys, *flags):
    code, out, err = run(capsys, *BASE, "--search", *flags)
    assert code == 0, err
    return json.loads(out)["ranked"]


def _layout_flags(layout: dict) -> list[str]:
    flags = ["--tp", str(layout["tp"]), "--pp", str(layout["pp"]), "--cp", str(layout["cp"]),
             "--zero", str(layout["zero"]), "--micro-batch", str(layout["micro_batch"])]
    return flags + (["--sp"] if layout["sp"] else [])


def test_search_plans_each_layout_with_the_loss_recipe(capsys):
    chunked = _ranked(capsys, "--loss", "chunked", "--loss-chunks", "4")
    assert all(p["loss"] == "chunked" and p["loss_chunks"] == 4 for p in chunked)
    best = chunked[0]
    code, out, err = run(capsys, *BASE, *_layout_flags(best["layout"]), "--loss", "chunked",
                         "--loss-chunks", "4")
    assert code == 0, err
    alone = json.loads(out)
    assert alone["memory_per_gpu_bytes"] == best["memory_per_gpu_bytes"]
    # the same layout with the standard loss (its plan answers, fitting or not) holds more
    code, out, err = run(capsys, *BASE, *_layout_flags(best["layout"]))
    assert code == 0, err
    assert best["memory_per_gpu_bytes"] < json.loads(out)["memory_per_gpu_bytes"]
    # and the standard search ranks it below (or refuses it), as it does not fit there
    standard = [p["layout"] for p in _ranked(capsys)]
    assert standard[:1] != [best["layout"]]


def test_the_search_title_names_the_recipe(capsys):
    code, out, err = run(capsys, *BASE[:-2], "--search", "--loss", "chunked", "--compile")
    assert code == 0, err
    title = out.splitlines()[0]
    # --compile compiles the chunked loss too (torchtune's compile_loss; the stack's default
    # components, compile_components.py)
    assert "loss chunked (8 chunks)" in title and \
        "the blocks and the loss under torch.compile" in title
