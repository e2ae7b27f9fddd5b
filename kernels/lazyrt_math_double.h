/* lazyrt_math_double.h — the float64 functions generated C kernels call.
 *
 * Included last by lazyrt_math.h, after the selects, the float32 functions and
 * LZ__LN2 (lazyrt_math_array_api.h); the same rules hold (no -ffast-math,
 * branch-free code GCC vectorizes in `#pragma omp simd` loops, no tables).
 *
 * The vectorized ones share double-double cores: the Cody-Waite exp reduction
 * with r kept as r + rl, e^r - 1 as hi + lo, and log(1 + f) = 2 atanh(f/(2+f))
 * as hi + lo; each function adds its parts by exact two-sums and rounds once
 * (twice only for a subnormal result: still below 1 ULP). IEEE specials as
 * glibc/NumPy: NaN propagates, ±inf give the limits, -0 is kept where libm
 * keeps it, overflow is inf, underflow goes through the subnormals.
 *
 * Max error vs x87 long double, in ULPs of the exact value: "1e8" is 10^8
 * inputs per function (LAZYRT_EXHAUSTIVE_MATH=1's sample size), "1e6" the
 * 10^6 tests/test_c_math_f64.py checks on every run (each the whole range,
 * dense near 0, the overflow/underflow limits and the hard spots; < 1 asserted).
 * Speed: ns/element, 1 thread, medians of 3 x 9 runs on a shared 2-core Xeon
 * (AVX-512, GCC 12, the C backend's flags; +-30% noise), 2^16 doubles in
 * cache and 2^24 from memory, against the libm call it replaced (scalar loop):
 *
 *   function      1e8    1e6    vectorized  2^16: lz (libm)   2^24: lz (libm)
 *   lz_exp        0.81   0.79   yes               1.6 (4.3)         1.7 (4.1)
 *   lz_log        0.86   0.82   yes               1.6 (4.2)         1.6 (3.8)
 *   lz_log2       0.56   0.56   yes               2.2 (3.6)         3.3 (4.7)
 *   lz_log10      0.55   0.54   yes               2.2 (7.2)         3.2 (6.9)
 *   lz_log1p      0.55   0.54   yes               3.0 (13.0)        3.0 (10.8)
 *   lz_expm1      0.58   0.57   yes               2.5 (13.7)        2.2 (16.4)
 *   lz_tanh       0.55   0.54   yes               3.5 (18.8)        4.5 (15.1)
 *   lz_sigmoid    0.75   0.75   yes               3.3 (5.5)         2.8 (4.3)
 *   lz_softplus   0.76   0.75   yes               6.9 (12.8)        5.9 (10.2)
 *   lz_exp2       0.75   0.75   yes               1.9 (2.9)         1.8 (2.7)
 *   lz_sin        0.59   0.59   yes               8.5 (17.4)        7.7 (16.8)
 *   lz_cos        0.59   0.59   yes               8.0 (18.6)       10.5 (23.3)
 *   lz_tan        0.61   0.59   yes               9.4 (23.4)        8.3 (21.0)
 *   lz_atan       0.51   0.51   yes               6.2 (6.3)         8.8 (9.2)
 *   lz_atan2      0.75   0.75   yes               4.8 (14.9)        7.1 (20.5)
 *   lz_pow        0.75   0.75   yes              10.4 (10.8)       13.7 (15.8)
 *   (the 0.75s are subnormal results, rounded twice; elsewhere those are < 0.6.
 *   sin/cos/tan: |x| < 100; on |x| ~ 1e300 lz_sin is 8.8 (61.0), both
 *   reductions run on every lane. lz_sigmoid was 1/(1 + lz_exp(-x)), 2.0 ns
 *   but 2.3 ULP and 0 below x = -709.78; softplus's libm was
 *   fmax(x, 0) + log1p(exp(-|x|)), sigmoid's 1/(1 + exp(-x)).)
 *
 * Still libm (scalar calls, glibc's accuracy): erf, erfc, asin, acos, sinh,
 * cosh, asinh, acosh, atanh. erf/erfc below 1 ULP need new fits (erfc to
 * 2^-55 relative on [1, 27]) evaluated in double-double; not done yet.
 *
 * Every function is LZ_INLINE (lazyrt_math.h): a fused kernel calling several
 * would otherwise get some outlined, and a call keeps its loop scalar.
 *
 * Methods, cited above each function: Cody-Waite reductions (fdlibm's splits
 * of ln2 and pi/2), Tang's table-driven log with the table replaced by
 * selects (pow), Payne-Hanek for huge sin/cos/tan arguments, Taylor series
 * with their leading terms in double-double; no -ffast-math, no gathers.
 */
