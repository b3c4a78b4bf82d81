#!/usr/bin/env python3
"""fp8 e4m3 products through the service against torch._scaled_mm, device time on both sides.

For each n (an n x n x n product), each operand order (A as is or transposed, B as is or
transposed), each data type and each variant asked for, the operands are uploaded once and
multiplied on their handles with compute="fp8", a bf16 result kept on the server (and released),
REPS times after WARMUP calls: the reply's kernel_us (median; the first call's beside it: a
resident e4m3 operand that is not K-major is repacked then and kept so, docs/api.md). e4m3 data is
random finite patterns; bf16/fp32 data is random normal values, quantized by the server on the
device (its time is in kernel_us). torch._scaled_mm in the same process runs the same product on
the same operands in e4m3 (the same bits; bf16/fp32 data quantized per tensor as the server does;
--torch-data randn: its own normal values instead) with unit scales and a bf16 result, A x B^T in
the one layout it takes (A row-major, B column-major), with promoted accumulation (its default) and
with use_fast_accum=True: CUDA events around each call, enqueued while a spin kernel holds the
stream busy, so the interval holds no host launch time (median). The ratio is against torch's
accumulation of the same kind: the *_fast variants against use_fast_accum=True, every other one
against the default. Beside it, torch given the operands in the service's order: where that is not
A x B^T, torch must first make an operand contiguous in its layout (.t().contiguous()), and that
copy is timed with the product. With --torch-graph torch's A x B^T is also timed the way the
service times its own call: captured in a CUDA graph between two event-record nodes (events
inside the graph), each replay enqueued while a spin kernel holds the stream busy, as the server's
--gate_launches holds its graph's start (both sides in CUDA graphs, device time only).
Each service case runs twice in a row and the second is kept
(--no-settle: once): right after torch's timing a case's first calls run 1.5-2 us long, whatever
the case (docs/benchmarks.md, "Results with the launch gate"), and every service case here follows
torch's. Writes fp8.json and fp8.md to --out.

usage: fp8_vs_torch.py --target HOST:PORT [--sizes 2048,4096,8192] [--reps 30]
                       [--variants auto,wgmma_fp8_fast] [--data e4m3,bf16] [--torch-graph]
"""
import argparse
import json
import os
import statistics
import sys

import numpy as np
import torch

from matserve_client import Client, MatserveError
from matserve_client.dtypes import Bfloat16, Float8E4M3

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


def torch_us(a, b, reps, warmup, fast_accum, ta=False, tb=True):
    """torch._scaled_mm's device time on e4m3 tensors a and b stored as the service's operands are
    (ta / tb: A / B given transposed: a is m x k, or k x m; b is n x k, or k x n). It takes A
    row-major and B column-major only (A x B^T as stored); in any other order an operand is first
    made contiguous in that layout, as a torch user must, and that copy is in the time. The
    default order (A x B^T) times the product alone."""
    one = torch.tensor(1.0, device="cuda")

    def product():
        a_rows = a.t().contiguous() if ta else a  # m x k, row-major
        b_cols = b.t() if tb else b.t().contiguous().t()  # k x n, column-major
        return torch._scaled_mm(a_rows, b_cols, scale_a=one, scale_b=one,
                                out_dtype=torch.bfloat16, use_fast_accum=fast_accum)

    for _ in range(warmup):
        product()
    torch.cuda.synchronize()
    cycles = spin_cycles(300)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        torch.cuda._sleep(cycles)
        s.record()
        product()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times)


def torch_graph_us(a, b, reps, warmup, fast_accum):
    """torch._scaled_mm (A x B^T as stored) captured in a CUDA graph with its two timing events
    inside it, as the service's kernel_us is measured; each replay is enqueued while a spin kernel
    holds the stream busy (the service's launch gate). Median us."""
    one = torch.tensor(1.0, device="cuda")

    def product():
        return torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                use_fast_accum=fast_accum)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(max(1, warmup)):
            product()  # cuBLASLt's plan made outside the capture
    torch.cuda.current_stream().wait_stream(side)
    begin = torch.cuda.Event(enable_timing=True, external=True)
    end = torch.cuda.Event(enable_timing=True, external=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        begin.record()
        product()
        end.record()
    cycles = spin_cycles(300)
    times = []
    try:
        for i in range(warmup + reps):
            torch.cuda._sleep(cycles)
            graph.replay()
            end.synchronize()
            if i >= warmup:
                times.append(begin.elapsed_time(end) * 1e3)
    finally:
        del graph
    return statistics.median(times)


def operand(rng, n, data):
    """The service's operand and the e4m3 tensor torch multiplies for it: the same bits for e4m3
    data; for bf16/fp32 data, the values quantized per tensor (amax / 448), as the server does."""
    if data == "e4m3":
        bits = e4m3_bits(rng, n, n)
        return Float8E4M3(bits), torch.from_numpy(bits).view(torch.float8_e4m3fn).cuda()
    values = rng.standard_normal((n, n), dtype=np.float32)
    served = Bfloat16.from_float(values) if data == "bf16" else values
    t = torch.from_numpy(served.to_float32() if data == "bf16" else values).cuda()
    return served, (t / (t.abs().amax() / 448)).to(torch.float8_e4m3fn)


def torch_randn_e4m3(n):
    """torch's own random operand (normal values in e4m3), for --torch-data randn."""
    return torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)


