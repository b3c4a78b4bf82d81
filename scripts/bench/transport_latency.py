#!/usr/bin/env python3
"""Round trip of one multiply through the Python client, per transport, against the server's own
time: operands and result as bytes in one message each (`inline`), as ranges over several
connections at once (`striped`, once per stripe count of --stripes and range size of
--stripe-chunk-bytes), what a client made with its defaults does (`default`: inline below the
stripe threshold, striped above it, through the compiled data plane matserve_native when it
imports), the same with the pure-Python data plane (`pure-python`: native=False), in a
shared-memory region
(`shm`), or in the client's GPU tensors shared by CUDA IPC (`cuda-ipc`, needs PyTorch on the
server's GPU); and `torch`, the same product done locally by PyTorch from and to the same host
arrays (`(torch.from_numpy(a).cuda() @ torch.from_numpy(b).cuda()).cpu().numpy()`; skipped
without PyTorch and CUDA). For each shape and transport: warm-up calls, then timed ones; the
client's round trip (time.perf_counter around the call, Python included), the bytes moved (A, B
and C) per second of it, and the reply's timing, as medians. Every last result is checked
against float64.

--phases also times the steps of each call made through the client (the operands created and
written as ranges, the operation's own RPC, the result read as ranges, the release; per call,
medians) and an empty unary call (`Client.health`), and writes phases.md: where a striped call's
time goes on the client.

--batched adds MultiplyBatched stacks (BATCHxN:DTYPE, fp32 or bf16, e.g. 1000x64:fp32,8x2048:bf16)
through `Client.multiply_batched` from host arrays to a host array, for the transports `inline`,
`default`, `pure-python` and `torch` (`torch.bmm` locally from and to the same host arrays; bf16
data and results as 16-bit patterns on both sides: the client's `bf16_bits=True`).

usage: transport_latency.py --target HOST:PORT [--shapes 1024,4096] [--transports
       inline,striped,default,pure-python,shm,cuda-ipc,torch] [--stripes 1,2,4,8,16]
       [--stripe-chunk-bytes N[,N...]] [--batched SPEC[,SPEC...]] [--reps 30] [--warmup 5]
       [--tls-ca PEM] [--phases] [--out DIR]
       (writes transport.{json,md}, and phases.md with --phases); --tls-ca: the server runs TLS,
       trust this root
"""
import argparse
import json
import os
import statistics
import time

import numpy as np

from matserve_client import Bfloat16, Client, bf16_bits_to_float32, float_to_bf16_bits


def median(xs):
    return statistics.median(xs) if xs else 0.0


class _Local:
    """A reply-like timing for the torch baseline (no server)."""
    total_us = kernel_us = host_to_device_us = device_to_host_us = 0.0


def _torch_local(product):
    """A call that runs product(torch) locally (host arrays in, a host array out) with a reply-like
    result, or None when PyTorch or CUDA is missing."""
    try:
        import torch
        if not torch.cuda.is_available():
            return None
    except ImportError:
        return None

    class Result:
        timing = _Local()

    def call():
        r = Result()
        r.c = product(torch)
        return r
    return call


def torch_call(a, b):
    """The local baseline of one product, or None without PyTorch and CUDA."""
    return _torch_local(lambda t: (t.from_numpy(a).cuda() @ t.from_numpy(b).cuda()).cpu().numpy())


# The client's steps of a call that --phases times: its (private) method, and the step's name.
PHASES = (("_put_striped", "create + write ranges"), ("_call", "operation RPC"),
          ("_get_striped", "read ranges"), ("_release_quietly", "release"))


