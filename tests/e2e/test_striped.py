"""End-to-end: ranged transfer (CreateResident, WriteRange, ReadRange) on the real server.

Ranges written at once over several connections give the same matrix, and the same results, as
one inline message; every misuse gets its precise status; a client killed mid-transfer leaves
nothing behind; another owner cannot touch a matrix being filled.
"""
import os
import random
import subprocess
import sys
import tempfile
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np

from matserve.v1 import matrix_service_pb2 as pb
from matserve.v1 import matrix_service_pb2_grpc as rpc
from server_process import MAX_MESSAGE, ServerProcess, call, release_all
from test_faults import metric

RNG = np.random.default_rng(33)
DTYPES = {pb.FP64: np.float64, pb.FP32: np.float32, pb.FP16: np.float16, pb.BF16: np.uint16}
ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789ab"


def random_bytes(rows, cols, dtype):
    """Random matrix bytes of a dtype: finite values (bf16 as the high half of fp32 values)."""
    x = RNG.uniform(-1, 1, size=rows * cols)
    if dtype == pb.BF16:
        return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return x.astype(DTYPES[dtype]).tobytes()


def stripes(target, n):
    """n channels (separate connections: distinct grpc.channel_id) and a stub on each."""
    opts = [("grpc.max_receive_message_length", MAX_MESSAGE),
            ("grpc.max_send_message_length", MAX_MESSAGE)]
    channels = [grpc.insecure_channel(target, options=opts + [("grpc.channel_id", i)])
                for i in range(n)]
    return channels, [rpc.MatrixServiceStub(c) for c in channels]


def put(stubs, rows, cols, dtype, data, chunk, layout=pb.ROW_MAJOR, token=None, colocate_with=""):
    """CreateResident, then every range of `data` (shuffled) at once over the stubs; the handle."""
    info = call(stubs[0].CreateResident, pb.CreateResidentRequest(
        header=pb.Matrix(rows=rows, cols=cols, dtype=dtype, layout=layout),
        colocate_with=colocate_with), token).resident
    offsets = list(range(0, len(data), chunk))
    random.Random(len(data)).shuffle(offsets)
    with ThreadPoolExecutor(len(stubs)) as pool:
        replies = list(pool.map(
            lambda i: call(stubs[i % len(stubs)].WriteRange, pb.WriteRangeRequest(
                handle=info.handle, offset=offsets[i], data=data[offsets[i]:offsets[i] + chunk]),
                token), range(len(offsets))))
    assert sum(r.complete for r in replies) == 1, replies
    return info.handle


def get(stubs, handle, size, chunk, token=None):
    """The bytes of a resident matrix, read as ranges at once over the stubs."""
    offsets = list(range(0, size, chunk))
    with ThreadPoolExecutor(len(stubs)) as pool:
        parts = pool.map(lambda i: call(stubs[i % len(stubs)].ReadRange, pb.ReadRangeRequest(
            handle=handle, offset=offsets[i], length=min(chunk, size - offsets[i])), token).data,
                         range(len(offsets)))
        return b"".join(parts)


class RangedTransferTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--max_message_bytes=4194304")
        cls.stub = cls.server.stub
        cls.channels, cls.stubs = stripes(cls.server.target, 4)

    @classmethod
    def tearDownClass(cls):
        for channel in cls.channels:
            channel.close()
        assert cls.server.stop() == 0, cls.server.output()

    def tearDown(self):
        release_all(self.stub)

    def expect(self, code, fragments, method, request):
        with self.assertRaises(grpc.RpcError) as ctx:
            call(method, request)
        self.assertEqual(ctx.exception.code(), code, ctx.exception.details())
        for f in fragments:
            self.assertIn(f, ctx.exception.details())
        return ctx.exception.details()

    def test_ranges_in_any_order_give_back_the_same_bytes_for_every_dtype(self):
        for dtype in [pb.FP64, pb.FP32, pb.FP16, pb.BF16, pb.FP8_E4M3]:
            for rows, cols in [(1, 1), (17, 31), (257, 1031)]:
                size = 1 if dtype == pb.FP8_E4M3 else np.dtype(DTYPES[dtype]).itemsize
                data = RNG.integers(0, 256, size=rows * cols * size, dtype=np.uint8).tobytes()
                with self.subTest(dtype=pb.DataType.Name(dtype), shape=(rows, cols)):
                    h = put(self.stubs, rows, cols, dtype, data, chunk=4093)
                    info = {m.handle: m for m in call(self.stub.ListResident,
                                                      pb.ListResidentRequest()).matrices}[h]
                    self.assertEqual(info.state, pb.RESIDENT_READY)
                    self.assertEqual(info.bytes_missing, 0)
                    self.assertEqual(get(self.stubs, h, len(data), chunk=1000), data)
                    if len(data) < 1000000:
                        self.assertEqual(call(self.stub.Download, pb.DownloadRequest(handle=h))
                                         .matrix.data, data)

    def test_striped_results_are_bit_identical_to_inline_ones(self):
        for dtype in [pb.FP64, pb.FP32, pb.FP16, pb.BF16]:
            for m, k, n in [(1, 1, 1), (17, 31, 5), (257, 1031, 33)]:
                with self.subTest(dtype=pb.DataType.Name(dtype), shape=(m, k, n)):
                    a, b = random_bytes(m, k, dtype), random_bytes(k, n, dtype)
                    inline = call(self.stub.Multiply, pb.MultiplyRequest(
                        a=pb.Matrix(rows=m, cols=k, dtype=dtype, data=a),
                        b=pb.Matrix(rows=k, cols=n, dtype=dtype, data=b, layout=pb.COL_MAJOR)))
                    ha = put(self.stubs, m, k, dtype, a, chunk=7919)
                    hb = put(self.stubs, k, n, dtype, b, chunk=7919, layout=pb.COL_MAJOR,
                             colocate_with=ha)
                    kept = call(self.stub.Multiply, pb.MultiplyRequest(
                        a_handle=ha, b_handle=hb, keep_result=True)).result
                    self.assertEqual((kept.rows, kept.cols), (m, n))
                    self.assertEqual(get(self.stubs, kept.handle, kept.bytes, chunk=3001),
                                     inline.c.data)
                    t_inline = call(self.stub.Transpose, pb.TransposeRequest(
                        a=pb.Matrix(rows=m, cols=k, dtype=dtype, data=a)))
                    t_kept = call(self.stub.Transpose, pb.TransposeRequest(
                        a_handle=ha, keep_result=True)).result
                    self.assertEqual(get(self.stubs, t_kept.handle, t_kept.bytes, chunk=4096),
                                     t_inline.b.data)
                    release_all(self.stub)

    def test_a_matrix_is_unusable_until_its_last_range_arrives(self):
        h = call(self.stub.CreateResident, pb.CreateResidentRequest(
            header=pb.Matrix(rows=4, cols=4, dtype=pb.FP32))).resident
        self.assertEqual(h.state, pb.RESIDENT_FILLING)
        self.assertEqual(h.bytes_missing, 64)
        r = call(self.stub.WriteRange, pb.WriteRangeRequest(handle=h.handle, offset=0,
                                                            data=bytes(40)))
        self.assertEqual((r.bytes_received, r.complete), (40, False))
        listed = call(self.stub.ListResident, pb.ListResidentRequest()).matrices
        self.assertEqual([(m.state, m.bytes_missing) for m in listed], [(pb.RESIDENT_FILLING, 24)])
        FP = grpc.StatusCode.FAILED_PRECONDITION
        missing = [h.handle, "still being filled", "24 of its 64 bytes"]
        b = pb.Matrix(rows=4, cols=4, dtype=pb.FP32, data=bytes(64))
        self.expect(FP, ["a_handle"] + missing, self.stub.Multiply,
                    pb.MultiplyRequest(a_handle=h.handle, b=b))
        self.expect(FP, ["a_handle"] + missing, self.stub.Transpose,
                    pb.TransposeRequest(a_handle=h.handle))
        self.expect(FP, ["handle"] + missing, self.stub.ReadRange,
                    pb.ReadRangeRequest(handle=h.handle, offset=0, length=4))
        self.expect(FP, ["handle"] + missing, self.stub.Download,
                    pb.DownloadRequest(handle=h.handle))
        r = call(self.stub.WriteRange, pb.WriteRangeRequest(handle=h.handle, offset=40,
                                                            data=bytes(24)))
        self.assertEqual((r.bytes_received, r.complete), (64, True))
        out = call(self.stub.Multiply, pb.MultiplyRequest(a_handle=h.handle, b=b))
        self.assertEqual(out.c.data, bytes(64))

    def test_misused_ranges_get_precise_statuses(self):
        h = call(self.stub.CreateResident, pb.CreateResidentRequest(
            header=pb.Matrix(rows=10, cols=10, dtype=pb.FP64))).resident.handle
        call(self.stub.WriteRange, pb.WriteRangeRequest(handle=h, offset=100, data=bytes(100)))
        self.expect(grpc.StatusCode.OUT_OF_RANGE, ["offset", "[750, 801)", "800 bytes", h],
                    self.stub.WriteRange,
                    pb.WriteRangeRequest(handle=h, offset=750, data=bytes(51)))
        self.expect(grpc.StatusCode.OUT_OF_RANGE, ["[1000, 1001)"], self.stub.WriteRange,
                    pb.WriteRangeRequest(handle=h, offset=1000, data=b"x"))
        self.expect(grpc.StatusCode.ALREADY_EXISTS, ["offset", "[150, 250)", "[100, 200)", h],
                    self.stub.WriteRange,
                    pb.WriteRangeRequest(handle=h, offset=150, data=bytes(100)))
        self.expect(grpc.StatusCode.INVALID_ARGUMENT, ["offset: -8 is negative"],
                    self.stub.WriteRange, pb.WriteRangeRequest(handle=h, offset=-8, data=b"x"))
        self.expect(grpc.StatusCode.INVALID_ARGUMENT, ["data: empty"],
                    self.stub.WriteRange, pb.WriteRangeRequest(handle=h, offset=0))
        self.expect(grpc.StatusCode.NOT_FOUND, ["handle", "no resident matrix"],
                    self.stub.WriteRange, pb.WriteRangeRequest(handle="0" * 32, data=b"x"))
        self.expect(grpc.StatusCode.INVALID_ARGUMENT, ["header.data", "WriteRange"],
                    self.stub.CreateResident, pb.CreateResidentRequest(
                        header=pb.Matrix(rows=1, cols=1, dtype=pb.FP32, data=bytes(4))))
        self.expect(grpc.StatusCode.INVALID_ARGUMENT, ["header.rows"],
                    self.stub.CreateResident, pb.CreateResidentRequest(
                        header=pb.Matrix(rows=0, cols=1, dtype=pb.FP32)))
        # Once complete, no range may change it; reads are checked against its end.
        call(self.stub.WriteRange, pb.WriteRangeRequest(handle=h, offset=0, data=bytes(100)))
        r = call(self.stub.WriteRange, pb.WriteRangeRequest(handle=h, offset=200, data=bytes(600)))
        self.assertTrue(r.complete)
        self.expect(grpc.StatusCode.FAILED_PRECONDITION, ["is complete", h], self.stub.WriteRange,
                    pb.WriteRangeRequest(handle=h, offset=0, data=b"x"))
        self.expect(grpc.StatusCode.OUT_OF_RANGE, ["[700, 801)", "800 bytes"], self.stub.ReadRange,
                    pb.ReadRangeRequest(handle=h, offset=700, length=101))
        self.expect(grpc.StatusCode.INVALID_ARGUMENT, ["length: 0"], self.stub.ReadRange,
                    pb.ReadRangeRequest(handle=h, offset=0, length=0))
        limit = call(self.stub.GetServerInfo, pb.GetServerInfoRequest()).limits.max_range_bytes
        self.assertEqual(limit, 4194304 - 1024)
        self.expect(grpc.StatusCode.RESOURCE_EXHAUSTED, ["length", str(limit)], self.stub.ReadRange,
                    pb.ReadRangeRequest(handle=h, offset=0, length=limit + 1))
        # A matrix made whole (Upload) is never written by ranges.
        up = call(self.stub.Upload, pb.UploadRequest(matrix=pb.Matrix(
            rows=1, cols=1, dtype=pb.FP32, data=bytes(4)))).resident.handle
        self.expect(grpc.StatusCode.FAILED_PRECONDITION, ["was not created by CreateResident"],
                    self.stub.WriteRange, pb.WriteRangeRequest(handle=up, offset=0, data=b"x"))