def service_us(client, a, b, ta, tb, reps, warmup, data, variant_asked, settle=True):
    ha = client.upload(a)
    hb = client.upload(b, colocate_with=ha)
    times, variant, first_us = [], "", None
    try:
        for _ in range(2 if settle else 1):  # a settling pass first, dropped
            times = []
            for i in range(warmup + reps):
                # fp32 data writes fp32 (a bf16 result is for e4m3 and 16-bit data).
                r = client.multiply(ha, hb, transpose_a=ta, transpose_b=tb, compute="fp8",
                                    out_dtype="fp32" if data == "fp32" else "bf16",
                                    keep_result=True, variant=variant_asked)
                r.resident.release()
                variant = r.variant
                if first_us is None:
                    first_us = r.timing.kernel_us
                if i >= warmup:
                    times.append(r.timing.kernel_us)
    finally:
        ha.release()
        hb.release()
    return statistics.median(times), variant, first_us


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True)
    p.add_argument("--sizes", default="2048,4096,8192")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--out", default="/tmp/matserve-fp8")
    p.add_argument("--variants", default="auto",
                   help="comma-separated variants to ask for (auto, cublaslt_fp8, wgmma_fp8, ...)")
    p.add_argument("--data", default="e4m3", help="comma-separated: e4m3, bf16, fp32")
    p.add_argument("--orders", default="all", help="all, or NT (A x B^T) only")
    p.add_argument("--no-settle", action="store_true",
                   help="time each service case's calls once, right after torch's timing")
    p.add_argument("--torch-data", default="same", choices=["same", "randn"],
                   help="torch multiplies the service's operands (same) or its own normal values "
                        "in e4m3 (randn; tensor-core power, so clocks, depend on the bits)")
    p.add_argument("--torch-graph", action="store_true",
                   help="also time torch's A x B^T captured in a CUDA graph with its events "
                        "inside, as the service's kernel_us is measured")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(8)
    rows = []
    with Client(args.target, timeout=600) as client:
        client.wait_ready(60)
        orders = ORDERS if args.orders == "all" else ORDERS[:1]
        for n in (int(x) for x in args.sizes.split(",")):
            flops = 2.0 * n ** 3
            for data in args.data.split(","):
                for ta, tb in orders:
                    for asked in args.variants.split(","):
                        fast = asked.endswith("_fast")
                        (a, ta_e4m3), (b, tb_e4m3) = operand(rng, n, data), operand(rng, n, data)
                        if args.torch_data == "randn":
                            ta_e4m3, tb_e4m3 = torch_randn_e4m3(n), torch_randn_e4m3(n)
                        # torch measured right beside each service case, alike in accumulation,
                        # on the same operands: A x B^T as stored ...
                        t_us = torch_us(ta_e4m3, tb_e4m3, args.reps, args.warmup, fast)
                        # ... and given them as the service is, copies included.
                        same_us = t_us if (ta, tb) == ORDERS[0] else torch_us(
                            ta_e4m3, tb_e4m3, args.reps, args.warmup, fast, ta, tb)
                        graph_us = (torch_graph_us(ta_e4m3, tb_e4m3, args.reps, args.warmup, fast)
                                    if args.torch_graph else None)
                        base = {"n": n, "order": order_name(ta, tb), "data": data, "asked": asked,
                                "torch_fast_accum": fast, "torch_data": args.torch_data}
                        try:
                            s_us, variant, first_us = service_us(client, a, b, ta, tb, args.reps,
                                                       args.warmup, data, asked,
                                                       settle=not args.no_settle)
                        except MatserveError as e:  # a server that does not take this case
                            rows.append(dict(base, refused=str(e)))
                            continue
                        rows.append(dict(base, variant=variant, service_us=s_us,
                                         service_first_us=first_us, torch_us=t_us,
                                         torch_same_order_us=same_us,
                                         service_tflops=flops / s_us / 1e6,
                                         torch_tflops=flops / t_us / 1e6, ratio=t_us / s_us,
                                         ratio_same_order=same_us / s_us,
                                         torch_graph_us=graph_us,
                                         ratio_graph=graph_us / s_us if graph_us else None))
                        print(f"{n} {data} {order_name(ta, tb)} {asked} -> {variant}: service "
                              f"{s_us:.1f} us, torch{' fast' if fast else ''} {t_us:.1f} us",
                              file=sys.stderr, flush=True)
    json.dump(rows, open(os.path.join(args.out, "fp8.json"), "w"), indent=1)
    lines = ["| n^3 | data | operands | asked | ran | first call kernel_us | service kernel_us | "
             "TFLOP/s | "
             "torch._scaled_mm us (A x B^T) | torch accumulation | service / torch speed | "
             "torch us, operands as the service's (copies included) | service / that |"
             + (" torch A x B^T in a CUDA graph us | service / that |" if args.torch_graph else ""),
             "|---|---|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|"
             + ("---:|---:|" if args.torch_graph else "")]
    for r in rows:
        head = f"| {r['n']} | {r['data']} | {r['order']} | {r['asked']} |"
        acc = "fast" if r["torch_fast_accum"] else "promoted"
        graph_cells = " | |" if args.torch_graph else ""
        if "refused" in r:
            lines.append(f"{head} refused | | | | | {acc} | | | |{graph_cells}")
            continue
        if args.torch_graph:
            graph_cells = f" {r['torch_graph_us']:.1f} | **{r['ratio_graph']:.2f}x** |"
        lines.append(f"{head} {r['variant']} | {r['service_first_us']:.1f} | "
                     f"{r['service_us']:.1f} | {r['service_tflops']:.0f} | "
                     f"{r['torch_us']:.1f} | {acc} | **{r['ratio']:.2f}x** | "
                     f"{r['torch_same_order_us']:.1f} | {r['ratio_same_order']:.2f}x |"
                     f"{graph_cells}")
    table = "\n".join(lines)
    open(os.path.join(args.out, "fp8.md"), "w").write(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
