"""Pointwise lowerings: aten's elementwise overloads → lazyrt recorder calls.

Most are generated from tables (overloads, lazyrt function, torch's promotion
kind); the rest are one short function per *form*, registered for every
overload of it.

Dtypes follow torch: each operand is cast to the computation dtype torch's
promotion picks before lazyrt sees it, so lazyrt's NumPy rule never decides.
A float16 op computes in float32 and is rounded once (eager's opmath rule,
:mod:`..operands`), its Python scalar kept in float32 or rounded to float16
first as eager's kernel for that op does.
Shapes come from lazyrt's recorder, never from meta tensors.
"""
from __future__ import annotations

import math

import torch

from ... import _recorder_shapes as S
from ... import dtypes as D
from ...api import pointwise as P
from ..operands import KIND, cpu_scalar, down, opmath, operand, promoted, up, value
from ..opmath import (add_scaled, correctly_rounded, fused_multiply_add, scalar_remainder,
                      vectorized_erf, vectorized_rsqrt, vectorized_sigmoid)
from ..registry import overloads_of, register_lowering
from ..tensor import code_of, number_of, runtime_scalar

aten = torch.ops.aten


def _is_bool(x):
    return x.dtype is torch.bool if isinstance(x, torch.Tensor) else isinstance(x, bool)


def _check_sub(a, b):
    """Eager torch's refusals for ``-`` on bools, word for word."""
    if _is_bool(a) and _is_bool(b):
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not "
                           "supported. Use the `^` or `logical_xor()` operator instead.")
    if _is_bool(a) or _is_bool(b):
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not "
                           "supported. If you are trying to invert a mask, use the `~` or "
                           "`logical_not()` operator instead.")


def _check_alpha(out, alpha):
    if isinstance(alpha, bool) and out != D.BOOL:
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if isinstance(alpha, float) and out not in D.FLOATING:
        raise RuntimeError("For integral input tensors, argument alpha must not be a "
                           "floating point number.")


#: what eager's CPU kernel of an op takes, where it refuses some dtypes that
#: lazyrt would compute (``hypot`` of ints, ``round`` of bools, shifts of floats):
#: op name -> (eager's kernel name, the computation dtypes it takes)
EAGER_TAKES = {
    "hypot": ("hypot_cpu", D.FLOATING),
    "round": ("round_vml_cpu", D.FLOATING | D.INTEGRAL),
    "bitwise_left_shift": ("lshift_cpu", D.INTEGRAL),
    "bitwise_right_shift": ("rshift_cpu", D.INTEGRAL),
    "fmod": ("fmod_cpu", D.FLOATING | D.INTEGRAL),
}
EAGER_TAKES["__lshift__"] = EAGER_TAKES["bitwise_left_shift"]  # ``x << n``
EAGER_TAKES["__rshift__"] = EAGER_TAKES["bitwise_right_shift"]


#: torch's names of its scalar types, as its dtype errors spell them
_SCALAR_TYPE_NAMES = {D.BOOL: "Bool", D.INT8: "Char", D.UINT8: "Byte", D.INT32: "Int",
                      D.INT64: "Long", D.FLOAT16: "Half", D.FLOAT32: "Float",
                      D.FLOAT64: "Double"}


def check_takes(takes, comp):
    """Eager's refusal, word for word, of a dtype its kernel lacks (``takes``: an
    ``EAGER_TAKES`` entry)."""
    if comp not in takes[1]:
        raise RuntimeError(f'"{takes[0]}" not implemented for '
                           f"'{_SCALAR_TYPE_NAMES[comp]}'")


def rounded_to(kind, comp, *args):
    """The dtype eager rounds a float16 op's scalars to before computing in float32
    (its kernel casts them to the tensors' dtype), or None where it computes in its
    own dtype anyway."""
    common = promoted(KIND.NO_OPMATH, *args)[1]
    return common if common != comp else None


def binary(fn, kind, takes=None, opmath_scalar=False):
    """``opmath_scalar``: eager's float16 kernel reads a scalar operand in float32
    (``mul``, ``div``); the others round it to float16 first."""
    reduced = correctly_rounded(fn) if fn in (P.atan2, P.power) else fn

    def lower(a, b, *, alpha=None):
        if fn is P.subtract:
            _check_sub(a, b)
        comp, out = promoted(kind, a, b)
        if takes is not None:
            check_takes(takes, out)
        if alpha is not None:
            _check_alpha(out, alpha)
        via = None if opmath_scalar else rounded_to(kind, comp, a, b)
        x, y = operand(a, comp, via), operand(b, comp, via)
        if alpha is not None and alpha != 1:
            scale = operand(alpha, comp, via)
            if comp != out and fn in (P.add, P.subtract):
                return add_scaled(a, b, x, y, -scale if fn is P.subtract else scale, out)
            y = y * scale
        r = (fn if comp == out else reduced)(x, y)
        return r if r._node.dtype == out else P.astype(r, D.DTYPES[out])
    return lower


