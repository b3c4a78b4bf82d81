"""Unit tests (no server) for matserve_client.shared_memory and the Client's shared-memory paths,
against a fake MatrixService stub that reads and writes the POSIX objects as the server would:
placing and viewing every dtype and order, the allocator, `out` checked before anything is sent,
requests naming region and offset, closing (unregister, unmap, unlink), resource_tracker
staying quiet unless a region really leaked, and the registration nonce written and put back."""
import os
import subprocess
import sys
import textwrap
import unittest
from multiprocessing import shared_memory
from unittest import mock

import grpc
import numpy as np

import matserve_client as mc
from matserve_client import Bfloat16, Client, ShmMatrix
from matserve_client._stubs import pb
from fakes import FakeRpcError

RNG = np.random.default_rng(11)
HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = {pb.FP64: "<f8", pb.FP32: "<f4", pb.FP16: "<f2", pb.BF16: "<u2"}


class FakeStub:
    """The shared-memory part of MatrixService, in-process: regions per name, operands read from
    and results written to the objects under /dev/shm, as the server does."""

    def __init__(self):
        self.regions = {}
        self.calls = []

    def GetServerInfo(self, request, timeout=None):
        return pb.GetServerInfoReply(limits=pb.ServerLimits(max_message_bytes=1 << 30,
                                                            shared_memory=True))

    def RegisterSharedMemory(self, request, timeout=None):
        self.calls.append(("RegisterSharedMemory", request))
        path = "/dev/shm" + request.key
        if request.name in self.regions:
            raise FakeRpcError(grpc.StatusCode.ALREADY_EXISTS, f"name: '{request.name}'")
        if not os.path.exists(path):
            raise FakeRpcError(grpc.StatusCode.NOT_FOUND, f"key: no object '{request.key}'")
        if request.offset + request.byte_size > os.path.getsize(path):
            raise FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "byte_size: exceeds")
        region = pb.SharedMemoryRegion(name=request.name, key=request.key,
                                       offset=request.offset, byte_size=request.byte_size)
        self.regions[request.name] = region
        return pb.RegisterSharedMemoryReply(region=region)

    def UnregisterSharedMemory(self, request, timeout=None):
        self.calls.append(("UnregisterSharedMemory", request))
        if not request.name:
            n = len(self.regions)
            self.regions.clear()
        elif self.regions.pop(request.name, None) is None:
            raise FakeRpcError(grpc.StatusCode.NOT_FOUND, f"name: no region '{request.name}'")
        else:
            n = 1
        return pb.UnregisterSharedMemoryReply(unregistered=n)

    def ListSharedMemory(self, request, timeout=None):
        return pb.ListSharedMemoryReply(regions=sorted(self.regions.values(),
                                                       key=lambda r: r.name))

    def _place(self, ref, nbytes):
        region = self.regions.get(ref.region)
        if region is None:
            raise FakeRpcError(grpc.StatusCode.NOT_FOUND, f"no region '{ref.region}'")
        if ref.offset < 0 or ref.offset + nbytes > region.byte_size:
            raise FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "exceeds region")
        return "/dev/shm" + region.key, region.offset + ref.offset

    def _read(self, m):
        dtype = np.dtype(KINDS[m.dtype])
        order = "F" if m.layout == pb.COL_MAJOR else "C"
        if m.HasField("shm"):
            path, offset = self._place(m.shm, m.rows * m.cols * dtype.itemsize)
            flat = np.fromfile(path, dtype=dtype, count=m.rows * m.cols, offset=offset)
        else:
            flat = np.frombuffer(m.data, dtype=dtype)
        return flat.reshape((m.rows, m.cols), order=order).astype(np.float64)

    def _reply_matrix(self, value, dtype, layout, output_shm):
        order = "F" if layout == pb.COL_MAJOR else "C"
        raw = value.astype(KINDS[dtype]).tobytes(order=order)
        header = pb.Matrix(rows=value.shape[0], cols=value.shape[1], dtype=dtype, layout=layout)
        if output_shm.region:
            path, offset = self._place(output_shm, len(raw))
            with open(path, "r+b") as f:
                f.seek(offset)
                f.write(raw)
        else:
            header.data = raw
        return header

    def Multiply(self, request, timeout=None):
        self.calls.append(("Multiply", request))
        a, b = self._read(request.a), self._read(request.b)
        a = a.T if request.transpose_a else a
        b = b.T if request.transpose_b else b
        value = request.alpha * (a @ b)
        if request.HasField("c") and request.beta:
            value += request.beta * self._read(request.c)
        dtype = request.output_dtype or request.a.dtype
        return pb.MultiplyReply(c=self._reply_matrix(value, dtype, request.output_layout,
                                                     request.output_shm), variant="fake")

    def Transpose(self, request, timeout=None):
        self.calls.append(("Transpose", request))
        value = request.scale * self._read(request.a).T
        return pb.TransposeReply(b=self._reply_matrix(value, request.a.dtype, request.a.layout,
                                                      request.output_shm), variant="fake")

    def sent(self, method):
        return [r for m, r in self.calls if m == method]


