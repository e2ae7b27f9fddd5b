"""Math helpers the generated Triton kernels call (``lzm.tanh(x)`` ...).

NumPy semantics where Triton's own operators differ: NaN-propagating
maximum/minimum, floor division and modulo with the divisor's sign (and
``x // 0 == 0`` for integers), ``np.round`` (half to even), ``np.power``,
shifts by any amount, ``copysign``/``signbit`` on the bits, ``logaddexp``.

Float math meets lazyrt's contract (float32 within 1 ULP of the correctly rounded
value; tests/test_triton_math_accuracy.py). exp, tanh, erf and sigmoid are in
triton_math_transcendental.py (the C backend's float32 polynomials, one code for
GPU and interpreter). The others have two implementations, picked at import time:
on a GPU libdevice, float32 through its double functions where its float32 ones
are documented past 1 ULP (sin, cos, tan, pow, atan2, the array API's inverse
and hyperbolic functions, log10); under ``TRITON_INTERPRET=1``, where libdevice
does not exist, float64 evaluations with NumPy's functions (``tl.sin`` of a
float64...), Kahan's log1p/expm1 and an atan series after two reductions, rounded
once to the argument's dtype.
"""

import triton
import triton.language as tl

# the autotune configs generated kernels name as lzm.*_CONFIGS live in triton_configs.py
from .triton_configs import INTERPRETED, SINGLE_CONFIG  # noqa: F401
from .triton_configs import (  # noqa: F401
    MATMUL_CONFIGS, MATMUL_INT_CONFIGS, POINTWISE_CONFIGS, REDUCTION_CONFIGS, TILE_CONFIGS)
# exp, log, tanh, erf, sigmoid (the float32 polynomials of the C backend) live in
# triton_math_transcendental.py
from .triton_math_transcendental import (  # noqa: F401
    erf, erf_f32, erfc, exp, exp2, exp_f32, expm1_generic, log, log1p_generic, sigmoid,
    softplus, tanh, tanh16, tanh_f32, tanh_generic)


# --- NumPy-exact pieces (same code on every target) -------------------------

@triton.jit
def maximum(a, b, TIES_FIRST: tl.constexpr = False):
    """np.maximum: NaN in either operand wins; of equal operands the second, or the
    first with ``TIES_FIRST`` (float16: NumPy's half loop; maximum(-0.0, 0.0) is -0.0)."""
    if TIES_FIRST:
        return tl.where((a >= b) | (a != a), a, b)
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def f64_to_bf16(x):
    """A float64 rounded once to bfloat16, held in float32: to float32 rounding to
    odd (toward zero, the last bit set when inexact), whose 24 bits keep what the
    rounding to bfloat16's 8 needs, then to nearest even (``x.to(tl.bfloat16)``
    may go through a float32 rounded to nearest: two roundings)."""
    f = x.to(tl.float32)
    back = f.to(tl.float64)
    away = (tl.abs(back) > tl.abs(x)).to(tl.uint32)
    inexact = (back != x).to(tl.uint32)  # NaN too: it stays NaN
    odd = ((f.to(tl.uint32, bitcast=True) - away) | inexact).to(tl.float32, bitcast=True)
    return odd.to(tl.bfloat16).to(tl.float32)


@triton.jit
def minimum(a, b, TIES_FIRST: tl.constexpr = False):
    if TIES_FIRST:
        return tl.where((a <= b) | (a != a), a, b)
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def floordiv_int(a, b):
    """np.floor_divide for signed ints: floor, b == 0 -> 0, MIN // -1 wraps."""
    safe = tl.where((b == 0) | (b == -1), 1, b)
    q = a // safe
    r = a - q * safe
    q = tl.where((r != 0) & ((r < 0) != (safe < 0)), q - 1, q)
    q = tl.where(b == -1, 0 - a, q)
    return tl.where(b == 0, 0, q)


@triton.jit
def mod_int(a, b):
    safe = tl.where((b == 0) | (b == -1), 1, b)
    r = a % safe
    r = tl.where((r != 0) & ((r < 0) != (safe < 0)), r + safe, r)
    return tl.where((b == 0) | (b == -1), 0, r)


