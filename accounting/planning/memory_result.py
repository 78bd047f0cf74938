"""A training-memory model evaluated at one workload (accounting/planning/memory.py's
MemoryModel.at): the rows of every activation record and the items' bytes."""
from __future__ import annotations

from dataclasses import dataclass

from accounting.ledger import records as R

COURSE, MODEL = "course", "model"


def in_scope(a: R.Activation, scope: str) -> bool:
    return bool(a.course) if scope == COURSE else a.saved


@dataclass(frozen=True)
class ActivationRow:
    record: R.Activation
    elements: int  # all copies, all layers
    bytes_per_element: int

    @property
    def bytes(self) -> int:
        return self.elements * self.bytes_per_element


@dataclass(frozen=True)
class TrainingMemory:
    model: object  # the MemoryModel evaluated
    batch: int
    seq: int
    items: tuple  # memory.MemoryItem each
    per_sequence: int  # a
    fixed: int  # b
    activation_rows: tuple[ActivationRow, ...]  # every record, in or out of scope
    parameters: int  # N
    matmul_weights: int  # N_matmul
    trainable: int = 0  # parameters trained (training_state's trained tensors; LoRA: the adapters)

    @property
    def total(self) -> int:
        return sum(i.bytes for i in self.items if i.on_gpu)

    @property
    def activation_bytes(self) -> int:
        return sum(i.bytes for i in self.items if i.name.startswith("activations"))

    def scope_bytes(self, scope: str) -> int:
        """Activation bytes of either list at this workload (without recomputation)."""
        return sum(r.bytes for r in self.activation_rows if in_scope(r.record, scope))