#ifndef LAZYRT_MATH_DOUBLE_H
#define LAZYRT_MATH_DOUBLE_H

/* ---- double-double helpers (exact error terms; -std=c11 never contracts) -- */

/* s + *e == a + b exactly, any magnitudes (Knuth's two-sum) */
LZ_INLINE double lz__two_sum(double a, double b, double *e)
{
    double s = a + b, bb = s - a;
    *e = (a - (s - bb)) + (b - bb);
    return s;
}

/* p * 2^n for |n| <= 2100, in two steps so an overflow is inf and a subnormal
 * result is rounded by the last multiply only */
LZ_INLINE double lz__scale2(double p, int64_t n)
{
    int64_t n1 = n >> 1, n2 = n - n1;
    double s1 = lz__asdouble((uint64_t)(n1 + 1023) << 52);
    double s2 = lz__asdouble((uint64_t)(n2 + 1023) << 52);
    return (p * s1) * s2;
}

/* Cody-Waite reduction for exp: x = n ln2 + r + *rl, |r| <= 0.3466, r + *rl
 * good to ~2^-75 (fdlibm's ln2 split: n*ln2_hi exact for |n| < 2^21; the
 * rounding of r - n*ln2_lo is kept in *rl, which expm1 near ln2 needs). */
LZ_INLINE double lz__exp_reduce(double x, double *rl, int64_t *n)
{
    const double shifter = 0x1.8p52;
    double kd = x * 0x1.71547652b82fep0 + shifter;
    *n = (int64_t)(lz__asuint64(kd) - lz__asuint64(shifter));
    kd -= shifter;
    double r1 = __builtin_fma(kd, -0x1.62e42feep-1, x);
    double t = kd * 0x1.a39ef35793c76p-33;
    double tl = __builtin_fma(kd, 0x1.a39ef35793c76p-33, -t);
    double e, r = lz__two_sum(r1, -t, &e);
    *rl = e - tl;
    return r;
}

/* e^(r + rl) - 1 = hi + *lo (|lo| <= ulp(hi)/2) for |r| <= 0.35: r + r^2/2 by
 * Fast2Sum, r^3 q(r) by the Taylor series to r^13 (truncation below 2^-60),
 * rl to first order. */
LZ_INLINE double lz__expm1_core(double r, double rl, double *lo)
{
    double r2 = r * r;
    double r2e = __builtin_fma(r, r, -r2);
    double h = 0.5 * r2;
    double hi = r + h;
    double e = (r - hi) + h;
    double q = 1.0 / 87178291200.0;
    q = q * r + 1.0 / 6227020800.0;
    q = q * r + 1.0 / 479001600.0;
    q = q * r + 1.0 / 39916800.0;
    q = q * r + 1.0 / 3628800.0;
    q = q * r + 1.0 / 362880.0;
    q = q * r + 1.0 / 40320.0;
    q = q * r + 1.0 / 5040.0;
    q = q * r + 1.0 / 720.0;
    q = q * r + 1.0 / 120.0;
    q = q * r + 1.0 / 24.0;
    q = q * r + 1.0 / 6.0;
    double l = e + __builtin_fma(r2 * r, q, 0.5 * r2e) + rl * (1.0 + hi);
    double y = hi + l;                              /* normalize: l is up to r^3/6 */
    *lo = (hi - y) + l;
    return y;
}

