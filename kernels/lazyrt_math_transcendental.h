/* lazyrt_math_transcendental.h — the transcendental functions generated C
 * kernels call in float32: exp, log, log1p, expm1, tanh, sigmoid, erf, sin,
 * cos, and the double cores lazyrt_math_array_api.h builds on (the float64
 * functions: lazyrt_math_double.h).
 *
 * Included by lazyrt_math.h after its bit casts, selects and LZ__FMAF; the same
 * rules hold (no -ffast-math, branch-free code GCC vectorizes in
 * `#pragma omp simd` loops).
 *
 * float32 transcendental functions run in float32 arithmetic (twice the
 * lanes of double, 2-2.5x faster for the log family and expm1 than their
 * double-evaluated versions were); the inverse trigonometric and hyperbolic
 * ones (lazyrt_math_array_api.h) still evaluate in double internally.
 * All use argument reduction with integer bit manipulation, short Taylor /
 * Chebyshev polynomials and branch-free selects; no lookup tables (sin/cos/tan
 * take 2/pi's bits from ten constants, picked by selects, not loads).
 * Max error vs. the exact value (float64 reference), in float32 ULPs: "all"
 * is a sweep of all 2^32 bit patterns (LAZYRT_EXHAUSTIVE_MATH=1), "sample" is
 * the 2^24 stratified patterns tests/test_c_math.py checks on every run; and
 * the bound the tests assert. The contract is "within 1 ULP of the correctly
 * rounded result" (the result or a neighbour of it): an error below 1.5 ULP
 * of the exact value; all but expf and tanhf stay below 1.0.
 *
 *   function      all     sample  bound   vectorized by GCC 12 at -O3 -march=native
 *   lz_expf       1.01    0.98    1.5     yes
 *   lz_sigmoidf   0.995   0.94    1.0     yes (float32 arithmetic)
 *   lz_tanhf      1.33    1.31    1.5     yes (float32 arithmetic)
 *   lz_logf       0.61    0.58    1.0     yes (float32 arithmetic)
 *   lz_log1pf     0.61    0.60    1.0     yes (float32 arithmetic)
 *   lz_expm1f     0.71    0.71    1.0     yes (float32 arithmetic)
 *   lz_erff       0.99    0.89    1.0     yes (float32 arithmetic)
 *   lz_sinf/cosf  0.529   0.53    1.0     yes (double arithmetic, Payne-Hanek
 *                                         reduction in integers for |x| >= 2^26;
 *                                         2.4 ns/element/core (4.0 before the
 *                                         32-bit products and 4-way word picks):
 *                                         both reductions run on every lane)
 *   lz_exp2f      0.503   0.50    1.0     yes (through the double cores)
 *   lz_erfcf      0.506   0.51    1.0     yes (through the double cores)
 *   lz_softplusf  0.503   0.50    1.0     yes (through the double cores)
 *   lz_roundf, lz_signf, lz_maxf/minf, float16 load/store: yes (exact).
 *   Integer and float floor-div/mod: no (x86 has no vector integer divide;
 *   the float versions call fmod, as NumPy does).
 *
 * Speed, 1 thread, 2^20 floats (AMD EPYC, GCC 12, 128-bit vectors as GCC
 * tunes znver1): lz_expf 2.2 ns/elem (torch.exp 1.6, np.exp 7.8); through
 * double it was 6.5. lz_tanhf 10.3 (torch.tanh 9.1, np.tanh 13.9).
 * In-cache loop, 2^14 floats, 256-bit vectors (the C backend's flags), Zen 1
 * at 2 GHz: lz_expf 1.58 ns/elem, lz_tanhf 2.32 (3.57 before its exp was
 * specialized to [0, 40] and its polynomial used FMA), GELU(tanh) 3.1.
 *
 * IEEE special cases follow libm: NaN propagates, ±inf give the limits, signed
 * zeros are kept where libm keeps them (expm1, log1p, tanh, erf of -0 is -0),
 * overflow gives inf and underflow rounds through the denormals to 0.
 */
#ifndef LAZYRT_MATH_TRANSCENDENTAL_H
#define LAZYRT_MATH_TRANSCENDENTAL_H

/* ---- double-precision cores for the float32 functions -------------------
 * Accurate to ~1e-10 relative, far below float32's 6e-8 half-ULP. Only
 * unsigned 64-bit integer ops, so AVX2 (no 64-bit int<->double converts, no
 * 64-bit arithmetic shifts) can vectorize them. */

