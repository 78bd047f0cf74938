"""The cuBLAS/hipBLAS workspaces in a training step's CUDA peak follow the GPU's architecture.

Expected values are read from PyTorch's aten/src/ATen/cuda/CublasHandlePool.cpp
(parseChosenWorkspaceSize), typed here from the source text, not from the code under test:
  CUDA:  use32mb = major in {9, 10, 11, 12}; default_size = use32mb ? 4096 * 8 * 1024
         : 4096 * 1024 * 2 + 16 * 1024 * 8
  ROCm:  gfx942/gfx950/gfx1250 ? 1024 * 128 * 1024 : 1024 * 32 * 1024
and the compute capabilities from developer.nvidia.com/cuda-gpus (A100/A800 8.0, A10G/RTX 3090/
RTX A6000 8.6, L4/L40S/RTX 4090 8.9, H100/H200/H800/H20 9.0, B200/GB200 10.0, B300 10.3,
RTX 5090 12.0) and ROCm's GPU
architecture specs (MI300X/MI325X gfx942, MI355X gfx950)."""
import pytest

from accounting.planning import cuda_peak as CP
from accounting.planning.gpus import GPUS
from accounting.planning.plan import plan

MIB = 1024 * 1024
HOPPER_AND_NEWER = 32 * MIB
OLDER = 8 * MIB + 128 * 1024
CDNA3 = 128 * MIB

EXPECTED = {"A100-40GB": OLDER, "A100-80GB": OLDER, "A10G": OLDER, "L4": OLDER, "L40S": OLDER,
            "RTX-4090": OLDER, "H100-SXM": HOPPER_AND_NEWER, "H200": HOPPER_AND_NEWER,
            "B200": HOPPER_AND_NEWER, "GB200": HOPPER_AND_NEWER, "B300": HOPPER_AND_NEWER,
            "RTX-5090": HOPPER_AND_NEWER, "MI300X": CDNA3, "MI325X": CDNA3, "MI355X": CDNA3,
            # export variants and workstation cards: A800 8.0, H800/H20 9.0, RTX 3090/A6000 8.6
            "A800-80GB": OLDER, "H800": HOPPER_AND_NEWER, "H20": HOPPER_AND_NEWER,
            "RTX-3090": OLDER, "RTX-A6000": OLDER}


def test_every_card_has_an_architecture_and_its_workspace():
    assert set(EXPECTED) == set(GPUS)
    for name, g in GPUS.items():
        assert CP.cublas_workspace_bytes(g.arch) == EXPECTED[name], name


def test_unknown_architecture_is_planned_as_hopper_and_bad_names_refused():
    assert CP.cublas_workspace_bytes(None) == HOPPER_AND_NEWER
    assert CP.cublas_workspace_bytes("gfx90a") == 32 * MIB  # MI250: ROCm's default
    with pytest.raises(ValueError):
        CP.cublas_workspace_bytes("ampere")


def test_the_plan_peak_differs_by_exactly_the_two_workspaces():
    """The same step on an A100 and an H100: the peak differs by 2 × (32 MiB − 8.125 MiB),
    the only GPU-dependent term of the memory model."""
    a = plan("gpt2-small", gpu="A100", seq=512, batch=2)
    h = plan("gpt2-small", gpu="H100", seq=512, batch=2)
    m = plan("gpt2-small", gpu="MI300X", seq=512, batch=2)
    peak = [x.memory.model.peak(2, 512) for x in (a, h, m)]
    assert peak[1] - peak[0] == 2 * (HOPPER_AND_NEWER - OLDER)
    assert peak[2] - peak[1] == 2 * (CDNA3 - HOPPER_AND_NEWER)