/* e^x / 2^n = hi + *lo (in [0.7, 1.42]) for x clamped to |x| <= 800 */
LZ_INLINE double lz__exp_dd(double x, double *lo, int64_t *n)
{
    double rl, r = lz__exp_reduce(x, &rl, n);
    double ml, mh = lz__expm1_core(r, rl, &ml);
    double hi = 1.0 + mh;
    *lo = ((1.0 - hi) + mh) + ml;                   /* Fast2Sum: 1 >= |mh| */
    return hi;
}

/* exp in double, vectorizable: n = round(x/ln2), r = x - n ln2 (Cody-Waite),
 * e^r as an unevaluated hi + lo (lz__exp_dd), then 2^n in two steps so a
 * subnormal result rounds once. ±inf and NaN pass the clamp (±inf -> ±800: inf
 * and 0). Below 1 ULP (tests/test_c_math.py, 10^8 samples). */
LZ_INLINE double lz_exp(double x)
{
    double lo;
    int64_t n;
    double hi = lz__exp_dd(lz__clamp_mag(x, 800.0), &lo, &n);
    return lz__scale2(hi + lo, n);
}

/* x = 2^k (1 + f), 1 + f in [sqrt(2)/2, sqrt(2)), f exact, for finite x > 0
 * (subnormals scaled by 2^54 first); *kd = k. Others give garbage. */
LZ_INLINE double lz__log_reduce(double x, double *kd)
{
    int sub = x < 0x1p-1022;
    uint64_t ix = lz__asuint64(lz__sel(sub, x * 0x1p54, x));
    uint64_t t = ix - 0x3fe6a09e667f3bcdULL;
    *kd = (double)((int64_t)t >> 52) - lz__sel(sub, 54.0, 0.0);
    return lz__asdouble((t & 0x000fffffffffffffULL) + 0x3fe6a09e667f3bcdULL) - 1.0;
}

/* R(z) = sum 2 z^j / (2j + 1), j = 1..10: 2 atanh(s) = 2s + s R(s^2) */
LZ_INLINE double lz__log_series(double z)
{
    double r = 2.0 / 21.0;
    r = r * z + 2.0 / 19.0;
    r = r * z + 2.0 / 17.0;
    r = r * z + 2.0 / 15.0;
    r = r * z + 2.0 / 13.0;
    r = r * z + 2.0 / 11.0;
    r = r * z + 2.0 / 9.0;
    r = r * z + 2.0 / 7.0;
    r = r * z + 2.0 / 5.0;
    r = r * z + 2.0 / 3.0;
    return r * z;
}

/* log(1 + f) = hi + *lo for an exact f in [-0.293, 0.415]: 2 atanh(s) with
 * s = f/(2+f) kept as s + sl (the division's exact remainder by FMA), and
 * 2s + s R(s^2), R = sum 2 s^2j/(2j+1), j = 1..10 (truncation below 2^-60;
 * s R is at most 1% of the result, so its rounding costs < 2^-59). */
LZ_INLINE double lz__log1p_f(double f, double *lo)
{
    double d = 2.0 + f;
    double dl = f - (d - 2.0);                      /* Fast2Sum: 2 >= |f| */
    double s = f / d;
    double sl = (__builtin_fma(-s, d, f) - s * dl) / d;
    double c = s * lz__log_series(s * s);
    double hi = 2.0 * s + c;
    *lo = ((2.0 * s - hi) + c) + 2.0 * sl;          /* Fast2Sum: |2s| >= |c| */
    return hi;
}

