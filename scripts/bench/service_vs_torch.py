#!/usr/bin/env python3
"""The matserve service against torch.matmul on the same GPU, in the same process.

For each case (m x k x n, precision, variant) the inputs are generated on the host (random, never
zero), uploaded once as resident matrices (UploadStream), and Multiply is called with a_handle /
b_handle / keep_result: warm-up calls, then timed calls; every reply's `timing` is recorded and
each result is released right after its call (the last one is downloaded first and checked against
a float64 reference). Beside it, torch.matmul runs on the same inputs, in the same precision, on the
same GPU, timed with CUDA events around each call.

  ratio = torch median time / service median kernel_us   (> 1: the service is faster)

What is compared (docs/benchmarks.md, "Service against PyTorch"):
- Service: `timing.kernel_us` (CUDA events around the call's device work, measured by the server;
  the host's time to enqueue that work is `timing.launch_us`, reported beside it). The
  client-observed round trip of each Multiply (gRPC on loopback, the server's own work) is reported
  beside it for information.
- torch: one torch.matmul(A, B, out=C) per measurement, as device time: a spin kernel
  (torch.cuda._sleep) holds torch's stream busy while the start event, the matmul and the end event
  are enqueued, so the interval between the events holds the GPU work only, as the service's
  kernel_us (replayed from a CUDA graph) does. A sample whose enqueue outlasted the spin is counted
  (`baseline_late`). torch's wall time of one synchronized call (host launch included) is reported
  beside it (`baseline_wall_us`), and the same events around `reps` calls in a row as
  `baseline_stream_us`, both for information.
- MultiplyBatched (--batched): one resident handle per product, keep_result (or, with
  --batched-layout stacked|both, each operand's matrices stacked in one inline Matrix and the
  results stacked in the reply), against torch.bmm on the same values, timed the same way; the
  variants of --batched-variants.
- Settling: after torch's timing of a precision, the first service case is run whole (timed calls,
  download, check) and dropped, then every variant's case is timed (--no-settle keeps it). Right
  after torch's timing, that first case's small calls ran 1.5-2 us long on an H100, whatever its
  variant and however long its warm-up, and the same calls in the next case did not; the dropped
  case keeps the service's figures from depending on which variant happens to come first.
- Inputs are not rotated on either side: the service's resident operands are the same device buffers
  on every call, so torch reuses its A and B too (equal L2 conditions on both sides).
- Precisions: fp32 = IEEE fp32 on both sides (service COMPUTE_FP32; torch with TF32 off);
  tf32 = fp32 data on tensor cores (service COMPUTE_TF32; torch with TF32 on); fp16/bf16 = 16-bit
  data and result, fp32 accumulation (service COMPUTE_DEFAULT; torch's defaults, recorded in the
  JSON); fp64 = fp64.

Transposes: service Transpose of a resident fp32 matrix (keep_result, released after each call; and
in place where the server accepts it) against a device-to-device copy of the same bytes in torch
(dst.copy_(src), events as above); ratio = copy time / service kernel time (the share of copy
bandwidth). torch's own materialized transpose (dst.copy_(src.t())) is reported for information.

Without torch (or with --no-torch) the baseline is NumPy on the host CPU (fp16/bf16 data multiplied
as fp32, tf32 as fp32), labelled as such everywhere: a check of the harness, not a GPU comparison.

usage: python3 scripts/bench/service_vs_torch.py --target HOST:PORT --out DIR [--quick]
       [--shapes LIST] [--compute LIST] [--variants LIST] [--reps N] [--warmup N] ...
The generated stubs (matserve.v1.matrix_service_pb2) must be importable: PYTHONPATH=<build>/python
or <bundle>/python, or --stubs DIR. scripts/bench/run-service-vs-torch.sh starts the server and runs this.
Exit status: 0 when every check passed, 1 when a correctness check failed or a case failed with an
unexpected error, 2 for usage errors.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import socket
import statistics
import sys
import time
from typing import NamedTuple

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHAPE_GROUPS = {
    "square": [(n, n, n) for n in (256, 512, 1024, 2048, 4096, 8192)],
    "output": [(8192, 64, 8192), (4096, 64, 4096)],          # output-heavy: small k
    "reduction": [(64, 8192, 64)],                            # reduction-heavy: large k
    "tall": [(8192, 1024, 256)],
    "wide": [(256, 1024, 8192)],
    "odd": [(1000, 999, 1001), (10000, 25, 10000), (4095, 4097, 4093)],
}
SHAPE_GROUPS["all"] = [s for g in ("square", "output", "reduction", "tall", "wide", "odd")
                       for s in SHAPE_GROUPS[g]]
# MultiplyBatched against torch.bmm: batch x (m x k x n).
BATCHED_SHAPES = [(1000, 64, 64, 64), (256, 128, 128, 128), (256, 256, 256, 256),
                  (64, 512, 512, 512), (16, 1024, 1024, 1024), (8, 2048, 2048, 2048)]
BATCHED_PRECISIONS = ("fp32", "fp16", "bf16")
TRANSPOSE_SHAPES = [(8192, 8192), (4096, 12288), (8191, 8193), (16384, 1024)]
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp64")
# Relative L2 error allowed against the float64 product of the (rounded) inputs.
TOLERANCE = {"fp32": 1e-5, "tf32": 5e-3, "fp16": 2e-2, "bf16": 2e-2, "fp64": 1e-12}
# Precisions sharing one set of uploaded inputs (fp32 data serves fp32 and tf32).
DATA_OF = {"fp32": "fp32", "tf32": "fp32", "fp16": "fp16", "bf16": "bf16", "fp64": "fp64"}
QUICK = dict(shapes="256,1024,4096,4096x64x4096,1000x999x1001", precisions="fp32,tf32,bf16,fp64",
             reps=10, transpose_shapes="8192x8192,4096x12288")
CHUNK = 16 << 20  # bytes per UploadStream / DownloadStream message
MAX_MESSAGE = 1 << 30
STACKED_LIMIT = 64 << 20  # --batched-layout stacked: the largest inline operand sent


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------------------------------------
# Arguments and imports


def parse_shapes(text):
    shapes = []
    for tok in [t.strip() for t in text.split(",") if t.strip()]:
        if tok in SHAPE_GROUPS:
            shapes += SHAPE_GROUPS[tok]
        elif "x" in tok:
            dims = [int(d) for d in tok.split("x")]
            if len(dims) != 3:
                raise ValueError(f"shape {tok!r}: want MxKxN")
            shapes.append(tuple(dims))
        else:
            n = int(tok)
            shapes.append((n, n, n))
    for s in shapes:
        if min(s) < 1:
            raise ValueError(f"shape {s}: dimensions must be >= 1")
    return list(dict.fromkeys(shapes))


def parse_2d(text):
    out = []
    for tok in [t.strip() for t in text.split(",") if t.strip()]:
        r, c = (int(d) for d in tok.split("x"))
        out.append((r, c))
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True, help="server address, e.g. 127.0.0.1:50051")
    p.add_argument("--out", required=True, help="directory for service_vs_torch.{json,md}")
    p.add_argument("--quick", action="store_true",
                   help=f"a few-minute subset: {QUICK} (explicit flags override it)")
    p.add_argument("--shapes", help="comma list of N (N^3), MxKxN, or groups "
                   f"{', '.join(SHAPE_GROUPS)} (default all)")
    p.add_argument("--compute", "--precisions", dest="precisions", metavar="LIST",
                   help=f"comma list of {', '.join(PRECISIONS)} (default all); --precisions is "
                   "its former name")
    p.add_argument("--variants", default="auto,cublas",
                   help="service GEMM variants to ask for (default auto,cublas), e.g. "
                   "auto,cublas,wgmma_tma_store; refusals are recorded, not fatal")
    p.add_argument("--reps", type=int, help="timed calls per case (default 30)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls first (default 5)")
    p.add_argument("--case-seconds", type=float, default=2.0,
                   help="fewer timed calls (at least --min-reps) when a case's calls would take "
                   "longer than this, judged from the warm-up (default 2)")
    p.add_argument("--min-reps", type=int, default=10)
    p.add_argument("--transpose-shapes",
                   help="comma list of RxC fp32 (default 8192x8192,4096x12288,8191x8193,"
                   "16384x1024); 'none' skips the transposes")
    p.add_argument("--transpose-variants", default="auto",
                   help="service transpose variants, out of place (default auto)")
    p.add_argument("--no-in-place", action="store_true", help="skip in-place transposes")
    p.add_argument("--no-gemm", action="store_true", help="no single GEMMs")
    p.add_argument("--batched", default="none",
                   help="MultiplyBatched against torch.bmm: comma list of BxMxKxN, 'default' ("
                   + ",".join("x".join(map(str, b)) for b in BATCHED_SHAPES)
                   + ") or 'none' (default); precisions: those of --precisions among "
                   + ", ".join(BATCHED_PRECISIONS))
    p.add_argument("--no-settle", dest="settle", action="store_false",
                   help="keep the service's first case after torch's timing; by default that "
                   "case is run whole (timed calls, download, check) and dropped, and the cases "
                   "are then timed (right after torch's timing the first case's small calls ran "
                   "1.5-2 us long, whatever its variant and warm-up; the cases after it did not)")
    p.add_argument("--batched-layout", default="handles",
                   help="how MultiplyBatched gets its operands: 'handles' (default: one resident "
                   "handle per product, results kept resident, one each), 'stacked' (each "
                   "operand's matrices stacked batch-major in one inline Matrix, as torch.bmm's "
                   "3-D tensors are; the results stacked in the reply; batches whose operand "
                   "exceeds 64 MiB are skipped), 'resident' (each operand's stack one resident "
                   "matrix, a_stacked / b_stacked, the results kept stacked in one: torch.bmm's "
                   "resident 3-D tensors), or a comma list of them ('both' = handles,stacked)")
    p.add_argument("--batched-variants", default="auto",
                   help="service GEMM variants to ask for in MultiplyBatched (default auto), "
                   "e.g. auto,cublas,mma_sync_64; refusals are recorded, not fatal")
    p.add_argument("--no-torch", action="store_true",
                   help="baseline NumPy on the host CPU (automatic when torch is missing)")
    p.add_argument("--torch-device", default="cuda:0",
                   help="the GPU torch uses: the one the server runs on (default cuda:0)")
    p.add_argument("--no-check", action="store_true", help="skip the correctness checks")
    p.add_argument("--torch-graph", action="store_true",
                   help="also time torch.matmul (and torch.bmm) captured in a CUDA graph (as "
                   "the service replays its launches), reported beside torch's direct call")
    p.add_argument("--torch-idle", action="store_true",
                   help="also time torch.matmul as the service's kernel_us is taken: captured "
                   "in a CUDA graph with its two events inside, replayed after the host has "
                   "waited the service's median round trip of that case (the GPU idle between "
                   "calls, as between one client's calls to the service)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--stubs", help="directory holding matserve/v1/matrix_service_pb2.py")
    p.add_argument("--token", default=os.environ.get("MATSERVE_TOKEN", ""),
                   help="bearer token when the server requires one (env MATSERVE_TOKEN)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per RPC (default 600)")
    a = p.parse_args(argv)
    if a.quick:
        a.shapes = a.shapes or QUICK["shapes"]
        a.precisions = a.precisions or QUICK["precisions"]
        a.reps = a.reps or QUICK["reps"]
        a.transpose_shapes = a.transpose_shapes or QUICK["transpose_shapes"]
    a.reps = a.reps or 30
    try:
        a.shape_list = [] if a.no_gemm else parse_shapes(a.shapes or "all")
        a.precision_list = [x.strip() for x in (a.precisions or ",".join(PRECISIONS)).split(",")
                            if x.strip()]
        bad = [x for x in a.precision_list if x not in PRECISIONS]
        if bad:
            raise ValueError(f"unknown precision(s) {bad}; known: {PRECISIONS}")
        a.variant_list = [v.strip() for v in a.variants.split(",") if v.strip()]
        a.batched_variant_list = [v.strip() for v in a.batched_variants.split(",") if v.strip()]
        layouts = ("handles,stacked" if a.batched_layout == "both"
                   else a.batched_layout).split(",")
        if not layouts or any(x not in ("handles", "stacked", "resident") for x in layouts):
            raise ValueError(f"--batched-layout {a.batched_layout!r}: want handles, stacked, "
                             "resident (a comma list) or both")
        a.batched_layouts = list(dict.fromkeys(layouts))
        if a.batched == "default":
            a.batched_list = list(BATCHED_SHAPES)
        elif a.batched == "none":
            a.batched_list = []
        else:
            a.batched_list = [tuple(int(d) for d in t.split("x")) for t in a.batched.split(",")
                              if t.strip()]
            if any(len(b) != 4 or min(b) < 1 for b in a.batched_list):
                raise ValueError(f"--batched {a.batched!r}: want BxMxKxN, each >= 1")
        ts = a.transpose_shapes or ",".join(f"{r}x{c}" for r, c in TRANSPOSE_SHAPES)
        a.transpose_list = [] if ts == "none" else parse_2d(ts)
        a.transpose_variant_list = [v.strip() for v in a.transpose_variants.split(",")
                                    if v.strip()]
    except ValueError as e:
        p.error(str(e))
    if a.reps < 1 or a.warmup < 0 or a.min_reps < 1:
        p.error("--reps and --min-reps must be >= 1, --warmup >= 0")
    a.min_reps = min(a.min_reps, a.reps)
    return a


def import_stubs(extra):
    candidates = [extra, os.environ.get("MATSERVE_PYTHON_STUBS"),
                  os.path.join(REPO, "build", "device", "python"),
                  os.path.join(REPO, "build", "python"), os.path.join(REPO, "build-cpu", "python")]
    try:
        from matserve.v1 import matrix_service_pb2 as pb, matrix_service_pb2_grpc as rpc
        return pb, rpc
    except ImportError:
        pass
    for c in candidates:
        if c and os.path.exists(os.path.join(c, "matserve", "v1", "matrix_service_pb2.py")):
            sys.path.insert(0, c)
            from matserve.v1 import matrix_service_pb2 as pb, matrix_service_pb2_grpc as rpc
            return pb, rpc
    sys.exit("service_vs_torch: generated stubs not found: put <build>/python or <bundle>/python "
             "on PYTHONPATH (or --stubs DIR); they come from the build's matserve_python_stubs "
             "target")


# ---------------------------------------------------------------------------------------------
# Host data


def bf16_bits(x32):
    """float32 -> bfloat16 bit patterns (round to nearest even; inputs are finite)."""
    u = np.ascontiguousarray(x32, dtype=np.float32).view(np.uint32)
    return ((u + (((u >> 16) & 1) + 0x7FFF)) >> 16).astype(np.uint16)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def random_matrix(rng, rows, cols, data):
    """Values in [-1, -0.25] U [0.25, 1] in the data type (never zero, also after rounding)."""
    ftype = np.float64 if data == "fp64" else np.float32
    u = rng.random((rows, cols), dtype=ftype)
    x = (ftype(0.25) + ftype(1.5) * np.abs(u - ftype(0.5)))
    np.negative(x, out=x, where=u < 0.5)
    if data == "fp16":
        return x.astype(np.float16)
    if data == "bf16":
        return bf16_bits(x)  # uint16 bit patterns
    return x


def as_f64(arr, data):
    return bf16_to_f32(arr).astype(np.float64) if data == "bf16" else arr.astype(np.float64)


class Timed(NamedTuple):
    """A baseline's timings of one case, in microseconds."""
    samples: list      # one per timed call: device time (torch) or wall time (NumPy)
    stream: float      # mean of the calls queued back to back
    wall: float        # median wall time of one call, synchronized (what a caller waits for)
    late: int          # torch: samples whose host enqueue outlasted the spin before them
    graph: float = None  # torch: device time of the call captured in a CUDA graph (--torch-graph)


