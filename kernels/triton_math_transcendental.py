"""The transcendental ``lzm.*`` helpers that have to meet lazyrt's accuracy contract on
a GPU: a float32 result within 1 ULP of the correctly rounded value (re-exported by
:mod:`triton_math`, which the generated kernels import as ``lzm``).

Triton's own ``tl.exp``/``tl.log`` compile to the approximate PTX instructions
(``ex2.approx.ftz``/``lg2.approx``), and libdevice's float32 functions are documented
at up to 2 ULP for expf, tanhf and erff (CUDA C++ Programming Guide, "Mathematical
Functions" appendix, single-precision table: expf 2, exp2f 2, tanhf 2, erff 2, sinf 2,
cosf 2, tanf 4, log10f 2, sinhf 3, coshf 2, asinf/acosf/atanf 2, atan2f 3, asinhf 3,
acoshf 4, atanhf 3, powf 4; within 1: logf, log2f, log1pf, expm1f). So:

* exp, tanh and erf of float32 are the C backend's float32 polynomials
  (kernels/lazyrt_math_transcendental.h: lz_expf, lz_tanhf, lz_erff), ported line for
  line: the same constants, ``tl.fma`` where the C uses FMA, bit casts for 2^n and
  the sign. The same code runs under ``TRITON_INTERPRET=1``, whose ``tl.fma`` rounds
  once (triton's ``fma_fp32``), so the interpreter tests measure what the GPU runs;
  generated kernels run with ``enable_fp_fusion=False`` (lazyrt/backends/triton.py),
  so ptxas contracts no other product into an FMA either. Two GPU lowerings differ
  from NumPy and are avoided: float32 ``/`` compiles to the approximate
  ``div.full.f32`` (tanh divides with ``tl.math.div_rn``), and a float32 fabs may
  become ``abs.ftz.f32`` (|x| is taken on the bits). Measured under the interpreter
  on 2^24 stratified inputs: max 1 ULP from the correctly rounded value for all three
  (the C header's table: 1.01, 1.33, 0.99 ULP of the exact value).
* log of float32 is libdevice's logf (1 ULP) on a GPU.
* sigmoid is evaluated in float64 and rounded once (libdevice's double exp is 1 ULP
  of a double: far inside half a float32 ULP); triton_math.py does the same for
  sin, cos, tan, pow and the array API's functions on a GPU.

Under the interpreter libdevice does not exist: there the float64 primitives are
NumPy's (``tl.exp`` on float64 ...), and float32 log is NumPy's float64 log, rounded.
"""

import triton
import triton.language as tl

from .triton_configs import INTERPRETED

if INTERPRETED:
    @triton.jit
    def _exp64(x):
        return tl.exp(x)

    @triton.jit
    def _log(x):
        # NumPy's float32 log (its SIMD loop) is 3 ULP off: float64's, rounded once
        return tl.log(x.to(tl.float64)).to(x.dtype)

    @triton.jit
    def _erf64(x):
        return tl.math.erf(x)

    @triton.jit
    def _tanh64(x):
        return tanh_generic(x)

    @triton.jit
    def _exp2_64(x):
        return tl.exp2(x)

    @triton.jit
    def _log1p64(x):
        return log1p_generic(x)

    @triton.jit
    def _erfc64(x):
        return _erfc_interpreted(x)
else:  # pragma: no cover - needs a GPU
    from triton.language.extra import libdevice

    @triton.jit
    def _exp64(x):
        return libdevice.exp(x)

    @triton.jit
    def _log(x):
        return libdevice.log(x)

    @triton.jit
    def _erf64(x):
        return libdevice.erf(x)

    @triton.jit
    def _tanh64(x):
        return libdevice.tanh(x)  # 1 ULP (CUDA's double table)

    @triton.jit
    def _exp2_64(x):
        return libdevice.exp2(x)

    @triton.jit
    def _log1p64(x):
        return libdevice.log1p(x)

    @triton.jit
    def _erfc64(x):
        return libdevice.erfc(x)


# The interpreter's float64 versions (Kahan's cancellation-free log1p and expm1):

@triton.jit
def expm1_generic(x):
    u = tl.exp(x)
    um1 = u - 1.0
    r = tl.where(u == 1.0, x, tl.where(um1 == -1.0, -1.0, um1 * (x / tl.log(u))))
    return tl.where(u == float("inf"), u, r).to(x.dtype)


@triton.jit
def log1p_generic(x):
    u = x + 1.0
    r = tl.where(u == 1.0, x, tl.log(u) * x / (u - 1.0))
    return tl.where(u == float("inf"), u, r).to(x.dtype)


@triton.jit
def tanh_generic(x):
    # tanh(x) = expm1(2x) / (expm1(2x) + 2), saturating past |x| > 20
    e = expm1_generic(2.0 * tl.where(tl.abs(x) > 20.0, 0.0, x))
    r = e / (e + 2.0)
    r = tl.where(x > 20.0, 1.0, tl.where(x < -20.0, -1.0, r))
    return tl.where(x == 0, x, r).to(x.dtype)


