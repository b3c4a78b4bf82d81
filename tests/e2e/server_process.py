"""Starts the real `matserve` binary on free loopback ports for end-to-end tests and stops it.

The binary path comes from $MATSERVE_SERVER; generated stubs must be on PYTHONPATH (ctest sets
both). Ports are chosen by the server itself (port 0) and read back from its startup lines.
"""
import os
import re
import signal
import subprocess
import threading
import time
import unittest

import grpc

from matserve.v1 import matrix_service_pb2 as pb
from matserve.v1 import matrix_service_pb2_grpc as rpc

MAX_MESSAGE = 1 << 30


def call(stub_method, request, token=None):
    """A unary call with "authorization: Bearer <token>" when a token is given, 30 s deadline."""
    metadata = [("authorization", f"Bearer {token}")] if token else None
    return stub_method(request, metadata=metadata, timeout=30)


class ServerProcess:
    """A running matserve; use as a context manager or call stop()."""

    def __init__(self, *extra_args, backend=None, start_channel=True, env=None):
        binary = os.environ.get("MATSERVE_SERVER", "matserve")
        backend = backend or os.environ.get("MATSERVE_BACKEND", "cpu")
        # --check_lock_order: absl aborts on a lock-order cycle, so e2e runs catch what the
        # production default ignores.
        args = [binary, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                f"--backend={backend}", "--check_lock_order", *extra_args]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1,
                                     env={**os.environ, **env} if env else None)
        self.lines = []
        self.port = None
        self.metrics_port = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            if m := re.search(r"serving gRPC on \S+:(\d+)", line):
                self.port = int(m.group(1))
            if m := re.search(r"metrics on http://\S+:(\d+)/metrics", line):
                self.metrics_port = int(m.group(1))
            if self.port and self.metrics_port:
                break
        if not self.port:
            self.proc.kill()
            raise RuntimeError("matserve did not start:\n" + "".join(self.lines) +
                               self.proc.stdout.read())
        # Keep draining stdout so the server never blocks on a full pipe.
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        self.target = f"127.0.0.1:{self.port}"
        self.channel = None
        self.stub = None
        if start_channel:  # plaintext; TLS tests make their own channels
            self.channel = grpc.insecure_channel(self.target, options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE),
                ("grpc.max_send_message_length", MAX_MESSAGE)])
            self.stub = rpc.MatrixServiceStub(self.channel)

    def _drain(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def output(self):
        return "".join(self.lines)

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Signals the server and returns its exit code."""
        if self.channel is not None:
            self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.stop()


class ClientServerTest(unittest.TestCase):
    """Tests sharing one server (ServerProcess(*SERVER_ARGS)) and one Python client (cls.client,
    matserve_client.Client with CLIENT_TIMEOUT seconds); the server must exit 0 afterwards."""

    SERVER_ARGS = ()
    CLIENT_TIMEOUT = 60

    @classmethod
    def setUpClass(cls):
        from matserve_client import Client  # only the Python client's tests need it

        cls.server = ServerProcess(*cls.SERVER_ARGS)
        cls.client = Client(cls.server.target, timeout=cls.CLIENT_TIMEOUT)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        code = cls.server.stop()
        assert code == 0, f"server exit code {code}\n{cls.server.output()}"


def health_check(channel, service=""):
    """grpc.health.v1.Health/Check by hand-encoded protobuf (no extra stubs needed).

    Returns the status number: 1 SERVING, 2 NOT_SERVING.
    """
    name = service.encode()
    request = (b"\x0a" + bytes([len(name)]) + name) if name else b""
    call = channel.unary_unary("/grpc.health.v1.Health/Check",
                               request_serializer=lambda b: b,
                               response_deserializer=lambda b: b)
    reply = call(request, timeout=5)
    # HealthCheckResponse { ServingStatus status = 1; } -> b"\x08<status>" (absent = UNKNOWN 0).
    return reply[1] if len(reply) >= 2 and reply[0] == 0x08 else 0


def reflection_services(channel):
    """Lists services through server reflection (v1alpha), by hand-encoded protobuf."""
    call = channel.stream_stream(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        request_serializer=lambda b: b, response_deserializer=lambda b: b)
    # ServerReflectionRequest { string list_services = 7; } with an empty string.
    replies = list(call(iter([b"\x3a\x00"]), timeout=5))
    return b"".join(replies)


def matrix(array, dtype=None, layout=pb.ROW_MAJOR):
    """A Matrix message from a 2-D NumPy array (fp64/fp32/fp16, or uint16 bf16 bits with dtype);
    a 3-D (batch, rows, cols) array becomes that many row-major matrices stacked batch-major."""
    import numpy as np
    kinds = {np.dtype(np.float64): pb.FP64, np.dtype(np.float32): pb.FP32,
             np.dtype(np.float16): pb.FP16}
    if dtype is None:
        dtype = kinds[array.dtype]
    if array.ndim == 3:
        assert layout == pb.ROW_MAJOR, "stacks are sent row-major"
        return pb.Matrix(rows=array.shape[1], cols=array.shape[2], batch=array.shape[0],
                         dtype=dtype, data=np.ascontiguousarray(array).tobytes())
    data = np.asfortranarray(array) if layout == pb.COL_MAJOR else np.ascontiguousarray(array)
    raw = data.tobytes(order="F" if layout == pb.COL_MAJOR else "C")
    return pb.Matrix(rows=array.shape[0], cols=array.shape[1], dtype=dtype, layout=layout,
                     data=raw)


def cuda_server_or_skip(*extra_args):
    """A ServerProcess on the CUDA backend, or unittest.SkipTest naming why there is none."""
    try:
        return ServerProcess(*extra_args, backend="cuda")
    except RuntimeError as e:
        raise unittest.SkipTest(f"no CUDA backend here (no GPU visible or CPU-only build): "
                                f"{str(e).splitlines()[-1] if str(e) else e}")


def release_all(stub):
    """Releases every resident matrix the caller can see (a test's tearDown)."""
    for m in stub.ListResident(pb.ListResidentRequest()).matrices:
        stub.Release(pb.ReleaseRequest(handle=m.handle))
