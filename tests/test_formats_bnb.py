"""Quantized weight layouts (accounting/formats/) against the libraries that allocate them,
on the CPU: every tensor bitsandbytes 0.50.2 (Params4bit/Linear4bit, Linear8bitLt) and
torchao's NF4Tensor hold for a real quantized layer, summed by storage. The expected values
are the libraries' own tensors (nbytes of each storage); the layouts are pure Python."""
import pytest

torch = pytest.importorskip("torch")
bnb = pytest.importorskip("bitsandbytes")

from accounting.formats.bnb import bnb_4bit_bytes, bnb_8bit_bytes  # noqa: E402
from accounting.formats.torchao_nf4 import torchao_nf4_bytes  # noqa: E402

# odd shapes: a packed byte half full, a partial absmax block, partial nested blocks
SHAPES = [(96, 200), (64, 64), (33, 7), (257, 129), (512, 1024)]


def _storages(*tensors) -> int:
    """Bytes of the distinct storages behind the tensors (a shared one counted once)."""
    seen = {}
    for t in tensors:
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def _bnb4_tensors(p):
    qs = p.quant_state
    out = [p.data, qs.absmax, qs.code]
    if qs.nested:
        out += [qs.offset, qs.state2.absmax, qs.state2.code]
    return out


@pytest.mark.parametrize("out_f,in_f", SHAPES)
@pytest.mark.parametrize("double_quant", [True, False])
@pytest.mark.parametrize("quant_type,blocksize", [("nf4", 64), ("fp4", 64), ("nf4", 128)])
def test_bnb_4bit_matches_params4bit(out_f, in_f, double_quant, quant_type, blocksize):
    w = torch.randn(out_f, in_f, dtype=torch.bfloat16)
    p = bnb.nn.Params4bit(w, requires_grad=False, quant_type=quant_type,
                          compress_statistics=double_quant, blocksize=blocksize)._quantize("cpu")
    assert p.quant_state.nested == double_quant
    parts = bnb_4bit_bytes(out_f, in_f, quant_type=quant_type, blocksize=blocksize,
                           double_quant=double_quant)
    assert sum(parts.values()) == _storages(*_bnb4_tensors(p))
    assert parts["packed weight"] == p.data.nbytes
    assert parts["absmax"] == p.quant_state.absmax.nbytes


def test_bnb_4bit_linear_layer_holds_what_the_layout_says():
    """nn.Linear4bit as transformers builds it for QLoRA (nf4, bf16 compute, double quant)."""
    w = torch.randn(128, 320, dtype=torch.bfloat16)
    lin = bnb.nn.Linear4bit(320, 128, bias=False, compute_dtype=torch.bfloat16,
                            compress_statistics=True, quant_type="nf4")
    lin.weight = bnb.nn.Params4bit(w, requires_grad=False, quant_type="nf4",
                                   compress_statistics=True)
    lin = lin.to("cpu")
    assert sum(bnb_4bit_bytes(128, 320).values()) == _storages(*_bnb4_tensors(lin.weight))
    # hand algebra: 40,960 elements -> 20,480 packed bytes, 640 uint8 scales, 3 nested
    # float32 scales (640/256 rounded up), the 256-entry nested map, the offset, the NF4 map
    assert sum(bnb_4bit_bytes(128, 320).values()) == 20480 + 640 + 3 * 4 + 256 * 4 + 4 + 16 * 4


@pytest.mark.parametrize("out_f,in_f", SHAPES)
def test_bnb_8bit_matches_linear8bitlt(out_f, in_f):
    w = torch.randn(out_f, in_f)
    lin = bnb.nn.Linear8bitLt(in_f, out_f, bias=False, has_fp16_weights=False)
    lin.weight = bnb.nn.Int8Params(w, requires_grad=False, has_fp16_weights=False)
    lin = lin.to("cpu")
    wt = lin.weight
    assert wt.dtype == torch.int8 and wt.CB.data_ptr() == wt.data.data_ptr()
    parts = bnb_8bit_bytes(out_f, in_f)
    assert sum(parts.values()) == _storages(wt.data, wt.CB, wt.SCB)
    assert parts["row absmax (SCB)"] == wt.SCB.nbytes


def test_bad_layout_arguments():
    with pytest.raises(ValueError):
        bnb_4bit_bytes(0, 4)
    with pytest.raises(ValueError):
        bnb_4bit_bytes(4, 4, quant_type="int4")
    with pytest.raises(ValueError):
        bnb_4bit_bytes(4, 4, blocksize=48)


@pytest.mark.parametrize("out_f,in_f", [(256, 64), (1024, 512), (64, 4096)])
def test_torchao_nf4_matches_nf4tensor(out_f, in_f):
    nf4 = pytest.importorskip("torchao.quantization.quantize_.workflows.nf4.nf4_tensor")
    w = torch.randn(out_f, in_f, dtype=torch.bfloat16)
    t = nf4.to_nf4(w, 64, 256)
    names, _ = t.__tensor_flatten__()
    parts = torchao_nf4_bytes(out_f, in_f)
    assert set(parts) == set(names)
    for k in names:
        assert parts[k] == getattr(t, k).nbytes, k
    with pytest.raises(ValueError):
        torchao_nf4_bytes(33, 7)
