"""A checkpoint's tensors as read (safetensors headers, headers.py; a GGUF file's tensor table,
gguf_file.py): the records both readers return, apart from either so that headers.read can
dispatch to gguf_file without an import circle."""
from __future__ import annotations

from dataclasses import dataclass
from math import prod


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int  # stored: data_offsets[1] − data_offsets[0]
    file: str

    @property
    def elements(self) -> int:
        return prod(self.shape)


@dataclass(frozen=True)
class Checkpoint:
    source: str  # what was read, for messages ('DIR', 'ORG/NAME (the hub at …)')
    tensors: tuple[Tensor, ...]
    files: int
    gguf_arch: str | None = None  # a GGUF file's general.architecture (llama.cpp's names)

    @property
    def bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    def bytes_by_dtype(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors:
            out[t.dtype] = out.get(t.dtype, 0) + t.nbytes
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))
