#!/usr/bin/python3
"""PyTorch's time for one full training step (forward, backward, clip_grad_norm_, AdamW) of
the reference GPT of a gradgraph config, written as PyTorch's fastest eager code: one fused
QKV nn.Linear, F.layer_norm, F.gelu, F.cross_entropy, F.scaled_dot_product_attention with
is_causal when this torch has it (else the explicit product with a precomputed mask),
AdamW with fused=True or foreach=True when this torch takes them, clip_grad_norm_.
`gradgraph bench --compare-torch` runs it once per thread / OpenBLAS setting, each in its
own process (OpenBLAS reads its variables at load time).

Run: /usr/bin/python3 bench/torch_bench.py --config C.json --batch B --seq T --steps N
     [--warmup W] [--threads K] [--autocast-bf16]
(W is a minimum: it warms up for at least 3 steps and until the steps stop speeding up.)
Prints `torch_ms_per_step <median ms>`, `torch_warmup_steps <how many, their ms>`, `torch_peak_rss_kb <ru_maxrss>`,
`openblas_core <the kernel OpenBLAS runs>`, `blas_library <the BLAS library torch loaded>` and
`torch_code <what was used>`.
The weights are not the same numbers as gradgraph's (the time does not depend on them);
the shapes, the optimizer and its settings are (lr 1e-3, betas 0.9/0.99, weight decay 0.1
on parameters of 2+ dimensions only, as gradgraph's AdamW, clipping at 1.0).
"""
import argparse
import ctypes
import json
import math
import os
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


class LayerNorm(nn.Module):
    def __init__(self, d, bias, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


class Block(nn.Module):
    def __init__(self, cfg, T):
        super().__init__()
        d, b, eps = cfg["n_embd"], cfg["bias"], cfg["layernorm_eps"]
        self.h = cfg["n_head"]
        self.scale = 1.0 / math.sqrt(d // self.h) if cfg.get("attn_scale", True) else 1.0
        self.approximate = "tanh" if cfg["gelu"] == "tanh" else "none"
        self.norm1, self.norm2 = LayerNorm(d, b, eps), LayerNorm(d, b, eps)
        self.qkv = nn.Linear(d, 3 * d, bias=b)  # query, key and value in one product
        self.proj = nn.Linear(d, d, bias=b)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d, bias=b), nn.Linear(4 * d, d, bias=b)
        self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).triu(1), persistent=False)

    def attn(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)  # each (B, H, T, hs)
        if HAS_SDPA and self.scale == 1.0 / math.sqrt(D // self.h):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = torch.matmul(q, k.transpose(-2, -1)) * self.scale
            y = torch.matmul(s.masked_fill(self.mask[:T, :T], float("-inf")).softmax(-1), v)
        return self.proj(y.transpose(1, 2).reshape(B, T, D))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x)), approximate=self.approximate))


class Gpt(nn.Module):
    def __init__(self, cfg, T):
        super().__init__()
        V, D, block = cfg["vocab_size"], cfg["n_embd"], cfg["block_size"]
        self.tok_emb = nn.Embedding(V, D)
        if cfg["pos_encoding"] == "learned":
            self.pos_emb = nn.Embedding(block, D)
        else:
            p = torch.arange(block, dtype=torch.float64)[:, None]
            w = torch.exp(-torch.arange(0, D, 2, dtype=torch.float64) * math.log(10000.0) / D)
            P = torch.zeros(block, D, dtype=torch.float64)
            P[:, 0::2], P[:, 1::2] = torch.sin(p * w), torch.cos(p * w[: D // 2])
            self.register_buffer("P", P.float(), persistent=False)
            self.pos_emb = None
        self.blocks = nn.ModuleList(Block(cfg, T) for _ in range(cfg["n_layer"]))
        self.norm_f = LayerNorm(D, cfg["bias"], cfg["layernorm_eps"])
        self.head = None if cfg["tie_weights"] else nn.Linear(D, V, bias=False)

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        x = self.tok_emb(tokens) + (self.pos_emb.weight[:T] if self.pos_emb is not None else self.P[:T])
        for blk in self.blocks:
            x = blk(x)
        x = self.norm_f(x)
        logits = F.linear(x, self.tok_emb.weight if self.head is None else self.head.weight)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1), ignore_index=-1)


