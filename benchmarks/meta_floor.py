"""The floor of anything that runs the model on the meta device: a fresh interpreter,
`import torch`, the model built (torch's lazy imports on the first meta op included) and
one bare pass with no counter at all.

    python benchmarks/meta_floor.py MODEL --ctx T [--pass forward|train]

forward: model(ids) under torch.no_grad() (as the cross-check runs it); train: model(ids),
cross-entropy on the logits and loss.backward(), as the cross-check's --pass train does.
The model is built as the cross-check builds it (context_length = max(T, the config's),
a learned position table keeping its length). --no-teardown: end with os._exit, skipping
the interpreter's teardown of torch (about 1 s here), as `python -m accounting` does.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--ctx", type=int, required=True)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--pass", dest="phase", choices=("forward", "train"), default="forward")
    p.add_argument("--no-teardown", action="store_true",
                   help="end with os._exit, as `python -m accounting` ends (accounting/"
                        "safe_io.py, end_process): the floor without the interpreter's "
                        "teardown of torch")
    ns = p.parse_args()
    import torch
    import torch.nn.functional as F

    from accounting import get_preset
    from model import TransformerLM
    config = get_preset(ns.model)
    ctx = (config.context_length if config.positions == "learned"
           else max(ns.ctx, config.context_length))
    model = TransformerLM.from_config(config, context_length=ctx, device="meta")
    ids = torch.zeros((ns.batch, ns.ctx), dtype=torch.long, device="meta")
    if ns.phase == "forward":
        with torch.no_grad():
            model(ids)
    else:
        logits = model(ids)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1)).backward()
    if ns.no_teardown:
        from accounting.runtime.safe_io import end_process
        end_process(0)  # exactly as the CLI ends
    return 0


if __name__ == "__main__":
    sys.exit(main())
