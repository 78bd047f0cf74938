"""notebooks/flops_shares.ipynb runs top to bottom, headless, in a fresh kernel.

The notebook is executed from an in-memory copy with a temporary working directory, so
nothing is written into notebooks/. Expected numbers for its "try your own config" cell
are derived by hand below, not taken from the library.
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
KERNEL = "python3"


def test_kernel_is_this_interpreter():
    # jupyter_client swaps a kernelspec's bare "python" for sys.executable; check that the
    # python3 kernel the test runs really is this venv's interpreter, not another python.
    from jupyter_client.manager import KernelManager
    cmd = KernelManager(kernel_name=KERNEL).format_kernel_cmd()
    assert os.path.realpath(cmd[0]) == os.path.realpath(sys.executable), cmd


def test_committed_notebook_has_no_outputs():
    # Committed cleared: any output in it would be hand-made or stale.
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


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


def test_notebook_runs_headless(tmp_path, monkeypatch):
    before = NOTEBOOK.read_bytes()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # One extra cell, in memory only: which interpreter did the kernel run?
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print(sys.executable)"))
    # The repository on the kernel's path, as `pip install -e .` would put it.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    # ipykernel's inline backend draws headless; an inherited MPLBACKEND would override it.
    monkeypatch.delenv("MPLBACKEND", raising=False)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name=KERNEL,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError on the first failing cell

    def text(cell):
        return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")

    code = [c for c in nb.cells if c.cell_type == "code"]
    assert os.path.realpath(text(code[-1]).strip()) == os.path.realpath(sys.executable)
    for cell in code:
        assert not [o for o in cell.outputs if o.output_type == "error"]

    # The user's cell is the last of the notebook proper and builds a ModelConfig.
    mine = code[-2]
    assert "ModelConfig(" in mine.source
    params, flops, crossover_first = _my_config_numbers()
    out = text(mine)
    assert f"{params:,} parameters" in out
    assert f"{flops:,}" in out
    assert f"from T = {crossover_first:,}" in out
    # It drew its plot, and so did the earlier plotting cells.
    images = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 3

    assert NOTEBOOK.read_bytes() == before  # nothing written into notebooks/
    assert not list(NOTEBOOK.parent.glob(".ipynb_checkpoints"))
