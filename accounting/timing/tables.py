"""Measured kernel tables: NVIDIA's aiconfigurator-core wheel (PyPI, Apache-2.0), read where
it is installed; nothing of its data is copied into this repository.

The wheel ships, per system (aiconfigurator_core/systems/<system>.yaml) and per engine and
engine version (systems/data/<system>/<op>/<engine>/<version>/*.parquet), latencies in
milliseconds measured on the GPU:
  gemm_perf.parquet                         (kernel_source, gemm_dtype, m, n, k) -> latency
  context_attention_perf.parquet            (batch_size, isl, num_heads, num_key_value_heads,
                                             head_dim, window_size, dtypes) -> latency
  generation_attention_perf.parquet         (batch_size, step = the cached keys, ...) -> latency
  nccl_perf.parquet, custom_allreduce_perf  (op_name, num_gpus, message_size) -> latency
and each system's memory bandwidth with its "mem_bw_empirical_scaling_factor" and
"mem_empirical_constant_latency" (the yaml's own words: "some nonofficial correction based
on observations").

pyarrow, numpy and yaml are imported inside the functions that read (never at `import
accounting`); each table is read once per process. A query inside a table's grid is
interpolated linearly in each of its dimensions; outside it is clamped at the smallest
measured size or, above the largest, scaled in proportion to the work from the largest
measured point — and every such query is labelled (Lookup.note), never silent.
"""
from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

PACKAGE, DISTRIBUTION = "aiconfigurator_core", "aiconfigurator-core"
MS = 1e-3  # the tables' latencies are in milliseconds

# accounting/planning/gpus.py's cards -> aiconfigurator-core's system files. A card that is
# not here (A100-40GB: its memory bandwidth is not the A100-SXM-80GB system's; AMD; consumer
# cards) is timed by the roofline, labelled so.
SYSTEMS = {"A100-80GB": "a100_sxm", "H100-SXM": "h100_sxm", "H200": "h200_sxm",
           "B200": "b200_sxm", "B300": "b300_sxm", "GB200": "gb200", "L40S": "l40s",
           "L4": "l4"}
# The engine whose tables time training's kernels: vLLM's GEMM table measures
# torch.nn.functional.linear (cuBLAS through torch, what a training step's nn.Linear runs)
# beside its fp8 kernels; its context-attention table FlashAttention-3 (vllm_flash_attn_fa3).
# (a folder of the wheel's data, systems/data/<system>/<op>/vllm/; serving reads its engine
# record's kernel_tables, serving/engines.py)
TRAINING_ENGINE = "vllm"


@lru_cache(maxsize=1)
def root() -> Path | None:
    """The wheel's systems folder, or None when aiconfigurator-core is not installed (looked
    up once a process: importlib's find_spec walks sys.path, a millisecond a call, and a
    search asks for it per layout)."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "systems"
    return path if path.is_dir() else None


@lru_cache(maxsize=1)
def package_version() -> str | None:
    """The installed wheel's version, from its dist-info folder's name beside the package
    (importlib.metadata scans every distribution: a tenth of a second on a first plan)."""
    base = root()
    if base is None:
        return None
    found = sorted(base.parent.parent.glob(f"{PACKAGE}-*.dist-info"))
    if found:
        return found[-1].name[len(PACKAGE) + 1:-len(".dist-info")]
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return None


def available() -> bool:
    return root() is not None


@lru_cache(maxsize=64)
def system_of(gpu_name: str | None) -> str | None:
    """The aiconfigurator-core system of a card of the GPU table, when it has one installed."""
    if gpu_name is None or gpu_name not in SYSTEMS or root() is None:
        return None
    return SYSTEMS[gpu_name] if (root() / f"{SYSTEMS[gpu_name]}.yaml").is_file() else None


def _version_key(v: str) -> tuple:
    """'0.5.6.post2' < '0.5.14' < '1.3.0rc20': numbers compared as numbers."""
    return tuple(int(x) if x.isdigit() else -1 if x in ("rc", "dev") else 0
                 for x in re.findall(r"\d+|[a-z]+", v))


SPEC_KEYS = ("mem_bw_empirical_scaling_factor", "mem_empirical_constant_latency", "nccl_version")


@lru_cache(maxsize=None)
def system_spec(system: str) -> dict:
    """The few scalars read from systems/<system>.yaml (SPEC_KEYS), each `key: value` on its
    own line there: read by a pattern, not a YAML parser (its import would cost a first
    plan a tenth of a second)."""
    text = (root() / f"{system}.yaml").read_text()
    out = {}
    for key in SPEC_KEYS:
        m = re.search(rf"^\s*{key}:\s*'?([^'#\s]+)'?", text, re.M)
        if m:
            out[key] = m.group(1)
    return out


@dataclass(frozen=True)
class Source:
    """Where a time comes from: the table file, its engine and version, the wheel's version."""
    system: str
    table: str  # e.g. "gemm_perf"
    engine: str
    version: str

    def __str__(self) -> str:
        return (f"aiconfigurator-core {package_version()} {self.system}/{self.engine} "
                f"{self.version} {self.table}")


