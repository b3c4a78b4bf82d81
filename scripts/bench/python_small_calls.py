#!/usr/bin/env python3
"""Python Client.multiply round trips of small inline products, as rows of run-server-ab.sh's table.

For each n, numpy float32 A and B (n x n, random normal) are multiplied through the server with the
client's defaults (host arrays in, host array out: inline messages at these sizes) WARMUP times,
then REPS times timed with perf_counter around each call. Prints one markdown row per n: round,
side, shape, "python inline", calls, client p50 / p90 us, and the median of the replies' server
total_us. The last result is checked against numpy's product.

usage: python_small_calls.py HOST:PORT ROUND SIDE [--sizes 64,256] [--reps 600] [--warmup 100]
"""
import argparse
import statistics
import sys
import time

import numpy as np

from matserve_client import Client


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target")
    p.add_argument("round")
    p.add_argument("side")
    p.add_argument("--sizes", default="64,256")
    p.add_argument("--reps", type=int, default=600)
    p.add_argument("--warmup", type=int, default=100)
    args = p.parse_args()
    rng = np.random.default_rng(3)
    with Client(args.target, timeout=60) as client:
        client.wait_ready(60)
        for n in (int(x) for x in args.sizes.split(",")):
            a = rng.standard_normal((n, n), dtype=np.float32)
            b = rng.standard_normal((n, n), dtype=np.float32)
            for _ in range(args.warmup):
                client.multiply(a, b)
            wall, server = [], []
            for _ in range(args.reps):
                start = time.perf_counter()
                r = client.multiply(a, b)
                wall.append((time.perf_counter() - start) * 1e6)
                server.append(r.timing.total_us)
            if not np.allclose(r.c, a @ b, rtol=1e-4, atol=1e-3 * n):
                print(f"python_small_calls: {n}^3 result differs from numpy's", file=sys.stderr)
                return 1
            wall.sort()
            print(f"| {args.round} | {args.side} | {n}x{n}x{n} | python inline | {args.reps} | "
                  f"{wall[len(wall) // 2]:,.0f} | {wall[int(len(wall) * 0.9)]:,.0f} | "
                  f"{statistics.median(server):,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
