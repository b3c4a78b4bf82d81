"""End-to-end: matserve-bench against the real server on loopback (CPU backend in CI).

A few seconds of closed-loop load at concurrency 4, inline and resident, whose JSON must be
self-consistent (counts add up, percentiles ordered, server total >= kernel, req/s = requests /
wall time); --compute modes (and --precisions, its former name); batched requests (--batch N: matrices/s = N x req/s) and a server that merges
concurrent requests (mean merged requests within its --max_batch_size); a deliberately failing mix
must report errors by code, not crash; scripts/bench/plot_load.py must render that JSON as a PNG of
sensible size. Stability windows (--window-ms) must settle on a steady load and report an
unreachable bound as not stable (exit 4); the histogram and time-series CSVs must add up to the
run's requests; transpose and mixed workloads report per-operation counts in the drawn
proportions; operands from .npy files set the shape and data type, and bad files are refused
with a message naming them.
"""
import collections
import csv
import json
import math
import os
import subprocess
import tempfile
import unittest

from server_process import ServerProcess
from shm_objects import left_behind, matserve_objects

BENCH = os.environ.get("MATSERVE_BENCH", "")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@unittest.skipUnless(BENCH and os.path.exists(BENCH), "MATSERVE_BENCH not set (matserve-bench)")
class BenchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess()
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        cls.tmp.cleanup()
        assert code == 0, f"server exit code {code}\n{cls.server.output()}"

    def bench(self, *args, expect_rc=0):
        path = os.path.join(self.tmp.name, f"bench{len(os.listdir(self.tmp.name))}.json")
        cmd = [BENCH, "--target", self.server.target, "--json", path, *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        self.assertEqual(proc.returncode, expect_rc, proc.stdout + proc.stderr)
        self.last_stderr = proc.stderr
        with open(path) as f:
            return json.load(f), proc.stdout, path

    def check_run(self, r, kernels_overlap=False):
        """kernels_overlap: launches ran side by side (the CPU backend under heavier load, or a
        merging server's two launches in flight), so busy may exceed 100%."""
        self.assertGreater(r["requests"], 0)
        self.assertEqual(r["errors"], 0, r["first_error"])
        self.assertEqual(r["ok"] + r["errors"], r["requests"])
        self.assertEqual(sum(r["errors_by_code"].values()), r["errors"])
        self.assertEqual(sum(r["variants_ran"].values()), r["ok"])
        c = r["client_us"]
        self.assertEqual(c["count"], r["ok"])
        self.assertTrue(0 < c["min"] <= c["p50"] <= c["p90"] <= c["p95"] <= c["p99"] <= c["max"], c)
        s, k, o = r["server_total_us"], r["kernel_us"], r["overhead_us"]
        self.assertTrue(s["p50"] <= s["p99"] and k["p50"] <= k["p99"], (s, k))
        self.assertGreaterEqual(s["min"], 0)
        self.assertGreaterEqual(o["min"], 0, "server total < kernel for some request")
        self.assertGreaterEqual(s["p50"], k["p50"])
        self.assertLessEqual(s["p50"], c["p50"] * 1.05 + 1, "server time above the round trip")
        self.assertAlmostEqual(r["requests_per_s"], r["requests"] / r["wall_s"],
                               delta=1e-3 * r["requests_per_s"])
        self.assertTrue(2.5 <= r["wall_s"] <= 10, r["wall_s"])
        busy_bound = float("inf") if kernels_overlap else 1.05
        self.assertTrue(0 <= r["device_busy_lower_bound"] <= busy_bound,
                        r["device_busy_lower_bound"])

    def test_inline_and_resident_at_concurrency_4(self):
        csv_path = os.path.join(self.tmp.name, "load.csv")
        doc, out, path = self.bench("--shapes", "32x24x16", "--modes", "inline,resident",
                                    "--concurrency", "4", "--duration", "3", "--warmup", "2",
                                    "--csv", csv_path)
        self.assertEqual(doc["server"]["backend"], os.environ.get("MATSERVE_BACKEND", "cpu"))
        self.assertIn("--concurrency 4", doc["command_line"])
        self.assertEqual([(r["mode"], r["concurrency"]) for r in doc["runs"]],
                         [("inline", 4), ("resident", 4)])
        for r in doc["runs"]:
            with self.subTest(mode=r["mode"]):
                self.check_run(r)
        inline, resident = doc["runs"]
        self.assertEqual(inline["bytes_sent_per_request"], (32 * 16 + 16 * 24) * 4)
        if doc["server"]["backend"] != "cpu":  # the CPU backend has no host-to-device stage
            self.assertGreater(inline["h2d_gb_per_s"] or 0, 0)
        self.assertEqual(resident["bytes_sent_per_request"], 0)
        # The pool releases everything queued in one call: one call per request or fewer.
        self.assertGreaterEqual(resident["release_us"]["count"], 1)
        self.assertLessEqual(resident["release_us"]["count"], resident["ok"])
        self.assertEqual(resident["release_errors"], 0)
        self.assertIn("[1/2] 32x24x16 inline auto fp32 c=4", out)  # the plan comes first
        self.assertIn("p99 us", out)
        with open(csv_path) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([int(x["requests"]) for x in rows], [r["requests"] for r in doc["runs"]])
        # The bench released everything it uploaded.
        from matserve.v1 import matrix_service_pb2 as pb
        left = self.server.stub.ListResident(pb.ListResidentRequest(), timeout=10)
        self.assertEqual(len(left.matrices), 0)
        self.render_plot(path)

    def test_ping_and_echo_run_once_per_concurrency_before_the_shapes(self):
        doc, out, _ = self.bench("--shapes", "8,16", "--modes", "echo,ping,resident",
                                 "--concurrency", "1,2", "--requests", "30", "--warmup", "1")
        self.assertEqual([(r["mode"], r["concurrency"]) for r in doc["runs"]],
                         [("ping", 1), ("ping", 2), ("echo", 1), ("echo", 2), ("resident", 1),
                          ("resident", 2), ("resident", 1), ("resident", 2)])
        for r in doc["runs"][:4]:
            self.assertEqual((r["ok"], r["errors"]), (30, 0))
            self.assertGreater(r["client_us"]["p50"], 0)  # the round trip was timed
            self.assertEqual(r["server_total_us"]["p50"], 0)  # no matrix work on the server
            self.assertEqual(r["workload"], "-")
        self.assertIn("ping", out)
        self.assertIn("echo", out)

    def test_resident_results_released_by_the_workers(self):
        doc, _, _ = self.bench("--shapes", "16", "--modes", "resident", "--concurrency", "2",
                               "--duration", "3", "--warmup", "1", "--release", "inline")
        (r,) = doc["runs"]
        self.check_run(r)
        self.assertEqual(r["release_us"]["count"], r["ok"])
        self.assertEqual(r["release_errors"], 0)
        self.assertIn("--release inline", doc["command_line"])
        from matserve.v1 import matrix_service_pb2 as pb
        left = self.server.stub.ListResident(pb.ListResidentRequest(), timeout=10)
        self.assertEqual(len(left.matrices), 0)

    def test_grpc_and_shared_memory_transports(self):
        before = matserve_objects()
        doc, out, _ = self.bench("--shapes", "48x40x24", "--transport", "grpc,shm",
                                 "--concurrency", "2", "--duration", "3", "--warmup", "1")
        self.assertEqual([(r["mode"], r["concurrency"]) for r in doc["runs"]],
                         [("inline", 2), ("shm", 2)])
        for r in doc["runs"]:
            with self.subTest(mode=r["mode"]):
                self.check_run(r)
                self.assertEqual(r["bytes_sent_per_request"], (48 * 24 + 24 * 40) * 4)
                self.assertEqual(r["bytes_received_per_request"], 48 * 40 * 4)
        self.assertIn("shm", out)
        # Each worker unregistered its region and removed its object.
        from matserve.v1 import matrix_service_pb2 as pb
        left = self.server.stub.ListSharedMemory(pb.ListSharedMemoryRequest(), timeout=10)
        self.assertEqual(len(left.regions), 0)
        self.assertEqual(left_behind(before), set())

    def test_batched_requests(self):
        doc, out, _ = self.bench("--shapes", "24x16x8", "--modes", "inline,resident", "--batch", "4",
                                 "--concurrency", "2", "--duration", "3", "--warmup", "1")
        self.assertEqual([(r["mode"], r["batch"]) for r in doc["runs"]],
                         [("inline", 4), ("resident", 4)])
        for r in doc["runs"]:
            with self.subTest(mode=r["mode"]):
                self.check_run(r)
                self.assertAlmostEqual(r["matrices_per_s"], 4 * r["requests_per_s"],
                                       delta=1e-3 * r["matrices_per_s"])
                self.assertAlmostEqual(r["gflops_per_s"],
                                       r["matrices_per_s"] * 2 * 24 * 16 * 8 / 1e9,
                                       delta=1e-3 * r["gflops_per_s"])
                self.assertEqual(r["merged_requests_mean"], 1)  # a MultiplyBatched is one launch
        inline, resident = doc["runs"]
        self.assertEqual(inline["bytes_sent_per_request"], 4 * (24 * 8 + 8 * 16) * 4)
        self.assertEqual(inline["bytes_received_per_request"], 4 * 24 * 16 * 4)
        # One Release call per request or fewer (the pool releases everything queued at once).
        self.assertGreaterEqual(resident["release_us"]["count"], 1)
        self.assertLessEqual(resident["release_us"]["count"], resident["ok"])
        self.assertEqual(resident["release_errors"], 0)
        self.assertIn("[1/2] 24x16x8 inline auto fp32 c=2 batch=4", out)
        self.assertIn("matrices/s", out)
        from matserve.v1 import matrix_service_pb2 as pb
        left = self.server.stub.ListResident(pb.ListResidentRequest(), timeout=10)
        self.assertEqual(len(left.matrices), 0)
        proc = subprocess.run([BENCH, "--batch", "0"], capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("--batch: expected an integer >= 1, got '0'", proc.stderr)
        proc = subprocess.run([BENCH, "--batch", "2", "--transport", "shm"], capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("--batch", proc.stderr)

    def test_dynamic_batching_reported(self):
        with ServerProcess("--max_batch_size=4", "--max_batch_delay_us=2000") as server:
            path = os.path.join(self.tmp.name, "merged.json")
            proc = subprocess.run([BENCH, "--target", server.target, "--json", path, "--shapes",
                                   "96", "--concurrency", "6", "--duration", "3", "--warmup", "1"],
                                  capture_output=True, text=True, timeout=300)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            with open(path) as f:
                (r,) = json.load(f)["runs"]
            self.check_run(r, kernels_overlap=True)
            self.assertEqual(r["batch"], 1)
            self.assertAlmostEqual(r["matrices_per_s"], r["requests_per_s"],
                                   delta=1e-3 * r["matrices_per_s"])
            # Every reply said how many requests its launch computed: 1 .. --max_batch_size.
            self.assertTrue(1 <= r["merged_requests_mean"] <= 4, r["merged_requests_mean"])
            wait = r["batch_wait_us"]
            self.assertEqual(wait["count"], r["ok"])
            self.assertTrue(0 <= wait["min"] and wait["p50"] <= r["queue_us"]["max"], wait)
            self.assertIn("merged", proc.stdout)

    def test_sweep_by_request_count(self):
        doc, _, path = self.bench("--shapes", "8", "--concurrency", "1:4:x2", "--requests", "40",
                                  "--warmup", "1")
        self.assertEqual([r["concurrency"] for r in doc["runs"]], [1, 2, 4])
        for r in doc["runs"]:
            self.assertEqual(r["requests"], 40)
            self.assertEqual(r["ok"], 40)

    def test_compute_modes_and_their_former_option_name(self):
        doc, _, _ = self.bench("--shapes", "16", "--compute", "fp64,fp16,tf32", "--requests", "8",
                               "--warmup", "1")
        self.assertEqual([r["precision"] for r in doc["runs"]], ["fp64", "fp16", "tf32"])
        for r in doc["runs"]:
            self.assertEqual(r["ok"], 8, r["first_error"])
            self.assertEqual(r["precisions_ran"], {r["precision"]: 8})  # what the server computed
        self.assertNotIn("warning", self.last_stderr)
        doc, _, _ = self.bench("--shapes", "16", "--precisions", "bf16", "--requests", "4")
        self.assertEqual([(r["precision"], r["ok"]) for r in doc["runs"]], [("bf16", 4)])
        self.assertIn("warning: --precisions is deprecated", self.last_stderr)

    def test_failing_mix_reports_errors_by_code(self):
        doc, out, _ = self.bench("--shapes", "16", "--variants", "nope", "--concurrency", "2",
                                 "--requests", "10", "--modes", "inline,resident", expect_rc=3)
        for r in doc["runs"]:
            self.assertEqual(r["ok"], 0)
            self.assertEqual(r["errors"], r["requests"])
            self.assertEqual(r["errors_by_code"], {"INVALID_ARGUMENT": 10}, r)
            self.assertIn("nope", r["first_error"])
        self.assertIn("INVALID_ARGUMENT=10", out)

    def test_unreachable_server_and_bad_usage(self):
        proc = subprocess.run([BENCH, "--target", "127.0.0.1:1", "--requests", "1"],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        proc = subprocess.run([BENCH, "--concurrency", "8:1:x2"], capture_output=True, text=True,
                              timeout=60)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("--concurrency", proc.stderr)

    def test_open_loop_at_a_fixed_rate(self):
        # The schedule decides how many requests are sent (every scheduled arrival is sent, late
        # or not), so their count is checked, never the rate a loaded machine achieves: 600 for
        # constant arrivals; for Poisson arrivals (seeded) 1200 expected, standard deviation 35.
        # Latency counts from each request's scheduled time.
        doc, out, _ = self.bench("--modes", "ping,inline", "--shapes", "16", "--rate", "200",
                                 "--arrivals", "constant", "--duration", "3", "--concurrency", "8",
                                 "--warmup", "1")
        for r in doc["runs"]:
            with self.subTest(mode=r["mode"]):
                self.assertEqual((r["load"], r["offered_rate"]), ("open, constant arrivals", 200))
                self.assertEqual(r["errors"], 0, r["first_error"])
                self.assertTrue(590 <= r["requests"] <= 601, r["requests"])
                self.assertTrue(0 < r["requests_per_s"] <= 200 * 1.02, r["requests_per_s"])
                c = r["client_us"]
                self.assertTrue(0 < c["p50"] <= c["p99"] <= c["max"], c)
        self.assertIn("(offered 200)", out + self.last_stderr)
        doc, _, _ = self.bench("--modes", "ping", "--rate", "400", "--duration", "3",
                               "--concurrency", "8", "--warmup", "1")
        (r,) = doc["runs"]
        self.assertEqual(r["load"], "open, poisson arrivals")
        self.assertTrue(1000 <= r["requests"] <= 1400, r["requests"])
        self.assertTrue(0 < r["requests_per_s"] <= r["requests"] / 3 * 1.02, r["requests_per_s"])
        closed, _, _ = self.bench("--modes", "ping", "--requests", "20", "--warmup", "1")
        self.assertEqual((closed["runs"][0]["load"], closed["runs"][0]["offered_rate"]),
                         ("closed", None))

    def test_tls_and_token(self):
        # A server with TLS and bearer tokens: the bench connects with --tls-ca and
        # --token-file; without the token every request fails UNAUTHENTICATED, reported by code.
        from test_security import make_pki
        d = os.path.join(self.tmp.name, "pki")
        os.makedirs(d)
        make_pki(d)
        with open(os.path.join(d, "tokens"), "w") as f:
            f.write("bench-token-0123456789 bench\n")
        with open(os.path.join(d, "token"), "w") as f:
            f.write("# the bench's token\nbench-token-0123456789\n")
        server = ServerProcess(f"--tls_cert={d}/server.pem", f"--tls_key={d}/server.key",
                               f"--auth_tokens_file={d}/tokens", start_channel=False)
        try:
            target = f"127.0.0.1:{server.port}"
            tls = ["--target", target, "--tls-ca", f"{d}/ca.pem", "--shapes", "8",
                   "--modes", "inline,resident", "--requests", "20", "--warmup", "1"]
            path = os.path.join(self.tmp.name, "tls.json")
            proc = subprocess.run([BENCH, *tls, "--token-file", f"{d}/token", "--json", path],
                                  capture_output=True, text=True, timeout=300)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            with open(path) as f:
                runs = json.load(f)["runs"]
            self.assertEqual([(r["mode"], r["ok"], r["errors"]) for r in runs],
                             [("inline", 20, 0), ("resident", 20, 0)])
            env = {k: v for k, v in os.environ.items() if k != "MATSERVE_TOKEN"}
            anonymous = subprocess.run([BENCH, *tls], capture_output=True, text=True, timeout=300,
                                       env=env)
            self.assertIn("UNAUTHENTICATED", anonymous.stdout + anonymous.stderr)
            plaintext = subprocess.run([BENCH, "--target", target, "--requests", "1"],
                                       capture_output=True, text=True, timeout=60, env=env)
            self.assertEqual(plaintext.returncode, 2, plaintext.stderr)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_stability_windows_settle_on_a_steady_load(self):
        # How steady a loaded machine keeps the load is not this test's business: a 1000% band
        # makes the first three windows stable by definition, and the test checks what the bench
        # does with them (the stop, the windows it reports, their sums, its messages).
        doc, out, _ = self.bench("--modes", "ping", "--concurrency", "2", "--window-ms", "400",
                                 "--stability-pct", "1000", "--max-trials", "15", "--warmup", "5")
        (r,) = doc["runs"]
        s = r["stability"]
        self.assertTrue(s["stable"], s)
        self.assertEqual((s["window_ms"], s["stability_windows"], s["percentile"]), (400, 3, 50))
        windows = s["windows"]
        self.assertEqual(len(windows), 3, windows)
        self.assertEqual([w["index"] for w in windows], list(range(1, len(windows) + 1)))
        for w in windows:
            self.assertGreater(w["throughput"], 0, w)
            self.assertGreater(w["latency_us"], 0, w)
        # The windows hold the timed requests but those that ended after the last window closed
        # (in flight, or finished while the monitor decided to stop).
        self.assertLessEqual(sum(w["requests"] for w in windows), r["requests"])
        self.assertGreaterEqual(sum(w["requests"] for w in windows), 0.98 * r["requests"] - 2)
        self.assertGreaterEqual(r["wall_s"], 0.35 * len(windows))  # windows never close early
        self.assertIn("window 1:", self.last_stderr)
        self.assertIn("(stable)", self.last_stderr)
        self.assertIn("stable after", out)

    def test_stability_not_reached_is_reported_and_exits_4(self):
        csv_path = os.path.join(self.tmp.name, "unstable.csv")
        doc, out, _ = self.bench("--modes", "ping", "--window-ms", "200", "--stability-pct",
                                 "0.01", "--max-trials", "3", "--warmup", "1", "--no-progress",
                                 "--csv", csv_path, expect_rc=4)
        (r,) = doc["runs"]
        self.assertFalse(r["stability"]["stable"])
        self.assertEqual(len(r["stability"]["windows"]), 3)
        self.assertEqual(r["errors"], 0)
        self.assertIn("NOT STABLE after 3 windows", out)
        self.assertNotIn("window 1:", self.last_stderr)  # --no-progress
        with open(csv_path) as f:
            (row,) = list(csv.DictReader(f))
        self.assertEqual((row["stable"], row["windows"]), ("no", "3"))
        proc = subprocess.run([BENCH, "--window-ms", "100", "--requests", "5"],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("not with --requests or --duration", proc.stderr)

    def test_histogram_and_timeseries_files_add_up(self):
        hist, series = (os.path.join(self.tmp.name, n) for n in ("hist.csv", "series.csv"))
        doc, _, _ = self.bench("--shapes", "16", "--concurrency", "1,2", "--duration", "2.5",
                               "--warmup", "1", "--histogram-out", hist, "--timeseries-out",
                               series)
        runs = doc["runs"]
        with open(hist) as f:
            rows = list(csv.DictReader(f))
        by_run = collections.defaultdict(list)
        for row in rows:
            by_run[int(row["run"])].append(row)
        self.assertEqual(sorted(by_run), [1, 2])
        for i, r in enumerate(runs, 1):
            buckets = by_run[i]
            self.assertEqual(sum(int(b["count"]) for b in buckets), r["ok"])
            self.assertEqual(int(buckets[0]["concurrency"]), r["concurrency"])
            bounds = [float(b["le_us"]) for b in buckets]
            self.assertEqual(bounds, sorted(bounds))
            for lo, hi in zip(bounds, bounds[1:]):  # contiguous buckets, 20 per decade
                self.assertAlmostEqual(math.log10(hi) - math.log10(lo), 0.05, places=6)
            # The median falls in the bucket holding the nearest-rank p50.
            p50 = r["client_us"]["p50"]
            below = sum(int(b["count"]) for b in buckets if float(b["le_us"]) < p50)
            self.assertLess(below, math.ceil(r["ok"] / 2) + 1)
        with open(series) as f:
            rows = list(csv.DictReader(f))
        for i, r in enumerate(runs, 1):
            seconds = [row for row in rows if int(row["run"]) == i]
            self.assertEqual([int(s["second"]) for s in seconds], list(range(len(seconds))))
            self.assertEqual(len(seconds), math.floor(r["wall_s"]) + 1)
            self.assertEqual(sum(int(s["completed"]) for s in seconds), r["requests"])
            self.assertEqual(sum(int(s["errors"]) for s in seconds), r["errors"])
            first = seconds[0]
            self.assertAlmostEqual(float(first["rate_per_s"]), int(first["completed"]))
            self.assertTrue(0 < float(first["p50_us"]) <= float(first["p99_us"]), first)

    def test_transpose_workload(self):
        doc, out, _ = self.bench("--workload", "transpose", "--shapes", "48x8x24", "--modes",
                                 "inline,resident", "--requests", "40", "--warmup", "1")
        for r in doc["runs"]:
            with self.subTest(mode=r["mode"]):
                self.assertEqual(r["workload"], "transpose")
                self.assertEqual((r["ok"], r["errors"]), (40, 0), r["first_error"])
                self.assertEqual(list(r["operations"]), ["transpose"])
                self.assertEqual(r["operations"]["transpose"]["ok"], 40)
                self.assertEqual(r["matrices_per_s"], 0)  # no products
                self.assertEqual(r["precisions_ran"], {})
                self.assertEqual(sum(r["variants_ran"].values()), 40)
        inline, resident = doc["runs"]
        self.assertEqual(inline["bytes_sent_per_request"], 48 * 24 * 4)  # A only
        self.assertEqual(inline["bytes_received_per_request"], 24 * 48 * 4)  # A^T
        self.assertEqual(resident["release_errors"], 0)
        self.assertIn("per operation", out)
        from matserve.v1 import matrix_service_pb2 as pb
        left = self.server.stub.ListResident(pb.ListResidentRequest(), timeout=10)
        self.assertEqual(len(left.matrices), 0)

    def test_mixed_workload_follows_the_weights(self):
        csv_path = os.path.join(self.tmp.name, "mixed.csv")
        doc, out, _ = self.bench("--workload", "multiply=0.75,transpose=0.25", "--shapes", "16",
                                 "--modes", "inline,resident", "--concurrency", "2", "--requests",
                                 "400", "--warmup", "1", "--csv", csv_path)
        for r in doc["runs"]:
            with self.subTest(mode=r["mode"]):
                self.assertEqual(r["workload"], "multiply=0.75,transpose=0.25")
                self.assertEqual((r["ok"], r["errors"]), (400, 0), r["first_error"])
                ops = r["operations"]
                self.assertEqual(sorted(ops), ["multiply", "transpose"])
                self.assertEqual(ops["multiply"]["requests"] + ops["transpose"]["requests"], 400)
                # 100 transposes expected, standard deviation 8.7: within 5 of those.
                self.assertTrue(57 <= ops["transpose"]["requests"] <= 143, ops)
                self.assertEqual(r["precisions_ran"], {"fp32": ops["multiply"]["ok"]})
                for op in ops.values():
                    self.assertTrue(0 < op["client_us"]["p50"] <= op["client_us"]["max"], op)
                    self.assertAlmostEqual(op["requests_per_s"], op["requests"] / r["wall_s"],
                                           delta=1e-3 * op["requests_per_s"])
                self.assertAlmostEqual(r["matrices_per_s"], ops["multiply"]["ok"] / r["wall_s"],
                                       delta=1e-3 * r["matrices_per_s"])
        self.assertIn("per operation", out)
        with open(csv_path) as f:
            rows = list(csv.DictReader(f))
        ops = doc["runs"][0]["operations"]
        self.assertEqual(rows[0]["ok_by_operation"],
                         f"multiply={ops['multiply']['ok']};transpose={ops['transpose']['ok']}")
        # The same seed draws the same mix.
        again, _, _ = self.bench("--workload", "multiply=0.75,transpose=0.25", "--shapes", "16",
                                 "--requests", "60", "--warmup", "0")
        twice, _, _ = self.bench("--workload", "multiply=0.75,transpose=0.25", "--shapes", "16",
                                 "--requests", "60", "--warmup", "0")
        self.assertEqual(again["runs"][0]["operations"]["transpose"]["requests"],
                         twice["runs"][0]["operations"]["transpose"]["requests"])

    def test_npy_operands(self):
        import numpy as np
        d = os.path.join(self.tmp.name, "npy")
        os.makedirs(d)
        rng = np.random.default_rng(3)
        paths = {}
        for name, shape, dtype in (("a", (24, 16), np.float64), ("b", (16, 8), np.float64),
                                   ("b32", (16, 8), np.float32), ("tall", (12, 8), np.float64)):
            paths[name] = os.path.join(d, f"{name}.npy")
            np.save(paths[name], rng.standard_normal(shape).astype(dtype))
        doc, out, _ = self.bench("--a-npy", paths["a"], "--b-npy", paths["b"], "--requests", "20",
                                 "--warmup", "1", "--modes", "inline,resident")
        for r in doc["runs"]:
            self.assertEqual((r["shape"], r["precision"]), ("24x8x16", "fp64"))
            self.assertEqual((r["ok"], r["errors"]), (20, 0), r["first_error"])
            self.assertEqual(r["precisions_ran"], {"fp64": 20})
        self.assertEqual(doc["runs"][0]["bytes_sent_per_request"], (24 * 16 + 16 * 8) * 8)
        self.assertIn(f"operands from {paths['a']} and {paths['b']}", out)
        # A transpose-only workload needs A alone.
        doc, _, _ = self.bench("--a-npy", paths["a"], "--workload", "transpose", "--requests", "5")
        self.assertEqual(doc["runs"][0]["operations"]["transpose"]["ok"], 5)

        def refused(*args):
            proc = subprocess.run([BENCH, "--target", self.server.target, *args],
                                  capture_output=True, text=True, timeout=60)
            self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
            return proc.stderr
        self.assertIn(f"--b-npy: B ({paths['tall']}) is 12x8 but A ({paths['a']}) is 24x16: "
                      "B's rows (12) must equal A's columns (16)",
                      refused("--a-npy", paths["a"], "--b-npy", paths["tall"]))
        self.assertIn(f"--b-npy: B ({paths['b32']}) holds fp32 but A ({paths['a']}) holds fp64",
                      refused("--a-npy", paths["a"], "--b-npy", paths["b32"]))
        self.assertIn("--compute fp32: --a-npy holds fp64 data, which feeds only fp64",
                      refused("--a-npy", paths["a"], "--b-npy", paths["b"], "--compute", "fp32"))
        self.assertIn("a multiply workload needs B too (--b-npy)", refused("--a-npy", paths["a"]))
        missing = os.path.join(d, "missing.npy")
        self.assertIn(f"--a-npy {missing}:", refused("--a-npy", missing, "--b-npy", paths["b"]))
        garbage = os.path.join(d, "garbage.npy")
        with open(garbage, "wb") as f:
            f.write(b"not an array")
        self.assertIn(f"--a-npy {garbage}:", refused("--a-npy", garbage, "--b-npy", paths["b"]))

    def render_plot(self, json_path):
        # CI installs python3-matplotlib (scripts/dev/install-deps.sh); a GPU box may lack it.
        if subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"],
                          capture_output=True).returncode != 0:
            self.skipTest("matplotlib is not installed for /usr/bin/python3: plot not checked")
        out_dir = os.path.join(self.tmp.name, "plots")
        subprocess.run(["/usr/bin/python3", os.path.join(REPO, "scripts", "bench", "plot_load.py"),
                        json_path, out_dir, "--prefix", "load"], check=True, timeout=120)
        png = os.path.join(out_dir, "load.png")
        with open(png, "rb") as f:
            data = f.read()
        self.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n")
        self.assertTrue(10_000 < len(data) < 2_000_000, len(data))
        self.assertTrue(os.path.getsize(os.path.join(out_dir, "load.svg")) > 1000)


if __name__ == "__main__":
    unittest.main()