# --- lz_expf: Cody-Waite reduction, a degree-6 polynomial, 2^n in two steps -----------

@triton.jit
def _expf_poly(r):
    """e^r on |r| <= ln2/2: 1 + r + r^2 q(r), q a near-minimax fit (relative error
    4e-9), lz__expf_poly's constants."""
    q = tl.fma(0.001381461275741458, r, 0.008368710055947304)
    q = tl.fma(q, r, 0.04166838899254799)
    q = tl.fma(q, r, 0.1666652113199234)
    q = tl.fma(q, r, 0.4999999403953552)
    return tl.fma(q, r * r, r) + 1.0


@triton.jit
def _two_to(n):
    """2^n as a float32 for an int32 n in [-126, 127]: the exponent field's bits."""
    return ((n + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def exp_f32(x):
    """lz_expf: n = round(x/ln2) through the 1.5*2^23 shifter (its low mantissa bits
    hold n), r = x - n ln2 with ln2 in two parts (n*hi exact), then 2^n as two normal
    factors so a result in the subnormal range rounds once. A select clamps to
    [-150, 150] (tl.minimum would drop a NaN on a GPU)."""
    xc = tl.where(x > 150.0, 150.0, tl.where(x < -150.0, -150.0, x))
    kf = tl.fma(xc, 1.4426950216293335, 12582912.0)
    n = kf.to(tl.int32, bitcast=True) - 0x4B400000
    kf = kf - 12582912.0
    r = tl.fma(kf, -0.693145751953125, xc)
    r = tl.fma(kf, -1.428606765330187e-06, r)
    p = _expf_poly(r)
    n1 = n >> 1
    return (p * _two_to(n1)) * _two_to(n - n1)


# --- lz_tanhf: an odd polynomial below 0.625, 1 - 2/(e^2a + 1) above -----------------

@triton.jit
def _abs_f32(x):
    """|x| by clearing the sign bit: LLVM may lower a float32 fabs to PTX's
    abs.ftz.f32, which flushes a subnormal to 0 (it does for sigmoid's |x|, moved
    before the widening to float64); tanh and erf of a subnormal would lose it."""
    return ((x.to(tl.uint32, bitcast=True) << 1) >> 1).to(tl.float32, bitcast=True)


@triton.jit
def _with_sign_of(m, x):
    """|m| (m >= 0 or NaN) with the sign bit of x: tanh(-0) = -0, erf(-0) = -0."""
    sign = (x.to(tl.uint32, bitcast=True) >> 31) << 31
    return (m.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.jit
def tanh_f32(x):
    """lz_tanhf: on a = |x|, a + a z p(z) (z = a^2, a minimax fit) below 0.625, where
    1 - 2/(e^2a + 1) would cancel; above it that formula with e^2a from 2a clamped to
    40 (2^n is then a plain normal scale, n in [0, 58]). NaN passes every select."""
    a = _abs_f32(x)
    z = a * a
    p = tl.fma(-0.0057049887254834175, z, 0.0206390880048275)
    p = tl.fma(p, z, -0.05373971536755562)
    p = tl.fma(p, z, 0.13331441581249237)
    p = tl.fma(p, z, -0.3333328068256378)
    small = tl.fma(a, p * z, a)
    t = a + a
    t = tl.where(t > 40.0, 40.0, t)
    kf = tl.fma(t, 1.4426950216293335, 12582912.0)
    scale = ((kf.to(tl.uint32, bitcast=True) << 23) + (127 << 23)).to(tl.float32,
                                                                      bitcast=True)
    kf = kf - 12582912.0
    r = tl.fma(kf, -0.693145751953125, t)
    r = tl.fma(kf, -1.428606765330187e-06, r)
    e = _expf_poly(r) * scale
    # float32 / compiles to the approximate div.full.f32 (2 ULP); div_rn is IEEE's
    big = 1.0 - tl.math.div_rn(tl.full(e.shape, 2.0, tl.float32), e + 1.0)
    return _with_sign_of(tl.where(a < 0.625, small, big), x)


# --- lz_erff: x + x q(x^2) below 1, 1 - exp(-x^2) erfcx(|x|) up to 3.9, then 1 -------

@triton.jit
def erf_f32(x):
    """lz_erff: below 1 a degree-7 fit of erf(x)/x - 1; on [1, 3.9) exp(-x^2) as
    expf(-h) (1 - l), x^2 = h + l split exactly by an FMA, times a degree-12 fit of
    erfcx in u = (b - 2.45) / 1.45; erf rounds to 1 past 3.9."""
    a = _abs_f32(x)
    w = a * a
    q = tl.fma(-9.67013056651922e-06, w, 0.00011263515625614673)
    q = tl.fma(q, w, -0.0008483169949613512)
    q = tl.fma(q, w, 0.005220920778810978)
    q = tl.fma(q, w, -0.026865368708968163)
    q = tl.fma(q, w, 0.11283780634403229)
    q = tl.fma(q, w, -0.37612637877464294)
    q = tl.fma(q, w, 0.12837916612625122)
    small = tl.fma(a, q, a)
    b = tl.where(a > 3.9000000953674316, 3.9000000953674316, a)
    h = b * b
    lo = tl.fma(b, b, -h)
    e = exp_f32(-h) * (1.0 - lo)
    u = tl.fma(b, 0.6896551847457886, -1.6896551847457886)
    r = tl.fma(1.0345142982259858e-05, u, -2.83462959487224e-05)
    r = tl.fma(r, u, 4.616407022695057e-05)
    r = tl.fma(r, u, -0.00012367712042760104)
    r = tl.fma(r, u, 0.0003549008397385478)
    r = tl.fma(r, u, -0.0008919780957512558)
    r = tl.fma(r, u, 0.002162377815693617)
    r = tl.fma(r, u, -0.00512639619410038)
    r = tl.fma(r, u, 0.011752600781619549)
    r = tl.fma(r, u, -0.0259558018296957)
    r = tl.fma(r, u, 0.05503539741039276)
    r = tl.fma(r, u, -0.11150849610567093)
    r = tl.fma(r, u, 0.21458709239959717)
    big = tl.where(a >= 3.9000000953674316, 1.0, tl.fma(-e, r, 1.0))
    return _with_sign_of(tl.where(a < 1.0, small, big), x)


# --- what the op table names (float16 and bfloat16 arrive as float32) ------------------

@triton.jit
def exp(x):
    if x.dtype == tl.float64:
        return _exp64(x)
    else:
        return exp_f32(x.to(tl.float32)).to(x.dtype)


@triton.jit
def log(x):
    return _log(x)


@triton.jit
def tanh(x):
    if x.dtype == tl.float64:
        return _tanh64(x)
    else:
        return tanh_f32(x.to(tl.float32)).to(x.dtype)


if INTERPRETED:
    @triton.jit
    def tanh16(x):
        return tanh_f32(x)
else:  # pragma: no cover - needs a GPU
    @triton.jit
    def tanh16(x):
        """tanh of a float16 or bfloat16 value (computed in float32): libdevice's
        tanhf (2 float32 ULP, 2^-13 of a float16 ULP) rounds within 1 ULP there,
        and its registers keep the float16 matmul+GELU epilogue at 4096 from
        spilling on sm_90, which tanh_f32's two polynomials do (8-16 B)."""
        return libdevice.tanh(x)


@triton.jit
def erf(x):
    if x.dtype == tl.float64:
        return _erf64(x)
    else:
        return erf_f32(x.to(tl.float32)).to(x.dtype)


@triton.jit
def sigmoid(x):
    """e / (1 + e) below 0, 1 / (1 + e) above, e = exp(-|x|) (never overflows), in
    float64 and rounded once."""
    d = x.to(tl.float64)
    e = _exp64(-tl.abs(d))
    return (tl.where(d < 0, e, 1.0) / (1.0 + e)).to(x.dtype)


# --- exp2, erfc, softplus: in float64 and rounded once (libdevice's float32 exp2f is
# documented at 2 ULP, erfcf at 4), as triton_math.py's array API functions -----------

@triton.jit
def _erfc_interpreted(d):
    """erfc of a float64 for the interpreter (which has erf, not erfc): 1 - erf(|d|)
    below 3.5 (erfc(3.5) = 7e-7: the subtraction's 1e-16 is 2^-30 of it), above it
    Laplace's continued fraction e^-x^2 / sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/...)))
    to 60 terms, evaluated backward; erfc(-x) = 2 - erfc(x)."""
    a = tl.abs(d)
    t = tl.where(a < 3.5, 3.5, a)
    f = t
    for k in tl.static_range(60, 0, -1):
        f = t + (k * 0.5) / f
    big = tl.exp(-t * t) * 0.5641895835477563 / f
    pos = tl.where(a < 3.5, 1.0 - tl.math.erf(a), big)
    return tl.where(d < 0, 2.0 - pos, pos)


@triton.jit
def exp2(x):
    return _exp2_64(x.to(tl.float64)).to(x.dtype)


@triton.jit
def erfc(x):
    return _erfc64(x.to(tl.float64)).to(x.dtype)


@triton.jit
def softplus(x):
    """log(1 + e^x) = max(x, 0) + log1p(e^-|x|) (no overflow; NaN stays NaN)."""
    d = x.to(tl.float64)
    return (tl.where(d > 0, d, 0.0) + _log1p64(_exp64(-tl.abs(d)))).to(x.dtype)
