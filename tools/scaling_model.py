#!/usr/bin/env python3
"""Data parallel beyond one machine, on paper: step time against the number of ranks N for
10 and 100 Gb/s links, from a measured compute time per token and the gradient bytes.

A ring all-reduce moves 2 (N - 1) / N of the gradient bytes through each rank's link. Two
bounds: nothing hidden (the reduction after the backward), and every bucket but the last
hidden behind the backward (gradgraph starts each bucket as soon as it is final). Scaling
efficiency = compute / (compute + exposed communication); the table gives the tokens per
rank (and the global batch) at which it stays at or above 90%.

  python3 tools/scaling_model.py --ms-per-token 0.0179 --grad-mb 3.24 --last-bucket-mb 0.07
"""
import argparse

p = argparse.ArgumentParser()
p.add_argument("--name", default="model")
p.add_argument("--ms-per-token", type=float, required=True, help="measured step time / tokens per step, one machine")
p.add_argument("--grad-mb", type=float, required=True, help="gradient bytes per step (MB)")
p.add_argument("--last-bucket-mb", type=float, required=True, help="the bucket made last by the backward (MB)")
p.add_argument("--seq", type=int, default=64, help="tokens per sequence, to state batches in sequences")
p.add_argument("--latency-us", type=float, default=20.0, help="per message and hop")
a = p.parse_args()

def comm_ms(mb, n, gbps):
    if n == 1:
        return 0.0
    bytes_moved = 2 * (n - 1) / n * mb * 1e6
    return bytes_moved / (gbps * 1e9 / 8) * 1e3 + 2 * (n - 1) * a.latency_us * 1e-3

print(f"{a.name}: {a.ms_per_token:.4g} ms per token on one machine, {a.grad_mb} MB of gradients "
      f"(last bucket {a.last_bucket_mb} MB)")
print("| link | N | all-reduce ms (nothing hidden) | tokens per rank for 90% (nothing hidden) | "
      f"same, all but the last bucket hidden | global batch for 90% (sequences of {a.seq}) |")
print("|---|---|---|---|---|---|")
for gbps in (10, 100):
    for n in (2, 4, 8, 16, 64):
        c = comm_ms(a.grad_mb, n, gbps)
        # compute >= 9 * exposed  <=>  efficiency >= 90%
        tok_none = 9 * c / a.ms_per_token
        tok_last = 9 * comm_ms(a.last_bucket_mb, n, gbps) / a.ms_per_token
        print(f"| {gbps} Gb/s | {n} | {c:.2f} | {tok_none:.0f} | {tok_last:.0f} | "
              f"{n * tok_none / a.seq:.0f} to {n * tok_last / a.seq:.0f} |")