def find(system: str, op: str, table: str, engine: str) -> Source | None:
    """The newest version of `engine` that measured `table` for `op` on `system`."""
    base = root() / "data" / system / op / engine
    if not base.is_dir():
        return None
    versions = sorted((d.name for d in base.iterdir() if (d / f"{table}.parquet").is_file()),
                      key=_version_key)
    return Source(system, table, engine, versions[-1]) if versions else None


def _path(src: Source, op: str) -> Path:
    return root() / "data" / src.system / op / src.engine / src.version / f"{src.table}.parquet"


@lru_cache(maxsize=None)
def _columns_cached(src: Source, op: str, names: tuple[str, ...]) -> dict:
    return _columns(src, op, list(names))


def _columns(src: Source, op: str, names: list[str]) -> dict:
    """Numpy arrays of the named columns (a string column read dictionary-encoded, then
    expanded: pyarrow's compute functions and its dataset layer import pandas, seconds on a
    first plan; neither is used)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    f = pq.ParquetFile(_path(src, op))
    strings = [n for n in names
               if f.schema_arrow.field(n).type in (pa.string(), pa.large_string())]
    t = pq.ParquetFile(_path(src, op), read_dictionary=strings).read(columns=names)
    out = {}
    for n in names:
        col = t.column(n)
        if n in strings:
            out[n] = Coded.of(col)
        else:
            parts = [_np(ch) for ch in col.chunks]
            out[n] = np.concatenate(parts) if parts else np.array([])
    return out


class Coded:
    """A string column as integer codes into its distinct values (arrow's dictionary
    encoding, the chunks' dictionaries merged): compared and selected as numpy arrays,
    never expanded into Python strings row by row."""

    def __init__(self, codes, names: list):
        self.codes, self.names = codes, names

    @classmethod
    def of(cls, col) -> Coded:
        import numpy as np
        index: dict = {}
        parts = []
        for ch in col.chunks:
            remap = np.array([index.setdefault(x, len(index)) for x in ch.dictionary.to_pylist()],
                             dtype=np.int64)
            parts.append(remap[_np(ch.indices)] if len(remap) else np.zeros(0, np.int64))
        return cls(np.concatenate(parts) if parts else np.zeros(0, np.int64), list(index))

    def __eq__(self, value):  # a row mask
        return self.codes == (self.names.index(value) if value in self.names else -1)

    def __getitem__(self, mask) -> Coded:
        return Coded(self.codes[mask], self.names)

    def __len__(self) -> int:
        return len(self.codes)

    def most_common(self):
        import numpy as np
        if not len(self.codes):
            return None
        return self.names[int(np.argmax(np.bincount(self.codes)))]

    def tolist(self) -> list:
        return [self.names[c] for c in self.codes.tolist()]


def _np(arr):
    """A primitive arrow array without nulls as numpy, from its data buffer (Array.to_numpy
    imports pandas on its first call)."""
    import numpy as np
    if arr.null_count:
        return np.array(arr.to_pylist(), dtype=float)
    name = str(arr.type)
    dtype = np.dtype({"double": "float64", "float": "float32", "halffloat": "float16"}.get(name, name))
    return np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset:arr.offset + len(arr)]


def read(src: Source, op: str, columns: tuple[str, ...], **equal) -> dict:
    """The table's `columns` (numpy arrays) on the rows where each keyword column equals its
    value; a keyword column the table does not have (A100's attention tables have no
    window_size: no windowed kernel measured) selects every row."""
    import numpy as np
    import pyarrow.parquet as pq
    have = set(pq.ParquetFile(_path(src, op)).schema_arrow.names)
    equal = {k: v for k, v in equal.items() if k in have}
    cols = _columns_cached(src, op, tuple(sorted({*columns, *equal})))
    keep = np.ones(len(cols[next(iter(cols))]), bool)
    for k, v in equal.items():
        keep &= cols[k] == v
    return {c: cols[c][keep] for c in columns}


@dataclass(frozen=True)
class Lookup:
    seconds: float
    note: str = ""  # "" inside the grid; else how the query left it (clamped, scaled)


def _axis(grid, x: float):
    """(i, j, w, scale, note) for x on a sorted grid: interpolate grid[i]..grid[j] with
    weight w; a factor `scale` for x beyond the largest point; a note when outside."""
    import numpy as np
    if x <= grid[0]:
        return 0, 0, 0.0, 1.0, "" if x == grid[0] else f"clamped up to {int(grid[0])}"
    if x >= grid[-1]:
        n = len(grid) - 1
        return n, n, 0.0, x / grid[-1], "" if x == grid[-1] else \
            f"scaled ×{x / grid[-1]:.3g} from {int(grid[-1])}"
    j = int(np.searchsorted(grid, x))
    i = j - 1
    return i, j, (x - grid[i]) / (grid[j] - grid[i]), 1.0, ""


class Grid:
    """A latency table on a product grid of its key columns (a point measured twice: the
    faster), interpolated multilinearly. The tables are not full products: the attention
    tables stop where batch × length passes a token budget (decode at batch 128 is measured
    up to 8,191 keys, at batch 2,048 up to 511). A missing point is filled from the largest
    measured one below it along the first axis, scaled in proportion to that axis (the
    work is linear in the batch, in a GEMM's rows); what is still missing, from its
    neighbours unscaled. A lookup that uses a filled point says so."""

    def __init__(self, cols: dict, keys: tuple[str, ...], value: str = "latency"):
        import numpy as np
        self.keys = keys
        self.axes = [np.unique(cols[k]).astype(float) for k in keys]
        idx = tuple(np.searchsorted(a, cols[k].astype(float)) for a, k in zip(self.axes, keys))
        arr = np.full([len(a) for a in self.axes], np.inf)
        np.minimum.at(arr, idx, cols[value].astype(float))
        arr[np.isinf(arr)] = np.nan
        self.measured = ~np.isnan(arr)
        arr = _fill(arr, 0, self.axes[0])  # proportional along the first axis
        for axis in range(arr.ndim):  # then any hole left from a neighbour
            arr = _fill(arr, axis)
        self.values = arr

    def __call__(self, *x: float, scales: tuple[bool, ...] | None = None) -> Lookup:
        """Latency (seconds) at x; beyond the largest point along an axis, the value there
        times x / x_max (work linear in that axis) when `scales` allows it for that axis."""
        import itertools
        parts = [_axis(a, float(v)) for a, v in zip(self.axes, x)]
        total, factor, notes, filled = 0.0, 1.0, [], False
        for corner in itertools.product((0, 1), repeat=len(parts)):
            w, idx = 1.0, []
            for bit, (i, j, wt, _, _) in zip(corner, parts):
                w *= wt if bit else 1 - wt
                idx.append(j if bit else i)
            if w:
                total += w * self.values[tuple(idx)]
                filled |= not self.measured[tuple(idx)]
        if filled:
            notes.append(f"past the measured {self.keys[0]} × {self.keys[-1]}: scaled from the "
                         f"largest measured {self.keys[0]}")
        for n, (k, p) in enumerate(zip(self.keys, parts)):
            if p[3] != 1.0 and (scales is None or scales[n]):
                factor *= p[3]
            if p[4]:
                notes.append(f"{k} {p[4]}")
        return Lookup(total * factor * MS, "; ".join(notes))


def _fill(arr, axis: int, along=None):
    """NaNs replaced by the previous finite value along `axis` (times the ratio of the axis'
    values when `along` gives them), else the next one."""
    import numpy as np
    a = np.moveaxis(arr.copy(), axis, 0)
    for i in range(1, len(a)):
        scale = 1.0 if along is None else along[i] / along[i - 1]
        a[i] = np.where(np.isnan(a[i]), a[i - 1] * scale, a[i])
    if along is not None:
        return np.moveaxis(a, 0, axis)
    for i in range(len(a) - 2, -1, -1):
        a[i] = np.where(np.isnan(a[i]), a[i + 1], a[i])
    return np.moveaxis(a, 0, axis)


# The fp8 tables' test. An fp8 GEMM reads half a bf16 GEMM's weight bytes at twice its
# tensor-core rate, so at decode's small M (weight-read bound) a kernel time is at most
# about the bf16 one's, plus its activation-quantization kernel. aiconfigurator-core
# 0.12.0's vLLM 0.24.0 fp8_block tables are 7.8–55 × their own bf16 rows at M ≤ 64 (median
# over the shapes both measured; 8.98 × on H200: about 85 µs for any M ≤ 32 at DeepSeek-V3's
# shapes), every other fp8 or fp8_block table of the wheel 0.62–2.72 ×: its collector
# timed fp8_block eagerly, host launch gaps included, where every other dtype is replayed
# from a CUDA graph (ai-dynamo/aiconfigurator collector/vllm/collect_gemm.py at d5bad971c,
# the 0.24.0 collection #1344: `use_cuda_graph=gemm_type != "fp8_block"`; a later version
# of the file: "Eager fp8_block timing includes host launch gaps and is not a valid
# substitute"). A table past FP8_PLAUSIBLE_RATIO is not read; the same GPU's table of the
# first other engine (stand_ins: by folder name, so SGLang's, DeepGEMM, the kernel vLLM
# dispatches at M ≥ 32, then TensorRT-LLM's) that passes is, named in the source; none:
# the bf16 table's rows.
FP8_PLAUSIBLE_RATIO = 4
FP8_SMALL_M = 64


def stand_ins(system: str, op: str, engine: str) -> tuple[str, ...]:
    """`engine`, then the other engines that measured `op` on `system` (their folders of
    the wheel's data, by name): where an engine has no table, or an implausible one, the
    next one's is read, named."""
    base = root() / "data" / system / op
    others = sorted(d.name for d in base.iterdir() if d.is_dir()) if base.is_dir() else []
    return (engine,) + tuple(e for e in others if e != engine)


@lru_cache(maxsize=None)
def _gemm_rows(system: str, dtype: str, engine: str):
    """(Grid, Source, kernel, its rows' columns) of one engine's table at one dtype, or
    None."""
    src = find(system, "gemm", "gemm_perf", engine)
    if src is None:
        return None
    cols = read(src, "gemm", ("kernel_source", "m", "n", "k", "latency"), gemm_dtype=dtype)
    if not len(cols["latency"]):
        return None
    kernel = cols["kernel_source"].most_common()
    keep = cols["kernel_source"] == kernel
    sub = {k: cols[k][keep] for k in ("m", "n", "k", "latency")}
    return Grid(sub, ("m", "n", "k")), src, str(kernel), sub


def _small(sub: dict) -> dict:
    """{(m, n, k): the fastest latency} of a table's rows with M ≤ FP8_SMALL_M."""
    keep = sub["m"] <= FP8_SMALL_M
    out: dict = {}
    for key in zip(*(sub[c][keep].tolist() for c in ("m", "n", "k", "latency"))):
        out[key[:3]] = min(key[3], out.get(key[:3], key[3]))
    return out


@lru_cache(maxsize=None)
def fp8_ratio(system: str, dtype: str, engine: str) -> float | None:
    """The median, over the shapes with M ≤ FP8_SMALL_M both measured, of the engine's
    `dtype` GEMM time over its bf16 time on `system` (None: no shared shape)."""
    import numpy as np
    q, b = _gemm_rows(system, dtype, engine), _gemm_rows(system, "bfloat16", engine)
    if q is None or b is None:
        return None
    qs, bs = _small(q[3]), _small(b[3])
    shared = [qs[s] / bs[s] for s in qs.keys() & bs.keys()]
    return float(np.median(shared)) if shared else None


@lru_cache(maxsize=None)
def gemm(system: str, dtype: str, engine: str = TRAINING_ENGINE):
    """(Grid over (m, n, k), Source, kernel) of the engine's GEMM table at `dtype`
    ("bfloat16", "fp8", "fp8_block"), or None where the system has none. One kernel per
    dtype: the one measured at the most shapes (vLLM's bf16 rows are all
    torch.nn.functional.linear; its fp8 the CUTLASS scaled-mm kernel). An fp8 table that
    fails the test above is replaced by a stand-in's, the kernel saying which and why."""
    found = _gemm_rows(system, dtype, engine)
    if found is None:
        return None
    grid, src, kernel = found[:3]
    if dtype == "bfloat16":
        return grid, src, kernel
    ratio = fp8_ratio(system, dtype, engine)
    if ratio is None or ratio <= FP8_PLAUSIBLE_RATIO:
        return grid, src, kernel
    why = (f"in place of {engine} {src.version}'s {dtype} table, {ratio:.3g} × its bf16 "
           f"at M ≤ {FP8_SMALL_M}: timed eagerly")
    for other in stand_ins(system, "gemm", engine)[1:]:
        r = fp8_ratio(system, dtype, other)
        if r is not None and r <= FP8_PLAUSIBLE_RATIO:
            g, s, k = _gemm_rows(system, dtype, other)[:3]
            return g, s, f"{k}; {why}"
    g, s, k = _gemm_rows(system, "bfloat16", engine)[:3]
    return g, s, f"{k}; {why}, no other engine's passes: bf16's rows"


@lru_cache(maxsize=None)
def attention(system: str, phase: str, heads: int, kv_heads: int, head_dim: int,
              engine: str = TRAINING_ENGINE, dtype: str = "bfloat16", kv_dtype: str = "bfloat16"):
    """(Grid over (batch, length), Source, kernel, (heads, kv heads, head size) measured)
    of the context (prefill) or generation (decode) attention table for the measured head
    shape nearest this one (the same query-per-key-head ratio where measured, the nearest
    head size; the caller scales by the ratio of query heads and head sizes: attention's
    work is linear in both), or None."""
    import numpy as np
    src = find(system, "attention", f"{phase}_attention_perf", engine)
    if src is None:
        return None
    length = "isl" if phase == "context" else "step"
    keys = ("kernel_source", "num_heads", "num_key_value_heads", "head_dim", "batch_size",
            length, "latency")
    cols = read(src, "attention", keys, attn_dtype=dtype, kv_cache_dtype=kv_dtype, window_size=0)
    if not len(cols["latency"]):
        return None
    kernel = cols["kernel_source"].most_common()
    keep = cols["kernel_source"] == kernel
    shapes = set(zip(cols["num_heads"][keep].tolist(), cols["num_key_value_heads"][keep].tolist(),
                     cols["head_dim"][keep].tolist()))
    ratio = heads / kv_heads
    # the same query-per-key-head ratio first, then the nearest head count, then head size:
    # a kernel's fixed cost is not multiplied by a heads ratio from a one-head shape
    h0, kv0, d0 = min(shapes, key=lambda s: (abs(s[0] / s[1] - ratio) > 1e-9,
                                             abs(_log(s[0]) - _log(heads)),
                                             abs(s[2] - head_dim), s))
    keep &= (cols["num_heads"] == h0) & (cols["num_key_value_heads"] == kv0) & \
        (cols["head_dim"] == d0)
    sub = {k: np.asarray(v)[keep] for k, v in cols.items() if k in ("batch_size", length, "latency")}
    return Grid(sub, ("batch_size", length)), src, str(kernel), (h0, kv0, d0)


def _log(x: float) -> float:
    import math
    return math.log(max(x, 1))


@lru_cache(maxsize=None)
def collective(system: str, op: str, gpus: int, engine: str | None = None):
    """(Grid over message_size in elements of 2 bytes, Source) for an in-node collective:
    the engine's custom all-reduce (its CUDA-graph backend) when `engine` is given and `op`
    is all_reduce, else NCCL's table at the system's NCCL version (half precision)."""
    import numpy as np
    if engine is not None and op == "all_reduce":
        src = find(system, "comm", "custom_allreduce_perf", engine)
        if src is not None:
            cols = read(src, "comm", ("backend", "message_size", "latency"), num_gpus=gpus,
                        allreduce_dtype="bfloat16")
            graph = np.array(["graph" in str(b) for b in cols["backend"].tolist()], bool)
            keep = graph if graph.any() else np.ones(len(graph), bool)
            if keep.any():
                return Grid({k: cols[k][keep] for k in ("message_size", "latency")},
                            ("message_size",)), src
    version = system_spec(system).get("nccl_version", "")
    base = root() / "data" / system / "comm" / "nccl"
    have = sorted((d.name for d in base.iterdir() if (d / "nccl_perf.parquet").is_file()),
                  key=_version_key) if base.is_dir() else []
    if not have:
        return None
    src = Source(system, "nccl_perf", "nccl", version if version in have else have[-1])
    cols = read(src, "comm", ("message_size", "latency"), op_name=op, num_gpus=gpus,
                nccl_dtype="half")
    return (Grid(cols, ("message_size",)), src) if len(cols["latency"]) else None