def median(xs):
    return statistics.median(xs) if xs else None


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


# ---------------------------------------------------------------------------------------------
# The service


class Service:
    def __init__(self, target, token, timeout, pb, rpc):
        import grpc
        self.grpc, self.pb, self.timeout = grpc, pb, timeout
        self.channel = grpc.insecure_channel(target, options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE),
            ("grpc.max_send_message_length", MAX_MESSAGE)])
        grpc.channel_ready_future(self.channel).result(timeout=60)
        self.stub = rpc.MatrixServiceStub(self.channel)
        self.md = [("authorization", f"Bearer {token}")] if token else None
        self.dtype_enum = {"fp64": pb.FP64, "fp32": pb.FP32, "fp16": pb.FP16, "bf16": pb.BF16}
        self.compute_enum = {"fp32": pb.COMPUTE_FP32, "tf32": pb.COMPUTE_TF32,
                             "fp16": pb.COMPUTE_DEFAULT, "bf16": pb.COMPUTE_DEFAULT,
                             "fp64": pb.COMPUTE_DEFAULT}

    def info(self):
        r = self.stub.GetServerInfo(self.pb.GetServerInfoRequest(), timeout=60, metadata=self.md)
        return {"version": r.version, "git_sha": r.git_sha, "backend": r.backend,
                "devices": [{"index": d.index, "name": d.name,
                             "compute_capability": d.compute_capability,
                             "memory_total_bytes": d.memory_total_bytes,
                             "multiprocessors": d.multiprocessors} for d in r.devices],
                "limits": {"max_matrix_bytes": r.limits.max_matrix_bytes,
                           "memory_budget_bytes": r.limits.memory_budget_bytes,
                           "max_message_bytes": r.limits.max_message_bytes}}

    def upload(self, arr, data, colocate_with=""):
        pb = self.pb
        rows, cols = arr.shape
        flat = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)

        def chunks():
            yield pb.UploadChunk(header=pb.Matrix(rows=rows, cols=cols, dtype=self.dtype_enum[data],
                                                  layout=pb.ROW_MAJOR),
                                 data=flat[:CHUNK].tobytes(), colocate_with=colocate_with)
            for off in range(CHUNK, flat.size, CHUNK):
                yield pb.UploadChunk(data=flat[off:off + CHUNK].tobytes())

        return self.stub.UploadStream(chunks(), timeout=self.timeout,
                                      metadata=self.md).resident.handle

    def stacked(self, arr, batch, data):
        """arr (batch*rows x cols) as one inline Matrix of `batch` stacked matrices."""
        rows, cols = arr.shape
        return self.pb.Matrix(rows=rows // batch, cols=cols, dtype=self.dtype_enum[data],
                              layout=self.pb.ROW_MAJOR, batch=batch,
                              data=np.ascontiguousarray(arr).tobytes())

    def reply_matrix(self, mat):
        """An inline reply Matrix as a NumPy array in its stored type (bf16: uint16 bits)."""
        pb = self.pb
        np_t = {pb.FP64: np.float64, pb.FP32: np.float32, pb.FP16: np.float16,
                pb.BF16: np.uint16}[mat.dtype]
        return np.frombuffer(mat.data, dtype=np_t)

    def download(self, handle):
        """The resident matrix as a NumPy array in its stored type (bf16: uint16 bits)."""
        pb = self.pb
        header, buf, filled = None, None, 0
        for ch in self.stub.DownloadStream(pb.DownloadRequest(handle=handle, chunk_bytes=CHUNK),
                                           timeout=self.timeout, metadata=self.md):
            pieces = [ch.data]
            if ch.HasField("header"):
                header = ch.header
                np_t = {pb.FP64: np.float64, pb.FP32: np.float32, pb.FP16: np.float16,
                        pb.BF16: np.uint16}[header.dtype]
                buf = np.empty(header.rows * header.cols * np.dtype(np_t).itemsize, np.uint8)
                pieces = [header.data, ch.data]
            for piece in pieces:
                buf[filled:filled + len(piece)] = np.frombuffer(piece, np.uint8)
                filled += len(piece)
        if header is None or filled != buf.size:
            want = 0 if buf is None else buf.size
            raise RuntimeError(f"download {handle}: {filled} bytes of {want}")
        arr = buf.view(np_t)
        if header.layout == pb.COL_MAJOR:
            return arr.reshape(header.cols, header.rows).T
        return arr.reshape(header.rows, header.cols)

    def release(self, handle):
        """Releases one handle, or a list of them in one call."""
        req = (self.pb.ReleaseRequest(handles=handle) if isinstance(handle, list)
               else self.pb.ReleaseRequest(handle=handle))
        try:
            self.stub.Release(req, timeout=60, metadata=self.md)
        except self.grpc.RpcError:
            pass

    def timed(self, method, request, warmup, reps, case_seconds, min_reps, keep_last):
        """Calls method(request) warmup + reps times. Returns (replies of the timed calls, their
        round trips in us, the last reply's result handle when keep_last else None). Each result
        handle is released right after its call, except the last one when keep_last."""
        call = getattr(self.stub, method)
        release_each = request.keep_result or getattr(request, "keep_stacked", False)
        rts, replies = [], []

        def handles(reply):  # MultiplyBatched keeps one result per product
            return ([r.handle for r in reply.results] if hasattr(reply, "results")
                    else reply.result.handle)

        def one():
            t0 = time.perf_counter()
            reply = call(request, timeout=self.timeout, metadata=self.md)
            return reply, (time.perf_counter() - t0) * 1e6

        warm = []
        for _ in range(warmup):
            reply, rt = one()
            warm.append(rt)
            if release_each:
                self.release(handles(reply))
        if warm and case_seconds > 0:
            reps = min(reps, max(min_reps, int(case_seconds * 1e6 / median(warm))))
        last = None
        for i in range(reps):
            reply, rt = one()
            rts.append(rt)
            replies.append(reply)
            if release_each:
                if keep_last and i == reps - 1:
                    last = handles(reply)
                else:
                    self.release(handles(reply))
        return replies, rts, last


