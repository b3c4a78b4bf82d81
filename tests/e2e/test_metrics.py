"""End-to-end: /metrics of the real server (CPU backend), and the Grafana dashboard's queries.

ScrapeTest drives a known mix of requests (GEMMs in two precisions, transposes, failures, an
upload, a listing and a release), scrapes /metrics, checks the values against what was sent
(counts, bytes, FLOPs, stage times within the total, the resident RPCs' times) and runs
`promtool check metrics` on the scrape.
DashboardQueryTest starts a real Prometheus (Debian's `prometheus`) on loopback with
deploy/prometheus/prometheus.yml pointed at the test server, waits for scrapes, and runs EVERY
query of deploy/grafana/dashboards/matserve.json through the HTTP API: each must succeed and
return data. The GPU panels get their data from a fake libnvidia-ml (tests/server/metrics/
fake_nvml.cc, built beside the server) through MATSERVE_NVML_LIBRARY.
"""
import importlib.util
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import grpc
import numpy as np
import yaml

from matserve.v1 import matrix_service_pb2 as pb
from server_process import ServerProcess, matrix

ROOT = pathlib.Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(11)


def load_check_dashboard():
    spec = importlib.util.spec_from_file_location("check_dashboard",
                                                  ROOT / "scripts/ci/check_dashboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_nvml():
    """The fake NVML library built beside the server, or None."""
    if path := os.environ.get("MATSERVE_FAKE_NVML"):
        return path
    server = os.environ.get("MATSERVE_SERVER")
    if not server:
        return None
    lib = pathlib.Path(server).resolve().parents[1] / \
        "tests/server/metrics/libmatserve_fake_nvml.so"
    return str(lib) if lib.exists() else None


def start_server():
    """A CPU-backend server whose NVML is the fake library (when built)."""
    saved = os.environ.get("MATSERVE_NVML_LIBRARY")
    lib = fake_nvml()
    if lib:
        os.environ["MATSERVE_NVML_LIBRARY"] = lib
    try:
        return ServerProcess("--max_matrix_bytes=67108864"), lib
    finally:
        if saved is None:
            os.environ.pop("MATSERVE_NVML_LIBRARY", None)
        else:
            os.environ["MATSERVE_NVML_LIBRARY"] = saved


def rand(rows, cols, dtype=np.float32):
    mag = RNG.uniform(0.01, 1.0, size=(rows, cols))
    return (mag * np.where(RNG.random((rows, cols)) < 0.5, -1.0, 1.0)).astype(dtype)


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def parse_labels(text):
    return dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', text))


def samples(text, name, **want):
    """Values of `name` whose labels include `want`."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][\w:]*)(\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        labels = parse_labels(m.group(3) or "")
        if all(labels.get(k) == v for k, v in want.items()):
            out.append(float(m.group(4)))
    return out


def total(text, name, **want):
    return sum(samples(text, name, **want))


def drive_mix(stub):
    """Sends a fixed mix; returns what the metrics must show."""
    sent = {"ok_gemm": 0, "ok_transpose": 0, "invalid": 0, "flops": 0.0, "transpose_bytes": 0.0,
            "received": {"Multiply": 0, "Transpose": 0}, "sent": {"Multiply": 0, "Transpose": 0},
            "replies": []}
    for (m, n, k), dtype in [((33, 17, 65), np.float32), ((64, 64, 64), np.float32),
                             ((7, 129, 3), np.float64), ((128, 96, 80), np.float32)]:
        req = pb.MultiplyRequest(a=matrix(rand(m, k, dtype)), b=matrix(rand(k, n, dtype)))
        reply = stub.Multiply(req, timeout=60)
        sent["ok_gemm"] += 1
        sent["flops"] += 2.0 * m * n * k
        sent["received"]["Multiply"] += req.ByteSize()
        sent["sent"]["Multiply"] += reply.ByteSize()
        sent["replies"].append(reply)
    for rows, cols, dtype in [(100, 37, np.float32), (64, 64, np.float64), (1, 513, np.float32)]:
        req = pb.TransposeRequest(a=matrix(rand(rows, cols, dtype)))
        reply = stub.Transpose(req, timeout=60)
        sent["ok_transpose"] += 1
        sent["transpose_bytes"] += 2.0 * rows * cols * np.dtype(dtype).itemsize
        sent["received"]["Transpose"] += req.ByteSize()
        sent["sent"]["Transpose"] += reply.ByteSize()
        sent["replies"].append(reply)
    bad = [pb.MultiplyRequest(a=matrix(rand(3, 4)), b=matrix(rand(5, 6))),  # inner dims differ
           pb.MultiplyRequest(a=matrix(rand(3, 4)), b=matrix(rand(4, 2)), variant="warp9"),
           pb.MultiplyRequest(a=pb.Matrix(rows=2, cols=2, dtype=pb.FP32, data=b"\0" * 5),
                              b=matrix(rand(2, 2)))]
    for req in bad:
        try:
            stub.Multiply(req, timeout=60)
            raise AssertionError("a bad request succeeded")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
        sent["invalid"] += 1
        sent["received"]["Multiply"] += req.ByteSize()
    return sent


def drive_batched(stub):
    """One MultiplyBatched of three 8x5 * 5x6 products (what the batching panels show)."""
    def stacked(rows, cols):
        m = matrix(rand(rows, cols))
        m.data = b"".join(matrix(rand(rows, cols)).data for _ in range(3))
        m.batch = 3
        return m
    reply = stub.MultiplyBatched(pb.MultiplyBatchedRequest(batch=3, a=stacked(8, 5),
                                                           b=stacked(5, 6)), timeout=60)
    assert reply.c.batch == 3, reply.c


def drive_resident(stub):
    """One Upload, one ListResident and one Release of the uploaded matrix (the resident RPCs'
    latency panel)."""
    handle = stub.Upload(pb.UploadRequest(matrix=matrix(rand(16, 9))), timeout=60).resident.handle
    listed = stub.ListResident(pb.ListResidentRequest(), timeout=60).matrices
    assert [m.handle for m in listed] == [handle], listed
    stub.Release(pb.ReleaseRequest(handle=handle), timeout=60)


class ScrapeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server, cls.nvml = start_server()
        cls.sent = drive_mix(cls.server.stub)
        drive_resident(cls.server.stub)
        cls.text = scrape(cls.server.metrics_port)

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        assert code == 0, f"server exit code {code}\n{cls.server.output()}"

    def test_request_counts_match_what_was_sent(self):
        t, s = self.text, self.sent
        self.assertEqual(total(t, "matserve_requests_total", rpc="Multiply", code="OK"),
                         s["ok_gemm"])
        self.assertEqual(total(t, "matserve_requests_total", rpc="Transpose", code="OK"),
                         s["ok_transpose"])
        self.assertEqual(total(t, "matserve_requests_total", code="INVALID_ARGUMENT"),
                         s["invalid"])
        self.assertEqual(total(t, "matserve_requests_total", rpc="Multiply", code="OK",
                               device="cpu", precision="fp64"), 1)
        self.assertEqual(total(t, "matserve_requests_in_flight"), 0)

    def test_bytes_flops_and_sizes_match(self):
        t, s = self.text, self.sent
        for rpc in ("Multiply", "Transpose"):
            self.assertEqual(total(t, "matserve_received_bytes_total", rpc=rpc),
                             s["received"][rpc], rpc)
            self.assertEqual(total(t, "matserve_sent_bytes_total", rpc=rpc), s["sent"][rpc], rpc)
        self.assertEqual(total(t, "matserve_kernel_flops_total"), s["flops"])
        self.assertEqual(total(t, "matserve_kernel_bytes_total"), s["transpose_bytes"])
        self.assertEqual(total(t, "matserve_problem_size_elements_count", op="gemm"), s["ok_gemm"])
        self.assertGreater(total(t, "matserve_kernel_seconds_total", op="gemm"), 0)

    def test_stage_times_add_up_within_the_total(self):
        t = self.text
        ok = self.sent["ok_gemm"] + self.sent["ok_transpose"]
        stages = ("queue", "host_to_device", "kernel", "device_to_host")
        for stage in stages + ("total",):
            self.assertEqual(total(t, "matserve_request_duration_seconds_count", stage=stage,
                                   outcome="ok"), ok)
        # Failed requests observe their total time only (outcome="error").
        self.assertEqual(total(t, "matserve_request_duration_seconds_count", outcome="error"),
                         self.sent["invalid"])
        self.assertEqual(total(t, "matserve_request_duration_seconds_count", stage="queue",
                               outcome="error"), 0)
        parts = sum(total(t, "matserve_request_duration_seconds_sum", stage=s) for s in stages)
        whole = total(t, "matserve_request_duration_seconds_sum", stage="total", outcome="ok")
        self.assertGreater(whole, 0)
        self.assertLessEqual(parts, whole * (1 + 1e-9))
        # And per request, as the replies report them.
        for r in self.sent["replies"]:
            tm = r.timing
            self.assertLessEqual(tm.queue_us + tm.host_to_device_us + tm.kernel_us +
                                 tm.device_to_host_us, tm.total_us * (1 + 1e-9), tm)
        # Histogram buckets are cumulative and end at +Inf == count.
        inf = total(t, "matserve_request_duration_seconds_bucket", stage="total", le="+Inf",
                    outcome="ok")
        self.assertEqual(inf, ok)

    def test_resident_rpcs_observe_their_time(self):
        t = self.text
        family = "matserve_resident_rpc_duration_seconds"
        for rpc in ("Upload", "ListResident", "Release"):
            self.assertEqual(total(t, family + "_count", rpc=rpc, outcome="ok"), 1, rpc)
            self.assertGreater(total(t, family + "_sum", rpc=rpc, outcome="ok"), 0, rpc)
        self.assertEqual(total(t, family + "_count", rpc="Multiply"), 0)

    def test_runtime_and_build_info(self):
        t = self.text
        self.assertEqual(total(t, "matserve_build_info", backend="cpu"), 1)
        self.assertEqual(total(t, "matserve_execution_slots", device="cpu"), 2)  # cpu_concurrency
        self.assertEqual(total(t, "matserve_queue_depth", device="cpu"), 0)
        self.assertEqual(total(t, "matserve_execution_slots_in_use", device="cpu"), 0)
        self.assertTrue(samples(t, "matserve_device_pool_bytes", device="cpu", state="in_use"))
        self.assertTrue(samples(t, "matserve_admission_rejections_total", reason="memory"))

    def test_gpu_gauges_come_from_nvml_when_present(self):
        t = self.text
        if not self.nvml:
            self.assertNotIn("matserve_gpu_", t)
            self.skipTest("fake NVML library not built: only the absence was checked")
        # The fake has two GPUs; the CPU backend uses neither. The server's device is cuda_device
        # (dcgm-exporter's device label is nvidia<N>), so no GPU series has a device label.
        self.assertEqual(len(samples(t, "matserve_gpu_utilization_ratio", cuda_device="unused")),
                         2)
        gpu_lines = [line for line in t.splitlines() if line.startswith("matserve_gpu_")]
        self.assertGreater(len(gpu_lines), 20)
        for line in gpu_lines:
            self.assertNotIn("device", parse_labels(line), line)
        self.assertEqual(total(t, "matserve_gpu_sm_clock_hertz", gpu="0"), 1755e6)
        # DCGM-compatible labels, health and the clock event reasons, through the real server.
        self.assertEqual(total(t, "matserve_gpu_healthy", gpu="0",
                               UUID="GPU-00000000-0000-0000-0000-000000000000"), 1)
        self.assertEqual(total(t, "matserve_gpu_healthy", gpu="1"), 0)
        self.assertEqual(total(t, "matserve_gpu_clock_event_reason_active", gpu="1",
                               reason="hw_thermal_slowdown"), 1)
        self.assertEqual(total(t, "matserve_gpu_power_limit_watts", gpu="1"), 700)
        self.assertEqual(total(t, "matserve_gpu_energy_joules_total", gpu="0"), 123456.789)
        self.assertEqual(samples(t, "matserve_gpu_energy_joules_total", gpu="1"), [])  # unsupported
        self.assertEqual(total(t, "matserve_gpu_ecc_corrected_errors_total", gpu="1"), 3)

    def test_promtool_check_metrics_is_clean(self):
        promtool = shutil.which("promtool")
        if not promtool:
            self.skipTest("promtool not installed (Debian package prometheus)")
        r = subprocess.run([promtool, "check", "metrics"], input=self.text, text=True,
                           capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual((r.stdout + r.stderr).strip(), "", "promtool lint findings")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """Debian's prometheus on loopback with the repo's config and rules, targets replaced."""

    def __init__(self, targets):
        self.dir = tempfile.mkdtemp(prefix="matserve-prom-")
        config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
        config["global"]["scrape_interval"] = "1s"
        config["global"]["evaluation_interval"] = "1s"
        for rules in config.get("rule_files", []):  # relative to the config file
            shutil.copy(ROOT / "deploy/prometheus" / rules, os.path.join(self.dir, rules))
        jobs = [j for j in config["scrape_configs"] if j["job_name"] == "matserve"]
        assert jobs, "deploy/prometheus/prometheus.yml has no matserve job"
        jobs[0]["static_configs"] = [{"targets": list(targets)}]
        config["scrape_configs"] = jobs
        path = os.path.join(self.dir, "prometheus.yml")
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        self.port = free_port()
        self.log = open(os.path.join(self.dir, "prometheus.log"), "w+")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={path}", f"--storage.tsdb.path={self.dir}/data",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.wait(lambda: self.get("/-/ready") is not None, 60, "Prometheus ready")

    def get(self, path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
                return r.read().decode()
        except (OSError, urllib.error.URLError):
            return None

    def query(self, expr):
        """The API's JSON answer (errors included) to an instant query."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                return json.loads(r.read().decode())
        except urllib.error.HTTPError as e:
            return json.loads(e.read().decode() or "{}") or {"status": "error", "error": str(e)}

    def wait(self, ready, seconds, what):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited:\n{self.output()}")
            if ready():
                return
            time.sleep(0.25)
        raise TimeoutError(f"{what} not reached in {seconds} s\n{self.output()}")

    def output(self):
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@unittest.skipUnless(shutil.which("prometheus"), "prometheus not installed (Debian package)")
class DashboardQueryTest(unittest.TestCase):
    """A real Prometheus with the repo's config and rules scraping two servers at once (replicas):
    every dashboard query and every recording rule returns data, every rule evaluates."""

    @classmethod
    def setUpClass(cls):
        cls.servers, cls.prom = [], None
        try:
            for _ in range(2):
                server, cls.nvml = start_server()
                cls.servers.append(server)
            cls.prom = Prometheus(f"127.0.0.1:{s.metrics_port}" for s in cls.servers)
            # Scrapes before, during and after the requests, so rate() has samples on both sides.
            cls.prom.wait(lambda: cls.result("up") == [1.0, 1.0], 30, "first scrapes")
            for _ in range(3):
                for server in cls.servers:
                    drive_mix(server.stub)
                    drive_batched(server.stub)
                    drive_resident(server.stub)
                time.sleep(1.2)
            want = 2 * 3 * (4 + 3 + 3)
            cls.prom.wait(lambda: sum(cls.result("matserve_requests_total")) >= want, 30,
                          "all requests scraped")
            time.sleep(2.5)  # two more scrapes
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.prom:
            cls.prom.stop()
        for server in cls.servers:
            server.stop()

    @classmethod
    def result(cls, expr):
        answer = cls.prom.query(expr)
        if answer.get("status") != "success":
            return []
        return [float(s["value"][1]) for s in answer["data"]["result"]]

    def test_repo_config_passes_promtool(self):
        for what, path in [("config", "deploy/prometheus/prometheus.yml"),
                           ("rules", "deploy/prometheus/rules.yml")]:
            r = subprocess.run(["promtool", "check", what, str(ROOT / path)],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # The alerts' unit tests: synthetic GPU series, replicas sharing a host.
        r = subprocess.run(["promtool", "test", "rules",
                            str(ROOT / "deploy/prometheus/rules_test.yml")],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("SUCCESS", r.stdout)

    def test_every_rule_evaluates_and_every_recording_rule_returns_data(self):
        groups = yaml.safe_load((ROOT / "deploy/prometheus/rules.yml").read_text())["groups"]
        wanted = {r.get("record") or r["alert"] for g in groups for r in g["rules"]}

        def loaded():
            answer = json.loads(self.prom.get("/api/v1/rules") or "{}")
            rules = [r for g in answer.get("data", {}).get("groups", []) for r in g["rules"]]
            return {r["name"]: r for r in rules if r.get("lastEvaluation", "").startswith("2")}
        self.prom.wait(lambda: wanted <= set(loaded()), 30, "every rule evaluated")
        rules = loaded()
        self.assertEqual({n: r["health"] for n, r in rules.items() if r["health"] != "ok"}, {})
        empty = []
        for g in groups:
            for r in g["rules"]:
                if "record" not in r:
                    continue
                values = self.result(r["record"])
                if not values:
                    empty.append(r["record"])
                elif "instance" in r["expr"]:  # one series per replica at least
                    per_instance = self.prom.query(f"count by (instance) ({r['record']})")
                    self.assertEqual(len(per_instance["data"]["result"]), 2, r["record"])
        self.assertEqual(empty, [])

    def test_static_checks_of_the_deploy_files(self):
        check = load_check_dashboard()
        problems = []
        check.check_dashboard(problems)
        check.check_yaml(problems)
        self.assertEqual(problems, [])

    def test_every_dashboard_query_returns_data(self):
        check = load_check_dashboard()
        dashboard = check.load_dashboard()
        # All values of the variables, as Grafana sends them for "All" (allValue ".*"), and a
        # rate window that covers the whole test.
        values = {"instance": ".*", "device": ".*", "variant": ".*", "__rate_interval": "1m",
                  "__interval": "1s", "__range": "5m", "datasource": "prometheus"}
        queries = check.queries(dashboard, values)
        self.assertGreater(len(queries), 20)
        broken, empty = [], []
        for title, ref, expr in queries:
            answer = self.prom.query(expr)
            if answer.get("status") != "success":
                broken.append(f"{title} [{ref}]: {answer.get('error')}: {expr}")
            elif not answer["data"]["result"]:
                if "matserve_gpu_" in expr and not self.nvml:
                    continue  # no fake NVML built: no GPU series to show
                empty.append(f"{title} [{ref}]: {expr}")
        self.assertEqual({"rejected by Prometheus": broken, "without data": empty},
                         {"rejected by Prometheus": [], "without data": []})

    def test_variable_queries_list_the_labels(self):
        check = load_check_dashboard()
        for v in check.load_dashboard()["templating"]["list"]:
            if v["type"] != "query":
                continue
            m = re.fullmatch(r"label_values\((\w+), *(\w+)\)", v["query"]["query"])
            metric, label = m.groups()
            answer = self.prom.query(f"count by ({label}) ({metric})")
            self.assertEqual(answer["status"], "success")
            values = {s["metric"].get(label) for s in answer["data"]["result"]}
            self.assertTrue(values, f"${v['name']}: no values")
            if v["name"] == "device":
                self.assertIn("cpu", values)


if __name__ == "__main__":
    unittest.main()
