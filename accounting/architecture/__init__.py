"""Stage 1, the spec and its loaders: ModelConfig, the tool's own JSON, presets, Hugging Face config.json."""