/* log's specials: 0 -> -inf, +inf -> inf, negative and NaN -> NaN */
LZ_INLINE double lz__log_special(double x, double y)
{
    double special = lz__sel(x == 0.0, -INFINITY, lz__sel(x == INFINITY, INFINITY, NAN));
    return lz__sel((x > 0.0) & (x < INFINITY), y, special);
}

/* log in double, vectorizable, in one precision (log is hot; log2/log10 below
 * need the double-double form): x = 2^k (1 + f) (lz__log_reduce), s = f/(2+f),
 * log(1+f) = f - (f^2/2 - s (f^2/2 + R(s^2))), and k ln2 in fdlibm's two parts
 * (truncation below 2^-56). Below 1 ULP (tests/test_c_math.py); libm's specials. */
LZ_INLINE double lz_log(double x)
{
    double kd, f = lz__log_reduce(x, &kd);
    double s = f / (2.0 + f);
    double r = lz__log_series(s * s);
    double hfsq = 0.5 * f * f;
    double y = kd * 0x1.62e42feep-1 + (f - (hfsq - (s * (hfsq + r) + kd * 0x1.a39ef35793c76p-33)));
    return lz__log_special(x, y);
}

/* ---- float64 functions on the double-double cores (vectorizable) -------- */

/* log2 = k + log(1+f)/ln2: log(1+f) as hi + lo (lz__log1p_f), times 1/ln2 as
 * a double-double, then k added by two-sum; one rounding at the end, so
 * log2 of a power of two is exactly k. */
LZ_INLINE double lz_log2(double x)
{
    double kd, f = lz__log_reduce(x, &kd);
    double lo, hi = lz__log1p_f(f, &lo);
    const double c = 0x1.71547652b82fep0, cl = 0x1.777d0ffda0d24p-56;
    double mh = hi * c;
    double ml = __builtin_fma(hi, c, -mh) + (hi * cl + lo * c);
    double e, s = lz__two_sum(kd, mh, &e);
    return lz__log_special(x, s + (e + ml));
}

/* log10 = k log10(2) + log(1+f)/ln10: fdlibm's log10_2 split (k*hi exact),
 * log(1+f) / ln10 in double-double as in lz_log2. */
LZ_INLINE double lz_log10(double x)
{
    double kd, f = lz__log_reduce(x, &kd);
    double lo, hi = lz__log1p_f(f, &lo);
    const double c = 0x1.bcb7b1526e50ep-2, cl = 0x1.95355baaafad3p-57;
    double mh = hi * c;
    double ml = __builtin_fma(hi, c, -mh) + (hi * cl + lo * c);
    double e, s = lz__two_sum(kd * 0x1.34413509f6000p-2, mh, &e);
    ml += kd * 0x1.9fef311f12b36p-42;
    return lz__log_special(x, s + (e + ml));
}

/* log(u + ul) = hi + *lo for u >= 2^-60 finite, |ul| <= ulp(u): log(u) on the
 * reduction above plus c = ul/u to second order (fdlibm's log1p correction) */
LZ_INLINE double lz__log_dd(double u, double ul, double *lo)
{
    double kd, f = lz__log_reduce(u, &kd);
    double fl, fh = lz__log1p_f(f, &fl);
    double c = ul / u;
    double e, s = lz__two_sum(kd * 0x1.62e42feep-1, fh, &e);
    *lo = e + fl + (kd * 0x1.a39ef35793c76p-33 + c * (1.0 - 0.5 * c));
    return s;
}

/* log1p(x + xl) for |x| < 2^-16 by its series to x^5 (truncation 2^-80 relative):
 * through 1 + x, the ~2^-106 absolute errors of lz__log_dd would be an ULP */
LZ_INLINE double lz__log1p_small(double x, double xl)
{
    double p = -0.25 + x * 0.2;
    p = 1.0 / 3.0 + x * p;
    p = -0.5 + x * p;
    return x + (xl * (1.0 - x) + (x * x) * p);
}

