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
                    self.stub.WriteRange, pb.WriteRangeRequest(handle=h, offset=750, data=bytes(51)))
        self.expect(grpc.StatusCode.OUT_OF_RANGE, ["[1000, 1001)"], self.stub.WriteRange,
                    pb.WriteRangeRequest(handle=h, offset=1000, data=b"x"))
        self.expect(grpc.StatusCode.ALREADY_EXISTS, ["offset", "[150, 250)", "[100, 200)", h],
                    self.stub.WriteRange, pb.WriteRangeRequest(handle=h, offset=150, data=bytes(100)))
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
h = stub.CreateResident(pb.CreateResidentRequest(header=pb.Matrix(rows=256, cols=256, dtype=pb.FP32)),
                        metadata=md, timeout=30).resident.handle
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
        self.assertEqual(len(handle), 32, handle)
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
