"""End-to-end: shared-memory regions on the real server (CPU backend in CI, any backend on a GPU box).

A client on the server's node creates POSIX shared-memory objects, registers them, and names
region + offset for operands and results instead of sending bytes. Checked here: results against
NumPy for every operand place (region, inline, resident) and both results places; e4m3 operands
and their bf16/fp32 results in a region, bit for bit against the same call inline; list and
unregister; ownership across tokens; every malformed place and registration refused with a
precise status, long client strings cut in it; a result overlapping an operand refused also
through a second registration of the object; a truncated object refused (never a crash); the
registered bytes bounded (a huge sparse object refused before it exhausts the server's address
space); the server's mappings gone after unregistering; possession (a key alone registers nothing: the
caller writes the server's nonce into the object, its own and once) and objects of other users
refused; the switch that turns the feature off.
"""
import _posixshmem
import os
import tempfile
import unittest
from multiprocessing import shared_memory

import grpc
import numpy as np

from matserve.v1 import matrix_service_pb2 as pb
from server_process import ServerProcess, call, matrix
from shm_register import NONCE_KEY, nonce_of, register, write_object
from test_service import decode, rand, rel_l2

ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789ab"
NOSHM = "noshm-token-0123456789"


class Shm:
    """A POSIX shared-memory object made for one test, unlinked at close."""

    def __init__(self, size):
        self.obj = shared_memory.SharedMemory(create=True, size=size)
        self.key = "/" + self.obj.name
        self.size = size

    def put(self, offset, array):
        data = np.ascontiguousarray(array).tobytes()
        self.obj.buf[offset:offset + len(data)] = data

    def get(self, offset, rows, cols, dtype=np.float32):
        n = rows * cols * np.dtype(dtype).itemsize
        return np.frombuffer(bytes(self.obj.buf[offset:offset + n]), dtype=dtype).reshape(rows,
                                                                                         cols)

    def close(self):
        self.obj.close()
        try:
            self.obj.unlink()
        except FileNotFoundError:
            pass


def ref(region, offset=0):
    return pb.SharedMemoryRef(region=region, offset=offset)


def shm_matrix(rows, cols, region, offset=0, dtype=pb.FP32):
    return pb.Matrix(rows=rows, cols=cols, dtype=dtype, shm=ref(region, offset))


class SharedMemoryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--max_shm_regions_per_owner=3")
        cls.stub = cls.server.stub

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.output()

    def setUp(self):
        self.shm = Shm(1 << 20)
        self.register("r", self.shm.key, 1 << 20)

    def tearDown(self):
        self.stub.UnregisterSharedMemory(pb.UnregisterSharedMemoryRequest())
        self.shm.close()
        for h in self.stub.ListResident(pb.ListResidentRequest()).matrices:
            self.stub.Release(pb.ReleaseRequest(handle=h.handle))

    def register(self, name, key, size, offset=0):
        return register(self.stub.RegisterSharedMemory,
                        pb.RegisterSharedMemoryRequest(name=name, key=key, offset=offset,
                                                       byte_size=size))

    def expect(self, code, fragment, method, request):
        with self.assertRaises(grpc.RpcError) as ctx:
            method(request, timeout=30)
        self.assertEqual(ctx.exception.code(), code, ctx.exception.details())
        self.assertIn(fragment, ctx.exception.details())

    def mapped(self, key):
        with open(f"/proc/{self.server.proc.pid}/maps") as f:
            return any(key[1:] in line for line in f)

    def test_operands_and_result_in_shared_memory(self):
        a, b, c = rand(37, 29), rand(29, 13), rand(37, 13)
        self.shm.put(0, a)
        self.shm.put(8192, b)
        self.shm.put(16384, c)
        self.shm.put(24576, np.full((37, 13), np.nan, np.float32))  # poisoned result place
        reply = self.stub.Multiply(pb.MultiplyRequest(
            a=shm_matrix(37, 29, "r"), b=shm_matrix(29, 13, "r", 8192),
            c=shm_matrix(37, 13, "r", 16384), alpha=0.5, beta=-2.0,
            output_shm=ref("r", 24576)), timeout=30)
        self.assertEqual(len(reply.c.data), 0)
        self.assertEqual((reply.c.rows, reply.c.cols, reply.c.dtype), (37, 13, pb.FP32))
        want = 0.5 * a.astype(np.float64) @ b - 2.0 * c
        self.assertLess(rel_l2(self.shm.get(24576, 37, 13), want), 1e-5)

    def test_every_mix_of_places(self):
        a, b = rand(20, 31), rand(31, 11)
        self.shm.put(4096, b)
        handle = self.stub.Upload(pb.UploadRequest(matrix=matrix(a))).resident.handle
        for a_place in ({"a": matrix(a)}, {"a_handle": handle}):
            reply = self.stub.Multiply(pb.MultiplyRequest(b=shm_matrix(31, 11, "r", 4096),
                                                          **a_place), timeout=30)
            self.assertLess(rel_l2(decode(reply.c), a.astype(np.float64) @ b), 1e-5)
        self.shm.put(0, a)
        reply = self.stub.Multiply(pb.MultiplyRequest(a=shm_matrix(20, 31, "r"), b=matrix(b),
                                                      transpose_a=False), timeout=30)
        self.assertLess(rel_l2(decode(reply.c), a.astype(np.float64) @ b), 1e-5)

    def test_transposed_operands_fp64_and_column_major_result(self):
        at, bt = rand(23, 17, np.float64), rand(5, 23, np.float64)  # op(A) 17x23, op(B) 23x5
        self.shm.put(0, at)
        self.shm.put(8192, bt)
        self.stub.Multiply(pb.MultiplyRequest(
            a=shm_matrix(23, 17, "r", 0, pb.FP64), b=shm_matrix(5, 23, "r", 8192, pb.FP64),
            transpose_a=True, transpose_b=True, output_layout=pb.COL_MAJOR,
            output_shm=ref("r", 16384)), timeout=30)
        got = self.shm.get(16384, 5, 17, np.float64).T  # column-major 17x5
        np.testing.assert_allclose(got, at.T @ bt.T, rtol=1e-12, atol=1e-12)

    def test_fp8_e4m3_operands_in_shared_memory(self):
        # e4m3 data read from a region (B stored n x k, and k x n) and the bf16 or fp32 result
        # written into one: bit for bit what the same call with the bytes in the messages gives.
        rng = np.random.default_rng(11)
        codes = rng.integers(0, 0x7E, size=(2, 41 * 37), dtype=np.uint8)  # finite codes only
        codes |= rng.integers(0, 2, size=codes.shape, dtype=np.uint8) << 7  # some negative
        a_bits, b_bits = codes[0], codes[1, :37 * 19]
        self.shm.put(0, a_bits)
        self.shm.put(4096, b_bits)
        for transpose_b, b_shape in ((True, (19, 37)), (False, (37, 19))):
            for out, out_np in ((pb.BF16, np.uint16), (pb.FP32, np.float32)):
                inline = self.stub.Multiply(pb.MultiplyRequest(
                    a=pb.Matrix(rows=41, cols=37, dtype=pb.FP8_E4M3, data=a_bits.tobytes()),
                    b=pb.Matrix(rows=b_shape[0], cols=b_shape[1], dtype=pb.FP8_E4M3,
                                data=b_bits.tobytes()),
                    transpose_b=transpose_b, compute=pb.COMPUTE_FP8, output_dtype=out,
                    a_scale=0.5), timeout=30)
                self.shm.put(8192, np.full(41 * 19, 0xFF, np.uint8))  # poisoned result place
                placed = self.stub.Multiply(pb.MultiplyRequest(
                    a=shm_matrix(41, 37, "r", 0, pb.FP8_E4M3),
                    b=shm_matrix(*b_shape, "r", 4096, pb.FP8_E4M3), transpose_b=transpose_b,
                    compute=pb.COMPUTE_FP8, output_dtype=out, a_scale=0.5,
                    output_shm=ref("r", 8192)), timeout=30)
                self.assertEqual((placed.c.rows, placed.c.cols, placed.c.dtype), (41, 19, out))
                self.assertEqual(len(placed.c.data), 0)
                got = self.shm.get(8192, 41, 19, out_np)
                want = np.frombuffer(inline.c.data, dtype=out_np).reshape(41, 19)
                np.testing.assert_array_equal(got, want, f"transpose_b={transpose_b} out={out}")

    def test_transpose_into_shared_memory(self):
        a = rand(33, 65)
        self.shm.put(0, a)
        reply = self.stub.Transpose(pb.TransposeRequest(a=shm_matrix(33, 65, "r"), scale=2.0,
                                                        output_shm=ref("r", 16384)), timeout=30)
        self.assertEqual((reply.b.rows, reply.b.cols, len(reply.b.data)), (65, 33, 0))
        np.testing.assert_array_equal(self.shm.get(16384, 65, 33), 2 * a.T)

    def test_upload_from_shared_memory(self):
        a = rand(33, 17)
        self.shm.put(8192, a)
        info = self.stub.Upload(pb.UploadRequest(matrix=shm_matrix(33, 17, "r", 8192)),
                                timeout=30).resident
        self.assertEqual((info.rows, info.cols, info.bytes), (33, 17, 33 * 17 * 4))
        got = decode(self.stub.Download(pb.DownloadRequest(handle=info.handle), timeout=30).matrix)
        np.testing.assert_array_equal(got, a)

    def test_registered_range_at_an_offset(self):
        # The range starts 5000 bytes in (not a page multiple); offsets count from its start.
        a, b = rand(8, 8), rand(8, 8)
        self.shm.put(5000, a)
        self.shm.put(5000 + 256, b)
        info = self.register("sub", self.shm.key, 4096, offset=5000).region
        self.assertEqual((info.name, info.offset, info.byte_size), ("sub", 5000, 4096))
        self.stub.Multiply(pb.MultiplyRequest(a=shm_matrix(8, 8, "sub"),
                                              b=shm_matrix(8, 8, "sub", 256),
                                              output_shm=ref("sub", 512)), timeout=30)
        self.assertLess(rel_l2(self.shm.get(5512, 8, 8), a.astype(np.float64) @ b), 1e-5)

    def test_list_unregister_and_the_mapping_goes(self):
        other = Shm(4096)
        try:
            self.register("other", other.key, 4096)
            names = [r.name for r in self.stub.ListSharedMemory(pb.ListSharedMemoryRequest()).regions]
            self.assertEqual(names, ["other", "r"])
            self.assertTrue(self.mapped(other.key))
            reply = self.stub.UnregisterSharedMemory(pb.UnregisterSharedMemoryRequest(name="other"))
            self.assertEqual(reply.unregistered, 1)
            self.assertFalse(self.mapped(other.key))
            self.expect(grpc.StatusCode.NOT_FOUND, "name: no region 'other'",
                        self.stub.UnregisterSharedMemory,
                        pb.UnregisterSharedMemoryRequest(name="other"))
            self.expect(grpc.StatusCode.NOT_FOUND, "a.shm.region: no shared-memory region 'other'",
                        self.stub.Multiply,
                        pb.MultiplyRequest(a=shm_matrix(2, 2, "other"), b=matrix(rand(2, 2))))
        finally:
            other.close()

    def test_bad_places(self):
        ok_b = matrix(rand(4, 4))
        cases = [
            (shm_matrix(4, 4, "r", -8), "a.shm.offset: must be >= 0"),
            (shm_matrix(4, 4, "r", (1 << 20) - 63), "a.shm: offset 1048513 + 64 bytes exceeds region 'r' of 1048576 bytes"),
            (shm_matrix(4, 4, "r", 1 << 40), "exceeds region 'r'"),
            (shm_matrix(4, 4, ""), "a.shm.region: missing"),
            (pb.Matrix(rows=4, cols=4, dtype=pb.FP32, data=b"\0" * 64, shm=ref("r")),
             "a.data and a.shm: give one of them, not both"),
        ]
        for a, fragment in cases:
            self.expect(grpc.StatusCode.INVALID_ARGUMENT, fragment, self.stub.Multiply,
                        pb.MultiplyRequest(a=a, b=ok_b))
        self.expect(grpc.StatusCode.NOT_FOUND, "a.shm.region: no shared-memory region 'nope'",
                    self.stub.Multiply, pb.MultiplyRequest(a=shm_matrix(4, 4, "nope"), b=ok_b))
        self.expect(grpc.StatusCode.INVALID_ARGUMENT, "output_shm: overlaps the bytes of a.shm",
                    self.stub.Multiply,
                    pb.MultiplyRequest(a=shm_matrix(4, 4, "r", 0), b=ok_b,
                                       output_shm=ref("r", 32)))
        self.expect(grpc.StatusCode.INVALID_ARGUMENT, "output_shm: not with keep_result",
                    self.stub.Multiply,
                    pb.MultiplyRequest(a=ok_b, b=ok_b, keep_result=True, output_shm=ref("r")))
        self.expect(grpc.StatusCode.INVALID_ARGUMENT, "output_shm: offset 1048572 + 64 bytes",
                    self.stub.Multiply,
                    pb.MultiplyRequest(a=ok_b, b=ok_b, output_shm=ref("r", (1 << 20) - 4)))
        self.expect(grpc.StatusCode.INVALID_ARGUMENT, "output_shm: not with keep_result or in_place",
                    self.stub.Transpose,
                    pb.TransposeRequest(a=ok_b, keep_result=True, output_shm=ref("r")))
        self.expect(grpc.StatusCode.INVALID_ARGUMENT,
                    "matrix.shm: offset 1048572 + 64 bytes exceeds region 'r'",
                    self.stub.Upload, pb.UploadRequest(matrix=shm_matrix(4, 4, "r", (1 << 20) - 4)))
        self.expect(grpc.StatusCode.INVALID_ARGUMENT, "header.shm: shared memory is for",
                    self.stub.UploadStream,
                    iter([pb.UploadChunk(header=shm_matrix(4, 4, "r"))]))
        # The server is unharmed and the region still works.
        self.shm.put(0, rand(4, 4))
        self.stub.Multiply(pb.MultiplyRequest(a=shm_matrix(4, 4, "r"), b=ok_b), timeout=30)

    def test_bad_registrations(self):
        missing = "/matserve-test-absent-" + str(os.getpid())
        cases = [
            (grpc.StatusCode.NOT_FOUND, f"key: no shared-memory object '{missing}'",
             ("x", missing, 16, 0)),
            (grpc.StatusCode.INVALID_ARGUMENT, "key: must be a POSIX shared-memory name",
             ("x", "no-slash", 16, 0)),
            (grpc.StatusCode.INVALID_ARGUMENT, "key: must be a POSIX shared-memory name",
             ("x", "/a/b", 16, 0)),
            (grpc.StatusCode.INVALID_ARGUMENT, "name: must be 1-128 characters",
             ("", self.shm.key, 16, 0)),
            (grpc.StatusCode.INVALID_ARGUMENT, "has a character outside [A-Za-z0-9_.-]",
             ("a b", self.shm.key, 16, 0)),
            (grpc.StatusCode.INVALID_ARGUMENT, "byte_size: must be >= 1",
             ("x", self.shm.key, 0, 0)),
            (grpc.StatusCode.INVALID_ARGUMENT, "offset: must be >= 0",
             ("x", self.shm.key, 16, -1)),
            (grpc.StatusCode.INVALID_ARGUMENT,
             f"byte_size: offset 1 + byte_size 1048576 exceeds the 1048576 bytes of '{self.shm.key}'",
             ("x", self.shm.key, 1 << 20, 1)),
            (grpc.StatusCode.ALREADY_EXISTS, "name: a region 'r' is registered already",
             ("r", self.shm.key, 16, 0)),
        ]
        for code, fragment, (name, key, size, offset) in cases:
            with self.assertRaises(grpc.RpcError) as ctx:
                self.register(name, key, size, offset)
            self.assertEqual(ctx.exception.code(), code, (name, key, ctx.exception.details()))
            self.assertIn(fragment, ctx.exception.details())
        # The per-caller limit (3 here): r, then two more, then refused.
        self.register("two", self.shm.key, 32)
        self.register("three", self.shm.key, 32)
        with self.assertRaises(grpc.RpcError) as ctx:
            self.register("four", self.shm.key, 32)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("the limit per caller is 3 (--max_shm_regions_per_owner)",
                      ctx.exception.details())

    def test_cuda_memory_needs_the_cuda_backend(self):
        if os.environ.get("MATSERVE_BACKEND", "cpu") != "cpu":
            self.skipTest("the CPU backend's refusal")
        self.expect(grpc.StatusCode.FAILED_PRECONDITION, "ipc_handle: CUDA memory needs a server",
                    self.stub.RegisterCudaMemory,
                    pb.RegisterCudaMemoryRequest(name="g", ipc_handle=bytes(64), byte_size=16))

    def test_truncated_object_is_refused_not_a_crash(self):
        a = rand(64, 64)
        self.shm.put(0, a)
        os.ftruncate(self.shm.obj._fd, 4096)  # shrinks under the server's mapping
        self.expect(grpc.StatusCode.FAILED_PRECONDITION,
                    "a.shm.region: shared-memory region 'r': the object", self.stub.Multiply,
                    pb.MultiplyRequest(a=shm_matrix(64, 64, "r"), b=matrix(a)))
        # Still serving; registering the object again (at its new size) works.
        self.stub.UnregisterSharedMemory(pb.UnregisterSharedMemoryRequest(name="r"))
        self.register("r", self.shm.key, 4096)
        self.stub.Multiply(pb.MultiplyRequest(a=matrix(rand(3, 3)), b=matrix(rand(3, 3))),
                           timeout=30)


    def test_long_client_strings_are_cut_in_the_status(self):
        long = "x" * 20000
        cases = [
            (grpc.StatusCode.INVALID_ARGUMENT, self.stub.RegisterSharedMemory,
             pb.RegisterSharedMemoryRequest(name="k", key="/" + long, byte_size=16)),
            (grpc.StatusCode.INVALID_ARGUMENT, self.stub.RegisterSharedMemory,
             pb.RegisterSharedMemoryRequest(name=long, key=self.shm.key, byte_size=16)),
            (grpc.StatusCode.NOT_FOUND, self.stub.UnregisterSharedMemory,
             pb.UnregisterSharedMemoryRequest(name=long)),
            (grpc.StatusCode.NOT_FOUND, self.stub.Multiply,
             pb.MultiplyRequest(a=shm_matrix(2, 2, long), b=matrix(rand(2, 2)))),
            (grpc.StatusCode.NOT_FOUND, self.stub.Transpose,
             pb.TransposeRequest(a=matrix(rand(2, 2)), output_shm=ref(long))),
        ]
        for code, method, request in cases:
            with self.assertRaises(grpc.RpcError) as ctx:
                method(request, timeout=30)
            self.assertEqual(ctx.exception.code(), code, ctx.exception.details()[:300])
            self.assertLess(len(ctx.exception.details()), 400)
            if "must be 1-128 characters" not in ctx.exception.details():  # echoed, cut
                self.assertRegex(ctx.exception.details(), r"x\.\.\.' \(2000[01] bytes\)")

    def test_result_overlapping_an_operand_through_another_registration(self):
        a = rand(16, 16)
        self.shm.put(0, a)
        self.register("again", self.shm.key, 1 << 20)  # the same object under a second name
        self.expect(grpc.StatusCode.INVALID_ARGUMENT, "output_shm: overlaps the bytes of a.shm",
                    self.stub.Multiply,
                    pb.MultiplyRequest(a=shm_matrix(16, 16, "r"), b=matrix(a),
                                       output_shm=ref("again", 512)))
        # Apart in the object: accepted, whichever names are used.
        self.stub.Multiply(pb.MultiplyRequest(a=shm_matrix(16, 16, "r"), b=matrix(a),
                                              output_shm=ref("again", 4096)), timeout=30)
        np.testing.assert_allclose(self.shm.get(4096, 16, 16), a @ a, rtol=1e-5)
        # A registration at an offset: its offset 0 is byte 8192 of the object.
        self.stub.UnregisterSharedMemory(pb.UnregisterSharedMemoryRequest(name="again"))
        self.register("again", self.shm.key, 8192, offset=8192)
        self.shm.put(8192, a)
        self.expect(grpc.StatusCode.INVALID_ARGUMENT, "output_shm: overlaps the bytes of a.shm",
                    self.stub.Multiply,
                    pb.MultiplyRequest(a=shm_matrix(16, 16, "r", offset=8192 + 256), b=matrix(a),
                                       output_shm=ref("again", 0)))


