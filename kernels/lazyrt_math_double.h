/* lazyrt_math_double.h — the float64 functions generated C kernels call:
 * exp, log, sigmoid (vectorized), and the rest through libm (scalar calls,
 * correctly handled, glibc's < 1 ULP).
 *
 * Included last by lazyrt_math.h, after the selects, the float32 functions and
 * LZ__LN2 (lazyrt_math_array_api.h); the same rules hold (no -ffast-math,
 * branch-free code GCC vectorizes in `#pragma omp simd` loops).
 */
#ifndef LAZYRT_MATH_DOUBLE_H
#define LAZYRT_MATH_DOUBLE_H

/* ---- float64 transcendental functions: exp, log vectorized, the rest libm - */

/* exp in double, vectorizable: n = round(x/ln2) by the 1.5*2^52 shifter,
 * r = x - n ln2 (Cody-Waite, fdlibm's split: n*ln2_hi exact for |n| < 2^11),
 * e^r - 1 = r + r^2/2 + r^3 q(r) as an unevaluated hi + lo (q the Taylor series
 * to r^13: truncation below 2^-60 on |r| <= 0.347), 1 + hi by an exact two-sum,
 * then 2^n in two steps so a subnormal result rounds once. ±inf and NaN pass
 * the clamp (±inf -> ±800: inf and 0). Below 1 ULP (tests/test_c_math.py). */
static inline double lz_exp(double x)
{
    double xc = lz__clamp_mag(x, 800.0);
    const double shifter = 0x1.8p52;
    double kd = xc * 0x1.71547652b82fep0 + shifter;
    int64_t n = (int64_t)(lz__asuint64(kd) - lz__asuint64(shifter));
    kd -= shifter;
    double r = __builtin_fma(kd, -0x1.62e42feep-1, xc);
    r = __builtin_fma(kd, -0x1.a39ef35793c76p-33, r);
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
    double lo = e + __builtin_fma(r2 * r, q, 0.5 * r2e);
    double sum = 1.0 + hi;
    double err = (1.0 - sum) + hi;                  /* Fast2Sum: 1 >= |hi| */
    double p = sum + (err + lo);
    int64_t n1 = n >> 1, n2 = n - n1;               /* each in [-578, 578] */
    double s1 = lz__asdouble((uint64_t)(n1 + 1023) << 52);
    double s2 = lz__asdouble((uint64_t)(n2 + 1023) << 52);
    return (p * s1) * s2;
}
/* log in double, vectorizable: x = 2^k m, m in [sqrt(2)/2, sqrt(2)) by integer
 * subtraction (f = m - 1 exact; subnormals scaled by 2^54 first), s = f/(2+f),
 * log(1+f) = f - (f^2/2 - s (f^2/2 + R)) with R = sum 2 s^2j/(2j+1), j = 1..10
 * (truncation below 2^-56 of the result for |s| <= 0.1716), and k ln2 in
 * fdlibm's two parts. Below 1 ULP (tests/test_c_math.py); libm's specials. */
static inline double lz_log(double x)
{
    int sub = x < 0x1p-1022;
    uint64_t ix = lz__asuint64(lz__sel(sub, x * 0x1p54, x));
    uint64_t t = ix - 0x3fe6a09e667f3bcdULL;
    int64_t k = (int64_t)t >> 52;
    double f = lz__asdouble((t & 0x000fffffffffffffULL) + 0x3fe6a09e667f3bcdULL) - 1.0;
    double kd = (double)k - lz__sel(sub, 54.0, 0.0);
    double s = f / (2.0 + f);
    double z = s * s;
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
    r *= z;
    double hfsq = 0.5 * f * f;
    double y = kd * 0x1.62e42feep-1 + (f - (hfsq - (s * (hfsq + r) + kd * 0x1.a39ef35793c76p-33)));
    double special = lz__sel(x == 0.0, -INFINITY, lz__sel(x == INFINITY, INFINITY, NAN));
    return lz__sel((x > 0.0) & (x < INFINITY), y, special);
}
static inline double lz_log1p(double x) { return log1p(x); }
static inline double lz_expm1(double x) { return expm1(x); }
static inline double lz_tanh(double x) { return tanh(x); }
static inline double lz_sigmoid(double x) { return 1.0 / (1.0 + lz_exp(-x)); }
static inline double lz_erf(double x) { return erf(x); }
static inline double lz_erfc(double x) { return erfc(x); }
static inline double lz_exp2(double x) { return exp2(x); }
/* softplus = log(1 + e^x) = max(x, 0) + log1p(e^-|x|): never overflows; -inf -> 0 */
static inline double lz_softplus(double x)
{
    return fmax(x, 0.0) + log1p(exp(-fabs(x)));
}
static inline double lz_sin(double x) { return sin(x); }
static inline double lz_cos(double x) { return cos(x); }

/* ---- the array API's float64 functions: libm ---------------------------------------------------------- */

static inline double lz_atan(double x) { return atan(x); }
static inline double lz_atan2(double y, double x) { return atan2(y, x); }
static inline double lz_asin(double x) { return asin(x); }
static inline double lz_acos(double x) { return acos(x); }
static inline double lz_sinh(double x) { return sinh(x); }
static inline double lz_cosh(double x) { return cosh(x); }
static inline double lz_tan(double x) { return tan(x); }
static inline double lz_asinh(double x) { return asinh(x); }
static inline double lz_acosh(double x) { return acosh(x); }
static inline double lz_atanh(double x) { return atanh(x); }
static inline double lz_log2(double x) { return log2(x); }
static inline double lz_log10(double x) { return log10(x); }
static inline double lz_logaddexp(double x, double y)
{
    if (x == y) return x + LZ__LN2;
    double d = x - y;
    return d > 0 ? x + log1p(exp(-d)) : (d <= 0 ? y + log1p(exp(d)) : d);
}

#endif /* LAZYRT_MATH_DOUBLE_H */
