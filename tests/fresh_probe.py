"""A measurement run in a fresh interpreter (torch.distributed's process groups, a module's
global state): `python -c SOURCE` from the repository root, with it on PYTHONPATH; the
script prints its result as JSON on its last line."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])


def run_probe(source: str, timeout: int = 300):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True,
                         timeout=timeout, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])
