"""The workload `serve --search` plans for (issue 40): the request lengths (fixed or a
distribution, lengths.py), the targets (TTFT at the mean or a percentile, TPOT), the request
rate, the GPUs and a price."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.serving import lengths as L


@dataclass(frozen=True)
class Workload:
    isl: int
    osl: int
    ttft: Fraction | None = None  # seconds; None: no target
    tpot: Fraction | None = None
    request_rate: Fraction | None = None  # requests/s the deployment must sustain
    max_gpus: int = 8
    price_per_gpu_hour: Fraction | None = None  # $ (or any currency) a GPU-hour
    isl_dist: L.Lengths | None = None  # None: every prompt isl tokens (isl: the plans' length)
    osl_dist: L.Lengths | None = None
    percentile: Fraction | None = None  # TTFT target at this quantile (0, 1]; None: the mean

    @classmethod
    def of(cls, isl: L.Lengths, osl: L.Lengths, *args, percentile=None, **kw) -> "Workload":
        """From length distributions: the plans at their means rounded up."""
        return cls(isl.representative, osl.representative, *args,
                   isl_dist=None if isl.fixed else isl, osl_dist=None if osl.fixed else osl,
                   percentile=percentile, **kw)

    @property
    def isl_lengths(self) -> L.Lengths:
        return self.isl_dist or L.fixed(self.isl)

    @property
    def osl_lengths(self) -> L.Lengths:
        return self.osl_dist or L.fixed(self.osl)

    @property
    def osl_mean(self) -> Fraction:
        return self.osl_lengths.mean

    @property
    def max_len(self) -> int:
        """The engine's --max-model-len: the longest prompt and output together."""
        return self.isl_lengths.longest + self.osl_lengths.longest
