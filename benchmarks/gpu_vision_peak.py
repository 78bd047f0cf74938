"""H200 (issue 41): Qwen2.5-VL-72B's vision tower (transformers' Qwen2_5_VisionTransformerPretrainedModel,
bf16, attn_implementation sdpa, random weights) forward under no_grad, one image at
3584x3584 (the processor's largest at max_pixels 12,845,056: a 256 x 256 patch grid,
65,536 patches, 16,384 merged tokens), 1024x1024 (74 x 74 grid) and 448x448 (32 x 32).
Peak = max_memory_allocated during the forward minus the memory allocated before it
(weights and the input).

    python benchmarks/gpu_vision_peak.py tests/data/serving/Qwen2.5-VL-72B-Instruct.json OUT_DIR

Run on the lent H200 on 2026-11-28 (torch 2.11.0+cu130, transformers 5.17.0); its output is
tests/data/vision_peak_h200.json, read by tests/test_vision_peak_h200.py."""
import json, sys, time
import torch
from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel

out = sys.argv[2]
cfg = json.load(open(sys.argv[1]))["vision_config"]
vc = Qwen2_5_VLVisionConfig(**{k: v for k, v in cfg.items() if k not in ("model_type",)})
vc._attn_implementation = "sdpa"
with torch.device("cuda"):
    m = Qwen2_5_VisionTransformerPretrainedModel._from_config(vc, torch_dtype=torch.bfloat16).eval()
rows = []
for grid in (256, 74, 32):
    torch.cuda.empty_cache()
    n = grid * grid
    px = torch.randn(n, 3 * 2 * 14 * 14, device="cuda", dtype=torch.float32)
    thw = torch.tensor([[1, grid, grid]], device="cuda")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        y = m(px, grid_thw=thw)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    t0 = time.perf_counter()
    with torch.no_grad():
        y = m(px, grid_thw=thw)
    torch.cuda.synchronize()
    shape = list(getattr(y, "last_hidden_state", y if torch.is_tensor(y) else y[0]).shape)
    rows.append(dict(grid=grid, patches=n, peak_bytes=peak, reserved=torch.cuda.max_memory_reserved(),
                     seconds=time.perf_counter() - t0, out_shape=shape))
    print(json.dumps(rows[-1]), flush=True)
    del px, y
json.dump(dict(torch=torch.__version__, params=sum(p.numel() for p in m.parameters()),
               rows=rows), open(out + "/vision_peak_h200.json", "w"), indent=1)
