#!/usr/bin/env python3
"""Round trip of one multiply through the Python client, per transport, against the server's own
time: operands and result as bytes in the messages (`inline`), in a shared-memory region (`shm`),
or in the client's GPU tensors shared by CUDA IPC (`cuda-ipc`, needs PyTorch on the server's
GPU). For each shape and transport: warm-up calls, then timed ones; the client's round trip
(time.perf_counter around Client.multiply, Python included) and the reply's timing, as medians.
Every transport's last result is checked against float64.

usage: transport_latency.py --target HOST:PORT [--shapes 1024,4096] [--transports
       inline,shm,cuda-ipc] [--reps 30] [--warmup 5] [--out DIR]  (writes transport.{json,md})
"""
import argparse
import json
import os
import statistics
import time

import numpy as np

from matserve_client import Client


def median(xs):
    return statistics.median(xs) if xs else 0.0


def run(client, shape, transport, reps, warmup):
    n = shape
    rng = np.random.default_rng(n)
    a = rng.uniform(0.25, 1, (n, n)).astype(np.float32)
    b = rng.uniform(0.25, 1, (n, n)).astype(np.float32)
    closers = []
    if transport == "inline":
        call = lambda: client.multiply(a, b, compute="fp32")  # noqa: E731
    elif transport == "shm":
        region = client.create_shared_memory(3 * a.nbytes + 4096)
        closers.append(region)
        sa, sb, so = region.put(a), region.put(b), region.empty(n, n, "fp32")
        call = lambda: client.multiply(sa, sb, out=so, compute="fp32")  # noqa: E731
    else:
        import torch
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        to = torch.empty(n, n, device="cuda")
        ca, cb, co = (client.cuda_matrix(t) for t in (ta, tb, to))
        closers += [ca, cb, co]
        call = lambda: client.multiply(ca, cb, out=co, compute="fp32")  # noqa: E731
    try:
        for _ in range(warmup):
            call()
        rows = []
        for _ in range(reps):
            t0 = time.perf_counter()
            r = call()
            rows.append(((time.perf_counter() - t0) * 1e6, r.timing))
        c = r.c
        if transport == "cuda-ipc":
            import torch
            torch.cuda.synchronize()
            c = c.cpu().numpy()
        err = float(np.linalg.norm(np.asarray(c, np.float64) - a.astype(np.float64) @ b) /
                    np.linalg.norm(a.astype(np.float64) @ b))
    finally:
        for x in closers:
            x.close()
    client_us = median([x[0] for x in rows])
    t = [x[1] for x in rows]
    return {"shape": f"{n}^3 fp32", "transport": transport, "reps": reps,
            "client_us": client_us, "server_total_us": median([x.total_us for x in t]),
            "kernel_us": median([x.kernel_us for x in t]),
            "host_to_device_us": median([x.host_to_device_us for x in t]),
            "device_to_host_us": median([x.device_to_host_us for x in t]),
            "rel_l2": err, "check": "ok" if err < 1e-5 else "FAILED"}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", required=True)
    p.add_argument("--shapes", default="1024,4096")
    p.add_argument("--transports", default="inline,shm,cuda-ipc")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--out", default=".")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results = []
    with Client(args.target, timeout=600) as client:
        info = client.server_info()
        for shape in [int(s) for s in args.shapes.split(",")]:
            for transport in args.transports.split(","):
                r = run(client, shape, transport, args.reps, args.warmup)
                print(f"{r['shape']} {transport}: client {r['client_us']:.0f} us, server "
                      f"{r['server_total_us']:.0f} us, {r['check']}", flush=True)
                results.append(r)
    doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "server": {"version": info.version, "git_sha": info.git_sha,
                      "device": info.devices[0].name if info.devices else ""},
           "args": vars(args), "results": results}
    with open(os.path.join(args.out, "transport.json"), "w") as f:
        json.dump(doc, f, indent=1)
    lines = [f"# Transports through the Python client ({doc['date']}, {doc['server']['device']}, "
             f"server {info.git_sha[:7]})", "",
             "| shape | transport | client p50 us | server total p50 us | client - server us | "
             "host-to-device us | kernel us | result back us | check |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        lines.append(f"| {r['shape']} | {r['transport']} | {r['client_us']:,.0f} | "
                     f"{r['server_total_us']:,.0f} | {r['client_us'] - r['server_total_us']:,.0f} | "
                     f"{r['host_to_device_us']:,.0f} | {r['kernel_us']:,.0f} | "
                     f"{r['device_to_host_us']:,.0f} | {r['check']} ({r['rel_l2']:.1e}) |")
    with open(os.path.join(args.out, "transport.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r["check"] == "ok" for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
