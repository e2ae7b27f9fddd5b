/* lazyrt_math_array_api.h — the array API's remaining elementwise functions:
 * inverse trigonometric and hyperbolic functions, sinh/cosh/tan, log2/log10,
 * logaddexp, copysign, signbit and the integer shifts, with NumPy's results.
 *
 * Included at the end of lazyrt_math.h: it builds on the double cores of
 * lazyrt_math_transcendental.h (lz__exp_d, lz__expm1_d, lz__log_d) and the
 * selects (lz__sel). The same rules hold: no -ffast-math, branch-free
 * float32 code that GCC vectorizes in `#pragma omp simd` loops, evaluated
 * in double so the float32 result is within 1 ULP of the exact value (the double cores are accurate to ~1e-10
 * relative); float64 versions call libm (scalar, as NumPy's C loops do).
 * Max error in float32 ULPs: "all" is the sweep of all 2^32 bit patterns
 * (LAZYRT_EXHAUSTIVE_MATH=1, against glibc's double functions), "sample" the
 * 2^24 stratified patterns tests/test_c_math.py checks on every run (every
 * exponent, both signs); and the bound it asserts:
 *
 *   function                  all     sample  bound   vectorized
 *   lz_asinf lz_acosf lz_atanf 0.500   0.50    1.0     yes
 *   lz_sinhf                  0.510   0.51    1.0     yes
 *   lz_coshf                  0.503   0.50    1.0     yes
 *   lz_asinhf lz_acoshf       0.500   0.50    1.0     yes
 *   lz_atanhf                 0.500   0.50    1.0     yes
 *   lz_log2f                  0.697   0.63    1.0     yes (float32 arithmetic)
 *   lz_log10f                 0.689   0.58    1.0     yes (float32 arithmetic)
 *   lz_atan2f lz_logaddexpf     -     < 1     1.0     yes (2^20 random pairs + specials)
 *   lz_tanf                   0.544   0.54    1.0     yes (lz_sinf's reduction, a division)
 *   lz_powf                     -     0.503   1.0     yes (2^24 random pairs + Annex F's cases;
 *                                                  3.5 ns/element/core vs powf's 4.6: the
 *                                                  double division in lz__log_d)
 *   lz_copysignf, lz_signbitf, shifts: exact, vectorized.
 *
 * Special cases are C99 Annex F's (the array API standard's lists agree):
 * atan2 of signed zeros and infinities by quadrant, asin/atan/sinh/asinh/
 * atanh keep -0, acosh(1) = +0, atanh(±1) = ±inf, log2/log10(±0) = -inf,
 * NaN propagates (logaddexp(±inf, ±inf) of one sign is that inf, as NumPy).
 */
#ifndef LAZYRT_MATH_ARRAY_API_H
#define LAZYRT_MATH_ARRAY_API_H

#define LZ__PI 3.141592653589793
#define LZ__PI_2 1.5707963267948966
#define LZ__PI_4 0.7853981633974483
#define LZ__LN2 0.6931471805599453

/* ---- double cores ---------------------------------------------------------- */

/* log1p(x) for a finite double x > -1: log(u) corrected by the rounding of
 * u = 1 + x (u - 1 is exact), as lz_log1pf. */
LZ_INLINE double lz__log1p_d(double x)
{
    double u = 1.0 + x;
    return lz__log_d(u) + (x - (u - 1.0)) / u;
}

/* sqrt(v) by Newton's method on 1/sqrt(v) (four steps from the bit-level
 * estimate, then one on sqrt itself): libm's sqrt may set errno, which keeps
 * GCC from vectorizing it without -fno-math-errno. For v normal (>= 2^-1022),
 * 0, inf, negative (NaN) and NaN; within 1 ULP of a double. */
LZ_INLINE double lz__sqrt_d(double v)
{
    int ok = (v > 0.0) & (v < INFINITY);
    double vs = lz__sel(ok, v, 1.0);
    double y = lz__asdouble(0x5fe6eb50c7b537a9ULL - (lz__asuint64(vs) >> 1));
    double h = 0.5 * vs;
    y = y * (1.5 - h * y * y);
    y = y * (1.5 - h * y * y);
    y = y * (1.5 - h * y * y);
    y = y * (1.5 - h * y * y);
    double s = vs * y;
    s = s + (vs - s * s) * (0.5 * y);
    return lz__sel(ok, s, lz__sel((v == 0.0) | (v == INFINITY), v, NAN));
}

