"""Helpers the generated JAX functions call, where ``jax.numpy`` and NumPy
differ (the JAX emitter writes the calls; this module knows nothing
of lazyrt's IR).

NumPy's semantics, which every lazyrt backend keeps:

* integer ``//`` and ``%`` by zero give 0 (XLA gives -1 and the dividend);
* float16 and bfloat16 arithmetic is computed in float32 and rounded after
  every op (XLA may keep excess precision across a fused chain; an explicit
  ``reduce_precision`` is a rounding it may not remove);
* sums and products accumulate in the op table's accumulator dtype;
* ``argmax``/``argmin`` over several axes flatten them, as NumPy's ``axis=None``.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax


def half(x):
    """A float32 value rounded once to float16, as NumPy's float16 loops do
    (XLA rounds at each convert: checked against NumPy's op-by-op rounding)."""
    return x.astype(jnp.float16)


def bfloat(x):
    """A float32 value rounded once to bfloat16, as ml_dtypes' bfloat16 loops do."""
    return x.astype(jnp.bfloat16)


def f64_to_bf16(x):
    """float64 -> bfloat16 rounded once (through float32 it would round twice): to 8
    significant bits in float64 for normal bfloat16 values, to a multiple of 2^-133
    below them (bfloat16 subnormals, which XLA may flush), then exactly."""
    normal = lax.reduce_precision(x, exponent_bits=11, mantissa_bits=7)
    subnormal = jnp.round(x * 2.0 ** 133) * 2.0 ** -133
    return jnp.where(jnp.abs(x) < 2.0 ** -126, subnormal, normal).astype(jnp.bfloat16)


def f64_to_f16(x):
    """float64 -> float16 rounded once (XLA converts through float32, which
    rounds twice): to 11 significant bits in float64 for normal float16 values,
    to a multiple of 2^-24 below them (float16 subnormals), then exactly.
    ``reduce_precision`` to float16's own exponent range would flush those
    subnormals, so it keeps float64's."""
    normal = lax.reduce_precision(x, exponent_bits=11, mantissa_bits=10)
    subnormal = jnp.round(x * 2.0 ** 24) * 2.0 ** -24
    return jnp.where(jnp.abs(x) < 2.0 ** -14, subnormal, normal).astype(jnp.float16)


def from_bool(x, dtype):
    """bool -> number, kept from XLA's simplifier: it turns the convert into a
    select and then folds ``0 / y`` in the unselected branch to 0 (NumPy: NaN)."""
    return lax.optimization_barrier(x.astype(dtype))


def divide(a, b):
    """a / b correctly rounded. XLA rewrites ``a / broadcast(b)`` as
    ``a * broadcast(1 / b)`` (off by an ulp); a divisor broadcast behind an
    optimization barrier is divided as is."""
    if b.shape != a.shape:
        b = lax.optimization_barrier(jnp.broadcast_to(b, jnp.broadcast_shapes(a.shape, b.shape)))
    return a / b


def int_floordiv(a, b):
    zero = b == 0
    return jnp.where(zero, jnp.zeros((), a.dtype), jnp.floor_divide(a, jnp.where(zero, 1, b)))


def int_mod(a, b):
    zero = b == 0
    return jnp.where(zero, jnp.zeros((), a.dtype), jnp.remainder(a, jnp.where(zero, 1, b)))


def float_floordiv(a, b):
    """NumPy's float ``//`` (its divmod: from ``fmod``, a zero quotient takes
    the sign of ``a / b``; ``jnp.floor_divide`` differs in the sign of zeros)."""
    mod = jnp.fmod(a, b)
    div = divide(a - mod, b)
    div = jnp.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floor = jnp.floor(div)
    floor = jnp.where(div - floor > 0.5, floor + 1, floor)
    quotient = divide(a, b)
    out = jnp.where(div != 0, floor, jnp.copysign(jnp.zeros((), div.dtype), quotient))
    return jnp.where(b == 0, quotient, out)


def float_mod(a, b):
    """NumPy's float remainder: the divisor's sign, a zero result included
    (``jnp.remainder`` gives +0.0 where NumPy gives -0.0 for a negative divisor)."""
    m = jnp.remainder(a, b)
    return jnp.where(m == 0, jnp.copysign(jnp.zeros((), m.dtype), b), m)


def int_reciprocal(a):
    """1 // x truncated toward zero (C's division), 0 for x == 0."""
    zero = a == 0
    one = jnp.ones((), a.dtype)
    return jnp.where(zero, jnp.zeros((), a.dtype), lax.div(one, jnp.where(zero, one, a)))


def hypot(a, b):
    """inf when either is inf, even beside NaN (C99 and NumPy)."""
    out = jnp.hypot(a, b)
    return jnp.where(jnp.isinf(a) | jnp.isinf(b), jnp.asarray(jnp.inf, out.dtype), out)


def _asin(x):
    """asin as atan2(x, sqrt(1 - x^2)): XLA's own asin loses small normal inputs."""
    return jnp.arctan2(x, jnp.sqrt((1 - x) * (1 + x)))


def _atanh(x):
    """log1p(2|x| / (1 - |x|)) / 2 with x's sign: XLA's float64 atanh is off by
    hundreds of ULPs near 0.4."""
    a = jnp.abs(x)
    return jnp.copysign(0.5 * jnp.log1p(2 * a / (1 - a)), x)


def _sinh_cosh(x, odd):
    """Up to |x| = 1 the Taylor series (sinh, to x^21) or XLA's cosh; above, from
    expm1 (sinh) or exp up to 20 and (e^(a/2) / 2) e^(a/2) past it, which reaches
    the top of the range without overflow (XLA's are 4 to 20 ULP off)."""
    a = jnp.abs(x)
    zero = jnp.zeros((), a.dtype)
    s = jnp.where(a > 1, zero, a)
    if odd:
        w = s * s
        q = jnp.full((), 1 / math.factorial(21), a.dtype)
        for k in range(19, 1, -2):
            q = q * w + 1 / math.factorial(k)
        low = s + s * (w * q)
    else:
        low = jnp.cosh(s)
    m = jnp.where(a > 20, zero, a)
    if odd:
        e = jnp.expm1(m)
        mid = 0.5 * (e + e / (e + 1))
    else:
        e = jnp.exp(m)
        mid = 0.5 * (e + 1 / e)
    h = jnp.exp(0.5 * a)
    out = jnp.where(a > 20, (0.5 * h) * h, jnp.where(a > 1, mid, low))
    return jnp.copysign(out, x) if odd else out


def _log1p64(x):
    """log1p as log(u) - ((u - 1) - x) / u, u = 1 + x rounded (Goldberg's correction
    of u's rounding error, first order): XLA's float64 log1p is 112 ULP off near -0.41."""
    u = lax.optimization_barrier(1 + x)  # else XLA folds (1 + x) - 1 into x
    d = u - 1
    fixed = jnp.log(u) - (d - x) / jnp.where(u == 0, 1, u)
    return jnp.where((d == 0) | (u == jnp.inf), x, fixed)  # tiny x (-0 too), and +inf


# --- float32 functions evaluated in float64, rounded once ---------------------------
# The contract: a float32 result within 1 ULP of the correctly rounded value. XLA's
# float32 functions on CPU miss it (measured on 2^22 stratified float32 inputs, see
# tests/test_jax_math_accuracy.py): exp 4 ULP near overflow, expm1 5, tanh 4, erf 5,
# sigmoid 2, log1p 2, log2 2, log10 3, asin/acos 2, atan 3, sinh/cosh/asinh/acosh/atanh 3,
# pow and atan2 wrong on subnormal operands. Their float64 versions err by at most a
# few float64 ULPs (2^-50 relative, log1p after _log1p64), so one rounding to float32
# lands within 1 ULP (0 ULP on that sample; erf: see _erf_of_float32): the method
# lazyrt_math_array_api.h uses for the same functions in C. XLA's float32 log, sin,
# cos and tan meet the bound and stay. The backend runs with x64 enabled; float16 and
# bfloat16 reach here as float32 (the emitter computes them in float32). Cost on CPU
# (2 cores, 2^24 float32): tanh 2.4 -> 2.9 ns/element, expm1 2.9 -> 4.8, sigmoid
# 2.9 -> 4.5, log10 2.7 -> 17 (XLA's float64 log is scalar libm calls).

def _float32_in_float64(fn):
    def run(*args):
        if args[0].dtype == jnp.float32:
            return fn(*(a.astype(jnp.float64) for a in args)).astype(jnp.float32)
        return fn(*args)
    run.__name__ = getattr(fn, "__name__", "fn").lstrip("_")
    return run


def _sigmoid(x):
    """e / (1 + e) below 0 and 1 / (1 + e) above, e = exp(-|x|): never overflows."""
    e = jnp.exp(-jnp.abs(x))
    return jnp.where(x < 0, e, 1) / (1 + e)


def _erf(x):
    from jax.scipy.special import erf as xla_erf
    return xla_erf(x)


def _erfc(x):
    from jax.scipy.special import erfc as xla_erfc
    return xla_erfc(x)


def _softplus(x):
    from jax.nn import softplus as xla_softplus
    return xla_softplus(x)


# XLA's float64 erf takes 7x the time of its float32 one on CPU (18 ns/element against
# 2.5, 2 cores): for float32 arguments, the C backend's lz_erff fits in float64
# arithmetic instead (6 ns; float64 leaves the float32-tuned fits' error only: max 1
# ULP). A float64 port of lz__log_d (atanh series) was no faster than XLA's log.

def _erf_of_float32(x):
    """lz_erff's fits in float64 arithmetic: x + x q(x^2) below 1, 1 - exp(-x^2)
    erfcx(|x|) (a degree-12 fit in u = (|x| - 2.45) / 1.45) up to 3.9, 1 above; the
    sign put back last (erf(-0) = -0). x^2 is exact in float64, so no FMA split."""
    d = x.astype(jnp.float64)
    a = jnp.abs(d)
    w = a * a
    q = jnp.full((), -9.670130567e-06, jnp.float64)
    for c in (1.126351563e-04, -8.483169950e-04, 5.220920779e-03, -2.686536871e-02,
              1.128378063e-01, -3.761263788e-01, 1.283791661e-01):
        q = q * w + c
    b = jnp.minimum(a, 3.9)
    u = b * 0.6896551724137931 - 1.6896551724137931
    r = jnp.full((), 1.034514298e-05, jnp.float64)
    for c in (-2.834629595e-05, 4.616407023e-05, -1.236771204e-04, 3.549008397e-04,
              -8.919780958e-04, 2.162377816e-03, -5.126396194e-03, 1.175260078e-02,
              -2.595580183e-02, 5.503539741e-02, -1.115084961e-01, 2.145870924e-01):
        r = r * u + c
    big = jnp.where(a >= 3.9, 1.0, 1 - jnp.exp(-b * b) * r)
    m = jnp.where(a < 1, a + a * q, big)
    return jnp.where(jnp.isnan(d), d, jnp.copysign(m, d)).astype(x.dtype)


def _on_float32(f32, f64):
    """``f32`` for float32 arguments, ``f64`` (a float64 function) for float64 ones."""
    def run(x):
        return f32(x) if x.dtype == jnp.float32 else f64(x)
    return run


exp = _float32_in_float64(jnp.exp)
expm1 = _float32_in_float64(jnp.expm1)
log1p = _float32_in_float64(_log1p64)
tanh = _float32_in_float64(jnp.tanh)
sigmoid = _float32_in_float64(_sigmoid)
erf = _on_float32(_erf_of_float32, _erf)
log2 = _float32_in_float64(jnp.log2)
log10 = _float32_in_float64(jnp.log10)
asin = _float32_in_float64(_asin)
acos = _float32_in_float64(jnp.arccos)
atan = _float32_in_float64(jnp.arctan)
sinh = _float32_in_float64(lambda x: _sinh_cosh(x, True))
cosh = _float32_in_float64(lambda x: _sinh_cosh(x, False))
asinh = _float32_in_float64(jnp.arcsinh)
acosh = _float32_in_float64(jnp.arccosh)
atanh = _float32_in_float64(_atanh)
atan2 = _float32_in_float64(jnp.arctan2)
power = _float32_in_float64(jnp.power)
# XLA's float32 exp2 is 67 ULP off near overflow, erfc 62 (at 8.7), softplus 3: float64
exp2 = _float32_in_float64(jnp.exp2)
erfc = _float32_in_float64(_erfc)
softplus = _float32_in_float64(_softplus)


def left_shift(a, b):
    """np.left_shift: an amount outside [0, bits) gives 0 (NumPy reads a negative
    amount as a huge unsigned one), whatever XLA does with such amounts."""
    ok = (b >= 0) & (b < jnp.iinfo(a.dtype).bits)
    return jnp.where(ok, jnp.left_shift(a, jnp.where(ok, b, 0)), jnp.zeros((), a.dtype))


def right_shift(a, b):
    """np.right_shift: arithmetic for signed ints; past the width 0, or -1 if a < 0."""
    ok = (b >= 0) & (b < jnp.iinfo(a.dtype).bits)
    past = jnp.where(a < 0, jnp.full((), -1, jnp.int64), 0).astype(a.dtype)
    return jnp.where(ok, jnp.right_shift(a, jnp.where(ok, b, 0)), past)


def _nan_or(wins, a, b):
    """``a`` where it ``wins`` against ``b`` or is NaN, else ``b``: np.maximum and
    np.minimum as every lazyrt backend computes them. For float32/64 equal operands
    give ``b`` (``maximum(0.0, -0.0)`` is -0.0 as in NumPy; XLA's max gives +0.0);
    for float16 they give ``a`` (NumPy's half loop; :func:`maximum16`)."""
    return jnp.where(wins(a, b) | (a != a), a, b)


def maximum16(a, b):
    """np.maximum on float16 (computed in any float): the first of equal operands."""
    return _nan_or(jnp.greater_equal, a, b)


def minimum16(a, b):
    return _nan_or(jnp.less_equal, a, b)


def maximum(a, b):
    if jnp.issubdtype(a.dtype, jnp.floating):
        return _nan_or(jnp.greater, a, b)
    return jnp.maximum(a, b)


def minimum(a, b):
    if jnp.issubdtype(a.dtype, jnp.floating):
        return _nan_or(jnp.less, a, b)
    return jnp.minimum(a, b)


def accumulate(fn, x, axes, keepdims, acc, out):
    """``fn`` (jnp.sum or jnp.prod) over ``axes``, accumulated in ``acc``."""
    return fn(x.astype(acc), axis=axes, keepdims=keepdims).astype(out)


def arg(fn, x, axes, keepdims):
    """argmax/argmin over one axis, or over several flattened (NumPy's axis=None)."""
    if len(axes) == 1:
        return fn(x, axis=axes[0], keepdims=keepdims).astype(jnp.int64)
    out = fn(x.reshape(-1)).astype(jnp.int64)
    return out.reshape((1,) * x.ndim) if keepdims else out


def _gather_check(bad, name, size, axis):
    if bad:
        raise IndexError(f"{name}: an index is out of range for axis {axis} of size {size}")


def _wrapped(indices, size, axis, negative, name):
    """Indices checked (IndexError at run time, as on every lazyrt backend; XLA
    would clamp silently), negative ones counted from the end, then clipped."""
    import jax
    low = -size if negative else 0
    jax.debug.callback(_gather_check, jnp.any((indices < low) | (indices >= size)), name,
                       size, axis)
    indices = jnp.where(indices < 0, indices + size, indices)
    return jnp.clip(indices, 0, max(size - 1, 0))


def gather(src, indices, axis, negative):
    """take_along_axis along ``axis``; src and indices agree off the axis."""
    idx = _wrapped(indices, src.shape[axis], axis, negative, "lazyrt.take_along_axis")
    return jnp.take_along_axis(src, idx, axis=axis, mode="clip")


def scatter_add(values, indices, axis, size, negative):
    """zeros with ``size`` along ``axis``, values added at the indices (float16 and
    bfloat16 summed in float32, rounded once; bool is or)."""
    idx = _wrapped(indices, size, axis, negative, "lazyrt.scatter_add")
    acc = jnp.float32 if values.dtype in (jnp.float16, jnp.bfloat16) else values.dtype
    if values.dtype == jnp.bool_:
        acc = jnp.int32
    shape = values.shape[:axis] + (size,) + values.shape[axis + 1:]
    where = tuple(idx if k == axis else
                  jnp.arange(d).reshape((1,) * k + (d,) + (1,) * (values.ndim - k - 1))
                  for k, d in enumerate(values.shape))
    out = jnp.zeros(shape, acc).at[where].add(values.astype(acc), mode="drop")
    return (out != 0) if values.dtype == jnp.bool_ else out.astype(values.dtype)


# --- counter-based random bits ------------------------------------------------
_PHILOX_M = (0xD2511F53, 0xCD9E8D57)
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)


