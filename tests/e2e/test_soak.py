"""Short soaks on the CPU backend (CI): scripts/ci/soak at concurrency 64 for ~25 s with the default
mix of GEMM, transpose, resident chains, malformed requests and cancellations, and at concurrency
8 for ~15 s with the shared-memory mix (regions registered and used, objects truncated behind the
server's back, regions unregistered under running calls and registered again). Passes when every
result was verified, every bad request got its expected code, server RSS and pool bytes were flat,
and nothing was left registered, resident or mapped. The long versions: docs/deploy.md, "Soak"."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def soak(test, seconds, *args):
    """Runs scripts/ci/soak against a CPU server of its own; returns its JSON report."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "soak.json")
        cmd = [sys.executable, os.path.join(ROOT, "scripts", "ci", "soak"),
               "--server-binary", os.environ.get("MATSERVE_SERVER", "matserve"),
               "--server-arg=--backend=cpu", "--server-arg=--cpu_concurrency=4",
               "--duration", seconds, "--json", report, *args]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        print(run.stdout[-4000:], run.stderr[-2000:])
        test.assertEqual(run.returncode, 0, run.stdout[-4000:] + run.stderr[-2000:])
        with open(report) as f:
            return json.load(f)


class SoakTest(unittest.TestCase):
    def test_short_soak_on_the_cpu_backend(self):
        r = soak(self, os.environ.get("MATSERVE_SOAK_SECONDS", "25"), "--concurrency", "64")
        self.assertTrue(r["passed"])
        self.assertEqual(r["unexpected"], 0, r["failures"])
        for op in ("multiply", "transpose", "resident"):
            self.assertGreater(r["ops"][op]["ok"], 0, op)
        self.assertGreater(r["ops"]["bad"]["expected_error"], 0)
        self.assertGreater(r["ops"]["cancel"]["cancelled"], 0)
        self.assertTrue(r["rss"]["flat"])
        self.assertEqual(r["server_exit"], 0)

    def test_short_shared_memory_soak_on_the_cpu_backend(self):
        r = soak(self, os.environ.get("MATSERVE_SHM_SOAK_SECONDS", "15"), "--concurrency", "8",
                 "--mix", "shm")
        self.assertTrue(r["passed"])
        self.assertEqual(r["unexpected"], 0, r["failures"])
        self.assertGreater(r["ops"]["shm"]["ok"], 0)
        self.assertGreater(r["ops"]["shm_truncate"]["expected_error"], 0)
        race = r["ops"]["shm_race"]
        self.assertGreater(race["ok"] + race["expected_error"], 0)
        self.assertEqual(r["leftovers"], {"regions": [], "resident": [], "mapped": []})
        self.assertTrue(r["rss"]["flat"])
        self.assertEqual(r["server_exit"], 0)


if __name__ == "__main__":
    unittest.main()
