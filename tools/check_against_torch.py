#!/usr/bin/python3
"""Check the output of the C++ `grad` / `replay` commands against PyTorch.

Needs PyTorch + numpy (not needed by CI). The model, the safetensors reader and the
replay loop are imported from tools/make_golden.py, so both scripts always agree.
Tolerances are those of the "Agreement" section of the reference-model spec:

  grad:   loss            |a-b| <= 1e-5 * |b|
          logits, grad.*  max|a-b| <= 1e-4 * max(max|b|, 1e-3)   (logits: spec gives no
                          tolerance, the gradient rule is used)
  replay: losses, grad_norms  |a-b| <= 1e-3 * |b| element-wise
          every parameter     max|a-b| <= 2e-3 * max(max|b|, 1e-2)
          blocks.*.attn.key.bias after adamw: only required to be finite

Usage (from the repository root):

  # C++ side first, e.g.
  #   gradgraph grad --config c.json --weights w.safetensors --batch b.safetensors --out g.safetensors
  /usr/bin/python3 tools/check_against_torch.py grad \\
      --config c.json --weights w.safetensors --batch b.safetensors --result g.safetensors

  /usr/bin/python3 tools/check_against_torch.py replay \\
      --config c.json --weights w.safetensors --batches bs.safetensors \\
      --optimizer adamw --lr 1e-2 --betas 0.9,0.99 --eps 1e-8 --weight-decay 0.1 --clip 1 \\
      --result final.safetensors
  # or take everything (config, weights, batches, options) from a golden replay JSON:
  /usr/bin/python3 tools/check_against_torch.py replay \\
      --options tests/golden/ref_basic.replay_adamw.json --result final.safetensors

  # self-test: every golden grad/replay file against a fresh PyTorch computation
  /usr/bin/python3 tools/check_against_torch.py golden

Options not given to `replay` default to: momentum 0, betas 0.9,0.999, eps 1e-8,
weight_decay 0, clip 0 (off); the options actually used are printed.
Exit status: 0 all within tolerance, 1 something out of tolerance (or missing /
unexpected / mis-shaped tensor), 2 bad input.
"""

import argparse
import glob
import json
import os
import sys

import numpy as np
import torch

sys.dont_write_bytecode = True  # no tools/__pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402


class Report:
    def __init__(self, title):
        self.title = title
        self.rows = []  # (name, err, tol, ok, note)
        self.problems = []

    def add(self, name, err, tol, note=""):
        ok = bool(np.isfinite(err)) and err <= tol
        self.rows.append((name, float(err), float(tol), ok, note))

    def structure(self, result, expected):
        missing = sorted(set(expected) - set(result))
        unexpected = sorted(set(result) - set(expected))
        misshaped = sorted(n for n in expected if n in result
                           and tuple(result[n].shape) != tuple(expected[n].shape))
        for kind, names in (("missing", missing), ("unexpected", unexpected),
                            ("mis-shaped", misshaped)):
            if names:
                self.problems.append("%s tensors: %s" % (kind, ", ".join(names)))
        return [n for n in expected if n in result and n not in misshaped]

    def print(self, verbose=False):
        print("== %s" % self.title)
        for p in self.problems:
            print("  FAIL %s" % p)
        rows = sorted(self.rows, key=lambda r: -(r[1] / r[2] if r[2] > 0 else np.inf))
        shown = rows if verbose else [r for r in rows if not r[3]] + [r for r in rows if r[3]][:5]
        for name, err, tol, ok, note in shown:
            print("  %-4s %-40s err %.3e  tol %.3e  (%.3g of tol)%s"
                  % ("ok" if ok else "FAIL", name, err, tol, err / tol if tol else np.inf,
                     "  " + note if note else ""))
        if not verbose and len(rows) > len(shown):
            print("  ... %d more within tolerance (use -v to list all)" % (len(rows) - len(shown)))
        bad = len(self.problems) + sum(1 for r in rows if not r[3])
        worst = rows[0] if rows else None
        if worst:
            print("  worst: %s at %.3g of its tolerance" % (worst[0], worst[1] / worst[2]))
        print("  %s" % ("PASS" if bad == 0 else "FAIL (%d problems)" % bad))
        return bad == 0


def _f64(a):
    return np.asarray(a, dtype=np.float64)


def max_abs_rule(a, b, rel, floor):
    a, b = _f64(a), _f64(b)
    err = np.max(np.abs(a - b)) if a.size else 0.0
    if not np.all(np.isfinite(a)):
        err = np.inf
    tol = rel * max(np.max(np.abs(b)) if b.size else 0.0, floor)
    return err, tol


def check_grad(cfg, weights, batch, result, title="grad"):
    model = mg.load_model(cfg, weights)
    ref = mg.compute_grad(model, batch["tokens"], batch["targets"])
    rep = Report(title)
    for n in rep.structure(result, ref):
        if n == "loss":
            b = float(ref[n])
            a = float(result[n])
            err = abs(a - b) if np.isfinite(a) else np.inf
            rep.add(n, err, 1e-5 * abs(b), "(relative 1e-5)")
        else:
            err, tol = max_abs_rule(result[n], ref[n], 1e-4, 1e-3)
            note = "(zero in exact arithmetic)" if n.endswith("attn.key.bias") else ""
            rep.add(n, err, tol, note)
    return rep