/* atan(t) for t >= 0, +inf and NaN included. Reduced to |u| <= tan(pi/8):
 * t > tan(3pi/8): pi/2 + atan(-1/t); t > tan(pi/8): pi/4 + atan((t-1)/(t+1));
 * then the Taylor series to u^31 (truncation < 1e-13 relative). */
LZ_INLINE double lz__atan_pos_d(double t)
{
    int big = t > 2.414213562373095, mid = t > 0.41421356237309503;
    double u = lz__sel(big, -1.0 / lz__sel(big, t, 1.0),
                       lz__sel(mid, (t - 1.0) / (t + 1.0), t));
    double base = lz__sel(big, LZ__PI_2, lz__sel(mid, LZ__PI_4, 0.0));
    double w = u * u;
    double p = -1.0 / 31;
    p = p * w + 1.0 / 29;
    p = p * w - 1.0 / 27;
    p = p * w + 1.0 / 25;
    p = p * w - 1.0 / 23;
    p = p * w + 1.0 / 21;
    p = p * w - 1.0 / 19;
    p = p * w + 1.0 / 17;
    p = p * w - 1.0 / 15;
    p = p * w + 1.0 / 13;
    p = p * w - 1.0 / 11;
    p = p * w + 1.0 / 9;
    p = p * w - 1.0 / 7;
    p = p * w + 1.0 / 5;
    p = p * w - 1.0 / 3;
    return base + (u + u * (w * p));
}

/* atan2(y, x) for any doubles, Annex F's special cases: the angle of the
 * smaller over the larger magnitude, reflected into its octant and quadrant.
 * Both zero: ratio 0 (atan2(±0, +0) = ±0, atan2(±0, -0) = ±pi); both
 * infinite: ratio 1 (±pi/4, ±3pi/4). */
LZ_INLINE double lz__atan2_d(double y, double x)
{
    double ay = fabs(y), ax = fabs(x);
    int steep = ay > ax;
    double num = lz__sel(steep, ax, ay), den = lz__sel(steep, ay, ax);
    double q = num / lz__sel(den == 0.0, 1.0, den);
    q = lz__sel((ax == INFINITY) & (ay == INFINITY), 1.0, q);
    double r = lz__atan_pos_d(q);
    r = lz__sel(steep, LZ__PI_2 - r, r);
    r = lz__sel((int)(lz__asuint64(x) >> 63), LZ__PI - r, r);
    r = lz__asdouble(lz__asuint64(r) | (lz__asuint64(y) & 0x8000000000000000ULL));
    return lz__sel((x != x) | (y != y), x + y, r);
}

/* |r| with the sign bit of x (r >= 0 or NaN) */
LZ_INLINE float lz__signed_like(double r, float x)
{
    return lz__asfloat(lz__asuint32((float)r) | (lz__asuint32(x) & 0x80000000u));
}

/* ---- float32 (vectorizable, through double) ------------------------------- */

LZ_INLINE float lz_atanf(float x)
{
    return lz__signed_like(lz__atan_pos_d(fabs((double)x)), x);
}

LZ_INLINE float lz_atan2f(float y, float x)
{
    return (float)lz__atan2_d((double)y, (double)x);
}

/* pow(x, y) = 2^(y log2 |x|) in double: lz__log_d is accurate to ~2^-60 and
 * y log|x| rounds at 2^-53 of |t| <= 300, so exp's argument is off by < 1e-13
 * and its ~1e-10 relative error leaves the float rounding alone (0.5 ULP).
 * C99 Annex F's special cases by selects: pow(x, ±0) = 1 and pow(1, y) = 1
 * even for NaN, pow(-1, ±inf) = 1, a negative finite x with a finite non-
 * integer y is NaN, an odd integer y keeps x's sign (±0 and ±inf included:
 * log|±0| = -inf and log|±inf| = inf make t = ±inf, clamped to ±300, which
 * exp turns into inf or 0). Every float with |y| >= 2^24 is an even integer. */
