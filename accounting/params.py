"""Parameter tensors of model.TransformerLM, in state-dict order, with symbolic shapes."""
from __future__ import annotations

from dataclasses import dataclass

from accounting.symbols import monomial, product
from accounting.units import BYTES_PER_ELEMENT

EMBEDDING = "token embedding"
ATTN_PROJ = "attention projections"
FFN = "feed-forward"
NORMS = "RMSNorm gains"
LM_HEAD = "LM head"
COMPONENTS = (EMBEDDING, ATTN_PROJ, FFN, NORMS, LM_HEAD)


@dataclass(frozen=True)
class Param:
    name: str  # state-dict key; "{i}" stands for the layer index
    component: str
    shape: tuple[str, ...]
    per_layer: bool

    def formula(self) -> str:
        return monomial(1, self.shape)

    def numel(self, values: dict[str, int]) -> int:
        return product(self.shape, values)

    def count(self, values: dict[str, int]) -> int:
        return values["L"] if self.per_layer else 1


PARAMS: tuple[Param, ...] = (
    Param("token_embeddings.weight", EMBEDDING, ("V", "d_model"), False),
    Param("layers.{i}.ln1.weight", NORMS, ("d_model",), True),
    Param("layers.{i}.attn.q_proj.weight", ATTN_PROJ, ("d_model", "d_model"), True),
    Param("layers.{i}.attn.k_proj.weight", ATTN_PROJ, ("d_model", "d_model"), True),
    Param("layers.{i}.attn.v_proj.weight", ATTN_PROJ, ("d_model", "d_model"), True),
    Param("layers.{i}.attn.output_proj.weight", ATTN_PROJ, ("d_model", "d_model"), True),
    Param("layers.{i}.ln2.weight", NORMS, ("d_model",), True),
    Param("layers.{i}.ffn.w1.weight", FFN, ("d_ff", "d_model"), True),
    Param("layers.{i}.ffn.w2.weight", FFN, ("d_model", "d_ff"), True),
    Param("layers.{i}.ffn.w3.weight", FFN, ("d_ff", "d_model"), True),
    Param("ln_final.weight", NORMS, ("d_model",), False),
    Param("lm_head.weight", LM_HEAD, ("V", "d_model"), False),
)


def state_dict_keys(num_layers: int) -> list[str]:
    """The model's state-dict keys in order (layer tensors grouped by layer)."""
    head = [p.name for p in PARAMS if not p.per_layer and p.name.startswith("token")]
    tail = [p.name for p in PARAMS if not p.per_layer and not p.name.startswith("token")]
    layer = [p.name for p in PARAMS if p.per_layer]
    return head + [n.format(i=i) for i in range(num_layers) for n in layer] + tail


def memory_bytes(n_params: int) -> dict[str, int]:
    """Bytes to hold n_params in each dtype of units.BYTES_PER_ELEMENT."""
    return {dtype: n_params * b for dtype, b in BYTES_PER_ELEMENT.items()}