/* exp(x) for x in [-700, 700]. n = round(x/ln2) through the 1.5*2^52 shifter,
 * whose low mantissa bits then hold n; 2^n is built from those bits. */
LZ_INLINE double lz__exp_d(double x)
{
    const double shifter = 0x1.8p52;
    double kd = x * 0x1.71547652b82fep0 + shifter;
    uint64_t ki = lz__asuint64(kd);
    kd -= shifter;
    double r = x - kd * 0x1.62e42fefa39efp-1; /* |r| <= ln2/2 */
    /* Taylor to r^8: truncation < 3e-10 relative on |r| <= 0.347 */
    double p = 1.0 / 40320;
    p = p * r + 1.0 / 5040;
    p = p * r + 1.0 / 720;
    p = p * r + 1.0 / 120;
    p = p * r + 1.0 / 24;
    p = p * r + 1.0 / 6;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    double scale = lz__asdouble((ki + 1023) << 52); /* 2^n, n+1023 in [1, 2046] */
    return scale * p;
}

/* exp(x) - 1 for x in [-700, 700], relative accuracy everywhere (a Taylor
 * series near 0 where exp(x) - 1 would cancel). -0 stays -0. */
LZ_INLINE double lz__expm1_d(double x)
{
    double q = 1.0 / 3628800;
    q = q * x + 1.0 / 362880;
    q = q * x + 1.0 / 40320;
    q = q * x + 1.0 / 5040;
    q = q * x + 1.0 / 720;
    q = q * x + 1.0 / 120;
    q = q * x + 1.0 / 24;
    q = q * x + 1.0 / 6;
    q = q * x + 0.5;
    q = q * x + 1.0;
    double small = x * q;
    double big = lz__exp_d(x) - 1.0;
    return lz__sel(fabs(x) < 0.3466, small, big);
}

/* log(u) for a positive, finite, normal double u. u = 2^k * z with z in
 * [sqrt(1/2), sqrt(2)); log z = 2 atanh(s), s = (z-1)/(z+1), |s| <= 0.172. */
LZ_INLINE double lz__log_d(double u)
{
    uint64_t ix = lz__asuint64(u);
    /* biased so the subtraction never goes negative: kb = k + 1024 */
    uint64_t kb = (ix - 0x3fe6a09e667f3bcdULL + (1024ULL << 52)) >> 52;
    double z = lz__asdouble(ix - ((kb - 1024) << 52));
    double k = lz__asdouble(kb + 0x4330000000000000ULL) - (0x1p52 + 1024.0);
    double f = z - 1.0;
    double s = f / (2.0 + f);
    double w = s * s;
    double p = 1.0 / 15;
    p = p * w + 1.0 / 13;
    p = p * w + 1.0 / 11;
    p = p * w + 1.0 / 9;
    p = p * w + 1.0 / 7;
    p = p * w + 1.0 / 5;
    p = p * w + 1.0 / 3;
    double logz = 2.0 * s + 2.0 * s * (w * p);
    return k * 0x1.62e42fefa39efp-1 + logz;
}

/* ---- float32 transcendental functions (vectorizable) -------------------- */

/* exp in float32 arithmetic (3x faster than through double; exp is the
 * hottest of these: softmax, sigmoid, SiLU). n = round(x/ln2) via the 1.5*2^23
 * shifter, Cody-Waite r = x - n ln2 with ln2 in two parts, p = e^r by a
 * degree-6 polynomial (1 + r + r^2 q(r), q a near-minimax fit: relative error
 * 4e-9 on |r| <= 0.347), and 2^n applied in two exact-or-single-rounding
 * steps, so results in the denormal range round only once. */
LZ_INLINE float lz__expf_poly(float r)
{
    float q = 0x1.6a244cp-10f;
    q = LZ__FMAF(q, r, 0x1.1239d4p-7f);
    q = LZ__FMAF(q, r, 0x1.5558f2p-5f);
    q = LZ__FMAF(q, r, 0x1.555492p-3f);
    q = LZ__FMAF(q, r, 0x1.fffffcp-2f);
    return LZ__FMAF(q, r * r, r) + 1.0f;
}

