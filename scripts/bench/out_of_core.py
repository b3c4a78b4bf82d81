#!/usr/bin/env python3
"""Products larger than the device's budget, computed out of core, against the in-core rate.

For each case (dtype:n, an n x n x n product: fp32 computed as tf32, or bf16 with a bf16 result)
the operands are made here (uniform in [-1, 1), rounded to the dtype) and uploaded (striped, as
Client.upload sends large matrices); on a server whose --memory_budget_bytes they exceed a third
of, they are kept in host memory, and the product, its result kept, runs out of core (the reply's
variant ends in "+out_of_core"). Then, on the same server, the largest product of that dtype whose
operands and result fit the budget together (--in-core n) runs in core on device-resident
operands. Each product runs once as warm-up and REPS more times; reported: the reply's kernel time
(CUDA events around the whole product, every copy from and to host memory included for out of
core), its rate, the client's wall time, and the out-of-core rate as a share of the in-core one.
The out-of-core result is checked on sampled entries (16 rows x 16 columns, read back as ranges)
against float64 with the per-element bound of the GEMM tests (tests/support/gemm_bound.py).

Writes out-of-core.json and out-of-core.md to --out; prints progress and the table.

usage: out_of_core.py --target HOST:PORT [--cases fp32:65536:34816,bf16:65536:49152] [--reps 3]
       (dtype:out_of_core_n:in_core_n)
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

COMPUTE = {"fp32": "tf32", "bf16": None}
PRECISION = {"fp32": "tf32", "bf16": "bf16"}


def log(msg):
    print(f"[out_of_core {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def operand(dtype, n, rng, rows, cols):
    """(what to upload, sampled rows as float64, sampled columns as float64). bf16 is made in
    blocks of rows, so that no n x n float32 copy is held beside its bits."""
    if dtype == "fp32":
        x = rng.random((n, n), dtype=np.float32)
        x *= 2
        x -= 1
        return x, x[rows].astype(np.float64), x[:, cols].astype(np.float64)
    bits = np.empty((n, n), np.uint16)
    for r0 in range(0, n, 4096):
        x = rng.random((min(4096, n - r0), n), dtype=np.float32)
        x *= 2
        x -= 1
        bits[r0:r0 + x.shape[0]] = Bfloat16.from_float(x).bits
    sampled_rows = Bfloat16(bits[rows]).to_float32().astype(np.float64)
    sampled_cols = Bfloat16(np.ascontiguousarray(bits[:, cols])).to_float32().astype(np.float64)
    return Bfloat16(bits), sampled_rows, sampled_cols


def timed(client, ha, hb, dtype, reps, what):
    """(kernel ms, wall ms, variant, device placement of the result) of reps calls after a
    warm-up; each result released."""
    kernel, wall = [], []
    variant = placed = ""
    for rep in range(reps + 1):
        start = time.perf_counter()
        r = client.multiply(ha, hb, keep_result=True, compute=COMPUTE[dtype],
                            out_dtype=dtype, timeout=1800)
        seconds = time.perf_counter() - start
        variant, placed = r.variant, r.resident.device
        r.resident.release()
        if rep > 0:
            kernel.append(r.timing.kernel_us / 1e3)
            wall.append(seconds * 1e3)
        log(f"{what}: {'warm-up' if rep == 0 else f'rep {rep}/{reps}'}: kernel "
            f"{r.timing.kernel_us / 1e3:.1f} ms, wall {seconds * 1e3:.1f} ms ({variant}, result "
            f"on {placed})")
    return kernel, wall, variant, placed


def check_sampled(client, ha, hb, dtype, a_rows, b_cols, rows, cols):
    """Sampled entries of one more out-of-core product against float64: (outside, worst)."""
    r = client.multiply(ha, hb, keep_result=True, compute=COMPUTE[dtype], out_dtype=dtype,
                        timeout=1800)
    n = r.resident.shape[1]
    item = 4 if dtype == "fp32" else 2
    got = np.empty((len(rows), len(cols)))
    for t, i in enumerate(rows):  # row i of C, as ranges (the result is row-major)
        raw = r.resident.read_bytes(int(i) * n * item, n * item)
        row = np.frombuffer(raw, np.float32 if dtype == "fp32" else np.uint16)
        if dtype == "bf16":
            row = Bfloat16(row).to_float32()
        got[t] = row[cols]
    r.resident.release()
    want = a_rows @ b_cols
    limit = gemm_bound.bound(a_rows, b_cols, PRECISION[dtype], dtype, dtype, want=want)
    ratio = np.abs(got - want) / limit
    return int((ratio > 1).sum()), float(ratio.max())


def made_and_uploaded(client, dtype, n, rng, rows, cols, name):
    """(its handle, sampled rows, sampled columns) of a new n x n operand, uploaded; the
    operand itself is dropped once on the server."""
    log(f"{dtype} {n}^3: making {name} ({n * n * (4 if dtype == 'fp32' else 2) >> 30} GiB)")
    x, sampled_rows, sampled_cols = operand(dtype, n, rng, rows, cols)
    start = time.perf_counter()
    handle = client.upload(x, timeout=1800)
    log(f"{dtype}: {name} uploaded in {time.perf_counter() - start:.1f} s, kept on "
        f"{handle.device}")
    return handle, sampled_rows, sampled_cols


def run_case(client, dtype, n_out, n_in, reps, rng):
    flops = {"out": 2.0 * n_out**3, "in": 2.0 * n_in**3}
    rows = np.sort(rng.choice(n_out, 16, replace=False))
    cols = np.sort(rng.choice(n_out, 16, replace=False))
    ha, a_rows, _ = made_and_uploaded(client, dtype, n_out, rng, rows, cols, "A")
    hb, _, b_cols = made_and_uploaded(client, dtype, n_out, rng, rows, cols, "B")
    out_kernel, out_wall, variant, placed = timed(client, ha, hb, dtype, reps,
                                                  f"{dtype} {n_out}^3 out of core")
    outside, worst = check_sampled(client, ha, hb, dtype, a_rows, b_cols, rows, cols)
    log(f"{dtype}: {outside} of 256 sampled entries outside the bound (worst {worst:.3f} of it)")
    placement = (ha.device, hb.device)
    ha.release()
    hb.release()
    log(f"{dtype} {n_in}^3: the in-core product")
    ha, _, _ = made_and_uploaded(client, dtype, n_in, rng, [0], [0], "A")
    hb, _, _ = made_and_uploaded(client, dtype, n_in, rng, [0], [0], "B")
    in_kernel, in_wall, in_variant, in_placed = timed(client, ha, hb, dtype, reps,
                                                      f"{dtype} {n_in}^3 in core")
    in_placement = (ha.device, hb.device)
    ha.release()
    hb.release()
    k_out, k_in = statistics.median(out_kernel), statistics.median(in_kernel)
    rate_out = flops["out"] / (k_out * 1e-3) / 1e12
    rate_in = flops["in"] / (k_in * 1e-3) / 1e12
    return {
        "dtype": dtype, "precision": PRECISION[dtype], "n_out_of_core": n_out, "n_in_core": n_in,
        "reps": reps, "operands_out_of_core": placement, "result_out_of_core": placed,
        "variant_out_of_core": variant, "operands_in_core": in_placement,
        "result_in_core": in_placed, "variant_in_core": in_variant,
        "kernel_ms_out_of_core": k_out, "kernel_ms_in_core": k_in,
        "wall_ms_out_of_core": statistics.median(out_wall),
        "wall_ms_in_core": statistics.median(in_wall),
        "tflops_out_of_core": rate_out, "tflops_in_core": rate_in,
        "share_of_in_core": rate_out / rate_in,
        "samples_outside_bound": outside, "worst_error_over_bound": worst,
        "kernel_ms": {"out_of_core": out_kernel, "in_core": in_kernel},
        "wall_ms": {"out_of_core": out_wall, "in_core": in_wall},
    }


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True)
    p.add_argument("--cases", default="fp32:65536:34816,bf16:65536:49152")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", default="/tmp/matserve-out-of-core")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(2026)
    rows = []
    with Client(args.target, timeout=1800) as client:
        client.wait_ready(60)
        info = client.server_info()
        budget = info.limits.memory_budget_bytes
        log(f"server: {info.devices[0].name}, device budget {budget / 2**30:.1f} GiB")
        for case in args.cases.split(","):
            dtype, n_out, n_in = case.split(":")
            rows.append(run_case(client, dtype, int(n_out), int(n_in), args.reps, rng))
            json.dump({"device": info.devices[0].name, "budget_bytes": budget, "cases": rows},
                      open(os.path.join(args.out, "out-of-core.json"), "w"), indent=1)
    lines = [
        f"Device budget {budget / 2**30:.0f} GiB (--memory_budget_bytes); kernel time: median of "
        f"{args.reps} after a warm-up.",
        "",
        "| product | operands, result | kernel ms | TFLOP/s | client wall ms | in-core product "
        "| its kernel ms | its TFLOP/s | out of core / in core | sampled entries outside the "
        "bound |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['precision']} {r['n_out_of_core']}^3 | {r['operands_out_of_core'][0]}, "
            f"{r['result_out_of_core']} | {r['kernel_ms_out_of_core']:.0f} | "
            f"{r['tflops_out_of_core']:.0f} | {r['wall_ms_out_of_core']:.0f} | "
            f"{r['n_in_core']}^3 on {r['operands_in_core'][0]} | {r['kernel_ms_in_core']:.0f} | "
            f"{r['tflops_in_core']:.0f} | **{r['share_of_in_core']:.0%}** | "
            f"{r['samples_outside_bound']} of 256 |")
    table = "\n".join(lines)
    open(os.path.join(args.out, "out-of-core.md"), "w").write(table + "\n")
    print(table)
    return 0 if all(r["samples_outside_bound"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