class SharedMemoryBytesTest(unittest.TestCase):
    """A sparse object of 2^47 bytes (the whole user address space of x86-64) registered 64 times
    (the region count allowed) at 2 TiB each: the registered bytes are bounded, so the server's
    address space is never used up and it keeps serving requests that need memory."""

    def test_registered_bytes_are_bounded(self):
        key = f"/matserve-e2e-huge-{os.getpid()}"
        fd = _posixshmem.shm_open(key, os.O_RDWR | os.O_CREAT | os.O_EXCL, mode=0o600)
        try:
            os.ftruncate(fd, 1 << 47)
            with ServerProcess() as server:
                stub = server.stub
                limits = stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=30).limits
                self.assertEqual(limits.max_shared_memory_bytes_per_owner, 64 << 30)
                self.assertEqual(limits.max_shared_memory_bytes, 256 << 30)
                self.assertEqual(limits.max_shm_regions_per_owner, 64)
                registered = 0
                for i in range(64):
                    try:
                        stub.RegisterSharedMemory(pb.RegisterSharedMemoryRequest(
                            name=f"huge{i}", key=key, byte_size=1 << 41), timeout=60)
                        registered += 1
                    except grpc.RpcError as e:
                        self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, e.details())
                        self.assertIn("limit of %d bytes (--max_shared_memory_bytes_per_owner"
                                      % (64 << 30), e.details())
                self.assertEqual(registered, 0)
                # Up to the limit, and not a byte more.
                for i in range(2):
                    register(stub.RegisterSharedMemory, pb.RegisterSharedMemoryRequest(
                        name=f"part{i}", key=key, byte_size=32 << 30))
                with self.assertRaises(grpc.RpcError) as ctx:
                    stub.RegisterSharedMemory(pb.RegisterSharedMemoryRequest(
                        name="more", key=key, byte_size=1), timeout=60)
                self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
                # A 64 MiB inline request still gets its memory.
                a = rand(4096, 4096)
                reply = stub.Transpose(pb.TransposeRequest(a=matrix(a)), timeout=120)
                np.testing.assert_array_equal(decode(reply.b), a.T)
                self.assertEqual(stub.UnregisterSharedMemory(
                    pb.UnregisterSharedMemoryRequest(), timeout=60).unregistered, 2)
                self.assertEqual(server.stop(), 0)
        finally:
            os.close(fd)
            _posixshmem.shm_unlink(key)


class SharedMemoryOwnershipTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        path = os.path.join(cls.dir.name, "tokens")
        with open(path, "w") as f:
            f.write(f"{ALICE} alice\n{BOB} bob\n{NOSHM} noshm info,compute,resident\n")
        cls.server = ServerProcess(f"--auth_tokens_file={path}")
        cls.stub = cls.server.stub

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.output()
        cls.dir.cleanup()

    def test_regions_are_per_token(self):
        shm = Shm(4096)
        try:
            a = rand(4, 4)
            shm.put(0, a)
            request = pb.RegisterSharedMemoryRequest(name="mine", key=shm.key, byte_size=4096)
            register(self.stub.RegisterSharedMemory, request, ALICE)
            use = pb.MultiplyRequest(a=shm_matrix(4, 4, "mine"), b=matrix(a))
            call(self.stub.Multiply, use, ALICE)
            with self.assertRaises(grpc.RpcError) as ctx:
                call(self.stub.Multiply, use, BOB)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
            listed = call(self.stub.ListSharedMemory, pb.ListSharedMemoryRequest(), BOB)
            self.assertEqual(len(listed.regions), 0)
            with self.assertRaises(grpc.RpcError) as ctx:
                call(self.stub.UnregisterSharedMemory,
                     pb.UnregisterSharedMemoryRequest(name="mine"), BOB)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
            # Bob may use the same name for his own registration of the same object.
            register(self.stub.RegisterSharedMemory, request, BOB)
            self.assertEqual(call(self.stub.UnregisterSharedMemory,
                                  pb.UnregisterSharedMemoryRequest(), BOB).unregistered, 1)
            self.assertEqual(
                [r.name for r in call(self.stub.ListSharedMemory, pb.ListSharedMemoryRequest(),
                                      ALICE).regions], ["mine"])
            with self.assertRaises(grpc.RpcError) as ctx:
                call(self.stub.RegisterSharedMemory, request, NOSHM)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
            self.assertIn("may not call RegisterSharedMemory: it needs permission 'shm'",
                          ctx.exception.details())
            with self.assertRaises(grpc.RpcError) as ctx:
                call(self.stub.ListSharedMemory, pb.ListSharedMemoryRequest(), None)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        finally:
            call(self.stub.UnregisterSharedMemory, pb.UnregisterSharedMemoryRequest(), ALICE)
            shm.close()


