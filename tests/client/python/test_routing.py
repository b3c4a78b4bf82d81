"""Routing over several replicas, without a server: parsing targets and handles, finding the
handles and regions a request names, and where RoutingStub and AsyncRoutingStub send each call
(fake replicas record what they receive)."""
import asyncio
import unittest

import grpc

from fakes import FakeRpcError
from matserve_client import routing
from matserve_client._stubs import pb

SECRET = "0123456789abcdef" * 2


class ParsingTest(unittest.TestCase):
    def test_the_replica_id_reads_back_from_a_handle(self):
        self.assertEqual(routing.handle_replica(f"pod-1:50051/{SECRET}"), "pod-1:50051")
        self.assertEqual(routing.handle_replica(f"a.b_c-d/{SECRET}"), "a.b_c-d")
        for bare in (SECRET, f"/{SECRET}", f"a b/{SECRET}", "", f"{'r' * 49}/{SECRET}"):
            self.assertIsNone(routing.handle_replica(bare), bare)

    def test_targets_naming_several_replicas(self):
        self.assertEqual(routing.replica_addresses("a:1, b:2,c:3"), ["a:1", "b:2", "c:3"])
        self.assertIsNone(routing.replica_addresses("localhost:50051"))
        self.assertIsNone(routing.replica_addresses("unix:/tmp/s"))
        with self.assertRaisesRegex(ValueError, "empty address"):
            routing.replica_addresses("a:1,,b:2")
        asked = []

        def resolver(name):
            asked.append(name)
            return ["ipv4:10.0.0.1:50051", "ipv4:10.0.0.2:50051"]
        self.assertEqual(routing.replica_addresses("dns:///svc.ns:50051", resolver),
                         ["ipv4:10.0.0.1:50051", "ipv4:10.0.0.2:50051"])
        self.assertEqual(asked, ["svc.ns:50051"])
        with self.assertRaisesRegex(ValueError, "resolves to no address"):
            routing.replica_addresses("dns:///x:1", lambda name: [])

    def test_dns_resolution_gives_one_target_per_address(self):
        addresses = routing.resolve("127.0.0.1:7")
        self.assertEqual(addresses, ["ipv4:127.0.0.1:7"])
        self.assertEqual(routing._address("::1", "9"), "ipv6:[::1]:9")

    def test_dns_channels_keep_the_name_as_authority_and_tls_name(self):
        self.assertEqual(routing.channel_options("dns:///svc.ns:50051"),
                         [("grpc.default_authority", "svc.ns:50051"),
                          ("grpc.ssl_target_name_override", "svc.ns")])
        self.assertEqual(routing.channel_options("a:1,b:2"), [])
        self.assertEqual(routing.channel_options(
            "dns:///svc:1", [("grpc.ssl_target_name_override", "x")]),
            [("grpc.default_authority", "svc:1")])

    def test_handles_and_regions_a_request_names(self):
        r = pb.MultiplyRequest(a=pb.Matrix(rows=1, cols=1, data=b"\0" * 4), b_handle="r2/x")
        self.assertEqual(routing.named_handles(r), ["r2/x"])
        r = pb.MultiplyBatchedRequest(a_handles=["r1/a", "r1/b"], b_handles=["r1/c"])
        self.assertEqual(routing.named_handles(r), ["r1/a", "r1/b", "r1/c"])
        self.assertEqual(routing.named_handles(pb.UploadChunk(colocate_with="r3/y")), ["r3/y"])
        self.assertEqual(routing.named_handles(pb.ReleaseRequest(handles=["p/1", "q/2"])),
                         ["p/1", "q/2"])
        r = pb.MultiplyRequest(a=pb.Matrix(shm=pb.SharedMemoryRef(region="img")),
                               b=pb.Matrix(data=b"x"))
        self.assertEqual((routing.named_handles(r), routing.named_regions(r)), ([], ["img"]))
        reply = pb.MultiplyBatchedReply(results=[pb.ResidentInfo(handle="r1/k")])
        self.assertEqual(routing.named_handles(reply), ["r1/k"])


