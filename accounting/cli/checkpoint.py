"""--checkpoint DIR|FILE|ORG/NAME (issue 42) for the default command, `plan` and `serve`:
the checkpoint's safetensors headers matched to the ledger (accounting/checkpoint/), one
more line in the answer, `checkpoint` in the JSON, exit 1 when it differs (a cross-check
disagreement)."""
from __future__ import annotations

from dataclasses import replace

from accounting.runtime import safe_io

FLAG_HELP = ("a checkpoint to count: a folder of safetensors files (with or without "
             "model.safetensors.index.json), one .safetensors or .gguf file (llama.cpp's; "
             "bytes per tensor type from gguf's GGML_QUANT_SIZES), or a hub id ORG/NAME (its "
             "cached snapshot, else its headers from the hub by ranged reads); only the headers "
             "are read. Its tensors are matched to the ledger's parameters by name and shape "
             "(one more line; exit 1 when they differ); `serve` then takes the weights as stored")


def add_arg(group) -> None:
    group.add_argument("--checkpoint", metavar="PATH", help=FLAG_HELP)


def check(ns, config, hf):
    """The match of --checkpoint with the config's ledger, None without the flag."""
    where = getattr(ns, "checkpoint", None)
    if not where:
        return None
    from accounting.checkpoint import headers, match
    from accounting.ledger.ledger import ledger
    ck = headers.read(where)
    if getattr(hf, "vision", None) is not None:  # issue 41
        ck = _without_tower(ck)
    names = hf.type.module_names(hf.data) if hf is not None else None
    rename = None
    if ck.gguf_arch is not None:  # llama.cpp's names, from transformers' by gguf's own map
        from accounting.checkpoint.gguf_file import tensor_names
        rename = tensor_names(ck.gguf_arch, config.num_layers)
    return match.match(ledger(config), names, ck, rename)


def _without_tower(ck):
    """A vision-language checkpoint less its tower's tensors (visual.*, vision_tower.*,
    multi_modal_projector.*, ..., with or without the "model." prefix): the tower is counted
    by its own ledger (serve and plan add it; accounting/serving/vision.py), so its tensors
    are neither matched against the language model's ledger nor counted twice as stored."""
    from accounting.serving.vision import TOWER_NAMES
    keep = tuple(t for t in ck.tensors
                 if t.name.removeprefix("model.").split(".")[0] not in TOWER_NAMES)
    n = len(ck.tensors) - len(keep)
    return replace(ck, tensors=keep, source=f"{ck.source} (its vision tower's {n:,} tensors "
                                            f"set aside: the tower is counted by its ledger)")


def answer(table, m, label_width: int = 14, verdict: str | None = None):
    """The answer block with the checkpoint's line (before the cross-check's verdict)."""
    if m is None:
        return table if verdict is None else replace(table, notes=table.notes + (verdict,))
    from accounting.checkpoint.views import line
    notes = table.notes + (line(m, label_width),) + ((verdict,) if verdict else ())
    return replace(table, notes=notes)


def add_json(d: dict, m) -> dict:
    if m is not None:
        from accounting.checkpoint.views import to_dict
        d["checkpoint"] = to_dict(m)
    return d


def status(m, code: int = 0) -> int:
    """Exit 1 (and one line on stderr) when the checkpoint differs from the ledger."""
    if m is not None and not m.agrees:
        from accounting.checkpoint.views import summary
        safe_io.say(f"accounting: {summary(m)}")
        return 1
    return code