/* log1p: u = 1 + x as u + ul by two-sum, then lz__log_dd; the series near 0 */
LZ_INLINE double lz_log1p(double x)
{
    double ul, u = lz__two_sum(1.0, x, &ul);
    double lo, hi = lz__log_dd(u, ul, &lo);
    double y = lz__log_special(u, hi + lo);
    y = lz__sel(__builtin_fabs(x) < 0x1p-16, lz__log1p_small(x, 0.0), y);
    return lz__sel(x == 0.0, x, lz__sel(x == -1.0, -INFINITY, y));    /* -0 kept */
}

/* expm1 = 2^n (e^r - 1 + 1 - 2^-n): Cody-Waite as lz_exp but r kept as r + rl,
 * e^r - 1 as hi + lo, and 1 - 2^-n added by two-sum before the one rounding
 * (fdlibm's shape). x < -60 is -1, x > 710 overflows; -0 kept. */
LZ_INLINE double lz_expm1(double x)
{
    double xc = lz__sel(x < -60.0, -60.0, lz__sel(x > 710.0, 710.0, x));
    int64_t n;
    double rl, r = lz__exp_reduce(xc, &rl, &n);
    double lo, hi = lz__expm1_core(r, rl, &lo);
    int64_t nu = n < 1000 ? n : 1000;               /* 2^-n: negligible past 2^-1000 */
    double vl, v = lz__two_sum(1.0, -lz__asdouble((uint64_t)(1023 - nu) << 52), &vl);
    double e, s = lz__two_sum(v, hi, &e);
    double y = lz__scale2(s + (e + (vl + lo)), n);
    return lz__sel(x == 0.0, x, y);
}

/* tanh(a) = E / (E + 2), E = expm1(2a) as a double-double (the expm1 core,
 * 2^n exact for 2a <= 40), divided in double-double by the FMA remainder;
 * a > 20 gives 1. Sign from x (tanh(-0) = -0). */
LZ_INLINE double lz_tanh(double x)
{
    double a = lz__asdouble(lz__asuint64(x) & 0x7fffffffffffffffULL);
    a = lz__sel(a > 20.0, 20.0, a);
    int64_t n;
    double rl, r = lz__exp_reduce(2.0 * a, &rl, &n);
    double lo, hi = lz__expm1_core(r, rl, &lo);
    double vl, v = lz__two_sum(1.0, -lz__asdouble((uint64_t)(1023 - n) << 52), &vl);
    double e, s = lz__two_sum(v, hi, &e);
    double sc = lz__asdouble((uint64_t)(n + 1023) << 52);
    double el = e + (vl + lo), eh = s + el;
    el = ((s - eh) + el) * sc;                      /* Fast2Sum: |s| >= |el| */
    eh *= sc;
    double dl, d = lz__two_sum(2.0, eh, &dl);
    dl += el;
    double q = eh / d;
    double t = q + (__builtin_fma(-q, d, eh) + (el - q * dl)) / d;
    return lz__asdouble(lz__asuint64(t) | (lz__asuint64(x) & 0x8000000000000000ULL));
}

/* sigmoid = 1 / (1 + F) for x >= 0 and F / (1 + F) for x < 0, F = e^-|x| as
 * 2^n (hi + lo) (never overflows); the quotient in double-double by the FMA
 * remainder, scaled by 2^n last so a subnormal result is rounded ~once. */
LZ_INLINE double lz_sigmoid(double x)
{
    double a = lz__asdouble(lz__asuint64(x) | 0x8000000000000000ULL);
    a = lz__sel(a < -800.0, -800.0, a);
    int64_t n;
    double pl, ph = lz__exp_dd(a, &pl, &n);
    double fh = lz__scale2(ph, n), fl = lz__scale2(pl, n);
    double d = 1.0 + fh;
    double dl = ((1.0 - d) + fh) + fl;              /* Fast2Sum: 1 >= F */
    int neg = x < 0.0;
    double nh = lz__sel(neg, ph, 1.0), nl = lz__sel(neg, pl, 0.0);
    double q = nh / d;
    double y = q + (__builtin_fma(-q, d, nh) + (nl - q * dl)) / d;
    return lz__scale2(y, neg ? n : 0);
}

