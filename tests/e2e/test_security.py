"""End-to-end security: bearer tokens (UNAUTHENTICATED / PERMISSION_DENIED), resident matrices
visible only to the token that made them, the per-caller resident quota, TLS and mutual TLS.
Certificates are made for the test with the `openssl` command.
"""
import os
import subprocess
import tempfile
import threading
import time
import unittest

import grpc
import numpy as np

from matserve.v1 import matrix_service_pb2 as pb
from matserve.v1 import matrix_service_pb2_grpc as rpc
from server_process import ServerProcess, call, health_check, matrix
from test_service import rand

CLI = os.environ.get("MATSERVE_CLI")


def run_cli(target, *args, env_token=None):
    env = {k: v for k, v in os.environ.items() if k != "MATSERVE_TOKEN"}
    if env_token:
        env["MATSERVE_TOKEN"] = env_token
    return subprocess.run([CLI, "--target", target, "--deadline-ms", "10000", *args],
                          capture_output=True, text=True, timeout=60, env=env)

ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789ab"
READER = "reader-token-0123456789"
CAROL = "carol-token-0123456789"


class TokenTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        path = os.path.join(cls.dir.name, "tokens")
        with open(path, "w") as f:
            f.write(f"# test tokens\n{ALICE} alice\n{BOB} bob\n{READER} reader info,compute\n{CAROL} carol\n")
        cls.server = ServerProcess(f"--auth_tokens_file={path}",
                                   "--max_resident_bytes_per_owner=100000")
        cls.stub = cls.server.stub

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0
        cls.dir.cleanup()

    def expect(self, code, fragment, method, request, token):
        with self.assertRaises(grpc.RpcError) as ctx:
            call(method, request, token)
        self.assertEqual(ctx.exception.code(), code, ctx.exception.details())
        self.assertIn(fragment, ctx.exception.details())

    def test_missing_or_unknown_token_is_unauthenticated(self):
        req = pb.MultiplyRequest(a=matrix(rand(2, 2)), b=matrix(rand(2, 2)))
        self.expect(grpc.StatusCode.UNAUTHENTICATED, "authorization: missing", self.stub.Multiply, req, None)
        self.expect(grpc.StatusCode.UNAUTHENTICATED, "unknown token", self.stub.Multiply, req, "x" * 20)
        self.expect(grpc.StatusCode.UNAUTHENTICATED, "unknown token", self.stub.GetServerInfo,
                    pb.GetServerInfoRequest(), "y" * 20)
        # Streams too, and before any of the request's fields is looked at.
        with self.assertRaises(grpc.RpcError) as ctx:
            list(self.stub.DownloadStream(pb.DownloadRequest(handle="h", chunk_bytes=-1), timeout=30))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.UploadStream(iter([pb.UploadChunk(header=pb.Matrix(rows=1 << 40, cols=1))]), timeout=30)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        self.assertEqual(call(self.stub.Multiply, req, ALICE).c.rows, 2)
        # Health stays open to probes without a token.
        self.assertEqual(health_check(self.server.channel), 1)

    def test_permissions(self):
        self.assertEqual(call(self.stub.Multiply, pb.MultiplyRequest(a=matrix(rand(2, 2)), b=matrix(rand(2, 2))), READER).c.cols, 2)
        self.expect(grpc.StatusCode.PERMISSION_DENIED, "may not call Upload: it needs permission 'resident'", self.stub.Upload,
                    pb.UploadRequest(matrix=matrix(rand(2, 2))), READER)
        self.expect(grpc.StatusCode.PERMISSION_DENIED, "may not call Multiply: it needs permission 'resident'",
                    self.stub.Multiply,
                    pb.MultiplyRequest(a=matrix(rand(2, 2)), b=matrix(rand(2, 2)), keep_result=True), READER)

    def test_resident_matrices_are_private_to_their_token(self):
        h = call(self.stub.Upload, pb.UploadRequest(matrix=matrix(rand(4, 4))), ALICE).resident.handle
        self.expect(grpc.StatusCode.NOT_FOUND, "a_handle", self.stub.Multiply,
                    pb.MultiplyRequest(a_handle=h, b=matrix(rand(4, 4))), BOB)
        self.expect(grpc.StatusCode.NOT_FOUND, "handle", self.stub.Download, pb.DownloadRequest(handle=h), BOB)
        self.expect(grpc.StatusCode.NOT_FOUND, "handle", self.stub.Release, pb.ReleaseRequest(handle=h), BOB)
        self.expect(grpc.StatusCode.NOT_FOUND, "colocate_with", self.stub.Upload,
                    pb.UploadRequest(matrix=matrix(rand(4, 4)), colocate_with=h), BOB)
        # Every other way of naming it: in-place transpose (a write), C, streams.
        self.expect(grpc.StatusCode.NOT_FOUND, "a_handle", self.stub.Transpose,
                    pb.TransposeRequest(a_handle=h, in_place=True), BOB)
        self.expect(grpc.StatusCode.NOT_FOUND, "a_handle", self.stub.Transpose,
                    pb.TransposeRequest(a_handle=h, keep_result=True), BOB)
        self.expect(grpc.StatusCode.NOT_FOUND, "c_handle", self.stub.Multiply,
                    pb.MultiplyRequest(a=matrix(rand(4, 4)), b=matrix(rand(4, 4)), c_handle=h, beta=1.0), BOB)
        with self.assertRaises(grpc.RpcError) as ctx:
            list(self.stub.DownloadStream(pb.DownloadRequest(handle=h), metadata=[("authorization", f"Bearer {BOB}")],
                                          timeout=30))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.UploadStream(iter([pb.UploadChunk(header=pb.Matrix(rows=1, cols=1, dtype=pb.FP32), data=bytes(4),
                                                        colocate_with=h)]),
                                   metadata=[("authorization", f"Bearer {BOB}")], timeout=30)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
        # The owner's matrix is untouched by all of that.
        got = call(self.stub.Download, pb.DownloadRequest(handle=h), ALICE).matrix
        self.assertEqual((got.rows, got.cols), (4, 4))
        self.assertEqual(len(call(self.stub.ListResident, pb.ListResidentRequest(), BOB).matrices), 0)
        self.assertEqual(len(call(self.stub.ListResident, pb.ListResidentRequest(), ALICE).matrices), 1)
        call(self.stub.Release, pb.ReleaseRequest(handle=h), ALICE)

    @unittest.skipUnless(CLI, "MATSERVE_CLI is not set (no matserve-cli built)")
    def test_cli_sends_tokens_and_health_needs_none(self):
        target = self.server.target
        health = run_cli(target, "health")
        self.assertEqual(health.returncode, 0, health.stderr)
        self.assertIn("SERVING", health.stdout)
        refused = run_cli(target, "info")
        self.assertEqual(refused.returncode, 2)
        self.assertIn("UNAUTHENTICATED", refused.stderr)
        token_file = os.path.join(self.dir.name, "alice.token")
        with open(token_file, "w") as f:
            f.write(ALICE + "\n")
        self.assertEqual(run_cli(target, "--token-file", token_file, "info").returncode, 0)
        self.assertEqual(run_cli(target, "info", env_token=READER).returncode, 0)
        denied = run_cli(target, "upload", "--random", "4x4", env_token=READER)
        self.assertEqual(denied.returncode, 2)
        self.assertIn("PERMISSION_DENIED", denied.stderr)
        missing = run_cli(target, "--token-file", token_file + ".absent", "info")
        self.assertEqual(missing.returncode, 1)
        self.assertIn("--token-file", missing.stderr)

    def test_python_client_sends_its_token(self):
        from matserve_client import Client, MatserveError
        with Client(self.server.target, token=ALICE, timeout=30) as alice:
            with alice.upload(rand(6, 5)) as h:
                self.assertEqual(len(alice.list_resident()), 1)
                with Client(self.server.target, token=BOB, timeout=30) as bob:
                    self.assertEqual(bob.list_resident(), [])
                    big = bob.upload(rand(100, 100), stream=True)  # streaming calls carry it too
                    self.assertEqual(big.shape, (100, 100))
                    big.release()
                r = alice.multiply(h, rand(5, 3))
                self.assertEqual(r.c.shape, (6, 3))
        with Client(self.server.target, timeout=30) as anonymous:
            with self.assertRaises(MatserveError) as ctx:
                anonymous.server_info()
            self.assertIn("UNAUTHENTICATED", str(ctx.exception))

    def test_python_metadata_per_client_and_per_block(self):
        # The token as plain metadata: for every call of a client (metadata=), or only for the
        # calls inside a call_metadata() block, streamed ones included; the asyncio client too.
        import asyncio
        from matserve_client import Client, Unauthenticated, call_metadata
        from matserve_client.aio import AsyncClient
        header = ("authorization", f"Bearer {ALICE}")
        with Client(self.server.target, timeout=30, metadata=[header]) as c:
            self.assertEqual(c.multiply(rand(2, 3), rand(3, 4)).c.shape, (2, 4))
        with Client(self.server.target, timeout=30) as c:
            with call_metadata(header):
                big = c.upload(rand(100, 100), stream=True)
                self.assertEqual(c.multiply(big, rand(100, 2)).c.shape, (100, 2))
                big.release()
            with self.assertRaises(Unauthenticated):
                c.server_info()

        async def aio():
            async with AsyncClient(self.server.target, timeout=30) as c:
                with call_metadata(header):
                    r = await c.multiply(rand(2, 3), rand(3, 4))
                with self.assertRaises(Unauthenticated):
                    await c.server_info()
            async with AsyncClient(self.server.target, timeout=30, metadata=[header]) as c:
                return r, await c.health()
        r, status = asyncio.run(aio())
        self.assertEqual((r.c.shape, status), ((2, 4), "SERVING"))

    def test_per_caller_resident_quota(self):
        h = call(self.stub.Upload, pb.UploadRequest(matrix=matrix(rand(100, 100))), BOB).resident.handle  # 40 KB
        self.expect(grpc.StatusCode.RESOURCE_EXHAUSTED, "--max_resident_bytes_per_owner", self.stub.Upload,
                    pb.UploadRequest(matrix=matrix(rand(200, 100))), BOB)
        # Another caller's quota is its own.
        h2 = call(self.stub.Upload, pb.UploadRequest(matrix=matrix(rand(100, 100))), ALICE).resident.handle
        call(self.stub.Release, pb.ReleaseRequest(handle=h), BOB)
        call(self.stub.Release, pb.ReleaseRequest(handle=h2), ALICE)

    def test_concurrent_uploads_cannot_overrun_the_quota(self):
        """An upload's bytes count against the quota from the moment its header is accepted, so
        concurrent streams of one caller cannot all pass the check and together exceed it."""
        go = threading.Event()

        def chunks():  # 100 x 100 fp32: 40 KB (40960 counted), two fit in 100000
            yield pb.UploadChunk(header=pb.Matrix(rows=100, cols=100, dtype=pb.FP32))
            go.wait(30)
            yield pb.UploadChunk(data=bytes(40000))
        md = [("authorization", f"Bearer {CAROL}")]
        futures = [self.stub.UploadStream.future(chunks(), metadata=md, timeout=60) for _ in range(4)]
        deadline = time.monotonic() + 120  # the refused ones end at their header
        while time.monotonic() < deadline and sum(f.done() for f in futures) < 2:
            time.sleep(0.02)
        go.set()
        handles, refused = [], []
        for f in futures:
            try:
                handles.append(f.result().resident.handle)
            except grpc.RpcError as e:
                refused.append(e)
        self.assertEqual(len(handles), 2, [e.details() for e in refused])
        for e in refused:
            self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertIn("--max_resident_bytes_per_owner", e.details())
        self.assertLessEqual(call(self.stub.ListResident, pb.ListResidentRequest(), CAROL).total_bytes, 100000)
        for h in handles:
            call(self.stub.Release, pb.ReleaseRequest(handle=h), CAROL)


