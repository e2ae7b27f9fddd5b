"""Reductions: ``sum, prod, max, min, argmax, argmin, any, all`` are ops;
``mean, var, std, logsumexp`` are built from them here, so the planner sees
(and fuses) the pieces.

``axis`` is an int, a tuple of ints or None (all axes); ``keepdims`` keeps
reduced axes as size 1. Dtypes follow NumPy: sums of ints and bools are
int64; ``mean``/``var``/``std`` of ints are float64; float16 is accumulated
in float32 for ``mean``/``var``/``std``, as NumPy does.
"""
from __future__ import annotations

from .. import _recorder as R
from .. import _recorder_shapes as S
from .. import dtypes as D
from .creation import asarray
from .pointwise import astype, exp, log, sqrt, where, isinf


# the ops themselves are recorded in Cython (argument checks included)
normalize_axes = S.normalize_axes
sum, prod, max, min = S.sum, S.prod, S.max, S.min
argmax, argmin, any, all = S.argmax, S.argmin, S.any, S.all


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