LZ_INLINE float lz_expf(float x)
{
    float xc = lz__clamp_magf(x, 150.0f); /* NaN passes; ±inf -> ±150: inf / 0 */
    const float shifter = 0x1.8p23f;
    float kf = LZ__FMAF(xc, 0x1.715476p0f, shifter);
    int32_t n = (int32_t)(lz__asuint32(kf) - lz__asuint32(shifter));
    kf -= shifter;
    /* ln2 = hi + lo, hi with 16 bits: kf*hi is exact (|kf| <= 217), FMA or not */
    float r = LZ__FMAF(kf, -0x1.62e4p-1f, xc);
    r = LZ__FMAF(kf, -0x1.7f7d1cp-20f, r);
    float p = lz__expf_poly(r);
    int32_t n1 = n >> 1, n2 = n - n1; /* each in [-109, 109]: 2^n1, 2^n2 are normal */
    float s1 = lz__asfloat((uint32_t)(n1 + 127) << 23);
    float s2 = lz__asfloat((uint32_t)(n2 + 127) << 23);
    return (p * s1) * s2;
}

/* ---- the log family and expm1 in float32 arithmetic ---------------------
 * x = 2^k * m, m in [2/3, 4/3) by integer subtraction of 2/3's bits (so r = m - 1
 * is exact, |r| <= 1/3, and no branch picks the interval); subnormals are
 * scaled by 2^23 first. ln(1 + r) = r - r^2/2 + r^3 p(r), p a degree-8
 * near-minimax fit (relative error 9e-8 after rounding its coefficients; the
 * r^3 term is at most 4% of the result, so that is 2^-28 of it). r - r^2/2 is
 * kept as an unevaluated hi + lo pair (r*r split exactly by an FMA), and the
 * k*ln2 (or k, or k*log10 2) term is added by an exact two-sum, so only the last
 * addition rounds at full size: 0.5 ULP plus the small terms' errors. */
LZ_INLINE float lz__ln1p_small(float r, float *lo)
{
    float r2 = r * r;
    float r2e = LZ__FMAF(r, r, -r2);          /* r*r == r2 + r2e exactly */
    float h = -0.5f * r2;                      /* exact */
    float hi = r + h;
    float e = (r - hi) + h;                    /* Fast2Sum: |r| >= |h| */
    float p = 1.191713586e-01f;
    p = LZ__FMAF(p, r, -1.243104935e-01f);
    p = LZ__FMAF(p, r, 1.078552976e-01f);
    p = LZ__FMAF(p, r, -1.228703782e-01f);
    p = LZ__FMAF(p, r, 1.430088282e-01f);
    p = LZ__FMAF(p, r, -1.667340696e-01f);
    p = LZ__FMAF(p, r, 1.999974847e-01f);
    p = LZ__FMAF(p, r, -2.499994338e-01f);
    p = LZ__FMAF(p, r, 3.333333433e-01f);
    *lo = e + LZ__FMAF(r2 * r, p, -0.5f * r2e);
    return hi;
}

/* s = a + b exactly as s + err (Knuth's two-sum: any magnitudes) */
LZ_INLINE float lz__two_sumf(float a, float b, float *err)
{
    float s = a + b;
    float bb = s - a;
    *err = (a - (s - bb)) + (b - bb);
    return s;
}

/* x > 0 finite (others give garbage the callers select away): k and r */
LZ_INLINE float lz__log_reducef(float x, float *r)
{
    int sub = x < 0x1p-126f;
    uint32_t ix = lz__asuint32(lz__self(sub, x * 0x1p23f, x));
    uint32_t t = ix - 0x3f2aaaabu;                         /* 2/3 */
    int32_t k = (int32_t)t >> 23;
    *r = lz__asfloat((t & 0x007fffffu) + 0x3f2aaaabu) - 1.0f;
    return (float)k - lz__self(sub, 23.0f, 0.0f);
}

/* log_base(x) = k*c + ln(1 + r)*d, c and d given as hi + lo (c's hi short
 * enough that k*c_hi is exact); specials as libm: log(0) = -inf, log(inf) = inf,
 * negative and NaN give NaN. */
LZ_INLINE float lz__log_basef(float x, float c_hi, float c_lo, float d_hi, float d_lo)
{
    float r;
    float kf = lz__log_reducef(x, &r);
    float lo;
    float hi = lz__ln1p_small(r, &lo);
    float t_hi = hi * d_hi;
    float t_lo = LZ__FMAF(hi, d_hi, -t_hi) + LZ__FMAF(hi, d_lo, lo * d_hi);
    float err;
    float sum = lz__two_sumf(kf * c_hi, t_hi, &err);
    float y = sum + (err + (t_lo + kf * c_lo));
    float special = lz__self(x == 0.0f, -INFINITY, lz__self(x == INFINITY, INFINITY, NAN));
    return lz__self((x > 0.0f) & (x < INFINITY), y, special);
}

