"""End-to-end: matserve-bench against the real server on loopback (CPU backend in CI).

A few seconds of closed-loop load at concurrency 4, inline and resident, whose JSON must be
self-consistent (counts add up, percentiles ordered, server total >= kernel, req/s = requests /
wall time); --compute modes (and --precisions, its former name); batched requests (--batch N: matrices/s = N x req/s) and a server that merges
concurrent requests (mean merged requests within its --max_batch_size); a deliberately failing mix
must report errors by code, not crash; scripts/bench/plot_load.py must render that JSON as a PNG of
sensible size.
"""
import csv
import json
import os
import subprocess
import tempfile
import unittest

from server_process import ServerProcess

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

    def test_ping_runs_once_per_concurrency_before_the_shapes(self):
        doc, out, _ = self.bench("--shapes", "8,16", "--modes", "ping,resident",
                                 "--concurrency", "1,2", "--requests", "30", "--warmup", "1")
        self.assertEqual([(r["mode"], r["concurrency"]) for r in doc["runs"]],
                         [("ping", 1), ("ping", 2), ("resident", 1), ("resident", 2),
                          ("resident", 1), ("resident", 2)])
        for r in doc["runs"][:2]:
            self.assertEqual((r["ok"], r["errors"]), (30, 0))
            self.assertGreater(r["client_us"]["p50"], 0)  # the round trip was timed
            self.assertEqual(r["server_total_us"]["p50"], 0)  # no matrix work on the server
        self.assertIn("ping", out)

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
        def objects():
            return {f for f in os.listdir("/dev/shm") if f.startswith("matserve-")}
        before = objects()
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
        self.assertEqual(objects() - before, set())

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
        # Constant arrivals: the achieved rate is the offered one within 5%; latency counts from
        # each request's scheduled time. Poisson arrivals: about the offered rate (their count
        # is random: 1200 expected, standard deviation 35).
        doc, out, _ = self.bench("--modes", "ping,inline", "--shapes", "16", "--rate", "200",
                                 "--arrivals", "constant", "--duration", "3", "--concurrency", "8",
                                 "--warmup", "1")
        for r in doc["runs"]:
            with self.subTest(mode=r["mode"]):
                self.assertEqual((r["load"], r["offered_rate"]), ("open, constant arrivals", 200))
                self.assertEqual(r["errors"], 0, r["first_error"])
                self.assertAlmostEqual(r["requests_per_s"], 200, delta=10)
                self.assertTrue(590 <= r["requests"] <= 601, r["requests"])
                c = r["client_us"]
                self.assertTrue(0 < c["p50"] <= c["p99"] <= c["max"], c)
        self.assertIn("(offered 200)", out + self.last_stderr)
        doc, _, _ = self.bench("--modes", "ping", "--rate", "400", "--duration", "3",
                               "--concurrency", "8", "--warmup", "1")
        (r,) = doc["runs"]
        self.assertEqual(r["load"], "open, poisson arrivals")
        self.assertAlmostEqual(r["requests_per_s"], 400, delta=60)
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
