"""Integer division's lowerings: ``div`` with a rounding mode, ``remainder``
and ``fmod``, as eager torch rounds them, and eager's ``ZeroDivisionError`` for
an integer divisor of zero: at the call when the divisor is known then, at the
barrier that computes it otherwise."""
from __future__ import annotations

import math

import numpy as np
import torch

from ... import _recorder_shapes as S
from ... import dtypes as D
from ...api import pointwise as P
from ..registry import LOWERINGS, register_lowering
from .pointwise import EAGER_TAKES, binary, check_takes
from ..operands import KIND, cpu_scalar, down, operand, promoted, up
from ..tensor import LazyTensor, defer_error, runtime_scalar

aten = torch.ops.aten


def _check_divisor(a, b, comp):
    """Eager CPU torch raises ``ZeroDivisionError`` (a RuntimeError) on an integer
    ``//``, ``%``, ``fmod`` or rounded ``div`` by zero; lazyrt's integer ops give 0
    there, as NumPy does. A divisor known when the op is recorded (a Python number,
    a CPU scalar, a lazy tensor whose value is already on the host) raises here,
    at the call, as eager does. One the graph computes is checked in the graph:
    the barrier that computes it raises (:func:`.tensor.defer_error`). Eager's
    kernel never reads the divisor of an empty result, so neither check does."""
    if comp not in D.INTEGRAL or math.prod(torch.broadcast_shapes(_shape(a), _shape(b))) == 0:
        return
    if type(b) is LazyTensor:
        v = b.value._node.value  # a host array, a scalar leaf's number; None while pending
        if isinstance(v, np.ndarray):
            zero = v.size > 0 and not v.all()
        elif isinstance(v, (int, float)):
            zero = v == 0
        else:  # pending, or held on a device (jax): the graph checks it
            defer_error(S.any(operand(b, comp) == runtime_scalar(0, comp)), "ZeroDivisionError")
            return
    else:
        number = cpu_scalar(b) if isinstance(b, torch.Tensor) else b
        zero = isinstance(number, (int, bool)) and number == 0
    if zero:
        raise RuntimeError("ZeroDivisionError")


def _shape(x) -> tuple:
    return tuple(x.shape) if isinstance(x, torch.Tensor) else ()


def _integer_division(lower):
    """``lower`` with :func:`_check_divisor` of its divisor first."""
    def checked(a, b):
        _check_divisor(a, b, promoted(KIND.DEFAULT, a, b)[0])
        return lower(a, b)
    return checked


@register_lowering(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(a, b, *, rounding_mode=None):
    if rounding_mode is None:
        return LOWERINGS[aten.div.Tensor](a, b)
    comp, out = promoted(KIND.DEFAULT, a, b)
    _check_divisor(a, b, comp)
    x, y = operand(a, comp), operand(b, comp)  # float16: eager's float32, scalar too
    if rounding_mode == "floor":
        return down(P.floor_divide(x, y), out)  # NumPy's floor division is torch's (Python's)
    if comp in D.FLOATING:
        q = P.divide(x, y)
        if isinstance(b, torch.Tensor) and b.dim():  # eager truncates a float16 quotient
            q = up(down(q, out))  # (a scalar divisor's, in float32)
        return down(P.trunc(q), out)
    q = P.floor_divide(x, y)  # integer truncation: floor, moved toward zero
    inexact = P.logical_and(P.remainder(x, y) != runtime_scalar(0, comp),
                            (x < runtime_scalar(0, comp)) != (y < runtime_scalar(0, comp)))
    return q + P.astype(inexact, D.DTYPES[comp])


@register_lowering(aten.fmod.Tensor, aten.fmod.Scalar)
def _fmod(a, b):
    """C's truncated remainder (sign of the dividend), from lazyrt's floored one.
    Exact for integers; a float result would need ``fmod`` itself (floored
    remainder minus the divisor rounds), so floats take the counted fallback."""
    comp, out = promoted(KIND.DEFAULT, a, b)
    check_takes(EAGER_TAKES["fmod"], out)
    if comp in D.FLOATING:
        return NotImplemented
    _check_divisor(a, b, comp)
    x, y = operand(a, comp), operand(b, comp)
    zero = runtime_scalar(0, comp)
    r = P.remainder(x, y)
    return S.where(P.logical_and(r != zero, (r < zero) != (x < zero)), r - y, r)


register_lowering(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)(
    _integer_division(binary(P.remainder, KIND.DEFAULT)))