LZ_INLINE float lz_logf(float x)
{
    return lz__log_basef(x, 0x1.62e4p-1f, 0x1.7f7d1cp-20f, 1.0f, 0.0f);
}

/* log1p: |x| < 1/3 is r itself (exact, k = 0); otherwise u = 1 + x
 * is reduced and (x - (u - 1))/u corrects u's rounding (u - 1 exact for u <= 2;
 * above 2, 1 - (u - x) is). */
LZ_INLINE float lz_log1pf(float x)
{
    int small = fabsf(x) < 0x1.555556p-2f;
    float u = 1.0f + x;
    float ur = lz__self((u > 0.0f) & (u < INFINITY), u, 1.0f);
    float r;
    float kf = lz__log_reducef(ur, &r);
    float c = lz__self(u > 2.0f, 1.0f - (u - x), x - (u - 1.0f)) / ur;
    r = lz__self(small, x, r);
    kf = lz__self(small, 0.0f, kf);
    c = lz__self(small, 0.0f, c);
    float lo;
    float hi = lz__ln1p_small(r, &lo);
    float err;
    float sum = lz__two_sumf(kf * 0x1.62e4p-1f, hi, &err);
    float y = sum + (err + (lo + c + kf * 0x1.7f7d1cp-20f));
    y = lz__self(small, hi + lo, y);
    float special = lz__self(x == -1.0f, -INFINITY, lz__self(x == INFINITY, INFINITY, NAN));
    y = lz__self((x > -1.0f) & (x < INFINITY), y, special);
    return lz__self(x == 0.0f, x, y);            /* log1p(-0) = -0 */
}

/* expm1: n = round(x/ln2), r = x - n ln2 (Cody-Waite, |r| <= 0.347), e^r - 1 =
 * r + r^2/2 + r^3 q(r) (q a degree-4 near-minimax fit, relative error 8e-8),
 * again as hi + lo; then 2^n (e^r - 1) + (2^n - 1) by an exact two-sum and one rounding
 * (2^n hi is exact: a power of two times a float).
 * x < -17.33 rounds to -1; past 88.73 to inf (2^n in two steps at n = 128). */
LZ_INLINE float lz_expm1f(float x)
{
    float xc = lz__self(x < -20.0f, -20.0f, lz__self(x > 100.0f, 100.0f, x)); /* NaN passes */
    const float shifter = 0x1.8p23f;
    float kf = LZ__FMAF(xc, 0x1.715476p0f, shifter);
    int32_t n = (int32_t)(lz__asuint32(kf) - lz__asuint32(shifter));
    kf -= shifter;
    float r = LZ__FMAF(kf, -0x1.62e4p-1f, xc);
    r = LZ__FMAF(kf, -0x1.7f7d1cp-20f, r);
    float r2 = r * r;
    float r2e = LZ__FMAF(r, r, -r2);
    float h = 0.5f * r2;
    float hi = r + h;
    float e = (r - hi) + h;
    float q = 1.989928278e-04f;
    q = LZ__FMAF(q, r, 1.392618404e-03f);
    q = LZ__FMAF(q, r, 8.333301172e-03f);
    q = LZ__FMAF(q, r, 4.166655615e-02f);
    q = LZ__FMAF(q, r, 1.666666716e-01f);
    float lo = e + LZ__FMAF(r2 * r, q, 0.5f * r2e);
    int32_t n1 = n > 127 ? 127 : n;               /* 2^128 in two steps */
    float s = lz__asfloat((uint32_t)(n1 + 127) << 23);
    float s2 = lz__asfloat((uint32_t)(n - n1 + 127) << 23);
    /* 2^n - 1 is exact up to n = 24; above, the -1 joins the small terms */
    int big = n > 24;
    float err;
    float sum = lz__two_sumf(lz__self(big, s, s - 1.0f), s * hi, &err);
    float tail = s * lo - lz__self(big, 1.0f, 0.0f);
    float y = (sum + (err + tail)) * s2;
    y = lz__self(n == 0, hi + lo, y);
    return lz__self((x != x) | (x == 0.0f), x, y);  /* NaN, and expm1(-0) = -0 */
}

