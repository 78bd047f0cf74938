"""`plan --optimizer`'s help is written from the optimizer registry: every registered name
(and the library it follows) appears in it, so a new optimizer cannot be missing from --help."""
import os
import subprocess
import sys

from accounting.planning.optimizers import OPTIMIZERS


def test_help_names_every_registered_optimizer():
    out = subprocess.run([sys.executable, "-m", "accounting", "plan", "--help"],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "COLUMNS": "10000"}).stdout
    lines = out.splitlines()
    i = next(i for i, l in enumerate(lines) if l.strip().startswith("--optimizer {"))
    line, text = lines[i], " ".join(lines[i:i + 2])  # the help may go on the next line
    for name, opt in OPTIMIZERS.items():
        assert f"{name}: {opt.title}" in text, name
    # the registry's names are the choices argparse accepts, in the same order
    assert line.split("{")[1].split("}")[0].split(",") == list(OPTIMIZERS)