LZ_INLINE float lz_powf(float x, float y)
{
    double ax = fabs((double)x), yd = (double)y;
    int finite_pos = (ax > 0.0) & (ax < INFINITY);
    double l = lz__log_d(lz__sel(finite_pos, ax, 1.0));
    l = lz__sel(ax == 0.0, -INFINITY, lz__sel(ax == INFINITY, INFINITY, l));
    double t = lz__clamp_mag(yd * l, 300.0);
    double r = lz__exp_d(t);
    /* integer y by a round trip through int32 (truncf does not vectorize) */
    int32_t yi = (int32_t)lz__self(fabsf(y) < 0x1p24f, y, 0.0f);
    int is_int = (fabsf(y) >= 0x1p23f) | ((float)yi == y);
    int odd = is_int & (fabsf(y) < 0x1p24f) & (int)((uint32_t)yi & 1u);
    int neg = (int)(lz__asuint32(x) >> 31);
    r = lz__sel(neg & odd, -r, r);
    r = lz__sel((x < 0.0f) & (fabsf(x) < INFINITY) & !is_int & (fabsf(y) < INFINITY), NAN, r);
    r = lz__sel(x != x, (double)x, r);                       /* NaN x, y != 0 */
    r = lz__sel((ax == 1.0) & (fabsf(y) == INFINITY), 1.0, r);  /* (-1)^±inf */
    r = lz__sel((y == 0.0f) | (x == 1.0f), 1.0, r);
    return (float)r;
}

/* asin x = atan(|x| / sqrt(1 - x^2)): 1 - |x| and 1 + |x| are exact in
 * double; |x| = 1 gives atan(inf) = pi/2, |x| > 1 a NaN square root. */
LZ_INLINE float lz_asinf(float x)
{
    double a = fabs((double)x);
    return lz__signed_like(lz__atan_pos_d(a / lz__sqrt_d((1.0 - a) * (1.0 + a))), x);
}

/* acos x = 2 atan(sqrt((1 - x) / (1 + x))): x = -1 gives 2 atan(inf) = pi. */
LZ_INLINE float lz_acosf(float x)
{
    double d = x;
    return (float)(2.0 * lz__atan_pos_d(lz__sqrt_d((1.0 - d) / (1.0 + d))));
}

/* sinh |x| = (e + e / (e + 1)) / 2 with e = expm1 |x| (no cancellation near 0);
 * |x| is clamped at 100, where float32 has overflowed already. */
LZ_INLINE float lz_sinhf(float x)
{
    double e = lz__expm1_d(lz__clamp_mag(fabs((double)x), 100.0));
    return lz__signed_like(0.5 * (e + e / (e + 1.0)), x);
}

LZ_INLINE float lz_coshf(float x)
{
    double e = lz__exp_d(lz__clamp_mag(fabs((double)x), 100.0));
    return (float)(0.5 * (e + 1.0 / e));
}

/* asinh |x| = log1p(|x| + x^2 / (1 + sqrt(1 + x^2))): x^2 cannot overflow a
 * double for a float32 x; inf and NaN pass through. */
LZ_INLINE float lz_asinhf(float x)
{
    double a = fabs((double)x);
    int ok = a < INFINITY;
    double as = lz__sel(ok, a, 0.0);
    double r = lz__log1p_d(as + as * as / (1.0 + lz__sqrt_d(1.0 + as * as)));
    return lz__signed_like(lz__sel(ok, r, a), x);
}

/* acosh x = log1p(t + sqrt(t (x + 1))), t = x - 1 exact; x < 1 is NaN. */
LZ_INLINE float lz_acoshf(float x)
{
    double d = x;
    int ok = (d >= 1.0) & (d < INFINITY);
    double t = lz__sel(ok, d, 1.0) - 1.0;
    double r = lz__log1p_d(t + lz__sqrt_d(t * (t + 2.0)));
    return (float)lz__sel(ok, r, lz__sel(d == INFINITY, INFINITY, NAN));
}

/* atanh |x| = log1p(2|x| / (1 - |x|)) / 2; |x| = 1 is inf, |x| > 1 NaN. */
LZ_INLINE float lz_atanhf(float x)
{
    double a = fabs((double)x);
    int ok = a < 1.0;
    double as = lz__sel(ok, a, 0.0);
    double r = 0.5 * lz__log1p_d(2.0 * as / (1.0 - as));
    return lz__signed_like(lz__sel(ok, r, lz__sel(a == 1.0, INFINITY, NAN)), x);
}