def pool_in_use(server):
    """The server's pool bytes in use (matserve_device_pool_bytes{state="in_use"})."""
    from test_faults import metric
    return metric(server, "matserve_device_pool_bytes", state="in_use")


class StalledStreamTest(unittest.TestCase):
    """gRPC's synchronous reads and writes have no timeout: a stream that stops moving is
    cancelled after --stream_idle_timeout_seconds, freeing its memory and its matrix's lock."""

    @classmethod
    def setUpClass(cls):
        # 5 s against the 0.25 s gaps of the slow stream below: a 20x margin for a loaded machine.
        cls.server = ServerProcess("--stream_idle_timeout_seconds=5")
        cls.stub = cls.server.stub

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.output()

    def test_upload_that_stops_sending_is_cancelled_and_freed(self):
        baseline = pool_in_use(self.server)
        resume = threading.Event()

        def stalled():  # a 64 MiB header, one chunk, then nothing
            yield pb.UploadChunk(header=pb.Matrix(rows=4096, cols=4096, dtype=pb.FP32))
            yield pb.UploadChunk(data=bytes(1 << 20))
            resume.wait(30)
        start = time.monotonic()
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.UploadStream(stalled(), timeout=60)
        elapsed = time.monotonic() - start
        resume.set()
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.CANCELLED)
        self.assertLess(elapsed, 120)  # a bound against a hang: cancelled after the idle timeout
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and pool_in_use(self.server) > baseline:
            time.sleep(0.05)
        self.assertLessEqual(pool_in_use(self.server), baseline)
        self.assertEqual(len(self.stub.ListResident(pb.ListResidentRequest()).matrices), 0)
        # Slow but moving streams are unaffected: a chunk every half second.
        def slow():
            yield pb.UploadChunk(header=pb.Matrix(rows=4, cols=4, dtype=pb.FP32))
            for _ in range(4):
                time.sleep(0.25)
                yield pb.UploadChunk(data=bytes(16))
        info = self.stub.UploadStream(slow(), timeout=60).resident
        self.assertEqual(info.bytes, 64)
        self.stub.Release(pb.ReleaseRequest(handle=info.handle))

    def test_download_that_stops_reading_releases_its_matrix(self):
        n = 4096  # 64 MiB: far more than the transport buffers for a reader that stops
        h = self.upload(n)
        stream = self.stub.DownloadStream(pb.DownloadRequest(handle=h, chunk_bytes=1 << 16), timeout=120)
        next(stream)  # one chunk, then the client stops reading
        # An in-place transpose needs the matrix exclusively: it proceeds once the stalled
        # download was cancelled.
        start = time.monotonic()
        r = self.stub.Transpose(pb.TransposeRequest(a_handle=h, in_place=True), timeout=30)
        self.assertEqual((r.result.rows, r.result.cols), (n, n))
        self.assertLess(time.monotonic() - start, 120)  # a bound against a hang
        with self.assertRaises(grpc.RpcError) as ctx:
            for _ in stream:
                pass
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.CANCELLED)
        self.stub.Release(pb.ReleaseRequest(handle=h))

    def upload(self, n):
        data = bytes(n * n * 4)

        def chunks():
            yield pb.UploadChunk(header=pb.Matrix(rows=n, cols=n, dtype=pb.FP32))
            for off in range(0, len(data), 4 << 20):
                yield pb.UploadChunk(data=data[off:off + (4 << 20)])
        return self.stub.UploadStream(chunks(), timeout=60).resident.handle


