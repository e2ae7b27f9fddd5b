"""``lazyrt.linalg``: the array API's linear algebra extension, where it maps
onto lazyrt's ops, plus ``matmul`` / ``@`` with NumPy's semantics.

Implemented (:data:`__all__`): ``matmul, matrix_transpose, tensordot, vecdot,
vector_norm, matrix_norm, diagonal, trace, outer, cross``. Each is composed
lazily from recorded ops (views, pointwise, reductions, matmul), so nothing
runs until a barrier. Norms compute in float64 and return the input's float
dtype (ints and bool give float64): float16/float32 norms do not overflow
where the squares would.

Not implemented (:data:`NOT_IMPLEMENTED`): the decompositions and solvers
(``cholesky, det, eigh, eigvalsh, inv, matrix_power, matrix_rank, pinv, qr,
slogdet, solve, svd, svdvals``). They are absent rather than stubs, so
``hasattr(lr.linalg, "inv")`` is False, as array-API consumers probe; reading
one raises an AttributeError that names it and says so.

1-D operands of ``matmul`` are promoted (a leading or trailing 1) and the
extra axis dropped again; batch axes broadcast. The recording of ``matmul``
(checks, dtype, shapes) is in Cython: ``x @ w`` is as hot as ``x + b``.

>>> import lazyrt as lr
>>> float(lr.linalg.vector_norm(lr.asarray([3.0, 4.0])))
5.0
"""
from __future__ import annotations

import math

import numpy as np

from .. import _recorder_shapes as S
from .. import dtypes as D
from ..errors import DTypeError, ShapeError
from .creation import as_tensor
from .manipulation import matrix_transpose, tensordot, vecdot
from .operands import int_argument, normalize_axis
from .pointwise import abs as _abs, astype, sqrt
from .reductions import max as _max, min as _min, normalize_axes, sum as _sum
from .views import broadcast_to, concat, reshape

matmul = S.matmul

__all__ = ["cross", "diagonal", "matmul", "matrix_norm", "matrix_transpose", "outer",
           "tensordot", "trace", "vecdot", "vector_norm"]

#: the extension's functions lazyrt does not have (they need decompositions)
NOT_IMPLEMENTED = ("cholesky", "det", "eigh", "eigvalsh", "inv", "matrix_power",
                   "matrix_rank", "pinv", "qr", "slogdet", "solve", "svd", "svdvals")


def __getattr__(name):
    if name in NOT_IMPLEMENTED:
        raise AttributeError(f"lazyrt.linalg.{name} is not implemented: lazyrt has no "
                             f"matrix decompositions or solvers; implemented: "
                             f"{', '.join(__all__)}")
    raise AttributeError(f"module 'lazyrt.linalg' has no attribute {name!r}")


def _float(name, x):
    """``x`` in float64 (where norms compute) and the dtype the result gets."""
    code = x._node.dtype
    return astype(x, "float64"), D.DTYPES[code if code in D.FLOATING else D.FLOAT64]


def _matrix(name, x):
    x = as_tensor(x)
    if x.ndim < 2:
        raise ShapeError(f"lazyrt.linalg.{name}: needs a tensor of rank >= 2, "
                         f"got shape {x.shape}")
    return x


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    """The ``ord``-norm over ``axis`` (all axes by default): ``ord`` is 2
    (Euclidean), 1, ``inf`` (max abs), ``-inf`` (min abs), 0 (count of nonzeros)
    or any other real p (``sum(abs(x)**p)**(1/p)``)."""
    x = as_tensor(x)
    if isinstance(ord, bool) or not isinstance(ord, (int, float)):
        raise TypeError(f"lazyrt.linalg.vector_norm: ord must be a real number, not {ord!r}")
    axes = normalize_axes("linalg.vector_norm", x.shape, axis)
    wide, out = _float("vector_norm", x)
    a = _abs(wide)
    if ord in (math.inf, -math.inf):
        if any(x.shape[i] == 0 for i in axes):
            raise ShapeError(f"lazyrt.linalg.vector_norm: ord={ord} over an empty axis of "
                             f"shape {x.shape} has no value")
        norm = (_max if ord > 0 else _min)(a, axes, keepdims)
    elif ord == 0:
        norm = _sum(astype(a != 0, "float64"), axes, keepdims)
    elif ord == 1:
        norm = _sum(a, axes, keepdims)
    elif ord == 2:
        norm = sqrt(_sum(a * a, axes, keepdims))
    else:
        norm = _sum(a ** float(ord), axes, keepdims) ** (1.0 / ord)
    return astype(norm, out)