def _unary(fn, kind, takes=None, reduced=None):
    """``reduced``: eager's float32 formula for a float16 input, where not ``fn``'s."""
    def lower(a):
        comp, out = promoted(kind, a)
        if takes is not None:
            check_takes(takes, out if out != D.BOOL else comp)
        x = operand(a, comp)
        r = fn(x) if reduced is None or comp == out else reduced(x, out)
        return r if r._node.dtype == out else P.astype(r, D.DTYPES[out])
    return lower


def _reversed(fn):
    return lambda a, b, *, alpha=None: fn(b, a, alpha=alpha)


#: (aten packet, lazyrt function, torch's promotion kind)
BINARY = [
    (aten.add, P.add, KIND.DEFAULT),
    (aten.sub, P.subtract, KIND.DEFAULT),
    (aten.mul, P.multiply, KIND.DEFAULT),
    (aten.div, P.divide, KIND.INT_TO_FLOAT),
    (aten.maximum, P.maximum, KIND.DEFAULT),
    (aten.minimum, P.minimum, KIND.DEFAULT),
    (aten.eq, P.equal, KIND.ALWAYS_BOOL),
    (aten.ne, P.not_equal, KIND.ALWAYS_BOOL),
    (aten.lt, P.less, KIND.ALWAYS_BOOL),
    (aten.le, P.less_equal, KIND.ALWAYS_BOOL),
    (aten.gt, P.greater, KIND.ALWAYS_BOOL),
    (aten.ge, P.greater_equal, KIND.ALWAYS_BOOL),
    (aten.logical_and, P.logical_and, KIND.ALWAYS_BOOL),
    (aten.logical_or, P.logical_or, KIND.ALWAYS_BOOL),
    (aten.bitwise_and, P.bitwise_and, KIND.DEFAULT),
    (aten.bitwise_or, P.bitwise_or, KIND.DEFAULT),
    (aten.bitwise_xor, P.bitwise_xor, KIND.DEFAULT),
    (aten.logical_xor, P.logical_xor, KIND.ALWAYS_BOOL),
    (aten.atan2, P.atan2, KIND.INT_TO_FLOAT),
    (aten.hypot, P.hypot, KIND.DEFAULT),
    (aten.copysign, P.copysign, KIND.INT_TO_FLOAT),
    (aten.bitwise_left_shift, P.bitwise_left_shift, KIND.DEFAULT),
    (aten.bitwise_right_shift, P.bitwise_right_shift, KIND.DEFAULT),
    (aten.__lshift__, P.bitwise_left_shift, KIND.DEFAULT),
    (aten.__rshift__, P.bitwise_right_shift, KIND.DEFAULT),
]


def _sign(x):
    """torch's sign, ``(0 < x) - (x < 0)``: a NaN's sign is 0 and -0.0's is 0.0
    (NumPy's ``sign``, lazyrt's, gives NaN and -0.0)."""
    code = x._node.dtype
    if code == D.BOOL:
        return P.astype(x, x.dtype)
    if code not in D.FLOATING:
        return P.sign(x)
    zero = runtime_scalar(0, code)
    return P.astype(x > zero, x.dtype) - P.astype(x < zero, x.dtype)


