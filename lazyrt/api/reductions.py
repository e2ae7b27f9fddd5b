"""Reductions: ``sum, prod, max, min, argmax, argmin, any, all`` are ops;
``mean, var, std, logsumexp`` are built from them here, so the planner sees
(and fuses) the pieces. ``cumulative_sum`` and ``cumulative_prod`` are scans
(the op table's cumsum and cumprod): one kernel per scan on compiled backends.

``axis`` is an int, a tuple of ints or None (all axes); ``keepdims`` keeps
reduced axes as size 1. Dtypes follow NumPy: sums of ints and bools are
int64; ``mean``/``var``/``std`` of ints are float64; float16 is accumulated
in float32 for ``mean``/``var``/``std``, as NumPy does, and so is bfloat16 (as
JAX and torch do; NumPy would add in bfloat16).
"""
from __future__ import annotations

from .. import _recorder as R
from .. import _recorder_shapes as S
from .. import dtypes as D
from .. import ops
from ..errors import AxisError
from .creation import asarray
from .pointwise import astype, exp, log, sqrt, where, isinf
from .views import reshape, squeeze


# the ops themselves are recorded in Cython (argument checks included)
normalize_axes = S.normalize_axes
max, min = S.max, S.min
argmax, argmin, any, all = S.argmax, S.argmin, S.any, S.all


def sum(x, axis=None, keepdims=False, *, dtype=None):
    """Sum over ``axis`` (int, tuple or None: all); ints and bools sum in int64.

    With ``dtype``, ``x`` is cast to it first and the sum has that dtype, as
    the array API says (NumPy's ``np.sum(x, dtype=...)``): float32 data with
    ``dtype=float64`` sums float64 values; int data with ``dtype=float32`` sums
    the float32 roundings of its values. Floats accumulate in float64 and
    round once; integer sums wrap as in ``dtype`` (``dtype=int8`` wraps at 2**8).

    >>> sum(asarray([1, 2, 3], dtype="int8"), dtype="float32").dtype
    dtype('float32')
    """
    if dtype is None:
        return S.sum(x, axis, keepdims)
    return _with_dtype(S.sum, "sum", x, axis, keepdims, dtype)


def prod(x, axis=None, keepdims=False, *, dtype=None):
    """Product over ``axis``; ints and bools multiply in int64. ``dtype``: as in :func:`sum`."""
    if dtype is None:
        return S.prod(x, axis, keepdims)
    return _with_dtype(S.prod, "prod", x, axis, keepdims, dtype)


def _with_dtype(reduce, name, x, axis, keepdims, dtype):
    """``reduce`` of ``x`` cast to ``dtype``, given ``dtype``: ints are reduced
    in int64 and wrapped back, which equals reducing in ``dtype`` (sums and
    products modulo 2**bits agree); bool: any nonzero sum (or product) is True."""
    x = x if isinstance(x, R.TensorBase) else asarray(x)
    code = _dtype_code(name, dtype)
    return astype(reduce(astype(x, D.DTYPES[code]), axis, keepdims), D.DTYPES[code])


def _dtype_code(name, dtype) -> int:
    try:
        return D.code_of(dtype)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"lazyrt.{name}: dtype must be one of lazyrt's dtypes "
                        f"({', '.join(D.NAMES)}), not {dtype!r}") from exc


def _count(x, axes):
    n = 1
    for a in axes:
        n *= x.shape[a]
    return n


def _float_input(x):
    """The dtype NumPy accumulates mean/var in, and the dtype it returns."""
    code = x._node.dtype
    out = D.float_of(code)
    acc = D.FLOAT32 if code in D.REDUCED_FLOATS else out
    return acc, out


def _const(value, code):
    return R.wrap(R.scalar_node(float(value), code, True))


def mean(x, axis=None, keepdims=False):
    """Arithmetic mean; ints give float64, float16 and bfloat16 accumulate in float32.

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
        out = squeeze(out, axes)
    return out


def _scan(op, name, x, axis, dtype, include_initial):
    x = x if isinstance(x, R.TensorBase) else asarray(x)
    if x.ndim == 0:  # one element, as NumPy and the array API's reference
        x = reshape(x, (1,))
    if axis is None:
        if x.ndim > 1:
            raise AxisError(f"lazyrt.{name}: axis is required for a tensor of shape "
                            f"{x.shape} (rank {x.ndim} > 1)")
        axis = 0
    if isinstance(axis, (tuple, list)):
        raise TypeError(f"lazyrt.{name}: axis must be one int, not {axis!r}")
    (axis,) = normalize_axes(name, x.shape, axis)
    if dtype is not None:
        x = astype(x, D.DTYPES[_dtype_code(name, dtype)])
    code = x._node.dtype
    out = D.accumulator(code)     # sum's rule: ints and bool give int64
    node = x._node if code == out else R.cast(x._node, out)
    shape = list(x.shape)
    shape[axis] += 1 if include_initial else 0
    y = R.wrap(R.record(op.id, out, tuple(shape), (node,), (axis, bool(include_initial))))
    # an int dtype narrower than int64 wraps as a scan in that dtype would
    return y if dtype is None or out == code else astype(y, D.DTYPES[code])


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    """Running sum along ``axis`` (required when ``x`` has more than one axis;
    a 0-d ``x`` is one element). ``include_initial`` puts a zero first, so the
    axis grows by one. Dtypes as :func:`sum`: ints and bool give int64, floats
    keep theirs (accumulated in float64, each element rounded once); with
    ``dtype``, ``x`` is cast to it first and the result has it.

    >>> cumulative_sum(asarray([1, 2, 3]), include_initial=True).numpy()
    array([0, 1, 3, 6])
    """
    return _scan(ops.CUMSUM, "cumulative_sum", x, axis, dtype, include_initial)


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    """Running product along ``axis``; as :func:`cumulative_sum`, with a one first
    under ``include_initial``."""
    return _scan(ops.CUMPROD, "cumulative_prod", x, axis, dtype, include_initial)
