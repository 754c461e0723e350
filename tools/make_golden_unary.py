#!/usr/bin/python3
"""Golden file for the unary element-wise functions relu, softplus, abs, sin, cos, sigmoid
(primitives) and silu (dsl/nn.h's x * sigmoid(x)) against PyTorch in float32, the
precision a user of either library computes in.

How to run (from the repository root; needs PyTorch and numpy, NOT needed by CI):

    /usr/bin/python3 tools/make_golden_unary.py

One input vector x holds the awkward values: both signed zeros, values near zero, the
ends of softplus's range (PyTorch's softplus(beta=1, threshold=20) returns x above 20, and
exp(x) is subnormal below -87.3 and 0 below -104), a float32 pi, and sin's and cos's arguments
up to 1000. Each function's output is taken in float32, and its gradient is that of
sum(f(x) * cotangent) with a fixed cotangent. Before writing, the script checks each
float32 result against float64 PyTorch on the same inputs (to 4 ulp, subnormal values
aside, or to 2^-22 max(1, |x|) absolute where the float32 formula cancels), so the file holds
PyTorch's answers and not a float32 accident.

Deterministic (fixed values, one CPU thread). Writes tests/golden/unary.safetensors
(described in tests/golden/README.md).
"""

import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import GOLDEN_DIR, save_safetensors  # noqa: E402

X = [
    -1000.0, -100.0, -88.0, -30.0, -20.5, -20.0, -17.0, -10.0, -5.0, -3.0, -2.0, -1.0, -0.5,
    -1e-3, -1e-7, -1e-30, -0.0, 0.0, 1e-30, 1e-7, 1e-3, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0,
    float(np.float32(np.pi)), 5.0, 10.0, 15.0, 17.0, 19.5, 20.0, 20.5, 30.0, 88.0, 100.0,
]


# Where the float32 formula itself cancels (the 1 - s of sigmoid's gradient s (1 - s) and
# of silu's s (1 + x (1 - s)) once s = sigmoid(x) is near 1), float32 and float64 agree
# only absolutely: to 2^-22 max(1, |x|) (the rounding of s, times x, times a cotangent
# below 1.5).
def absolute_bound(x):
    return 2.0 ** -22 * np.maximum(1.0, np.abs(x.double().numpy()))


FUNCTIONS = {
    "relu": torch.relu,
    "softplus": lambda x: F.softplus(x, beta=1, threshold=20),
    "abs": torch.abs,
    "sin": torch.sin,
    "cos": torch.cos,
    "sigmoid": torch.sigmoid,
    "silu": F.silu,
}


def ulps(got, want):
    """|got - want| in units of the float32 spacing at want; subnormal pairs count as 0."""
    want32 = want.float()
    spacing = (np.nextafter(np.abs(want32.numpy()), np.float32(np.inf)) - np.abs(want32.numpy())).astype(np.float64)
    d = np.abs(got.double().numpy() - want32.double().numpy()) / spacing
    tiny = np.finfo(np.float32).tiny
    d[(np.abs(got.numpy()) < tiny) & (np.abs(want32.numpy()) < tiny)] = 0
    return d


def evaluate(f, x, cot):
    x = x.clone().requires_grad_(True)
    y = f(x)
    (y * cot).sum().backward()
    return y.detach(), x.grad.detach()


def main():
    torch.set_num_threads(1)
    x = torch.tensor(X, dtype=torch.float32)
    n = x.numel()
    # cotangent: in [0.5, 1.5) with alternating signs, so no gradient is f' alone
    cot = torch.tensor([(0.5 + ((7 * i) % 11) / 11.0) * (-1) ** i for i in range(n)], dtype=torch.float32)
    out = {"x": x.numpy(), "cotangent": cot.numpy()}
    for name, f in FUNCTIONS.items():
        y, g = evaluate(f, x, cot)
        y64, g64 = evaluate(f, x.double(), cot.double())
        for what, a, b in (("value", y, y64), ("gradient", g, g64)):
            u = ulps(a, b)
            absolute = np.abs(a.double().numpy() - b.numpy())
            ok = (u <= 4) | (absolute <= absolute_bound(x))
            print(f"{name} {what}: float32 against float64 {u.max():.2f} ulp, {absolute.max():.3g} absolute")
            assert ok.all(), f"{name} {what}: PyTorch's float32 is far from its float64 at x = {x[~ok].tolist()}"
        out[name] = y.numpy()
        out["grad." + name] = g.numpy()
    path = os.path.join(GOLDEN_DIR, "unary.safetensors")
    save_safetensors(path, {k: np.asarray(v, dtype=np.float32) for k, v in out.items()})
    print("wrote", path)


if __name__ == "__main__":
    main()