UNARY = [
    (aten.neg, P.negative, KIND.DEFAULT),
    (aten.abs, P.abs, KIND.COMPLEX_TO_FLOAT),
    (aten.exp, P.exp, KIND.INT_TO_FLOAT),
    (aten.expm1, P.expm1, KIND.INT_TO_FLOAT),
    (aten.log, P.log, KIND.INT_TO_FLOAT),
    (aten.log1p, P.log1p, KIND.INT_TO_FLOAT),
    (aten.sqrt, P.sqrt, KIND.INT_TO_FLOAT),
    (aten.rsqrt, P.rsqrt, KIND.INT_TO_FLOAT),
    (aten.sin, P.sin, KIND.INT_TO_FLOAT),
    (aten.cos, P.cos, KIND.INT_TO_FLOAT),
    (aten.tanh, P.tanh, KIND.INT_TO_FLOAT),
    (aten.sigmoid, P.sigmoid, KIND.INT_TO_FLOAT),
    (aten.erf, P.erf, KIND.INT_TO_FLOAT),
    (aten.erfc, P.erfc, KIND.INT_TO_FLOAT),
    (aten.exp2, P.exp2, KIND.INT_TO_FLOAT),
    (aten.reciprocal, P.reciprocal, KIND.INT_TO_FLOAT),
    (aten.sign, _sign, KIND.DEFAULT),
    (aten.floor, P.floor, KIND.DEFAULT),
    (aten.ceil, P.ceil, KIND.DEFAULT),
    (aten.logical_not, P.logical_not, KIND.ALWAYS_BOOL),
    (aten.bitwise_not, P.invert, KIND.DEFAULT),
    (aten.isnan, P.isnan, KIND.ALWAYS_BOOL),
    (aten.isinf, P.isinf, KIND.ALWAYS_BOOL),
    (aten.isfinite, P.isfinite, KIND.ALWAYS_BOOL),
    (aten.tan, P.tan, KIND.INT_TO_FLOAT),
    (aten.asin, P.asin, KIND.INT_TO_FLOAT),
    (aten.acos, P.acos, KIND.INT_TO_FLOAT),
    (aten.atan, P.atan, KIND.INT_TO_FLOAT),
    (aten.sinh, P.sinh, KIND.INT_TO_FLOAT),
    (aten.cosh, P.cosh, KIND.INT_TO_FLOAT),
    (aten.asinh, P.asinh, KIND.INT_TO_FLOAT),
    (aten.acosh, P.acosh, KIND.INT_TO_FLOAT),
    (aten.atanh, P.atanh, KIND.INT_TO_FLOAT),
    (aten.log2, P.log2, KIND.INT_TO_FLOAT),
    (aten.log10, P.log10, KIND.INT_TO_FLOAT),
    (aten.round, P.round, KIND.DEFAULT),  # half to even, as eager rounds
    (aten.signbit, P.signbit, KIND.ALWAYS_BOOL),
]

#: ops whose eager float16 kernel reads a scalar operand in float32, not float16
_OPMATH_SCALAR = {aten.mul, aten.div}

for _packet, _fn, _kind in BINARY:
    register_lowering(*overloads_of(_packet, "Tensor", "Scalar", "default", "Tensor_Scalar",
                        "Scalar_Tensor"))(binary(_fn, _kind, EAGER_TAKES.get(_packet.__name__),
                      _packet in _OPMATH_SCALAR))
#: eager's own float32 formulas of float16 ops (:mod:`..opmath`)
#: (float32 operand, result dtype) -> float32 result
_REDUCED_FORMULA = {aten.erf: lambda x, out: vectorized_erf(x),
                    aten.sigmoid: lambda x, out: vectorized_sigmoid(x),
                    aten.rsqrt: vectorized_rsqrt}
_REDUCED_FORMULA.update((p, lambda x, out, fn=fn: correctly_rounded(fn)(x))
                        for p, fn, kind in UNARY
                        if kind is KIND.INT_TO_FLOAT and p not in _REDUCED_FORMULA)

for _packet, _fn, _kind in UNARY:
    register_lowering(*overloads_of(_packet, "default"))(
        _unary(_fn, _kind, EAGER_TAKES.get(_packet.__name__), _REDUCED_FORMULA.get(_packet)))
register_lowering(aten.rsub.Tensor, aten.rsub.Scalar)(_reversed(binary(P.subtract, KIND.DEFAULT)))


@register_lowering(*overloads_of(aten.pow, "Tensor_Scalar", "Tensor_Tensor", "Scalar"))
def _pow(a, b):
    comp, out = promoted(KIND.DEFAULT, a, b)
    via = rounded_to(KIND.DEFAULT, comp, a, b)  # eager rounds a float16 op's exponent
    if isinstance(b, (int, float)) and not isinstance(b, bool):
        # a Python exponent is baked into the program (x ** 2 becomes x * x)
        e = number_of(b if via is None else number_of(b, via), comp)
        x = operand(a, comp)
        if comp == out or e in (2, 3, 0.5, -1):  # float16: in float32 as eager's, x * x...
            return down(P.power(x, e), out)
        if e in (-0.5, -2):  # eager's 1 / sqrt(x) and 1 / (x * x)
            one = runtime_scalar(1, comp)
            return down(one / (P.sqrt(x) if e == -0.5 else x * x), out)
        return down(correctly_rounded(P.power)(x, runtime_scalar(e, comp)), out)
    x, y = operand(a, comp, via), operand(b, comp, via)
    return down(P.power(x, y) if comp == out else correctly_rounded(P.power)(x, y), out)