/* tanh in float32 arithmetic: on a = |x|, an odd minimax polynomial below
 * 0.625, where 1 - 2/(e^2a + 1) would cancel, and that formula above it; the
 * sign of x is put back last (tanh(-0) = -0, NaN stays NaN). e^2a needs no
 * range handling: 2a is clamped to [0, 40], so 2^n is a plain normal scale. */
LZ_INLINE float lz_tanhf(float x)
{
    float a = fabsf(x);
    float z = a * a;
    float p = -5.70498872745e-3f;
    p = LZ__FMAF(p, z, 2.06390887954e-2f);
    p = LZ__FMAF(p, z, -5.37397155531e-2f);
    p = LZ__FMAF(p, z, 1.33314422036e-1f);
    p = LZ__FMAF(p, z, -3.33332819422e-1f);
    float small = LZ__FMAF(a, p * z, a);
    float t = a + a;
    t = lz__self(t > 40.0f, 40.0f, t); /* NaN passes, and every path then gives NaN */
    const float shifter = 0x1.8p23f;
    float kf = LZ__FMAF(t, 0x1.715476p0f, shifter);
    uint32_t sbits = (lz__asuint32(kf) << 23) + (127u << 23); /* 2^n, n in [0, 58] */
    kf -= shifter;
    float r = LZ__FMAF(kf, -0x1.62e4p-1f, t);
    r = LZ__FMAF(kf, -0x1.7f7d1cp-20f, r);
    float e = lz__expf_poly(r) * lz__asfloat(sbits);
    float big = 1.0f - 2.0f / (e + 1.0f);
    float m = lz__self(a < 0.625f, small, big);
    return lz__asfloat(lz__asuint32(m) | (lz__asuint32(x) & 0x80000000u));
}

/* 1 / (1 + exp(-x)), as torch.sigmoid / scipy.special.expit, within 1 ULP of
 * the correctly rounded result. E = exp(-|x|) <= 1 is kept as Eh + El: e^r's
 * polynomial without its 1 is added to 1 by an exact two-sum (relative error
 * 2^-25 instead of a rounding's 2^-24), then scaled by 2^n. D = 1 + E is
 * Eh + 1 by a two-sum plus El; 1/D is one division with a Newton residual
 * rr = 1 - D/Dh (FMA), so 1/D = inv (1 + rr) to 2^-40. x >= 0 gives 1/D,
 * x < 0 gives E/D = E inv (1 + rr), with E inv's product error by an FMA.
 * Only the last addition rounds at full size: 0.5 ULP plus ~0.3 (was 2.4 ULP
 * as (x < 0 ? e : 1) / (1 + e)). exp(-|x|) never overflows; NaN propagates. */
LZ_INLINE float lz_sigmoidf(float x)
{
    float a = lz__clamp_magf(fabsf(x), 150.0f);
    const float shifter = 0x1.8p23f;
    float kf = LZ__FMAF(-a, 0x1.715476p0f, shifter);
    int32_t n = (int32_t)(lz__asuint32(kf) - lz__asuint32(shifter));
    kf -= shifter;
    float r = LZ__FMAF(kf, -0x1.62e4p-1f, -a);
    r = LZ__FMAF(kf, -0x1.7f7d1cp-20f, r);
    float q = 0x1.6a244cp-10f;
    q = LZ__FMAF(q, r, 0x1.1239d4p-7f);
    q = LZ__FMAF(q, r, 0x1.5558f2p-5f);
    q = LZ__FMAF(q, r, 0x1.555492p-3f);
    q = LZ__FMAF(q, r, 0x1.fffffcp-2f);
    float w = LZ__FMAF(q, r * r, r);                 /* e^r - 1, |w| < 0.42 */
    float eh = 1.0f + w, el = (1.0f - eh) + w;       /* Fast2Sum: exact */
    int32_t n1 = n >> 1, n2 = n - n1;
    float s1 = lz__asfloat((uint32_t)(n1 + 127) << 23);
    float s2 = lz__asfloat((uint32_t)(n2 + 127) << 23);
    float Eh = (eh * s1) * s2, El = (el * s1) * s2;  /* n <= 0: exact while normal */
    float dh = 1.0f + Eh, dl = ((1.0f - dh) + Eh) + El;
    float inv = 1.0f / dh;
    float rr = LZ__FMAF(-inv, dh, 1.0f) - inv * dl;
    float pos = LZ__FMAF(inv, rr, inv);
    float t = Eh * inv, te = LZ__FMAF(Eh, inv, -t);
    float neg = t + LZ__FMAF(t, rr, LZ__FMAF(El, inv, te));
    return lz__self(x < 0.0f, neg, pos);
}

