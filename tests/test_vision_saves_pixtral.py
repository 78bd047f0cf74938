"""Mistral 3's trained Pixtral tower's saved tensors (issue 41, Must 3;
accounting/ledger/builder/vision_saves_pixtral.py) against transformers' own tower on the
CPU: the tiny config of tests/test_vision_mistral3.py (patch 14, merge 2, 2 layers, 2
heads), Mistral3Model.get_image_features in training mode (attention "sdpa") on one forward
of 1 to 3 images (one sequence of their patches under a block-diagonal mask), every storage
autograd saves in the graph its output's backward walks (tests/test_vision_train.py's
walk), at fp32, bf16 and fp32 under bf16 autocast, and under gradient checkpointing
(reentrant: the rotary cos and sin reach the layers inside a tuple the checkpoint's ctx
holds, 2·S·d_h in the residual stream's dtype, added by hand as for Qwen's). The CUDA kernel's
mask and log-sum-exp padding, read from PyTorch's source, by hand."""
import pytest

from accounting.architecture.hf_config import translate
from accounting.ledger.builder import vision as VB
from accounting.ledger.builder import vision_saves as VS
from accounting.ledger.builder.vision_saves_pixtral import whole_forward
from test_vision_mistral3 import DATA
from test_vision_train import _precision, _saved_bytes, _sdpa_model

P = 14
# one image; two of one size (S = 2·24 = 48, a multiple of 8); three of three sizes (the
# conv's input padded to 4×6 patches; 3×6 patches unfold into 1×3 merged rows)
FORWARDS = [[(56, 84)], [(56, 84), (56, 84)], [(56, 84), (28, 28), (42, 84)]]


def _pixtral_image(torch, model, sizes, dtype, ac):
    """Mistral3Model.get_image_features on one forward of images of `sizes` (the processor's
    padded batch: each padded to the largest height and width), in `ac`: the features
    summed."""
    h, w = max(s[0] for s in sizes), max(s[1] for s in sizes)
    px = torch.randn(len(sizes), 3, h, w, dtype=dtype)

    def call():
        with ac:
            f = model.model.get_image_features(pixel_values=px,
                                               image_sizes=torch.tensor(sizes)).pooler_output
        return sum(x.float().sum() for x in f)
    return call


def _measured(sizes, mode: str, checkpointed: bool = False) -> int:
    torch, model = _sdpa_model(DATA, mode, checkpointed=checkpointed)
    return _saved_bytes(model, _pixtral_image(torch, model, sizes, *_precision(torch, mode)))


