"""lazyrt's dtype codes as torch dtypes, for the backends that hold buffers in
torch tensors (the Triton backend and its gather/scatter launches).

Bool is uint8 holding 0/1, as the Triton backend stores it. torch is imported
when a dtype is asked for, so importing this module needs no torch.
"""
from __future__ import annotations

from .. import dtypes as D


def torch_dtype(code):
    """The torch dtype of a buffer of lazyrt dtype ``code``."""
    import torch
    return {D.BOOL: torch.uint8, D.INT8: torch.int8, D.UINT8: torch.uint8,
            D.INT32: torch.int32, D.INT64: torch.int64, D.FLOAT16: torch.float16,
            D.FLOAT32: torch.float32, D.FLOAT64: torch.float64,
            D.BFLOAT16: torch.bfloat16}[code]