/* softplus = max(x, 0) + log1p(F), F = e^-|x| as a double-double (lz__exp_dd),
 * the log1p as lz_log1p's on 1 + F; never overflows. -inf -> 0, inf -> inf. */
LZ_INLINE double lz_softplus(double x)
{
    double a = lz__asdouble(lz__asuint64(x) | 0x8000000000000000ULL);
    a = lz__sel(a < -800.0, -800.0, a);
    int64_t n;
    double pl, ph = lz__exp_dd(a, &pl, &n);
    double fh = lz__scale2(ph, n), fl = lz__scale2(pl, n);
    double u = 1.0 + fh;
    double ul = ((1.0 - u) + fh) + fl;              /* Fast2Sum: 1 >= F */
    double lo, hi = lz__log_dd(u, ul, &lo);
    double sm = lz__log1p_small(fh, fl);
    int small = fh < 0x1p-16;
    hi = lz__sel(small, sm, hi);
    lo = lz__sel(small, 0.0, lo);
    double e, s = lz__two_sum(lz__sel(x > 0.0, x, 0.0), hi, &e);
    return lz__sel(x == INFINITY, x, s + (e + lo));
}

/* exp2: n = round(x) by the shifter, r = x - n exact (|r| <= 1/2), r ln2 as
 * hi + lo (FMA), then lz_exp's core and two-step scaling; exact on integers. */
LZ_INLINE double lz_exp2(double x)
{
    double xc = lz__clamp_mag(x, 1100.0);
    const double shifter = 0x1.8p52;
    double kd = xc + shifter;
    int64_t n = (int64_t)(lz__asuint64(kd) - lz__asuint64(shifter));
    double r = xc - (kd - shifter);
    double rh = r * 0x1.62e42fefa39efp-1;
    double rl = __builtin_fma(r, 0x1.62e42fefa39efp-1, -rh) + r * 0x1.abc9e3b39803fp-56;
    double lo, hi = lz__expm1_core(rh, rl, &lo);
    double p = 1.0 + hi;
    return lz__scale2(p + (((1.0 - p) + hi) + lo), n);
}
LZ_INLINE double lz_erf(double x) { return erf(x); }
LZ_INLINE double lz_erfc(double x) { return erfc(x); }

/* ---- pow ------------------------------------------------------------------
 * pow(x, y) = exp(y log|x|) with log|x| to ~2^-70 relative, so that y log|x|
 * (up to 745 in magnitude) is good to ~2^-60 absolute: x = 2^k m (lz_log's
 * reduction), m = c (1 + t) with c = 1 + j/32 the nearest (Tang's method, the
 * table replaced by selects), t = (f - j/32)/c as t + tl (FMA remainder),
 * |t| <= 0.023, log(1 + t) by its series with t, t^2/2 and t^3/3 in double-
 * double; then y log|x| as hi + lo by FMA, and lz_exp's core on it. */

