#!/usr/bin/python3
"""Generate the PyTorch golden files that the C++ tests compare against.

How to run (from the repository root; needs PyTorch and numpy, NOT needed by CI):

    /usr/bin/python3 tools/make_golden.py

Everything is deterministic (fixed seeds, one CPU thread). Output goes to
tests/golden/ (see tests/golden/README.md for a description of every file).

What it writes
--------------
(a) attention_single_head.safetensors -- single-head attention checked against
    torch.nn.MultiheadAttention(embed_dim=8, num_heads=1, bias=False,
    batch_first=True), computed in float64 and stored as F32:

      x          F32 [2,4,8]   input (batch 2, seq 4, d_model 8); query = key = value = x
      W_Q, W_K, W_V, W_O  F32 [8,8]  stored [in, out]: q = x @ W_Q, k = x @ W_K,
                 v = x @ W_V, out = attn @ W_O  (i.e. the TRANSPOSE of PyTorch's
                 Linear [out, in] layout; in_proj_weight = cat(W_Q^T, W_K^T, W_V^T),
                 out_proj.weight = W_O^T)
      out, weights                 no mask.   out [2,4,8], weights [2,4,4] (rows = queries,
                                   columns = keys, rows sum to 1)
      out_causal, weights_causal   causal mask: query t sees keys 0..t
      causal_mask  I32 [4,4]       1 = keep (key <= query), 0 = masked
      out_pad, weights_pad         key padding mask
      pad_mask     I32 [2,4]       1 = keep, 0 = masked; batch 1 masks its last key
                                   (PyTorch's key_padding_mask is the opposite: True = masked)

    The script also checks that softmax(Q K^T / sqrt(8)) V W_O by hand matches MHA.

(b) Reference-model cases (model and formats per docs/reference-model.md,
    "The reference model and the interchange format"), computed in float32:

      ref_<case>.config.json          model config
      ref_<case>.weights.safetensors  every parameter, spec names, Linear weights [out, in]
      ref_<case>.batch.safetensors    tokens I32 [B,T], targets I32 [B,T] (-1 = ignore)
      ref_<case>.grad.safetensors     what `grad` writes: loss F32 [], logits F32 [B,T,V],
                                      grad.<param> for every parameter
    and for replay cases:
      ref_<case>.batches<S>.safetensors   tokens / targets I32 [N,B,T]
      ref_<case>.replay_<opt><S>.safetensors  every parameter after the last step under its
                                      own name, losses F32 [N], grad_norms F32 [N]
      ref_<case>.replay_<opt><S>.json     the options used (optimizer, lr, momentum, betas,
                                      eps, weight_decay, clip) plus the file names of the
                                      config / weights / batches used
    where <S> is empty for N = 5 steps and "20" for the 20-step run.

The model code (RefModel, safetensors reader/writer, replay) is imported by
tools/check_against_torch.py, so keep the module importable (no work at import time).
"""

import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN_DIR = os.path.join(REPO, "tests", "golden")

# --------------------------------------------------------------------------------------
# safetensors (own implementation; the `safetensors` package is not assumed)
# --------------------------------------------------------------------------------------

_DTYPES = {"F32": (np.dtype("<f4"), 4), "F64": (np.dtype("<f8"), 8),
           "I32": (np.dtype("<i4"), 4), "I64": (np.dtype("<i8"), 8)}
_NP_TO_ST = {np.dtype("float32"): "F32", np.dtype("float64"): "F64",
             np.dtype("int32"): "I32", np.dtype("int64"): "I64"}