def check_replay(cfg, weights, batches, opts, result, title="replay"):
    model = mg.load_model(cfg, weights)
    ref = mg.replay(model, batches["tokens"], batches["targets"], opts)
    rep = Report(title)
    for n in rep.structure(result, ref):
        if n in ("losses", "grad_norms"):
            a, b = _f64(result[n]), _f64(ref[n])
            rel = np.abs(a - b) / np.maximum(np.abs(b), 1e-30)
            rel[~np.isfinite(a)] = np.inf
            rep.add(n, float(np.max(rel)) if rel.size else 0.0, 1e-3, "(relative, element-wise)")
        elif opts["optimizer"] == "adamw" and n.endswith("attn.key.bias"):
            finite = bool(np.all(np.isfinite(result[n])))
            rep.add(n, 0.0 if finite else np.inf, 1.0, "(adamw: only finiteness required)")
        else:
            err, tol = max_abs_rule(result[n], ref[n], 2e-3, 1e-2)
            rep.add(n, err, tol)
    return rep


def load_json(path):
    with open(path) as f:
        return json.load(f)


def parse_opts(args):
    opts = dict(optimizer=args.optimizer, lr=args.lr, momentum=args.momentum,
                betas=[float(x) for x in args.betas.split(",")], eps=args.eps,
                weight_decay=args.weight_decay, clip=args.clip)
    if len(opts["betas"]) != 2:
        raise ValueError("--betas needs two comma-separated numbers")
    return opts


def golden_selftest(golden_dir, verbose):
    ok = True
    for cfg_path in sorted(glob.glob(os.path.join(golden_dir, "ref_*.config.json"))):
        pre = cfg_path[: -len(".config.json")]
        cfg = load_json(cfg_path)
        weights = mg.load_safetensors(pre + ".weights.safetensors")
        rep = check_grad(cfg, weights, mg.load_safetensors(pre + ".batch.safetensors"),
                         mg.load_safetensors(pre + ".grad.safetensors"),
                         os.path.basename(pre) + " grad")
        ok &= rep.print(verbose)
        for jpath in sorted(glob.glob(pre + ".replay_*.json")):
            info = load_json(jpath)
            rep = check_replay(cfg, weights,
                               mg.load_safetensors(os.path.join(golden_dir, info["batches"])),
                               info, mg.load_safetensors(jpath[: -len(".json")] + ".safetensors"),
                               os.path.basename(jpath[: -len(".json")]))
            ok &= rep.print(verbose)
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grad", help="check a `grad` output file")
    g.add_argument("--config", required=True)
    g.add_argument("--weights", required=True)
    g.add_argument("--batch", required=True)
    g.add_argument("--result", required=True, help="the file the C++ grad command wrote")
    g.add_argument("-v", "--verbose", action="store_true")
    r = sub.add_parser("replay", help="check a `replay` output file")
    r.add_argument("--options", help="golden replay JSON (supplies config, weights, "
                   "batches and optimizer options; explicit flags are then not allowed)")
    r.add_argument("--config")
    r.add_argument("--weights")
    r.add_argument("--batches")
    r.add_argument("--optimizer", choices=["sgd", "adamw"])
    r.add_argument("--lr", type=float)
    r.add_argument("--momentum", type=float, default=0.0)
    r.add_argument("--betas", default="0.9,0.999")
    r.add_argument("--eps", type=float, default=1e-8)
    r.add_argument("--weight-decay", type=float, default=0.0)
    r.add_argument("--clip", type=float, default=0.0)
    r.add_argument("--result", required=True, help="the file the C++ replay command wrote")
    r.add_argument("-v", "--verbose", action="store_true")
    s = sub.add_parser("golden", help="self-test: golden files vs fresh PyTorch")
    s.add_argument("--dir", default=mg.GOLDEN_DIR)
    s.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)

    torch.set_num_threads(1)
    try:
        if args.cmd == "golden":
            return 0 if golden_selftest(args.dir, args.verbose) else 1
        if args.cmd == "grad":
            rep = check_grad(load_json(args.config), mg.load_safetensors(args.weights),
                             mg.load_safetensors(args.batch), mg.load_safetensors(args.result),
                             "grad %s" % args.result)
            return 0 if rep.print(args.verbose) else 1
        # replay
        if args.options:
            info = load_json(args.options)
            base = os.path.dirname(os.path.abspath(args.options))
            cfg_path = os.path.join(base, info["config"])
            w_path = os.path.join(base, info["weights"])
            b_path = os.path.join(base, info["batches"])
            opts = {k: info[k] for k in ("optimizer", "lr", "momentum", "betas", "eps",
                                         "weight_decay", "clip")}
        else:
            for k in ("config", "weights", "batches", "optimizer", "lr"):
                if getattr(args, k) is None:
                    raise ValueError("replay: --%s is required without --options" % k)
            cfg_path, w_path, b_path = args.config, args.weights, args.batches
            opts = parse_opts(args)
        print("optimizer options: %s" % json.dumps(opts))
        rep = check_replay(load_json(cfg_path), mg.load_safetensors(w_path),
                           mg.load_safetensors(b_path), opts, mg.load_safetensors(args.result),
                           "replay %s" % args.result)
        return 0 if rep.print(args.verbose) else 1
    except (ValueError, KeyError, OSError, json.JSONDecodeError) as e:
        print("check_against_torch: %s" % e, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