@triton.jit
def floordiv_uint(a, b):
    safe = tl.where(b == 0, 1, b)
    return tl.where(b == 0, 0, a // safe)


@triton.jit
def mod_uint(a, b):
    safe = tl.where(b == 0, 1, b)
    return tl.where(b == 0, 0, a % safe)


@triton.jit
def floordiv_float(a, b):
    """NumPy's npy_divmod quotient (``%`` on floats is C fmod in Triton)."""
    mod = a % b
    div = (a - mod) / b
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    fl = tl.floor(div)
    fl = tl.where(div - fl > 0.5, fl + 1, fl)
    # a zero quotient takes the sign of a / b
    fl = tl.where(div == 0, (a / b) * 0.0, fl)
    return tl.where(b == 0, a / b, fl)


@triton.jit
def mod_float(a, b):
    mod = a % b
    fixed = tl.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod)
    # a zero remainder takes the divisor's sign
    fixed = tl.where(mod == 0, tl.where(b < 0, -0.0, 0.0).to(a.dtype), fixed)
    return tl.where(b == 0, mod, fixed)


@triton.jit
def sign_float(x):
    return tl.where(x > 0, 1.0, tl.where(x < 0, -1.0, tl.where(x == 0, 0.0, x))).to(x.dtype)


@triton.jit
def ipow(a, b, NBITS: tl.constexpr):
    """Integer power by squaring, wrapping like C; negative exponents as NumPy's C loop."""
    r = a * 0 + 1
    x = a
    e = b
    for _ in tl.static_range(NBITS):
        r = tl.where((e & 1) != 0, r * x, r)
        x = x * x
        e = e >> 1
    neg = tl.where(a == 1, 1, tl.where(a == -1, tl.where((b & 1) != 0, -1, 1), 0))
    return tl.where(b < 0, neg.to(r.dtype), r)


@triton.jit
def upow(a, b, NBITS: tl.constexpr):
    """Unsigned integer power by squaring (wraps)."""
    r = a * 0 + 1
    x = a
    e = b
    for _ in tl.static_range(NBITS):
        r = tl.where((e & 1) != 0, r * x, r)
        x = x * x
        e = e >> 1
    return r


@triton.jit
def rint_generic(x, BIG: tl.constexpr):
    """Round half to even; |x| >= BIG (2**23 or 2**52) is already integral."""
    r = tl.floor(x + 0.5)
    half = (r - x) == 0.5
    odd = (r - 2.0 * tl.floor(r * 0.5)) != 0
    r = tl.where(half & odd, r - 1.0, r)
    r = tl.where(tl.abs(x) >= BIG, x, r)
    return tl.where(x == 0, x, r)  # keeps -0.0


@triton.jit
def pow_generic(a, b):
    """np.power for floats through exp2/log2, with C99 pow's special cases."""
    inf = float("inf")
    r = tl.exp2(b * tl.log2(tl.abs(a)))
    b_finite = tl.abs(b) < inf
    b_int = b_finite & (tl.floor(b) == b)
    b_odd = b_int & ((b - 2.0 * tl.floor(b * 0.5)) != 0)
    r = tl.where(a < 0, tl.where(b_int, tl.where(b_odd, -r, r), float("nan")), r)
    r = tl.where((a == 0) & b_odd, tl.where(b < 0, 1.0 / a, a), r)       # signed zero
    r = tl.where(a == -inf, tl.where(b > 0, tl.where(b_odd, -inf, inf),
                                     tl.where(b_odd, -0.0, 0.0)), r)
    big = tl.abs(a) > 1.0
    r = tl.where(b == inf, tl.where(big, inf, 0.0), r)
    r = tl.where(b == -inf, tl.where(big, 0.0, inf), r)
    r = tl.where((a == -1.0) & (tl.abs(b) == inf), 1.0, r)
    r = tl.where((a != a) | (b != b), a + b, r)                         # NaN operands
    r = tl.where(b == 0, 1.0, r)
    return tl.where(a == 1, 1.0, r).to(a.dtype)


@triton.jit
def recip_rn(x):
    """1 / x (float32) correctly rounded: float32 ``/`` is the approximate
    div.full.f32 on NVIDIA GPUs, and the interpreter's division is exact."""
    return tl.math.div_rn(tl.full(x.shape, 1.0, tl.float32), x)


@triton.jit
def mul_combine(a, b):
    return a * b


