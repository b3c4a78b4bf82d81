"""Operands from other array libraries, taken in their own dtype without importing those libraries.

- ml_dtypes arrays: NumPy arrays whose dtype is named "bfloat16" or "float8_e4m3fn" become
  Bfloat16 / Float8E4M3 views of their bits (no rounding, no copy). Recognised by dtype name, so
  the client never imports ml_dtypes.
- torch CPU tensors (float64, float32, float16, bfloat16, float8_e4m3fn): a NumPy view of their
  memory (tensor.numpy(), strides kept), bf16 as tensor.view(torch.int16) bits; nothing goes
  through float64. torch is imported only when such a tensor is passed. CUDA tensors are left
  as they are: Client.cuda_matrix shares them with the server (cuda_memory.py).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import dtypes

# ml_dtypes' dtype names -> (bits type, wrapper).
_ML_DTYPES = {"bfloat16": (np.uint16, dtypes.Bfloat16),
              "float8_e4m3fn": (np.uint8, dtypes.Float8E4M3)}


def is_torch_tensor(x: Any) -> bool:
    """Whether x is a torch.Tensor (or subclass, e.g. nn.Parameter), judged by its module."""
    module = type(x).__module__
    return (module == "torch" or module.startswith("torch.")) and hasattr(x, "device")


def _from_torch(t: Any) -> Any:
    if t.device.type != "cpu":
        return t  # GPU memory: Client.cuda_matrix, or the caller's .cpu()
    import torch  # the caller has it: t is one of its tensors

    t = t.detach()
    if t.dtype == torch.bfloat16:
        return dtypes.Bfloat16(t.view(torch.int16).numpy().view(np.uint16))
    if t.dtype == getattr(torch, "float8_e4m3fn", None):
        return dtypes.Float8E4M3(t.view(torch.uint8).numpy())
    return t.numpy()


def native(x: Any) -> Any:
    """x as the client's own types: a torch CPU tensor as a NumPy array (or Bfloat16 /
    Float8E4M3 of its bits), an ml_dtypes bfloat16 / float8_e4m3fn array as Bfloat16 /
    Float8E4M3; anything else unchanged. Views, no copies."""
    if isinstance(x, np.ndarray):
        bits = _ML_DTYPES.get(x.dtype.name)
        if bits is not None and x.dtype.itemsize == np.dtype(bits[0]).itemsize:
            return bits[1](np.asarray(x).view(bits[0]))
        return x
    if is_torch_tensor(x):
        return _from_torch(x)
    return x
