#!/usr/bin/env python3
"""scripts/bench/run-service-vs-torch.sh and service_vs_torch.py against the real server on its
CPU backend (NumPy the baseline): single GEMMs with two variants and the settling case, and
MultiplyBatched per variant with both operand layouts, each result checked against float64; then
autotune_from_service.py turning that run into single-product and batch-class rows. Keeps the
GPU benchmark's harness from rotting where no GPU is. Needs MATSERVE_SERVER and
MATSERVE_PYTHON_STUBS (set by CTest)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "scripts", "bench")


class ServiceVsTorchOnTheCpuBackend(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for var in ("MATSERVE_SERVER", "MATSERVE_PYTHON_STUBS"):
            if not os.environ.get(var):
                raise unittest.SkipTest(f"{var} not set (CTest sets it)")
        cls.out = tempfile.mkdtemp(prefix="svt-")
        env = dict(os.environ, MATSERVE_BACKEND="cpu", PYTHON=sys.executable, OUT=cls.out)
        cls.proc = subprocess.run(
            [os.path.join(BENCH, "run-service-vs-torch.sh"), "--no-torch", "--shapes",
             "64,37x29x41", "--precisions", "fp32,bf16", "--variants", "auto,cpu_openblas",
             "--batched", "3x7x5x9,4x16x16x16", "--batched-layout",
             "handles,stacked,resident",
             "--batched-variants", "auto,cpu_openblas", "--transpose-shapes", "none",
             "--reps", "3", "--warmup", "1"],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
        path = os.path.join(cls.out, "service_vs_torch.json")
        cls.doc = None
        if os.path.exists(path):
            with open(path) as f:
                cls.doc = json.load(f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out, ignore_errors=True)

    def test_the_run_passes_every_check(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stdout[-3000:] + self.proc.stderr[-3000:])
        self.assertIsNotNone(self.doc)
        self.assertEqual(self.doc["failures"], [])
        self.assertTrue(self.doc["settings"]["settle"])

    def test_every_single_gemm_case_ran_and_was_checked(self):
        rows = self.doc["gemm"]
        self.assertEqual(len(rows), 2 * 2 * 2)  # shapes x precisions x variants; settling dropped
        for r in rows:
            self.assertTrue(r["ran"], r)
            self.assertEqual(r["check"], "ok", r)
            self.assertGreater(r["service_kernel_us"], 0)

    def test_batches_ran_per_variant_and_layout(self):
        rows = self.doc["batched"]
        seen = {(r["batch"], r["precision"], r["layout"], r["variant_requested"]) for r in rows}
        want = {(b, p, layout, v) for b in (3, 4) for p in ("fp32", "bf16")
                for layout in ("handles", "stacked", "resident")
                for v in ("auto", "cpu_openblas")}
        self.assertEqual(seen, want)
        self.assertEqual(len(rows), len(want))
        for r in rows:
            self.assertTrue(r["ran"], r)
            self.assertEqual(r["check"], "ok", r)
        with open(os.path.join(self.out, "service_vs_torch.md")) as f:
            md = f.read()
        self.assertIn("| 3 x 7x5x9 | bf16 | stacked | cpu_openblas | cpu_openblas |", md)
        self.assertIn("| 4 x 16x16x16 | fp32 | resident | auto |", md)

    def test_autotune_rows_name_single_and_batch_classes(self):
        tsv = subprocess.run(
            [sys.executable, os.path.join(BENCH, "autotune_from_service.py"),
             os.path.join(self.out, "service_vs_torch.json"), "--precisions", "fp32,bf16"],
            capture_output=True, text=True, check=True).stdout
        rows = [line.split("\t") for line in tsv.splitlines() if not line.startswith("#")]
        classes = {r[2] for r in rows}
        self.assertIn("ms_ns_ks", classes)      # 64^3 and 37x29x41
        self.assertIn("batch_mt_nt_kt", classes)  # 3 x 7x5x9 and 4 x 16^3
        self.assertTrue(all(r[3] == "cpu_openblas" and float(r[4]) > 0 for r in rows), rows)


if __name__ == "__main__":
    unittest.main()