class ResidentUseTest(unittest.TestCase):
    """A resident matrix in use by one call while another expires, releases or transposes it in
    place. The use is a DownloadStream whose client stops reading (no idle timeout here): it
    holds the matrix for as long as the test wants."""
    N = 4096  # 64 MiB of fp32: far more than the transport buffers for a reader that stops

    TTL_ARGS = ("--resident_ttl_seconds=600",)  # no expiry during a test, however loaded

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess(*cls.TTL_ARGS, "--stream_idle_timeout_seconds=0")
        cls.stub = cls.server.stub
        cls.a = np.arange(cls.N * cls.N, dtype=np.float32).reshape(cls.N, cls.N)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.output()

    def upload(self):
        return self.stub.Upload(pb.UploadRequest(matrix=matrix(self.a)), timeout=60).resident.handle

    def stalled_download(self, h):
        stream = self.stub.DownloadStream(pb.DownloadRequest(handle=h, chunk_bytes=1 << 16), timeout=120)
        first = next(stream)
        return stream, first.data

    @staticmethod
    def finish(stream, first):
        return first + b"".join(c.data for c in stream)

    def listed(self):
        return {m.handle for m in self.stub.ListResident(pb.ListResidentRequest()).matrices}

    def test_release_of_a_matrix_in_use_frees_it_after_the_use(self):
        baseline = pool_in_use(self.server)
        h = self.upload()
        stream, first = self.stalled_download(h)
        self.assertGreater(self.stub.Release(pb.ReleaseRequest(handle=h)).bytes_freed, 0)
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.Download(pb.DownloadRequest(handle=h))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertGreaterEqual(pool_in_use(self.server), baseline + self.a.nbytes)  # still in use
        self.assertEqual(self.finish(stream, first), self.a.tobytes())  # the use completes intact
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and pool_in_use(self.server) > baseline:
            time.sleep(0.05)
        self.assertLessEqual(pool_in_use(self.server), baseline)

    def test_in_place_transpose_waits_for_the_matrix_in_use(self):
        h = self.upload()
        stream, first = self.stalled_download(h)
        with self.assertRaises(grpc.RpcError) as ctx:  # cannot start while the download reads
            self.stub.Transpose(pb.TransposeRequest(a_handle=h, in_place=True), timeout=1)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertEqual(self.finish(stream, first), self.a.tobytes())  # never half-transposed
        r = self.stub.Transpose(pb.TransposeRequest(a_handle=h, in_place=True), timeout=60)
        self.assertEqual((r.result.rows, r.result.cols), (self.N, self.N))
        stream, first = self.stalled_download(h)
        self.assertEqual(self.finish(stream, first), np.ascontiguousarray(self.a.T).tobytes())
        self.stub.Release(pb.ReleaseRequest(handle=h))


