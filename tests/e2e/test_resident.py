"""End-to-end: resident matrices on the real server (CPU backend in CI, any backend on a GPU box).

Upload, chained operations on handles, results kept resident, in-place transpose, download
(unary and streamed), release, list, idle expiry, the memory budget, and streams that lie.
"""
import time
import unittest

import grpc
import numpy as np

from matserve.v1 import matrix_service_pb2 as pb
from server_process import ServerProcess, matrix, release_all
from test_service import decode, rand, rel_l2

MIB = 1 << 20


def upload_stream(stub, array, chunk=256 * 1024, header_only=False, cut=0, colocate_with="",
                  late_colocate=""):
    """UploadStream of a 2-D float32 array; `cut` drops that many bytes from the end;
    `late_colocate` puts a colocate_with into the second chunk (which the server must refuse)."""
    data = np.ascontiguousarray(array).tobytes()
    if cut:
        data = data[:-cut]
    header = pb.Matrix(rows=array.shape[0], cols=array.shape[1], dtype=pb.FP32)

    def chunks():
        yield pb.UploadChunk(header=header, colocate_with=colocate_with)
        if not header_only:
            for off in range(0, len(data), chunk):
                yield pb.UploadChunk(data=data[off:off + chunk],
                                     colocate_with=late_colocate if off == 0 else "")
    return stub.UploadStream(chunks(), timeout=60)


def download_stream(stub, handle, chunk_bytes=256 * 1024):
    parts = list(stub.DownloadStream(pb.DownloadRequest(handle=handle, chunk_bytes=chunk_bytes),
                                     timeout=60))
    header = parts[0].header
    data = b"".join(p.data for p in parts)
    return decode(pb.Matrix(rows=header.rows, cols=header.cols, dtype=header.dtype,
                            layout=header.layout, data=data)), len(parts)


class ResidentTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # No host memory for matrices too large for a GPU (test_out_of_core covers it): here a
        # matrix the budget cannot hold is refused, on either backend.
        cls.server = ServerProcess("--max_message_bytes=1048576", "--memory_budget_bytes=18874368",
                                   "--max_host_matrix_bytes=0")
        cls.stub = cls.server.stub

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.output()

    def tearDown(self):
        release_all(self.stub)

    def test_upload_chain_keep_result_download(self):
        a, b = rand(40, 30), rand(30, 20)
        ha = self.stub.Upload(pb.UploadRequest(matrix=matrix(a))).resident
        hb = self.stub.Upload(pb.UploadRequest(matrix=matrix(b))).resident
        self.assertEqual((ha.rows, ha.cols, ha.dtype, ha.bytes), (40, 30, pb.FP32, 40 * 30 * 4))
        replica, _, secret = ha.handle.rpartition("/")  # "<replica id>/<128 random bits>"
        self.assertEqual(replica, self.stub.GetServerInfo(pb.GetServerInfoRequest()).replica_id)
        self.assertRegex(secret, r"^[0-9a-f]{32}$")
        self.assertGreater(ha.idle_expires_in_ms, 0)
        r = self.stub.Multiply(pb.MultiplyRequest(a_handle=ha.handle, b_handle=hb.handle,
                                                  keep_result=True, verify=True))
        self.assertFalse(r.c.data)
        self.assertEqual((r.c.rows, r.c.cols), (40, 20))
        self.assertEqual((r.result.rows, r.result.cols), (40, 20))
        self.assertLess(r.verification.rel_l2_error, 1e-5)
        # Chain: (A*B)^T computed on the resident result, mixed with an inline operand.
        t = self.stub.Transpose(pb.TransposeRequest(a_handle=r.result.handle))
        want = (a.astype(np.float64) @ b).T
        self.assertLess(rel_l2(decode(t.b), want), 1e-5)
        c = rand(20, 5)
        r2 = self.stub.Multiply(pb.MultiplyRequest(a_handle=r.result.handle, b=matrix(c)))
        self.assertLess(rel_l2(decode(r2.c), (a.astype(np.float64) @ b) @ c), 1e-5)
        got = decode(self.stub.Download(pb.DownloadRequest(handle=r.result.handle)).matrix)
        self.assertLess(rel_l2(got, a.astype(np.float64) @ b), 1e-5)
        listed = {m.handle for m in self.stub.ListResident(pb.ListResidentRequest()).matrices}
        self.assertEqual(listed, {ha.handle, hb.handle, r.result.handle})

    def test_in_place_transpose_square_and_rectangular(self):
        for shape in [(32, 32), (7, 19)]:
            a = rand(*shape)
            h = self.stub.Upload(pb.UploadRequest(matrix=matrix(a))).resident.handle
            r = self.stub.Transpose(pb.TransposeRequest(a_handle=h, in_place=True, verify=True))
            self.assertEqual((r.result.handle, r.result.rows, r.result.cols), (h, shape[1], shape[0]))
            self.assertEqual(r.verification.max_abs_error, 0.0)
            got = decode(self.stub.Download(pb.DownloadRequest(handle=h)).matrix)
            np.testing.assert_array_equal(got, a.T.astype(np.float64))

    def test_streams_move_a_matrix_larger_than_one_message(self):
        a = rand(700, 600)  # 1.68 MB > the 1 MiB message limit
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.Upload(pb.UploadRequest(matrix=matrix(a)))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        info = upload_stream(self.stub, a).resident
        self.assertEqual((info.rows, info.cols), (700, 600))
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.Download(pb.DownloadRequest(handle=info.handle))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("use DownloadStream", ctx.exception.details())
        got, parts = download_stream(self.stub, info.handle)
        self.assertGreater(parts, 1)
        np.testing.assert_array_equal(got, a.astype(np.float64))

    def test_lying_streams_are_refused_and_leave_nothing(self):
        a = rand(100, 100)
        cases = [
            (dict(cut=4), "truncated"),
            (dict(header_only=True), "ended after 0 of 40000"),
        ]
        for kw, fragment in cases:
            with self.assertRaises(grpc.RpcError) as ctx:
                upload_stream(self.stub, a, **kw)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(fragment, ctx.exception.details())

        def too_much():
            yield pb.UploadChunk(header=pb.Matrix(rows=2, cols=2, dtype=pb.FP32))
            yield pb.UploadChunk(data=bytes(20))
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.UploadStream(too_much())
        self.assertIn("more than the 16 bytes", ctx.exception.details())

        def no_header():
            yield pb.UploadChunk(data=bytes(16))
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.UploadStream(no_header())
        self.assertIn("header: missing", ctx.exception.details())

        # Chunks carry no offsets: bytes land in arrival order, so chunks cannot be sent out of
        # order or overlap; a second header (a different shape mid-stream) is refused.
        def second_header():
            yield pb.UploadChunk(header=pb.Matrix(rows=2, cols=2, dtype=pb.FP32), data=bytes(8))
            yield pb.UploadChunk(header=pb.Matrix(rows=1, cols=1, dtype=pb.FP32), data=bytes(8))

        def header_with_data():
            yield pb.UploadChunk(header=pb.Matrix(rows=1, cols=1, dtype=pb.FP32, data=bytes(4)))

        def header_over_the_size_limit():  # refused before anything is allocated
            yield pb.UploadChunk(header=pb.Matrix(rows=65536, cols=65536, dtype=pb.FP64))

        def header_over_the_budget():  # 64 MiB announced, 18 MiB budget: refused at the header
            yield pb.UploadChunk(header=pb.Matrix(rows=4096, cols=4096, dtype=pb.FP32))

        def header_out_of_range():
            yield pb.UploadChunk(header=pb.Matrix(rows=1 << 62, cols=1 << 62, dtype=pb.FP32))

        def empty():
            return iter(())
        for stream, code, fragment in [
            (second_header, grpc.StatusCode.INVALID_ARGUMENT, "header: only the first chunk may carry one"),
            (header_with_data, grpc.StatusCode.INVALID_ARGUMENT, "header.data: must be empty"),
            (header_over_the_size_limit, grpc.StatusCode.RESOURCE_EXHAUSTED, "header: 34359738368 bytes exceeds"),
            (header_over_the_budget, grpc.StatusCode.RESOURCE_EXHAUSTED, "budget"),
            (header_out_of_range, grpc.StatusCode.INVALID_ARGUMENT, "header.rows: 4611686018427387904 exceeds"),
            (empty, grpc.StatusCode.INVALID_ARGUMENT, "header: the stream ended before its first chunk"),
        ]:
            with self.subTest(fragment=fragment):
                with self.assertRaises(grpc.RpcError) as ctx:
                    self.stub.UploadStream(stream(), timeout=30)
                self.assertEqual(ctx.exception.code(), code, ctx.exception.details())
                self.assertIn(fragment, ctx.exception.details())
        self.assertEqual(len(self.stub.ListResident(pb.ListResidentRequest()).matrices), 0)

    def test_download_chunk_sizes_out_of_range(self):
        h = self.stub.Upload(pb.UploadRequest(matrix=matrix(rand(64, 64)))).resident.handle
        for chunk in (-1, 1, 4095, 512 * 1024 + 1, 1 << 62, -(1 << 63)):
            with self.subTest(chunk_bytes=chunk):
                with self.assertRaises(grpc.RpcError) as ctx:
                    list(self.stub.DownloadStream(pb.DownloadRequest(handle=h, chunk_bytes=chunk), timeout=30))
                self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn(f"chunk_bytes: {chunk} is outside [4096, 524288]", ctx.exception.details())
        got, parts = download_stream(self.stub, h, chunk_bytes=4096)  # the smallest: 4 chunks
        self.assertEqual(parts, 4)
        # Unknown, empty and other garbage handles: NOT_FOUND naming the field, nothing else.
        for handle in ("", "0" * 32, h.upper(), h + " ", "../" + h):
            with self.subTest(handle=handle):
                for call, req in [(self.stub.Download, pb.DownloadRequest(handle=handle)),
                                  (self.stub.Release, pb.ReleaseRequest(handle=handle))]:
                    with self.assertRaises(grpc.RpcError) as ctx:
                        call(req, timeout=30)
                    self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
                    self.assertIn("handle: no resident matrix", ctx.exception.details())
        self.assertEqual([m.handle for m in self.stub.ListResident(pb.ListResidentRequest()).matrices], [h])

    def test_unknown_released_and_misused_handles(self):
        h = self.stub.Upload(pb.UploadRequest(matrix=matrix(rand(4, 4)))).resident.handle
        freed = self.stub.Release(pb.ReleaseRequest(handle=h)).bytes_freed
        self.assertGreater(freed, 0)
        for call, req, fragment in [
            (self.stub.Download, pb.DownloadRequest(handle=h), "handle"),
            (self.stub.Release, pb.ReleaseRequest(handle=h), "handle"),
            (self.stub.Multiply, pb.MultiplyRequest(a_handle=h, b=matrix(rand(4, 4))), "a_handle"),
            (self.stub.Transpose, pb.TransposeRequest(a_handle="0" * 32), "a_handle"),
        ]:
            with self.assertRaises(grpc.RpcError) as ctx:
                call(req)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
            self.assertIn(fragment, ctx.exception.details())
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.Transpose(pb.TransposeRequest(a=matrix(rand(3, 3)), in_place=True))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_release_handles_go_with_the_call_that_succeeds(self):
        a, b = rand(24, 24), rand(24, 24)
        ha = self.stub.Upload(pb.UploadRequest(matrix=matrix(a))).resident.handle
        hb = self.stub.Upload(pb.UploadRequest(matrix=matrix(b))).resident.handle
        def listed():
            return {m.handle for m in self.stub.ListResident(pb.ListResidentRequest()).matrices}

        def keep(**kw):
            return self.stub.Multiply(pb.MultiplyRequest(keep_result=True, **kw)).result.handle
        r1 = keep(a_handle=ha, b_handle=hb)
        # The next result replaces the one before; then a chain releases its own operand.
        r2 = keep(a_handle=ha, b_handle=hb, release_handles=[r1])
        self.assertEqual(listed(), {ha, hb, r2})
        r3 = keep(a_handle=r2, b_handle=hb, release_handles=[r2])
        self.assertEqual(listed(), {ha, hb, r3})
        got = decode(self.stub.Download(pb.DownloadRequest(handle=r3)).matrix)
        self.assertLess(rel_l2(got, (a.astype(np.float64) @ b) @ b), 1e-5)
        batch = self.stub.MultiplyBatched(pb.MultiplyBatchedRequest(
            batch=2, a_handles=[ha], b_handles=[hb], keep_result=True, release_handles=[r3]))
        kept = [r.handle for r in batch.results]
        self.assertEqual(listed(), {ha, hb, *kept})
        t = self.stub.Transpose(pb.TransposeRequest(a_handle=ha, release_handles=kept))
        self.assertLess(rel_l2(decode(t.b), a.T), 1e-6)
        self.assertEqual(listed(), {ha, hb})
        # Refused calls release nothing: a bad product, an unknown or doubled handle, and the
        # matrix an in-place transpose keeps its result in.
        r4 = keep(a_handle=ha, b_handle=hb)
        for call, req, code, fragment in [
            (self.stub.Multiply, pb.MultiplyRequest(a_handle=ha, b=matrix(rand(5, 3)),
                                                    release_handles=[r4]),
             grpc.StatusCode.INVALID_ARGUMENT, "b"),
            (self.stub.Multiply, pb.MultiplyRequest(a_handle=ha, b_handle=hb,
                                                    release_handles=[r4, "0" * 32]),
             grpc.StatusCode.NOT_FOUND, "release_handles[1]"),
            (self.stub.Transpose, pb.TransposeRequest(a_handle=ha, release_handles=[r4, r4]),
             grpc.StatusCode.INVALID_ARGUMENT, "release_handles[1]"),
            (self.stub.Transpose, pb.TransposeRequest(a_handle=r4, in_place=True,
                                                      release_handles=[r4]),
             grpc.StatusCode.INVALID_ARGUMENT, "release_handles[0]"),
        ]:
            with self.assertRaises(grpc.RpcError) as ctx:
                call(req)
            self.assertEqual(ctx.exception.code(), code, ctx.exception.details())
            self.assertIn(fragment, ctx.exception.details())
            self.assertEqual(listed(), {ha, hb, r4})

    def test_colocated_uploads_share_a_device_and_multiply(self):
        a, b = rand(33, 17), rand(17, 9)
        ha = self.stub.Upload(pb.UploadRequest(matrix=matrix(a))).resident
        hb = self.stub.Upload(pb.UploadRequest(matrix=matrix(b), colocate_with=ha.handle)).resident
        hs = upload_stream(self.stub, b, chunk=512, colocate_with=ha.handle).resident
        self.assertEqual(hb.device, ha.device)
        self.assertEqual(hs.device, ha.device)
        for other in (hb, hs):
            reply = self.stub.Multiply(pb.MultiplyRequest(a_handle=ha.handle, b_handle=other.handle))
            self.assertLess(rel_l2(decode(reply.c), a.astype(np.float64) @ b), 1e-5)
        # Placing next to an unknown or released handle is NOT_FOUND naming the field; a
        # colocate_with after the first chunk is INVALID_ARGUMENT; nothing is left allocated.
        self.stub.Release(pb.ReleaseRequest(handle=hs.handle))
        before = len(self.stub.ListResident(pb.ListResidentRequest()).matrices)
        for attempt in (
                lambda: self.stub.Upload(pb.UploadRequest(matrix=matrix(b), colocate_with="f" * 32)),
                lambda: self.stub.Upload(pb.UploadRequest(matrix=matrix(b), colocate_with=hs.handle)),
                lambda: upload_stream(self.stub, b, colocate_with=hs.handle)):
            with self.assertRaises(grpc.RpcError) as ctx:
                attempt()
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
            self.assertIn("colocate_with", ctx.exception.details())
        with self.assertRaises(grpc.RpcError) as ctx:
            upload_stream(self.stub, b, chunk=256, late_colocate=ha.handle)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("colocate_with: only the first chunk", ctx.exception.details())
        self.assertEqual(len(self.stub.ListResident(pb.ListResidentRequest()).matrices), before)

    def test_budget_refuses_then_recovers_after_release(self):
        a = rand(1024, 1024)  # 4 MiB each, budget 18 MiB: four fit, the fifth does not
        handles = [upload_stream(self.stub, a).resident.handle for _ in range(3)]
        with self.assertRaises(grpc.RpcError) as ctx:
            for _ in range(2):
                handles.append(upload_stream(self.stub, a).resident.handle)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("budget", ctx.exception.details())
        # Others still proceed in the 2 MiB left (on a GPU inline operands take budget too).
        small = self.stub.Multiply(pb.MultiplyRequest(a=matrix(rand(8, 8)), b=matrix(rand(8, 8))))
        self.assertEqual(small.c.rows, 8)
        for h in handles:
            self.stub.Release(pb.ReleaseRequest(handle=h))
        self.assertTrue(upload_stream(self.stub, a).resident.handle)


