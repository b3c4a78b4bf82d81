#!/usr/bin/env python3
"""One large product on one GPU and spread over every GPU of the server, as a client sees it.

For each case (dtype:n, an n x n x n product) the operands are uploaded once (resident, on one
GPU); then the same Multiply on the two handles, the result kept on the server, runs with
split="never" and split="always" in turn, REPS times each after one warm-up of each. Reported:
the client's wall time per call (median), the reply's kernel time (CUDA events around the whole
product, the helpers' share and copies included), the speed-up of the split call over the
one-GPU call, and the devices that ran. The two results are then downloaded and checked: 256
sampled entries of each against float64 with the per-element bound of the GEMM tests
(tests/support/gemm_bound.py), and the largest difference between the two.

Writes split-gemm.json and split-gemm.md to --out; prints the table.

usage: split_gemm.py --target HOST:PORT [--cases bf16:32768,fp32:16384,fp64:16384] [--reps 5]
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "support"))
import gemm_bound  # noqa: E402

from matserve_client import Client  # noqa: E402
from matserve_client.dtypes import Bfloat16  # noqa: E402


def log(msg):
    print(f"[split_gemm {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def operand(dtype, n, rng):
    """(what to upload, its values as float64): uniform in [-1, 1), rounded to `dtype`."""
    x = rng.random((n, n), dtype=np.float32) * 2 - 1
    if dtype == "fp64":
        x = x.astype(np.float64)
        return x, x
    if dtype == "fp32":
        return x, x
    bits = Bfloat16.from_float(x)
    values = bits.to_float32()
    return bits, values


def sampled_check(c, a, b, dtype, rng, count=16):
    """Rows x columns of samples (count x count entries) of c against float64, judged by the
    tests' per-element bound: (entries outside, worst error / bound)."""
    rows = rng.choice(c.shape[0], count, replace=False)
    cols = rng.choice(c.shape[1], count, replace=False)
    sa = a[rows].astype(np.float64)
    sb = b[:, cols].astype(np.float64)
    want = sa @ sb
    got = np.asarray(c[np.ix_(rows, cols)], np.float64)
    limit = gemm_bound.bound(sa, sb, dtype, dtype, dtype, want=want)
    ratio = np.abs(got - want) / limit
    return int((ratio > 1).sum()), float(ratio.max())


def run_case(client, dtype, n, reps, rng):
    log(f"{dtype} {n}^3: making and uploading the operands")
    a_up, a = operand(dtype, n, rng)
    b_up, b = operand(dtype, n, rng)
    ha = client.upload(a_up)
    hb = client.upload(b_up, colocate_with=ha)
    del a_up, b_up
    times = {"never": [], "always": []}
    kernel = {"never": [], "always": []}
    devices = {}
    for rep in range(reps + 1):  # the first of each is warm-up
        for mode in ("never", "always"):
            start = time.perf_counter()
            r = client.multiply(ha, hb, keep_result=True, split=mode, timeout=600)
            wall = time.perf_counter() - start
            devices[mode] = r.device
            r.resident.release()
            if rep > 0:
                times[mode].append(wall * 1e3)
                kernel[mode].append(r.timing.kernel_us / 1e3)
        log(f"{dtype} {n}^3: round {rep}/{reps}: one GPU {times['never'][-1] if rep else 0:.1f} ms,"
            f" split {times['always'][-1] if rep else 0:.1f} ms")
    results = {}
    for mode in ("never", "always"):
        r = client.multiply(ha, hb, keep_result=True, split=mode, timeout=600)
        results[mode] = r.resident.download()
        r.resident.release()
    ha.release()
    hb.release()
    checks = {mode: sampled_check(results[mode], a, b, dtype, rng) for mode in results}
    one, split = results["never"], results["always"]
    scale = float(np.abs(one).max()) or 1.0
    diff = float(np.abs(np.asarray(split, np.float64) - one).max()) / scale
    med = {m: statistics.median(times[m]) for m in times}
    kmed = {m: statistics.median(kernel[m]) for m in kernel}
    return {
        "dtype": dtype, "n": n, "reps": reps,
        "one_gpu_ms": med["never"], "split_ms": med["always"],
        "speedup": med["never"] / med["always"],
        "one_gpu_kernel_ms": kmed["never"], "split_kernel_ms": kmed["always"],
        "kernel_speedup": kmed["never"] / kmed["always"],
        "tflops_one_gpu": 2 * n**3 / (med["never"] * 1e-3) / 1e12,
        "tflops_split": 2 * n**3 / (med["always"] * 1e-3) / 1e12,
        "devices_one_gpu": devices["never"], "devices_split": devices["always"],
        "samples_outside_bound": {m: checks[m][0] for m in checks},
        "worst_error_over_bound": {m: checks[m][1] for m in checks},
        "max_difference_relative": diff,
        "wall_ms": times, "kernel_ms": kernel,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True)
    p.add_argument("--cases", default="bf16:32768,fp32:16384,fp64:16384")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--out", default="/tmp/matserve-split-gemm")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(2026)
    rows = []
    with Client(args.target, timeout=600) as client:
        client.wait_ready(60)
        gpus = len(client.server_info().devices)
        for case in args.cases.split(","):
            dtype, n = case.split(":")
            rows.append(run_case(client, dtype, int(n), args.reps, rng))
            json.dump({"gpus": gpus, "cases": rows}, open(os.path.join(args.out, "split-gemm.json"), "w"), indent=1)
    lines = [
        f"| product | one GPU, ms | {gpus} GPUs, ms | speed-up | kernel time one / split, ms | kernel speed-up | "
        "TFLOP/s one / split | ran on | sampled entries outside the bound | max difference |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['dtype']} {r['n']}^3 | {r['one_gpu_ms']:.1f} | {r['split_ms']:.1f} | **{r['speedup']:.2f}x** | "
            f"{r['one_gpu_kernel_ms']:.1f} / {r['split_kernel_ms']:.1f} | {r['kernel_speedup']:.2f}x | "
            f"{r['tflops_one_gpu']:.0f} / {r['tflops_split']:.0f} | {r['devices_split'].split()[0]} | "
            f"{r['samples_outside_bound']['never']} / {r['samples_outside_bound']['always']} of 256 | "
            f"{r['max_difference_relative']:.2g} |")
    table = "\n".join(lines)
    open(os.path.join(args.out, "split-gemm.md"), "w").write(table + "\n")
    print(table)
    return 0 if all(sum(r["samples_outside_bound"].values()) == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