class ResidentUseExpiryTest(ResidentUseTest):
    """The idle TTL of a matrix in use: a server whose TTL is short (3 s: the one call that checks
    a matrix is still listed right after its use ends has that long, even on a loaded machine).
    The other cases of ResidentUseTest run on a server whose matrices never expire mid-test, so
    that a slow machine cannot turn them into NOT_FOUND."""
    TTL_ARGS = ("--resident_ttl_seconds=3",)

    def test_a_matrix_in_use_does_not_expire(self):
        h = self.upload()
        stream, first = self.stalled_download(h)
        time.sleep(4.5)  # past the 3 s TTL (and the sweep period) while the download holds it
        self.assertIn(h, self.listed())
        data = self.finish(stream, first)
        # Its idle time starts when the use ends: still there now, gone after the TTL.
        self.assertIn(h, self.listed())
        self.assertEqual(data, self.a.tobytes())
        deadline = time.monotonic() + 120  # a bound against a hang, not a timing
        while time.monotonic() < deadline and h in self.listed():
            time.sleep(0.2)
        self.assertNotIn(h, self.listed())

    # The inherited cases run on the long-TTL server only.
    test_release_of_a_matrix_in_use_frees_it_after_the_use = None
    test_in_place_transpose_waits_for_the_matrix_in_use = None


