"""Short soak on the CPU backend (CI): scripts/ci/soak at concurrency 64 for ~25 s with the default
mix of GEMM, transpose, resident chains, malformed requests and cancellations. Passes when every
result was verified, every bad request got its expected code, and server RSS and pool bytes were
flat. The lead runs the long version on the GPU (docs/deploy.md, "Soak")."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class SoakTest(unittest.TestCase):
    def test_short_soak_on_the_cpu_backend(self):
        seconds = os.environ.get("MATSERVE_SOAK_SECONDS", "25")
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "soak.json")
            cmd = [sys.executable, os.path.join(ROOT, "scripts", "ci", "soak"),
                   "--server-binary", os.environ.get("MATSERVE_SERVER", "matserve"),
                   "--server-arg=--backend=cpu", "--server-arg=--cpu_concurrency=4",
                   "--concurrency", "64", "--duration", seconds, "--json", report]
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            print(run.stdout[-4000:], run.stderr[-2000:])
            self.assertEqual(run.returncode, 0, run.stdout[-4000:] + run.stderr[-2000:])
            with open(report) as f:
                r = json.load(f)
        self.assertTrue(r["passed"])
        self.assertEqual(r["unexpected"], 0, r["failures"])
        for op in ("multiply", "transpose", "resident"):
            self.assertGreater(r["ops"][op]["ok"], 0, op)
        self.assertGreater(r["ops"]["bad"]["expected_error"], 0)
        self.assertGreater(r["ops"]["cancel"]["cancelled"], 0)
        self.assertTrue(r["rss"]["flat"])
        self.assertEqual(r["server_exit"], 0)


if __name__ == "__main__":
    unittest.main()