def make_adamw(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    for kw in ({"fused": True}, {"foreach": True}, {}):
        try:
            opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99), eps=1e-8, **kw)
            if kw.get("fused"):  # some versions take fused=True but support it only on GPUs: try one step
                for p in model.parameters():
                    p.grad = torch.zeros_like(p)
                opt.step()
                opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99), eps=1e-8, **kw)
                model.zero_grad(set_to_none=True)
            return opt, ",".join(f"{k}={v}" for k, v in kw.items()) or "default"
        except (TypeError, RuntimeError, ValueError):
            model.zero_grad(set_to_none=True)
    raise RuntimeError("AdamW could not be built")


def openblas_core():
    """The kernel the loaded OpenBLAS runs (openblas_get_corename), or '?'."""
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if "openblas" in line.lower() and ".so" in line}
        for path in sorted(libs):
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_num_threads.restype = ctypes.c_int
            return "%s, %d threads" % (lib.openblas_get_corename().decode(), lib.openblas_get_num_threads())
    except (OSError, AttributeError):
        pass
    return "?"


def blas_library():
    """The BLAS library this process loaded (resolved through Debian's alternatives), or '?'.
    Debian's torch links libblas.so.3, which may be OpenBLAS or the unoptimized reference BLAS."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if ".so" in line}
    except OSError:
        return "?"
    def is_blas(path):
        name = os.path.basename(path).lower()
        return name.startswith(("libblas.so", "libcblas.so")) or any(k in name for k in ("openblas", "mkl", "blis"))
    found = sorted({os.path.realpath(p) for p in paths if is_blas(p)})
    return " ".join(found) if found else "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, default=0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--autocast-bf16", action="store_true",
                    help="forward and loss under torch.autocast('cpu', dtype=torch.bfloat16): bf16 products "
                         "through oneDNN, f32 weights and optimizer (PyTorch's CPU mixed precision)")
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = json.load(f)
    T = a.seq or cfg["block_size"]
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Gpt(cfg, T)
    opt, opt_kind = make_adamw(model)
    x = torch.randint(0, cfg["vocab_size"], (a.batch, T))
    y = torch.randint(0, cfg["vocab_size"], (a.batch, T))
    params = list(model.parameters())
    def step():
        t0 = time.perf_counter()
        if a.autocast_bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(x, y)
        else:
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return time.perf_counter() - t0

    # Warm-up: at least MIN_WARMUP steps, then more while a step still runs more than 10%
    # faster than the one before it (at most MAX_WARMUP in all). PyTorch's first steps are
    # slower than its steady state for longer than gradgraph's (whose arena is allocated
    # once): glibc's malloc returns freed activations to the kernel until its mmap threshold
    # has grown past their sizes, and the next step faults them in again. On a VM whose page
    # faults cost ~12 us (a Zen 5 on 2026-12-04) the medium model's steps 1-3 took 2.6, 1.7
    # and 1.5 s, then 0.78-0.83: one warm-up step would have doubled PyTorch's time.
    MIN_WARMUP, MAX_WARMUP = 3, 10
    warm = []
    while len(warm) < max(a.warmup, MIN_WARMUP) or (len(warm) < MAX_WARMUP and warm[-1] < 0.9 * warm[-2]):
        warm.append(step())
    times = [step() for _ in range(a.steps)]
    print(f"torch_ms_per_step {statistics.median(times) * 1e3:.3f}")
    print(f"torch_warmup_steps {len(warm)} ({', '.join(f'{t * 1e3:.1f}' for t in warm)} ms)")
    print(f"torch_peak_rss_kb {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}")
    print(f"openblas_core {openblas_core()}")
    print(f"blas_library {blas_library()}")
    attn = "F.scaled_dot_product_attention(is_causal=True)" if HAS_SDPA else "matmul + masked_fill + softmax (no SDPA in this torch)"
    autocast = "; under torch.autocast('cpu', bfloat16)" if a.autocast_bf16 else ""
    print(f"torch_code torch {torch.__version__}: fused QKV nn.Linear, F.layer_norm, F.gelu, F.cross_entropy, {attn}, "
          f"AdamW({opt_kind}), clip_grad_norm_; torch threads {torch.get_num_threads()}{autocast}")


if __name__ == "__main__":
    main()
