"""Per-element accuracy checks for GEMM results in the end-to-end tests: the bound of
tests/support/gemm_bound.h (the C++ tests'), with NumPy. Each element of C must lie within
(rounding of the inputs + k-term accumulation) * (|alpha| |A| |B| + |beta| |C0|) + the output's
rounding + a tiny absolute term of the float64 reference; relative L2 is only reported.
"""
import numpy as np

# Unit roundoff (half a step at 1) of a storage format.
UNIT_ROUNDOFF = {"fp64": 2.0**-53, "fp32": 2.0**-24, "fp16": 2.0**-11, "bf16": 2.0**-8, "fp8": 2.0**-4}


def input_roundoff(precision, data):
    """Relative error of rounding one operand of dtype `data` to what `precision` computes with
    (none when the data is already in that format; tf32 allows a whole step: truncation)."""
    if precision in ("fp64", "fp32") or precision == data:
        return 0.0
    if precision == "fp8" and data == "fp8_e4m3":
        return 0.0
    return {"tf32": 2.0**-10, "fp16": 2.0**-11, "bf16": 2.0**-8, "fp8": 2.0**-4}[precision]


def bound(a, b, precision, data, out, alpha=1.0, beta=0.0, c0=None, want=None):
    """The largest error each element of alpha a @ b + beta c0 (float64 arrays of the values as
    sent) may have when computed in `precision` on `data`-typed operands and stored as `out`."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    k = a.shape[1]
    magnitude = abs(alpha) * (np.abs(a) @ np.abs(b))
    if beta != 0.0 and c0 is not None:
        magnitude = magnitude + abs(beta) * np.abs(np.asarray(c0, np.float64))
    u_in = input_roundoff(precision, data)
    gamma_in = 2 * u_in + u_in * u_in
    # Hopper's fp8 tensor cores keep about 14 bits of the running sum (gemm_bound.h).
    u_acc = 2.0**-52 if precision == "fp64" else (2.0**-13 if precision == "fp8" else 2.0**-23)
    gamma_acc = (k + 2) * u_acc / (1 - (k + 2) * u_acc)
    computed = (gamma_in + gamma_acc * (1 + gamma_in)) * magnitude
    if want is None:
        want = alpha * (a @ b) + (beta * np.asarray(c0, np.float64) if beta != 0.0 and c0 is not None else 0.0)
    floor = 2.0**-25 if out == "fp16" else 2.0**-150
    if precision == "fp16":
        floor += k * 2.0**-25
    return computed + UNIT_ROUNDOFF[out] * (np.abs(want) + computed) + floor


def check(got, want, limit):
    """None when every element of `got` lies within `limit` of `want`, else a message naming how
    many do not, the worst one, and the relative L2 error (reported, not judged)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    err = np.abs(got - want)
    bad = ~np.isfinite(got) | (err > limit)
    if not bad.any():
        return None
    ratio = np.where(np.isfinite(got), err / np.maximum(limit, 1e-300), np.inf)
    worst = np.unravel_index(np.argmax(ratio), got.shape)
    rel = np.linalg.norm(np.where(np.isfinite(got), got - want, 0)) / max(np.linalg.norm(want), 1e-300)
    return (f"{int(bad.sum())} of {got.size} elements outside the bound; worst at {tuple(int(i) for i in worst)}: "
            f"got {got[worst]!r}, reference {want[worst]!r}, bound {limit[worst]!r}; relative L2 {rel:.3g}")


def assert_within(test, got, want, limit, what=""):
    """Fails `test` (a unittest.TestCase) when an element of `got` lies outside its bound."""
    msg = check(got, want, limit)
    if msg is not None:
        test.fail(f"{what}: {msg}" if what else msg)
