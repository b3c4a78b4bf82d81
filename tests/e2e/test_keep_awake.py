"""--keep_cpus_awake_ms end to end: the real server with its idle-priority spinners.

One spinner per CPU the server may use, at SCHED_IDLE (read back from /proc), spinning while
calls arrive and parked (no CPU time) when they stop; health checks do not wake them; answers stay
correct; a bad value is refused at start with the flag's name and range.
"""
import os
import subprocess
import time
import unittest

import numpy as np

from matserve.v1 import matrix_service_pb2 as pb
from server_process import ServerProcess, health_check, matrix

SCHED_IDLE = 5


def idle_priority_threads(pid):
    """(count, CPU seconds) of the process's SCHED_IDLE threads: the spinners, and only them (the
    server's other threads, e.g. a BLAS pool spinning after start-up, are not counted)."""
    count, ticks = 0, 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # a thread that just exited
            continue
        if int(fields[38]) == SCHED_IDLE:  # field 41, `policy`
            count += 1
            ticks += int(fields[11]) + int(fields[12])  # utime + stime
    return count, ticks / os.sysconf("SC_CLK_TCK")


def thread_names(pid):
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:  # a thread that just exited
            pass
    return names


def spinner_seconds(pid):
    return idle_priority_threads(pid)[1]


def keep_awake_gauge(server):
    """matserve_keep_awake_threads by state, from the server's /metrics."""
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics",
                                  timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("matserve_keep_awake_threads{"):
            state = line.split('state="', 1)[1].split('"', 1)[0]
            out[state] = float(line.rsplit(" ", 1)[1])
    return out


class KeepCpusAwakeTest(unittest.TestCase):
    def test_bad_value_is_refused_at_start(self):
        binary = os.environ.get("MATSERVE_SERVER", "matserve")
        r = subprocess.run([binary, "--listen=127.0.0.1:0", "--metrics_listen=", "--backend=cpu",
                            "--keep_cpus_awake_ms=-5"], capture_output=True, text=True,
                           timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("keep_cpus_awake_ms: must be in [0, 60000]", r.stderr)

    def test_spinners_run_while_calls_arrive_and_park_after(self):
        # CPU time is read per thread from /proc, in clock ticks (10 ms): the bounds are wide.
        cpus = len(os.sched_getaffinity(0))
        with ServerProcess("--keep_cpus_awake_ms=100") as server:
            pid = server.proc.pid
            self.assertIn(f"keeping {cpus} CPUs awake for 100 ms after each call while at most 1 "
                          f"are in flight ({cpus} at idle priority)", server.output())
            self.assertEqual(idle_priority_threads(pid)[0], cpus)
            self.assertEqual(thread_names(pid).count("keep-awake"), cpus)  # as top -H shows them

            # Before any call the spinners are parked.
            t0 = spinner_seconds(pid)
            time.sleep(0.5)
            self.assertLess(spinner_seconds(pid) - t0, 0.1, "spinning before any call")

            # Health checks (a load balancer's probes) do not count as work.
            for _ in range(10):
                self.assertEqual(health_check(server.channel), 1)
            time.sleep(0.2)
            self.assertLess(spinner_seconds(pid) - t0, 0.1, "health checks woke the spinners")

            # Multiplies every 20 ms keep the window open, until the server reports a spinner in
            # its spin loop. At idle priority a spinner runs only on an idle CPU: on a loaded
            # machine that may take seconds, so this waits for the state, not for a time.
            rng = np.random.default_rng(7)
            a = rng.uniform(-1, 1, (33, 17)).astype(np.float32)
            b = rng.uniform(-1, 1, (17, 29)).astype(np.float32)
            want = a.astype(np.float64) @ b.astype(np.float64)
            until = time.monotonic() + 120  # a bound against a hang, not a timing
            spinning = 0.0
            while spinning == 0.0 and time.monotonic() < until:
                r = server.stub.Multiply(pb.MultiplyRequest(a=matrix(a), b=matrix(b)), timeout=30)
                got = np.frombuffer(r.c.data, dtype=np.float32).reshape(33, 29)
                self.assertLess(np.linalg.norm(got - want) / np.linalg.norm(want), 1e-5)
                spinning = keep_awake_gauge(server)["spinning"]
                time.sleep(0.02)
            self.assertGreater(spinning, 0.0, "no spinner ran while calls arrived")

            # Past the window they park: a spinner given a CPU then parks at once, so over any
            # half second they use (nearly) no CPU, however loaded the machine is.
            time.sleep(0.5)
            t0 = spinner_seconds(pid)
            time.sleep(0.5)
            self.assertLess(spinner_seconds(pid) - t0, 0.1, "still spinning after the window")
            gauge = keep_awake_gauge(server)
            self.assertEqual(gauge["spinning"] + gauge["parked"], float(cpus))
            self.assertEqual(server.stop(), 0)

    def test_off_by_default_with_zero_series(self):
        with ServerProcess() as server:
            self.assertNotIn("CPUs awake", server.output())
            self.assertEqual(idle_priority_threads(server.proc.pid)[0], 0)
            self.assertEqual(keep_awake_gauge(server), {"spinning": 0.0, "parked": 0.0})


if __name__ == "__main__":
    unittest.main()
