"""Cost: GPU-hours times a price per GPU-hour (issue 42). Exact Fractions; no other term
(storage, egress, idle GPUs, failed runs) is counted, and the answer says so.

The table is public on-demand list prices, dated and cited, one source for every row so
that the rows compare: RunPod Serverless "flex" workers (pay per second, no commitment,
scale to zero), per-second prices on https://docs.runpod.io/serverless/pricing (read
2026-11-28), times 3,600. A GPU it does not list has no table price: give
--price-per-gpu-hour P. For scale, a hyperscaler's list price is several times these: AWS
p5.48xlarge (8 × H100) $98.32/h on demand, $12.29 per GPU-hour (aws.amazon.com/ec2/pricing,
as quoted on computespec.pages.dev/learn/pricing/cloud-gpu-pricing-explained, 2026).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.registry import registrar
from accounting.runtime.errors import UsageError

SOURCE = "RunPod Serverless flex, docs.runpod.io/serverless/pricing, read 2026-11-28"
TABLE = "table"  # --price-per-gpu-hour table: the table's price for the GPU


@dataclass(frozen=True)
class GpuPrice:
    name: str  # the GPU table's name (accounting/planning/gpu_table.py)
    per_second: Fraction  # dollars per GPU-second, as the source lists it
    listed_as: str  # the source's own name for it

    @property
    def per_hour(self) -> Fraction:
        return self.per_second * 3600


PRICES: dict[str, GpuPrice] = {}
_register = registrar(PRICES, "GPU price")
for _name, _per_second, _listed in (
        ("A100-80GB", "0.00076", "A100 80 GB"),
        ("H100-SXM", "0.00116", "H100 PRO 80 GB"),
        ("H200", "0.00155", "H200 PRO 141 GB"),
        ("B200", "0.00240", "B200 180 GB"),
        ("L40S", "0.00053", "L40, L40S, 6000 Ada PRO 48 GB"),
        ("L4", "0.00019", "L4, A5000, 3090 24 GB"),
        ("RTX-4090", "0.00031", "4090 PRO 24 GB")):
    _register(GpuPrice(_name, Fraction(_per_second), _listed))


@dataclass(frozen=True)
class Price:
    per_gpu_hour: Fraction
    source: str  # 'given' or the table's citation


def price(given, gpu_name: str | None) -> Price | None:
    """--price-per-gpu-hour as given (a number, or 'table' for the table's price of the
    GPU); None when not given."""
    if given is None:
        return None
    if given != TABLE:
        return Price(Fraction(given), "--price-per-gpu-hour")
    row = PRICES.get(gpu_name or "")
    if row is None:
        known = ", ".join(PRICES)
        raise UsageError(f"--price-per-gpu-hour table: no table price for "
                         f"{gpu_name or 'a GPU given by its numbers'} (the table has {known}); "
                         f"give the price, e.g. --price-per-gpu-hour 2.50")
    return Price(row.per_hour, f"{row.listed_as}, {SOURCE}")


@dataclass(frozen=True)
class Cost:
    price: Price
    gpus: int
    seconds: Fraction | None = None  # a training run
    tokens_per_second: Fraction | None = None  # serving: output tokens/s of the gpus

    @property
    def gpu_hours(self) -> Fraction | None:
        return None if self.seconds is None else self.gpus * self.seconds / 3600

    @property
    def dollars(self) -> Fraction | None:
        return None if self.seconds is None else self.gpu_hours * self.price.per_gpu_hour

    @property
    def dollars_per_million_tokens(self) -> Fraction | None:
        if not self.tokens_per_second:
            return None
        return self.gpus * self.price.per_gpu_hour / 3600 / self.tokens_per_second * 10**6

    def to_dict(self) -> dict:
        out = {"price_per_gpu_hour": float(self.price.per_gpu_hour), "source": self.price.source,
               "gpus": self.gpus}
        if self.seconds is not None:
            out.update(gpu_hours=float(self.gpu_hours), dollars=float(self.dollars))
        if self.dollars_per_million_tokens is not None:
            out.update(tokens_per_second=float(self.tokens_per_second),
                       dollars_per_million_tokens=float(self.dollars_per_million_tokens))
        return out


def _money(x: Fraction) -> str:
    return f"${float(x):,.2f}" if x >= 1 else f"${float(x):.4f}"


def _price(x: Fraction) -> str:
    """$4.176: the price as given or listed, to the tenth of a cent and no further."""
    return "$" + f"{float(x):,.4f}".rstrip("0").rstrip(".") if x != int(x) else f"${int(x):,}"


def line(c: Cost, width: int = 14) -> str:
    """The answer's cost line."""
    head = f"{'cost:':<{width + 1}}"
    each = f"{_price(c.price.per_gpu_hour)} per GPU-hour ({c.price.source})"
    if c.seconds is not None:
        return (f"{head}{_money(c.dollars)} = {float(c.gpu_hours):,.1f} GPU-hours × {each}; "
                f"GPU time only")
    if c.dollars_per_million_tokens is not None:
        return (f"{head}{_money(c.dollars_per_million_tokens)} per million output tokens at "
                f"{float(c.tokens_per_second):,.1f} tokens/s on {c.gpus} GPU"
                f"{'s' if c.gpus != 1 else ''} × {each}")
    return f"{head}not computed: no time (give --tokens N or --steps N, and a GPU's peak)"