def save_safetensors(path, tensors, metadata=None):
    """Write {name: np.ndarray} as safetensors: 8-byte LE header length, JSON header
    padded with spaces to a multiple of 8, raw little-endian row-major data.
    Tensors are laid out in sorted name order."""
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        if a.dtype not in _NP_TO_ST:
            raise ValueError("unsupported dtype %s for %s" % (a.dtype, name))
        st = _NP_TO_ST[a.dtype]
        data = np.ascontiguousarray(a, dtype=_DTYPES[st][0]).tobytes()
        header[name] = {"dtype": st, "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-len(hjson)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)


def load_safetensors(path, with_metadata=False):
    """Read a safetensors file into {name: np.ndarray}, validating the layout."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: file shorter than 8 bytes" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise ValueError("%s: header length %d exceeds file size" % (path, n))
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    spans = []
    for name, info in header.items():
        dt, size = _DTYPES[info["dtype"]]
        shape = tuple(int(s) for s in info["shape"])
        b, e = info["data_offsets"]
        if not (0 <= b <= e <= len(data)):
            raise ValueError("%s: %s offsets out of range" % (path, name))
        if e - b != int(np.prod(shape, dtype=np.int64)) * size:
            raise ValueError("%s: %s byte size does not match shape" % (path, name))
        spans.append((b, e, name))
        out[name] = np.frombuffer(data[b:e], dtype=dt).reshape(shape).copy()
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise ValueError("%s: %s and %s overlap" % (path, n0, n1))
    return (out, meta) if with_metadata else out


# --------------------------------------------------------------------------------------
# The reference model (spec: "Parameters" and "Forward")
# --------------------------------------------------------------------------------------

CONFIG_KEYS = ["vocab_size", "block_size", "n_layer", "n_head", "n_embd", "bias",
               "pos_encoding", "tie_weights", "gelu", "layernorm_eps"]


class LayerNorm(nn.Module):
    """LayerNorm over the last axis; with bias=False there is no bias parameter."""

    def __init__(self, d, bias, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, b = cfg["n_embd"], cfg["bias"]
        self.n_head = cfg["n_head"]
        self.query = nn.Linear(d, d, bias=b)
        self.key = nn.Linear(d, d, bias=b)
        self.value = nn.Linear(d, d, bias=b)
        self.proj = nn.Linear(d, d, bias=b)

    def forward(self, h):
        B, T, D = h.shape
        H = self.n_head
        hs = D // H
        q = self.query(h).view(B, T, H, hs).transpose(1, 2)
        k = self.key(h).view(B, T, H, hs).transpose(1, 2)
        v = self.value(h).view(B, T, H, hs).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        masked = torch.triu(torch.ones(T, T, dtype=torch.bool, device=h.device), 1)
        scores = scores.masked_fill(masked, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, D)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, b = cfg["n_embd"], cfg["bias"]
        self.fc1 = nn.Linear(d, 4 * d, bias=b)
        self.fc2 = nn.Linear(4 * d, d, bias=b)
        self.gelu = nn.GELU(approximate="tanh" if cfg["gelu"] == "tanh" else "none")

    def forward(self, x):
        return self.fc2(self.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, b, eps = cfg["n_embd"], cfg["bias"], cfg["layernorm_eps"]
        self.norm1 = LayerNorm(d, b, eps)
        self.attn = Attention(cfg)
        self.norm2 = LayerNorm(d, b, eps)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        return x


def sinusoidal_table(T, D, dtype=torch.float32):
    """P[p, 2k] = sin(p w_k), P[p, 2k+1] = cos(p w_k), w_k = exp(-(2k) ln(10000) / D).
    Computed in float64, then rounded."""
    P = torch.zeros(T, D, dtype=torch.float64)
    p = torch.arange(T, dtype=torch.float64)[:, None]
    two_k = torch.arange(0, D, 2, dtype=torch.float64)
    w = torch.exp(-two_k * math.log(10000.0) / D)
    P[:, 0::2] = torch.sin(p * w)
    P[:, 1::2] = torch.cos(p * w[: D // 2])
    return P.to(dtype)


class RefModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        check_config(cfg)
        self.cfg = dict(cfg)
        V, D = cfg["vocab_size"], cfg["n_embd"]
        self.tok_emb = nn.Embedding(V, D)
        if cfg["pos_encoding"] == "learned":
            self.pos_emb = nn.Embedding(cfg["block_size"], D)
        else:
            self.register_buffer("P", sinusoidal_table(cfg["block_size"], D), persistent=False)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg["n_layer"])])
        self.norm_f = LayerNorm(D, cfg["bias"], cfg["layernorm_eps"])
        if not cfg["tie_weights"]:
            self.head = nn.Linear(D, V, bias=False)

    def forward(self, tokens):
        B, T = tokens.shape
        assert T <= self.cfg["block_size"]
        if self.cfg["pos_encoding"] == "learned":
            P = self.pos_emb.weight[:T]
        else:
            P = self.P[:T].to(self.tok_emb.weight.dtype)
        x = self.tok_emb.weight[tokens] + P
        for blk in self.blocks:
            x = blk(x)
        x = self.norm_f(x)
        W = self.tok_emb.weight if self.cfg["tie_weights"] else self.head.weight
        return x @ W.t()


def check_config(cfg):
    missing = [k for k in CONFIG_KEYS if k not in cfg]
    extra = [k for k in cfg if k not in CONFIG_KEYS]
    if missing or extra:
        raise ValueError("config: missing %s, unknown %s" % (missing, extra))
    if cfg["n_embd"] % cfg["n_head"]:
        raise ValueError("config: n_embd must be divisible by n_head")
    if cfg["pos_encoding"] not in ("learned", "sinusoidal"):
        raise ValueError("config: pos_encoding")
    if cfg["gelu"] not in ("erf", "tanh"):
        raise ValueError("config: gelu")


def loss_fn(logits, targets):
    """Mean over non-ignored (target != -1) positions of logsumexp - logit[target]."""
    if not bool((targets != -1).any()):
        raise ValueError("batch has no non-ignored target")
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1).long(), ignore_index=-1)


def param_dict(model):
    """{spec name: numpy float32} for every parameter."""
    return {n: p.detach().cpu().numpy().astype(np.float32) for n, p in model.named_parameters()}


def load_model(cfg, weights, dtype=torch.float32):
    """Build a RefModel and load {name: array}; names/shapes must match exactly."""
    model = RefModel(cfg)
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(weights))
    unexpected = sorted(set(weights) - set(params))
    misshaped = sorted(n for n in params if n in weights
                       and tuple(weights[n].shape) != tuple(params[n].shape))
    if missing or unexpected or misshaped:
        raise ValueError("weights do not match config: missing %s, unexpected %s, "
                         "mis-shaped %s" % (missing, unexpected, misshaped))
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(torch.from_numpy(np.asarray(weights[n], dtype=np.float32)))
    return model.to(dtype)


def compute_grad(model, tokens, targets):
    """What the `grad` command writes: loss, logits, grad.<name>."""
    model.zero_grad(set_to_none=True)
    logits = model(torch.as_tensor(np.asarray(tokens), dtype=torch.long))
    loss = loss_fn(logits, torch.as_tensor(np.asarray(targets), dtype=torch.long))
    loss.backward()
    out = {"loss": np.array(loss.item(), dtype=np.float32),
           "logits": logits.detach().numpy().astype(np.float32)}
    for n, p in model.named_parameters():
        out["grad." + n] = p.grad.detach().numpy().astype(np.float32)
    return out


def make_optimizer(model, opts):
    """Optimizer per the spec's "Training step". opts: dict with optimizer, lr, momentum,
    betas, eps, weight_decay (clip is handled by replay())."""
    if opts["optimizer"] == "sgd":
        return torch.optim.SGD(model.parameters(), lr=opts["lr"],
                               momentum=opts.get("momentum", 0.0))
    if opts["optimizer"] == "adamw":
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": opts.get("weight_decay", 0.0)},
                  {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=opts["lr"], betas=tuple(opts.get("betas", (0.9, 0.999))),
                                 eps=opts.get("eps", 1e-8))
    raise ValueError("unknown optimizer %r" % opts["optimizer"])


def replay(model, tokens_n, targets_n, opts):
    """Run N training steps; returns the `replay` output dict (parameters after the
    last step, losses [N], grad_norms [N] before clipping)."""
    opt = make_optimizer(model, opts)
    clip = float(opts.get("clip", 0.0) or 0.0)
    losses, norms = [], []
    for n in range(tokens_n.shape[0]):
        opt.zero_grad(set_to_none=True)
        logits = model(torch.as_tensor(np.asarray(tokens_n[n]), dtype=torch.long))
        loss = loss_fn(logits, torch.as_tensor(np.asarray(targets_n[n]), dtype=torch.long))
        loss.backward()
        params = [p for p in model.parameters() if p.grad is not None]
        if clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, clip)
        else:  # same formula as clip_grad_norm_, without scaling
            norm = torch.norm(torch.stack([torch.norm(p.grad.detach(), 2.0) for p in params]), 2.0)
        losses.append(loss.item())
        norms.append(float(norm))
        opt.step()
    out = param_dict(model)
    out["losses"] = np.array(losses, dtype=np.float32)
    out["grad_norms"] = np.array(norms, dtype=np.float32)
    return out


# --------------------------------------------------------------------------------------
# (a) single-head attention golden
# --------------------------------------------------------------------------------------

def make_attention_golden(outdir):
    torch.manual_seed(1234)
    B, T, D = 2, 4, 8
    x = torch.randn(B, T, D, dtype=torch.float64)
    # [in, out] matrices: q = x @ W_Q, etc. Values rounded to float32 first so the stored
    # F32 inputs are exactly what the float64 reference used.
    W = {k: (torch.randn(D, D, dtype=torch.float64) * 0.5).float().double()
         for k in ("W_Q", "W_K", "W_V", "W_O")}
    x = x.float().double()

    mha = nn.MultiheadAttention(embed_dim=D, num_heads=1, bias=False, batch_first=True).double()
    mha.eval()
    with torch.no_grad():
        # PyTorch Linear weights are [out, in]: in_proj_weight = [Wq; Wk; Wv] with each
        # block the transpose of our [in, out] matrix.
        mha.in_proj_weight.copy_(torch.cat([W["W_Q"].t(), W["W_K"].t(), W["W_V"].t()], 0))
        mha.out_proj.weight.copy_(W["W_O"].t())

    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)  # True = masked
    kpm = torch.zeros(B, T, dtype=torch.bool)
    kpm[1, T - 1] = True  # batch 1 masks its last key position

    def hand(attn_mask=None, key_pad=None):
        q, k, v = x @ W["W_Q"], x @ W["W_K"], x @ W["W_V"]
        s = q @ k.transpose(-2, -1) / math.sqrt(D)
        if attn_mask is not None:
            s = s.masked_fill(attn_mask, float("-inf"))
        if key_pad is not None:
            s = s.masked_fill(key_pad[:, None, :], float("-inf"))
        a = torch.softmax(s, -1)
        return (a @ v) @ W["W_O"], a

    res = {}
    with torch.no_grad():
        for suffix, am, kp in (("", None, None), ("_causal", causal, None), ("_pad", None, kpm)):
            o, w = mha(x, x, x, attn_mask=am, key_padding_mask=kp, need_weights=True)
            ho, hw = hand(am, kp)
            err = max((o - ho).abs().max().item(), (w - hw).abs().max().item())
            assert err < 1e-12, "hand-written attention disagrees with MHA (%s): %g" % (suffix, err)
            res["out" + suffix] = o.float().numpy()
            res["weights" + suffix] = w.float().numpy()

    tensors = {"x": x.float().numpy()}
    tensors.update({k: v.float().numpy() for k, v in W.items()})
    tensors.update(res)
    tensors["causal_mask"] = (~causal).to(torch.int32).numpy()
    tensors["pad_mask"] = (~kpm).to(torch.int32).numpy()
    meta = {
        "convention": "W_Q,W_K,W_V,W_O are [in,out]: q=x@W_Q, k=x@W_K, v=x@W_V, "
                      "out=softmax(q k^T/sqrt(8)) v @ W_O; PyTorch in_proj_weight=cat(W_Q^T,W_K^T,W_V^T), "
                      "out_proj.weight=W_O^T",
        "reference": "torch.nn.MultiheadAttention(embed_dim=8,num_heads=1,bias=False,batch_first=True), "
                     "float64, stored F32; query=key=value=x",
        "masks": "causal_mask I32 [4,4] and pad_mask I32 [2,4]: 1=keep, 0=masked; "
                 "weights [B,Tq,Tk] rows are queries",
        "generator": "tools/make_golden.py",
    }
    path = os.path.join(outdir, "attention_single_head.safetensors")
    save_safetensors(path, tensors, meta)
    return path


# --------------------------------------------------------------------------------------
# (b) reference-model cases
# --------------------------------------------------------------------------------------

CASES = {
    "basic": dict(cfg=dict(vocab_size=13, block_size=8, n_layer=2, n_head=4, n_embd=16,
                           bias=True, pos_encoding="learned", tie_weights=True, gelu="erf",
                           layernorm_eps=1e-5),
                  B=3, T=8, ignore="some"),
    "odd": dict(cfg=dict(vocab_size=11, block_size=10, n_layer=2, n_head=3, n_embd=15,
                         bias=True, pos_encoding="learned", tie_weights=False, gelu="tanh",
                         layernorm_eps=1e-5),
                B=2, T=7, ignore="none"),
    "headsize1": dict(cfg=dict(vocab_size=17, block_size=9, n_layer=2, n_head=6, n_embd=6,
                               bias=False, pos_encoding="sinusoidal", tie_weights=True,
                               gelu="erf", layernorm_eps=1e-5),
                      B=2, T=9, ignore="some"),
    "sinus": dict(cfg=dict(vocab_size=29, block_size=12, n_layer=1, n_head=2, n_embd=12,
                           bias=False, pos_encoding="sinusoidal", tie_weights=False,
                           gelu="erf", layernorm_eps=1e-5),
                  B=2, T=10, ignore="most"),
}

# (case, optimizer options, number of steps, file suffix)
REPLAYS = [
    ("basic", dict(optimizer="adamw", lr=1e-2, momentum=0.0, betas=[0.9, 0.99], eps=1e-8,
                   weight_decay=0.1, clip=1.0), 5, ""),
    ("basic", dict(optimizer="sgd", lr=0.1, momentum=0.9, betas=[0.9, 0.999], eps=1e-8,
                   weight_decay=0.0, clip=0.0), 5, ""),
    ("odd", dict(optimizer="adamw", lr=1e-2, momentum=0.0, betas=[0.9, 0.99], eps=1e-8,
                 weight_decay=0.1, clip=0.5), 5, ""),
    ("basic", dict(optimizer="adamw", lr=1e-2, momentum=0.0, betas=[0.9, 0.99], eps=1e-8,
                   weight_decay=0.1, clip=1.0), 20, "20"),
]


def init_weights(model, gen):
    """Random init: matrices normal(0, 0.15) (attention q/k 0.3 so the attention pattern
    is far from uniform), LayerNorm weights 1 + normal(0, 0.1), biases normal(0, 0.05)."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
            elif "norm" in n:
                p.copy_(1.0 + torch.randn(p.shape, generator=gen) * 0.1)
            elif ".attn.query." in n or ".attn.key." in n:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.15)


