"""Lowerings of ``torch.diagonal`` (a view of the diagonal of the ``(dim1, dim2)``
planes, as the last axis) and ``diagonal_scatter`` (its backward writes through
it), on lazyrt's ``linalg.diagonal`` and an ``eye`` mask: ``einsum("ii")``,
``trace``-like contractions and their gradients need no fallback."""
from __future__ import annotations

import torch

from ... import dtypes as D
from ...api import creation as C
from ...api import linalg as LA
from ...api import pointwise as P
from ...api import views as V
from ..registry import register_lowering
from ..operands import operand, value

aten = torch.ops.aten


@register_lowering(aten.diagonal.default, aten.diagonal_copy.default)
def _diagonal(a, offset=0, dim1=0, dim2=1):
    """torch.diagonal: the diagonal of the (dim1, dim2) planes as the last axis."""
    x = value(a)
    n = x.ndim
    d1, d2 = (d + n if -n <= d < 0 else d for d in (dim1, dim2))
    if not (0 <= d1 < n and 0 <= d2 < n):
        raise IndexError(f"lazyrt.torch: diagonal: dims ({dim1}, {dim2}) out of range for a "
                         f"tensor of shape {x.shape}")
    if d1 == d2:
        raise RuntimeError(f"lazyrt.torch: diagonal: dimensions cannot be identical "
                           f"{dim1}, {dim2}")
    return LA.diagonal(V.permute(x, _planes_last(n, d1, d2)), offset=offset)


def _planes_last(n, d1, d2):
    return tuple(d for d in range(n) if d not in (d1, d2)) + (d1, d2)


@register_lowering(aten.diagonal_scatter.default)
def _diagonal_scatter(a, src, offset=0, dim1=0, dim2=1):
    """``a`` with its diagonal (as :func:`_diagonal` reads it) replaced by ``src``:
    ``src`` padded to a row (or column) of each plane, broadcast over the plane and
    picked where an ``eye(k=offset)`` mask is set (the backward of ``diagonal``)."""
    x = value(a)
    n = x.ndim
    d1, d2 = (d + n if -n <= d < 0 else d for d in (dim1, dim2))
    diag = _diagonal(a, offset, dim1, dim2)  # the same refusals as diagonal
    if tuple(src.shape) != diag.shape:
        raise RuntimeError(f"lazyrt.torch: diagonal_scatter: src of shape {tuple(src.shape)} "
                           f"does not match the diagonal's shape {diag.shape} (input shape "
                           f"{x.shape}, offset {offset}, dims {dim1}, {dim2})")
    order = _planes_last(n, d1, d2)
    planes = V.permute(x, order)
    rows, cols = planes.shape[-2:]
    y = operand(src, x._node.dtype)
    along = rows if offset >= 0 else cols  # src[i] is row i (offset >= 0) or column i
    length = y.shape[-1]
    if length < along:
        y = V.concat([y, C.full(y.shape[:-1] + (along - length,), 0, y.dtype)], axis=-1)
    y = V.unsqueeze(y, -1 if offset >= 0 else -2)
    mask = C.eye(rows, cols, k=offset, dtype=D.DTYPES[D.BOOL])
    out = P.where(mask, y, planes)
    inverse = tuple(order.index(d) for d in range(n))
    return V.permute(out, inverse)