# A client that creates a matrix, writes part of it, says so, and waits to be killed.
HALF_WRITER = """
import sys, grpc
from matserve.v1 import matrix_service_pb2 as pb, matrix_service_pb2_grpc as rpc
stub = rpc.MatrixServiceStub(grpc.insecure_channel(sys.argv[1]))
md = [("authorization", "Bearer " + sys.argv[2])]
header = pb.Matrix(rows=256, cols=256, dtype=pb.FP32)
h = stub.CreateResident(pb.CreateResidentRequest(header=header), metadata=md,
                        timeout=30).resident.handle
for off in range(0, 65536, 16384):
    stub.WriteRange(pb.WriteRangeRequest(handle=h, offset=off, data=bytes(16384)), metadata=md,
                    timeout=30)
print(h, flush=True)
sys.stdin.read()
"""


class OwnersAndAbandonedFillsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        path = os.path.join(cls.dir.name, "tokens")
        with open(path, "w") as f:
            f.write(f"{ALICE} alice\n{BOB} bob\n")
        cls.server = ServerProcess(f"--auth_tokens_file={path}", "--stream_idle_timeout_seconds=1",
                                   "--max_resident_bytes_per_owner=1048576")
        cls.stub = cls.server.stub

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.output()
        cls.dir.cleanup()

    def listed(self, token):
        return list(call(self.stub.ListResident, pb.ListResidentRequest(), token).matrices)

    def wait_until_nothing_is_held(self):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not self.listed(ALICE) and metric(self.server, "matserve_resident_bytes") == 0:
                return
            time.sleep(0.2)
        self.fail(f"still held: {self.listed(ALICE)}")

    def test_a_client_killed_mid_transfer_leaves_nothing_behind(self):
        proc = subprocess.Popen([sys.executable, "-c", HALF_WRITER, self.server.target, ALICE],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        handle = proc.stdout.readline().strip()
        self.assertRegex(handle, r"^[A-Za-z0-9._:-]+/[0-9a-f]{32}$")
        held = self.listed(ALICE)
        self.assertEqual([(m.handle, m.state, m.bytes_missing) for m in held],
                         [(handle, pb.RESIDENT_FILLING, 65536 * 4 - 65536)])
        self.assertGreater(metric(self.server, "matserve_resident_bytes"), 0)
        proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()
        self.wait_until_nothing_is_held()
        # The quota came back with the memory: the whole quota can be taken again.
        whole = call(self.stub.CreateResident, pb.CreateResidentRequest(
            header=pb.Matrix(rows=512, cols=512, dtype=pb.FP32)), ALICE).resident.handle
        call(self.stub.Release, pb.ReleaseRequest(handle=whole), ALICE)

    def test_the_quota_is_reserved_when_the_matrix_is_created(self):
        h = call(self.stub.CreateResident, pb.CreateResidentRequest(
            header=pb.Matrix(rows=256, cols=768, dtype=pb.FP32)), ALICE).resident.handle
        with self.assertRaises(grpc.RpcError) as ctx:
            call(self.stub.CreateResident, pb.CreateResidentRequest(
                header=pb.Matrix(rows=256, cols=512, dtype=pb.FP32)), ALICE)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("--max_resident_bytes_per_owner", ctx.exception.details())
        call(self.stub.Release, pb.ReleaseRequest(handle=h), ALICE)

    def test_another_owner_cannot_write_or_read_a_range(self):
        h = call(self.stub.CreateResident, pb.CreateResidentRequest(
            header=pb.Matrix(rows=2, cols=2, dtype=pb.FP32)), ALICE).resident.handle
        for method, request in [
                (self.stub.WriteRange, pb.WriteRangeRequest(handle=h, offset=0, data=bytes(16))),
                (self.stub.ReadRange, pb.ReadRangeRequest(handle=h, offset=0, length=4))]:
            with self.assertRaises(grpc.RpcError) as ctx:
                call(method, request, BOB)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
            self.assertIn("no resident matrix", ctx.exception.details())
        self.assertEqual(self.listed(BOB), [])
        self.assertEqual(self.listed(ALICE)[0].bytes_missing, 16)  # untouched
        r = call(self.stub.WriteRange, pb.WriteRangeRequest(handle=h, offset=0, data=bytes(16)),
                 ALICE)
        self.assertTrue(r.complete)
        call(self.stub.Release, pb.ReleaseRequest(handle=h), ALICE)


if __name__ == "__main__":
    unittest.main()


def ranged_calls(server, rpc_name):
    return metric(server, "matserve_requests_total", rpc=rpc_name)


class PythonClientStriping:
    """matserve_client.Client and AsyncClient stripe by themselves above the threshold; results
    are identical to the inline path's, small calls still go inline, nothing is left behind.
    Run twice: through the compiled data plane (matserve_native) and the pure-Python one."""

    NATIVE = None

    @classmethod
    def setUpClass(cls):
        from matserve_client import Client
        cls.server = ServerProcess("--max_matrix_bytes=268435456")
        cls.striped = Client(cls.server.target, timeout=60, stripes=4,
                             stripe_threshold_bytes=64 << 10, stripe_chunk_bytes=40000,
                             native=cls.NATIVE)
        assert cls.striped.native == cls.NATIVE
        cls.inline = Client(cls.server.target, timeout=60, stripes=0)

    @classmethod
    def tearDownClass(cls):
        cls.striped.close()
        cls.inline.close()
        assert cls.server.stop() == 0, cls.server.output()

    def assert_nothing_left(self):
        self.assertEqual(list(self.server.stub.ListResident(pb.ListResidentRequest()).matrices),
                         [])

    def test_multiply_and_transpose_striped_equal_inline_for_every_dtype(self):
        for dtype in ["fp64", "fp32", "fp16", "bf16"]:
            for m, k, n in [(1, 1, 1), (17, 31, 5), (257, 1031, 33), (300, 200, 100)]:
                with self.subTest(dtype=dtype, shape=(m, k, n)):
                    a = RNG.uniform(-1, 1, (m, k))
                    b = np.asfortranarray(RNG.uniform(-1, 1, (k, n)))
                    before = ranged_calls(self.server, "WriteRange")
                    got = self.striped.multiply(a, b, dtype=dtype).c
                    want = self.inline.multiply(a, b, dtype=dtype).c
                    striped = ranged_calls(self.server, "WriteRange") > before
                    size = (m * k + k * n) * {"fp64": 8, "fp32": 4}.get(dtype, 2)
                    self.assertEqual(striped, size >= 64 << 10)
                    self.assertEqual(got.dtype, want.dtype)
                    self.assertTrue(np.array_equal(got, want))
                    t_got = self.striped.transpose(a, dtype=dtype).b
                    t_want = self.inline.transpose(a, dtype=dtype).b
                    self.assertTrue(np.array_equal(t_got, t_want))
                    self.assert_nothing_left()

    def test_a_striped_call_releases_everything_it_made_in_one_call(self):
        a = RNG.uniform(-1, 1, (300, 200)).astype(np.float32)
        b = RNG.uniform(-1, 1, (200, 100)).astype(np.float32)
        rpcs = ["CreateResident", "Release", "Multiply", "Transpose", "MultiplyBatched"]
        for what, run in [("multiply", lambda: self.striped.multiply(a, b)),
                           ("transpose", lambda: self.striped.transpose(a)),
                           ("batched", lambda: self.striped.multiply_batched(
                               np.stack([a, a]), np.stack([b, b])))]:
            with self.subTest(what):
                before = {r: ranged_calls(self.server, r) for r in rpcs}
                run()
                made = {r: ranged_calls(self.server, r) - before[r] for r in rpcs}
                self.assertEqual(made["Release"], 1, made)
                self.assertEqual(made["CreateResident"], 1 if what == "transpose" else 2, made)
                self.assert_nothing_left()

    def test_a_refused_striped_call_raises_its_status_and_leaves_nothing(self):
        from matserve_client.errors import MatserveError
        a = RNG.uniform(-1, 1, (300, 200)).astype(np.float32)
        b = RNG.uniform(-1, 1, (200, 100)).astype(np.float32)
        with self.assertRaises(MatserveError) as inline:
            self.inline.multiply(a, b, variant="no_such_variant")
        with self.assertRaises(MatserveError) as striped:
            self.striped.multiply(a, b, variant="no_such_variant")
        self.assertIs(type(striped.exception), type(inline.exception))
        self.assertEqual(striped.exception.code, inline.exception.code)
        self.assertIn("no_such_variant", str(striped.exception))
        self.assert_nothing_left()

    def test_small_calls_stay_inline(self):
        a, b = RNG.uniform(-1, 1, (64, 64)), RNG.uniform(-1, 1, (64, 64))
        writes = ranged_calls(self.server, "WriteRange")
        creates = ranged_calls(self.server, "CreateResident")
        self.striped.multiply(a, b, dtype="fp32")
        self.striped.transpose(a, dtype="fp32")
        self.assertEqual(ranged_calls(self.server, "WriteRange"), writes)
        self.assertEqual(ranged_calls(self.server, "CreateResident"), creates)

    def test_a_result_into_shared_memory_keeps_the_call_inline(self):
        a = RNG.uniform(-1, 1, (200, 300)).astype(np.float32)
        b = RNG.uniform(-1, 1, (300, 100)).astype(np.float32)
        with self.striped.create_shared_memory(200 * 100 * 4 + 4096) as region:
            r = self.striped.multiply(a, b, out=region.empty(200, 100, "fp32"))
            self.assertTrue(np.array_equal(r.c, self.inline.multiply(a, b).c))
        self.assert_nothing_left()

    def test_keep_result_returns_the_result_and_releases_the_operands(self):
        a, b = RNG.uniform(-1, 1, (200, 300)), RNG.uniform(-1, 1, (300, 100))
        r = self.striped.multiply(a, b, keep_result=True)
        self.assertIsNone(r.c)
        listed = self.server.stub.ListResident(pb.ListResidentRequest()).matrices
        handles = [m.handle for m in listed]
        self.assertEqual(handles, [r.resident.handle])
        self.assertTrue(np.array_equal(r.resident.download(), self.inline.multiply(a, b).c))
        r.resident.release()
        self.assert_nothing_left()

    def test_multiply_batched_striped_equals_inline(self):
        # Each stacked matrix at least 1 MiB (MIN_STRIPED_BATCH_MATRIX_BYTES).
        for dtype, (batch, m, k, n) in [("fp32", (3, 520, 530, 515)), ("bf16", (2, 740, 730, 720))]:
            with self.subTest(dtype=dtype):
                a = RNG.uniform(-1, 1, (batch, m, k))
                b = RNG.uniform(-1, 1, (batch, k, n))
                before = ranged_calls(self.server, "WriteRange")
                got = self.striped.multiply_batched(a, b, dtype=dtype).c
                self.assertGreater(ranged_calls(self.server, "WriteRange"), before)
                want = self.inline.multiply_batched(a, b, dtype=dtype).c
                self.assertTrue(np.array_equal(got, want))
                self.assert_nothing_left()
                if dtype == "bf16":  # the bits as they came, read striped
                    bits = self.striped.multiply_batched(a, b, dtype=dtype, bf16_bits=True).c
                    self.assertEqual(bits.bits.dtype, np.uint16)
                    self.assertTrue(np.array_equal(bits.to_float32(), want))
                    self.assert_nothing_left()
        # Many small matrices go striped too: each stack is one resident matrix (a_stacked), written
        # in a few ranges, and the results come back stacked in one (keep_stacked). In either
        # order, with a broadcast operand, and kept for the caller (one resident each).
        small = RNG.uniform(-1, 1, (64, 33, 17)).astype(np.float32)
        other = RNG.uniform(-1, 1, (64, 17, 29)).astype(np.float32)
        before = ranged_calls(self.server, "WriteRange")
        got = self.striped.multiply_batched(small, other).c
        self.assertGreater(ranged_calls(self.server, "WriteRange"), before)
        self.assertTrue(np.array_equal(got, self.inline.multiply_batched(small, other).c))
        self.assert_nothing_left()
        got = self.striped.multiply_batched(small, other[5], out_order="F").c
        self.assertTrue(got[0].flags.f_contiguous)
        self.assertTrue(np.array_equal(
            got, self.inline.multiply_batched(small, other[5], out_order="F").c))
        fortran = np.ascontiguousarray(small.transpose(0, 2, 1)).transpose(0, 2, 1)
        got = self.striped.multiply_batched(fortran, other).c
        self.assertTrue(np.array_equal(got, self.inline.multiply_batched(small, other).c))
        self.assert_nothing_left()
        kept = self.striped.multiply_batched(small, other, keep_result=True)
        self.assertEqual(len(kept.residents), 64)
        want = self.inline.multiply_batched(small, other).c
        self.assertTrue(np.array_equal(kept.residents[3].download(), want[3]))
        for h in kept.residents:
            h.release()
        self.assert_nothing_left()

    def test_a_token_without_resident_permission_goes_inline(self):
        from matserve_client import Client
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        path = os.path.join(directory.name, "tokens")
        with open(path, "w") as f:
            f.write(f"{ALICE} alice compute,info\n")
        with ServerProcess(f"--auth_tokens_file={path}") as server:
            with Client(server.target, timeout=60, token=ALICE, stripes=2,
                        stripe_threshold_bytes=1, native=self.NATIVE) as client:
                a = RNG.uniform(-1, 1, (40, 50))
                self.assertTrue(np.array_equal(client.multiply(a, a.T).c,
                                               self.inline.multiply(a, a.T).c))
            self.assertEqual(server.stop(), 0)

    def test_upload_stripes_large_matrices_and_read_bytes_reads_a_range(self):
        import asyncio
        from matserve_client.aio import AsyncClient
        a = RNG.uniform(-1, 1, (300, 257)).astype(np.float32)  # 308 KB: over the threshold
        small = RNG.uniform(-1, 1, (30, 20)).astype(np.float32)
        writes = ranged_calls(self.server, "WriteRange")
        with self.striped.upload(a) as ha:
            self.assertGreater(ranged_calls(self.server, "WriteRange"), writes)
            self.assertTrue(np.array_equal(ha.download(), a))
            self.assertEqual(ha.read_bytes(4 * 257 * 7, 4 * 257), a[7].tobytes())
            with self.striped.upload(small) as hs:  # below the threshold: one message
                self.assertTrue(np.array_equal(hs.download(), small))
        writes = ranged_calls(self.server, "WriteRange")
        self.striped.upload(small).release()
        self.assertEqual(ranged_calls(self.server, "WriteRange"), writes)

        async def run():
            async with AsyncClient(self.server.target, timeout=60, stripes=3,
                                   stripe_threshold_bytes=64 << 10,
                                   stripe_chunk_bytes=50000, native=self.NATIVE) as client:
                h = await client.upload(a)
                try:
                    return await h.download(), await h.read_bytes(4 * 257 * 299, 4 * 257)
                finally:
                    await h.release()

        before = ranged_calls(self.server, "WriteRange")
        got, last_row = asyncio.run(run())
        self.assertGreater(ranged_calls(self.server, "WriteRange"), before)
        self.assertTrue(np.array_equal(got, a))
        self.assertEqual(last_row, a[299].tobytes())
        self.assert_nothing_left()

    def test_asyncio_client_stripes_too(self):
        import asyncio
        from matserve_client.aio import AsyncClient
        a = RNG.uniform(-1, 1, (257, 1031))
        b = RNG.uniform(-1, 1, (1031, 33))
        want = self.inline.multiply(a, b).c
        want_t = self.inline.transpose(a, dtype="fp16").b
        small = self.inline.multiply(a[:8, :8], b[:8, :8]).c

        async def run():
            async with AsyncClient(self.server.target, timeout=60, stripes=3,
                                   stripe_threshold_bytes=64 << 10,
                                   stripe_chunk_bytes=50000, native=self.NATIVE) as client:
                got = await asyncio.gather(client.multiply(a, b), client.multiply(a, b),
                                           client.transpose(a, dtype="fp16"))
                before = ranged_calls(self.server, "WriteRange")
                tiny = await client.multiply(a[:8, :8], b[:8, :8])
                self.assertEqual(ranged_calls(self.server, "WriteRange"), before)
                return got, tiny

        before = ranged_calls(self.server, "WriteRange")
        (r1, r2, t), tiny = asyncio.run(run())
        self.assertGreater(ranged_calls(self.server, "WriteRange"), before)
        self.assertTrue(np.array_equal(r1.c, want))
        self.assertTrue(np.array_equal(r2.c, want))
        self.assertTrue(np.array_equal(t.b, want_t))
        self.assertTrue(np.array_equal(tiny.c, small))
        self.assert_nothing_left()


def native_module_missing():
    """Why the compiled data plane cannot be tested here, or None. The build says whether it made
    the module (MATSERVE_NATIVE_BUILT=1): then a module that does not import is a failure."""
    from matserve_client import native
    if native.available():
        return None
    if os.environ.get("MATSERVE_NATIVE_BUILT") == "1":
        raise AssertionError("matserve_native was built but does not import")
    return "matserve_native not built (no Python headers)"


@unittest.skipIf(native_module_missing(), "matserve_native not built (no Python headers)")
class PythonClientStripingNativeTest(PythonClientStriping, unittest.TestCase):
    NATIVE = True

    def test_a_status_without_a_message_comes_back_with_an_empty_one(self):
        import matserve_native
        stripes = matserve_native.open(self.server.target, 1, 1 << 20, 1 << 30)
        with self.assertRaises(matserve_native.Error) as e:
            matserve_native.unary(stripes, "/matserve.v1.MatrixService/NoSuchMethod", b"", 10.0,
                                  [])
        self.assertEqual(e.exception.args, (12, ""))  # UNIMPLEMENTED, and a str


class PythonClientStripingPurePythonTest(PythonClientStriping, unittest.TestCase):
    NATIVE = False


class WireCodecTest(unittest.TestCase):
    """The hand-written WriteRange serializer and ReadRange parser agree with protobuf's."""

    def test_write_range_bytes_parse_as_the_message(self):
        from matserve_client import striped
        data = np.arange(100000, dtype=np.uint8)
        for offset in [0, 1, 127, 128, 300, 1 << 40]:
            wire = striped.encode_write_range(b"ab" * 16, offset, memoryview(data)[5:70005])
            msg = pb.WriteRangeRequest.FromString(wire)
            self.assertEqual((msg.handle, msg.offset), ("ab" * 16, offset))
            self.assertEqual(msg.data, data[5:70005].tobytes())

    def test_matrices_created_apart_are_found(self):
        from matserve_client import striped
        infos = [pb.ResidentInfo(handle=h, device=d)
                 for h, d in [("a", "cuda:0"), ("b", "cuda:1"), ("c", "cuda:0")]]
        self.assertEqual(striped._misplaced(infos), [1])
        self.assertEqual(striped._misplaced(infos[:1]), [])

    def test_read_range_reply_lands_in_its_slice(self):
        from matserve_client import striped
        out = np.zeros(300, dtype=np.uint8)
        payload = bytes(range(200))
        striped.read_range_into(pb.ReadRangeReply(data=payload).SerializeToString(),
                                out[50:250])
        self.assertEqual(out[50:250].tobytes(), payload)
        self.assertFalse(out[:50].any() or out[250:].any())
        with self.assertRaises(Exception):
            striped.read_range_into(pb.ReadRangeReply(data=payload).SerializeToString(), out[:10])

    def test_the_codecs_copy_each_byte_once(self):
        import tracemalloc
        from matserve_client import striped
        chunk = 4 << 20
        data = np.ones(chunk, dtype=np.uint8)
        wire = pb.ReadRangeReply(data=data.tobytes()).SerializeToString()
        out = np.empty(chunk, dtype=np.uint8)
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            striped.read_range_into(wire, out)  # straight into `out`: nothing as large allocated
            read_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.reset_peak()
            request = striped.encode_write_range(b"h" * 32, 0, memoryview(data))
            write_peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        self.assertLess(read_peak, 64 << 10)
        self.assertLess(write_peak, chunk + (64 << 10))  # the request itself, nothing more
        # handle: tag, length, 32 bytes; offset: tag, 1 byte; data: tag, 4-byte length.
        self.assertEqual(len(request), (1 + 1 + 32) + (1 + 1) + (1 + 4) + chunk)


CLI = os.environ.get("MATSERVE_CLI")
BENCH = os.environ.get("MATSERVE_BENCH")


@unittest.skipUnless(CLI, "matserve-cli not built")
class CppClientStripingTest(unittest.TestCase):
    """The C++ client (through matserve-cli and matserve-bench) stripes by itself above the
    threshold; results are bit-identical to one message's; nothing is left behind."""

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess()
        cls.dir = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.output()
        cls.dir.cleanup()

    def cli(self, *args):
        r = subprocess.run([CLI, "--target", self.server.target, *args], capture_output=True,
                           text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout

    def out(self, name):
        return os.path.join(self.dir.name, name)

    def test_cli_striped_results_equal_inline_ones(self):
        for dtype in ["fp64", "fp32", "fp16", "bf16"]:
            for shape in ["1x1x1", "17x5x31", "257x33x1031"]:
                with self.subTest(dtype=dtype, shape=shape):
                    before = ranged_calls(self.server, "WriteRange")
                    self.cli("multiply", "--random", shape, "--dtype", dtype, "--layout", "col",
                             "--stripes", "3", "--stripe-threshold-bytes", "1",
                             "--stripe-chunk-bytes", "4099", "--out", self.out("s.npy"))
                    self.assertGreater(ranged_calls(self.server, "WriteRange"), before)
                    self.cli("multiply", "--random", shape, "--dtype", dtype, "--layout", "col",
                             "--stripes", "0", "--out", self.out("i.npy"))
                    with open(self.out("s.npy"), "rb") as s, open(self.out("i.npy"), "rb") as i:
                        self.assertEqual(s.read(), i.read())
                    self.cli("transpose", "--random", shape.rsplit("x", 1)[0], "--dtype", dtype,
                             "--stripes", "2", "--stripe-threshold-bytes", "1",
                             "--out", self.out("ts.npy"))
                    self.cli("transpose", "--random", shape.rsplit("x", 1)[0], "--dtype", dtype,
                             "--stripes", "0", "--out", self.out("ti.npy"))
                    with open(self.out("ts.npy"), "rb") as s, open(self.out("ti.npy"), "rb") as i:
                        self.assertEqual(s.read(), i.read())
                    self.assertEqual(
                        list(self.server.stub.ListResident(pb.ListResidentRequest()).matrices), [])

    def test_cli_ranges_fit_a_server_with_small_messages(self):
        # 1.44 MB operands and result, the server's messages 1 MiB: ranges of 8 MiB (the default)
        # would be refused; the client cuts them to the server's max_range_bytes.
        with ServerProcess("--max_message_bytes=1048576") as small:
            r = subprocess.run([CLI, "--target", small.target, "multiply", "--random",
                                "600x600x600", "--stripes", "2", "--stripe-threshold-bytes", "1",
                                "--check", "--tolerance", "1e-5"],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertGreater(ranged_calls(small, "ReadRange"), 1)
            self.assertEqual(small.stop(), 0)

    def test_cli_calls_below_the_threshold_stay_inline(self):
        before = ranged_calls(self.server, "CreateResident")
        self.cli("multiply", "--random", "64x64x64", "--stripes", "4")  # default threshold 16 MiB
        self.assertEqual(ranged_calls(self.server, "CreateResident"), before)

    def test_cli_batched_stripes_and_checks_every_product(self):
        before = ranged_calls(self.server, "WriteRange")
        out = self.cli("multiply", "--random", "520x520x520", "--batch", "2", "--verify",
                       "--tolerance", "1e-5", "--stripes", "4", "--stripe-threshold-bytes", "1",
                       "--json")
        self.assertGreater(ranged_calls(self.server, "WriteRange"), before)
        self.assertIn("server_verification", out)  # every product within --tolerance (else exit 3)
        self.assertEqual(
            list(self.server.stub.ListResident(pb.ListResidentRequest()).matrices), [])

    def test_cli_batches_of_small_matrices_stripe_as_one_stack_each(self):
        # 40 products of 13x9x7: each operand's stack one resident matrix (a_stacked) written in
        # one range, the results kept stacked in one; the server checks every product, in both
        # layouts, and nothing stays.
        for layout in ["row", "col"]:
            with self.subTest(layout=layout):
                before = ranged_calls(self.server, "WriteRange")
                out = self.cli("multiply", "--random", "13x9x7", "--batch", "40", "--layout",
                               layout, "--verify", "--tolerance", "1e-5", "--stripes", "2",
                               "--stripe-threshold-bytes", "1", "--json")
                self.assertEqual(ranged_calls(self.server, "WriteRange") - before, 2)
                self.assertIn("server_verification", out)  # else exit 3
                self.assertEqual(
                    list(self.server.stub.ListResident(pb.ListResidentRequest()).matrices), [])

    @unittest.skipUnless(BENCH, "matserve-bench not built")
    def test_bench_striped_mode(self):
        r = subprocess.run([BENCH, "--target", self.server.target, "--shapes", "96",
                            "--modes", "inline,striped", "--stripes", "3", "--requests", "6",
                            "--warmup", "1", "--json", self.out("bench.json")],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        import json
        with open(self.out("bench.json")) as f:
            doc = json.load(f)
        runs = {run["mode"]: run for run in doc["runs"]}
        self.assertEqual(set(runs), {"inline", "striped"})
        for run in runs.values():
            self.assertEqual(run["errors"], 0, run)