class QuotaTest(unittest.TestCase):
    """--max_resident_bytes_per_owner counts every way a resident matrix is made: a call that
    would pass it is refused whole, whether it uploads or keeps a result."""
    SIDE = 32  # 32 x 32 fp32: 4096 bytes, one pool size class; the quota holds four

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--max_resident_bytes_per_owner=%d" % (4 * 4096))
        cls.stub = cls.server.stub

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.output()

    def tearDown(self):
        release_all(self.stub)

    def upload(self):
        a = rand(self.SIDE, self.SIDE)
        return self.stub.Upload(pb.UploadRequest(matrix=matrix(a)), timeout=60).resident.handle

    def assert_over_quota(self, call, request):
        with self.assertRaises(grpc.RpcError) as ctx:
            call(request, timeout=60)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, ctx.exception.details())
        self.assertIn("--max_resident_bytes_per_owner", ctx.exception.details())

    def held(self):
        return self.stub.ListResident(pb.ListResidentRequest(), timeout=30).total_bytes

    def test_kept_multiply_results_count(self):
        a, b = self.upload(), self.upload()
        keep = pb.MultiplyRequest(a_handle=a, b_handle=b, keep_result=True)
        for _ in range(2):
            self.assertEqual(self.stub.Multiply(keep, timeout=60).result.bytes, 4096)
        self.assertEqual(self.held(), 4 * 4096)
        self.assert_over_quota(self.stub.Multiply, keep)
        # Inline operands keep a result the same way.
        self.assert_over_quota(self.stub.Multiply, pb.MultiplyRequest(
            a=matrix(rand(self.SIDE, self.SIDE)), b=matrix(rand(self.SIDE, self.SIDE)), keep_result=True))
        self.assertEqual(self.held(), 4 * 4096)

    def test_kept_batch_results_count_every_product(self):
        a = self.upload()
        batch = lambda n: pb.MultiplyBatchedRequest(batch=n, a_handles=[a], b=matrix(rand(self.SIDE, self.SIDE)),
                                                    keep_result=True)
        self.assert_over_quota(self.stub.MultiplyBatched, batch(4))
        self.assertEqual(len(self.stub.MultiplyBatched(batch(3), timeout=60).results), 3)
        self.assert_over_quota(self.stub.MultiplyBatched, batch(1))
        self.assertEqual(self.held(), 4 * 4096)

    def test_kept_transpose_counts_and_in_place_takes_nothing(self):
        handles = [self.upload() for _ in range(3)]
        keep = pb.TransposeRequest(a_handle=handles[0], keep_result=True)
        self.stub.Transpose(keep, timeout=60)
        self.assert_over_quota(self.stub.Transpose, keep)
        r = self.stub.Transpose(pb.TransposeRequest(a_handle=handles[1], in_place=True), timeout=60)
        self.assertEqual(r.result.handle, handles[1])
        self.assertEqual(self.held(), 4 * 4096)

    def test_uploads_count(self):
        for _ in range(4):
            self.upload()
        self.assert_over_quota(self.stub.Upload, pb.UploadRequest(matrix=matrix(rand(self.SIDE, self.SIDE))))
        with self.assertRaises(grpc.RpcError) as ctx:
            upload_stream(self.stub, rand(self.SIDE, self.SIDE))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)


class ExpiryTest(unittest.TestCase):
    def test_idle_matrices_expire(self):
        with ServerProcess("--resident_ttl_seconds=1") as server:
            h = server.stub.Upload(pb.UploadRequest(matrix=matrix(rand(4, 4)))).resident.handle
            info = server.stub.GetServerInfo(pb.GetServerInfoRequest())
            self.assertEqual(info.limits.resident_ttl_ms, 1000)
            time.sleep(1.6)
            with self.assertRaises(grpc.RpcError) as ctx:
                server.stub.Download(pb.DownloadRequest(handle=h))
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
            self.assertEqual(len(server.stub.ListResident(pb.ListResidentRequest()).matrices), 0)


if __name__ == "__main__":
    unittest.main()
