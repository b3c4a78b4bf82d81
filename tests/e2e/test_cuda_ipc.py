"""End-to-end on a GPU: CUDA memory regions (CUDA IPC). A client process (this one, with PyTorch)
exports its tensors; the real server multiplies and transposes straight from and into them on the
GPU. Checked: results against float64 for every place mix and precision, e4m3 tensors bit for bit
against the same call inline, no host-to-device stage when everything is on the device, the
registration errors, and the server serving on after them.
Skipped without PyTorch on a CUDA device or without MATSERVE_BACKEND=cuda.
"""
import os
import unittest

import grpc
import numpy as np

from matserve.v1 import matrix_service_pb2 as pb
from server_process import ServerProcess, matrix

try:
    import torch
    HAVE_CUDA = torch.cuda.is_available()
except ImportError:
    HAVE_CUDA = False

from matserve_client import Client  # noqa: E402


def rel_l2(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


@unittest.skipUnless(HAVE_CUDA and os.environ.get("MATSERVE_BACKEND") == "cuda",
                     "needs PyTorch on a CUDA device and MATSERVE_BACKEND=cuda")
class CudaIpcTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess(backend="cuda")
        cls.client = Client(cls.server.target, timeout=60)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        assert cls.server.stop() == 0, cls.server.output()

    def tearDown(self):
        self.assertEqual(self.client.list_shared_memory(), [])

    def rand(self, rows, cols, dtype=None):
        dtype = dtype or torch.float32
        g = torch.Generator(device="cuda").manual_seed(rows * 7919 + cols)
        sign = torch.where(torch.rand(rows, cols, device="cuda", generator=g) < 0.5, -1.0, 1.0)
        mag = 0.25 + 0.75 * torch.rand(rows, cols, device="cuda", generator=g)
        return (sign * mag).to(dtype)

    def test_operands_and_result_in_gpu_tensors(self):
        for m, k, n in [(1, 1, 1), (127, 61, 253), (512, 512, 512)]:
            a, b = self.rand(m, k), self.rand(k, n)
            out = torch.full((m, n), float("nan"), device="cuda")
            with self.client.cuda_matrix(a) as ca, self.client.cuda_matrix(b) as cb, \
                    self.client.cuda_matrix(out) as co:
                r = self.client.multiply(ca, cb, out=co, compute="fp32")
                self.assertIs(r.c, out)
                self.assertEqual(r.timing.host_to_device_us, 0.0)
                torch.cuda.synchronize()
                want = a.double() @ b.double()
                self.assertLess(rel_l2(out.cpu(), want.cpu()), 1e-5, (m, k, n))

    def test_mixed_places_transposes_alpha_beta(self):
        at, b, c = self.rand(40, 30), self.rand(40, 20).cpu().numpy(), self.rand(30, 20)
        out = torch.empty(30, 20, device="cuda")
        with self.client.cuda_matrix(at) as ca, self.client.cuda_matrix(c) as cc, \
                self.client.cuda_matrix(out) as co:
            self.client.multiply(ca, b, c=cc, alpha=0.5, beta=-2.0, transpose_a=True, out=co)
            want = 0.5 * at.double().T.cpu().numpy() @ b.astype(np.float64) - 2.0 * c.double().cpu().numpy()
            self.assertLess(rel_l2(out.cpu(), want), 1e-5)
            inline = self.client.multiply(ca, b, transpose_a=True)  # result in the reply
            self.assertLess(rel_l2(inline.c, at.double().T.cpu().numpy() @ b), 1e-5)

    def test_half_precisions_and_column_major(self):
        for dt, tol in [(torch.float16, 2e-2), (torch.bfloat16, 2e-2)]:
            a, b = self.rand(96, 64, dt), self.rand(64, 80, dt)
            out = torch.empty(80, 96, device="cuda").t()  # 96 x 80, column-major fp32
            with self.client.cuda_matrix(a) as ca, self.client.cuda_matrix(b) as cb, \
                    self.client.cuda_matrix(out) as co:
                self.assertEqual(co.order, "F")
                self.client.multiply(ca, cb, out=co, out_dtype="fp32")
                want = a.double() @ b.double()
                self.assertLess(rel_l2(out.cpu(), want.cpu()), tol, dt)

    def test_fp8_e4m3_tensors(self):
        # torch.float8_e4m3fn operands in the client's GPU memory, bf16 result into a GPU tensor:
        # bit for bit what the same product gives with the operands' bytes in the messages.
        a = self.rand(96, 64).to(torch.float8_e4m3fn)
        for transpose_b, b in ((True, self.rand(80, 64)), (False, self.rand(64, 80))):
            b = b.to(torch.float8_e4m3fn)
            out = torch.full((96, 80), float("nan"), device="cuda", dtype=torch.bfloat16)
            with self.client.cuda_matrix(a) as ca, self.client.cuda_matrix(b) as cb, \
                    self.client.cuda_matrix(out) as co:
                self.assertEqual((ca.dtype, cb.dtype), ("fp8_e4m3", "fp8_e4m3"))
                self.client.multiply(ca, cb, out=co, transpose_b=transpose_b, compute="fp8",
                                     out_dtype="bf16")
                torch.cuda.synchronize()
            inline = self.client.multiply(a.cpu(), b.cpu(), transpose_b=transpose_b,
                                          compute="fp8", out_dtype="bf16", bf16_bits=True)
            got = out.cpu().view(torch.int16).numpy().view(np.uint16)
            np.testing.assert_array_equal(got, inline.c.bits, f"transpose_b={transpose_b}")

    def test_transpose_into_a_gpu_tensor(self):
        a = self.rand(65, 33)
        out = torch.empty(33, 65, device="cuda")
        with self.client.cuda_matrix(a) as ca, self.client.cuda_matrix(out) as co:
            r = self.client.transpose(ca, scale=2.0, out=co)
            self.assertIs(r.b, out)
            torch.cuda.synchronize()
            self.assertTrue(torch.equal(out, 2 * a.t()))

    def test_registration_errors_and_the_server_serves_on(self):
        stub = self.server.stub
        t = torch.zeros(1024, device="cuda")
        ptr = t.data_ptr()
        from matserve_client.cuda_memory import export_allocation
        handle, offset = export_allocation(ptr)
        cases = [
            (grpc.StatusCode.INVALID_ARGUMENT, "ipc_handle: 10 bytes, expected 64",
             pb.RegisterCudaMemoryRequest(name="x", ipc_handle=b"0123456789", byte_size=4)),
            (grpc.StatusCode.INVALID_ARGUMENT, "ipc_handle: the driver cannot open it",
             pb.RegisterCudaMemoryRequest(name="x", ipc_handle=bytes(64), byte_size=4)),
            (grpc.StatusCode.INVALID_ARGUMENT, "exceeds the",
             pb.RegisterCudaMemoryRequest(name="x", ipc_handle=handle, offset=offset,
                                          byte_size=1 << 40)),
        ]
        for code, fragment, request in cases:
            with self.assertRaises(grpc.RpcError) as ctx:
                stub.RegisterCudaMemory(request, timeout=30)
            self.assertEqual(ctx.exception.code(), code, ctx.exception.details())
            self.assertIn(fragment, ctx.exception.details())
        info = stub.RegisterCudaMemory(pb.RegisterCudaMemoryRequest(
            name="ok", ipc_handle=handle, offset=offset, byte_size=4096), timeout=30).region
        self.assertTrue(info.device.startswith("cuda:"))
        with self.assertRaises(grpc.RpcError) as ctx:  # past the registered range
            stub.Multiply(pb.MultiplyRequest(
                a=pb.Matrix(rows=32, cols=33, dtype=pb.FP32, shm=pb.SharedMemoryRef(region="ok")),
                b=matrix(np.ones((33, 2), np.float32))), timeout=30)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        with self.assertRaises(grpc.RpcError) as ctx:  # verify cannot read a device result back
            stub.Multiply(pb.MultiplyRequest(
                a=matrix(np.ones((2, 2), np.float32)), b=matrix(np.ones((2, 2), np.float32)),
                verify=True, output_shm=pb.SharedMemoryRef(region="ok")), timeout=30)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("verify: not with a result in CUDA memory", ctx.exception.details())
        reply = stub.Multiply(pb.MultiplyRequest(  # the result goes to the region, not the reply
            a=matrix(np.ones((2, 2), np.float32)), b=matrix(np.ones((2, 2), np.float32)),
            output_shm=pb.SharedMemoryRef(region="ok")), timeout=30)
        self.assertEqual((reply.c.rows, reply.c.cols, len(reply.c.data)), (2, 2, 0))
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(t[:4], torch.full((4,), 2.0, device="cuda")))
        stub.UnregisterSharedMemory(pb.UnregisterSharedMemoryRequest(name="ok"), timeout=30)
        r = self.client.multiply(np.eye(3, dtype=np.float32), np.eye(3, dtype=np.float32))
        np.testing.assert_array_equal(r.c, np.eye(3, dtype=np.float32))
        with self.assertRaises(ValueError):
            self.client.cuda_matrix(t.view(32, 32)[:, :16])  # not dense
        del t


if __name__ == "__main__":
    unittest.main()
