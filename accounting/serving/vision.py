"""A vision-language model's tower in a serving plan (issue 41, Must 3): its weights on each
GPU, and what vLLM's start-up profile run adds for it: the encoder run on the largest input
the image processor allows, and the encoder cache (the dummy encoder outputs, held while the
language model's dummy forward runs). Pure Python; every count is the tower's ledger
(accounting/ledger/builder/vision.py) evaluated at that input (accounting/analysis/images.py).

vLLM V1 (read in its 0.8-era and 2025-26 sources; the encoder budget and the held outputs are
the same throughout, the max_num_reqs · limit cap on the items came in 2025: at 0.8 the items
were budget // item tokens; vLLM 0.8.2 printed "budget of 16384 tokens, and profiled with 1
image items" for Qwen2.5-VL-7B on an H100, QwenLM/Qwen3-VL issue #1057, tests/test_vision_serve.py):
  item     vllm/multimodal/profiling.py and each model's ProcessingInfo: the dummy item is the
           image with the most features, get_image_size_with_most_features (Qwen2-VL and
           Qwen2.5-VL, vllm/model_executor/models/qwen2_vl.py: _get_vision_info of a
           9,999,999 × 9,999,999 image, smart_resize within the processor's min/max_pixels:
           sqrt(max_pixels) a side in multiples of patch·merge); its tokens are
           max_tokens_per_mm_item. Gemma 3 (vllm/model_executor/models/gemma3_mm.py,
           Gemma3ProcessingInfo, vLLM main of 2025: e5fa945): a 50·max_num_crops × 50 image
           (get_image_size_with_most_features), its crops by get_num_crops (a copy of
           Gemma3ImageProcessor's pan-and-scan) and (num_crops + 1)·image_seq_length tokens
           (get_num_image_tokens): with pan-and-scan off, or at its default min crop size
           256 (a 50-pixel side is below it), no crops and 256 tokens, though a request's
           image may then carry (1 + max_num_crops)·256. Fixed-resolution towers: their
           image_size². Video, where the
           model takes it, is not modelled (vLLM profiles the modality with the most tokens;
           `--limit-mm-per-prompt video=0` leaves images).
  budget   vllm/v1/core/encoder_cache_manager.py, compute_encoder_budget:
           encoder_compute_budget = max(max_num_encoder_input_tokens, max_tokens_per_mm_item),
           encoder_cache_size = max(encoder_cache_size, max_tokens_per_mm_item), both
           SchedulerConfig fields set to max_num_batched_tokens (vllm/config/scheduler.py).
  disabled --limit-mm-per-prompt 0 (every modality off): no encoder budget ("Encoder cache
           will not be initialized", compute_encoder_budget), no profile; vLLM's current
           models build no tower at all (vllm/model_executor/models/interfaces.py,
           SupportsMultiModal._mark_tower_model: "Tower model components are automatically
           skipped when --limit-mm-per-prompt is set to zero for all of their modalities"),
           the engine record's skips_disabled_tower.
  items    vllm/v1/worker/gpu_model_runner.py, GPUModelRunner.profile_run: max(1, min(budget //
           max_tokens_per_mm_item, max_num_reqs · limit_mm_per_prompt)) items of the maximum
           size run through get_multimodal_embeddings in one batch; the outputs are kept in
           self.encoder_cache["tmp"] while _dummy_run(max_num_tokens) and the sampler run, then
           cleared. limit_mm_per_prompt defaults to 999 in V1 (vllm/config/multimodal.py).
  peak     the profile's torch peak is therefore max(the encoder's own peak, the encoder cache
           + the language model's dummy-run peak), which replaces the language model's alone.
  weights  the tower's linears are tensor-parallel (qwen2_5_vl.py: Qwen2_5_VisionAttention's
           QKVParallelLinear and RowParallelLinear, Qwen2_5_VisionMLP's
           MergedColumnParallelLinear and RowParallelLinear, the merger's Column/RowParallel;
           disable_tp under --mm-encoder-tp-mode data): a matrix is 1/tp on each GPU; the
           patch embedding, position tables, norms and biases are counted whole on each (an
           upper bound for the column-parallel biases). Every pipeline stage is charged the
           tower (an upper bound: vLLM builds it on the first stage).
SGLang loads the tower before it measures its pool, so the weights come off the pool; it
runs no profile, and the encoder's activations live in its reserve. Where mem_fraction_static
is its default, a multimodal model's is scaled down (python/sglang/srt/server_args.py,
ServerArgs.adjust_mem_fraction_for_vlm, sglang main of 2025-26): by 0.95 × clamp(1 − 0.1 ·
(L·d² / (24·1,024²) − 1), 0.8, 1.05), L and d getattr(vision_config, "num_hidden_layers", 24)
and getattr(vision_config, "hidden_size", 1024) (ViT-L/14 the baseline): read here from the
config.json's vision_config keys, those defaults where it has none (Qwen's tower says
"depth", so SGLang sees 24 layers); a config class that defines the key by default would
give SGLang its class default instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.analysis.images import image_row
from accounting.architecture.vision import VisionSpec
from accounting.ledger.builder import vision as VB

ACT = 2  # bf16 activations and encoder outputs
PIXEL_INPUT = 4 + ACT  # the processor's float32 pixel_values on the GPU and their bf16 cast
HUGE = 9_999_999  # vLLM's _get_vision_info probe (qwen2_vl.py get_image_size_with_most_features)
GEMMA3_PROBE = 50  # gemma3_mm.py: ImageSize(height=50 * max_num_crops, width=50)
V1_LIMIT_PER_PROMPT = 999  # vllm/config/multimodal.py: MultiModalConfig.limit_per_prompt (V1)
# the tower's module names quantization configs use to leave it unquantized
TOWER_NAMES = ("visual", "vision_tower", "vision_model", "multi_modal_projector",
               "mm_projector", "embed_vision")
# the quantization_config keys that list modules left in the checkpoint's dtype
IGNORE_KEYS = ("ignore", "modules_to_not_convert", "ignored_layers", "exclude_modules",
               "llm_int8_skip_modules")
_REPLICATED = ("patch_embed", "embedding", "pos_emb", "class_embedding")


@dataclass(frozen=True)
class TowerServe:
    """The tower's terms in one GPU's start-up, bytes per GPU."""
    family: str
    params: int
    weights_bytes: int  # per GPU, as vLLM shards it
    weights_why: str
    item_size: tuple[int, int]  # the largest image, as the processor resizes it
    item_patches: int  # the patches (and class tokens) the blocks run for one item
    item_tokens: int  # max_tokens_per_mm_item
    budget_tokens: int  # encoder compute budget = encoder cache size
    items: int  # profiled together
    encoder_peak_bytes: int  # the encoder run's own peak
    cache_bytes: int  # the dummy outputs held during the language model's dummy run
    # the tokens one request's image can carry beyond the profiled item's (Gemma 3's
    # pan-and-scan crops that vLLM's probe does not reach); 0: none
    unprofiled_tokens: int = 0

    def profile_peak(self, language_peak: int) -> int:
        """vLLM's torch peak of the profile run with the tower (profile_run's order)."""
        return max(self.encoder_peak_bytes, self.cache_bytes + language_peak)


def weights_per_gpu(spec: VisionSpec, tp: int, dtype_bytes: int = ACT) -> int:
    """The tower's bytes on one TP rank: 2-D linear weights 1/tp (ceil), the rest whole."""
    ledger, sizes = VB.walk(spec), VB.values(spec)
    total = 0
    for p in ledger.params:
        n = p.numel(sizes) * p.count(sizes)
        leaf = p.name.rsplit(".", 1)[-1]
        sharded = (len(p.shape) == 2 and leaf == "weight"
                   and not any(r in p.name for r in _REPLICATED))
        total += -(-n // tp) if sharded else n
    return total * dtype_bytes


def unquantized_by(quant) -> str | None:
    """The quantization_config entry that leaves the tower unquantized (None: none does)."""
    if not isinstance(quant, dict):
        return None
    for key in IGNORE_KEYS:
        entries = quant.get(key)
        for e in entries if isinstance(entries, (list, tuple)) else ():
            if isinstance(e, str) and any(t in e for t in TOWER_NAMES):
                return f"{key}: {e[:40]!r}"
    return None


def encoder_peak(spec: VisionSpec, patches: int, tokens: int, tp: int) -> int:
    """The encoder's activation peak on one TP rank for `patches` rows (every item's, batched
    as vLLM concatenates them), an estimate as serving/activation.py's forward_peak:
    the pixel input (float32 and its bf16 cast) + 3·N·d_v (the residual, the block's input
    and its norm) + the larger of the MLP's N·3·f_v/tp (gated: gate-up and the product;
    else fc1's output and its activation, 2·f_v) and the attention's N·4·d_v/tp (q, k, v
    and its output; flash-attention's varlen kernel, which vLLM's vision attention takes on
    Ampere and Hopper, keeps no score matrix) + the outputs (tokens × d_t)."""
    s = spec
    pixels = patches * s.channels * s.temporal_patch * s.patch * s.patch * PIXEL_INPUT
    mlp = patches * (3 if s.mlp_gated else 2) * s.mlp_width // tp
    attn = patches * 4 * s.heads * s.head_dim // tp
    return pixels + (3 * patches * s.width + max(mlp, attn) + tokens * s.text_width) * ACT


def largest_item(spec: VisionSpec, pixels: tuple[int, int] | None = None):
    """The processor's largest image (vLLM's dummy item): the image_row of a huge square
    image, which each processor brings within its bound; Gemma 3's probe, 50·max_num_crops
    × 50 (gemma3_mm.py get_image_size_with_most_features), through its pan-and-scan."""
    if spec.family == "gemma3":
        return image_row(spec, (GEMMA3_PROBE * spec.pan_max_crops, GEMMA3_PROBE), pixels)
    return image_row(spec, (HUGE, HUGE), pixels)


def tower_terms(spec: VisionSpec, tp: int, max_num_batched_tokens: int, max_num_seqs: int,
                quant=None, pixels: tuple[int, int] | None = None,
                dtype_bytes: int = ACT, limit: int | None = None,
                builds_disabled: bool = True) -> TowerServe:
    """`limit`: images per prompt (--limit-mm-per-prompt; None: V1's 999); 0 turns the
    encoder off (no profile) and, where the engine skips a disabled tower
    (`builds_disabled` False), its weights too."""
    limit = V1_LIMIT_PER_PROMPT if limit is None else limit
    row = largest_item(spec, pixels)
    per_item = row.patches + (row.tiles if spec.class_token else 0)
    t = row.tokens
    budget = max(max_num_batched_tokens, t) if limit else 0
    items = max(1, min(budget // t, max_num_seqs * limit)) if limit else 0
    skip = unquantized_by(quant)
    why = ("bf16" if quant is None else
           f"bf16: the quantization_config leaves it unquantized ({skip})" if skip else
           "bf16, an upper bound: the quantization_config names no tower module to skip, and "
           "the tool does not read the tower's quantized format")
    ledger = VB.walk(spec)
    params = ledger.param_count(VB.values(spec))
    if not limit and not builds_disabled:
        why = "not loaded: --limit-mm-per-prompt 0 skips the tower (_mark_tower_model)"
    weights = weights_per_gpu(spec, tp, dtype_bytes) if limit or builds_disabled else 0
    most = (1 + spec.pan_max_crops) * spec.tokens_per_image if spec.pan_scan else t
    return TowerServe(spec.family, params, weights, why,
                      row.resized, per_item, t, budget, items,
                      encoder_peak(spec, items * per_item, items * t, tp),
                      items * t * spec.text_width * ACT, max(0, most - t))


SGLANG_VLM_BASE = Fraction(95, 100)
SGLANG_VLM_BASELINE = 24 * 1024 ** 2  # ViT-L/14: 24 layers of 1,024


def sglang_vlm_factor(vision_config) -> Fraction:
    """SGLang's scale on a multimodal model's default mem_fraction_static (above)."""
    vc = vision_config if isinstance(vision_config, dict) else {}
    layers, hidden = vc.get("num_hidden_layers", 24), vc.get("hidden_size", 1024)
    if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0
               for x in (layers, hidden)):
        layers, hidden = 24, 1024  # the tower's reader refuses such a file before this
    ratio = Fraction(layers * hidden * hidden, SGLANG_VLM_BASELINE)
    dynamic = min(Fraction(105, 100), max(Fraction(8, 10), 1 - Fraction(1, 10) * (ratio - 1)))
    return SGLANG_VLM_BASE * dynamic
