#!/usr/bin/env python3
# Writes the .npy fixtures of npy_numpy_files_test.cc with NumPy itself (run from this folder with
# a Python that has numpy, e.g. /usr/bin/python3 here): real files as NumPy writes them, so the
# reader is tested against the format's reference writer, not only against our own.
import numpy as np
import numpy.lib.format as fmt

np.save("c_f4.npy", np.arange(6, dtype="<f4").reshape(2, 3) - 2.5)
np.save("f_f8.npy", np.asfortranarray(np.arange(6, dtype="<f8").reshape(2, 3) + 0.5))
np.save("v_f2.npy", np.array([1.5, -2, 3], dtype="<f2"))
for major in (2, 3):
    with open(f"v{major}_f4.npy", "wb") as f:
        fmt.write_array(f, np.array([[1.25, 2.5]], dtype="<f4"), version=(major, 0))
np.save("be_f4.npy", np.ones((2, 2), dtype=">f4"))
np.save("bf16_u2.npy", np.array([[0x3F80, 0x4000]], dtype="<u2"))  # bf16 bits of 1.0, 2.0
np.save("obj.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
np.save("f4_3d.npy", np.zeros((2, 2, 2), dtype="<f4"))
np.save("scalar_f4.npy", np.float32(3))