@triton.jit
def hypot_generic(a, b):
    """sqrt(a*a + b*b) without overflow: float32 and float16 through float64
    (exact squares, one rounding), float64 scaled by the larger magnitude."""
    if a.dtype == tl.float64:
        x = tl.abs(a)
        y = tl.abs(b)
        big = tl.maximum(x, y)
        r = tl.minimum(x, y) / tl.where(big == 0, 1.0, big)
        h = big * tl.sqrt(1.0 + r * r)
    else:
        x = a.to(tl.float64)
        y = b.to(tl.float64)
        h = tl.sqrt(x * x + y * y).to(a.dtype)
    # tl.maximum drops a NaN operand: put NaN back, then inf wins over NaN (C99 hypot)
    h = tl.where((a != a) | (b != b), float("nan"), h)
    inf = (tl.abs(a) == float("inf")) | (tl.abs(b) == float("inf"))
    return tl.where(inf, float("inf"), h)


# --- the array API's remaining elementwise functions ---------------------------
# NumPy-exact on the bits, the same code on every target:

@triton.jit
def copysign(a, b):
    """|a| with the sign bit of b (NaNs and zeros included), as np.copysign."""
    if a.dtype == tl.float64:
        ua = a.to(tl.uint64, bitcast=True)
        ub = b.to(tl.uint64, bitcast=True)
        return (((ua << 1) >> 1) | ((ub >> 63) << 63)).to(tl.float64, bitcast=True)
    else:
        ua = a.to(tl.uint32, bitcast=True)
        ub = b.to(tl.uint32, bitcast=True)
        return (((ua << 1) >> 1) | ((ub >> 31) << 31)).to(tl.float32, bitcast=True)


@triton.jit
def signbit(x):
    """np.signbit: the sign bit, so -0.0 and -NaN are True."""
    if x.dtype == tl.float64:
        return (x.to(tl.uint64, bitcast=True) >> 63) != 0
    else:
        return (x.to(tl.uint32, bitcast=True) >> 31) != 0


@triton.jit
def trunc(x):
    """Toward zero; -0.0 and NaN kept (ceil(-0.5) is -0.0)."""
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))


@triton.jit
def shl(a, b, NBITS: tl.constexpr):
    """np.left_shift: an amount outside [0, NBITS) gives 0 (NumPy reads a negative
    amount as a huge unsigned one); never a shift by >= the width (poison in LLVM)."""
    ok = (b >= 0) & (b < NBITS)
    return tl.where(ok, a << tl.where(ok, b, 0), a * 0)


@triton.jit
def shr(a, b, NBITS: tl.constexpr):
    """np.right_shift: arithmetic for signed; past the width 0, or -1 if a < 0."""
    ok = (b >= 0) & (b < NBITS)
    return tl.where(ok, a >> tl.where(ok, b, 0), tl.where(a < 0, a * 0 - 1, a * 0))


@triton.jit
def logaddexp(a, b):
    """log(e^a + e^b) = max + log1p(e^-|a-b|) in float64; a == b (equal
    infinities too) is a + ln 2, as NumPy's npy_logaddexp."""
    x = a.to(tl.float64)
    y = b.to(tl.float64)
    r = maximum(x, y) + log1p(exp64(-tl.abs(x - y)))
    return tl.where(x == y, x + 0.6931471805599453, r).to(a.dtype)


# Under the interpreter (no libdevice): float64 evaluations of the usual
# cancellation-free formulas, rounded once to the argument's dtype.

@triton.jit
def _sign_of(r, x):
    """r (>= 0 or NaN, float64) with x's sign bit, in x's dtype."""
    return copysign(r.to(x.dtype), x)


@triton.jit
def _atan_pos64(t):
    """atan(t) for float64 t >= 0 (inf, NaN too): reduced to |u| <= tan(pi/8) by
    atan t = pi/2 + atan(-1/t) or pi/4 + atan((t-1)/(t+1)), then Taylor to u^47
    (truncation < 1e-17 relative: float64 results too)."""
    zero = tl.zeros_like(t)
    big = t > 2.414213562373095
    mid = t > 0.41421356237309503
    u = tl.where(big, -1.0 / tl.where(big, t, zero + 1.0),
                 tl.where(mid, (t - 1.0) / (t + 1.0), t))
    base = tl.where(big, zero + 1.5707963267948966,
                    tl.where(mid, zero + 0.7853981633974483, zero))
    w = u * u
    p = zero - 1.0 / 47
    for k in tl.static_range(22, 0, -1):
        p = p * w + (1.0 - 2.0 * (k % 2)) / (2 * k + 1)
    return base + (u + u * (w * p))