@register_lowering(aten.relu.default)
def _relu(a):
    x = value(a)
    zero = runtime_scalar(0, x._node.dtype)
    return S.where(x < zero, zero, x)  # eager's clamp_min: -0.0 and NaN stay as they are


@register_lowering(aten.gelu.default)
def _gelu(a, *, approximate="none"):
    v = value(a)
    x = up(v)
    code = x._node.dtype
    half = runtime_scalar(0.5, code)
    if approximate == "tanh":
        inner = runtime_scalar(math.sqrt(2 / math.pi), code) * (
            x + runtime_scalar(0.044715, code) * x * x * x)
        tanh = P.tanh if code == v._node.dtype else correctly_rounded(P.tanh)
        return down(half * x * (runtime_scalar(1, code) + tanh(inner)), v._node.dtype)
    def gelu(erf):
        return down(x * half * (runtime_scalar(1, code) + erf(x * runtime_scalar(
            math.sqrt(0.5), code))), v._node.dtype)
    if code == v._node.dtype:
        return gelu(P.erf)
    # float16: eager's ATen kernel, its vectorized erf but in its loop's scalar remainder
    # (torch's oneDNN gelu, where it takes float16, is not followed: see opmath.py)
    tail = scalar_remainder(x.shape, (a,), torch.float16)
    if tail is False or tail is True:
        return gelu(correctly_rounded(P.erf) if tail else vectorized_erf)
    return S.where(tail, gelu(correctly_rounded(P.erf)), gelu(vectorized_erf))


@register_lowering(aten.where.self)
def _where(cond, a, b):
    _, out = promoted(KIND.DEFAULT, a, b)
    return S.where(operand(cond, D.BOOL), operand(a, out), operand(b, out))


