"""Handles that route themselves: three servers on loopback, one client target naming all three.

Chains of upload -> multiply on handles (result kept) -> transpose in place -> download run from
the Python client, the asyncio client and matserve-cli; every result is checked against NumPy,
and the chains spread over every replica. Killing one replica fails exactly the chains whose
matrices lived on it, with NOT_FOUND naming that replica, while the others go on.
"""
import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import tempfile
import unittest

import numpy as np

import matserve_client as mc
from matserve_client.aio import AsyncClient
from matserve_client.routing import handle_replica
from server_process import ServerProcess, call, pb

CLI = os.environ.get("MATSERVE_CLI", "matserve-cli")
BENCH = os.environ.get("MATSERVE_BENCH", "matserve-bench")
CHAINS = 200
# Each CLI chain is eight processes: CI runs a few; MATSERVE_ROUTING_CLI_CHAINS=200 runs them all
# (docs/testing.md records such a run).
CLI_CHAINS = int(os.environ.get("MATSERVE_ROUTING_CLI_CHAINS", "6"))


def operands(seed):
    rng = np.random.default_rng(seed)
    m, k, n = (int(x) for x in rng.integers(2, 24, size=3))
    return (rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32))


def check(test, got, a, b):
    want = (a.astype(np.float64) @ b.astype(np.float64)).T
    test.assertEqual(got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def start_replicas():
    """Three servers, their target list and their replica ids."""
    servers = []
    try:
        for i in range(3):
            servers.append(ServerProcess(f"--replica_id=replica-{i}"))
    except BaseException:
        stop_replicas(servers)
        raise
    target = ",".join(s.target for s in servers)
    ids = [call(s.stub.GetServerInfo, pb.GetServerInfoRequest()).replica_id for s in servers]
    return servers, target, ids


def stop_replicas(servers):
    """Stops the servers still running (all of them, whatever happens); each must exit 0."""
    codes = [(s.stop(), s) for s in servers if s.proc.poll() is None]
    for code, s in codes:
        assert code == 0, f"server exit code {code}\n{s.output()}"


def kill(server):
    """SIGKILL: the replica and its resident matrices are gone at once."""
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(timeout=30)
    server.channel.close()


# One chain in three steps for each client: start (upload A, upload B beside it, multiply with
# the result kept), finish (transpose the result in place, download it, release all), check.
def sync_start(client, seed):
    a, b = operands(seed)
    ha = client.upload(a)
    hb = client.upload(b, colocate_with=ha)  # operands of one call share a replica
    c = client.multiply(ha, hb, keep_result=True).resident
    return a, b, (ha, hb, c)


def sync_finish(client, held):
    ha, hb, c = held
    client.transpose(c, in_place=True)
    got = c.download()
    for m in held:
        m.release()
    return got


async def async_start(client, seed):
    a, b = operands(seed)
    ha = await client.upload(a)
    hb = await client.upload(b, colocate_with=ha)
    c = (await client.multiply(ha, hb, keep_result=True)).resident
    return a, b, (ha, hb, c)


async def async_finish(client, held):
    ha, hb, c = held
    await client.transpose(c, in_place=True)
    got = await c.download()
    for m in held:
        await m.release()
    return got


class CliChains:
    """matserve-cli, one process per step."""

    def __init__(self, test, target, tmp):
        self.test, self.target, self.tmp = test, target, tmp

    def cli(self, *args, expect=0):
        p = subprocess.run([CLI, "--target", self.target, "--json", *args], capture_output=True,
                           text=True, timeout=60)
        self.test.assertEqual(p.returncode, expect, p.stdout + p.stderr)
        return json.loads(p.stdout) if expect == 0 else p.stderr

    def start(self, seed, beside=None):
        """beside: a handle A is uploaded next to (its replica); None: round robin."""
        a, b = operands(seed)
        pa, pb_ = (os.path.join(self.tmp, f"{n}{seed}.npy") for n in ("a", "b"))
        np.save(pa, a)
        np.save(pb_, b)
        ha = self.cli("upload", "--a", pa,
                      *(["--colocate-with", beside] if beside else []))["resident"]["handle"]
        hb = self.cli("upload", "--a", pb_, "--colocate-with", ha)["resident"]["handle"]
        c = self.cli("multiply", "--a-handle", ha, "--b-handle", hb,
                     "--keep-result")["result"]["handle"]
        return a, b, (ha, hb, c)

    def finish(self, held, expect=0):
        ha, hb, c = held
        out = os.path.join(self.tmp, "c.npy")
        got = self.cli("transpose", "--a-handle", c, "--in-place", expect=expect)
        if expect:
            return got
        self.cli("download", "--handle", c, "--out", out)
        for h in held:
            self.cli("release", "--handle", h)
        return np.load(out)


class Chains(unittest.TestCase):
    """200 chains from each Python client and CLI_CHAINS from the CLI, over three replicas."""

    @classmethod
    def setUpClass(cls):
        cls.servers, cls.target, cls.ids = start_replicas()

    @classmethod
    def tearDownClass(cls):
        stop_replicas(cls.servers)

    def assertSpread(self, on, chains):
        self.assertEqual(sorted(on), self.ids)
        self.assertEqual(sum(on.values()), chains)
        for n in on.values():  # round robin: about a third each
            self.assertGreaterEqual(n, chains // 3 - 1, on)

    def test_python_sync_chains_match_numpy_and_spread_over_every_replica(self):
        on = {}
        with mc.Client(self.target, timeout=30) as client:
            for i in range(CHAINS):
                a, b, held = sync_start(client, i)
                replicas = {handle_replica(m.handle) for m in held}
                self.assertEqual(len(replicas), 1, [m.handle for m in held])
                rid = replicas.pop()
                on[rid] = on.get(rid, 0) + 1
                check(self, sync_finish(client, held), a, b)
            self.assertEqual(client.list_resident(), [])
        self.assertSpread(on, CHAINS)

    def test_python_asyncio_chains_match_numpy_and_spread_over_every_replica(self):
        async def chain(client, seed, sem):
            async with sem:
                a, b, held = await async_start(client, seed)
                check(self, await async_finish(client, held), a, b)
                return handle_replica(held[2].handle)

        async def main():
            async with AsyncClient(self.target, timeout=30) as client:
                sem = asyncio.Semaphore(16)
                return await asyncio.gather(*(chain(client, i, sem) for i in range(CHAINS)))
        on = {}
        for rid in asyncio.run(main()):
            on[rid] = on.get(rid, 0) + 1
        self.assertSpread(on, CHAINS)

    def test_cli_chains_match_numpy_and_spread_over_every_replica(self):
        on = {}
        with tempfile.TemporaryDirectory() as tmp:
            cli = CliChains(self, self.target, tmp)
            for i in range(CLI_CHAINS):
                a, b, held = cli.start(i)
                self.assertEqual(len({handle_replica(h) for h in held}), 1, held)
                rid = handle_replica(held[2])
                on[rid] = on.get(rid, 0) + 1
                check(self, cli.finish(held), a, b)
        # Each CLI process starts its round robin at a random replica (the kill test places its
        # CLI chains on chosen replicas).
        self.assertLessEqual(set(on), set(self.ids))

    def test_bench_resident_mode_over_three_replicas(self):
        """Each bench worker uploads its operands (beside each other) and multiplies them by
        handle, results kept and released: every call lands on the replica holding them."""
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bench.json")
            p = subprocess.run([BENCH, "--target", self.target, "--json", path, "--shapes", "16",
                                "--modes", "resident", "--concurrency", "6", "--requests", "60",
                                "--warmup", "1", "--release", "inline"],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            with open(path) as f:
                (run,) = json.load(f)["runs"]
        self.assertEqual((run["ok"], run["errors"], run["release_errors"]), (60, 0, 0), run)
        for s in self.servers:  # operands and results all released, on every replica
            self.assertEqual(
                len(call(s.stub.ListResident, pb.ListResidentRequest()).matrices), 0)

    def test_each_replica_says_its_id(self):
        for server, rid in zip(self.servers, self.ids):
            with mc.Client(server.target, timeout=30) as client:
                self.assertEqual(client.server_info().replica_id, rid)
            info = CliChains(self, server.target, "").cli("info")
            self.assertEqual(info["replica_id"], rid)

    def test_a_handle_of_no_replica_of_the_target_is_not_found_naming_it(self):
        with mc.Client(self.target, timeout=30) as client:
            h = client.upload(np.eye(3, dtype=np.float32))
            forged = "elsewhere/" + h.handle.rpartition("/")[2]
            with self.assertRaises(mc.NotFound) as ctx:
                client.multiply(forged_matrix(client, h, forged), np.eye(3, dtype=np.float32))
            self.assertIn("replica 'elsewhere' is not among the replicas", str(ctx.exception))
            h.release()
        # A server named alone answers another replica's handle with NOT_FOUND naming it.
        with mc.Client(self.servers[2].target, timeout=30) as other, \
                mc.Client(self.servers[0].target, timeout=30) as direct:
            h = other.upload(np.eye(2, dtype=np.float32))
            with self.assertRaises(mc.NotFound) as ctx:
                direct.multiply(forged_matrix(direct, h, h.handle), np.eye(2, dtype=np.float32))
            self.assertIn("the handle names replica 'replica-2'", str(ctx.exception))
            h.release()


    def test_shared_memory_regions_go_to_the_replica_they_were_registered_with(self):
        with mc.Client(self.target, timeout=30) as client:
            regions = [client.create_shared_memory(1 << 16) for _ in range(3)]
            for i, region in enumerate(regions * 2):
                a, b = operands(i)
                got = client.multiply(region.put(a, 0), region.put(b, 8192)).c
                np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
            listed = client.list_shared_memory()  # every replica's, together
            self.assertEqual(len(listed), 3, listed)
            per_replica = [len(call(s.stub.ListSharedMemory, pb.ListSharedMemoryRequest()).regions)
                           for s in self.servers]
            self.assertEqual(per_replica, [1, 1, 1])  # registered round robin
            for region in regions:
                region.close()
            self.assertEqual(client.list_shared_memory(), [])


def forged_matrix(client, like, handle):
    """A ResidentMatrix of `client` named by `handle`, shaped as `like`."""
    return mc.ResidentMatrix(client, dataclasses.replace(like.info, handle=handle))


async def all_of(*coroutines, return_exceptions=False):
    """asyncio.gather, run inside the loop."""
    return await asyncio.gather(*coroutines, return_exceptions=return_exceptions)


class KilledReplica(unittest.TestCase):
    def setUp(self):
        self.servers, self.target, self.ids = start_replicas()

    def tearDown(self):
        stop_replicas(self.servers)

    def test_killing_a_replica_fails_only_the_chains_on_it_with_not_found_naming_it(self):
        """Chains from every client are halfway (their matrices made) when replica-1 dies: those
        on it fail with NOT_FOUND naming it, the others finish, and new chains go on."""
        sync = mc.Client(self.target, timeout=30)
        loop = asyncio.new_event_loop()

        async def make_async_client():  # grpc.aio channels belong to the running loop
            return AsyncClient(self.target, timeout=30)
        aio = loop.run_until_complete(make_async_client())
        tmp = tempfile.TemporaryDirectory()
        cli = CliChains(self, self.target, tmp.name)
        try:
            sync_chains = [sync_start(sync, i) for i in range(30)]
            async_chains = loop.run_until_complete(
                all_of(*(async_start(aio, 100 + i) for i in range(30))))
            # CLI chains on chosen replicas: A uploaded beside an anchor the Python client made.
            anchors = [sync.upload(np.eye(1, dtype=np.float32)) for _ in range(3)]
            cli_chains = [cli.start(200 + i, beside=anchors[i % 3].handle) for i in range(3)]
            kill(self.servers[1])

            def lost(handle):
                return handle_replica(handle) == "replica-1"
            failed = 0
            for a, b, held in sync_chains:
                if lost(held[0].handle):
                    with self.assertRaises(mc.NotFound) as ctx:
                        sync_finish(sync, held)
                    self.assertIn("replica 'replica-1'", str(ctx.exception))
                    failed += 1
                else:
                    check(self, sync_finish(sync, held), a, b)
            self.assertEqual(failed, 10)
            results = loop.run_until_complete(all_of(
                *(async_finish(aio, held) for _, _, held in async_chains),
                return_exceptions=True))
            for (a, b, held), got in zip(async_chains, results):
                if lost(held[0].handle):
                    self.assertIsInstance(got, mc.NotFound)
                    self.assertIn("replica 'replica-1'", str(got))
                else:
                    check(self, got, a, b)
            self.assertEqual(sum(lost(h[0].handle) for _, _, h in async_chains), 10)
            self.assertEqual(sum(lost(h[0]) for _, _, h in cli_chains), 1)
            for a, b, held in cli_chains:
                if lost(held[0]):
                    err = cli.finish(held, expect=2)
                    self.assertIn("error: NOT_FOUND", err)
                    self.assertIn("replica 'replica-1'", err)
                else:
                    check(self, cli.finish(held), a, b)
            # New chains go on, on the replicas left.
            for i in range(5):
                a, b, held = sync_start(sync, 1000 + i)
                self.assertFalse(lost(held[0].handle))
                check(self, sync_finish(sync, held), a, b)
                a, b, held = loop.run_until_complete(async_start(aio, 2000 + i))
                self.assertFalse(lost(held[0].handle))
                check(self, loop.run_until_complete(async_finish(aio, held)), a, b)
            a, b, held = cli.start(3000)
            self.assertFalse(lost(held[0]))
            check(self, cli.finish(held), a, b)
        finally:
            sync.close()
            loop.run_until_complete(aio.close())
            loop.close()
            tmp.cleanup()


if __name__ == "__main__":
    unittest.main()
