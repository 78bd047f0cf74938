"""The vision builder's walk (builder/vision.py walk()): the records each family's module
(vision_vit.py, vision_qwen.py, vision_gemma4.py, vision_pixtral.py) emits as it goes through
its tower once in forward order: each parameter (its state-dict key), each matmul of one
image, and what autograd saves for the backward pass (vision_save.Save, the roles of
vision_saves.py); and the block's ops the towers share (attention matmuls, MLPs)."""
from __future__ import annotations

from accounting.ledger import records as R
from accounting.architecture.vision import VisionSpec
from accounting.ledger.builder.vision_save import Save

VISION = "vision encoder"  # the component of every record here (tower and projector)
BLOCK = "{i}"


class Walk:
    def __init__(self, spec: VisionSpec):
        self.spec, self.params, self.matmuls, self.projector = spec, [], [], []
        self.saves: list[Save] = []  # one image's, in forward order (and the fixed ones)

    def param(self, name: str, shape: tuple[str, ...], repeat: str | None = None,
              projector: bool = False) -> None:
        module = name.rsplit(".", 1)[0]
        self.params.append(R.Param(name, VISION, module, repeat, shape))
        if projector:
            self.projector.append(name)

    def linear(self, name: str, d_in: str, d_out: str, bias: bool, repeat: str | None = None,
               projector: bool = False) -> None:
        self.param(f"{name}.weight", (d_out, d_in), repeat, projector)
        if bias:
            self.param(f"{name}.bias", (d_out,), repeat, projector)

    def norm(self, name: str, kind: str, repeat: str | None = None, width: str = "d_v",
             projector: bool = False) -> None:
        self.param(f"{name}.weight", (width,), repeat, projector)
        if kind == "layernorm":
            self.param(f"{name}.bias", (width,), repeat, projector)

    def matmul(self, name: str, module: str, m: tuple, n: tuple, p: tuple,
               repeat: str | None = None, batch: tuple = ()) -> None:
        self.matmuls.append(R.Matmul(name, VISION, module, repeat, R.FORWARD, batch, m, n, p))

    def save(self, *args, **kwargs) -> None:
        """One saved tensor (vision_save.Save's fields)."""
        self.saves.append(Save(*args, **kwargs))


def qkv_matmuls(w: Walk, prefix: str, names: dict[str, str]) -> None:
    """Q, K, V on N tokens: one fused qkv or three."""
    if "qkv" in names:
        w.matmul("QKV", f"{prefix}.{names['qkv']}", ("N",), ("d_v",), ("3d_v",), "L_v")
    else:
        for x in ("q", "k", "v"):
            w.matmul(x.upper(), f"{prefix}.{names[x]}", ("N",), ("d_v",), ("d_v",), "L_v")


def core_matmuls(w: Walk, s: VisionSpec, prefix: str, names: dict[str, str]) -> None:
    """The attention core per segment (QKᵀ and scores·V: h_v·S·d_hv each, S = Σ segment
    length²; Qwen2.5-VL's full and window blocks apart)."""
    if s.window is not None:
        core = (("L_vf", "S_f", "full-attention blocks"), ("L_vw", "S_w", "window blocks"))
    else:
        core = (("L_v", "S_f", ""),)
    for repeat, pairs, where in core:
        label = f" ({where})" if where else ""
        w.matmul(f"QKᵀ{label}", f"{prefix}.{names['core']}", (pairs,), ("d_hv",), ("1",),
                 repeat, ("h_v",))
        w.matmul(f"scores·V{label}", f"{prefix}.{names['core']}", (pairs,), ("d_hv",), ("1",),
                 repeat, ("h_v",))


def out_matmul(w: Walk, prefix: str, names: dict[str, str]) -> None:
    w.matmul("attention output", f"{prefix}.{names['out']}", ("N",), ("d_v",), ("d_v",), "L_v")


def mlp_matmuls(w: Walk, s: VisionSpec, prefix: str, which: str = "all") -> None:
    """The block's MLP on N tokens (gated: gate, up, then down; else fc1, then fc2); `which`:
    "in" the first (gate and up, or fc1), "out" the second, "all" both."""
    if which in ("in", "all"):
        if s.mlp_gated:
            for x in ("gate", "up"):
                w.matmul(f"MLP {x}", f"{prefix}.mlp.{x}_proj", ("N",), ("d_v",), ("f_v",), "L_v")
        else:
            w.matmul("MLP fc1", f"{prefix}.mlp.fc1", ("N",), ("d_v",), ("f_v",), "L_v")
    if which in ("out", "all"):
        if s.mlp_gated:
            w.matmul("MLP down", f"{prefix}.mlp.down_proj", ("N",), ("f_v",), ("d_v",), "L_v")
        else:
            w.matmul("MLP fc2", f"{prefix}.mlp.fc2", ("N",), ("f_v",), ("d_v",), "L_v")


def mlp(w: Walk, s: VisionSpec, b: str, repeat: str, fc1: str = "fc1",
        act: str = "activation_fn", fc2: str = "fc2") -> None:
    """A block's fc2(act(fc1(x))) (VisionMlp, Qwen3VLVisionMLP, SiglipMLP, CLIPMLP): fc1 (its
    input saved), the activation (its input; QuickGELU x·sigmoid(1.702x) also its sigmoid),
    fc2 (its input). `fc1`, `act`, `fc2`: the modules' names under the block's mlp."""
    w.save("fc1 input", f"{b}.mlp.{fc1}", repeat, ("N", "d_v"), "A")
    mlp_matmuls(w, s, b, "in")
    w.save(f"{s.act} input", f"{b}.mlp.{act}", repeat, ("N", "f_v"), "A")
    if s.act == "quick_gelu":
        w.save("QuickGELU sigmoid output", f"{b}.mlp.{act}", repeat, ("N", "f_v"), "A")
    w.save("fc2 input", f"{b}.mlp.{fc2}", repeat, ("N", "f_v"), "A")
    mlp_matmuls(w, s, b, "out")


def gated_mlp(w: Walk, m: str, act: str, repeat: str, inputs: bool = True) -> None:
    """down(act(gate(x)) · up(x)) under module `m` (Gemma4VisionMLP, PixtralMLP): the input
    gate_proj saves (`inputs`; under autocast up_proj casts its own copy), gate and up, the
    activation's input, the product's two operands, down (its input)."""
    if inputs:
        w.save("gate/up input", f"{m}.gate_proj", repeat, ("N", "d_v"), "A")
        w.save("up_proj's own input copy", f"{m}.up_proj", repeat, ("N", "d_v"), "AC")
    for x in ("gate", "up"):
        w.matmul(f"MLP {x}", f"{m}.{x}_proj", ("N",), ("d_v",), ("f_v",), "L_v")
    for x in (f"{act} input", f"{act} output (the product's)", "up_proj output (the product's)",
              "down_proj input"):
        w.save(x, m, repeat, ("N", "f_v"), "A")
    w.matmul("MLP down", f"{m}.down_proj", ("N",), ("f_v",), ("d_v",), "L_v")