/* log2 and log10 in float32 arithmetic, as lz_logf (lazyrt_math_transcendental.h): k plus
 * ln(m)/ln 2, and k log10(2) + ln(m)/ln 10, with the constants in two parts
 * (powers of two and of ten come out exact). */
LZ_INLINE float lz_log2f(float x)
{
    return lz__log_basef(x, 1.0f, 0.0f, 0x1.715476p0f, 0x1.4ae0cp-26f);
}
LZ_INLINE float lz_log10f(float x)
{
    return lz__log_basef(x, 0x1.344p-2f, 0x1.3509f8p-18f, 0x1.bcb7b2p-2f, -0x1.5b235ep-27f);
}

/* log(e^a + e^b) = max + log1p(e^-|a-b|); a == b (equal infinities too) is
 * a + ln 2, as NumPy's npy_logaddexp. */
LZ_INLINE float lz_logaddexpf(float a, float b)
{
    double x = a, y = b;
    double d = -fabs(x - y);
    double e = lz__exp_d(lz__sel(d < -700.0, -700.0, d));
    double r = lz_max(x, y) + lz__log1p_d(e);
    return (float)lz__sel(x == y, x + LZ__LN2, r);
}

/* libm (see the table at the top) */
/* tan as sin r / cos r of the shared reduction (lazyrt_math_transcendental.h): -cos r / sin r
 * in odd quadrants; one division in double, one rounding to float. */
LZ_INLINE float lz_tanf(float x)
{
    uint32_t q;
    double r = lz__reduce_pio2f(x, &q);
    double z = r * r;
    double s = lz__sin_poly(r, z), c = lz__cos_poly(z);
    double v = lz__sel(q & 1u, -c, s) / lz__sel(q & 1u, s, c);
    float y = (float)lz__sel(lz__asuint32(x) >> 31, -v, v);     /* tan(-x) = -tan x */
    return lz__self(fabsf(x) < INFINITY, lz__self(x == 0.0f, x, y), x - x);
}

/* ---- exact on the bits (both widths) -------------------------------------- */

LZ_INLINE float lz_copysignf(float a, float b)
{
    return lz__asfloat((lz__asuint32(a) & 0x7fffffffu) | (lz__asuint32(b) & 0x80000000u));
}
LZ_INLINE double lz_copysign(double a, double b)
{
    return lz__asdouble((lz__asuint64(a) & 0x7fffffffffffffffULL)
                        | (lz__asuint64(b) & 0x8000000000000000ULL));
}
LZ_INLINE int lz_signbitf(float x) { return (int)(lz__asuint32(x) >> 31); }
LZ_INLINE int lz_signbit(double x) { return (int)(lz__asuint64(x) >> 63); }

/* ---- shifts, NumPy's results without C's undefined behaviour -------------
 * A shift amount outside [0, bits) (NumPy reads a negative one as a huge
 * unsigned amount) gives 0 for <<, and 0 or -1 (the sign) for >>. << shifts
 * the unsigned bits (a negative value shifted is UB in C); >> of a negative
 * value is arithmetic (GCC's documented implementation-defined choice). */

#define LZ__SHIFTS(T, U, S, BITS)                                              \
    static inline T lz_shl_##S(T a, T b)                                       \
    {                                                                          \
        U s = (U)b;                                                            \
        return s < BITS ? (T)((U)a << (s & (BITS - 1))) : (T)0;                \
    }                                                                          \
    static inline T lz_shr_##S(T a, T b)                                       \
    {                                                                          \
        U s = (U)b;                                                            \
        return s < BITS ? (T)(a >> (s & (BITS - 1))) : (T)(a < 0 ? -1 : 0);    \
    }

LZ__SHIFTS(int8_t, uint8_t, i8, 8u)
LZ__SHIFTS(uint8_t, uint8_t, u8, 8u)
LZ__SHIFTS(int32_t, uint32_t, i32, 32u)
LZ__SHIFTS(int64_t, uint64_t, i64, 64u)
#undef LZ__SHIFTS

#endif /* LAZYRT_MATH_ARRAY_API_H */
