"""Hugging Face hub ids that are not presets: the local cache first, then the hub.

cache.py  the cache as huggingface_hub lays it out (HF_HUB_CACHE, HF_HOME/hub), read with
          the standard library alone;
remote.py the hub through huggingface_hub (imported only when a hub id is looked up:
          `import accounting` stays free of it): config.json and safetensors headers by
          ranged reads, never the weights;
resolve.py which of the two answers, and every failure as one line (exit 2).
"""
