"""Stage 1, the architecture: the frozen spec (ModelConfig) and every reader that makes one.

The spec:
    config.py       ModelConfig, the one frozen dataclass that says which operations run
    fields.py       each field's flag, help, bound and choices (the CLI and docs read them)
    derived.py      the sizes the fields decide together (d_k, kv_heads, Gemma 4's PLE rows)
    choices.py      the values a field may take, the MLP and layer kinds, the size bounds
    checks.py       what ModelConfig refuses, field by field, in one line each
    describe.py     the spec in words ('pre-norm RMSNorm, SwiGLU, RoPE, ...')
    hints.py        a nearby head count that divides d_model
The readers:
    loaders.py      a config file, whichever its format
    own_format.py   the tool's own JSON (ModelConfig's field names)
    presets.py      the presets: GPT-2's shapes and the shipped Hugging Face configs
    hf_config.py    a Hugging Face config.json -> ModelConfig (one table row per model_type)
    hf_schema.py    the table's schema, the lists every row shares, the registry (TYPES)
    vision.py       a vision-language model's tower and projector (VisionSpec) from its
                    vision_config: readers for qwen2_vl, qwen2_5_vl, qwen3_vl, qwen3_vl_moe,
                    qwen3_5, qwen3_5_moe, llava, gemma3, gemma4, llama4, kimi_k25
    vision_pixtral.py  mistral3's Pixtral tower, patch merger and projector (a reader there)
    vision_idefics3.py idefics3's and smolvlm's SigLIP tower and connector (a reader there)
    vision_internvl.py internvl's InternViT and pixel-shuffle MLP projector (a reader there)
    vision_onevision.py llava_onevision's SigLIP tower, projector, image_newline (a reader)
    processor.py    the image processor's settings config.json does not carry (assumed, or
                    --processor's preprocessor_config.json; Gemma 3's --pan-and-scan)
The table's rows, one module per family, each registering its rows on import:
    hf_types_dense.py      gpt2, llama, mistral, qwen2, qwen3, olmo2
    hf_types_dense2.py     smollm3, glm4, olmo3, seed_oss, exaone4
    hf_types_dense3.py     arcee, apertus, mamba2
    hf_types_parallel.py   gpt_neox, falcon, phi3, starcoder2
    hf_types_gemma.py      gemma2, gemma3_text, granite, and the gemma3 wrapper
    hf_types_gemma4.py     gemma4_text and the gemma4 wrapper
    hf_types_cohere.py     cohere, cohere2
    hf_types_llama4.py     llama4_text and the llama4 wrapper
    hf_types_moe.py        mixtral, qwen3_moe, deepseek_v3, deepseek_v32, deepseek_v2
    hf_types_moe2.py       olmoe, qwen2_moe, glm4_moe, minimax_m2, ernie4_5_moe
    hf_types_gpt_oss.py    gpt_oss
    hf_types_phimoe.py     phimoe
    hf_types_kimi.py       kimi_k2, the kimi_k25 wrapper, kimi_linear
    hf_types_hybrid.py     lfm2, qwen3_next, nemotron_h
    hf_types_mamba_moe.py  Nemotron-H's expert blocks, granitemoehybrid
    hf_types_falcon_h1.py  falcon_h1
    hf_types_jamba.py      jamba
    hf_types_qwen35.py     qwen3_5_text, qwen3_5_moe_text and the qwen3_5, qwen3_5_moe wrappers
    hf_types_vlm.py        the qwen2_vl, qwen2_5_vl, qwen3_vl, qwen3_vl_moe, llava, mistral3,
                           idefics3, smolvlm, internvl and llava_onevision wrappers
(tests/test_layout.py checks that this list names every module of the folder.)
"""