def fake_client():
    client = Client("127.0.0.1:1", timeout=5)
    client._stub = FakeStub()
    return client


def exists(region):
    return os.path.exists("/dev/shm" + region.key)


class RegionTest(unittest.TestCase):
    def setUp(self):
        self.client = fake_client()
        self.stub = self.client._stub
        self.region = self.client.create_shared_memory(1 << 16)

    def tearDown(self):
        regions = list(self.client._regions)
        self.client.close()  # closes every region still open, registered or not
        self.assertIn(self.region, regions)
        for r in regions:
            self.assertTrue(r.closed)
            self.assertFalse(exists(r), r)
        self.assertEqual(self.stub.regions, {})

    def test_created_object_is_registered_whole_under_its_own_name(self):
        r = self.region
        self.assertTrue(r.owned and not r.closed and exists(r))
        self.assertEqual(r.key, "/" + r.name)
        self.assertEqual((r.offset, r.byte_size), (0, 1 << 16))
        self.assertEqual([i.name for i in self.client.list_shared_memory()], [r.name])
        info = self.client.list_shared_memory()[0]
        self.assertIsInstance(info, mc.SharedMemoryInfo)
        self.assertEqual((info.key, info.offset, info.byte_size, info.pinned),
                         (r.key, 0, 1 << 16, False))
        named = self.client.create_shared_memory(4096, name="results")
        self.assertEqual(named.name, "results")
        self.assertNotEqual(named.key, "/results")

    def test_put_and_view_every_dtype_and_order_without_copies(self):
        for dtype in (np.float64, np.float32, np.float16):
            for order in ("C", "F"):
                a = np.asarray(RNG.standard_normal((5, 3)).astype(dtype), order=order)
                m = self.region.put(a)
                self.assertEqual((m.shape, m.dtype, m.order, m.nbytes),
                                 ((5, 3), mc.dtypes.dtype_name(dtype), order, a.nbytes))
                view = m.array()
                np.testing.assert_array_equal(view, a)
                self.assertEqual(view.flags.f_contiguous and not view.flags.c_contiguous,
                                 order == "F")
                self.assertFalse(np.shares_memory(view, a))
                self.assertTrue(np.shares_memory(view, self.region.array(m)))
                view[0, 0] = 7  # a view: writes the shared memory
                self.assertEqual(m.array()[0, 0], 7)
        bits = Bfloat16.from_float(RNG.standard_normal((2, 4)))
        m = self.region.put(bits)
        self.assertEqual(m.dtype, "bf16")
        got = m.array()
        self.assertIsInstance(got, Bfloat16)
        np.testing.assert_array_equal(got.bits, bits.bits)
        m = self.region.put(RNG.standard_normal((3, 3)), dtype="bf16")  # rounded first
        self.assertEqual(m.dtype, "bf16")
        strided = RNG.standard_normal((6, 6))[::2, ::3]
        m = self.region.put(strided)
        self.assertEqual(m.order, "C")
        np.testing.assert_array_equal(m.array(), strided)
        with self.assertRaises(TypeError):
            self.region.put(np.ones((2, 2), np.int32))
        with self.assertRaises(ValueError):
            self.region.put(np.ones(3))

    def test_allocator_aligns_reset_rewinds_and_explicit_offsets(self):
        r = self.region
        a = r.put(np.ones((3, 3), np.float32))  # 36 bytes
        b = r.put(np.ones((1, 1), np.float64))
        c = r.empty(2, 2, "fp16", order="F")
        self.assertEqual((a.offset, b.offset, c.offset), (0, 256, 512))
        self.assertEqual(r.used, 520)
        d = r.put(np.ones((1, 1), np.float32), offset=1000)  # exactly there, unaligned
        self.assertEqual(d.offset, 1000)
        self.assertEqual(r.empty(1, 1, "fp32").offset, 1024)  # after everything placed
        r.reset()
        self.assertEqual(r.empty(1, 1, "fp32").offset, 0)
        with self.assertRaisesRegex(ValueError, "exceed its 65536 bytes; reset"):
            r.empty(200, 200, "fp32")
        with self.assertRaisesRegex(ValueError, "exceed its 65536 bytes"):
            r.put(np.ones((2, 2)), offset=(1 << 16) - 31)
        with self.assertRaisesRegex(ValueError, "negative"):
            r.empty(1, 1, "fp32", offset=-4)
        with self.assertRaisesRegex(ValueError, "order"):
            r.empty(1, 1, "fp32", order="K")
        with self.assertRaises(TypeError):
            r.empty(1, 1, "int8")
        other = self.client.create_shared_memory(4096)
        with self.assertRaisesRegex(ValueError, "lies in region"):
            other.array(a)
        copied = other.put(a)  # a ShmMatrix is copied like an array
        np.testing.assert_array_equal(copied.array(), a.array())
        self.assertFalse(np.shares_memory(copied.array(), a.array()))
        with self.assertRaisesRegex(ValueError, "exceed region"):
            ShmMatrix(r, 65530, 2, 2, "fp32", "C").array()

    def test_operands_and_out_name_their_places(self):
        r = self.region
        a64, b64 = RNG.standard_normal((4, 6)), RNG.standard_normal((6, 5))
        c64 = RNG.standard_normal((4, 5))
        a, b, c = r.put(a64), r.put(np.asfortranarray(b64)), r.put(c64)
        out = r.empty(4, 5, np.float64)
        res = self.client.multiply(a, b, c=c, alpha=2.0, beta=-1.0, out=out)
        request = self.stub.sent("Multiply")[-1]
        self.assertEqual((request.a.shm.region, request.a.shm.offset, request.a.data),
                         (r.name, a.offset, b""))
        self.assertEqual((request.b.shm.offset, request.b.layout), (b.offset, pb.COL_MAJOR))
        self.assertEqual(request.c.shm.offset, c.offset)
        self.assertEqual((request.output_shm.region, request.output_shm.offset),
                         (r.name, out.offset))
        self.assertFalse(request.keep_result)
        np.testing.assert_allclose(res.c, 2.0 * a64 @ b64 - c64, rtol=1e-12, atol=1e-12)
        self.assertTrue(np.shares_memory(res.c, out.array()))
        # Mixed: a in shared memory, b an array (sent inline), the result in the reply.
        res = self.client.multiply(a, b64.astype(np.float64))
        request = self.stub.sent("Multiply")[-1]
        self.assertTrue(request.a.HasField("shm") and request.b.data)
        self.assertFalse(request.HasField("output_shm"))
        np.testing.assert_allclose(res.c, a64 @ b64, rtol=1e-12)
        # A column-major out sets the output layout.
        fout = r.empty(4, 5, "fp64", order="F")
        res = self.client.multiply(a, b, out=fout)
        self.assertEqual(self.stub.sent("Multiply")[-1].output_layout, pb.COL_MAJOR)
        self.assertTrue(res.c.flags.f_contiguous)
        np.testing.assert_allclose(res.c, a64 @ b64, rtol=1e-12)
        # Transpose, from shared memory and from an array, into shared memory.
        tout = r.empty(6, 4, "fp64")
        res = self.client.transpose(a, scale=3.0, out=tout)
        np.testing.assert_array_equal(res.b, 3.0 * a64.T)
        self.assertTrue(np.shares_memory(res.b, tout.array()))
        res = self.client.transpose(np.asfortranarray(a64), out=r.empty(6, 4, "fp64", order="F"))
        np.testing.assert_array_equal(res.b, a64.T)

    def test_out_is_checked_before_anything_is_sent(self):
        r = self.region
        a, b = r.put(np.ones((4, 3), np.float32)), r.put(np.ones((3, 2), np.float32))
        cases = [
            (dict(out=r.empty(2, 4, "fp32")), ValueError, r"out: shape \(2, 4\) differs from "
                                                          r"the result's \(4, 2\)"),
            (dict(out=r.empty(4, 2, "fp64")), ValueError, "out: dtype fp64 differs from the "
                                                          "result's fp32"),
            (dict(out=r.empty(4, 2, "fp32", order="F"), out_order="C"), ValueError,
             "out: order F differs from the result's C"),
            (dict(out=r.empty(4, 2, "fp32"), keep_result=True), ValueError,
             "out: not with keep_result"),
            (dict(out=np.empty((4, 2), np.float32)), TypeError, "out: must be a ShmMatrix"),
            (dict(dtype="fp16"), ValueError, "a: the shared-memory matrix is fp32, not fp16"),
            (dict(c=r.empty(4, 2, "fp32", order="F"), out_order="C", beta=1.0), ValueError,
             "c: the shared-memory matrix is in order F"),
        ]
        for kwargs, error, pattern in cases:
            with self.assertRaisesRegex(error, pattern):
                self.client.multiply(a, b, **kwargs)
        with self.assertRaisesRegex(ValueError, r"out: shape \(4, 3\)"):
            self.client.transpose(a, out=r.empty(4, 3, "fp32"))
        with self.assertRaisesRegex(ValueError, "out: order F differs"):
            self.client.transpose(a, out=r.empty(3, 4, "fp32", order="F"))
        with self.assertRaisesRegex(ValueError, "out: not with keep_result"):
            self.client.transpose(a, out=r.empty(3, 4, "fp32"), keep_result=True)
        self.assertEqual(self.stub.sent("Multiply") + self.stub.sent("Transpose"), [])
        # out_dtype names another result dtype; out must follow it.
        res = self.client.multiply(r.put(np.ones((4, 3), np.float16)),
                                   r.put(np.ones((3, 2), np.float16)), out_dtype="fp32",
                                   out=r.empty(4, 2, "fp32"))
        np.testing.assert_array_equal(res.c, np.full((4, 2), 3.0, np.float32))

    def test_server_errors_are_matserv_errors(self):
        ghost = ShmMatrix(self.region, 0, 2, 2, "fp32", "C")
        self.client.unregister_shared_memory(self.region.name)
        with self.assertRaises(mc.NotFound):
            self.client.multiply(ghost, np.ones((2, 2), np.float32))
        with self.assertRaises(mc.NotFound):
            self.client.unregister_shared_memory(self.region.name)
        with self.assertRaises(mc.NotFound):
            self.client.register_shared_memory("x", "/matserve-absent-object", 16)
        with self.assertRaises(mc.AlreadyExists):
            self.client.create_shared_memory(4096, name=self.client.create_shared_memory(64).name)


