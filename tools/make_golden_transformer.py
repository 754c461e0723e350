#!/usr/bin/python3
"""Golden files for dsl/transformer.h: cross-attention and the pre-LN decoder block
against PyTorch, computed in float64 and stored as F32 (the F32 inputs and weights are
exactly the values the float64 reference used).

How to run (from the repository root; needs PyTorch and numpy, NOT needed by CI):

    /usr/bin/python3 tools/make_golden_transformer.py

Deterministic (fixed seeds, one CPU thread). Writes, into tests/golden/ (described in
tests/golden/README.md):

  cross_attention.safetensors   torch.nn.MultiheadAttention(8, 2, bias=True,
                                batch_first=True), query = x, key = value = memory
  decoder_block.safetensors     torch.nn.TransformerDecoderLayer(8, 2, 32, dropout=0,
                                activation="gelu", batch_first=True, norm_first=True)

Weights are stored under gradgraph's names (Linear [out, in]; MHA's in_proj_weight split
into query / key / value, out_proj -> proj). Masks are stored as I32 1 = keep (PyTorch's
boolean masks are the negation: True = masked). Each file also holds `cotangent`, a fixed
weighting of the output, and `grad.<input>` = d sum(out * cotangent) / d input.
"""

import os
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import GOLDEN_DIR, REPO, save_safetensors  # noqa: E402


def f32_exact(t):
    """Round to float32 and back to float64, so the stored F32 values are exactly the
    values the float64 reference uses."""
    return t.float().double()


def randomize_(module, gen):
    """Non-trivial float32-exact values: matrices N(0, 0.3), biases N(0, 0.1), LayerNorm
    weights 1 + N(0, 0.1)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.startswith("norm") and name.endswith("weight"):
                v = 1 + 0.1 * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            elif p.dim() == 1:
                v = 0.1 * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            else:
                v = 0.3 * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            p.copy_(f32_exact(v))


def mha_weights(mha, prefix):
    """MultiheadAttention parameters under gradgraph's names "<prefix>.query.weight" ..."""
    D = mha.embed_dim
    w, b = mha.in_proj_weight.detach(), mha.in_proj_bias.detach()
    out = {}
    for i, part in enumerate(["query", "key", "value"]):
        out[prefix + "." + part + ".weight"] = w[i * D:(i + 1) * D]
        out[prefix + "." + part + ".bias"] = b[i * D:(i + 1) * D]
    out[prefix + ".proj.weight"] = mha.out_proj.weight.detach()
    out[prefix + ".proj.bias"] = mha.out_proj.bias.detach()
    return out


def as_f32(tensors):
    return {k: (v.detach().numpy().astype(np.float32) if v.dtype == torch.float64 else v.numpy().astype(np.int32))
            for k, v in tensors.items()}


def make_cross_attention(outdir):
    gen = torch.Generator().manual_seed(2024)
    B, Tq, Tk, D, H = 2, 3, 5, 8, 2
    mha = nn.MultiheadAttention(D, H, bias=True, batch_first=True).double()
    randomize_(mha, gen)
    x = f32_exact(torch.randn(B, Tq, D, generator=gen, dtype=torch.float64)).requires_grad_()
    memory = f32_exact(torch.randn(B, Tk, D, generator=gen, dtype=torch.float64)).requires_grad_()
    keep = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], dtype=torch.int32)  # batch 0 pads 1 key, batch 1 pads 2
    out, weights = mha(x, memory, memory, key_padding_mask=keep == 0, need_weights=True,
                       average_attn_weights=False)  # out (B, Tq, D), weights (B, H, Tq, Tk)
    cot = f32_exact(torch.randn(B, Tq, D, generator=gen, dtype=torch.float64))
    gx, gm = torch.autograd.grad((out * cot).sum(), [x, memory])

    # The same by hand, as gradgraph writes it: split heads, softmax(q k^T / sqrt(hs)), merge.
    hs = D // H
    t = mha_weights(mha, "xattn")
    split = lambda a: a.view(B, -1, H, hs).transpose(1, 2)  # (B, H, T, hs)
    q = split(x @ t["xattn.query.weight"].T + t["xattn.query.bias"])
    k = split(memory @ t["xattn.key.weight"].T + t["xattn.key.bias"])
    v = split(memory @ t["xattn.value.weight"].T + t["xattn.value.bias"])
    s = (q @ k.transpose(-2, -1)) / hs ** 0.5
    s = s.masked_fill((keep == 0).view(B, 1, 1, Tk), float("-inf"))
    w = torch.softmax(s, -1)
    y = (w @ v).transpose(1, 2).reshape(B, Tq, D) @ t["xattn.proj.weight"].T + t["xattn.proj.bias"]
    assert torch.allclose(w, weights, atol=1e-12) and torch.allclose(y, out, atol=1e-12)

    t.update({"x": x, "memory": memory, "memory_keep": keep, "out": out, "weights": weights,
              "cotangent": cot, "grad.x": gx, "grad.memory": gm})
    path = os.path.join(outdir, "cross_attention.safetensors")
    save_safetensors(path, as_f32(t))
    return path


def make_decoder_block(outdir):
    gen = torch.Generator().manual_seed(2025)
    B, Tq, Tk, D, H = 2, 4, 5, 8, 2
    layer = nn.TransformerDecoderLayer(D, H, dim_feedforward=4 * D, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True).double()
    layer.eval()
    randomize_(layer, gen)
    x = f32_exact(torch.randn(B, Tq, D, generator=gen, dtype=torch.float64)).requires_grad_()
    memory = f32_exact(torch.randn(B, Tk, D, generator=gen, dtype=torch.float64)).requires_grad_()
    keep = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], dtype=torch.int32)
    causal = torch.triu(torch.ones(Tq, Tq, dtype=torch.bool), diagonal=1)  # True = masked (key > query)
    out = layer(x, memory, tgt_mask=causal, memory_key_padding_mask=keep == 0)
    cot = f32_exact(torch.randn(B, Tq, D, generator=gen, dtype=torch.float64))
    gx, gm = torch.autograd.grad((out * cot).sum(), [x, memory])

    t = {}
    t.update(mha_weights(layer.self_attn, "dec.self_attn"))
    t.update(mha_weights(layer.multihead_attn, "dec.cross_attn"))
    for torch_name, gg_name in [("linear1", "mlp.fc1"), ("linear2", "mlp.fc2"), ("norm1", "norm1"),
                                ("norm2", "norm2"), ("norm3", "norm3")]:
        mod = getattr(layer, torch_name)
        t["dec." + gg_name + ".weight"] = mod.weight.detach()
        t["dec." + gg_name + ".bias"] = mod.bias.detach()
    assert len(t) == sum(1 for _ in layer.parameters()) + 8  # each in_proj weight and bias split in three
    t.update({"x": x, "memory": memory, "memory_keep": keep, "out": out, "cotangent": cot,
              "grad.x": gx, "grad.memory": gm})
    path = os.path.join(outdir, "decoder_block.safetensors")
    save_safetensors(path, as_f32(t))
    return path


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for p in [make_cross_attention(GOLDEN_DIR), make_decoder_block(GOLDEN_DIR)]:
        print("%8d  %s" % (os.path.getsize(p), os.path.relpath(p, REPO)))


if __name__ == "__main__":
    sys.exit(main())
