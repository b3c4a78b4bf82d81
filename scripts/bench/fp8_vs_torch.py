#!/usr/bin/env python3
"""fp8 e4m3 products through the service against torch._scaled_mm, device time on both sides.

For each n (an n x n x n product) and each operand order (A as is or transposed, B as is or
transposed), e4m3 operands (random finite patterns) are uploaded once and multiplied on their
handles with compute="fp8", a bf16 result kept on the server (and released), REPS times after
WARMUP calls: the reply's kernel_us (median). torch._scaled_mm in the same process runs the same
product with unit scales and a bf16 result in the one layout it takes (A row-major, B
column-major): CUDA events around each call, enqueued while a spin kernel holds the stream busy,
so the interval holds no host launch time (median). Writes fp8.json and fp8.md to --out.

usage: fp8_vs_torch.py --target HOST:PORT [--sizes 2048,4096,8192] [--reps 30]
"""
import argparse
import json
import os
import statistics
import sys

import numpy as np
import torch

from matserve_client import Client, MatserveError
from matserve_client.dtypes import Float8E4M3

ORDERS = [(False, True), (False, False), (True, True), (True, False)]


def order_name(ta, tb):
    return ("A^T" if ta else "A") + " x " + ("B^T" if tb else "B")


def e4m3_bits(rng, rows, cols):
    bits = rng.integers(0, 256, size=(rows, cols), dtype=np.uint8)
    bits[(bits & 0x7F) >= 0x70] &= 0xB7  # no NaN, nothing near 448: sums stay finite
    return bits


def spin_cycles(us):
    """Cycles of torch.cuda._sleep that keep the GPU busy for about `us` microseconds."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)
    s.record()
    torch.cuda._sleep(2_000_000)
    e.record()
    e.synchronize()
    return int(2_000_000 * us / (s.elapsed_time(e) * 1e3))


def torch_us(n, reps, warmup):
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major k x n
    one = torch.tensor(1.0, device="cuda")
    for _ in range(warmup):
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    torch.cuda.synchronize()
    cycles = spin_cycles(300)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        torch.cuda._sleep(cycles)
        s.record()
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times)


def service_us(client, rng, n, ta, tb, reps, warmup):
    a = Float8E4M3(e4m3_bits(rng, n, n))
    b = Float8E4M3(e4m3_bits(rng, n, n))
    ha = client.upload(a)
    hb = client.upload(b, colocate_with=ha)
    times, variant = [], ""
    try:
        for i in range(warmup + reps):
            r = client.multiply(ha, hb, transpose_a=ta, transpose_b=tb, compute="fp8",
                                out_dtype="bf16", keep_result=True)
            r.resident.release()
            variant = r.variant
            if i >= warmup:
                times.append(r.timing.kernel_us)
    finally:
        ha.release()
        hb.release()
    return statistics.median(times), variant


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True)
    p.add_argument("--sizes", default="2048,4096,8192")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--out", default="/tmp/matserve-fp8")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(8)
    rows = []
    with Client(args.target, timeout=600) as client:
        client.wait_ready(60)
        for n in (int(x) for x in args.sizes.split(",")):
            t_us = torch_us(n, args.reps, args.warmup)
            for ta, tb in ORDERS:
                try:
                    s_us, variant = service_us(client, rng, n, ta, tb, args.reps, args.warmup)
                except MatserveError as e:  # a server that does not take this order
                    rows.append({"n": n, "order": order_name(ta, tb), "refused": str(e)})
                    continue
                flops = 2.0 * n ** 3
                rows.append({"n": n, "order": order_name(ta, tb), "variant": variant,
                             "service_us": s_us, "torch_us": t_us,
                             "service_tflops": flops / s_us / 1e6, "torch_tflops": flops / t_us / 1e6,
                             "ratio": t_us / s_us})
                print(f"{n} {order_name(ta, tb)}: service {s_us:.1f} us, torch {t_us:.1f} us",
                      file=sys.stderr, flush=True)
    json.dump(rows, open(os.path.join(args.out, "fp8.json"), "w"), indent=1)
    lines = ["| n^3 | operands | service kernel_us | TFLOP/s | torch._scaled_mm us (A x B^T) | TFLOP/s | service / torch speed |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "refused" in r:
            lines.append(f"| {r['n']} | {r['order']} | refused | | | | |")
            continue
        lines.append(f"| {r['n']} | {r['order']} | {r['service_us']:.1f} | {r['service_tflops']:.0f} | "
                     f"{r['torch_us']:.1f} | {r['torch_tflops']:.0f} | **{r['ratio']:.2f}x** |")
    table = "\n".join(lines)
    open(os.path.join(args.out, "fp8.md"), "w").write(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