@register_lowering(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(start, end, weight):
    """torch's formula: the branch keeps lerp(a, b, 1) == b exactly. In float16,
    eager's float32 kernel fuses each branch's multiply-add (FMA), rounded once."""
    comp, out = promoted(KIND.DEFAULT, start, end, weight)
    a, b = operand(start, comp), operand(end, comp)
    w = operand(weight, comp)
    fused = comp != out

    def small():
        return fused_multiply_add(w, b - a, a) if fused else a + w * (b - a)

    def large(one_minus_w):
        return fused_multiply_add(-(b - a), one_minus_w, b) if fused \
            else b - (b - a) * one_minus_w
    if isinstance(weight, (int, float)):
        r = small() if abs(weight) < 0.5 else large(
            runtime_scalar(1, comp) - w if fused else operand(1 - weight, comp))
    else:
        r = S.where(P.abs(w) < runtime_scalar(0.5, comp), small(),
                    large(runtime_scalar(1, comp) - w))
    return down(r, out)


def _addc(fn):
    """``addcmul`` / ``addcdiv``: in float16, eager's float32 ``self + value * t1 * t2``
    (with an FMA) and ``self + value * t1 / t2``, rounded once."""
    def lower(self, t1, t2, *, value=1):
        comp, out = promoted(KIND.DEFAULT, self, t1, t2)
        x = operand(self, comp)
        if comp != out:
            scaled = operand(value, comp) * operand(t1, comp)
            if fn is P.multiply:
                return down(fused_multiply_add(scaled, operand(t2, comp), x), out)
            return down(x + scaled / operand(t2, comp), out)
        prod = fn(operand(t1, comp), operand(t2, comp))
        return x + (prod if value == 1 else operand(value, comp) * prod)
    return lower


def fused_multiply_add_op(a, b, c):
    """Inductor's ``prims.fma`` (Dynamo writes ``addcmul_`` with a value as a
    ``mul`` and an ``fma``): ``a * b + c`` rounded once where the result is float32
    or narrower (the float64 product of float32 values is exact); float64 as
    ``a * b + c``. Registered by :mod:`lazyrt.torch.dynamo`, which loads the prim."""
    comp, out = promoted(KIND.DEFAULT, a, b, c)
    x, y, z = operand(a, comp), operand(b, comp), operand(c, comp)
    if comp == D.FLOAT32:
        return down(fused_multiply_add(x, y, z), out)
    return down(x * y + z, out)


@register_lowering(aten.threshold_backward.default)
def _threshold_backward(grad, x, threshold):
    g = value(grad)
    return S.where(operand(x, g._node.dtype) <= operand(threshold, g._node.dtype),
                   runtime_scalar(0, g._node.dtype), g)


@register_lowering(aten.clamp.default, aten.clamp.Tensor)
def _clamp(a, lo=None, hi=None):
    """Eager's clamp: a NaN input stays NaN, a NaN bound gives NaN. With a number
    (or a CPU scalar) for a bound, a value equal to it stays itself (eager's
    ``clamp(-0.0, min=0)`` is -0.0); with a tensor bound eager's own kernels
    differ on that tie."""
    _, comp = promoted(KIND.DEFAULT, a, *(v for v in (lo, hi) if v is not None))
    out = operand(a, comp)
    for bound, outside, fn in ((lo, P.less, P.maximum), (hi, P.greater, P.minimum)):
        if bound is None:
            continue
        b = operand(bound, comp)
        number = cpu_scalar(bound) if isinstance(bound, torch.Tensor) else bound
        if isinstance(number, (int, float)) and not math.isnan(number):
            out = S.where(outside(out, b), b, out)
        else:
            out = fn(out, b)
    return out


@register_lowering(aten.leaky_relu.default)
def _leaky_relu(a, slope=0.01):
    x = value(a)
    code = x._node.dtype
    scaled = down(up(x) * operand(slope, opmath(code)), code)
    return S.where(x > runtime_scalar(0, code), x, scaled)


register_lowering(aten.trunc.default)(_unary(P.trunc, KIND.DEFAULT))


@register_lowering(aten.hardtanh.default)
def _hardtanh(a, lo=-1, hi=1):
    x = value(a)
    if x._node.dtype in D.FLOATING:
        return _clamp(a, lo, hi)
    # torch clamps an integer tensor in float and truncates back (bounds are not promoted)
    y = P.minimum(P.maximum(P.astype(x, D.float64), operand(lo, D.FLOAT64)),
                  operand(hi, D.FLOAT64))
    return P.astype(y, x.dtype)


@register_lowering(aten.softplus.default)
def _softplus(a, beta=1, threshold=20):
    """log1p(exp(beta x)) / beta, x itself past the threshold, as eager; lazyrt's
    softplus op, exact to the last bit where eager's formula rounds twice."""
    v = value(a)
    x = up(v)
    code = x._node.dtype
    bx = x if beta == 1 else x * runtime_scalar(beta, code)
    soft = P.softplus(bx) if beta == 1 else P.softplus(bx) / runtime_scalar(beta, code)
    return down(S.where(bx > runtime_scalar(threshold, code), x, soft), v._node.dtype)


def _nan_ignoring(fn):
    """``fmax``/``fmin``: ``maximum``/``minimum`` where a NaN loses to a number."""
    def lower(a, b):
        _, comp = promoted(KIND.DEFAULT, a, b)  # exact: in the result dtype
        x, y = operand(a, comp), operand(b, comp)
        if comp not in D.FLOATING:
            return fn(x, y)
        return S.where(P.isnan(y), x, S.where(P.isnan(x), y, fn(x, y)))
    return lower


@register_lowering(aten.round.decimals)
def _round_decimals(a, *, decimals=0):
    """eager's formula in the input's dtype: ``nearbyint(x * 10^d) / 10^d``, or
    ``nearbyint(x / 10^-d) * 10^-d`` for negative ``d``."""
    comp, out = promoted(KIND.DEFAULT, a)
    if comp not in D.FLOATING:
        return NotImplemented
    x = operand(a, comp)
    ten = runtime_scalar(10.0 ** abs(decimals), comp)
    return down(P.round(x / ten) * ten if decimals < 0 else P.round(x * ten) / ten, out)


register_lowering(aten.fmax.default)(_nan_ignoring(P.maximum))
register_lowering(aten.fmin.default)(_nan_ignoring(P.minimum))
register_lowering(aten.addcmul.default)(_addc(P.multiply))
register_lowering(aten.addcdiv.default)(_addc(P.divide))
register_lowering(aten.clamp_min.default, aten.clamp_min.Tensor)(lambda a, lo: _clamp(a, lo))
register_lowering(aten.clamp_max.default, aten.clamp_max.Tensor)(lambda a, hi: _clamp(a, None, hi))


@register_lowering(aten._to_copy.default)  # to the CPU is a barrier (barriers.py)
def _to_dtype(a, dtype=None, **_ignored):
    x = value(a)
    return x if dtype is None else P.astype(x, D.DTYPES[code_of(dtype)])


register_lowering(aten.alias.default, aten.alias_copy.default, aten.detach.default,
                  aten.detach_copy.default, aten.clone.default, aten.lift_fresh_copy.default,
                  aten.contiguous.default)(
    lambda a, *args, **kwargs: P.astype(value(a), value(a).dtype))