def philox_word(seed, position):
    """Word ``position`` of seed's Philox4x32-10 stream, an int64 in [0, 2^32):
    output ``p & 3`` of the block with counter (b & 0xffffffff, b >> 32, 0, 0),
    b = p >> 2, under key (seed & 0xffffffff, seed >> 32), p and seed as uint64
    (lazyrt's layout, as ``lazyrt.ops.philox4x32_10``; jax.random's threefry is
    another generator). 32x32 -> 64 bit products in uint64 (the backend runs
    with x64 enabled)."""
    seed, position = jnp.broadcast_arrays(seed, position)
    u32, u64 = jnp.uint32, jnp.uint64
    p = lax.bitcast_convert_type(position, u64)
    s = lax.bitcast_convert_type(seed, u64)
    b = p >> u64(2)
    c0, c1 = b.astype(u32), (b >> u64(32)).astype(u32)
    c2 = c3 = jnp.zeros_like(c0)
    k0, k1 = s.astype(u32), (s >> u64(32)).astype(u32)
    for r in range(10):
        if r:
            k0, k1 = k0 + u32(_PHILOX_W[0]), k1 + u32(_PHILOX_W[1])
        p0 = c0.astype(u64) * u64(_PHILOX_M[0])
        p1 = c2.astype(u64) * u64(_PHILOX_M[1])
        c0, c1, c2, c3 = ((p1 >> u64(32)).astype(u32) ^ c1 ^ k0, p1.astype(u32),
                          (p0 >> u64(32)).astype(u32) ^ c3 ^ k1, p0.astype(u32))
    lane = (p & u64(3)).astype(u32)
    lo = jnp.where((lane & u32(1)) != 0, c1, c0)
    hi = jnp.where((lane & u32(1)) != 0, c3, c2)
    return jnp.where((lane & u32(2)) != 0, hi, lo).astype(jnp.int64)
