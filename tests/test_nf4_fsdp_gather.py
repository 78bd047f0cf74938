"""What FSDP2 all-gathers of a QLoRA base weight under torchtune (lora_finetune_distributed:
fully_shard over torchao's NF4Tensor): NF4Tensor.fsdp_pre_all_gather's tensors, read on the
CPU from torchao itself. The plan gathers d shards of each weight's NF4 layout
(planning/parallel/lora_states.py qlora_gathered, _nf4_gather; formats/torchao_nf4.py):
the 4-bit codes, the int8 block scales and the bf16 scale factors, not a dequantized bf16
weight. (The plan also counts each shard's scaler_mean and 16-value code table, which
fsdp_pre_all_gather passes as metadata: 34 bytes a shard, an over-count of 34·(d − 1)
bytes a weight.)"""
import pytest

from accounting.formats.torchao_nf4 import CODE, MEAN, torchao_nf4_bytes


def test_a_shards_gathered_tensors_are_the_nf4_layouts_quantized_ones():
    torch = pytest.importorskip("torch")
    nf4 = pytest.importorskip("torchao.quantization.quantize_.workflows.nf4.nf4_tensor")

    class Group:
        def size(self):
            return 8

    class Mesh:
        def get_group(self):
            return Group()

    rows, cols, d = 1024, 512, 8
    w = nf4.to_nf4(torch.randn(rows, cols, dtype=torch.bfloat16), 64, 256)
    shard = torch.chunk(w, d, dim=0)[0]  # FSDP2's dim-0 shard (NF4Tensor's split)
    assert type(shard).__name__ == "NF4Tensor" and tuple(shard.shape) == (rows // d, cols)
    tensors, _ = shard.fsdp_pre_all_gather(Mesh())
    assert [t.dtype for t in tensors] == [torch.int8, torch.bfloat16, torch.uint8]
    gathered = sum(t.numel() * t.element_size() for t in tensors)
    # by hand, 128 rows × 512: 65,536 codes at 4 bits, 1,024 blocks of 64 (int8 scales),
    # 4 factors of 256 blocks (bf16)
    assert gathered == 65_536 // 2 + 1_024 + 4 * 2 == 33_800
    planned = torchao_nf4_bytes(rows // d, cols)
    assert sum(planned.values()) - planned[MEAN] - planned[CODE] == gathered