def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    """The norm of each matrix of the last two axes: ``'fro'`` (Frobenius), 1 / -1
    (max / min column sum of abs), ``inf`` / ``-inf`` (max / min row sum). ``2``,
    ``-2`` and ``'nuc'`` need singular values, which lazyrt does not compute."""
    x = _matrix("matrix_norm", x)
    wide, out = _float("matrix_norm", x)
    a = _abs(wide)
    if ord == "fro":
        norm = sqrt(_sum(a * a, (-2, -1)))
    elif not isinstance(ord, bool) and ord in (1, -1, math.inf, -math.inf):
        summed = _sum(a, -2 if ord in (1, -1) else -1)
        if summed.shape[-1] == 0:
            raise ShapeError(f"lazyrt.linalg.matrix_norm: ord={ord} of an empty matrix "
                             f"(shape {x.shape}) has no value")
        norm = (_max if ord > 0 else _min)(summed, -1)
    elif ord in (2, -2, "nuc"):
        raise NotImplementedError(f"lazyrt.linalg.matrix_norm: ord={ord!r} needs singular "
                                  "values (svd), which lazyrt does not compute; use 'fro', "
                                  "1, -1, inf or -inf")
    else:
        raise ValueError(f"lazyrt.linalg.matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, "
                         f"-2, inf or -inf, not {ord!r}")
    if keepdims:
        norm = reshape(norm, norm.shape + (1, 1))
    return astype(norm, out)


def diagonal(x, /, *, offset=0):
    """The diagonal ``offset`` (above the main one when > 0) of each matrix of the
    last two axes: a strided view of the matrix, nothing copied until read."""
    x = _matrix("diagonal", x)
    offset = int_argument("linalg.diagonal", "offset", offset)
    m, n = x.shape[-2:]
    if offset >= 0:
        start, length = offset, min(m, n - offset)
    else:
        start, length = -offset * n, min(m + offset, n)
    flat = reshape(x, x.shape[:-2] + (m * n,))
    if length <= 0:
        return flat[..., 0:0]
    step = n + 1
    return flat[..., start:start + (length - 1) * step + 1:step]


def trace(x, /, *, offset=0, dtype=None):
    """Sum of the diagonal ``offset`` of each matrix of the last two axes. Without
    ``dtype``: ints and bool sum to int64, floats keep their dtype; with it the sum
    accumulates in and returns ``dtype``."""
    d = diagonal(x, offset=offset)
    if dtype is None:
        return _sum(d, -1)
    return astype(_sum(astype(d, dtype), -1), dtype)


def outer(x1, x2, /):
    """The outer product of two 1-D tensors, in their promoted dtype."""
    x1, x2 = as_tensor(x1), as_tensor(x2)
    if x1.ndim != 1 or x2.ndim != 1:
        raise ShapeError(f"lazyrt.linalg.outer: inputs must be 1-D, got shapes {x1.shape} "
                         f"and {x2.shape}")
    return reshape(x1, (x1.shape[0], 1)) * reshape(x2, (1, x2.shape[0]))


def cross(x1, x2, /, *, axis=-1):
    """The cross product of 3-vectors along ``axis`` (of the broadcast shape); the
    other axes broadcast. Numeric dtypes only (ints wrap, as NumPy)."""
    x1, x2 = as_tensor(x1), as_tensor(x2)
    if D.BOOL in (x1._node.dtype, x2._node.dtype):
        raise DTypeError(f"lazyrt.linalg.cross: needs numeric inputs, not {x1.dtype} and "
                         f"{x2.dtype}")
    if x1.ndim == 0 or x2.ndim == 0:
        raise ShapeError(f"lazyrt.linalg.cross: inputs must have rank >= 1, got shapes "
                         f"{x1.shape} and {x2.shape}")
    try:
        shape = np.broadcast_shapes(x1.shape, x2.shape)
    except ValueError:
        raise ShapeError(f"lazyrt.linalg.cross: shapes {x1.shape} and {x2.shape} do not "
                         "broadcast together") from None
    axis = normalize_axis("linalg.cross", axis, len(shape))
    back = axis - len(shape)
    if -back > min(x1.ndim, x2.ndim) or x1.shape[back] != 3 or x2.shape[back] != 3:
        raise ShapeError(f"lazyrt.linalg.cross: axis {axis} must have size 3 in both "
                         f"inputs, got shapes {x1.shape} and {x2.shape}")
    code = D.DTYPES[D.promote(x1._node.dtype, x2._node.dtype)]
    a, b = broadcast_to(astype(x1, code), shape), broadcast_to(astype(x2, code), shape)

    def part(t, i):
        return t[(slice(None),) * axis + (slice(i, i + 1),)]

    a0, a1, a2 = (part(a, i) for i in range(3))
    b0, b1, b2 = (part(b, i) for i in range(3))
    return concat([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=axis)
