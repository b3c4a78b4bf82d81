"""Stripes creating a call's operands: all at once, every handle recorded (also when one create
fails), and a matrix a multi-GPU server placed on another device made again beside the first.
The stripes' RPCs are replaced by recording fakes: no server."""
import asyncio
import threading
import unittest

import grpc
import numpy as np

from matserve_client import striped
from matserve_client._stubs import pb
from matserve_client.auth import CallMetadata
from matserve_client.encoding import prepare
from matserve_client.errors import ResourceExhausted, error_for


class FakeServer:
    """CreateResident and Release as a two-GPU server answers them: a new matrix goes beside
    `colocate_with`, else to the device `placements` gives its row count (the operands have
    different ones). Handles name the operand and the how-manieth matrix made for it."""

    def __init__(self, placements, refuse=(), release_fails=False):
        self.placements = placements
        self.refuse = set(refuse)  # row counts whose creation is refused as out of memory
        self.release_fails = release_fails  # every Release fails (the connection dropped)
        self.devices = {}
        self.made = {}
        self.released = []
        self.lock = threading.Lock()

    def create(self, request):
        rows = request.header.rows
        if rows in self.refuse:
            raise error_for(grpc.StatusCode.RESOURCE_EXHAUSTED, "device memory: full")
        with self.lock:
            self.made[rows] = self.made.get(rows, 0) + 1
            handle = f"r{rows}.{self.made[rows]}"
            device = (self.devices[request.colocate_with] if request.colocate_with
                      else self.placements[rows])
            self.devices[handle] = device
        return pb.UploadReply(resident=pb.ResidentInfo(handle=handle, device=device))

    def release(self, request):
        if self.release_fails:
            raise Unreachable()
        with self.lock:
            self.released.extend(request.handles)
        return pb.ReleaseReply()


class Unreachable(grpc.RpcError):
    """A call that failed in transport, as grpcio raises it."""


def sync_stripes(server, count=2):
    stripes = striped.Stripes("127.0.0.1:1", count, 1 << 20, [], None, CallMetadata())
    stripes._calls = [(lambda r, timeout=None: server.create(r), None, None,
                       lambda r, timeout=None: server.release(r))] * count
    return stripes


def async_stripes(server, count=2):
    async def create(r, timeout=None, metadata=None):
        return server.create(r)

    async def release(r, timeout=None, metadata=None):
        return server.release(r)

    stripes = striped.AsyncStripes.__new__(striped.AsyncStripes)
    stripes.chunk_bytes = 1 << 20
    stripes._channels = []
    stripes._calls = [(create, None, None, release)] * count
    return stripes


OPERANDS = [prepare(np.ones((3, 4), np.float32)), prepare(np.ones((4, 5), np.float32))]


class CreateAllTest(unittest.TestCase):
    def create_all(self, server, made):
        """The operands created through sync stripes on `server`; handles made into `made`."""
        stripes = sync_stripes(server)
        self.addCleanup(stripes.close)
        return stripes._create_all(OPERANDS, None, made, "")

    def test_operands_on_one_device_are_kept(self):
        server = FakeServer({3: "cuda:0", 4: "cuda:0"})
        made = []
        infos = self.create_all(server, made)
        self.assertEqual([i.handle for i in infos], ["r3.1", "r4.1"])
        self.assertEqual(sorted(made), ["r3.1", "r4.1"])
        self.assertEqual(server.released, [])

    def test_an_operand_placed_apart_is_made_again_beside_the_first(self):
        server = FakeServer({3: "cuda:0", 4: "cuda:1"})
        made = []
        infos = self.create_all(server, made)
        self.assertEqual([(i.handle, i.device) for i in infos],
                         [("r3.1", "cuda:0"), ("r4.2", "cuda:0")])
        self.assertEqual(server.released, ["r4.1"])
        self.assertEqual(sorted(made), ["r3.1", "r4.2"])

    def test_a_misplaced_matrix_not_released_is_left_for_the_caller(self):
        server = FakeServer({3: "cuda:0", 4: "cuda:1"}, release_fails=True)
        made = []
        infos = self.create_all(server, made)
        self.assertEqual([i.handle for i in infos], ["r3.1", "r4.2"])
        self.assertEqual(sorted(made), ["r3.1", "r4.1", "r4.2"])

    def test_every_handle_made_is_recorded_when_a_create_fails(self):
        server = FakeServer({3: "cuda:0", 4: "cuda:0"}, refuse={3})
        made = []
        with self.assertRaises(ResourceExhausted):
            self.create_all(server, made)
        self.assertEqual(made, ["r4.1"])  # the caller releases it

    def test_the_asyncio_stripes_do_the_same(self):
        server = FakeServer({3: "cuda:0", 4: "cuda:1"})
        made = []

        async def run():
            stripes = async_stripes(server)
            stripes._run = lambda ranges, one: asyncio.sleep(0)  # no ranges to write here
            return await stripes.put(OPERANDS, None, None, made)

        infos = asyncio.run(run())
        self.assertEqual([(i.handle, i.device) for i in infos],
                         [("r3.1", "cuda:0"), ("r4.2", "cuda:0")])
        self.assertEqual(server.released, ["r4.1"])
        self.assertEqual(sorted(made), ["r3.1", "r4.2"])


if __name__ == "__main__":
    unittest.main()