class FakeCalls:
    """One replica's MatrixService: records (method, request); replies from `answers`."""

    def __init__(self, name, log, replica_id=None):
        self.name, self.log, self.replica_id = name, log, replica_id
        self.down = False
        self.handles = 0

    def _answer(self, method, request):
        self.log.append((self.name, method))
        if self.down:
            raise FakeRpcError(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses")
        if method == "GetServerInfo":
            return pb.GetServerInfoReply(replica_id=self.replica_id or "")
        if method in ("Upload", "CreateResident"):
            self.handles += 1
            return pb.UploadReply(resident=pb.ResidentInfo(
                handle=f"{self.replica_id}/{self.handles:032x}"))
        if method == "Release":
            return pb.ReleaseReply(bytes_freed=4 * len(request.handles))
        if method == "ListResident":
            return pb.ListResidentReply(matrices=[pb.ResidentInfo(handle=f"{self.replica_id}/m")])
        if method == "UnregisterSharedMemory":
            return pb.UnregisterSharedMemoryReply(unregistered=1)
        return getattr(pb, method + "Reply")()

    def __getattr__(self, method):
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda request, **kw: self._answer(method, request)


class AsyncFakeCalls(FakeCalls):
    def __getattr__(self, method):
        if method.startswith("_"):
            raise AttributeError(method)

        async def call(request, **kw):
            return self._answer(method, request)
        return call


def replicas(cls=FakeCalls, ids=("r0", "r1", "r2")):
    log = []
    fakes = [cls(f"addr{i}", log, rid) for i, rid in enumerate(ids)]
    table = routing.Table("addr0,addr1,addr2",
                          [routing.Replica(f.name, None, f) for f in fakes], start=0)
    return table, fakes, log


class RoutingStubTest(unittest.TestCase):
    def setUp(self):
        self.table, self.fakes, self.log = replicas()
        self.stub = routing.RoutingStub(self.table, {})

    def test_inline_calls_go_round_robin(self):
        for _ in range(6):
            self.stub.Multiply(pb.MultiplyRequest(a=pb.Matrix(data=b"x")))
        self.assertEqual([name for name, _ in self.log],
                         ["addr0", "addr1", "addr2", "addr0", "addr1", "addr2"])

    def test_calls_on_a_handle_go_to_the_replica_that_made_it(self):
        handles = [self.stub.Upload(pb.UploadRequest()).resident.handle for _ in range(3)]
        self.assertEqual([routing.handle_replica(h) for h in handles], ["r0", "r1", "r2"])
        self.log.clear()
        for h in handles * 2:
            self.stub.Multiply(pb.MultiplyRequest(a_handle=h, b_handle=h))
            self.stub.Transpose(pb.TransposeRequest(a_handle=h, in_place=True))
            self.stub.Download(pb.DownloadRequest(handle=h))
        expected = [f"addr{i}" for i in (0, 1, 2, 0, 1, 2) for _ in range(3)]
        self.assertEqual([name for name, _ in self.log], expected)
        self.assertNotIn("GetServerInfo", [m for _, m in self.log])  # learnt from the replies

    def test_a_handle_made_elsewhere_is_routed_after_asking_each_replica_its_id(self):
        self.stub.Download(pb.DownloadRequest(handle=f"r2/{SECRET}"))
        self.assertEqual(self.log[-1], ("addr2", "Download"))
        self.assertEqual(sorted(m for _, m in self.log).count("GetServerInfo"), 3)
        self.log.clear()
        self.stub.Download(pb.DownloadRequest(handle=f"r1/{SECRET}"))
        self.assertEqual(self.log, [("addr1", "Download")])  # ids are remembered

    def test_an_unknown_replica_is_not_found_naming_it(self):
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.Multiply(pb.MultiplyRequest(a_handle=f"r9/{SECRET}", b_handle="x"))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertIn("replica 'r9' is not among the replicas of target", ctx.exception.details())
        self.assertIn("known: r0, r1, r2", ctx.exception.details())
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.Download(pb.DownloadRequest(handle=SECRET))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertIn("names no replica", ctx.exception.details())

    def test_a_gone_replica_fails_its_handles_with_not_found_and_only_those(self):
        handles = [self.stub.Upload(pb.UploadRequest()).resident.handle for _ in range(3)]
        self.fakes[1].down = True
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.Transpose(pb.TransposeRequest(a_handle=handles[1], in_place=True))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertIn("replica 'r1' (addr1) that holds it is not reachable",
                      ctx.exception.details())
        for h in (handles[0], handles[2]):
            self.stub.Transpose(pb.TransposeRequest(a_handle=h, in_place=True))
        # Calls on no handle skip it: the next replica in turn takes them.
        self.log.clear()
        for _ in range(4):
            self.stub.Upload(pb.UploadRequest())
        served = [name for name, m in self.log if name != "addr1"]
        self.assertEqual(len(served), 4)

    def test_release_of_several_handles_goes_to_each_holder(self):
        handles = [self.stub.Upload(pb.UploadRequest()).resident.handle for _ in range(3)]
        self.log.clear()
        reply = self.stub.Release(pb.ReleaseRequest(handles=handles + handles[:1]))
        self.assertEqual(reply.bytes_freed, 16)
        self.assertEqual(sorted(self.log), [("addr0", "Release"), ("addr1", "Release"),
                                            ("addr2", "Release")])

    def test_lists_merge_every_replica(self):
        reply = self.stub.ListResident(pb.ListResidentRequest())
        self.assertEqual([m.handle for m in reply.matrices], ["r0/m", "r1/m", "r2/m"])
        self.assertEqual(self.stub.UnregisterSharedMemory(
            pb.UnregisterSharedMemoryRequest()).unregistered, 3)

    def test_region_calls_go_where_the_region_was_registered(self):
        self.stub.ListKernels(pb.ListKernelsRequest())  # turn: the next call goes to addr1
        self.stub.RegisterSharedMemory(pb.RegisterSharedMemoryRequest(name="img"))
        self.assertEqual(self.log[-1], ("addr1", "RegisterSharedMemory"))
        for _ in range(3):
            self.stub.Multiply(pb.MultiplyRequest(a=pb.Matrix(shm=pb.SharedMemoryRef(
                region="img")), b=pb.Matrix(data=b"x")))
            self.assertEqual(self.log[-1], ("addr1", "Multiply"))
        self.stub.UnregisterSharedMemory(pb.UnregisterSharedMemoryRequest(name="img"))
        self.assertEqual(self.log[-1], ("addr1", "UnregisterSharedMemory"))

    def test_every_try_of_a_registration_goes_to_one_replica(self):
        for _ in range(3):  # e.g. a first try answered with a nonce, then the try that proves it
            self.stub.RegisterSharedMemory(pb.RegisterSharedMemoryRequest(name="r"))
        self.assertEqual({name for name, _ in self.log}, {"addr0"})

    def test_upload_stream_routes_on_its_first_chunk(self):
        h = f"r2/{SECRET}"
        self.stub.Download(pb.DownloadRequest(handle=h))  # learns the ids
        self.log.clear()
        got = []

        def upload_stream(chunks, **kw):
            got.extend(chunks)
            return pb.UploadReply()
        self.fakes[2].UploadStream = upload_stream
        chunks = [pb.UploadChunk(colocate_with=h), pb.UploadChunk(data=b"x")]
        self.stub.UploadStream(iter(chunks))
        self.assertEqual(got, chunks)


class AsyncRoutingStubTest(unittest.TestCase):
    def test_the_same_rules_for_asyncio(self):
        table, fakes, log = replicas(AsyncFakeCalls)
        stub = routing.AsyncRoutingStub(table, {})

        async def main():
            handles = [(await stub.Upload(pb.UploadRequest())).resident.handle
                       for _ in range(3)]
            log.clear()
            for h in reversed(handles):
                await stub.Multiply(pb.MultiplyRequest(a_handle=h, b_handle=h))
            self.assertEqual(log, [("addr2", "Multiply"), ("addr1", "Multiply"),
                                   ("addr0", "Multiply")])
            await stub.Download(pb.DownloadRequest(handle=f"r1/{SECRET}"))
            self.assertEqual(log[-1], ("addr1", "Download"))
            fakes[0].down = True
            with self.assertRaises(grpc.RpcError) as ctx:
                await stub.Download(pb.DownloadRequest(handle=handles[0]))
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
            self.assertIn("replica 'r0' (addr0)", ctx.exception.details())
            with self.assertRaises(grpc.RpcError) as ctx:
                await stub.Download(pb.DownloadRequest(handle=f"r7/{SECRET}"))
            self.assertIn("replica 'r7' is not among", ctx.exception.details())
            for _ in range(4):  # inline calls skip the replica that is down
                await stub.Multiply(pb.MultiplyRequest())
            reply = await stub.Release(pb.ReleaseRequest(handles=handles[1:]))
            self.assertEqual(reply.bytes_freed, 8)
        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
