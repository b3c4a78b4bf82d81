"""matserve_client.cuda_memory without a GPU: how a GPU array is described (pointer, shape,
dtype, order) from __cuda_array_interface__, and what is refused before anything is exported."""
import unittest

from matserve_client.cuda_memory import describe


class FakeGpuArray:
    def __init__(self, shape, typestr="<f4", strides=None, ptr=0x7f0000000000):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                         "data": (ptr, False), "version": 3}


class DescribeTest(unittest.TestCase):
    def test_row_and_column_major(self):
        self.assertEqual(describe(FakeGpuArray((3, 5))), (0x7f0000000000, 3, 5, "fp32", "C"))
        self.assertEqual(describe(FakeGpuArray((3, 5), "<f8", strides=(8, 24)))[3:], ("fp64", "F"))
        self.assertEqual(describe(FakeGpuArray((4, 2), "<f2", strides=(4, 2)))[3:], ("fp16", "C"))
        self.assertEqual(describe(FakeGpuArray((1, 7), strides=(28, 4)))[1:], (1, 7, "fp32", "C"))

    def test_refusals(self):
        for bad in [FakeGpuArray((3,)), FakeGpuArray((2, 2, 2)), FakeGpuArray((3, 5), "<i4"),
                    FakeGpuArray((3, 5), strides=(40, 4)), object()]:
            with self.assertRaises(ValueError):
                describe(bad)


if __name__ == "__main__":
    unittest.main()
