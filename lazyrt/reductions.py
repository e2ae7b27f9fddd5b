"""Reductions: ``sum, prod, max, min, argmax, argmin, any, all`` are ops;
``mean, var, std, logsumexp`` are built from them here, so the planner sees
(and fuses) the pieces.

``axis`` is an int, a tuple of ints or None (all axes); ``keepdims`` keeps
reduced axes as size 1. Dtypes follow NumPy: sums of ints and bools are
int64; ``mean``/``var``/``std`` of ints are float64; float16 is accumulated
in float32 for ``mean``/``var``/``std``, as NumPy does.
"""
from __future__ import annotations

import builtins

from . import _recorder as R
from . import dtypes as D
from . import ops
from .creation import asarray
from .errors import AxisError, ShapeError
from .pointwise import astype, exp, log, sqrt, where, isinf


def normalize_axes(name: str, shape: tuple, axis) -> tuple:
    """``axis`` as a sorted tuple of non-negative ints, checked against ``shape``."""
    ndim = len(shape)
    if axis is None:
        return tuple(range(ndim))
    if type(axis) is int and -ndim <= axis < ndim:  # the common case, without the loop
        return (axis % ndim,)
    axes = (axis,) if not isinstance(axis, (tuple, list)) else tuple(axis)
    out = []
    for a in axes:
        try:
            a = int(a)
        except TypeError as exc:
            raise TypeError(f"lazyrt.{name}: axis must be an int or tuple of ints, "
                            f"not {axis!r}") from exc
        if not -ndim <= a < ndim:
            raise AxisError(f"lazyrt.{name}: axis {a} is out of range for a tensor of "
                            f"shape {shape} (rank {ndim})")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise AxisError(f"lazyrt.{name}: repeated axis in {axis!r}")
    return tuple(sorted(out))


def reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce(op, x, axis, keepdims, name=None):
    x = x if isinstance(x, R.TensorBase) else asarray(x)
    name = name or op.name
    axes = normalize_axes(name, x.shape, axis)
    empty = builtins.any(x.shape[a] == 0 for a in axes)
    if empty and op.id in (ops.MAX.id, ops.MIN.id, ops.ARGMAX.id, ops.ARGMIN.id):
        raise ShapeError(f"lazyrt.{name}: zero-size reduction over axis {axis} of a tensor "
                         f"of shape {x.shape} has no identity")
    if op.id in ops.INDEX_REDUCTIONS and len(axes) > 1 and len(axes) != x.ndim:
        raise AxisError(f"lazyrt.{name}: reduces over one axis or all of them (axis=None), "
                        f"not {axis!r}")
    code = ops.reduction_dtype(op, x._node.dtype)
    node = x._node
    if op.id in ops.WIDENING_REDUCTIONS and node.dtype != code:
        node = R.cast(node, code)
    shape = reduced_shape(x.shape, axes, keepdims)
    return R.wrap(R.record(op.id, code, shape, (node,), (axes, bool(keepdims))))


def sum(x, axis=None, keepdims=False):
    """Sum over ``axis``; ints and bools sum in int64."""
    return _reduce(ops.SUM, x, axis, keepdims)


def prod(x, axis=None, keepdims=False):
    return _reduce(ops.PROD, x, axis, keepdims)


def max(x, axis=None, keepdims=False):
    """Maximum over ``axis``; NaN propagates, as ``np.max``."""
    return _reduce(ops.MAX, x, axis, keepdims)


def min(x, axis=None, keepdims=False):
    return _reduce(ops.MIN, x, axis, keepdims)


def argmax(x, axis=None, keepdims=False):
    """Index of the first maximum along ``axis`` (flattened when None)."""
    return _reduce(ops.ARGMAX, x, axis, keepdims)


def argmin(x, axis=None, keepdims=False):
    return _reduce(ops.ARGMIN, x, axis, keepdims)


def any(x, axis=None, keepdims=False):
    return _reduce(ops.ANY, x, axis, keepdims)


def all(x, axis=None, keepdims=False):
    return _reduce(ops.ALL, x, axis, keepdims)


def _count(x, axes):
    n = 1
    for a in axes:
        n *= x.shape[a]
    return n


def _float_input(x):
    """The dtype NumPy accumulates mean/var in, and the dtype it returns."""
    code = x._node.dtype
    out = D.float_of(code)
    acc = D.FLOAT32 if code == D.FLOAT16 else out
    return acc, out


def _const(value, code):
    return R.wrap(R.scalar_node(float(value), code, True))


def mean(x, axis=None, keepdims=False):
    """Arithmetic mean; ints give float64, float16 accumulates in float32.

    An empty reduction gives NaN, as NumPy does (without its warning).
    """
    x = x if isinstance(x, R.TensorBase) else asarray(x)
    axes = normalize_axes("mean", x.shape, axis)
    acc, out = _float_input(x)
    n = _count(x, axes)
    total = sum(astype(x, D.DTYPES[acc]), axes, keepdims)
    return astype(total / _const(n, acc), D.DTYPES[out])


def var(x, axis=None, keepdims=False, correction=0, ddof=None):
    """Variance with ``correction`` (NumPy's ``ddof``) degrees of freedom removed.

    Two-pass (mean first, then squared deviations), as NumPy computes it.
    """
    x = x if isinstance(x, R.TensorBase) else asarray(x)
    if ddof is not None:
        correction = ddof
    axes = normalize_axes("var", x.shape, axis)
    acc, out = _float_input(x)
    n = _count(x, axes)
    xf = astype(x, D.DTYPES[acc])
    mu = mean(xf, axes, keepdims=True)
    dev = xf - mu
    # NumPy divides by max(n - ddof, 0): 0/0 gives NaN, x/0 gives inf
    denom = n - correction if n - correction > 0 else 0
    total = sum(dev * dev, axes, keepdims)
    return astype(total / _const(denom, acc), D.DTYPES[out])


def std(x, axis=None, keepdims=False, correction=0, ddof=None):
    return sqrt(var(x, axis, keepdims, correction, ddof))


def logsumexp(x, axis=None, keepdims=False):
    """``log(sum(exp(x)))`` without overflow: the max is subtracted first.

    Rows that are all -inf give -inf; a +inf gives +inf; NaN propagates.
    """
    x = x if isinstance(x, R.TensorBase) else asarray(x)
    if x._node.dtype not in D.FLOATING:
        x = astype(x, "float64")
    axes = normalize_axes("logsumexp", x.shape, axis)
    if _count(x, axes) == 0:
        # nothing to shift by (max has no identity): log(0) = -inf, as NumPy/SciPy
        return log(sum(exp(x), axes, keepdims))
    m = max(x, axes, keepdims=True)
    # an infinite max would give inf - inf = nan: shift by 0 there instead
    safe = where(isinf(m), 0.0, m)
    s = sum(exp(x - safe), axes, keepdims=True)
    out = log(s) + safe
    if not keepdims:
        from .views import squeeze
        out = squeeze(out, axes)
    return out
