#!/usr/bin/env python3
"""scripts/bench/run-transport-bench.sh and transport_latency.py against the real server on its
CPU backend: the client's default path (striped above the threshold), forced striping, a
MultiplyBatched stack, --phases, and two rounds with another client package alongside
(OTHER_CLIENT, here the tree's own), every result checked against float64. Keeps the remote-client
benchmark's harness from rotting where no GPU is. Needs MATSERVE_SERVER and MATSERVE_PYTHON_STUBS
(set by CTest)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "scripts", "bench")


class TransportBenchOnTheCpuBackend(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for var in ("MATSERVE_SERVER", "MATSERVE_PYTHON_STUBS"):
            if not os.environ.get(var):
                raise unittest.SkipTest(f"{var} not set (CTest sets it)")
        cls.out = tempfile.mkdtemp(prefix="transport-")
        env = dict(os.environ, MATSERVE_BACKEND="cpu", PYTHON=sys.executable, OUT=cls.out,
                   ROUNDS="2", OTHER_CLIENT=os.path.join(ROOT, "client", "python"))
        # 1024^3 fp32 carries 8 MiB of operands: the client's default stripes it.
        cls.proc = subprocess.run(
            [os.path.join(BENCH, "run-transport-bench.sh"), "--shapes", "1024",
             "--transports", "default,pure-python,striped,torch", "--stripes", "2",
             "--stripe-chunk-bytes", "1048576", "--batched", "16x33:fp32", "--reps", "1",
             "--warmup", "0", "--phases"],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=400)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out, ignore_errors=True)

    def doc(self, run):
        with open(os.path.join(self.out, run, "transport.json")) as f:
            return json.load(f)

    def test_every_round_of_both_clients_ran_and_passed_its_checks(self):
        self.assertEqual(self.proc.returncode, 0,
                         self.proc.stdout[-3000:] + self.proc.stderr[-3000:])
        for run in ("round1", "round1-other", "round2", "round2-other"):
            rows = self.doc(run)["results"]
            # default, pure-python and striped for 1024^3, default and pure-python for the
            # stack (no torch here).
            self.assertEqual([(r["shape"], r["transport"]) for r in rows],
                             [("1024^3 fp32", "default"), ("1024^3 fp32", "pure-python"),
                              ("1024^3 fp32", "striped"), ("16 x 33^3 fp32", "default"),
                              ("16 x 33^3 fp32", "pure-python")], run)
            self.assertEqual(rows[1]["data_plane"], "python")
            # The compiled data plane where the build made it (its tests need it there).
            if os.environ.get("MATSERVE_NATIVE_BUILT") == "1":
                self.assertEqual(rows[0]["data_plane"], "native")
            for r in rows:
                self.assertEqual(r["check"], "ok", r)

    def test_phases_account_for_a_striped_call(self):
        doc = self.doc("round1")
        self.assertGreater(doc["empty_call_us"], 0)
        striped = doc["results"][2]
        self.assertEqual((striped["stripes"], striped["chunk_bytes"]), (2, 1 << 20))
        steps = striped["phases_us"]
        for step in ("_put_striped", "_call", "_get_striped", "_release_quietly"):
            self.assertGreater(steps[step], 0, step)
        self.assertLessEqual(sum(steps.values()), striped["client_us"] * 1.01)
        # A stack this small goes in one message: nothing striped, nothing to read back.
        self.assertEqual(doc["results"][3]["phases_us"]["_put_striped"], 0)
        with open(os.path.join(self.out, "round1", "phases.md")) as f:
            self.assertRegex(f.read(), r"\| 1024\^3 fp32 \| striped \((native|python)\) \| 2 \| 1 \|")


if __name__ == "__main__":
    unittest.main()
