#!/usr/bin/env python3
"""scripts/bench/run-resident-chain.sh and resident_chain.py against the real server on its CPU
backend: every way of letting go of a chain's step before runs, checks its last result against
float64, and leaves nothing resident. Needs MATSERVE_SERVER and MATSERVE_PYTHON_STUBS (set by
CTest)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "scripts", "bench")


class ResidentChainOnTheCpuBackend(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for var in ("MATSERVE_SERVER", "MATSERVE_PYTHON_STUBS"):
            if not os.environ.get(var):
                raise unittest.SkipTest(f"{var} not set (CTest sets it)")
        cls.out = tempfile.mkdtemp(prefix="chain-")
        env = dict(os.environ, MATSERVE_BACKEND="cpu", PYTHON=sys.executable, OUT=cls.out,
                   ROUNDS="2")
        cls.proc = subprocess.run(
            [os.path.join(BENCH, "run-resident-chain.sh"), "--size", "37", "--steps", "12",
             "--warmup", "3"],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out, ignore_errors=True)

    def test_every_way_ran_each_round_and_its_chain_checks(self):
        self.assertEqual(self.proc.returncode, 0,
                         self.proc.stdout[-3000:] + self.proc.stderr[-3000:])
        for round_ in (1, 2):
            with open(os.path.join(self.out, f"chain-{round_}.json")) as f:
                doc = json.load(f)
            self.assertEqual([r["way"] for r in doc["results"]],
                             ["release-call", "release=", "held"])
            for r in doc["results"]:
                self.assertEqual(r["steps"], 12)
                self.assertLess(r["rel_error"], 1e-4)
                self.assertGreater(r["client_p50_us"], r["server_total_p50_us"])
        with open(os.path.join(self.out, "chain.md")) as f:
            table = f.read()
        self.assertEqual(table.count("| release= | 12 |"), 2)
        self.assertNotIn("FAILED", table)

    def test_an_unknown_way_fails_the_run(self):
        env = dict(os.environ, MATSERVE_BACKEND="cpu", PYTHON=sys.executable,
                   OUT=os.path.join(self.out, "bad"), ROUNDS="1")
        # An unknown way is refused before any call.
        proc = subprocess.run([os.path.join(BENCH, "run-resident-chain.sh"), "--ways", "never"],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("--ways", proc.stderr)


if __name__ == "__main__":
    unittest.main()