/* erf in float32 arithmetic (float vectors are twice as wide as double ones).
 * |x| < 1: x + x*q(x^2), q a degree-7 fit of erf(x)/x - 1 (the correction is
 * small, so its rounding is small next to x). 1 <= |x| < 3.9:
 * 1 - exp(-x^2) * erfcx(|x|), exp(-x^2) as expf(-h) * (1 - l) with x^2 = h + l
 * split exactly by an FMA, erfcx a degree-12 fit in u on [-1, 1]. Past 3.9
 * erf rounds to 1.0f (erfc(3.9) = 3.5e-8 is below half an ulp of 1). NaN
 * passes every select; the sign of x is put back last (erf(-0) = -0). */
LZ_INLINE float lz_erff(float x)
{
    float a = fabsf(x);
    float w = a * a;
    float q = -9.670130567e-06f;
    q = LZ__FMAF(q, w, 1.126351563e-04f);
    q = LZ__FMAF(q, w, -8.483169950e-04f);
    q = LZ__FMAF(q, w, 5.220920779e-03f);
    q = LZ__FMAF(q, w, -2.686536871e-02f);
    q = LZ__FMAF(q, w, 1.128378063e-01f);
    q = LZ__FMAF(q, w, -3.761263788e-01f);
    q = LZ__FMAF(q, w, 1.283791661e-01f);
    float small = LZ__FMAF(a, q, a);
    float b = lz__self(a > 3.9f, 3.9f, a);
    float h = b * b;
    float l = LZ__FMAF(b, b, -h);
    float e = lz_expf(-h) * (1.0f - l);
    float u = LZ__FMAF(b, 6.896551724e-01f, -1.689655172e+00f);
    float r = 1.034514298e-05f;
    r = LZ__FMAF(r, u, -2.834629595e-05f);
    r = LZ__FMAF(r, u, 4.616407023e-05f);
    r = LZ__FMAF(r, u, -1.236771204e-04f);
    r = LZ__FMAF(r, u, 3.549008397e-04f);
    r = LZ__FMAF(r, u, -8.919780958e-04f);
    r = LZ__FMAF(r, u, 2.162377816e-03f);
    r = LZ__FMAF(r, u, -5.126396194e-03f);
    r = LZ__FMAF(r, u, 1.175260078e-02f);
    r = LZ__FMAF(r, u, -2.595580183e-02f);
    r = LZ__FMAF(r, u, 5.503539741e-02f);
    r = LZ__FMAF(r, u, -1.115084961e-01f);
    r = LZ__FMAF(r, u, 2.145870924e-01f);
    float big = lz__self(a >= 3.9f, 1.0f, LZ__FMAF(-e, r, 1.0f));
    float m = lz__self(a < 1.0f, small, big);
    return lz__asfloat(lz__asuint32(m) | (lz__asuint32(x) & 0x80000000u));
}

/* ---- exp2, erfc, softplus: float32 through the double cores -------------
 * Rarer than exp/erf/sigmoid, so written for accuracy first: each is a few
 * double operations on the cores above (relative error ~1e-10), so the one
 * rounding to float decides: within 0.5 ULP plus 2^-29, subnormal results
 * rounded once. */

/* 2^x = e^(x ln2): x ln2 rounds at 2^-53 relative (|x| <= 200), far below a
 * float ULP, so powers of two come out exact; NaN passes the clamp. */
LZ_INLINE float lz_exp2f(float x)
{
    double xd = lz__clamp_mag((double)x, 200.0);
    return (float)lz__exp_d(xd * 0x1.62e42fefa39efp-1);
}

/* erfc for |x| >= 0.47 as exp(-x^2) erfcx(|x|), x^2 exact in double and
 * erfcx a degree-10 near-minimax fit in t = (a - 3)/(a + 3) over [0.46, 10.1]
 * (relative error 2e-10; past 10.1 erfc is below half the least subnormal);
 * below 0.47 as 1 - erf(x) with erf's own small-x series (no cancellation:
 * erfc > 0.5 there). erfc(-x) = 2 - erfc(x). NaN takes the erfcx path. */