/* log(1 + j/32) as hi + *lo, j in -9..13, by selects */
LZ_INLINE double lz__log_c32(double j, double *lo)
{
    double h = 0.0, l = 0.0;
#define LZ__LOGC(J, H, L) h = lz__sel(j == (J), H, h), l = lz__sel(j == (J), L, l)
    LZ__LOGC(-9, -0x1.522ae0738a3d8p-2, 0x1.8f7e9b38a6979p-57);
    LZ__LOGC(-8, -0x1.269621134db92p-2, -0x1.e0efadd9db02bp-56);
    LZ__LOGC(-7, -0x1.f991c6cb3b379p-3, -0x1.f665066f980a2p-57);
    LZ__LOGC(-6, -0x1.a93ed3c8ad9e3p-3, -0x1.bcafa9de97203p-57);
    LZ__LOGC(-5, -0x1.5bf406b543db2p-3, 0x1.1f5b44c0df7e7p-61);
    LZ__LOGC(-4, -0x1.1178e8227e47cp-3, 0x1.0e63a5f01c691p-58);
    LZ__LOGC(-3, -0x1.9335e5d594989p-4, 0x1.478a85704ccb7p-58);
    LZ__LOGC(-2, -0x1.08598b59e3a07p-4, 0x1.dd7009902bf32p-58);
    LZ__LOGC(-1, -0x1.0415d89e74444p-5, -0x1.c05cf1d753622p-59);
    LZ__LOGC(1, 0x1.f829b0e783300p-6, 0x1.33e3f04f1ef23p-60);
    LZ__LOGC(2, 0x1.f0a30c01162a6p-5, 0x1.85f325c5bbacdp-59);
    LZ__LOGC(3, 0x1.6f0d28ae56b4cp-4, -0x1.906d99184b992p-58);
    LZ__LOGC(4, 0x1.e27076e2af2e6p-4, -0x1.61578001e0162p-60);
    LZ__LOGC(5, 0x1.29552f81ff523p-3, 0x1.301771c407dbfp-57);
    LZ__LOGC(6, 0x1.5ff3070a793d4p-3, -0x1.bc60efafc6f6ep-58);
    LZ__LOGC(7, 0x1.9525a9cf456b4p-3, 0x1.d904c1d4e2e26p-57);
    LZ__LOGC(8, 0x1.c8ff7c79a9a22p-3, -0x1.4f689f8434012p-57);
    LZ__LOGC(9, 0x1.fb9186d5e3e2bp-3, -0x1.caaae64f21acbp-57);
    LZ__LOGC(10, 0x1.1675cababa60ep-2, 0x1.ce63eab883717p-61);
    LZ__LOGC(11, 0x1.2e8e2bae11d31p-2, -0x1.8f4cdb95ebdf9p-56);
    LZ__LOGC(12, 0x1.4618bc21c5ec2p-2, 0x1.f42decdeccf1dp-56);
    LZ__LOGC(13, 0x1.5d1bdbf5809cap-2, 0x1.4236383dc7fe1p-56);
#undef LZ__LOGC
    *lo = l;
    return h;
}

/* log(x) = hi + *lo to ~2^-70 relative, x > 0 finite */
LZ_INLINE double lz__log_acc(double x, double *lo)
{
    double kd, f = lz__log_reduce(x, &kd);
    double j = (f * 32.0 + 0x1.8p52) - 0x1.8p52;      /* -9..13 */
    double d = f - j * 0.03125, c = 1.0 + j * 0.03125;  /* both exact */
    double t = d / c, tl = __builtin_fma(-t, c, d) / c;
    double t2 = t * t, t2e = __builtin_fma(t, t, -t2) + 2.0 * t * tl;
    double t3 = t2 * t, t3e = __builtin_fma(t2, t, -t3) + (t2e * t + t2 * tl);
    const double c3 = 0x1.5555555555555p-2, c3l = 0x1.5555555555555p-56;     /* 1/3 */
    double p3 = t3 * c3, p3e = __builtin_fma(t3, c3, -p3) + (t3 * c3l + t3e * c3);
    double q = -1.0 / 13.0;                            /* t^4 (-1/4 + t/5 - ... ) */
    q = q * t + 1.0 / 12.0;
    q = q * t - 1.0 / 11.0;
    q = q * t + 1.0 / 10.0;
    q = q * t - 1.0 / 9.0;
    q = q * t + 1.0 / 8.0;
    q = q * t - 1.0 / 7.0;
    q = q * t + 1.0 / 6.0;
    q = q * t - 1.0 / 5.0;
    q = q * t + 1.0 / 4.0;
    double e1, a = lz__two_sum(t, -0.5 * t2, &e1), e2;
    a = lz__two_sum(a, p3, &e2);
    double l = e1 + e2 + (tl - 0.5 * t2e + p3e - (t2 * t2) * q);
    double ll, lc = lz__log_c32(j, &ll), e3, e4;
    double b = lz__two_sum(kd * 0x1.62e42fefa3800p-1, lc, &e3);    /* k ln2_hi exact */
    b = lz__two_sum(b, a, &e4);
    l += e3 + e4 + ll + kd * 0x1.ef35793c76730p-45 + kd * 0x1.f97b57a079a19p-103;
    double y = b + l;
    *lo = (b - y) + l;
    return y;
}

