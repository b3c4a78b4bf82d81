"""End-to-end: matserve-cli against the real matserve on loopback.

Checks the CLI's results against NumPy through .npy files, its --verify (the server's check) and
--check (its own; --server-verify: the deprecated name of --verify), its JSON, the resident
chain (upload -> multiply --keep-result -> download -> release), a batched multiply (--batch N:
one MultiplyBatched call), and its exit codes and error lines for bad input.
"""
import json
import os
import subprocess
import tempfile
import unittest

import numpy as np

from server_process import ServerProcess
from shm_objects import left_behind, matserve_objects
from test_service import rand

CLI = os.environ.get("MATSERVE_CLI", "matserve-cli")


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess()
        cls.dir = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0
        cls.dir.cleanup()

    def cli(self, *args, expect=0):
        p = subprocess.run([CLI, "--target", self.server.target, "--json", *args],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, expect, f"{args}: {p.stdout}\n{p.stderr}")
        return json.loads(p.stdout) if expect == 0 and p.stdout.strip() else p

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def test_health(self):
        self.assertEqual(self.cli("health"), {"command": "health", "service": "",
                                              "status": "SERVING"})
        self.assertEqual(self.cli("health", "--service", "matserve.v1.MatrixService")["status"],
                         "SERVING")
        unknown = self.cli("health", "--service", "no.such.Service", expect=2)
        self.assertIn("NOT_FOUND", unknown.stderr)

    def test_info_and_kernels(self):
        info = self.cli("info")
        self.assertEqual(info["backend"], "cpu")
        text = subprocess.run([CLI, "--target", self.server.target, "kernels"], capture_output=True,
                              text=True, timeout=30)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("cpu_openblas", text.stdout)

    def test_random_multiply_verifies(self):
        r = self.cli("multiply", "--random", "257x129x65", "--seed", "3", "--verify",
                     "--check", "--tolerance", "1e-5")
        self.assertEqual((r["m"], r["n"], r["k"]), (257, 129, 65))
        self.assertLess(r["server_verification"]["rel_l2_error"], 1e-5)
        self.assertLess(r["client_check"]["rel_l2_error"], 1e-5)
        self.assertGreater(r["timing_us"]["kernel"], 0)
        self.assertEqual((r["batch"], r["merged_requests"]), (1, 1))  # no dynamic batching here
        self.assertEqual(r["timing_us"]["batch_wait"], 0)

    def test_large_operands_sent_by_reference_check_here(self):
        """Operands and C of over 1 MiB each go out from the request's memory (not through
        protobuf's serializer); the client's own float64 check on the operands it holds proves
        the server received them intact; the same for a transpose."""
        r = self.cli("multiply", "--random", "700x600x500", "--seed", "5", "--beta", "0.5",
                     "--transpose-b", "--check", "--tolerance", "1e-5")
        self.assertEqual((r["m"], r["n"], r["k"]), (700, 600, 500))
        self.assertLess(r["client_check"]["rel_l2_error"], 1e-5)
        t = self.cli("transpose", "--random", "1031x517", "--seed", "6", "--check")
        self.assertEqual(t["client_check"]["max_abs_error"], 0)

    def test_verify_asks_the_server_check_computes_here(self):
        """--verify is the request's `verify` (the server's float64 reference), --check the
        client's own; --server-verify still means --verify, with a warning on stderr."""
        for command, shape in (("multiply", "40x30x20"), ("transpose", "40x30")):
            server = self.cli(command, "--random", shape, "--verify")
            self.assertIn("server_verification", server, command)
            self.assertNotIn("client_check", server, command)
            client = self.cli(command, "--random", shape, "--check")
            self.assertIn("client_check", client, command)
            self.assertNotIn("server_verification", client, command)
            old = subprocess.run([CLI, "--target", self.server.target, "--json", command,
                                  "--random", shape, "--server-verify"],
                                 capture_output=True, text=True, timeout=120)
            self.assertEqual(old.returncode, 0, old.stderr)
            self.assertIn("server_verification", json.loads(old.stdout), command)
            self.assertIn("warning: --server-verify is deprecated", old.stderr, command)

    def test_batched_multiply(self):
        r = self.cli("multiply", "--random", "33x17x9", "--batch", "5", "--beta", "0.5",
                     "--verify", "--tolerance", "1e-5")
        self.assertEqual((r["m"], r["n"], r["k"], r["batch"]), (33, 17, 9, 5))
        self.assertLess(r["server_verification"]["rel_l2_error"], 1e-5)
        self.assertEqual(r["merged_requests"], 1)
        t = r["timing_us"]
        self.assertTrue(0 < t["kernel"] <= t["total"] <= t["client_rpc"], t)
        # GFLOP/s of all five products: 5 * 2mnk / kernel time.
        self.assertAlmostEqual(r["gflops"], 5 * 2 * 33 * 17 * 9 / (t["kernel"] * 1e3),
                               delta=1e-6 * r["gflops"])
        repeated = self.cli("multiply", "--random", "16x16x16", "--batch", "3", "--warmup", "1",
                            "--repeat", "3")
        self.assertEqual((repeated["runs"], repeated["warmup"], repeated["batch"]), (3, 1, 3))
        self.assertGreater(repeated["gflops"], 0)
        p = self.cli("multiply", "--random", "8x8x8", "--batch", "0", expect=1)
        self.assertIn("--batch: '0' is not a positive integer", p.stderr)
        p = self.cli("multiply", "--random", "8x8x8", "--batch", "2", "--check", expect=1)
        self.assertIn("--batch", p.stderr)

    def test_npy_files_in_and_out_match_numpy(self):
        a, b = rand(30, 20), rand(40, 20)
        np.save(self.path("a.npy"), a)
        np.save(self.path("bt.npy"), np.asfortranarray(b))  # column-major file
        self.cli("multiply", "--a", self.path("a.npy"), "--b", self.path("bt.npy"), "--transpose-b",
                 "--out", self.path("c.npy"))
        c = np.load(self.path("c.npy"))
        np.testing.assert_allclose(c, a.astype(np.float64) @ b.T, rtol=1e-5, atol=1e-5)
        self.cli("transpose", "--a", self.path("a.npy"), "--scale", "2", "--out", self.path("t.npy"))
        np.testing.assert_array_equal(np.load(self.path("t.npy")), 2 * a.T)

    def test_shared_memory_transport(self):
        a, b, c = rand(30, 20), rand(20, 17), rand(30, 17)
        np.save(self.path("sa.npy"), a)
        np.save(self.path("sb.npy"), b)
        np.save(self.path("sc.npy"), c)
        before = matserve_objects()
        r = self.cli("multiply", "--a", self.path("sa.npy"), "--b", self.path("sb.npy"), "--c",
                     self.path("sc.npy"), "--beta", "-1", "--shm", "--check", "--tolerance",
                     "1e-5", "--out", self.path("sout.npy"))
        self.assertLess(r["client_check"]["rel_l2_error"], 1e-5)
        np.testing.assert_allclose(np.load(self.path("sout.npy")), a.astype(np.float64) @ b - c,
                                   rtol=1e-5, atol=1e-5)
        self.cli("transpose", "--a", self.path("sa.npy"), "--shm", "--out", self.path("st.npy"))
        np.testing.assert_array_equal(np.load(self.path("st.npy")), a.T)
        # The region was unregistered and its object removed.
        from matserve.v1 import matrix_service_pb2 as pb
        self.assertEqual(len(self.server.stub.ListSharedMemory(pb.ListSharedMemoryRequest()).regions), 0)
        self.assertEqual(left_behind(before), set())
        bad = self.cli("multiply", "--random", "4x4x4", "--shm", "--keep-result", expect=1)
        self.assertIn("--shm", bad.stderr)

    def test_resident_chain(self):
        a = rand(16, 8)
        np.save(self.path("ra.npy"), a)
        h = self.cli("upload", "--a", self.path("ra.npy"))["resident"]["handle"]
        r = self.cli("multiply", "--a-handle", h, "--b-handle", h, "--transpose-b", "--keep-result")
        out = r["result"]["handle"] if "result" in r else r["resident"]["handle"]
        self.cli("download", "--handle", out, "--out", self.path("aat.npy"))
        np.testing.assert_allclose(np.load(self.path("aat.npy")), a.astype(np.float64) @ a.T,
                                   rtol=1e-5, atol=1e-5)
        self.cli("release", "--handle", h)
        self.cli("release", "--handle", out)
        p = self.cli("download", "--handle", h, "--out", self.path("x.npy"), expect=2)
        self.assertIn("error: NOT_FOUND", p.stderr)

    def test_bad_input_exit_codes(self):
        p = self.cli("multiply", "--random", "8x8x8", "--variant", "nope", expect=2)
        self.assertIn("error: INVALID_ARGUMENT: variant: unknown GEMM kernel 'nope'", p.stderr)
        p = self.cli("multiply", "--random", "8x8", expect=1)
        self.assertIn("--random", p.stderr)
        p = self.cli("frobnicate", expect=1)
        np.save(self.path("a3.npy"), rand(3, 4))
        np.save(self.path("b5.npy"), rand(5, 2))
        p = self.cli("multiply", "--a", self.path("a3.npy"), "--b", self.path("b5.npy"), expect=2)
        self.assertIn("inner dimensions do not agree", p.stderr)


if __name__ == "__main__":
    unittest.main()
