"""Measure the CUDA caching allocator's reserve for sets of live tensors (issue 44), for
tests/test_allocator.py: each case in a fresh process, tensors of the given byte sizes
allocated in order and kept, then torch.cuda.memory_reserved() and memory_allocated(),
with and without PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True. Needs a CUDA GPU.

    python benchmarks/gpu_allocator.py OUT.json        # every case, both modes
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

MiB = 1 << 20
LAYER = [4096 * 4096 * 2, 4096 * 1024 * 2, 4096 * 1024 * 2, 14336 * 4096 * 2,
         14336 * 4096 * 2, 14336 * 4096 * 2, 4096 * 2, 4096 * 2]
CASES = {
    "100 B x 10": [[100, 10]],
    "513 B x 5000": [[513, 5000]],
    "3 MiB x 7": [[3 * MiB, 7]],
    "1.5 MiB x 20": [[3 * MiB // 2, 20]],
    "10 MiB - 1 x 3": [[10 * MiB - 1, 3]],
    "11 MiB + 1, then 1 MiB + 1": [[11 * MiB + 1, 1], [MiB + 1, 1]],
    "12.5 MiB, then 1.2 MiB x 3": [[25 * MiB // 2, 1], [6 * MiB // 5, 3]],
    "Llama-3.1-8B layer bf16 weights x 4": [[n, 1] for n in LAYER] * 4,
    "1 GiB + 1, 3 x 700 KiB": [[(1 << 30) + 1, 1], [700 * 1024, 3]],
}


def child(case: str) -> None:
    import torch
    keep = [torch.empty(n, dtype=torch.uint8, device="cuda")
            for n, c in CASES[case] for _ in range(c)]
    torch.cuda.synchronize()
    print(json.dumps({"reserved": torch.cuda.memory_reserved(),
                      "allocated": torch.cuda.memory_allocated(), "tensors": len(keep),
                      "torch": torch.__version__}))


def main(out: str) -> None:
    results = {}
    for expandable in (False, True):
        env = dict(os.environ)
        env["PYTORCH_CUDA_ALLOC_CONF"] = f"expandable_segments:{expandable}"
        for case in CASES:
            r = subprocess.run([sys.executable, __file__, "--child", case], env=env,
                               capture_output=True, text=True, timeout=120)
            results[f"{case} | expandable={expandable}"] = (
                {"groups": CASES[case], "expandable": expandable, **json.loads(r.stdout)}
                if r.returncode == 0 else {"error": r.stderr[-500:]})
            print(case, expandable, results[f"{case} | expandable={expandable}"].get("reserved"),
                  flush=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        main(sys.argv[1])