class LifetimeTest(unittest.TestCase):
    def test_close_unregisters_unmaps_unlinks_once(self):
        client = fake_client()
        with client.create_shared_memory(4096) as r:
            m = r.put(np.arange(6, dtype=np.float32).reshape(2, 3))
            kept = m.array()
        self.assertTrue(r.closed)
        self.assertFalse(exists(r))
        self.assertEqual([q.name for q in client._stub.sent("UnregisterSharedMemory")], [r.name])
        np.testing.assert_array_equal(kept, np.arange(6).reshape(2, 3))  # views outlive close
        r.close()  # again: nothing
        self.assertEqual(len(client._stub.sent("UnregisterSharedMemory")), 1)
        with self.assertRaisesRegex(ValueError, "is closed"):
            r.put(np.ones((1, 1)))
        with self.assertRaisesRegex(ValueError, "is closed"):
            m.array()
        with self.assertRaisesRegex(ValueError, "a: shared-memory region .* is closed"):
            client.multiply(m, np.ones((3, 1), np.float32))
        client.close()

    def test_region_gone_from_the_server_or_unregistered_first(self):
        client = fake_client()
        r = client.create_shared_memory(4096)
        client._stub.regions.clear()  # e.g. the server restarted
        r.close()  # NOT_FOUND ignored
        self.assertFalse(exists(r))
        r1 = client.create_shared_memory(4096, name="r")
        self.assertEqual(client.unregister_shared_memory("r"), 1)
        r2 = client.create_shared_memory(4096, name="r")  # the name now names another object
        r1.close()  # must not unregister r2
        self.assertEqual([i.key for i in client.list_shared_memory()], [r2.key])
        self.assertFalse(exists(r1))
        client.close()  # closes r2
        self.assertFalse(exists(r2))
        self.assertTrue(r2.closed)
        self.assertEqual(client._stub.regions, {})

    def test_registering_the_callers_object_leaves_it_alone(self):
        client = fake_client()
        own = shared_memory.SharedMemory(create=True, size=16384)
        try:
            r = client.register_shared_memory("mine", "/" + own.name, 8192, offset=4096)
            self.assertFalse(r.owned)
            self.assertEqual((r.offset, r.byte_size), (4096, 8192))
            m = r.put(np.full((2, 2), 5.0), offset=16)
            got = np.frombuffer(own.buf, np.float64, count=4, offset=4096 + 16)
            np.testing.assert_array_equal(got, np.full(4, 5.0))
            del got
            r.close()
            self.assertTrue(os.path.exists("/dev/shm/" + own.name))
            with self.assertRaises(mc.InvalidArgument):
                client.register_shared_memory("big", "/" + own.name, 16384, offset=1)
            self.assertIsNone(m.region._mapping)
        finally:
            client.close()
            own.close()
            own.unlink()

    def test_failed_registration_unlinks_the_new_object(self):
        # The objects this client makes, by name (other processes, e.g. tests running beside this
        # one, make and remove their own in /dev/shm meanwhile).
        made = []
        real = shared_memory.SharedMemory

        def recording(*args, **kwargs):
            shm = real(*args, **kwargs)
            made.append(shm.name)
            return shm
        client = fake_client()
        with mock.patch.object(shared_memory, "SharedMemory", recording):
            client.create_shared_memory(64, name="taken")
            with self.assertRaises(mc.AlreadyExists):
                client.create_shared_memory(64, name="taken")
        self.assertEqual(len(made), 2)
        self.assertFalse(os.path.exists("/dev/shm/" + made[1]))  # unlinked at once
        client.close()
        self.assertEqual([n for n in made if os.path.exists("/dev/shm/" + n)], [])
        with self.assertRaises(ValueError):
            fake_client().create_shared_memory(0)


