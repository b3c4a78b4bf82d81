#!/usr/bin/env python3
"""Summarizes a matserve /metrics scrape: requests by code, achieved GFLOP/s and GB/s per kernel
variant and precision (FLOP and byte counters over kernel seconds), latency per stage, runtime
gauges and GPU (NVML) gauges. Plain Python, no packages.

usage: scripts/bench/metrics_summary.py SCRAPE.txt [EARLIER_SCRAPE.txt]
With an earlier scrape, throughput comes from the difference of the two (the window between).
"""
import collections
import re
import sys


def parse(path):
    out = []
    for line in open(path):
        if not line.strip() or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$", line.strip())
        if m:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            out.append((m.group(1), labels, float(m.group(3))))
    return out


def by(samples, name, keys, **want):
    acc = collections.defaultdict(float)
    for n, labels, v in samples:
        if n == name and all(labels.get(k) == x for k, x in want.items()):
            acc[tuple(labels.get(k, "") for k in keys)] += v
    return acc


def minus(a, b):
    return {k: v - b.get(k, 0.0) for k, v in a.items()}


def main(argv):
    now = parse(argv[0])
    before = parse(argv[1]) if len(argv) > 1 else []
    window = "between the two scrapes" if before else "since the server started"

    print("Requests by rpc and code:")
    for (rpc, code), v in sorted(by(now, "matserve_requests_total", ("rpc", "code")).items()):
        print(f"  {rpc:14s} {code:20s} {v:8.0f}")

    keys = ("op", "variant", "precision", "device")
    seconds = minus(by(now, "matserve_kernel_seconds_total", keys),
                    by(before, "matserve_kernel_seconds_total", keys))
    flops = minus(by(now, "matserve_kernel_flops_total", keys),
                  by(before, "matserve_kernel_flops_total", keys))
    moved = minus(by(now, "matserve_kernel_bytes_total", keys),
                  by(before, "matserve_kernel_bytes_total", keys))
    count_keys = ("op", "variant", "precision")
    counts = minus(by(now, "matserve_request_duration_seconds_count", count_keys, stage="kernel"),
                   by(before, "matserve_request_duration_seconds_count", count_keys,
                      stage="kernel"))
    print(f"\nAchieved throughput per kernel ({window}; work / kernel seconds):")
    print(f"  {'op':9s} {'variant':28s} {'precision':9s} {'device':7s} {'requests':>8s} "
          f"{'kernel s':>9s} {'rate':>12s}")
    for k in sorted(seconds):
        s = seconds[k]
        if s <= 0:
            continue
        op = k[0]
        rate = (flops.get(k, 0) if op == "gemm" else moved.get(k, 0)) / s / 1e9
        unit = "GFLOP/s" if op == "gemm" else "GB/s"
        print(f"  {op:9s} {k[1]:28s} {k[2]:9s} {k[3]:7s} {counts.get(k[:3], 0):8.0f} "
              f"{s:9.3f} {rate:8.1f} {unit}")

    print("\nMean time per stage of successful requests (ms):")
    ok = {"outcome": "ok"}  # failed requests observe their total only (outcome="error")
    sums = minus(by(now, "matserve_request_duration_seconds_sum", ("stage",), **ok),
                 by(before, "matserve_request_duration_seconds_sum", ("stage",), **ok))
    cnts = minus(by(now, "matserve_request_duration_seconds_count", ("stage",), **ok),
                 by(before, "matserve_request_duration_seconds_count", ("stage",), **ok))
    for (stage,), v in sorted(sums.items()):
        if cnts.get((stage,), 0) > 0:
            print(f"  {stage:15s} {1e3 * v / cnts[(stage,)]:9.3f}")

    print("\nRuntime and GPU gauges (this scrape):")
    for n, labels, v in now:
        if n.startswith(("matserve_gpu_", "matserve_queue_depth", "matserve_execution_slots",
                         "matserve_device_pool_bytes", "matserve_device_pool_allocations",
                         "matserve_staging_pinned", "matserve_admission_rejections",
                         "matserve_build_info")):
            text = ",".join(f"{k}={x}" for k, x in sorted(labels.items()))
            print(f"  {n}{{{text}}} {v:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
