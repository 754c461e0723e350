#!/usr/bin/python3
"""Golden file for dsl/nn.h's rms_norm, rotary_embedding and grouped_query_attention
against PyTorch, computed in float64 and stored as F32 (the F32 inputs and weights are
exactly the values the float64 reference used).

How to run (from the repository root; needs PyTorch and numpy, NOT needed by CI):

    /usr/bin/python3 tools/make_golden_rope_gqa.py

PyTorch 1.13 has none of the three as a module, so the reference is written here in torch
from their definitions, in the form LLaMA's Hugging Face code gives them: RMSNorm
x * rsqrt(mean(x^2) + eps) * w; rotary embedding with the half-split layout,
x * cos + rotate_half(x) * sin over angles p * base^(-2i / hs) repeated for both halves;
repeat_kv, which gives query head h the key/value head h // (n_head / n_kv_head). The
script checks its attention against torch.nn.MultiheadAttention where the two coincide
(no rotation, as many key/value heads as query heads) before it writes anything.

Deterministic (fixed seeds, one CPU thread). Writes tests/golden/rmsnorm_rope_gqa.safetensors
(described in tests/golden/README.md).
"""

import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import GOLDEN_DIR, REPO, save_safetensors  # noqa: E402
from make_golden_transformer import as_f32, f32_exact  # noqa: E402

F64 = torch.float64


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_tables(T, hs, start, base):
    inv_freq = base ** (-torch.arange(0, hs, 2, dtype=F64) / hs)             # (hs/2,)
    angles = torch.outer(torch.arange(start, start + T, dtype=F64), inv_freq)  # (T, hs/2)
    both = torch.cat([angles, angles], -1)                                    # (T, hs)
    return both.cos(), both.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


def rope(x, start, base):
    cos, sin = rope_tables(x.shape[-2], x.shape[-1], start, base)
    return x * cos + rotate_half(x) * sin


def repeat_kv(k, n_rep):
    B, Hkv, T, hs = k.shape
    return k[:, :, None].expand(B, Hkv, n_rep, T, hs).reshape(B, Hkv * n_rep, T, hs)


def gqa(x, w, H, Hkv, rotary, causal):
    """Grouped-query self-attention, no bias; w holds query/key/value/proj [out, in]."""
    B, T, D = x.shape
    hs = D // H
    split = lambda a, n: a.view(B, T, n, hs).transpose(1, 2)  # (B, n, T, hs)
    q = split(x @ w["query"].T, H)
    k = split(x @ w["key"].T, Hkv)
    v = split(x @ w["value"].T, Hkv)
    if rotary:
        q, k = rope(q, 0, 10000.0), rope(k, 0, 10000.0)
    k, v = repeat_kv(k, H // Hkv), repeat_kv(v, H // Hkv)
    s = (q @ k.transpose(-2, -1)) / hs ** 0.5
    if causal:
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1), float("-inf"))
    weights = torch.softmax(s, -1)
    out = (weights @ v).transpose(1, 2).reshape(B, T, D) @ w["proj"].T
    return out, weights


def check_against_mha(gen):
    """With no rotation and n_kv_head == n_head, gqa() is torch's MultiheadAttention."""
    B, T, D, H = 2, 5, 16, 4
    mha = nn.MultiheadAttention(D, H, bias=False, batch_first=True).double()
    with torch.no_grad():
        for p in mha.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=gen, dtype=F64))
    x = torch.randn(B, T, D, generator=gen, dtype=F64)
    wi = mha.in_proj_weight.detach()
    w = {"query": wi[:D], "key": wi[D:2 * D], "value": wi[2 * D:], "proj": mha.out_proj.weight.detach()}
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    want, want_w = mha(x, x, x, attn_mask=causal, need_weights=True, average_attn_weights=False)
    got, got_w = gqa(x, w, H, H, rotary=False, causal=True)
    assert torch.allclose(got, want, atol=1e-12) and torch.allclose(got_w, want_w, atol=1e-12)


def make(outdir):
    gen = torch.Generator().manual_seed(2026)
    check_against_mha(gen)
    B, T, D, H, Hkv = 2, 5, 16, 4, 2
    hs = D // H
    eps = 1e-6
    randn = lambda *s, scale=1.0: f32_exact(scale * torch.randn(*s, generator=gen, dtype=F64))
    w = {"query": randn(D, D, scale=0.3), "key": randn(Hkv * hs, D, scale=0.3),
         "value": randn(Hkv * hs, D, scale=0.3), "proj": randn(D, D, scale=0.3)}
    for t in w.values():
        t.requires_grad_()
    norm_w = f32_exact(1 + 0.1 * torch.randn(D, generator=gen, dtype=F64)).requires_grad_()
    x = randn(B, T, D).requires_grad_()

    # A pre-norm residual step: out = x + gqa(rms_norm(x)), causal, rotary on q and k.
    norm = rms_norm(x, norm_w, eps)
    attn, weights = gqa(norm, w, H, Hkv, rotary=True, causal=True)
    out = x + attn
    cot = randn(B, T, D)
    grads = torch.autograd.grad((out * cot).sum(), [x, norm_w] + list(w.values()))

    # Rotary alone, at positions 3.. with base 500, on a (B, H, T, hs) = (2, 3, 6, 4) tensor.
    z = randn(2, 3, 6, 4).requires_grad_()
    z_rot = rope(z, 3, 500.0)
    z_cot = randn(2, 3, 6, 4)
    (grad_z,) = torch.autograd.grad((z_rot * z_cot).sum(), [z])

    t = {"blk.norm.weight": norm_w.detach()}
    t.update({"blk.attn." + k + ".weight": v.detach() for k, v in w.items()})
    t.update({"x": x.detach(), "norm": norm.detach(), "weights": weights.detach(), "out": out.detach(),
              "cotangent": cot, "grad.x": grads[0], "grad.blk.norm.weight": grads[1]})
    t.update({"grad.blk.attn." + k + ".weight": g for k, g in zip(w.keys(), grads[2:])})
    t.update({"z": z.detach(), "rope": z_rot.detach(), "z_cotangent": z_cot, "grad.z": grad_z})
    path = os.path.join(outdir, "rmsnorm_rope_gqa.safetensors")
    save_safetensors(path, as_f32(t))
    return path


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    p = make(GOLDEN_DIR)
    print("%8d  %s" % (os.path.getsize(p), os.path.relpath(p, REPO)))


if __name__ == "__main__":
    sys.exit(main())