@triton.jit
def atan_generic(x):
    return _sign_of(_atan_pos64(tl.abs(x.to(tl.float64))), x)


@triton.jit
def atan2_generic(y, x):
    """C99 Annex F's atan2: the smaller over the larger magnitude, reflected into
    its octant and quadrant; both zero: ratio 0, both infinite: ratio 1."""
    yd = y.to(tl.float64)
    xd = x.to(tl.float64)
    ay = tl.abs(yd)
    ax = tl.abs(xd)
    steep = ay > ax
    num = tl.where(steep, ax, ay)
    den = tl.where(steep, ay, ax)
    q = num / tl.where(den == 0, den + 1.0, den)
    q = tl.where((ax == float("inf")) & (ay == float("inf")), tl.zeros_like(q) + 1.0, q)
    r = _atan_pos64(q)
    r = tl.where(steep, 1.5707963267948966 - r, r)
    r = tl.where(signbit(xd), 3.141592653589793 - r, r)
    r = copysign(r, yd)
    return tl.where((xd != xd) | (yd != yd), xd + yd, r).to(y.dtype)


@triton.jit
def asin_generic(x):
    a = tl.abs(x.to(tl.float64))
    return _sign_of(_atan_pos64(a / tl.sqrt((1.0 - a) * (1.0 + a))), x)


@triton.jit
def acos_generic(x):
    d = x.to(tl.float64)
    return (2.0 * _atan_pos64(tl.sqrt((1.0 - d) / (1.0 + d)))).to(x.dtype)


@triton.jit
def _sinh_cosh64(a, SINH: tl.constexpr):
    """sinh/cosh of a = |x| >= 0 in float64: from expm1 (sinh) or exp below 20,
    (e^(a/2) / 2) e^(a/2) above, which reaches float64's range without overflow."""
    h = tl.exp(a * 0.5)
    if SINH:
        e = expm1_generic(tl.where(a > 20.0, tl.zeros_like(a), a))
        small = 0.5 * (e + e / (e + 1.0))
    else:
        e = tl.exp(tl.where(a > 20.0, tl.zeros_like(a), a))
        small = 0.5 * (e + 1.0 / e)
    return tl.where(a > 20.0, (0.5 * h) * h, small)


@triton.jit
def sinh_generic(x):
    return _sign_of(_sinh_cosh64(tl.abs(x.to(tl.float64)), True), x)


@triton.jit
def cosh_generic(x):
    return _sinh_cosh64(tl.abs(x.to(tl.float64)), False).to(x.dtype)


@triton.jit
def tan_generic(x):
    d = x.to(tl.float64)
    return (tl.sin(d) / tl.cos(d)).to(x.dtype)


@triton.jit
def asinh_generic(x):
    """log1p(a + a^2 / (1 + sqrt(1 + a^2))); log(a) + ln 2 past 1e8 (no overflow)."""
    a = tl.abs(x.to(tl.float64))
    s = tl.where(a > 1e8, tl.zeros_like(a), a)
    r = log1p_generic(s + s * s / (1.0 + tl.sqrt(1.0 + s * s)))
    r = tl.where(a > 1e8, tl.log(a) + 0.6931471805599453, r)
    return _sign_of(r, x)


@triton.jit
def acosh_generic(x):
    d = x.to(tl.float64)
    t = tl.where(d > 1e8, tl.zeros_like(d), d - 1.0)
    r = log1p_generic(t + tl.sqrt(t * (t + 2.0)))
    r = tl.where(d > 1e8, tl.log(d) + 0.6931471805599453, r)
    return tl.where(d >= 1.0, r, float("nan")).to(x.dtype)  # NaN below 1, and for NaN


@triton.jit
def atanh_generic(x):
    a = tl.abs(x.to(tl.float64))
    return _sign_of(0.5 * log1p_generic(2.0 * a / (1.0 - a)), x)


@triton.jit
def log10_generic(x):
    return (tl.log(x.to(tl.float64)) * 0.4342944819032518).to(x.dtype)


@triton.jit
def log2_generic(x):
    return tl.log2(x.to(tl.float64)).to(x.dtype)