LZ_INLINE float lz_erfcf(float x)
{
    double a = fabs((double)x);
    double b = lz__sel(a > 10.1, 10.1, a);
    double t = (b - 3.0) / (b + 3.0);
    double p = 5.9928026368677328e-05;
    p = p * t + 3.4397607551647171e-05;
    p = p * t + -0.00059666169403603943;
    p = p * t + 0.00071141787585619865;
    p = p * t + 0.0042692117711033315;
    p = p * t + -0.024393069636553799;
    p = p * t + 0.071665828674975882;
    p = p * t + -0.15011589934029926;
    p = p * t + 0.24560380150724054;
    p = p * t + -0.32623356071913384;
    p = p * t + 0.17900115118913601;
    double big = lz__exp_d(-b * b) * p;
    double w = a * a;
    double q = -9.670130567e-06;
    q = q * w + 1.126351563e-04;
    q = q * w + -8.483169950e-04;
    q = q * w + 5.220920779e-03;
    q = q * w + -2.686536871e-02;
    q = q * w + 1.128378063e-01;
    q = q * w + -3.761263788e-01;
    q = q * w + 1.283791661e-01;
    double small = 1.0 - (a + a * q);
    double e = lz__sel(a < 0.47, small, big);
    return (float)lz__sel(x < 0.0f, 2.0 - e, e);
}

/* softplus(x) = log(1 + e^x) = max(x, 0) + log1p(e^-|x|), as
 * torch.nn.functional.softplus with beta 1 and no threshold, and
 * np.logaddexp(x, 0). log1p(e) for e = e^-|x| in (0, 1]: the series
 * e - e^2/2 + e^3/3 below 2^-20 (truncation 2^-80), log(1 + e) above
 * (lz__log_d knows no NaN: a NaN x is selected back at the end). */
LZ_INLINE float lz_softplusf(float x)
{
    double xd = (double)x;
    double e = lz__exp_d(-lz__clamp_mag(fabs(xd), 200.0));
    double series = e * (1.0 - e * (0.5 - e * (1.0 / 3.0)));
    double l = lz__sel(e < 0x1p-20, series, lz__log_d(1.0 + e));
    return (float)lz__sel(xd == xd, lz__sel(xd > 0.0, xd, 0.0) + l, xd); /* NaN */
}

/* ---- float32 sin and cos ------------------------------------------------- */
/* sin, cos (and tan, lazyrt_math_array_api.h) of float32 over the whole range,
 * vectorizable: x = n pi/2 + r, |r| <= pi/4, then a Taylor polynomial of sin r
 * and of cos r in double (to r^13 and r^14: truncation below 1e-12 relative)
 * and the quadrant picks which, with which sign. Two reductions, both always
 * computed and selected by |x| (no branch):
 *  - |x| < 2^26: in double, n = round(x 2/pi), r = x - n c1 - n c2 by FMAs
 *    (pi/2 = c1 + c2 to 106 bits; n < 2^26, so the error is below 2^-80);
 *  - otherwise Payne-Hanek in integers: x = M 2^E (M the 24-bit mantissa,
 *    E >= 3), and x 2/pi mod 4 = M W 2^-94 for W the 96 bits of 2/pi from bit
 *    E - 1 on (earlier bits give multiples of 4): three 32x32 products give the
 *    quadrant (2 bits) and 62 bits of fraction. The window's words are loaded
 *    picked from lz__two_over_pi by selects.
 * Errors come from the final rounding to float, so both are within 0.5 ULP
 * plus 2^-28 (tests/test_c_math.py, all 2^32 inputs). */
static const uint32_t lz__two_over_pi[10] = {
    0xa2f9836eu, 0x4e441529u, 0xfc2757d1u, 0xf534ddc0u, 0xdb629599u,
    0x3c439041u, 0xfe5163abu, 0xdebbc561u, 0xb7246e3au, 0x424dd2e0u};

/* word w + j (w <= 3) of 2/pi by three selects: blends beat a vector gather
 * per word (sin 2^24 floats: 43 ms with gathers) */
LZ_INLINE uint64_t lz__two_over_pi_at(uint32_t w, uint32_t j)
{
    uint32_t v = lz__two_over_pi[j + 3];
    v = w == 2 ? lz__two_over_pi[j + 2] : v;
    v = w == 1 ? lz__two_over_pi[j + 1] : v;
    v = w == 0 ? lz__two_over_pi[j] : v;
    return v;
}

