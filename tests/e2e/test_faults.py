"""Fault tests on the real server (CPU backend in CI): a client cancelling or running out of its
deadline mid-request, SIGTERM under load (health NOT_SERVING first, in-flight requests complete,
new ones refused with UNAVAILABLE, exit 0), memory exhaustion forced through a small
--memory_budget_bytes (RESOURCE_EXHAUSTED, then the server recovers), and a shared-memory object
truncated under a queued call that then faults on every page it writes. After each fault the server
must answer correctly and its pool memory in use must return to the baseline."""
import concurrent.futures
import json
import os
import signal
import subprocess
import time
import unittest
import urllib.request
from multiprocessing import shared_memory

import grpc
import numpy as np

from matserve.v1 import matrix_service_pb2 as pb
from server_process import MAX_MESSAGE, ServerProcess, health_check, matrix
from shm_register import register
from test_service import decode, rand, rel_l2

MIB = 1 << 20


def metric(server, name, **labels):
    """Sum of the samples of `name` whose labels include `labels` (0 when absent)."""
    text = urllib.request.urlopen(
        f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def multiply_call(channel):
    """Multiply on `channel` taking pre-serialized request bytes."""
    return channel.unary_unary("/matserve.v1.MatrixService/Multiply",
                               request_serializer=lambda b: b,
                               response_deserializer=pb.MultiplyReply.FromString)


# The server's OpenBLAS on one thread: requests take long enough, on any machine, to overlap and
# queue as the tests need, and a core stays free for gRPC to receive the next ones.
ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1"}

# A request that holds the one execution slot (--cpu_concurrency=1) while others queue behind it:
# a product of a resident operand with itself, so the request is a few bytes and starts at once,
# while its 2 * 2500^3 = 31 GFLOP of fp64 on one BLAS thread take at least 0.3 s on the fastest
# CPU core and seconds on a loaded one, against milliseconds for a small request on a connected
# channel to arrive and queue.
LONG_N = 2500

OPTS = [("grpc.max_receive_message_length", MAX_MESSAGE),
        ("grpc.max_send_message_length", MAX_MESSAGE)]


def wait_until(predicate, timeout=120.0):
    """Polls `predicate` until it holds. Every wait in these tests is for a state the server must
    reach (a counter it sets); `timeout` is only a bound against a hang, generous enough for a
    loaded 2-core machine, never a timing the test relies on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def in_flight(server):
    return metric(server, "matserve_requests_in_flight")


def connected_channels(server, count):
    channels = [grpc.insecure_channel(server.target, options=OPTS) for _ in range(count)]
    for c in channels:
        grpc.channel_ready_future(c).result(timeout=120)
    return channels


class SlotHolder:
    """Starts a long multiply and waits until the server runs it.

    The long call comes from another process (matserve-cli): calls that one Python process sends
    while it waits for a long reply were seen to reach the server only after that reply, so the
    queue could never form. Cancelling it = ending that process, which cancels its call."""

    def __init__(self, test, server, queued):
        self.server = server
        self.a = rand(LONG_N, LONG_N, np.float64)
        self.handle = server.stub.Upload(pb.UploadRequest(matrix=matrix(self.a)),
                                         timeout=120).resident.handle
        self.channels = connected_channels(server, queued)
        self.cli = subprocess.Popen(
            [os.environ["MATSERVE_CLI"], "--target", server.target, "--json", "multiply",
             "--a-handle", self.handle, "--b-handle", self.handle, "--keep-result"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        test.assertTrue(wait_until(lambda: in_flight(server) >= 1 or self.done()))
        test.assertFalse(self.done(), "the long request ended before it was seen running")

    def done(self):
        return self.cli.poll() is not None

    def queue_behind(self, test, payloads):
        """Sends `payloads` on connected channels; returns their futures once every one is queued
        behind the long request."""
        futures = [multiply_call(c).future(p, timeout=600)
                   for c, p in zip(self.channels, payloads)]
        want = 1 + len(payloads)
        test.assertTrue(wait_until(lambda: in_flight(self.server) >= want or self.done()))
        test.assertFalse(self.done(), "the long request ended before the others queued behind it")
        return futures

    def cancel(self):
        self.cli.kill()

    def finish(self, test, release=True):
        """Waits for the long call; returns the handle of its kept result, or None if it was
        cancelled. Releases the operand (unless the server is stopping)."""
        out, self.stderr = self.cli.communicate(timeout=600)
        for c in self.channels:
            c.close()
        if release:
            self.server.stub.Release(pb.ReleaseRequest(handle=self.handle), timeout=60)
        if self.cli.returncode != 0:
            return None
        return json.loads(out)["result"]["handle"]


class FaultTestBase(unittest.TestCase):
    def assert_healthy_and_correct(self, server):
        self.assertEqual(health_check(server.channel), 1)
        a, b = rand(33, 17), rand(17, 9)
        r = server.stub.Multiply(pb.MultiplyRequest(a=matrix(a), b=matrix(b)), timeout=60)
        self.assertLess(rel_l2(decode(r.c), a.astype(np.float64) @ b), 1e-5)

    def assert_memory_back(self, server, baseline):
        ok = wait_until(lambda: metric(server, "matserve_device_pool_bytes", state="in_use")
                        <= baseline and metric(server, "matserve_requests_in_flight") <= 0)
        self.assertTrue(ok, "pool in_use %s > baseline %s or requests still in flight" % (
            metric(server, "matserve_device_pool_bytes", state="in_use"), baseline))


class CancelAndDeadlineTest(FaultTestBase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--cpu_concurrency=1", env=ONE_BLAS_THREAD)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.output()

    def test_client_cancels_mid_request(self):
        baseline = metric(self.server, "matserve_device_pool_bytes", state="in_use")
        holder = SlotHolder(self, self.server, queued=3)
        small = [(rand(40 + i, 30), rand(30, 20 + i)) for i in range(3)]
        payloads = [pb.MultiplyRequest(a=matrix(a), b=matrix(b)).SerializeToString()
                    for a, b in small]
        futures = holder.queue_behind(self, payloads)
        # Three queued, one running (with keep_result): cancel the queued ones, then the running
        # one, whose result must then be dropped, not kept.
        self.assertEqual(sum(1 for f in futures if f.cancel()), 3)
        holder.cancel()
        for f in futures:
            with self.assertRaises(grpc.FutureCancelledError):
                f.result()
        self.assertIsNone(holder.finish(self))
        self.assertTrue(wait_until(lambda: in_flight(self.server) <= 0))
        self.assertEqual(
            list(self.server.stub.ListResident(pb.ListResidentRequest(), timeout=30).matrices), [])
        self.assert_memory_back(self.server, baseline)
        self.assert_healthy_and_correct(self.server)

    def test_kept_result_of_an_expired_call_is_released_not_published(self):
        # A keep_result multiply whose deadline passes while it runs gets DEADLINE_EXCEEDED, and
        # its result must neither stay resident under a handle nobody was told nor count against
        # the caller's quota. The operand is resident, so the request is a few bytes that the
        # server always receives and starts; its 31 GFLOP of fp64 take far longer than the
        # deadline on any CPU, so the deadline passes while it runs, never after it ends.
        # The quota holds the operand and one result, not two: with the expired call's result
        # kept, the last call below would be refused. The matrix the call names in
        # release_handles stays: a call that fails releases none of them.
        a = rand(LONG_N, LONG_N, np.float64)
        with ServerProcess("--cpu_concurrency=1",
                           "--max_resident_bytes_per_owner=%d" % (a.nbytes * 5 // 2),
                           env=ONE_BLAS_THREAD) as server:
            stub = server.stub
            h = stub.Upload(pb.UploadRequest(matrix=matrix(a)), timeout=120).resident.handle
            x = stub.Upload(pb.UploadRequest(matrix=matrix(rand(4, 4))), timeout=60).resident.handle
            held = metric(server, "matserve_resident_bytes")
            request = pb.MultiplyRequest(a_handle=h, b_handle=h, keep_result=True)
            with self.assertRaises(grpc.RpcError) as ctx:
                stub.Multiply(pb.MultiplyRequest(a_handle=h, b_handle=h, keep_result=True,
                                                 release_handles=[x]), timeout=0.15)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
            # The server finishes the product it had started, then drops its result.
            self.assertTrue(wait_until(lambda: in_flight(server) <= 0))
            listed = stub.ListResident(pb.ListResidentRequest(), timeout=30)
            self.assertEqual(sorted(m.handle for m in listed.matrices), sorted([h, x]))
            self.assertEqual(metric(server, "matserve_resident_bytes"), held)
            kept = stub.Multiply(request, timeout=600).result  # fits: the quota is back
            self.assertEqual((kept.rows, kept.cols), (LONG_N, LONG_N))
            for handle in (kept.handle, h, x):
                stub.Release(pb.ReleaseRequest(handle=handle), timeout=60)
            self.assertEqual(server.stop(), 0)

    def test_a_call_that_expires_while_it_runs_releases_nothing(self):
        # The matrices a call names in release_handles go only with a call that succeeds: one
        # whose deadline passes while it runs fails, and they stay (here with the result meant
        # for the reply; the keep_result case is the test above).
        a = rand(LONG_N, LONG_N, np.float64)
        with ServerProcess("--cpu_concurrency=1", "--max_message_bytes=%d" % (a.nbytes + (1 << 20)),
                           env=ONE_BLAS_THREAD) as server:
            stub = server.stub
            h = stub.Upload(pb.UploadRequest(matrix=matrix(a)), timeout=120).resident.handle
            x = stub.Upload(pb.UploadRequest(matrix=matrix(rand(4, 4))), timeout=60).resident.handle
            with self.assertRaises(grpc.RpcError) as ctx:
                stub.Multiply(pb.MultiplyRequest(a_handle=h, b_handle=h, release_handles=[x]),
                              timeout=0.15)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
            self.assertTrue(wait_until(lambda: in_flight(server) <= 0))
            listed = stub.ListResident(pb.ListResidentRequest(), timeout=30)
            self.assertEqual(sorted(m.handle for m in listed.matrices), sorted([h, x]))
            stub.Release(pb.ReleaseRequest(handles=[h, x]), timeout=60)
            self.assertEqual(server.stop(), 0)

    def test_deadline_expires_mid_request(self):
        baseline = metric(self.server, "matserve_device_pool_bytes", state="in_use")
        a = rand(2400, 2400, np.float64)  # ~2 s each on one BLAS thread: most must expire
        payload = pb.MultiplyRequest(a=matrix(a), b=matrix(a)).SerializeToString()
        channels = [grpc.insecure_channel(self.server.target, options=OPTS) for _ in range(3)]
        futures = [multiply_call(c).future(payload, timeout=0.5) for c in channels]
        expired = 0
        for f in futures:
            try:
                r = f.result()
                self.assertLess(rel_l2(decode(r.c), a @ a), 1e-12)
            except grpc.RpcError as e:
                self.assertEqual(e.code(), grpc.StatusCode.DEADLINE_EXCEEDED, e.details())
                expired += 1
        self.assertGreaterEqual(expired, 2)
        for c in channels:
            c.close()
        self.assert_memory_back(self.server, baseline)
        self.assert_healthy_and_correct(self.server)


class SigtermUnderLoadTest(unittest.TestCase):
    def test_sigterm_under_load(self):
        server = ServerProcess("--cpu_concurrency=1", "--shutdown_grace_seconds=60",
                               env=ONE_BLAS_THREAD)
        # One long request running and five small ones queued behind it when the signal comes.
        holder = SlotHolder(self, server, queued=5)
        inputs = [(rand(60 + 7 * i, 50), rand(50, 40 + 5 * i)) for i in range(5)]
        payloads = [pb.MultiplyRequest(a=matrix(a), b=matrix(b)).SerializeToString()
                    for a, b in inputs]
        futures = holder.queue_behind(self, payloads)
        received = in_flight(server)
        server.proc.send_signal(signal.SIGTERM)
        # Health leaves SERVING first (NOT_SERVING, or refused once the listener closed); the
        # container health check (matserve-cli health) then fails: 4 = NOT_SERVING, 2 = no answer.
        self.assertTrue(wait_until(lambda: self._health(server) != 1))
        if os.environ.get("MATSERVE_CLI"):
            probe = subprocess.run([os.environ["MATSERVE_CLI"], "--target", server.target,
                                    "--deadline-ms", "3000", "health"], capture_output=True,
                                   timeout=30)
            self.assertIn(probe.returncode, (4, 2), probe.stdout + probe.stderr)
        # New calls are refused with UNAVAILABLE, on an open connection and on a new one.
        fresh = grpc.insecure_channel(server.target)
        for channel in (server.channel, fresh):
            with self.assertRaises(grpc.RpcError) as ctx:
                multiply_call(channel)(pb.MultiplyRequest(
                    a=matrix(rand(4, 4)), b=matrix(rand(4, 4))).SerializeToString(), timeout=10)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAVAILABLE,
                             ctx.exception.details())
            # Refused by the draining server, or, once the drain is over, by the closed listener.
            self.assertRegex(ctx.exception.details(), "shutting down|connect",
                             ctx.exception.details())
        fresh.close()
        # Every request the server had received when the signal came completes, correctly. One
        # still being transmitted that arrives during the drain is refused like the new calls
        # above (UNAVAILABLE, "not started"); only one whose transmission outlasts the drain (every
        # running request done) is cut off by gRPC's Shutdown (CANCELLED): docs/deploy.md.
        completed = 0
        kept = holder.finish(self, release=False)  # the server is stopping: no release
        self.assertIsNotNone(kept, "the running request did not complete: " + holder.stderr)
        completed += 1
        for (a, b), f in zip(inputs, futures):
            try:
                reply = f.result()
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.UNAVAILABLE:
                    self.assertIn("not started", e.details())
                else:
                    self.assertEqual(e.code(), grpc.StatusCode.CANCELLED, e.details())
                continue
            completed += 1
            self.assertLess(rel_l2(decode(reply.c), a.astype(np.float64) @ b), 1e-5)
        self.assertGreaterEqual(completed, received)
        self.assertEqual(server.proc.wait(timeout=120), 0, server.output())
        out = server.output()
        self.assertLess(out.index("SIGTERM received"), out.index("matserve: stopped"))

    @staticmethod
    def _health(server):
        try:
            return health_check(server.channel)
        except grpc.RpcError as e:
            return e.code()


class OutOfMemoryTest(FaultTestBase):
    @classmethod
    def setUpClass(cls):
        # No host memory for matrices too large for a GPU: there, a result above a third of the
        # budget would be kept in host memory and computed out of core instead of refused.
        cls.server = ServerProcess("--memory_budget_bytes=%d" % (8 * MIB), "--cpu_concurrency=2",
                                   "--max_host_matrix_bytes=0")

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.output()

    # On the CPU backend inline operands and replies live in the request's own buffers; what
    # takes budgeted memory is a result kept resident (keep_result) or an upload. On a GPU every
    # operand and result takes pool memory, so the same budget bounds inline requests too.
    def keep(self, a, b, timeout=60):
        return self.server.stub.Multiply(
            pb.MultiplyRequest(a=matrix(a), b=matrix(b), keep_result=True), timeout=timeout)

    def test_request_larger_than_the_budget_is_resource_exhausted(self):
        col, row = rand(1500, 1), rand(1, 1500)  # a 1500 x 1500 fp32 result: 8.6 MiB > 8 MiB
        with self.assertRaises(grpc.RpcError) as ctx:
            self.keep(col, row, timeout=30)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("budget", ctx.exception.details())
        self.assert_healthy_and_correct(self.server)

    def test_budget_full_of_residents_refuses_then_recovers(self):
        stub = self.server.stub
        baseline = metric(self.server, "matserve_device_pool_bytes", state="in_use")
        block = rand(512, 512)  # 1 MiB each
        handles = []
        with self.assertRaises(grpc.RpcError) as ctx:
            for _ in range(16):
                handles.append(stub.Upload(pb.UploadRequest(matrix=matrix(block)),
                                           timeout=30).resident.handle)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertGreater(len(handles), 2)
        # Full: a result that fits the budget but not what is left is refused or times out.
        a, b = rand(724, 300), rand(300, 724)  # a 2 MiB result
        with self.assertRaises(grpc.RpcError) as ctx:
            self.keep(a, b, timeout=2)
        self.assertIn(ctx.exception.code(), (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                             grpc.StatusCode.DEADLINE_EXCEEDED))
        self.assert_healthy_and_correct(self.server)
        for h in handles:
            stub.Release(pb.ReleaseRequest(handle=h), timeout=30)
        self.assert_memory_back(self.server, baseline)
        r = self.keep(a, b)
        got = decode(stub.Download(pb.DownloadRequest(handle=r.result.handle), timeout=30).matrix)
        stub.Release(pb.ReleaseRequest(handle=r.result.handle), timeout=30)
        self.assertLess(rel_l2(got, a.astype(np.float64) @ b), 1e-5)
        self.assert_memory_back(self.server, baseline)

    def test_concurrent_pressure_refuses_cleanly_and_recovers(self):
        # 16 clients each keep a 2 MiB result, download it and release it, under an 8 MiB budget.
        # Memory held by resident results does not free itself, so the server refuses what does
        # not fit at once (RESOURCE_EXHAUSTED) instead of queueing; every call either succeeds
        # with a correct result or gets exactly that code, and the memory all comes back.
        stub = self.server.stub
        baseline = metric(self.server, "matserve_device_pool_bytes", state="in_use")

        def one(i):
            a, b = rand(724, 50 + i), rand(50 + i, 724)
            try:
                r = self.keep(a, b, timeout=120)
            except grpc.RpcError as e:
                return e.code()
            got = decode(stub.Download(pb.DownloadRequest(handle=r.result.handle),
                                       timeout=60).matrix)
            stub.Release(pb.ReleaseRequest(handle=r.result.handle), timeout=30)
            return rel_l2(got, a.astype(np.float64) @ b)

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            outcomes = list(pool.map(one, range(16)))
        errors = [o for o in outcomes if isinstance(o, float)]
        refused = [o for o in outcomes if not isinstance(o, float)]
        self.assertTrue(errors, "no request succeeded")
        self.assertLess(max(errors), 1e-5)
        self.assertEqual(set(refused) - {grpc.StatusCode.RESOURCE_EXHAUSTED}, set())
        self.assert_memory_back(self.server, baseline)
        self.assert_healthy_and_correct(self.server)
        r = self.keep(rand(724, 8), rand(8, 724))  # the whole budget is usable again
        stub.Release(pb.ReleaseRequest(handle=r.result.handle), timeout=30)


class TruncatedOutputTest(FaultTestBase):
    """A Transpose of a 2048 x 40000 fp32 matrix from one shared-memory object into another,
    queued behind the one execution slot; the output object is truncated to 0 bytes meanwhile, so
    that the transpose faults on each of the output's 80000 pages, more than the kernel's default
    65530 mappings per process. The call fails with FAILED_PRECONDITION; the server lives."""

    ROWS, COLS = 2048, 40000

    def test_truncated_output_under_a_queued_call(self):
        size = self.ROWS * self.COLS * 4
        with ServerProcess("--cpu_concurrency=1", env=ONE_BLAS_THREAD) as server:
            objects = [shared_memory.SharedMemory(create=True, size=size) for _ in range(2)]
            try:
                stub = server.stub
                for name, obj in zip(("in", "out"), objects):
                    register(stub.RegisterSharedMemory, pb.RegisterSharedMemoryRequest(
                        name=name, key="/" + obj.name, byte_size=size))
                request = pb.TransposeRequest(
                    a=pb.Matrix(rows=self.ROWS, cols=self.COLS, dtype=pb.FP32,
                                shm=pb.SharedMemoryRef(region="in")),
                    output_shm=pb.SharedMemoryRef(region="out"))
                holder = SlotHolder(self, server, queued=1)
                call = holder.channels[0].unary_unary(
                    "/matserve.v1.MatrixService/Transpose",
                    request_serializer=pb.TransposeRequest.SerializeToString,
                    response_deserializer=pb.TransposeReply.FromString)
                future = call.future(request, timeout=600)
                # Validated (the regions found intact) and waiting for the slot.
                self.assertTrue(wait_until(lambda: metric(server, "matserve_queue_depth") >= 1
                                           or holder.done()))
                self.assertFalse(holder.done(), "the long request ended before the transpose "
                                 "queued behind it")
                os.ftruncate(objects[1]._fd, 0)
                with self.assertRaises(grpc.RpcError) as ctx:
                    future.result()
                holder.finish(self)
                self.assertEqual(ctx.exception.code(), grpc.StatusCode.FAILED_PRECONDITION,
                                 ctx.exception.details())
                self.assertTrue(ctx.exception.details().startswith("shared-memory region 'out'"),
                                ctx.exception.details())  # from the fault, not validation
                self.assertIsNone(server.proc.poll(), server.output())
                # The region keeps failing (its pages are no longer the object's) ...
                with self.assertRaises(grpc.RpcError) as ctx:
                    stub.Transpose(request, timeout=60)
                self.assertEqual(ctx.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
                # ... until it is registered again; the server serves on.
                stub.UnregisterSharedMemory(pb.UnregisterSharedMemoryRequest(), timeout=60)
                self.assert_healthy_and_correct(server)
                self.assertEqual(server.stop(), 0)
            finally:
                for obj in objects:
                    obj.close()
                    obj.unlink()


class BudgetClampTest(unittest.TestCase):
    def test_a_budget_larger_than_memory_is_clamped_and_logged(self):
        with ServerProcess("--memory_budget_bytes=%d" % (1 << 50)) as server:
            out = server.output()
            self.assertIn("WARNING: --memory_budget_bytes=%d is more than 90%% of device 0's "
                          "memory; clamped to" % (1 << 50), out)
            budget = int(out.split("clamped to ", 1)[1].split()[0])
            self.assertLess(budget, 1 << 50)
            self.assertRegex(out, r"matserve: \d+ CPUs usable")
            info = server.stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=30)
            self.assertEqual(info.devices[0].memory_total_bytes, budget)
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
