#!/usr/bin/python3
"""The bf16 golden: the reference model's loss and gradients under PyTorch's CPU autocast.

How to run (from the repository root; needs PyTorch with oneDNN, Debian's python3-torch;
NOT needed by CI):

    /usr/bin/python3 tools/make_golden_bf16.py

Reads tests/golden/ref_basic.{config,weights,batch} (written by tools/make_golden.py) and
writes tests/golden/ref_basic.grad_bf16.safetensors: what `grad --precision bf16` writes
(loss F32 [], logits F32 [B,T,V], grad.<param>), computed by RefModel under
torch.autocast("cpu", dtype=torch.bfloat16) with f32 parameters (master weights), and the
f32 result of the same model under the names f32.loss, f32.grad.<param>, so a reader can
compare both precisions' distance from f32 without PyTorch.

PyTorch's autocast and gradgraph's bf16 mode round differently: autocast runs linear and
matmul on bf16 operands and also returns their results in bf16 (a bias is added in bf16),
while gradgraph keeps every product's result in f32. Both are within bf16's rounding of the
f32 values, not of each other's bits; tests/models/test_reference_golden.cpp states the
tolerance. Deterministic: one thread, no random draws.
"""

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    pre = os.path.join(mg.GOLDEN_DIR, "ref_basic")
    import json
    with open(pre + ".config.json") as f:
        cfg = json.load(f)
    weights = mg.load_safetensors(pre + ".weights.safetensors")
    batch = mg.load_safetensors(pre + ".batch.safetensors")
    out = {}
    model = mg.load_model(cfg, weights)
    f32 = mg.compute_grad(model, batch["tokens"], batch["targets"])
    model = mg.load_model(cfg, weights)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model.zero_grad(set_to_none=True)
        logits = model(torch.as_tensor(np.asarray(batch["tokens"]), dtype=torch.long))
        loss = mg.loss_fn(logits.float(), torch.as_tensor(np.asarray(batch["targets"]), dtype=torch.long))
    loss.backward()
    out["loss"] = np.array(loss.item(), dtype=np.float32)
    out["logits"] = logits.detach().float().numpy().astype(np.float32)
    for n, p in model.named_parameters():
        assert p.dtype == torch.float32 and p.grad.dtype == torch.float32
        out["grad." + n] = p.grad.detach().numpy().astype(np.float32)
    out["f32.loss"] = f32["loss"]
    for k, v in f32.items():
        if k.startswith("grad."):
            out["f32." + k] = v
    path = pre + ".grad_bf16.safetensors"
    mg.save_safetensors(path, out, {"case": "basic", "reference": "PyTorch %s autocast cpu bfloat16" % torch.__version__})
    worst = max(float(np.linalg.norm(out[k] - out["f32." + k]) / max(np.linalg.norm(out["f32." + k]), 1e-30))
                for k in out if k.startswith("grad."))
    print("%8d  %s" % (os.path.getsize(path), os.path.relpath(path, mg.REPO)))
    print("loss bf16 %.6f f32 %.6f; worst gradient |bf16 - f32| / |f32| (per tensor, 2-norm) %.4f"
          % (out["loss"], out["f32.loss"], worst))


if __name__ == "__main__":
    sys.exit(main())