/* r (double, |r| <= pi/4) and the quadrant n mod 4 of |x|, x finite */
LZ_INLINE double lz__reduce_pio2f(float x, uint32_t *quadrant)
{
    uint32_t ix = lz__asuint32(x) & 0x7fffffffu;
    double xd = (double)lz__asfloat(ix);
    /* small: Cody-Waite in double */
    const double shifter = 0x1.8p52;
    double kd = xd * 0x1.45f306dc9c883p-1 + shifter;
    uint32_t ks = (uint32_t)lz__asuint64(kd);
    kd -= shifter;
    double rs = __builtin_fma(-kd, 0x1.921fb54442d18p+0, xd);
    rs = __builtin_fma(-kd, 0x1.1a62633145c07p-54, rs);
    /* large: Payne-Hanek (the shift and index stay in range for any input) */
    int32_t d = (int32_t)(ix >> 23) - 152;                 /* x = M 2^e, d = e - 2 */
    uint32_t o = (uint32_t)(d & ~(d >> 31));                /* 2/pi's bit E - 1; >= 0 */
    uint32_t w = o >> 5, b = 32 - (o & 31);                 /* w <= 3: e <= 105 */
    uint64_t t0 = lz__two_over_pi_at(w, 0), t1 = lz__two_over_pi_at(w, 1);
    uint64_t t2 = lz__two_over_pi_at(w, 2), t3 = lz__two_over_pi_at(w, 3);
    uint32_t w2 = (uint32_t)(((t0 << 32) | t1) >> b);
    uint32_t w1 = (uint32_t)(((t1 << 32) | t2) >> b);
    uint32_t w0 = (uint32_t)(((t2 << 32) | t3) >> b);
    uint32_t m = (ix & 0x007fffffu) | 0x00800000u;
    /* 32 x 32 -> 64-bit products (one vpmuludq each, not a 64-bit multiply) */
    uint64_t p2 = (uint64_t)m * w2, p1 = (uint64_t)m * w1, p0 = (uint64_t)m * w0;
    uint64_t h = (p2 << 32) + p1 + (p0 >> 32);
    uint64_t nl = (h + (1ULL << 61)) >> 62;
    double rl = (double)(int64_t)(h - (nl << 62)) * 0x1.921fb54442d18p-62;
    int small = ix < 0x4c800000u;                           /* 2^26 */
    *quadrant = small ? ks & 3u : (uint32_t)nl & 3u;
    return lz__sel(small, rs, rl);
}

/* Taylor to r^9 and r^10 on |r| <= pi/4: truncation below 3e-9 and 2e-10
 * relative, 0.04 float ULP at most (the double rounding is below 2^-50) */
LZ_INLINE double lz__sin_poly(double r, double z)
{
    double p = -1.0 / 362880.0;
    p = p * z + 1.0 / 5040.0;
    p = p * z - 1.0 / 120.0;
    p = p * z + 1.0 / 6.0;
    return r - r * z * p;
}

LZ_INLINE double lz__cos_poly(double z)
{
    double p = -1.0 / 3628800.0;
    p = p * z + 1.0 / 40320.0;
    p = p * z - 1.0 / 720.0;
    p = p * z + 1.0 / 24.0;
    return 1.0 - 0.5 * z + z * z * p;
}

LZ_INLINE float lz_sinf(float x)
{
    uint32_t q;
    double r = lz__reduce_pio2f(x, &q);
    double z = r * r;
    double s = lz__sin_poly(r, z), c = lz__cos_poly(z);
    double v = lz__sel(q & 1u, c, s);
    v = lz__sel(q & 2u, -v, v);
    float y = (float)lz__sel(lz__asuint32(x) >> 31, -v, v);     /* sin(-x) = -sin x */
    return lz__self(fabsf(x) < INFINITY, lz__self(x == 0.0f, x, y), x - x);
}

LZ_INLINE float lz_cosf(float x)
{
    uint32_t q;
    double r = lz__reduce_pio2f(x, &q);
    double z = r * r;
    double s = lz__sin_poly(r, z), c = lz__cos_poly(z);
    double v = lz__sel(q & 1u, -s, c);
    v = lz__sel(q & 2u, -v, v);
    return lz__self(fabsf(x) < INFINITY, (float)v, x - x);
}

#endif /* LAZYRT_MATH_TRANSCENDENTAL_H */
