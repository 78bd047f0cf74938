"""Quantized weight layouts, each written once: the bytes every tensor of a format holds.

bnb.py: bitsandbytes' 4-bit (NF4/FP4, with and without double quantization) and LLM.int8
layouts; torchao_nf4.py: torchao's NF4Tensor. Pure Python; tests/test_formats.py checks each
against the library's own tensors on the CPU.
"""
