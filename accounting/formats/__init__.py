"""Weight formats: how a checkpoint stores each matrix (packed integers, scales, zero points,
group indices), one module per family and one place per format's layout.

    layouts.py        bytes of every tensor a format stores for one Linear weight (out × in)
    schemes.py        the registry of --weights schemes (and of what a quantization_config names)
    hf_quant.py       a config.json's quantization_config -> a scheme and what it leaves unquantized
    bnb.py            bitsandbytes' 4-bit (NF4/FP4, with and without double quantization) and
                      LLM.int8 layouts (serving's schemes and QLoRA's base weights)
    torchao_nf4.py    torchao's NF4Tensor

Pure Python and exact: no torch here; the layouts are checked against the libraries that
write them (tests/test_formats.py packs layers with compressed-tensors on the CPU;
tests/test_formats_bnb.py quantizes with bitsandbytes and torchao).
"""