if INTERPRETED:
    @triton.jit
    def hypot(a, b):
        return hypot_generic(a, b)

    @triton.jit
    def expm1(x):
        return expm1_generic(x.to(tl.float64)).to(x.dtype)  # NumPy's float32 log: 3 ULP

    @triton.jit
    def log1p(x):
        return log1p_generic(x.to(tl.float64)).to(x.dtype)  # NumPy's float32 log: 3 ULP

    @triton.jit
    def rint32(x):
        return rint_generic(x, 8388608.0)

    @triton.jit
    def rint64(x):
        return rint_generic(x, 4503599627370496.0)

    @triton.jit
    def powf(a, b):
        # float32 in float64: b log2|a| rounded in float32 would cost |b log2 a| ULPs
        return pow_generic(a.to(tl.float64), b.to(tl.float64)).to(a.dtype)

    @triton.jit
    def sin(x):
        return tl.sin(x.to(tl.float64)).to(x.dtype)  # as on the GPU

    @triton.jit
    def cos(x):
        return tl.cos(x.to(tl.float64)).to(x.dtype)  # as on the GPU

    @triton.jit
    def sqrt(x):
        return tl.sqrt(x)
    @triton.jit
    def exp64(x):
        return tl.exp(x)

    asin, acos, atan, atan2, tan = asin_generic, acos_generic, atan_generic, atan2_generic, \
        tan_generic
    sinh, cosh, asinh, acosh, atanh = sinh_generic, cosh_generic, asinh_generic, \
        acosh_generic, atanh_generic
    log2, log10 = log2_generic, log10_generic
else:  # pragma: no cover - needs a GPU
    from triton.language.extra import libdevice

    # Where libdevice's float32 function is documented past 1 ULP (sinf, cosf 2, tanf 4,
    # powf 4, atan2f 3, the inverse and hyperbolic ones 2-4: CUDA C++ Programming
    # Guide, single-precision table; see triton_math_transcendental.py), the float32
    # value goes through libdevice's double function (1-2 double ULPs, 2^-51: far
    # inside half a float32 ULP) and is rounded once, as the C backend evaluates them in
    # double (lazyrt_math_array_api.h). float64 arguments are unchanged by the casts.
    # logf, log2f, log1pf and expm1f are within 1 ULP and stay float32.

    @triton.jit
    def hypot(a, b):
        return libdevice.hypot(a, b)

    @triton.jit
    def expm1(x):
        return libdevice.expm1(x)

    @triton.jit
    def log1p(x):
        return libdevice.log1p(x)

    @triton.jit
    def rint32(x):
        return libdevice.rint(x)

    @triton.jit
    def rint64(x):
        return libdevice.rint(x)

    @triton.jit
    def powf(a, b):
        return libdevice.pow(a.to(tl.float64), b.to(tl.float64)).to(a.dtype)

    @triton.jit
    def sin(x):
        return libdevice.sin(x.to(tl.float64)).to(x.dtype)

    @triton.jit
    def cos(x):
        return libdevice.cos(x.to(tl.float64)).to(x.dtype)

    @triton.jit
    def sqrt(x):
        # tl.sqrt is the approximate instruction on NVIDIA; this one is IEEE
        return libdevice.sqrt_rn(x)

    @triton.jit
    def exp64(x):
        return libdevice.exp(x)

    @triton.jit
    def asin(x):
        return libdevice.asin(x.to(tl.float64)).to(x.dtype)

    @triton.jit
    def acos(x):
        return libdevice.acos(x.to(tl.float64)).to(x.dtype)

    @triton.jit
    def atan(x):
        return libdevice.atan(x.to(tl.float64)).to(x.dtype)

    @triton.jit
    def atan2(y, x):
        return libdevice.atan2(y.to(tl.float64), x.to(tl.float64)).to(y.dtype)

    @triton.jit
    def sinh(x):
        return libdevice.sinh(x.to(tl.float64)).to(x.dtype)

    @triton.jit
    def cosh(x):
        return libdevice.cosh(x.to(tl.float64)).to(x.dtype)

    @triton.jit
    def tan(x):
        return libdevice.tan(x.to(tl.float64)).to(x.dtype)

    @triton.jit
    def asinh(x):
        return libdevice.asinh(x.to(tl.float64)).to(x.dtype)

    @triton.jit
    def acosh(x):
        return libdevice.acosh(x.to(tl.float64)).to(x.dtype)

    @triton.jit
    def atanh(x):
        return libdevice.atanh(x.to(tl.float64)).to(x.dtype)

    @triton.jit
    def log2(x):
        return libdevice.log2(x)

    @triton.jit
    def log10(x):
        return libdevice.log10(x.to(tl.float64)).to(x.dtype)