def run_script(body):
    """Runs body in a fresh interpreter (its own resource_tracker); returns (stdout, stderr)."""
    script = textwrap.dedent("""\
        import os, numpy as np
        from multiprocessing import shared_memory
        from test_shared_memory import fake_client
        client = fake_client()
        """) + textwrap.dedent(body)
    run = subprocess.run([sys.executable, "-c", script], cwd=HERE, capture_output=True,
                         text=True, timeout=60)
    if run.returncode != 0:
        raise AssertionError(run.stdout + run.stderr)
    return run.stdout, run.stderr


class ResourceTrackerTest(unittest.TestCase):
    """multiprocessing's resource_tracker: quiet for regions that were closed (also after someone
    else unlinked the object) and for the caller's own objects; the safety net, with its warning,
    only for a region never closed."""

    def assert_quiet(self, stderr):
        self.assertNotIn("resource_tracker", stderr)
        self.assertNotIn("Traceback", stderr)

    def test_closed_region_no_warning(self):
        out, err = run_script("""\
            r = client.create_shared_memory(4096)
            r.put(np.ones((4, 4)))
            r.close()
            client.close()
            print(r.key)
            """)
        self.assert_quiet(err)
        self.assertFalse(os.path.exists("/dev/shm" + out.strip()))

    def test_object_unlinked_by_someone_else_no_warning(self):
        _, err = run_script("""\
            r = client.create_shared_memory(4096)
            os.unlink("/dev/shm" + r.key)
            client.close()
            """)
        self.assert_quiet(err)

    def test_callers_object_neither_unlinked_nor_reported(self):
        out, err = run_script("""\
            own = shared_memory.SharedMemory(create=True, size=4096)
            r = client.register_shared_memory("mine", "/" + own.name, 4096)
            r.close()
            client.close()
            print(os.path.exists("/dev/shm/" + own.name))
            own.close()
            own.unlink()  # the caller's own tracker entry is intact: no KeyError in the tracker
            """)
        self.assert_quiet(err)
        self.assertEqual(out.strip(), "True")

    def test_region_never_closed_is_unlinked_at_exit_with_a_warning(self):
        out, err = run_script("""\
            r = client.create_shared_memory(4096)
            print(r.key)
            """)
        self.assertIn("leaked shared_memory", err)
        self.assertFalse(os.path.exists("/dev/shm" + out.strip()))