class SharedMemoryPossessionTest(unittest.TestCase):
    """A key is not enough to register an object: the caller proves possession by writing the
    server's nonce into the first bytes of the range (so possession is exactly write access to the
    object), the nonce is the caller's own and used once, and objects of other users are refused
    unless the server is told to accept them."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        path = os.path.join(cls.dir.name, "tokens")
        with open(path, "w") as f:
            f.write(f"{ALICE} alice\n{BOB} bob\n")
        cls.server = ServerProcess(f"--auth_tokens_file={path}")
        cls.stub = cls.server.stub

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.output()
        cls.dir.cleanup()

    def setUp(self):
        self.shm = Shm(8192)  # alice's object; this test's uid, as the server's
        self.secret = rand(8, 8)
        self.shm.put(0, self.secret)

    def tearDown(self):
        for token in (ALICE, BOB):
            call(self.stub.UnregisterSharedMemory, pb.UnregisterSharedMemoryRequest(), token)
        self.shm.close()

    def refused(self, request, token):
        """A registration without the nonce in place: FAILED_PRECONDITION, returns the nonce."""
        with self.assertRaises(grpc.RpcError) as ctx:
            call(self.stub.RegisterSharedMemory, request, token)
        e = ctx.exception
        self.assertEqual(e.code(), grpc.StatusCode.FAILED_PRECONDITION, e.details())
        self.assertIn("do not hold this caller's registration nonce", e.details())
        self.assertIn(NONCE_KEY, e.details())
        nonce = nonce_of(e)
        self.assertRegex(nonce or "", r"^[0-9a-f]{32}$")
        return nonce

    def test_a_key_alone_registers_nothing(self):
        steal = pb.RegisterSharedMemoryRequest(name="stolen", key=self.shm.key, byte_size=8192)
        first = self.refused(steal, BOB)
        self.assertEqual(self.refused(steal, BOB), first)  # asked again: the same nonce
        self.assertEqual(len(call(self.stub.ListSharedMemory, pb.ListSharedMemoryRequest(),
                                  BOB).regions), 0)
        with self.assertRaises(grpc.RpcError) as ctx:  # so bob can neither read nor write it
            call(self.stub.Multiply, pb.MultiplyRequest(a=shm_matrix(8, 8, "stolen"),
                                                        b=matrix(self.secret)), BOB)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
        # Possession is write access: a caller that can write the object (here, as the same
        # user) proves it and registers; the bytes it covered are back afterwards.
        register(self.stub.RegisterSharedMemory, steal, BOB)
        np.testing.assert_array_equal(self.shm.get(0, 8, 8), self.secret)
        reply = call(self.stub.Multiply, pb.MultiplyRequest(a=shm_matrix(8, 8, "stolen"),
                                                            b=matrix(self.secret)), BOB)
        self.assertLess(rel_l2(decode(reply.c), self.secret.astype(np.float64) @ self.secret),
                        1e-5)

    def test_the_nonce_is_the_callers_own_and_used_once(self):
        request = pb.RegisterSharedMemoryRequest(name="r", key=self.shm.key, offset=4096,
                                                 byte_size=4096)
        alices = self.refused(request, ALICE)
        saved = write_object(self.shm.key, 4096, alices.encode())
        try:
            # Alice's nonce in the object does not admit bob: he is given his own.
            self.assertNotEqual(self.refused(request, BOB), alices)
            info = call(self.stub.RegisterSharedMemory, request, ALICE).region
            self.assertEqual((info.name, info.offset, info.byte_size), ("r", 4096, 4096))
            # Used once: the same bytes do not register a second region.
            second = pb.RegisterSharedMemoryRequest(name="again", key=self.shm.key, offset=4096,
                                                    byte_size=4096)
            self.assertNotEqual(self.refused(second, ALICE), alices)
        finally:
            write_object(self.shm.key, 4096, saved)
        self.assertEqual([r.name for r in call(self.stub.ListSharedMemory,
                                               pb.ListSharedMemoryRequest(), ALICE).regions],
                         ["r"])

    def test_a_range_smaller_than_the_nonce_is_refused(self):
        with self.assertRaises(grpc.RpcError) as ctx:
            call(self.stub.RegisterSharedMemory,
                 pb.RegisterSharedMemoryRequest(name="tiny", key=self.shm.key, byte_size=31),
                 ALICE)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("byte_size: a shared-memory region holds at least 32 bytes",
                      ctx.exception.details())
        self.assertIn("got 31", ctx.exception.details())

    def test_objects_of_other_users_are_refused(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to give an object to another user (uid 65534)")
        os.fchown(self.shm.obj._fd, 65534, 65534)
        request = pb.RegisterSharedMemoryRequest(name="theirs", key=self.shm.key, byte_size=8192)
        with self.assertRaises(grpc.RpcError) as ctx:
            register(self.stub.RegisterSharedMemory, request, ALICE)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
        self.assertIn("belongs to uid 65534, the server runs as uid 0", ctx.exception.details())
        self.assertIn("--shared_memory_allow_other_uids", ctx.exception.details())
        with ServerProcess("--shared_memory_allow_other_uids") as server:
            info = register(server.stub.RegisterSharedMemory, request).region
            self.assertEqual(info.name, "theirs")
            self.assertEqual(server.stop(), 0)


class SharedMemoryOffTest(unittest.TestCase):
    def test_switched_off(self):
        server = ServerProcess("--shared_memory=false")
        shm = Shm(4096)
        try:
            self.assertFalse(server.stub.GetServerInfo(pb.GetServerInfoRequest()).limits.shared_memory)
            with self.assertRaises(grpc.RpcError) as ctx:
                server.stub.RegisterSharedMemory(
                    pb.RegisterSharedMemoryRequest(name="x", key=shm.key, byte_size=16))
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
            self.assertIn("--shared_memory=false", ctx.exception.details())
            with self.assertRaises(grpc.RpcError) as ctx:
                server.stub.Multiply(pb.MultiplyRequest(a=shm_matrix(2, 2, "x"),
                                                        b=matrix(rand(2, 2))))
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        finally:
            shm.close()
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
