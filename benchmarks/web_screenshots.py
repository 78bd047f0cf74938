"""Screenshots of the web page's main views (python -m accounting web), for a person to
look at: PNGs in OUTDIR (not committed: fonts and rendering differ per machine).

    python benchmarks/web_screenshots.py OUTDIR
"""
from __future__ import annotations

import argparse
from pathlib import Path

from web_browser import browser_page, served

VIEWS = (
    ("flops-gpt2-xl-16k", "?model=gpt2-xl&ctx=16384"),
    ("plan-llama-3.1-8b", "?question=plan&model=meta-llama/Llama-3.1-8B&ctx=8192&gpu=H100"
                          "&precision=bf16-mixed&recompute=full"),
    ("serve-llama-3.1-8b", "?question=serve&model=meta-llama/Llama-3.1-8B&gpu=H100&ctx=8192"),
    ("layouts-gpt2-xl-8gpus", "?question=layouts"),
    ("plan-8gpus-llama-3.1-8b", "?question=layouts&model=meta-llama/Llama-3.1-8B&gpu=H100&gpus=8"
                                "&tp=2&pp=2&zero=1&ctx=4096&precision=bf16-mixed&recompute=full"),
    ("bad-input", "?model=gpt2-xl&ctx=16k&batch=2"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", type=Path)
    ns = ap.parse_args()
    ns.outdir.mkdir(parents=True, exist_ok=True)
    with served() as base, browser_page() as page:
        for name, query in VIEWS:
            page.goto(base + query)
            page.wait_for_selector("#answer, [role=alert]")
            path = ns.outdir / f"{name}.png"
            page.screenshot(path=str(path), full_page=True)
            print(path)


if __name__ == "__main__":
    main()
