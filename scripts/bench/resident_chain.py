#!/usr/bin/env python3
"""A chain of resident products, x <- x @ w with every result kept on the server, timed three
ways of letting go of the step before:

  release-call   x.release() after each step: a Release RPC of its own (not in the step's
                 multiply time, in its step time)
  release=       the step names x in release=[x] (release_handles): one RPC per step
  held           every result kept until the chain ends, then released

A kept result lands in a pool block; the server replays a step's launch as a CUDA graph when the
step's buffers repeat (docs/architecture.md). Released at once, a result's block comes back for
the next step or the one after; held, each step writes a new block and launches directly.

w is a random orthogonal n x n matrix (QR of a normal one), so x keeps its norm however long the
chain; the last x is checked against the same chain in float64 on the client. Prints one markdown
row per way: steps, the multiply call's client p50 / p90 us, the step's p50 (the multiply and,
for release-call, its Release), the replies' server total, kernel and launch p50 us.

usage: resident_chain.py HOST:PORT [--size 256] [--dtype fp32] [--steps 400] [--warmup 50]
       [--variant auto] [--ways release-call,release=,held] [--json FILE]
"""
import argparse
import json
import statistics
import sys
import time

import numpy as np

from matserve_client import Client

WAYS = ("release-call", "release=", "held")


def p(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def run_way(client, way, x0, w, steps, warmup, variant, dtype):
    """One chain of warmup + steps products from x0; the timed steps' figures and the last x."""
    x = client.upload(x0, dtype=dtype)
    held, rows = [], []
    try:
        for i in range(warmup + steps):
            t0 = time.perf_counter()
            r = client.multiply(x, w, keep_result=True, variant=variant,
                                release=[x] if way == "release=" else ())
            t1 = time.perf_counter()
            if way == "release-call":
                x.release()
            elif way == "held":
                held.append(x)
            t2 = time.perf_counter()
            x = r.resident
            if i >= warmup:
                t = r.timing
                rows.append(((t1 - t0) * 1e6, (t2 - t0) * 1e6, t.total_us, t.kernel_us,
                             t.launch_us, r.variant))
        last = x.download()
    finally:
        for h in held + [x]:
            h.release()
    return rows, last


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--variant", default="auto")
    ap.add_argument("--ways", default=",".join(WAYS))
    ap.add_argument("--json")
    args = ap.parse_args()
    ways = args.ways.split(",")
    for way in ways:
        if way not in WAYS:
            sys.exit(f"--ways: {way!r} is not one of {', '.join(WAYS)}")
    n = args.size
    rng = np.random.default_rng(7)
    x0 = rng.standard_normal((n, n)).astype(np.float32)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    results = []
    print(f"| {n}^3 {args.dtype}, way | steps | multiply p50 us | p90 us | step p50 us |"
          " server total p50 us | kernel p50 us | launch p50 us | variant | check |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    ok = True
    with Client(args.target, timeout=120) as client:
        client.wait_ready(60)
        w = client.upload(q.astype(np.float32), dtype=args.dtype)
        try:
            # Every way runs the same chain: its float64 reference, from w as the server holds it.
            want = x0.astype(np.float64)
            wq = np.asarray(w.download(), dtype=np.float64)
            for _ in range(args.steps + args.warmup):
                want = want @ wq
            for way in ways:
                rows, last = run_way(client, way, x0, w, args.steps, args.warmup, args.variant,
                                     args.dtype)
                err = float(np.linalg.norm(last - want) / np.linalg.norm(want))
                tol = 1e-3 if args.dtype in ("fp32", "fp64") else 0.5
                check = f"ok ({err:.1e})" if err <= tol else f"FAILED ({err:.1e})"
                ok = ok and err <= tol
                col = lambda i: [r[i] for r in rows]
                fig = {"way": way, "steps": len(rows), "client_p50_us": statistics.median(col(0)),
                       "client_p90_us": p(col(0), 0.9), "step_p50_us": statistics.median(col(1)),
                       "server_total_p50_us": statistics.median(col(2)),
                       "kernel_p50_us": statistics.median(col(3)),
                       "launch_p50_us": statistics.median(col(4)),
                       "variants": sorted(set(col(5))), "rel_error": err}
                results.append(fig)
                print(f"| {way} | {fig['steps']} | {fig['client_p50_us']:.1f} |"
                      f" {fig['client_p90_us']:.1f} | {fig['step_p50_us']:.1f} |"
                      f" {fig['server_total_p50_us']:.1f} | {fig['kernel_p50_us']:.1f} |"
                      f" {fig['launch_p50_us']:.1f} | {','.join(fig['variants'])} | {check} |",
                      flush=True)
        finally:
            w.release()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": n, "dtype": args.dtype, "variant": args.variant,
                       "results": results}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