/* pow with C99 Annex F's special cases (pow(x, ±0) = pow(1, y) = 1 even for
 * NaN, ±0 and ±inf bases by y's sign and oddness, pow(-1, ±inf) = 1, x < 0
 * with a non-integer y NaN); a negative base with an odd integer y negates. */
LZ_INLINE double lz_pow(double x, double y)
{
    double ax = __builtin_fabs(x), ay = __builtin_fabs(y);
    int is_int = (ay >= 0x1p52) | (((ay + 0x1p52) - 0x1p52) == ay);
    uint64_t par = lz__asuint64(lz__sel(ay < 0x1p52, ay + 0x1p52, ay)) & 1;
    int odd = is_int & (ay < 0x1p53) & (int)par;
    double ll, lh = lz__log_acc(lz__sel((ax > 0.0) & (ax < INFINITY), ax, 1.0), &ll);
    double eh = y * lh;
    double el = __builtin_fma(y, lh, -eh) + y * ll;
    double ec = lz__clamp_mag(eh, 800.0);
    el = lz__sel(__builtin_fabs(eh) < 800.0, el, 0.0);
    int64_t n;
    double rl, r = lz__exp_reduce(ec, &rl, &n);
    double rr, rt = lz__two_sum(r, rl + el, &rr);     /* el ~ 2^-45: into r itself */
    double lo, hi = lz__expm1_core(rt, rr, &lo);
    double p = 1.0 + hi;
    double res = lz__scale2(p + (((1.0 - p) + hi) + lo), n);
    res = lz__sel(ax == 0.0, lz__sel(y < 0.0, INFINITY, 0.0), res);
    res = lz__sel(ax == INFINITY, lz__sel(y < 0.0, 0.0, INFINITY), res);
    res = lz__sel((ax == 1.0) & (ay == INFINITY), 1.0, res);
    int xneg = (int)(lz__asuint64(x) >> 63);
    res = lz__sel(xneg & odd, -res, res);
    res = lz__sel(xneg & !is_int & (ax > 0.0) & (ax < INFINITY), NAN, res);
    res = lz__sel((x != x) | (y != y), x + y, res);
    return lz__sel((y == 0.0) | (x == 1.0), 1.0, res);
}

/* sin, cos, tan: Cody-Waite and Payne-Hanek reductions, on the helpers above */
#include "lazyrt_math_double_trig.h"

/* ---- the array API's float64 functions: libm ------------------------------------- */

LZ_INLINE double lz_asin(double x) { return asin(x); }
LZ_INLINE double lz_acos(double x) { return acos(x); }
LZ_INLINE double lz_sinh(double x) { return sinh(x); }
LZ_INLINE double lz_cosh(double x) { return cosh(x); }
LZ_INLINE double lz_asinh(double x) { return asinh(x); }
LZ_INLINE double lz_acosh(double x) { return acosh(x); }
LZ_INLINE double lz_atanh(double x) { return atanh(x); }
LZ_INLINE double lz_logaddexp(double x, double y)
{
    if (x == y) return x + LZ__LN2;
    double d = x - y;
    return d > 0 ? x + log1p(exp(-d)) : (d <= 0 ? y + log1p(exp(d)) : d);
}

#endif /* LAZYRT_MATH_DOUBLE_H */