def timing_medians(replies):
    out = {}
    for f in ("queue_us", "host_to_device_us", "launch_us", "kernel_us", "device_to_host_us",
              "total_us"):
        out[f] = median([getattr(r.timing, f, 0.0) for r in replies])
    return out


def rpc_failure(e):
    code = e.code() if hasattr(e, "code") else None
    return {"status": code.name if code else type(e).__name__,
            "message": (e.details() if hasattr(e, "details") else str(e)) or str(e)}


# ---------------------------------------------------------------------------------------------
# Baselines: torch on the GPU, or NumPy on the host CPU


class TorchBaseline:
    kind = "torch-cuda"

    def __init__(self, device):
        import torch
        self.torch = torch
        self.dev = torch.device(device)
        torch.cuda.set_device(self.dev)
        self.name = f"torch.matmul on {torch.cuda.get_device_name(self.dev)}"
        self.new_tf32_api = hasattr(torch.backends.cuda.matmul, "fp32_precision")
        self.cycles_per_us = None

    def describe(self):
        t = self.torch
        m = t.backends.cuda.matmul
        return {"kind": self.kind, "torch": t.__version__, "cuda": t.version.cuda,
                "device": t.cuda.get_device_name(self.dev),
                "tf32_api": "torch.backends.cuda.matmul.fp32_precision" if self.new_tf32_api
                else "torch.backends.cuda.matmul.allow_tf32",
                "allow_fp16_reduced_precision_reduction":
                    getattr(m, "allow_fp16_reduced_precision_reduction", None),
                "allow_bf16_reduced_precision_reduction":
                    getattr(m, "allow_bf16_reduced_precision_reduction", None),
                "timing": "device time: CUDA events around each call, enqueued while "
                          "torch.cuda._sleep holds the stream busy (no host launch inside the "
                          "interval); median. Wall time of one synchronized call beside it"}

    def label(self, precision):
        return {"fp32": "torch fp32 (TF32 off)", "tf32": "torch fp32 with TF32 on",
                "fp16": "torch fp16", "bf16": "torch bf16", "fp64": "torch fp64"}[precision]

    def set_precision(self, precision):
        m = self.torch.backends.cuda.matmul
        tf32 = precision == "tf32"
        if self.new_tf32_api:  # the same switch as allow_tf32, without mixing the two APIs
            m.fp32_precision = "tf32" if tf32 else "ieee"
        else:
            m.allow_tf32 = tf32

    def to_device(self, arr, data):
        t = self.torch
        if data == "bf16":
            return t.from_numpy(arr.view(np.int16)).to(self.dev).view(t.bfloat16)
        return t.from_numpy(np.ascontiguousarray(arr)).to(self.dev)

    def _sleep_cycles(self, us):
        """Cycles of torch.cuda._sleep that keep this GPU busy for about `us` microseconds."""
        if self.cycles_per_us is None:
            t = self.torch
            s, e = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            t.cuda._sleep(1_000_000)  # warm the spin kernel once
            s.record()
            t.cuda._sleep(2_000_000)
            e.record()
            e.synchronize()
            self.cycles_per_us = 2_000_000 / max(s.elapsed_time(e) * 1e3, 1.0)
        return int(us * self.cycles_per_us)

    def _time(self, fn, warmup, reps, case_seconds, min_reps):
        """Times fn's GPU work as device time, as the service's kernel_us is: before each sample a
        spin kernel (torch.cuda._sleep) holds the stream busy while the host enqueues the start
        event, fn's launches and the end event, so the interval between the events holds no host
        launch time. The spin lasts 4x the host's enqueue time seen in the warm-up, at least
        200 us; a sample whose enqueue outlasted the spin is counted as `late` (its interval then
        holds host time). Also returns the wall time of one call with a synchronize (what a
        caller of torch waits for) and the mean of `reps` calls queued back to back."""
        t = self.torch
        s, e = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
        enqueue = []
        for _ in range(warmup):
            t0 = time.perf_counter()
            s.record()
            fn()
            e.record()
            enqueue.append((time.perf_counter() - t0) * 1e6)
            e.synchronize()
        t.cuda.synchronize(self.dev)
        if warmup and case_seconds > 0:
            reps = min(reps, max(min_reps, int(case_seconds * 1e3 / max(s.elapsed_time(e), 1e-3))))
        spin_us = max(200.0, 4 * (median(enqueue) or 50.0))
        cycles = self._sleep_cycles(spin_us)
        times, late = [], 0
        for _ in range(reps):
            t.cuda._sleep(cycles)
            t0 = time.perf_counter()
            s.record()
            fn()
            e.record()
            if (time.perf_counter() - t0) * 1e6 > spin_us:
                late += 1
            e.synchronize()
            times.append(s.elapsed_time(e) * 1e3)
        walls = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            t.cuda.synchronize(self.dev)
            walls.append((time.perf_counter() - t0) * 1e6)
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        e.synchronize()
        return Timed(times, s.elapsed_time(e) * 1e3 / reps, median(walls), late)

    def prepare(self, a, b, data):
        A, B = self.to_device(a, data), self.to_device(b, data)
        return {"A": A, "B": B, "C": self.torch.empty(A.shape[0], B.shape[1], dtype=A.dtype,
                                                      device=self.dev)}

    def matmul(self, ctx, precision, warmup, reps, case_seconds, min_reps):
        self.set_precision(precision)
        A, B, C = ctx["A"], ctx["B"], ctx["C"]
        return self._time(lambda: self.torch.matmul(A, B, out=C), warmup, reps, case_seconds,
                          min_reps)

    def matmul_graph(self, ctx, precision, warmup, reps, case_seconds, min_reps):
        """torch.matmul captured once in a CUDA graph and replayed, as the service replays its
        launches: the same device-time method, so a difference from matmul() is what capture
        changes (library choices, graph nodes)."""
        t = self.torch
        self.set_precision(precision)
        A, B, C = ctx["A"], ctx["B"], ctx["C"]
        return self._graph_time(lambda: t.matmul(A, B, out=C), warmup, reps, case_seconds,
                                min_reps)

    def bmm_graph(self, ctx, precision, warmup, reps, case_seconds, min_reps):
        """torch.bmm captured in a CUDA graph and replayed: as matmul_graph."""
        t = self.torch
        self.set_precision(precision)
        A, B, C = ctx["A"], ctx["B"], ctx["C"]
        return self._graph_time(lambda: t.bmm(A, B, out=C), warmup, reps, case_seconds, min_reps)

    def _graph_time(self, fn, warmup, reps, case_seconds, min_reps):
        t = self.torch
        side = t.cuda.Stream(self.dev)
        side.wait_stream(t.cuda.current_stream(self.dev))
        with t.cuda.stream(side):
            fn()  # warm the library's plan outside the capture
        t.cuda.current_stream(self.dev).wait_stream(side)
        graph = t.cuda.CUDAGraph()
        with t.cuda.graph(graph):
            fn()
        try:
            return self._time(graph.replay, warmup, reps, case_seconds, min_reps)
        finally:
            del graph

    def matmul_graph_idle(self, ctx, precision, warmup, reps, idle_us):
        """Device time of torch.matmul measured the way the service measures its own: the call
        captured in a CUDA graph between two event-record nodes, each replay after the host has
        waited `idle_us` with the GPU idle (a client's round trip between calls). Median us."""
        t = self.torch
        self.set_precision(precision)
        A, B, C = ctx["A"], ctx["B"], ctx["C"]
        side = t.cuda.Stream(self.dev)
        side.wait_stream(t.cuda.current_stream(self.dev))
        with t.cuda.stream(side):
            t.matmul(A, B, out=C)
        t.cuda.current_stream(self.dev).wait_stream(side)
        begin = t.cuda.Event(enable_timing=True, external=True)
        end = t.cuda.Event(enable_timing=True, external=True)
        graph = t.cuda.CUDAGraph()
        with t.cuda.graph(graph):
            begin.record()
            t.matmul(A, B, out=C)
            end.record()
        times = []
        try:
            for i in range(warmup + reps):
                until = time.perf_counter() + idle_us * 1e-6
                while time.perf_counter() < until:
                    pass
                graph.replay()
                end.synchronize()
                if i >= warmup:
                    times.append(begin.elapsed_time(end) * 1e3)
        finally:
            del graph
        return median(times)

    def prepare_batched(self, a, b, data, batch):
        """a: (batch*m) x k, b: (batch*k) x n host arrays, products stacked by rows."""
        A = self.to_device(a, data).view(batch, a.shape[0] // batch, a.shape[1])
        B = self.to_device(b, data).view(batch, b.shape[0] // batch, b.shape[1])
        return {"A": A, "B": B, "C": self.torch.empty(batch, A.shape[1], B.shape[2],
                                                      dtype=A.dtype, device=self.dev)}

    def bmm(self, ctx, precision, warmup, reps, case_seconds, min_reps):
        self.set_precision(precision)
        A, B, C = ctx["A"], ctx["B"], ctx["C"]
        return self._time(lambda: self.torch.bmm(A, B, out=C), warmup, reps, case_seconds,
                          min_reps)

    def reference(self, ctx):
        t = self.torch
        ctx["ref"] = t.matmul(ctx["A"].double(), ctx["B"].double())
        ctx["ref_norm"] = t.linalg.vector_norm(ctx["ref"]).item()

    def rel_err(self, ctx, result):
        """result: a host array (float64-convertible) or None for the baseline's own C."""
        t = self.torch
        got = ctx["C"].double() if result is None else t.from_numpy(result).to(self.dev).double()
        got = got.reshape(ctx["ref"].shape)
        return t.linalg.vector_norm(got - ctx["ref"]).item() / ctx["ref_norm"]

    def transpose_prepare(self, a):
        A = self.to_device(a, "fp32")
        return {"A": A, "copy": self.torch.empty_like(A),
                "T": self.torch.empty(A.shape[1], A.shape[0], dtype=A.dtype, device=self.dev)}

    def copy(self, ctx, warmup, reps, case_seconds, min_reps):
        A, D = ctx["A"], ctx["copy"]
        return self._time(lambda: D.copy_(A), warmup, reps, case_seconds, min_reps)

    def transpose(self, ctx, warmup, reps, case_seconds, min_reps):
        A, T = ctx["A"], ctx["T"]
        return self._time(lambda: T.copy_(A.t()), warmup, reps, case_seconds, min_reps)

    def release(self):
        self.torch.cuda.empty_cache()


class NumpyBaseline:
    kind = "numpy-cpu"
    name = "NumPy on the host CPU (torch not used: not a GPU comparison)"

    def describe(self):
        return {"kind": self.kind, "numpy": np.__version__, "cpu": platform.processor() or
                platform.machine(), "cpus": os.cpu_count(),
                "timing": "time.perf_counter around each call; median; fp16/bf16 data and tf32 "
                "multiplied as fp32 (NumPy has no fast 16-bit or tf32 matmul)"}

    def label(self, precision):
        return {"fp32": "numpy fp32 (CPU)", "tf32": "numpy fp32 (CPU; no tf32)",
                "fp16": "numpy fp32 on fp16 data (CPU)", "bf16": "numpy fp32 on bf16 data (CPU)",
                "fp64": "numpy fp64 (CPU)"}[precision]

    @staticmethod
    def _time(fn, warmup, reps, case_seconds, min_reps):
        for _ in range(warmup):
            fn()
        if warmup and case_seconds > 0:
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            reps = min(reps, max(min_reps, int(case_seconds / max(dt, 1e-9))))
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return Timed(times, (time.perf_counter() - t0) * 1e6 / reps, median(times), 0)

    def prepare(self, a, b, data):
        if data == "fp64":
            A, B = a, b
        elif data == "bf16":
            A, B = bf16_to_f32(a), bf16_to_f32(b)
        else:
            A, B = a.astype(np.float32), b.astype(np.float32)
        return {"A": A, "B": B, "C": np.empty((A.shape[0], B.shape[1]), A.dtype), "a": a, "b": b,
                "data": data}

    def matmul(self, ctx, precision, warmup, reps, case_seconds, min_reps):
        A, B, C = ctx["A"], ctx["B"], ctx["C"]
        return self._time(lambda: np.matmul(A, B, out=C), warmup, reps, case_seconds, min_reps)

    def prepare_batched(self, a, b, data, batch):
        ctx = self.prepare(a, b, data)
        for key, x in (("A", ctx["A"]), ("B", ctx["B"]), ("a", a), ("b", b)):
            ctx[key] = x.reshape(batch, x.shape[0] // batch, x.shape[1])
        ctx["C"] = np.empty((batch, ctx["A"].shape[1], ctx["B"].shape[2]), ctx["A"].dtype)
        return ctx

    def bmm(self, ctx, precision, warmup, reps, case_seconds, min_reps):
        return self.matmul(ctx, precision, warmup, reps, case_seconds, min_reps)

    def reference(self, ctx):
        ctx["ref"] = as_f64(ctx["a"], ctx["data"]) @ as_f64(ctx["b"], ctx["data"])
        ctx["ref_norm"] = float(np.linalg.norm(ctx["ref"]))

    def rel_err(self, ctx, result):
        got = ctx["C"] if result is None else result.reshape(ctx["ref"].shape)
        return float(np.linalg.norm(got.astype(np.float64) - ctx["ref"])) / ctx["ref_norm"]

    def transpose_prepare(self, a):
        return {"A": a, "copy": np.empty_like(a), "T": np.empty(a.shape[::-1], a.dtype)}

    def copy(self, ctx, warmup, reps, case_seconds, min_reps):
        A, D = ctx["A"], ctx["copy"]
        return self._time(lambda: np.copyto(D, A), warmup, reps, case_seconds, min_reps)

    def transpose(self, ctx, warmup, reps, case_seconds, min_reps):
        A, T = ctx["A"], ctx["T"]
        return self._time(lambda: np.copyto(T, A.T), warmup, reps, case_seconds, min_reps)

    def release(self):
        pass


# ---------------------------------------------------------------------------------------------
# The runs


def decode_result(arr):
    """A downloaded result as float32/float64 for the error computation."""
    return bf16_to_f32(arr) if arr.dtype == np.uint16 else arr


class Run:
    def __init__(self, args, svc, base, doc):
        self.args, self.svc, self.base, self.doc = args, svc, base, doc
        self.failures = []  # correctness failures and unexpected errors
        self.t_start = time.monotonic()

    def elapsed(self):
        return f"{time.monotonic() - self.t_start:6.1f}s"

    def save(self):
        a = self.args
        self.doc["summary"] = summarize(self.doc)
        self.doc["failures"] = self.failures
        self.doc["elapsed_s"] = round(time.monotonic() - self.t_start, 1)
        tmp = os.path.join(a.out, "service_vs_torch.json.tmp")
        with open(tmp, "w") as f:
            json.dump(self.doc, f, indent=1)
        os.replace(tmp, os.path.join(a.out, "service_vs_torch.json"))
        with open(os.path.join(a.out, "service_vs_torch.md"), "w") as f:
            f.write(markdown(self.doc))

    # -- GEMM ---------------------------------------------------------------------------------

    def gemm(self):
        a, svc, base = self.args, self.svc, self.base
        pb = svc.pb
        cases_total = len(a.shape_list) * len(a.precision_list) * len(a.variant_list)
        n = 0
        for (m, k, nn) in a.shape_list:
            datas = list(dict.fromkeys(DATA_OF[p] for p in a.precision_list))
            for data in datas:
                precs = [p for p in a.precision_list if DATA_OF[p] == data]
                rng = np.random.default_rng([a.seed, m, k, nn, PRECISIONS.index(data)])
                t0 = time.monotonic()
                A = random_matrix(rng, m, k, data)
                B = random_matrix(rng, k, nn, data)
                ha = hb = None
                ctx = None
                try:
                    try:
                        ha = svc.upload(A, data)
                        hb = svc.upload(B, data, colocate_with=ha)
                    except svc.grpc.RpcError as e:
                        f = rpc_failure(e)
                        for p in precs:
                            for v in a.variant_list:
                                n += 1
                                self.doc["gemm"].append(dict(
                                    m=m, k=k, n=nn, precision=p, variant_requested=v,
                                    ran=False, stage="upload", **f))
                                self.failures.append(f"{m}x{k}x{nn} {p} {v}: upload {f['status']}"
                                                     f" {f['message']}")
                        log(f"[{self.elapsed()}] {m}x{k}x{nn} {data}: UPLOAD FAILED "
                            f"{f['status']}: {f['message']}")
                        continue
                    ctx = base.prepare(A, B, data)
                    if not a.no_check:
                        base.reference(ctx)
                    log(f"[{self.elapsed()}] {m}x{k}x{nn} {data}: inputs made, uploaded and "
                        f"referenced in {time.monotonic() - t0:.1f}s")
                    for p in precs:
                        bt = base.matmul(ctx, p, a.warmup, a.reps, a.case_seconds, a.min_reps)
                        b_err = None if a.no_check else base.rel_err(ctx, None)
                        if a.torch_graph and hasattr(base, "matmul_graph"):
                            g = base.matmul_graph(ctx, p, a.warmup, a.reps, a.case_seconds,
                                                  a.min_reps)
                            bt = bt._replace(graph=median(g.samples))
                        if a.settle and a.variant_list:
                            self.gemm_case(m, k, nn, p, a.variant_list[0], ha, hb, ctx, bt, b_err)
                        for v in a.variant_list:
                            n += 1
                            row = self.gemm_case(m, k, nn, p, v, ha, hb, ctx, bt, b_err)
                            self.doc["gemm"].append(row)
                            log(f"[{self.elapsed()}] [{n:3d}/{cases_total}] {case_line(row)}")
                finally:
                    for h in (ha, hb):
                        if h:
                            svc.release(h)
                    del ctx
                    base.release()
                self.save()

    def gemm_case(self, m, k, n, precision, variant, ha, hb, ctx, bt, b_err):
        """One case: the timed calls, then the last result downloaded and checked. The caller
        drops a settling case's row (its failures are still reported)."""
        a, svc = self.args, self.svc
        pb = svc.pb
        b_med = median(bt.samples)
        row = dict(m=m, k=k, n=n, precision=precision, variant_requested=variant,
                   baseline=self.base.label(precision), baseline_us=b_med,
                   baseline_stream_us=bt.stream, baseline_wall_us=bt.wall,
                   baseline_late=bt.late, baseline_graph_us=bt.graph, baseline_samples_us=[round(x, 3) for x in bt.samples],
                   baseline_rel_l2=b_err, tolerance=TOLERANCE[precision])
        req = pb.MultiplyRequest(a_handle=ha, b_handle=hb, variant=variant,
                                 compute=svc.compute_enum[precision], keep_result=True)
        try:
            replies, rts, last = svc.timed("Multiply", req, a.warmup, a.reps, a.case_seconds,
                                           a.min_reps, keep_last=not a.no_check)
        except svc.grpc.RpcError as e:
            f = rpc_failure(e)
            row.update(ran=False, **f)
            # A refusal (the variant or precision is not served) is a result; anything else fails.
            if f["status"] not in ("INVALID_ARGUMENT", "FAILED_PRECONDITION", "UNIMPLEMENTED"):
                self.failures.append(f"{m}x{k}x{n} {precision} {variant}: {f['status']} "
                                     f"{f['message']}")
            return row
        r0 = replies[-1]
        tm = timing_medians(replies)
        ran = sorted({r.variant for r in replies})
        row.update(ran=True, status="OK", variant=",".join(ran), precision_ran=r0.precision,
                   device=r0.device, reps=len(replies), service_kernel_us=tm["kernel_us"],
                   service_timing_us=tm, service_kernel_samples_us=[round(r.timing.kernel_us, 3)
                                                                   for r in replies],
                   round_trip_us=median(rts), round_trip_samples_us=[round(x, 1) for x in rts])
        flops = 2.0 * m * n * k
        if tm["kernel_us"]:
            row["service_tflops"] = flops / tm["kernel_us"] / 1e6
        if b_med:
            row["baseline_tflops"] = flops / b_med / 1e6
        if b_med and tm["kernel_us"]:
            row["ratio"] = b_med / tm["kernel_us"]
        if a.torch_idle and hasattr(self.base, "matmul_graph_idle") and tm["kernel_us"]:
            idle = median(rts)
            row["baseline_idle_gap_us"] = idle
            row["baseline_idle_us"] = self.base.matmul_graph_idle(ctx, precision, a.warmup,
                                                                  len(replies), idle)
            row["ratio_idle"] = row["baseline_idle_us"] / tm["kernel_us"]
        if r0.precision and r0.precision != precision:
            self.failures.append(f"{m}x{k}x{n} {precision} {variant}: the server computed "
                                 f"{r0.precision}")
        if last:
            try:
                res = decode_result(svc.download(last))
                err = self.base.rel_err(ctx, res)
                row["rel_l2"] = err
                row["check"] = "ok" if err <= TOLERANCE[precision] else "FAILED"
                if row["check"] == "FAILED":
                    self.failures.append(f"{m}x{k}x{n} {precision} {variant} "
                                         f"(ran {row['variant']}): relative L2 error {err:.3g} "
                                         f"> {TOLERANCE[precision]:g}")
                    log(f"!!! CORRECTNESS FAILURE: {self.failures[-1]}")
            except Exception as e:  # noqa: BLE001 - recorded and reported
                row["check"] = f"error: {e}"
                self.failures.append(f"{m}x{k}x{n} {precision} {variant}: check failed: {e}")
                log(f"!!! CHECK ERROR: {self.failures[-1]}")
            finally:
                svc.release(last)
        return row

    # -- MultiplyBatched ----------------------------------------------------------------------

    def batched(self):
        """MultiplyBatched on resident operands (one handle per product, keep_result) against
        torch.bmm on the same values, both as device time."""
        a, svc, base = self.args, self.svc, self.base
        pb = svc.pb
        precs = [p for p in a.precision_list if p in BATCHED_PRECISIONS]
        for (bt, m, k, n) in a.batched_list:
            for data in dict.fromkeys(DATA_OF[p] for p in precs):
                rng = np.random.default_rng([a.seed, bt, m, k, n, PRECISIONS.index(data), 7])
                A = random_matrix(rng, bt * m, k, data)
                B = random_matrix(rng, bt * k, n, data)
                has, hbs, ctx = [], [], None
                resident = []  # layout "resident": A's stack, B's stack
                layouts = [x for x in a.batched_layouts
                           if x != "stacked" or max(A.nbytes, B.nbytes) <= STACKED_LIMIT]
                try:
                    if "handles" in layouts:
                        for i in range(bt):
                            has.append(svc.upload(A[i * m:(i + 1) * m], data,
                                                  colocate_with=has[0] if has else ""))
                            hbs.append(svc.upload(B[i * k:(i + 1) * k], data,
                                                  colocate_with=has[0]))
                    if "resident" in layouts:
                        resident.append(svc.upload(A, data))
                        resident.append(svc.upload(B, data, colocate_with=resident[0]))
                    stacked = (svc.stacked(A, bt, data), svc.stacked(B, bt, data))
                    ctx = base.prepare_batched(A, B, data, bt)
                    if not a.no_check:
                        base.reference(ctx)
                    for p in [x for x in precs if DATA_OF[x] == data]:
                        timed = base.bmm(ctx, p, a.warmup, a.reps, a.case_seconds, a.min_reps)
                        if a.torch_graph and hasattr(base, "bmm_graph"):
                            g = base.bmm_graph(ctx, p, a.warmup, a.reps, a.case_seconds,
                                               a.min_reps)
                            timed = timed._replace(graph=median(g.samples))
                        for layout in layouts:
                            operands = {"handles": (has, hbs), "resident": resident,
                                        "stacked": stacked}[layout]
                            if a.settle and a.batched_variant_list:
                                self.batched_case(bt, m, k, n, p, a.batched_variant_list[0],
                                                  layout, operands, ctx, timed)
                            for v in a.batched_variant_list:
                                row = self.batched_case(bt, m, k, n, p, v, layout, operands,
                                                        ctx, timed)
                                self.doc["batched"].append(row)
                                log(f"[{self.elapsed()}] {batched_line(row)}")
                except svc.grpc.RpcError as e:
                    f = rpc_failure(e)
                    self.failures.append(f"batched {bt}x{m}x{k}x{n} {data}: {f['status']} "
                                         f"{f['message']}")
                    log(f"!!! {self.failures[-1]}")
                finally:
                    for h in has + hbs + resident:
                        svc.release(h)
                    del ctx
                    base.release()
                self.save()

    def batched_case(self, bt, m, k, n, precision, variant, layout, operands, ctx, timed):
        """One case: the timed calls, then the results downloaded and checked. The caller
        drops a settling case's row (its failures are still reported)."""
        a, svc = self.args, self.svc
        b_med = median(timed.samples)
        row = dict(batch=bt, m=m, k=k, n=n, precision=precision, variant_requested=variant,
                   layout=layout,
                   baseline=self.base.label(precision).replace("torch", "torch.bmm", 1),
                   baseline_us=b_med, baseline_stream_us=timed.stream,
                   baseline_wall_us=timed.wall, baseline_late=timed.late,
                   baseline_graph_us=timed.graph,
                   tolerance=TOLERANCE[precision])
        if layout == "handles":
            req = svc.pb.MultiplyBatchedRequest(batch=bt, a_handles=operands[0],
                                                b_handles=operands[1],
                                                compute=svc.compute_enum[precision],
                                                keep_result=True, variant=variant)
        elif layout == "resident":
            req = svc.pb.MultiplyBatchedRequest(batch=bt, a_stacked=operands[0],
                                                b_stacked=operands[1],
                                                compute=svc.compute_enum[precision],
                                                keep_stacked=True, variant=variant)
        else:
            req = svc.pb.MultiplyBatchedRequest(batch=bt, a=operands[0], b=operands[1],
                                                compute=svc.compute_enum[precision],
                                                variant=variant)
        try:
            replies, rts, last = svc.timed("MultiplyBatched", req, a.warmup, a.reps,
                                           a.case_seconds, a.min_reps, keep_last=not a.no_check)
        except svc.grpc.RpcError as e:
            f = rpc_failure(e)
            row.update(ran=False, **f)
            self.failures.append(f"batched {bt}x{m}x{k}x{n} {precision}: {f['status']} "
                                 f"{f['message']}")
            return row
        tm = timing_medians(replies)
        row.update(ran=True, status="OK", variant=",".join(sorted({r.variant for r in replies})),
                   reps=len(replies), service_kernel_us=tm["kernel_us"], service_timing_us=tm,
                   round_trip_us=median(rts))
        if b_med and tm["kernel_us"]:
            row["ratio"] = b_med / tm["kernel_us"]
            row["service_tflops"] = 2.0 * bt * m * n * k / tm["kernel_us"] / 1e6
        case = f"batched {bt}x{m}x{k}x{n} {precision}"
        if layout == "stacked" and not a.no_check:
            self.check_batched(row, f"{case} stacked", precision, ctx, lambda: decode_result(
                svc.reply_matrix(replies[-1].c)).reshape(bt, m, n))
        if last:
            try:
                self.check_batched(row, case, precision, ctx, lambda: np.stack(
                    [decode_result(svc.download(h)) for h in last]).reshape(bt, m, n))
            finally:
                svc.release(last)
        return row

    def check_batched(self, row, case, precision, ctx, results):
        """Records in `row` the relative L2 error of results() (batch x m x n) against the
        float64 reference, and a failure when it exceeds the precision's tolerance or the
        results cannot be had."""
        try:
            err = self.base.rel_err(ctx, results())
            row["rel_l2"] = err
            row["check"] = "ok" if err <= TOLERANCE[precision] else "FAILED"
            if row["check"] == "FAILED":
                self.failures.append(f"{case}: relative L2 error {err:.3g} > "
                                     f"{TOLERANCE[precision]:g}")
                log(f"!!! CORRECTNESS FAILURE: {self.failures[-1]}")
        except Exception as e:  # noqa: BLE001 - recorded and reported
            row["check"] = f"error: {e}"
            self.failures.append(f"{case}: check failed: {e}")

    # -- Transposes ---------------------------------------------------------------------------

    def transposes(self):
        a, svc, base = self.args, self.svc, self.base
        pb = svc.pb
        modes = [("out_of_place", v) for v in a.transpose_variant_list]
        if not a.no_in_place:
            modes.append(("in_place", "auto"))
        for (r, c) in a.transpose_list:
            rng = np.random.default_rng([a.seed, r, c, 99])
            A = random_matrix(rng, r, c, "fp32")
            ctx = base.transpose_prepare(A)
            bt = base.copy(ctx, a.warmup, a.reps, a.case_seconds, a.min_reps)
            tt = base.transpose(ctx, a.warmup, a.reps, a.case_seconds, a.min_reps)
            copy_us, tr_us = median(bt.samples), median(tt.samples)
            nbytes = A.nbytes
            del ctx
            base.release()
            for mode, v in modes:
                row = dict(rows=r, cols=c, dtype="fp32", mode=mode, variant_requested=v,
                           bytes=nbytes, baseline_copy_us=copy_us,
                           baseline_copy_gb_per_s=2 * nbytes / copy_us / 1e3,
                           baseline_transpose_us=tr_us,
                           baseline=("torch dst.copy_(src)" if base.kind == "torch-cuda"
                                     else "numpy copyto (CPU)"))
                h = None
                try:
                    h = svc.upload(A, "fp32")
                    req = pb.TransposeRequest(a_handle=h, variant=v,
                                              keep_result=(mode == "out_of_place"),
                                              in_place=(mode == "in_place"))
                    replies, rts, last = svc.timed("Transpose", req, a.warmup, a.reps,
                                                   a.case_seconds, a.min_reps,
                                                   keep_last=not a.no_check)
                    if mode == "in_place" and not a.no_check and (a.warmup + len(replies)) % 2 == 0:
                        svc.stub.Transpose(req, timeout=a.timeout, metadata=svc.md)  # odd count
                    tm = timing_medians(replies)
                    row.update(ran=True, status="OK",
                               variant=",".join(sorted({x.variant for x in replies})),
                               device=replies[-1].device, reps=len(replies),
                               service_kernel_us=tm["kernel_us"], service_timing_us=tm,
                               service_gb_per_s=median([x.gb_per_s for x in replies]),
                               service_kernel_samples_us=[round(x.timing.kernel_us, 3)
                                                          for x in replies],
                               round_trip_us=median(rts))
                    if tm["kernel_us"]:
                        row["ratio"] = copy_us / tm["kernel_us"]
                        row["ratio_to_baseline_transpose"] = tr_us / tm["kernel_us"]
                    if not a.no_check:
                        got = svc.download(last if mode == "out_of_place" else h)
                        exact = got.shape == (c, r) and np.array_equal(got, A.T)
                        row["check"] = "ok" if exact else "FAILED"
                        if not exact:
                            self.failures.append(f"transpose {r}x{c} {mode} {v}: result differs "
                                                 "from A^T")
                            log(f"!!! CORRECTNESS FAILURE: {self.failures[-1]}")
                        if mode == "out_of_place":
                            svc.release(last)
                except svc.grpc.RpcError as e:
                    f = rpc_failure(e)
                    row.update(ran=False, **f)
                    if f["status"] not in ("INVALID_ARGUMENT", "FAILED_PRECONDITION",
                                           "UNIMPLEMENTED"):
                        self.failures.append(f"transpose {r}x{c} {mode} {v}: {f['status']} "
                                             f"{f['message']}")
                finally:
                    if h:
                        svc.release(h)
                self.doc["transpose"].append(row)
                log(f"[{self.elapsed()}] {transpose_line(row)}")
            self.save()


# ---------------------------------------------------------------------------------------------
# Reports


def fmt(x, nd=1):
    return "-" if x is None else f"{x:,.{nd}f}"


def case_line(r):
    head = f"{r['m']}x{r['k']}x{r['n']} {r['precision']} {r['variant_requested']}"
    if not r.get("ran"):
        return f"{head}: not run: {r.get('status')}: {r.get('message', '')[:160]}"
    chk = r.get("check", "unchecked")
    if "rel_l2" in r:
        chk = f"{chk} (rel L2 {r['rel_l2']:.2e})"
    return (f"{head} -> {r['variant']}: service {fmt(r['service_kernel_us'])} us "
            f"(round trip {fmt(r['round_trip_us'])}), baseline {fmt(r['baseline_us'])} us, "
            f"ratio {fmt(r.get('ratio'), 3)}, check {chk}")


def batched_line(r):
    head = (f"batched {r['batch']} x {r['m']}x{r['k']}x{r['n']} {r['precision']} "
            f"{r.get('layout', 'handles')} {r.get('variant_requested', 'auto')}")
    if not r.get("ran"):
        return f"{head}: not run: {r.get('status')}: {r.get('message', '')[:160]}"
    return (f"{head} -> {r['variant']}: service {fmt(r['service_kernel_us'])} us, torch.bmm "
            f"{fmt(r['baseline_us'])} us (wall {fmt(r['baseline_wall_us'])}"
            f"{', in a graph ' + fmt(r['baseline_graph_us']) if r.get('baseline_graph_us') else ''}"
            f"), ratio "
            f"{fmt(r.get('ratio'), 3)}, check {r.get('check', 'unchecked')}")


def transpose_line(r):
    head = f"transpose {r['rows']}x{r['cols']} fp32 {r['mode']} {r['variant_requested']}"
    if not r.get("ran"):
        return f"{head}: not run: {r.get('status')}: {r.get('message', '')[:160]}"
    return (f"{head} -> {r['variant']}: service {fmt(r['service_kernel_us'])} us "
            f"({fmt(r['service_gb_per_s'])} GB/s), copy {fmt(r['baseline_copy_us'])} us, "
            f"share of copy {fmt(r.get('ratio'), 3)}, check {r.get('check', 'unchecked')}")


def summarize(doc):
    out = {}
    for r in doc["gemm"]:
        if r.get("ratio") and r.get("check", "ok") == "ok":  # a wrong result has no speed
            out.setdefault(r["precision"], {}).setdefault(r["variant_requested"], []).append(
                r["ratio"])
    return {p: {v: {"geomean_ratio": geomean(xs), "cases": len(xs)} for v, xs in d.items()}
            for p, d in out.items()}


def markdown(doc):
    base = doc["baseline"]
    srv = doc.get("server", {})
    dev = ", ".join(d["name"] for d in srv.get("devices", [])) or srv.get("backend", "?")
    is_torch = base["kind"] == "torch-cuda"
    bname = "torch" if is_torch else "NumPy (CPU)"
    L = ["# matserve service vs " + ("torch.matmul, same GPU, same process" if is_torch else
                                      "NumPy on the host CPU (no torch: not a GPU comparison)"),
         "",
         f"Date {doc['date']}, host {doc['host']}. Server {srv.get('version', '?')} "
         f"({srv.get('git_sha', '?')}), backend {srv.get('backend', '?')}, device {dev}. "
         + (f"torch {base['torch']} (CUDA {base['cuda']}) on {base['device']}."
            if is_torch else f"NumPy {base['numpy']}, {base['cpus']} CPUs."),
         f"Command: `{doc['command']}`" + (f"; server flags `{doc['server_flags']}`"
                                           if doc.get("server_flags") else ""),
         "",
         f"ratio = {bname} median / service median kernel time (> 1: the service is faster). "
         "Service: `timing.kernel_us` (GPU backend: CUDA events recorded with the call's device "
         "work, in the stream's CUDA graph of that launch when it replays one, else around a "
         "direct launch; docs/api.md. With the server's `--gate_launches` the stream starts the "
         "call only once the host has enqueued all of it, so the interval is device time only; "
         "without it the idle device may wait within the interval for the rest of the host's "
         "enqueue. The host's enqueue time is `launch_us`. The host clock on the CPU backend), "
         "resident operands, median of the timed calls. "
         f"{bname}: "
         + ("device time: CUDA events around each call, enqueued while a spin kernel "
            "(torch.cuda._sleep) holds the stream busy, so neither side's interval holds host "
            "launch time; torch wall = one call with a synchronize, host launch included "
            "(information)." if is_torch else "wall time of each call.")
         + " Round trip: client-observed Multiply over gRPC on loopback (information).",
         ""]
    late = sum(r.get("baseline_late", 0) for r in doc["gemm"] + doc.get("batched", []))
    if late:
        L += [f"**{late} torch sample(s) were late** (their host enqueue outlasted the spin): "
              "those intervals hold host time.", ""]
    if doc["gemm"]:
        L += ["## GEMM", "",
              f"| shape (m x k x n) | precision | asked | ran | service kernel us | {bname} us | "
              f"ratio | launch us | round trip us | {bname} wall us | {bname} in a graph us | "
              "service TFLOP/s | check (rel L2) |",
              "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in doc["gemm"]:
            shape = f"{r['m']}x{r['k']}x{r['n']}"
            if not r.get("ran"):
                L.append(f"| {shape} | {r['precision']} | {r['variant_requested']} | "
                         f"refused: {r.get('status')} | - | {fmt(r.get('baseline_us'))} | - | - "
                         f"| - | {fmt(r.get('baseline_wall_us'))} | "
                         f"{fmt(r.get('baseline_graph_us'))} | - | "
                         f"{md_escape(r.get('message', ''))[:120]} |")
                continue
            chk = r.get("check", "-")
            if "rel_l2" in r:
                chk = f"{chk} ({r['rel_l2']:.1e})"
            L.append(f"| {shape} | {r['precision']} | {r['variant_requested']} | {r['variant']} | "
                     f"{fmt(r['service_kernel_us'])} | {fmt(r['baseline_us'])} | "
                     f"{fmt(r.get('ratio'), 3)} | "
                     f"{fmt(r['service_timing_us'].get('launch_us'))} | {fmt(r['round_trip_us'])} | "
                     f"{fmt(r.get('baseline_wall_us'))} | {fmt(r.get('baseline_graph_us'))} | "
                     f"{fmt(r.get('service_tflops'), 2)} | {chk} |")
        summ = doc.get("summary", {})
        variants = list(dict.fromkeys(r["variant_requested"] for r in doc["gemm"]))
        L += ["", f"Geometric mean of the ratio ({bname} / service) per precision (cases):", "",
              "| precision | " + " | ".join(variants) + " |",
              "|---|" + "---:|" * len(variants)]
        for p in PRECISIONS:
            if p in summ:
                cells = []
                for v in variants:
                    s = summ[p].get(v)
                    cells.append(f"{s['geomean_ratio']:.3f} ({s['cases']})" if s else "-")
                L.append(f"| {p} | " + " | ".join(cells) + " |")
        idle_rows = [r for r in doc["gemm"] if r.get("ratio_idle")]
        if idle_rows:
            L += [f"Measured alike (`--torch-idle`): {bname} captured in a CUDA graph with its "
                  "events inside, each replay after the host waited the service's median round "
                  "trip of the case (GPU idle meanwhile), as the service's kernel_us is taken. "
                  "Geometric mean of that time / service kernel time (cases; lowest case):", "",
                  "| precision | " + " | ".join(variants) + " |",
                  "|---|" + "---:|" * len(variants)]
            for p in PRECISIONS:
                cells = []
                for v in variants:
                    xs = [r for r in idle_rows if r["precision"] == p and
                          r["variant_requested"] == v]
                    if not xs:
                        cells.append("-")
                        continue
                    low = min(xs, key=lambda r: r["ratio_idle"])
                    cells.append(f"{geomean([r['ratio_idle'] for r in xs]):.3f} ({len(xs)}; "
                                 f"{low['ratio_idle']:.2f} at {low['m']}x{low['k']}x{low['n']})")
                if any(c != "-" for c in cells):
                    L.append(f"| {p} | " + " | ".join(cells) + " |")
            L.append("")
    if doc.get("batched"):
        bb = "torch.bmm" if is_torch else bname
        L += [f"## MultiplyBatched against {bb}", "",
              f"ratio = {bb} time / service kernel time of the whole batch. Operands: handles = "
              "one resident handle per product, results kept resident (one each); stacked = "
              "each operand's matrices stacked in one inline Matrix, results stacked in the "
              "reply; resident = each operand's stack one resident matrix (a_stacked, "
              "b_stacked), the results kept stacked in one (keep_stacked).", "",
              f"| batch x m x k x n | precision | operands | asked | ran | service kernel us | "
              f"{bb} us | ratio | round trip us | {bb} wall us | service TFLOP/s | "
              "check (rel L2) |",
              "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in doc["batched"]:
            shape = f"{r['batch']} x {r['m']}x{r['k']}x{r['n']}"
            head = (f"| {shape} | {r['precision']} | {r.get('layout', 'handles')} | "
                    f"{r.get('variant_requested', 'auto')} | ")
            if not r.get("ran"):
                L.append(f"{head}refused: {r.get('status')} | - | "
                         f"{fmt(r.get('baseline_us'))} | - | - | - | - | "
                         f"{md_escape(r.get('message', ''))[:120]} |")
                continue
            chk = r.get("check", "-")
            if "rel_l2" in r:
                chk = f"{chk} ({r['rel_l2']:.1e})"
            L.append(f"{head}{r['variant']} | {fmt(r['service_kernel_us'])} | "
                     f"{fmt(r['baseline_us'])} | {fmt(r.get('ratio'), 3)} | "
                     f"{fmt(r['round_trip_us'])} | {fmt(r['baseline_wall_us'])} | "
                     f"{fmt(r.get('service_tflops'), 2)} | {chk} |")
        L.append("")
    if doc["transpose"]:
        L += ["## Transpose (fp32, resident)", "",
              f"ratio = {bname} copy of the same bytes / service kernel time (share of copy "
              "bandwidth; the copy is the ceiling). GB/s = (bytes read + written) / time.", "",
              "| shape | mode | asked | ran | service kernel us | service GB/s | copy us | "
              f"copy GB/s | ratio | {bname} transpose us | round trip us | check |",
              "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in doc["transpose"]:
            shape = f"{r['rows']}x{r['cols']}"
            if not r.get("ran"):
                L.append(f"| {shape} | {r['mode']} | {r['variant_requested']} | refused: "
                         f"{r.get('status')} | - | - | {fmt(r['baseline_copy_us'])} | "
                         f"{fmt(r['baseline_copy_gb_per_s'])} | - | "
                         f"{fmt(r['baseline_transpose_us'])} | - | "
                         f"{md_escape(r.get('message', ''))[:120]} |")
                continue
            L.append(f"| {shape} | {r['mode']} | {r['variant_requested']} | {r['variant']} | "
                     f"{fmt(r['service_kernel_us'])} | {fmt(r['service_gb_per_s'])} | "
                     f"{fmt(r['baseline_copy_us'])} | {fmt(r['baseline_copy_gb_per_s'])} | "
                     f"{fmt(r.get('ratio'), 3)} | {fmt(r['baseline_transpose_us'])} | "
                     f"{fmt(r['round_trip_us'])} | {r.get('check', '-')} |")
        L.append("")
    if doc.get("failures"):
        L += ["## FAILURES", ""] + [f"- {md_escape(f)}" for f in doc["failures"]] + [""]
    return "\n".join(L)


def md_escape(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


# ---------------------------------------------------------------------------------------------


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    os.makedirs(a.out, exist_ok=True)
    pb, rpc = import_stubs(a.stubs)
    import grpc
    import google.protobuf

    base = None
    if not a.no_torch:
        try:
            import torch
            if torch.cuda.is_available():
                base = TorchBaseline(a.torch_device)
            else:
                log("service_vs_torch: torch has no CUDA device: falling back to NumPy on the CPU")
        except ImportError:
            log("service_vs_torch: torch is not installed: falling back to NumPy on the CPU")
    if base is None:
        base = NumpyBaseline()
    log(f"service_vs_torch: baseline {base.name}")

    svc = Service(a.target, a.token, a.timeout, pb, rpc)
    info = svc.info()
    devs = ", ".join(d["name"] for d in info["devices"])
    log(f"service_vs_torch: server {info['version']} ({info['git_sha']}), backend {info['backend']}"
        f", devices: {devs or '-'}")
    if base.kind == "torch-cuda" and info["devices"]:
        tname = base.describe()["device"]
        if not any(tname in d["name"] or d["name"] in tname for d in info["devices"]):
            log(f"!!! WARNING: torch's device ({tname}) is not among the server's ({devs})")
    doc = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "host": socket.gethostname(),
           "command": " ".join(["service_vs_torch.py"] + (sys.argv[1:] if argv is None else argv)),
           "server_flags": os.environ.get("MATSERVE_SERVER_FLAGS", ""),
           "python": platform.python_version(), "grpcio": grpc.__version__,
           "protobuf": google.protobuf.__version__, "numpy": np.__version__,
           "server": info, "baseline": base.describe(),
           "settings": {"warmup": a.warmup, "settle": a.settle, "reps": a.reps,
                        "min_reps": a.min_reps,
                        "case_seconds": a.case_seconds, "seed": a.seed,
                        "tolerance_rel_l2": TOLERANCE, "inputs": "uniform magnitude in "
                        "[0.25, 1], random sign, never zero; not rotated between calls",
                        "check": "off" if a.no_check else
                        "last timed result downloaded, relative L2 vs a float64 product of the "
                        "same (rounded) inputs" + (" on the GPU (torch fp64)"
                                                   if base.kind == "torch-cuda" else
                                                   " on the host (NumPy)")},
           "gemm": [], "batched": [], "transpose": []}
    run = Run(a, svc, base, doc)
    log(f"service_vs_torch: {len(a.shape_list)} shapes x {len(a.precision_list)} precisions x "
        f"{len(a.variant_list)} variants, {len(a.transpose_list)} transpose shapes; warm-up "
        f"{a.warmup}, timed calls {a.reps} (down to {a.min_reps} where {a.reps} would take over "
        f"{a.case_seconds:g} s)")
    try:
        if a.shape_list:
            run.gemm()
        if a.batched_list:
            run.batched()
        if a.transpose_list:
            run.transposes()
    except KeyboardInterrupt:
        run.failures.append("interrupted")
        raise
    finally:
        run.save()
    summ = doc["summary"]
    log("")
    log(f"geometric mean of the ratio ({base.kind} / service kernel) per precision:")
    for p in PRECISIONS:
        if p in summ:
            log(f"  {p:5s} " + ", ".join(f"{v} {s['geomean_ratio']:.3f} ({s['cases']} cases)"
                                         for v, s in summ[p].items()))
    log(f"wrote {os.path.join(a.out, 'service_vs_torch.json')} and service_vs_torch.md "
        f"in {doc['elapsed_s']} s")
    if run.failures:
        log(f"!!! {len(run.failures)} FAILURE(S):")
        for f in run.failures:
            log(f"!!!   {f}")
        return 1
    log("all checks passed" if not a.no_check else "checks skipped (--no-check)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
