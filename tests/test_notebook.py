"""The notebooks run top to bottom, headless, in a fresh kernel, and are committed WITH their
outputs (so they render where the repository is browsed): each test re-runs one and checks
the committed outputs are current — every text output equal, an image wherever the
committed notebook has one (tests/test_notebook.py's `semantic`). Regenerate both with

    python tests/test_notebook.py --update

Notebooks are executed from an in-memory copy with a temporary working directory, so
nothing is written into notebooks/ by the tests. Expected numbers for the cells that print
them are derived by hand below, not taken from the library.
"""
import os
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "flops_shares.ipynb"
FORMULAS = ROOT / "notebooks" / "formulas.ipynb"
NOTEBOOKS = (NOTEBOOK, FORMULAS)
KERNEL = "python3"
STALE = "{name} outputs are stale: run python tests/test_notebook.py --update"


def test_kernel_is_this_interpreter():
    # jupyter_client swaps a kernelspec's bare "python" for sys.executable; check that the
    # python3 kernel the test runs really is this venv's interpreter, not another python.
    from jupyter_client.manager import KernelManager
    cmd = KernelManager(kernel_name=KERNEL).format_kernel_cmd()
    assert os.path.realpath(cmd[0]) == os.path.realpath(sys.executable), cmd


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_with_outputs(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None for c in code)
    assert sum("image/png" in o.get("data", {}) for c in code for o in c.outputs) >= 2
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not [c for c in nb.cells if "execution" in c.metadata]  # volatile metadata stripped


def _my_config_numbers():
    """The last cell's example (LLaMA-7B shape), by hand algebra, independent of the library.

    V = 32,000, L = 32, d = 4,096, h = 32, d_ff = 11,008, T = 4,096.
    Parameters: embedding V·d + LM head V·d + per layer (4 d² attention, 3 d·d_ff SwiGLU,
    2 d RMSNorm gains) + final gain d.  Forward matmul FLOPs (2mnp): per layer
    4 projections 2·T·d² each, QKᵀ and scores·V 2·T²·d each, 3 SwiGLU 2·T·d·d_ff each;
    LM head 2·T·d·V.  Attention core = feed-forward where 4·T²·d = 6·T·d·d_ff,
    i.e. T = 1.5·d_ff = 16,512, so it is larger from T = 16,513.
    """
    V, L, d, d_ff, T = 32_000, 32, 4_096, 11_008, 4_096
    params = 2 * V * d + L * (4 * d * d + 3 * d * d_ff + 2 * d) + d
    flops = L * (4 * 2 * T * d * d + 2 * 2 * T * T * d + 3 * 2 * T * d * d_ff) + 2 * T * d * V
    crossover_first = 3 * d_ff // 2 + 1
    return params, flops, crossover_first


def test_my_config_numbers_by_hand():
    # The published LLaMA-7B parameter count (Touvron et al. 2023: 6.7B) for the same shape.
    params, _, _ = _my_config_numbers()
    assert params == 6_738_415_616


def _stream(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_flops_notebook_outputs_are_current(tmp_path):
    before = NOTEBOOK.read_bytes()
    committed = nbformat.read(NOTEBOOK, as_version=4)
    # One extra cell, in memory only: which interpreter did the kernel run?
    fresh = execute(NOTEBOOK, tmp_path, extra="import sys; print(sys.executable)")
    probe = fresh.cells.pop()
    assert os.path.realpath(_stream(probe).strip()) == os.path.realpath(sys.executable)
    assert semantic(fresh) == semantic(committed), STALE.format(name=NOTEBOOK.name)

    # The user's cell is the last of the notebook and builds a ModelConfig.
    code = [c for c in fresh.cells if c.cell_type == "code"]
    mine = code[-1]
    assert "ModelConfig(" in mine.source
    params, flops, crossover_first = _my_config_numbers()
    out = _stream(mine)
    assert f"{params:,} parameters" in out
    assert f"{flops:,}" in out
    assert f"from T = {crossover_first:,}" in out
    # It drew its plot, and so did the earlier plotting cells.
    images = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 3

    assert NOTEBOOK.read_bytes() == before  # nothing written into notebooks/
    assert not list(NOTEBOOK.parent.glob(".ipynb_checkpoints"))


# ---- notebooks/formulas.ipynb: committed with outputs ---------------------------------------

def execute(path: Path, workdir: Path, extra: str | None = None):
    """Run a copy of the notebook in a fresh kernel (the repository on its path), with one
    more code cell at the end when `extra` is given (in memory only)."""
    nb = nbformat.read(path, as_version=4)
    if extra is not None:
        nb.cells.append(nbformat.v4.new_code_cell(extra))
    env_path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    old = os.environ.get("PYTHONPATH"), os.environ.pop("MPLBACKEND", None)
    os.environ["PYTHONPATH"] = env_path
    try:
        nbclient.NotebookClient(nb, timeout=300, kernel_name=KERNEL,
                                resources={"metadata": {"path": str(workdir)}}).execute()
    finally:
        if old[0] is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old[0]
        if old[1] is not None:
            os.environ["MPLBACKEND"] = old[1]
    return nb


def strip_volatile(nb) -> None:
    """Keep what renders; drop timestamps and the kernel's version details."""
    nb.metadata = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                                  "name": "python3"}, "language_info": {"name": "python"}}
    for cell in nb.cells:
        cell.metadata.pop("execution", None)


