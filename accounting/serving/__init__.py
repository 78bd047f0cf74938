"""Serving capacity (`python -m accounting serve`, issue 29): weights per GPU as stored under
tensor and pipeline parallelism, the KV cache by dtype and layout, the engine's KV pool,
concurrency, time to first token and per output token.

    shards.py      vLLM's TP/PP layout of the ledger's parameters, in a weight scheme's bytes
    kv.py          KV bytes per token per GPU (dtype, TP split or replication, MLA, windows)
    engines.py     vLLM's and SGLang's pool rules and defaults, cited
    activation.py  vLLM's profiled activation peak, estimated
    timing.py      prefill (TTFT) and decode (TPOT) rooflines
    plan.py        serve(): the plan; views.py: its tables, JSON and CSV

Pure Python and exact; the weight formats are accounting/formats/.
"""
