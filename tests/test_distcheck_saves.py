"""The distcheck's count of what autograd saves (accounting/distcheck/measure.py BlockSaves)
keys storages by their address. A storage freed before the backward pass (an MoE router's
choice, off the gradient path) can leave its address to a new storage: the new one must be
counted at its own size. It once was counted at the freed one's, so the fresh-clone CI run
saw DeepSeek-V3's EP case 4,192,256 bytes short, run to run (allocation-dependent)."""
import gc

import torch

from accounting.distcheck import measure


def test_a_storage_at_a_freed_storages_address_is_counted_at_its_own_size(monkeypatch):
    # both tensors are given one address, as the allocator may: the first freed, then the second
    monkeypatch.setattr(measure, "_storage_key", lambda t: "one address")
    model = torch.nn.Sequential(torch.nn.Identity())
    with measure.BlockSaves(model, list(model)) as saves:
        pack = saves.hooks.pack_hook
        saves.depth = 1  # inside a block
        first = torch.zeros(3)  # 12 bytes, saved then freed
        pack(first)
        del first
        gc.collect()
        second = torch.zeros(5)  # 20 bytes at the freed address, still held at backward
        pack(second)
        saves.freeze()
    assert saves.frozen == 5 * 4  # the old code: 12, the freed storage's size


def test_one_storage_saved_twice_is_counted_once(monkeypatch):
    model = torch.nn.Sequential(torch.nn.Identity())
    with measure.BlockSaves(model, list(model)) as saves:
        pack = saves.hooks.pack_hook
        saves.depth = 1
        x = torch.zeros(4)
        pack(x)
        pack(x[1:])  # a view: the same storage
        saves.freeze()
    assert saves.frozen == 4 * 4