def make_pki(d):
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=matserve-test-ca")
    for name, ext in [("server", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
                      ("client", "extendedKeyUsage=clientAuth")]:
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN=matserve-{name}")
        with open(os.path.join(d, f"{name}.ext"), "w") as f:
            f.write(ext + "\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")
    pki = {}
    for n in ("ca.pem", "client.key", "client.pem"):
        with open(os.path.join(d, n), "rb") as f:
            pki[n] = f.read()
    return pki


class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.pki = make_pki(cls.dir.name)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def multiply_over(self, port, credentials):
        with grpc.secure_channel(f"127.0.0.1:{port}", credentials) as ch:
            return rpc.MatrixServiceStub(ch).Multiply(
                pb.MultiplyRequest(a=matrix(rand(3, 3)), b=matrix(rand(3, 3))), timeout=10)

    def test_tls_and_mutual_tls(self):
        server = ServerProcess(f"--tls_cert={self.path('server.pem')}", f"--tls_key={self.path('server.key')}",
                               start_channel=False)
        try:
            self.assertIn("(TLS,", server.output())
            ok = self.multiply_over(server.port, grpc.ssl_channel_credentials(self.pki["ca.pem"]))
            self.assertEqual(ok.c.rows, 3)
            if CLI:
                target = f"127.0.0.1:{server.port}"
                tls = run_cli(target, "--tls-ca", self.path("ca.pem"), "health")
                self.assertEqual(tls.returncode, 0, tls.stderr)
                self.assertEqual(run_cli(target, "--tls-ca", self.path("ca.pem"),
                                         "--tls-server-name", "localhost", "info").returncode, 0)
                self.assertEqual(run_cli(target, "health").returncode, 2)  # plaintext
            with self.assertRaises(grpc.RpcError):  # plaintext against a TLS port
                with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
                    rpc.MatrixServiceStub(ch).GetServerInfo(pb.GetServerInfoRequest(), timeout=3)
        finally:
            self.assertEqual(server.stop(), 0)
        mtls = ServerProcess(f"--tls_cert={self.path('server.pem')}", f"--tls_key={self.path('server.key')}",
                             f"--tls_client_ca={self.path('ca.pem')}", start_channel=False)
        try:
            self.assertIn("mutual TLS", mtls.output())
            with self.assertRaises(grpc.RpcError):  # no client certificate
                self.multiply_over(mtls.port, grpc.ssl_channel_credentials(self.pki["ca.pem"]))
            creds = grpc.ssl_channel_credentials(self.pki["ca.pem"], self.pki["client.key"], self.pki["client.pem"])
            self.assertEqual(self.multiply_over(mtls.port, creds).c.cols, 3)
            if CLI:
                target = f"127.0.0.1:{mtls.port}"
                ca = ("--tls-ca", self.path("ca.pem"))
                self.assertEqual(run_cli(target, *ca, "info").returncode, 2)  # no client cert
                mutual = run_cli(target, *ca, "--tls-cert", self.path("client.pem"),
                                 "--tls-key", self.path("client.key"), "info")
                self.assertEqual(mutual.returncode, 0, mutual.stderr)
        finally:
            self.assertEqual(mtls.stop(), 0)


    def test_striped_calls_over_tls_on_both_data_planes(self):
        import numpy as np
        from matserve_client import Client, Unavailable, native, tls_credentials
        a = np.arange(300 * 200, dtype=np.float32).reshape(300, 200) / 7e4
        want = a @ a.T
        mtls = ServerProcess(f"--tls_cert={self.path('server.pem')}", f"--tls_key={self.path('server.key')}",
                             f"--tls_client_ca={self.path('ca.pem')}", start_channel=False)
        try:
            target = f"127.0.0.1:{mtls.port}"
            creds = tls_credentials(self.pki["ca.pem"], self.pki["client.key"], self.pki["client.pem"])
            planes = [False] + ([True] if native.available() else [])
            for plane in planes:
                with self.subTest(native=plane):
                    with Client(target, timeout=30, credentials=creds, stripes=2,
                                stripe_threshold_bytes=1, native=plane) as client:
                        self.assertEqual(client.native, plane)
                        np.testing.assert_allclose(client.multiply(a, a.T).c, want, rtol=1e-5)
                        self.assertEqual(client.list_resident(), [])
            # Without the client certificate the server refuses the stripes' connections too.
            without = tls_credentials(self.pki["ca.pem"])
            for plane in planes:
                with self.subTest(native=plane, certificate=False):
                    with Client(target, timeout=10, credentials=without, stripes=2,
                                stripe_threshold_bytes=1, native=plane) as client:
                        with self.assertRaises(Unavailable):
                            client.multiply(a, a.T)
        finally:
            self.assertEqual(mtls.stop(), 0)


class TlsStartupTest(unittest.TestCase):
    """A TLS misconfiguration stops the server at startup (exit 2) with a message naming the flag
    and the file; it never serves plaintext, or mutual TLS without a usable CA, instead."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        make_pki(cls.dir.name)
        for name, text in [("garbage.pem", "not a certificate\n"), ("empty.pem", "")]:
            with open(os.path.join(cls.dir.name, name), "w") as f:
                f.write(text)
        subprocess.run(["openssl", "rsa", "-in", "server.key", "-aes256", "-passout", "pass:x",
                        "-out", "encrypted.key"], cwd=cls.dir.name, check=True, capture_output=True)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def test_misconfigurations_refuse_to_start(self):
        d = self.dir.name
        p = lambda name: os.path.join(d, name)  # noqa: E731
        cert, key, ca = f"--tls_cert={p('server.pem')}", f"--tls_key={p('server.key')}", p("ca.pem")
        cases = [
            ([cert], "tls_cert, tls_key: give both or neither"),
            ([f"--tls_key={p('server.key')}"], "tls_cert, tls_key: give both or neither"),
            ([f"--tls_client_ca={ca}"], "tls_client_ca: needs --tls_cert and --tls_key"),
            ([cert, f"--tls_key={p('absent.key')}"], "tls_key: cannot read"),
            ([cert, f"--tls_key={d}"], "is not a regular file"),
            ([cert, f"--tls_key={p('empty.pem')}"], "is empty"),
            ([cert, f"--tls_key={p('garbage.pem')}"], "tls_key: no unencrypted PEM private key"),
            ([cert, f"--tls_key={p('encrypted.key')}"], "tls_key: no unencrypted PEM private key"),
            ([f"--tls_cert={p('garbage.pem')}", key], "tls_cert: no PEM certificate"),
            ([cert, f"--tls_key={p('client.key')}"], "does not belong to the certificate"),
            ([cert, key, f"--tls_client_ca={p('garbage.pem')}"], "tls_client_ca: no PEM certificate"),
            ([cert, key, f"--tls_client_ca={d}"], "tls_client_ca: " + d + " is not a regular file"),
            ([cert, key, f"--tls_client_ca={p('empty.pem')}"], "tls_client_ca: " + p("empty.pem") + " is empty"),
        ]
        binary = os.environ.get("MATSERVE_SERVER", "matserve")
        for args, fragment in cases:
            with self.subTest(args=args):
                p_ = subprocess.run([binary, "--backend=cpu", "--listen=127.0.0.1:0",
                                     "--metrics_listen=", *args], capture_output=True, text=True,
                                    timeout=30, stdin=subprocess.DEVNULL)
                self.assertEqual(p_.returncode, 2, p_.stdout + p_.stderr)
                self.assertIn(fragment, p_.stderr)
                self.assertNotIn("serving gRPC", p_.stdout)


if __name__ == "__main__":
    unittest.main()