def semantic(nb) -> list:
    """Per code cell: its stream text, its text/plain results, and how many images."""
    out = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        streams = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        plain = [o["data"]["text/plain"] for o in cell.outputs
                 if o.output_type in ("execute_result", "display_data") and "text/plain" in o.get("data", {})
                 and "image/png" not in o["data"]]
        images = sum("image/png" in o.get("data", {}) for o in cell.outputs)
        errors = [o for o in cell.outputs if o.output_type == "error"]
        out.append((cell.source, streams, plain, images, len(errors)))
    return out


def _hand_numbers():
    """By hand (2mnp per matmul), independent of the library.

    openai-community/gpt2-xl at T = 1,024: L 48, d 1,600, h 25, V 50,257. Forward matmul
    FLOPs: 8·T·d²·L (Q, K, V, O) + 4·T²·d·L (QKᵀ, scores·V) + 16·T·d²·L (two 4·d MLP
    matrices) + 2·T·d·V (tied LM head); training 3×. PaLM: (6N + 12·L·H·Q·T)·T with the
    published N = 1,557,611,200.

    my-model (Llama-3-8B-like, T = 8,192): Q and O 2·T·d² each, K and V 2·T·d·1,024 each,
    attention core 4·T²·d, SwiGLU 6·T·d·d_ff per layer, LM head 2·T·d·V; N = 8,030,261,248
    (Llama 3.1 8B's published count, test_presets.py).
    """
    T, L, d, V = 1024, 48, 1600, 50257
    exact = 3 * (L * (8 * T * d * d + 4 * T * T * d + 16 * T * d * d) + 2 * T * d * V)
    palm = (6 * 1_557_611_200 + 12 * L * 25 * 64 * T) * T
    T2, L2, d2, V2, ff = 8192, 32, 4096, 128256, 14336
    exact2 = 3 * (L2 * (2 * 2 * T2 * d2 * d2 + 2 * 2 * T2 * d2 * 1024 + 4 * T2 * T2 * d2
                        + 6 * T2 * d2 * ff) + 2 * T2 * d2 * V2)
    six_n = 6 * 8_030_261_248 * T2
    return exact, palm, exact2, six_n


def test_formulas_notebook_outputs_are_current(tmp_path):
    before = FORMULAS.read_bytes()
    committed = nbformat.read(FORMULAS, as_version=4)
    fresh = execute(FORMULAS, tmp_path)
    assert semantic(fresh) == semantic(committed), STALE.format(name=FORMULAS.name)
    # Numbers the notebook prints, against hand algebra
    exact, palm, exact2, six_n = _hand_numbers()
    text = "".join(s for _, s, _, _, _ in semantic(fresh))
    assert f"gives {palm:,} training FLOPs; the exact count is {exact:,}" in text
    assert f"(ratio {palm / exact:.4f})" in text
    assert f"{'6N (all parameters)':36s} {six_n / exact2:7.4f}" in text
    assert FORMULAS.read_bytes() == before  # nothing written into notebooks/


def update(paths=NOTEBOOKS) -> None:
    """Re-run each notebook in a fresh kernel and commit it with its outputs."""
    import tempfile
    for path in paths:
        with tempfile.TemporaryDirectory() as tmp:
            nb = execute(path, Path(tmp))
        strip_volatile(nb)
        nbformat.write(nb, path)


if __name__ == "__main__":
    if sys.argv[1:] == ["--update"]:
        update()
    elif sys.argv[1:] == ["--update-formulas"]:  # the older spelling: one notebook
        update((FORMULAS,))
    else:
        sys.exit("usage: python tests/test_notebook.py --update")
