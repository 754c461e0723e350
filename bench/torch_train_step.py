#!/usr/bin/env python3
"""PyTorch's time for one training step of the reference model (forward, backward,
clip_grad_norm_, AdamW), the peer bench_train_step compares gradgraph against.
Run: /usr/bin/python3 bench/torch_train_step.py N_LAYER N_HEAD N_EMBD BLOCK BATCH VOCAB STEPS THREADS
Prints one line: `torch_ms_per_step <median ms>`.
"""
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.query, self.key, self.value, self.proj = (nn.Linear(d, d) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def attn(self, x):
        B, T, D = x.shape
        hs = D // self.h
        q, k, v = (f(x).view(B, T, self.h, hs).transpose(1, 2) for f in (self.query, self.key, self.value))
        s = q @ k.transpose(-2, -1) / math.sqrt(hs)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        s = s.masked_fill(~mask, float("-inf"))
        y = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Gpt(nn.Module):
    def __init__(self, L, H, D, block, V):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(block, D)
        self.blocks = nn.ModuleList(Block(D, H) for _ in range(L))
        self.norm_f = nn.LayerNorm(D)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos.weight[:T]
        for b in self.blocks:
            x = b(x)
        logits = self.norm_f(x) @ self.tok.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1), ignore_index=-1)


def main():
    L, H, D, block, B, V, steps, threads = (int(a) for a in sys.argv[1:9])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Gpt(L, H, D, block, V)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    x = torch.randint(0, V, (B, block))
    y = torch.randint(0, V, (B, block))
    times = []
    for i in range(steps + 3):
        t0 = time.perf_counter()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    print(f"torch_ms_per_step {statistics.median(times) * 1e3:.3f}")


if __name__ == "__main__":
    main()