class PhaseClock:
    """Times the steps of the calls a Client makes (PHASES), per call: its methods are wrapped
    on the instance. A step made within another (the server's limits fetched by `_call` while
    the operands are written) counts in the outer one only."""

    def __init__(self, client):
        self.calls = []
        self._now = None
        self._depth = 0
        for name, _ in PHASES:
            setattr(client, name, self._wrap(name, getattr(client, name)))

    def _wrap(self, name, method):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            self._depth += 1
            try:
                return method(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._now is not None and self._depth == 0:
                    self._now[name] += (time.perf_counter() - t0) * 1e6
        return timed

    def start(self):
        self._now = {name: 0.0 for name, _ in PHASES}

    def stop(self):
        self.calls.append(self._now)
        self._now = None

    def medians(self):
        return {name: median([c[name] for c in self.calls]) for name, _ in PHASES}


def _timed(call, reps, warmup, clock=None):
    """`warmup` calls, then `reps` timed ones: the client's median round trip (us), the last
    result, and every reply's timing (with a PhaseClock, its steps of the timed calls too)."""
    for _ in range(warmup):
        call()
    rows = []
    for _ in range(reps):
        if clock is not None:
            clock.start()
        t0 = time.perf_counter()
        r = call()
        rows.append(((time.perf_counter() - t0) * 1e6, r.timing))
        if clock is not None:
            clock.stop()
    return median([x[0] for x in rows]), r, [x[1] for x in rows]


def _row(shape, transport, client, striped, reps, client_us, moved_bytes, timings, err, tol):
    """One result row: the call, its client and server medians, its check."""
    stripes = client.stripes if striped else 0
    plane = ("native" if getattr(client, "native", False) else "python") if striped else "-"
    return {"shape": shape, "transport": transport, "stripes": stripes, "data_plane": plane,
            "chunk_bytes": client.stripe_chunk_bytes if stripes else 0, "reps": reps,
            "client_us": client_us, "wire_gb_per_s": moved_bytes / (client_us * 1e3),
            "server_total_us": median([x.total_us for x in timings]),
            "kernel_us": median([x.kernel_us for x in timings]),
            "host_to_device_us": median([x.host_to_device_us for x in timings]),
            "device_to_host_us": median([x.device_to_host_us for x in timings]),
            "rel_l2": err, "check": "ok" if err < tol else "FAILED"}


# The transports that go through the striped path (above the threshold).
STRIPING = ("striped", "default", "pure-python")


def plane(transport):
    """The Client arguments of a transport's data plane: `pure-python` turns the compiled one
    off; the others take the client's default (an older client has no `native` argument)."""
    return {"native": False} if transport == "pure-python" else {}


def run(client, shape, transport, reps, warmup, phases=False):
    n = shape
    rng = np.random.default_rng(n)
    a = rng.uniform(0.25, 1, (n, n)).astype(np.float32)
    b = rng.uniform(0.25, 1, (n, n)).astype(np.float32)
    closers = []
    if transport in ("inline", "striped", "default", "pure-python"):
        call = lambda: client.multiply(a, b, compute="fp32")  # noqa: E731
    elif transport == "torch":
        call = torch_call(a, b)
        if call is None:
            return None
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
    clock = PhaseClock(client) if phases and transport in STRIPING else None
    try:
        client_us, r, timings = _timed(call, reps, warmup, clock)
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
    row = _row(f"{n}^3 fp32", transport, client, transport in STRIPING, reps,
               client_us, 3 * a.nbytes, timings, err, 1e-5)
    if clock is not None:
        row["phases_us"] = clock.medians()
    return row


def torch_bmm_call(a, b, bf16):
    """torch.bmm locally from and to host arrays (bf16: 16-bit patterns), or None without CUDA."""
    def bmm(t):
        if bf16:
            ta = t.from_numpy(a.view(np.int16)).cuda().view(t.bfloat16)
            tb = t.from_numpy(b.view(np.int16)).cuda().view(t.bfloat16)
            return t.bmm(ta, tb).view(t.int16).cpu().numpy().view(np.uint16)
        return t.bmm(t.from_numpy(a).cuda(), t.from_numpy(b).cuda()).cpu().numpy()
    return _torch_local(bmm)


def run_batched(client, spec, transport, reps, warmup, phases=False):
    """One MultiplyBatched stack (BATCHxN:DTYPE) through `transport` (inline, default,
    pure-python, torch)."""
    dims, _, dtype = spec.partition(":")
    batch, n = (int(x) for x in dims.split("x"))
    bf16 = dtype == "bf16"
    rng = np.random.default_rng(batch * n)
    a32 = rng.uniform(0.25, 1, (batch, n, n)).astype(np.float32)
    b32 = rng.uniform(0.25, 1, (batch, n, n)).astype(np.float32)
    if bf16:
        a, b = float_to_bf16_bits(a32), float_to_bf16_bits(b32)
        a64, b64 = (bf16_bits_to_float32(x).astype(np.float64) for x in (a, b))
    else:
        a, b = a32, b32
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if transport == "torch":
        call = torch_bmm_call(a, b, bf16)
        if call is None:
            return None
    elif bf16:
        wa, wb = Bfloat16(a), Bfloat16(b)
        call = lambda: client.multiply_batched(wa, wb, out_dtype="bf16",  # noqa: E731
                                               bf16_bits=True)
    else:
        call = lambda: client.multiply_batched(a, b, compute="fp32")  # noqa: E731
    clock = PhaseClock(client) if phases and transport in STRIPING else None
    client_us, r, timings = _timed(call, reps, warmup, clock)
    c = r.c.bits if isinstance(r.c, Bfloat16) else np.asarray(r.c)
    if bf16 and c.dtype == np.uint16:
        c = bf16_bits_to_float32(c)
    want = np.matmul(a64, b64)
    err = float(np.linalg.norm(c.astype(np.float64) - want) / np.linalg.norm(want))
    row = _row(f"{batch} x {n}^3 {dtype}", transport, client, transport in STRIPING, reps,
               client_us, 3 * a.nbytes, timings, err, 2e-2 if bf16 else 1e-5)
    if clock is not None:
        row["phases_us"] = clock.medians()
    return row


def empty_call_us(client, reps, warmup):
    """The median of an empty unary call (Client.health) from this client, in us."""
    for _ in range(warmup):
        client.health()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        client.health()
        times.append((time.perf_counter() - t0) * 1e6)
    return median(times)


def label(r):
    """A row's transport as the tables show it: with its data plane when it went striped."""
    plane = r.get("data_plane", "-")
    return r["transport"] if plane == "-" else f"{r['transport']} ({plane})"


def phases_table(doc, results, empty_us):
    """phases.md: each call's steps on the client, per call (medians over the timed calls)."""
    lines = [f"# Where a call's time goes on the Python client ({doc['date']}, "
             f"{doc['server']['device']}, server {doc['server']['git_sha'][:7]})", "",
             f"An empty unary call (`Client.health`) from this client: {empty_us:,.0f} us "
             "(median).", "",
             "| shape | transport | stripes | range MiB | client p50 us | " +
             " | ".join(f"{label} us" for _, label in PHASES) + " | server total p50 us |",
             "|---|---|---:|---:|---:|" + "---:|" * len(PHASES) + "---:|"]
    for r in results:
        if "phases_us" not in r:
            continue
        mib = f"{r['chunk_bytes'] / 2**20:g}" if r["chunk_bytes"] else "-"
        steps = " | ".join(f"{r['phases_us'][name]:,.0f}" for name, _ in PHASES)
        name = label(r)
        lines.append(f"| {r['shape']} | {name} | {r['stripes'] or '-'} | {mib} | "
                     f"{r['client_us']:,.0f} | {steps} | {r['server_total_us']:,.0f} |")
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", required=True)
    p.add_argument("--shapes", default="1024,4096")
    p.add_argument("--transports", default="inline,striped,shm,cuda-ipc,torch")
    p.add_argument("--stripes", default="1,2,4,8,16",
                   help="stripe counts the striped transport runs with, one run each")
    p.add_argument("--stripe-chunk-bytes", default="",
                   help="range sizes the striped transport runs with, one run each (default: "
                        "the client's)")
    p.add_argument("--batched", default="",
                   help="MultiplyBatched stacks BATCHxN:DTYPE (fp32, bf16), comma-separated; "
                        "run for the transports inline, default and torch")
    p.add_argument("--tls-ca", help="PEM root the server's certificate chains to (TLS)")
    p.add_argument("--phases", action="store_true",
                   help="also time each client call's steps and an empty call (phases.md)")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--out", default=".")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results = []
    # `inline` is one message per operand and result (no striping however large); each striped
    # run uses a client of that many stripes that stripes every call.
    tls = {}
    if args.tls_ca:
        import grpc
        with open(args.tls_ca, "rb") as f:
            roots = f.read()
        try:  # credentials the compiled data plane can use too (an older client has none)
            from matserve_client import tls_credentials
            tls["credentials"] = tls_credentials(roots)
        except ImportError:
            tls["credentials"] = grpc.ssl_channel_credentials(root_certificates=roots)
    chunks = [int(c) for c in args.stripe_chunk_bytes.split(",") if c] or [None]
    with Client(args.target, timeout=600, stripes=0, **tls) as client:
        info = client.server_info()
        empty_us = empty_call_us(client, 50, 10) if args.phases else 0.0
        for shape in [int(s) for s in args.shapes.split(",") if s]:
            for transport in args.transports.split(","):
                runs = ([(int(c), chunk) for c in args.stripes.split(",") for chunk in chunks]
                        if transport == "striped" else [(0, None)])
                for count, chunk in runs:
                    if transport == "striped":
                        sized = {} if chunk is None else {"stripe_chunk_bytes": chunk}
                        with Client(args.target, timeout=600, stripes=count,
                                    stripe_threshold_bytes=0, **sized, **tls) as striped:
                            r = run(striped, shape, transport, args.reps, args.warmup,
                                    args.phases)
                    elif transport in ("default", "pure-python"):
                        with Client(args.target, timeout=600, **plane(transport),
                                    **tls) as default:
                            r = run(default, shape, transport, args.reps, args.warmup,
                                    args.phases)
                    else:
                        r = run(client, shape, transport, args.reps, args.warmup)
                    if r is None:
                        print(f"{shape}^3 {transport}: skipped (no PyTorch with CUDA here)",
                              flush=True)
                        continue
                    print(f"{r['shape']} {transport} {count or ''} {chunk or ''}: client "
                          f"{r['client_us']:.0f} "
                          f"us, {r['wire_gb_per_s']:.2f} GB/s, server {r['server_total_us']:.0f} "
                          f"us, {r['check']}", flush=True)
                    results.append(r)
        for spec in [x for x in args.batched.split(",") if x]:
            for transport in [t for t in args.transports.split(",")
                              if t in ("inline", "default", "pure-python", "torch")]:
                if transport in ("default", "pure-python"):
                    with Client(args.target, timeout=600, **plane(transport), **tls) as default:
                        r = run_batched(default, spec, transport, args.reps, args.warmup,
                                        args.phases)
                else:
                    r = run_batched(client, spec, transport, args.reps, args.warmup)
                if r is None:
                    print(f"{spec} {transport}: skipped (no PyTorch with CUDA here)", flush=True)
                    continue
                print(f"{r['shape']} {transport}: client {r['client_us']:.0f} us, server "
                      f"{r['server_total_us']:.0f} us, {r['check']}", flush=True)
                results.append(r)
    doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "server": {"version": info.version, "git_sha": info.git_sha,
                      "device": info.devices[0].name if info.devices else ""},
           "args": vars(args), "results": results}
    if args.phases:
        doc["empty_call_us"] = empty_us
    with open(os.path.join(args.out, "transport.json"), "w") as f:
        json.dump(doc, f, indent=1)
    lines = [f"# Transports through the Python client ({doc['date']}, {doc['server']['device']}, "
             f"server {info.git_sha[:7]})", "",
             "| shape | transport | stripes | range MiB | client p50 us | GB/s (A+B+C / client) | "
             "server total p50 us | client - server us | host-to-device us | kernel us | "
             "result back us | check |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        mib = f"{r['chunk_bytes'] / 2**20:g}" if r["chunk_bytes"] else "-"
        name = label(r)
        lines.append(f"| {r['shape']} | {name} | {r['stripes'] or '-'} | {mib} | "
                     f"{r['client_us']:,.0f} | {r['wire_gb_per_s']:.2f} | "
                     f"{r['server_total_us']:,.0f} | "
                     f"{r['client_us'] - r['server_total_us']:,.0f} | "
                     f"{r['host_to_device_us']:,.0f} | {r['kernel_us']:,.0f} | "
                     f"{r['device_to_host_us']:,.0f} | {r['check']} ({r['rel_l2']:.1e}) |")
    with open(os.path.join(args.out, "transport.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if args.phases:
        steps = phases_table(doc, results, empty_us)
        with open(os.path.join(args.out, "phases.md"), "w") as f:
            f.write("\n".join(steps) + "\n")
        print("\n".join(steps))
    return 0 if all(r["check"] == "ok" for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
