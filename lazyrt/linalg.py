"""Matrix products: ``matmul`` / ``@`` with NumPy's semantics.

1-D operands are promoted (a leading or trailing 1) and the extra axis is
dropped again; batch axes broadcast. The MATMUL op itself always sees two
operands of equal rank >= 2, which is what the planner and emitters assume.
"""
from __future__ import annotations

import numpy as np

from . import _recorder as R
from . import dtypes as D
from . import ops
from .creation import asarray
from .errors import DTypeError, ShapeError
from .pointwise import astype
from .views import reshape


def matmul(a, b):
    """``a @ b``: (..., n, k) @ (..., k, m) -> (..., n, m), batch axes broadcast."""
    a = a if isinstance(a, R.TensorBase) else asarray(a)
    b = b if isinstance(b, R.TensorBase) else asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"lazyrt.matmul: operands must have at least one dimension, "
                         f"got shapes {a.shape} and {b.shape}")
    comp, out = D.resolve_binary(np.matmul, a._node.dtype, b._node.dtype)
    if comp < 0:
        raise DTypeError(f"lazyrt.matmul: not defined for {a.dtype} and {b.dtype}")
    a, b = astype(a, D.DTYPES[comp]), astype(b, D.DTYPES[comp])
    drop_n, drop_m = a.ndim == 1, b.ndim == 1
    if drop_n:
        a = reshape(a, (1,) + a.shape)
    if drop_m:
        b = reshape(b, b.shape + (1,))
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"lazyrt.matmul: contracted dimensions differ: {a.shape} @ {b.shape} "
                         f"({a.shape[-1]} != {b.shape[-2]})")
    rank = max(a.ndim, b.ndim)
    if a.ndim < rank:
        a = reshape(a, (1,) * (rank - a.ndim) + a.shape)
    if b.ndim < rank:
        b = reshape(b, (1,) * (rank - b.ndim) + b.shape)
    try:
        batch = R.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ShapeError:
        raise ShapeError(f"lazyrt.matmul: batch dimensions do not broadcast: {a.shape} @ "
                         f"{b.shape} (batch {a.shape[:-2]} vs {b.shape[:-2]})") from None
    shape = batch + (a.shape[-2], b.shape[-1])
    result = R.wrap(R.record(ops.MATMUL_OP.id, out, shape, (a._node, b._node)))
    if drop_n or drop_m:
        final = batch + (() if drop_n else (a.shape[-2],)) + (() if drop_m else (b.shape[-1],))
        result = reshape(result, final)
    return result