class NonceStub(FakeStub):
    """As the server checks possession: a registration passes only with its nonce in the first 32
    bytes of the range (after `refusals` more refusals, whatever the bytes)."""

    NONCE = "0123456789abcdef" * 2

    def __init__(self, refusals=0):
        super().__init__()
        self.seen = []
        self.refusals = refusals

    def RegisterSharedMemory(self, request, timeout=None):
        if os.path.exists("/dev/shm" + request.key):
            with open("/dev/shm" + request.key, "rb") as f:
                f.seek(request.offset)
                self.seen.append(f.read(32))
            if self.seen[-1] != self.NONCE.encode() or self.refusals > 0:
                self.refusals -= self.seen[-1] == self.NONCE.encode()
                raise FakeRpcError(grpc.StatusCode.FAILED_PRECONDITION,
                                   "key: ... do not hold this caller's registration nonce",
                                   trailing=[("matserve-shm-nonce", self.NONCE)])
        return super().RegisterSharedMemory(request, timeout)


class PossessionTest(unittest.TestCase):
    """The client writes the server's nonce into the range to register, then puts the bytes back."""

    def client(self, stub):
        client = Client("127.0.0.1:1", timeout=5)
        client._stub = stub
        return client

    def test_the_nonce_is_written_for_the_retry_and_the_bytes_restored(self):
        stub = NonceStub()
        client = self.client(stub)
        own = shared_memory.SharedMemory(create=True, size=8192)
        try:
            own.buf[100:132] = b"x" * 32
            with client.register_shared_memory("own", "/" + own.name, 4096, offset=100) as r:
                self.assertEqual(r.offset, 100)
                self.assertEqual(stub.seen, [b"x" * 32, NonceStub.NONCE.encode()])
                self.assertEqual(bytes(own.buf[100:132]), b"x" * 32)
            with client.create_shared_memory(4096) as made:
                self.assertEqual(bytes(made._bytes(0, 32)), bytes(32))  # zeros again
        finally:
            own.close()
            own.unlink()

    def test_a_server_that_keeps_refusing_is_answered_after_three_tries(self):
        stub = NonceStub(refusals=5)
        client = self.client(stub)
        own = shared_memory.SharedMemory(create=True, size=4096)
        try:
            own.buf[0:32] = b"y" * 32
            with self.assertRaises(mc.FailedPrecondition) as ctx:
                client.register_shared_memory("own", "/" + own.name, 4096)
            self.assertIn("registration nonce", str(ctx.exception))
            self.assertEqual(len(stub.seen), 3)
            self.assertEqual(bytes(own.buf[0:32]), b"y" * 32)
        finally:
            own.close()
            own.unlink()

    def test_other_errors_are_not_retried(self):
        stub = NonceStub()
        with self.assertRaises(mc.NotFound):
            self.client(stub).register_shared_memory("x", "/matserve-absent-object", 64)
        self.assertEqual(len(stub.calls), 1)


if __name__ == "__main__":
    unittest.main()