def make_batch(gen, V, B, T, ignore):
    tokens = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int32)
    targets = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int32)
    if ignore == "some":
        drop = torch.rand(B, T, generator=gen) < 0.25
        targets[drop] = -1
        targets[0, 0] = -1
    elif ignore == "most":
        keep = torch.zeros(B, T, dtype=torch.bool)
        keep[0, 1] = keep[0, T - 1] = keep[1, T // 2] = True
        targets[~keep] = -1
    if ignore == "some" and int(targets[-1, -1]) < 0:
        targets[-1, -1] = 0  # guarantee at least one non-ignored target
    return tokens, targets


def case_prefix(outdir, name):
    return os.path.join(outdir, "ref_%s" % name)


def make_ref_cases(outdir):
    written = []
    for ci, (name, c) in enumerate(sorted(CASES.items())):
        gen = torch.Generator().manual_seed(1000 + ci)
        cfg = c["cfg"]
        pre = case_prefix(outdir, name)
        with open(pre + ".config.json", "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        model = RefModel(cfg)
        init_weights(model, gen)
        weights = param_dict(model)
        save_safetensors(pre + ".weights.safetensors", weights,
                         {"case": name, "generator": "tools/make_golden.py"})
        tokens, targets = make_batch(gen, cfg["vocab_size"], c["B"], c["T"], c["ignore"])
        save_safetensors(pre + ".batch.safetensors",
                         {"tokens": tokens.numpy(), "targets": targets.numpy()})
        model = load_model(cfg, weights)
        g = compute_grad(model, tokens.numpy(), targets.numpy())
        save_safetensors(pre + ".grad.safetensors", g,
                         {"case": name, "reference": "PyTorch %s float32" % torch.__version__})
        written += [pre + s for s in (".config.json", ".weights.safetensors",
                                      ".batch.safetensors", ".grad.safetensors")]

        for ri, (rcase, opts, N, suffix) in enumerate(REPLAYS):
            if rcase != name:
                continue
            bpath = pre + ".batches%s.safetensors" % suffix
            if bpath not in written:
                bgen = torch.Generator().manual_seed(5000 + ci * 10 + N)
                toks, tgts = [], []
                for _ in range(N):
                    t, y = make_batch(bgen, cfg["vocab_size"], c["B"], c["T"], c["ignore"])
                    toks.append(t)
                    tgts.append(y)
                save_safetensors(bpath, {"tokens": torch.stack(toks).numpy(),
                                         "targets": torch.stack(tgts).numpy()})
                written.append(bpath)
            batches = load_safetensors(bpath)
            model = load_model(cfg, weights)
            out = replay(model, batches["tokens"], batches["targets"], opts)
            tag = "replay_%s%s" % (opts["optimizer"], suffix)
            save_safetensors(pre + "." + tag + ".safetensors", out,
                             {"case": name, "steps": str(N),
                              "reference": "PyTorch %s float32" % torch.__version__})
            info = dict(opts)
            info.update(steps=N, config=os.path.basename(pre + ".config.json"),
                        weights=os.path.basename(pre + ".weights.safetensors"),
                        batches=os.path.basename(bpath))
            with open(pre + "." + tag + ".json", "w") as f:
                json.dump(info, f, indent=2)
                f.write("\n")
            written += [pre + "." + tag + ".safetensors", pre + "." + tag + ".json"]
    return written


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    written = [make_attention_golden(GOLDEN_DIR)]
    written += make_ref_cases(GOLDEN_DIR)
    total = 0
    for p in written:
        s = os.path.getsize(p)
        total += s
        print("%8d  %s" % (s, os.path.relpath(p, REPO)))
    print("%8d  total" % total)


if __name__ == "__main__":
    sys.exit(main())
