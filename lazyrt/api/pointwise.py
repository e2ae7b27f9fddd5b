"""Elementwise functions: ``lr.exp(x)``, ``lr.maximum(a, b)``, ``lr.where``...

Each is one recorder call; dtype rules are NumPy's (see :mod:`lazyrt.dtypes`).
Operators (``a + b``) go straight to the recorder and never pass through here.
"""
from __future__ import annotations

import builtins

import numpy as np

from .. import _recorder as R
from .. import _recorder_pointwise as PW
from .. import _recorder_shapes as S
from .. import dtypes as D
from .. import ops
from .creation import as_tensor, zeros_like
from .device import check_device


def _unary(op):
    def fn(x):
        return PW.unary(op.id, as_tensor(x))
    fn.__name__ = op.name
    fn.__doc__ = f"Elementwise ``{op.name}``, NumPy's dtype rule. {op.doc}".strip()
    return fn


def _binary(op):
    def fn(a, b):
        return PW.binary(op.id, a, b)
    fn.__name__ = op.name
    fn.__doc__ = f"Elementwise ``{op.name}`` with broadcasting. {op.doc}".strip()
    return fn


add, subtract, multiply, divide = (_binary(o) for o in (ops.ADD, ops.SUB, ops.MUL, ops.TRUEDIV))
floor_divide, remainder, power = (_binary(o) for o in (ops.FLOORDIV, ops.MOD, ops.POW))
maximum, minimum = _binary(ops.MAXIMUM), _binary(ops.MINIMUM)
equal, not_equal, less, less_equal, greater, greater_equal = (
    _binary(o) for o in (ops.EQ, ops.NE, ops.LT, ops.LE, ops.GT, ops.GE))
bitwise_and, bitwise_or, bitwise_xor = (_binary(o) for o in (ops.BITAND, ops.BITOR, ops.BITXOR))
logical_and, logical_or = _binary(ops.LOGICAL_AND), _binary(ops.LOGICAL_OR)
hypot = _binary(ops.HYPOT)

negative, abs, exp, log, log1p, expm1 = (
    _unary(o) for o in (ops.NEG, ops.ABS, ops.EXP, ops.LOG, ops.LOG1P, ops.EXPM1))
sqrt, rsqrt, sin, cos, tanh, sigmoid, erf = (
    _unary(o) for o in (ops.SQRT, ops.RSQRT, ops.SIN, ops.COS, ops.TANH, ops.SIGMOID, ops.ERF))
exp2, erfc, softplus = _unary(ops.EXP2), _unary(ops.ERFC), _unary(ops.SOFTPLUS)
floor, ceil, round, sign, reciprocal, square = (
    _unary(o) for o in (ops.FLOOR, ops.CEIL, ops.ROUND, ops.SIGN, ops.RECIPROCAL, ops.SQUARE))
isnan, isinf, isfinite, logical_not, invert = (
    _unary(o) for o in (ops.ISNAN, ops.ISINF, ops.ISFINITE, ops.LOGICAL_NOT, ops.INVERT))
bitwise_not = invert

# the array API's (2023.12) remaining elementwise functions
atan2, logaddexp, copysign, logical_xor = (
    _binary(o) for o in (ops.ATAN2, ops.LOGADDEXP, ops.COPYSIGN, ops.LOGICAL_XOR))
bitwise_left_shift, bitwise_right_shift = _binary(ops.LSHIFT), _binary(ops.RSHIFT)
acos, acosh, asin, asinh, atan, atanh = (
    _unary(o) for o in (ops.ACOS, ops.ACOSH, ops.ASIN, ops.ASINH, ops.ATAN, ops.ATANH))
cosh, sinh, tan, log2, log10, signbit, trunc = (
    _unary(o) for o in (ops.COSH, ops.SINH, ops.TAN, ops.LOG2, ops.LOG10, ops.SIGNBIT,
                        ops.TRUNC))
pow = power
bitwise_invert = invert


def positive(x):
    """``+x``: a new tensor with the same value (no data moves). Not for bool,
    as ``np.positive`` and the standard (numeric dtypes)."""
    return +as_tensor(x)


def real(x):
    """The real part: lazyrt has no complex dtypes, so a new tensor with the value of ``x``."""
    return R.wrap(as_tensor(x)._node)


def conj(x):
    """The complex conjugate: for lazyrt's real dtypes, a new tensor with the value of ``x``."""
    return R.wrap(as_tensor(x)._node)


def imag(x):
    """The imaginary part: zeros of ``x``'s dtype and shape for lazyrt's real dtypes,
    as ``np.imag`` (the standard defines ``imag`` for complex inputs only)."""
    return zeros_like(as_tensor(x))


def astype(x, dtype, /, *, copy=True, device=None):
    """``x`` converted to ``dtype`` with C casting rules, like ``ndarray.astype``.

    A new tensor (``copy=True``, the array API's default): an in-place operator on
    the result never changes ``x``. ``copy=False`` returns ``x`` itself where the
    dtype is already ``dtype``. No data moves for the same dtype either way.
    ``device``: only "cpu" (see ``lazyrt.api.device``).
    """
    check_device(device, "astype")
    x = as_tensor(x)
    code = D.code_of(dtype)
    if code == x._node.dtype:
        return R.wrap(x._node) if copy else x
    return R.wrap(R.cast(x._node, code))


where = S.where  # recorded in Cython; Python scalar branches are runtime parameters


def clip(x, /, min=None, max=None):
    """``x`` limited to [min, max]; NaN stays NaN, as ``np.clip``.

    ``min`` and ``max`` are Python scalars or tensors (broadcast with ``x``); with
    neither, the result is a copy of ``x``, as the array API says."""
    out = as_tensor(x)
    if min is None and max is None:
        return R.wrap(out._node)
    if out._node.dtype in D.INTEGRAL:
        # NumPy clamps out-of-range Python int bounds instead of refusing them
        lo, hi = int(np.iinfo(out.dtype).min), int(np.iinfo(out.dtype).max)
        min = min if not _is_pyint(min) else builtins.min(builtins.max(min, lo), hi)
        max = max if not _is_pyint(max) else builtins.min(builtins.max(max, lo), hi)
    if min is not None:
        out = maximum(out, min)
    if max is not None:
        out = minimum(out, max)
    return out


def _is_pyint(v):
    return isinstance(v, int) and not isinstance(v, bool)