def _ours(sizes, mode: str, device: str = "cpu", checkpointed: bool = False) -> int:
    spec = translate(DATA, "c", "m3").vision
    ledger, grids = VB.walk(spec), [(h // P, w // P) for h, w in sizes]
    per = once = 0
    for g in grids:
        p, once = VS.bytes_per_image(ledger, VB.values(spec, *g), mode, device, checkpointed)
        per += p
    return per + once + whole_forward(spec, grids, mode, device, checkpointed).bytes(1)


@pytest.mark.parametrize("mode", VS.MODES)
@pytest.mark.parametrize("sizes", FORWARDS)
def test_pixtral_saves_equal_transformers(sizes, mode):
    """The images' own saves plus the forward's block mask: (S, S) once in fp32 and bf16
    (every layer's sdpa saves the one tensor), a bf16 copy per layer under autocast."""
    assert _ours(sizes, mode) == _measured(sizes, mode)


@pytest.mark.parametrize("mode", VS.MODES)
def test_pixtral_checkpointed_equals_transformers(mode):
    sizes = FORWARDS[2]
    spec = translate(DATA, "c", "m3").vision
    s = sum((h // P) * (w // P) for h, w in sizes)
    rotary = 2 * s * spec.head_dim * (2 if mode == "bf16" else 4)
    assert _ours(sizes, mode, checkpointed=True) == \
        _measured(sizes, mode, checkpointed=True) + rotary


def test_the_mask_grows_as_the_square_of_the_forward_by_hand():
    """Hand algebra, fp32 on the CPU, one 56×84 image a sequence (4·6 = 24 patches): a
    forward of B sequences holds one (24B)² fp32 mask, 4·576·B² bytes; bf16 under autocast,
    a copy in each of the 2 layers: 2·2·576·B²."""
    spec = translate(DATA, "c", "m3").vision
    for b in (1, 2, 5):
        assert whole_forward(spec, [(4, 6)], "fp32", "cpu").bytes(b) == 4 * 576 * b * b
        assert whole_forward(spec, [(4, 6)], "autocast", "cpu").bytes(b) == 2 * 2 * 576 * b * b


def test_cuda_memory_efficient_kernel_by_hand():
    """CUDA's masked sdpa runs the memory-efficient kernel (read from PyTorch's source, not
    measured): S = 24 (one image of 4×6 patches) is a multiple of 8, so bf16 parameters
    keep the one mask (24² · 2 bytes) and the log-sum-exp pads 24 rows to 32 (2 layers ·
    2 heads · 8 · 4 bytes); S = 6 (a 2×3 image) is not: each layer saves its own copy
    padded to 8 columns (2 · 6·8 · 2) and the log-sum-exp pads 6 to 32 (2·2·26·4)."""
    spec = translate(DATA, "c", "m3").vision
    assert whole_forward(spec, [(4, 6)], "bf16").bytes(1) == 24 * 24 * 2 + 2 * 2 * 8 * 4
    assert whole_forward(spec, [(2, 3)], "bf16").bytes(1) == 2 * 6 * 8 * 2 + 2 * 2 * 26 * 4
    # B = 4 sequences of the 2×3 image: S = 24, aligned again (one mask)
    assert whole_forward(spec, [(2, 3)], "bf16").bytes(4) == 24 * 24 * 2 + 2 * 2 * 8 * 4


def test_other_towers_have_no_whole_forward_term():
    from test_vision_train import CONFIGS
    spec = translate(CONFIGS["qwen2_5_vl"], "c", "q").vision
    assert whole_forward(spec, [(8, 8)], "bf16") is None


def test_many_gpu_plan_holds_the_micro_batchs_mask():
    """PP 2, micro-batches of 2 sequences with one 112×112 image each (8×8 patches), bf16:
    the first stage's activations of one micro-batch hold what transformers' tower saves for
    one forward of the 2 images (S = 128 under one block mask: a multiple of 32, so CUDA's
    bytes are the CPU's) more than without the tower; the last stage's are unchanged."""
    from accounting.analysis.images import workload
    from accounting.planning.memory import get_precision
    from accounting.planning.parallel.layout import Layout
    from accounting.planning.parallel.plan import parallel_plan
    from accounting.planning.parallel.vision import tower_for
    hf = translate(DATA, "c", "m3")
    p = get_precision("bf16")

    def acts(tower):
        run_tower = tower_for(hf.vision, workload(hf.vision, ["112x112"], None), p, "adamw",
                              True, "none", 64) if tower else None
        lo = Layout(4, 1, 2, 2, zero=0, micro_batch=2, global_batch=8)
        plan = parallel_plan(hf.config, lo, 64, precision=p, implementation="transformers",
                             tower=run_tower)
        return {s.stage: s.activations.per_micro_batch.at(2) for s in plan.stages}
    with_tower, without = acts(True), acts(False)
    assert with_tower[1] == without[1]
    assert with_tower[0] - without[0] == _measured([(112, 112)] * 2, "bf16")


def test_largest_batch_counts_the_mask_at_that_batch():
    """The fit with Pixtral's B² mask (one 112×112 image a sequence: (64·B)² bf16 elements):
    the largest batch's exact bytes fit and the next batch's do not, and the bytes the answer
    gives at the largest batch include its mask, 2·(64·B)², above the a·B + b line."""
    from accounting.analysis.images import workload
    from accounting.planning.plan import plan
    hf = translate(DATA, "c", "m3")
    p = plan(hf.config, 256, 1, gpu="H100", precision="bf16", tower=hf.vision,
             train_vision=True, images=workload(hf.vision, ["112x112"], None))
    bf, model = p.batch_fit, p.memory.model
    b = bf.largest
    assert b > 1
    assert bf.bytes_at_largest == model.fit_bytes(b, 256) <= bf.budget.usable \
        < model.fit_bytes(b + 1, 256)
    assert bf.bytes_at_largest - (bf.per_sequence * b + bf.fixed) >= 2 * (64 * b) ** 2 - \
        2 * 64 ** 2
