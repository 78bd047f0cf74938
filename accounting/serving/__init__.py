"""Serving capacity (`python -m accounting serve`, issue 29): weights per GPU as stored under
tensor and pipeline parallelism, the KV cache by dtype and layout, the engine's KV pool,
concurrency, time to first token and per output token.

    shards.py      vLLM's TP/PP layout of the ledger's parameters, in a weight scheme's bytes
    kv.py          KV bytes per token per GPU (dtype, TP split or replication, MLA, windows)
    engines.py     the engines as registered records by version: pool rules and defaults, cited
    startup.py     the start-up's other terms as ranges: NCCL and custom all-reduce buffers,
                   CUDA-graph capture sizes and vLLM's estimate, the CUDA context
    activation.py  vLLM's profiled activation peak (forward and dummy sampler), estimated
    timing.py      prefill (TTFT) and decode (TPOT) rooflines
    plan.py        serve(): the plan; views.py: its tables, JSON and CSV (the docs' answers
                   table, parsed as the CLI parses: cli/serve_answers.py)
    search.py      serve --search (issue 40): layouts, aggregated or disaggregated, replicas,
                   ranked by tokens/s per GPU under TTFT/TPOT targets; search_views.py
                   renders it, launch.py writes vLLM/SGLang launch commands
    workload.py    the search's workload; lengths.py request lengths as distributions;
                   queueing.py the wait for a server at a request rate (Erlang C,
                   Allen–Cunneen); search_queue.py replicas and the wait of a layout;
                   tpot_spread.py an aggregated TPOT's spread between requests
    speculative.py speculative decoding (MTP heads or a draft model) on serve's decode step
    dp_attention.py attention data parallelism with expert parallelism (MoE) from one rank's plan

Pure Python and exact; the weight formats are accounting/formats/ (loaded.py: the weights as
the serving kernels hold them).
"""
