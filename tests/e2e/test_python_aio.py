"""End-to-end: the asyncio client (matserve_client.aio.AsyncClient) against the real server on the
CPU backend.

100 multiplies in flight at once from one event loop, each checked against NumPy in float64;
compute= (and its deprecated name precision=) with the server's verify;
resident matrices (upload, multiply by handle with the result kept, download, release);
transposes; the server's information, kernels and health; errors surfacing as MatserveError
subclasses with their codes; a bearer token on a server that requires one.
"""
import asyncio
import os
import tempfile
import unittest

import numpy as np

import matserve_client as mc
from matserve_client.aio import AsyncClient, AsyncResidentMatrix
from server_process import ServerProcess
from test_service import rand, rel_l2

TOKEN = "aio-test-token-0123456789"


def run(coro):
    return asyncio.run(coro)


class AsyncClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.tokens = os.path.join(cls.dir.name, "tokens")
        with open(cls.tokens, "w") as f:
            f.write(f"{TOKEN} aio\n")
        cls.server = ServerProcess(backend="cpu")
        cls.secured = ServerProcess(f"--auth_tokens_file={cls.tokens}", backend="cpu")

    @classmethod
    def tearDownClass(cls):
        codes = (cls.server.stop(), cls.secured.stop())
        cls.dir.cleanup()
        assert codes == (0, 0), codes

    def test_a_hundred_multiplies_in_flight(self):
        shapes = [(7, 5, 3), (33, 17, 65), (1, 1, 1), (64, 48, 32), (10, 1, 9)]
        dtypes = [np.float64, np.float32, np.float16]
        cases = []
        for i in range(100):
            m, n, k = shapes[i % len(shapes)]
            dt = dtypes[i % len(dtypes)]
            cases.append((rand(m, k, dt), rand(k, n, dt)))

        async def main():
            async with AsyncClient(self.server.target, timeout=120) as client:
                return await asyncio.gather(*(client.multiply(a, b) for a, b in cases))
        results = run(main())
        self.assertEqual(len(results), 100)
        for i, ((a, b), r) in enumerate(zip(cases, results)):
            want = a.astype(np.float64) @ b.astype(np.float64)
            tol = {np.float64: 1e-12, np.float32: 1e-5, np.float16: 1e-2}[a.dtype.type]
            self.assertEqual(r.c.shape, want.shape, i)
            self.assertEqual(r.c.dtype, a.dtype, i)
            self.assertLess(rel_l2(r.c.astype(np.float64), want), tol, i)
            self.assertEqual((r.variant, r.device), ("cpu_openblas", "cpu"))
            self.assertGreater(r.timing.total_us, 0)

    def test_compute_keyword_verify_and_the_deprecated_precision(self):
        a, b = rand(24, 40), rand(40, 16)
        want = a.astype(np.float64) @ b

        async def main():
            async with AsyncClient(self.server.target, timeout=60) as client:
                new = await client.multiply(a, b, compute="bf16", verify=True)
                with self.assertWarnsRegex(DeprecationWarning, "use compute=") as warned:
                    old = await client.multiply(a, b, precision="bf16")
                self.assertEqual(warned.filename, __file__)
                return new, old
        new, old = run(main())
        self.assertEqual((new.precision, old.precision), ("bf16", "bf16"))
        np.testing.assert_array_equal(new.c, old.c)
        self.assertLess(new.verification.rel_l2_error, 1e-2)
        self.assertLess(rel_l2(new.c.astype(np.float64), want), 1e-2)

    def test_resident_matrices_and_transpose(self):
        a, b = rand(30, 20, np.float64), rand(20, 10, np.float64)

        async def main():
            async with AsyncClient(self.server.target, timeout=60) as client:
                ha, hb = await asyncio.gather(client.upload(a), client.upload(b))
                self.assertIsInstance(ha, AsyncResidentMatrix)
                self.assertEqual((ha.shape, ha.dtype), ((30, 20), "fp64"))
                r = await client.multiply(ha, hb, keep_result=True, alpha=2.0)
                self.assertIsNone(r.c)
                c = await r.resident.download()
                t = await client.transpose(r.resident, scale=0.5)
                freed = [await h.release() for h in (ha, hb, r.resident)]
                again = await ha.release()
                with self.assertRaises(ValueError):
                    await ha.download()
                return c, t, freed, again
        c, t, freed, again = run(main())
        want = 2.0 * (a @ b)
        self.assertLess(rel_l2(c, want), 1e-12)
        self.assertLess(rel_l2(t.b, 0.5 * want.T), 1e-12)
        for got, size in zip(freed, [30 * 20 * 8, 20 * 10 * 8, 30 * 10 * 8]):
            self.assertGreaterEqual(got, size)  # the server's block, rounded up to its pool's size
        self.assertEqual(again, 0)

    def test_calls_release_the_matrices_named_in_release(self):
        a, b = rand(12, 12, np.float64), rand(12, 12, np.float64)

        async def main():
            async with AsyncClient(self.server.target, timeout=60) as client:
                ha, hb = await asyncio.gather(client.upload(a), client.upload(b))
                r1 = (await client.multiply(ha, hb, keep_result=True)).resident
                r2 = (await client.multiply(r1, hb, keep_result=True, release=[r1])).resident
                t = await client.transpose(r2, release=[r2])
                with mc.Client(self.server.target, timeout=60) as lister:
                    left = {m.handle for m in lister.list_resident()}
                for h in (ha, hb):
                    await h.release()
                return t.b, left, (r1.released, r2.released), {ha.handle, hb.handle}
        got, left, released, operands = run(main())
        self.assertLess(rel_l2(got, ((a @ b) @ b).T), 1e-12)
        self.assertEqual(released, (True, True))
        self.assertEqual(left, operands)

    def test_information_health_and_errors(self):
        async def main():
            async with AsyncClient(self.server.target, timeout=30) as client:
                info = await client.server_info()
                kernels = await client.list_kernels("gemm")
                status = await client.health()
                with self.assertRaises(mc.NotFound):
                    await client.health("no.such.Service")
                with self.assertRaises(mc.InvalidArgument) as ctx:
                    await client.multiply(rand(3, 4), rand(5, 6))
                # A CUDA build knows cublas (another backend's); a CPU-only one knows no such name.
                cuda_build = os.environ.get("MATSERVE_HAVE_CUDA") == "1"
                with self.assertRaises(mc.FailedPrecondition if cuda_build else mc.InvalidArgument):
                    await client.multiply(rand(3, 4), rand(4, 2), variant="cublas")
                return info, kernels, status, ctx.exception
        info, kernels, status, error = run(main())
        self.assertEqual(info.backend, "cpu")
        self.assertIn("cpu_openblas", [k.name for k in kernels])
        self.assertEqual(status, "SERVING")
        self.assertIn("inner dimensions", error.message)

    def test_bearer_token(self):
        async def main():
            async with AsyncClient(self.secured.target, token=TOKEN, timeout=30) as client:
                r = await client.multiply(np.eye(3), np.eye(3))
            async with AsyncClient(self.secured.target, timeout=30) as anonymous:
                with self.assertRaises(mc.Unauthenticated):
                    await anonymous.multiply(np.eye(3), np.eye(3))
            return r
        np.testing.assert_array_equal(run(main()).c, np.eye(3))


if __name__ == "__main__":
    unittest.main()
