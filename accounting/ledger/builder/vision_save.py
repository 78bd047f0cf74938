"""One saved tensor of a trained vision tower (issue 41, Must 3): the record the vision
builder's walk of each family writes (vision_walk.py Walk.save), in the vision ledger's
symbols (builder/vision.py values()); its dtype is a role vision_saves.roles() resolves."""
from __future__ import annotations

from dataclasses import dataclass

from accounting.ledger.symbols import product

BLOCK = "L_v"


@dataclass(frozen=True)
class Save:
    name: str
    module: str
    repeat: str | None  # "L_v": in each block; None: once per image
    elements: tuple[str, ...]
    role: str
    fixed: bool = False  # once per forward of the tower, not per image
    copies: int = 1  # elements × copies (Qwen3-VL's 4 interpolation corners per patch)
    # saved only for the gradient of the op's input (an RMSNorm's fp32 input and rsqrt, Gemma
    # 3's avg_pool input): not saved where that input needs none, as a projector trained on
    # a frozen tower's output (vision_saves_projector.py)
    input_grad: bool = False
    # an op of the tower's forward on the projector's output (Qwen2.5-VL's reverse_indices):
    # saved when the projector trains, though outside its modules
    after_projector: bool = False

    def bytes(self, values: dict[str, int], roles: dict[str, int]) -> int:
        n = product(self.elements, values) * roles[self.role] * self.copies
        return n * (values[self.repeat] if self.repeat else 1)
