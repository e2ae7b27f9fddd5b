/* lazyrt_math_double_trig.h — float64 sin, cos, tan, vectorizable and below
 * 1 ULP over the whole double range (accuracy and speed: lazyrt_math_double.h).
 *
 * Included by lazyrt_math_double.h after its double-double helpers. x = q pi/2
 * + r + rl with |r| <= pi/4 (plus a hair), then Taylor polynomials of sin and
 * cos on r + rl and the quadrant q picks which, with which sign. Two reductions,
 * both computed on every lane and selected by |x| (no branch, no table loads):
 *  - |x| < 2^30: Cody-Waite with pi/2 in three doubles (fdlibm's pio2_1..3
 *    idea, with FMA: n*P1 is subtracted exactly, n*P2's rounding error kept);
 *  - otherwise Payne-Hanek: x = M 2^E (M the 53-bit integer mantissa), and
 *    x 2/pi mod 4 = M T 2^-190 for T the 192 bits of 2/pi from bit E - 1 on
 *    (earlier bits give multiples of 4; later ones less than 2^-137), T picked
 *    from 20 constant words by selects and cut in eight 24-bit chunks, M in
 *    27 + 26 bits, so each chunk product is exact in double; the four large
 *    ones are reduced mod 1 exactly, the rest summed in double-double (two-sum
 *    cascade: when the fraction cancels to its worst case, 2^-61 for doubles
 *    (Kahan-McDonald), the partial sums are small and the sums exact).
 */
#ifndef LAZYRT_MATH_DOUBLE_TRIG_H
#define LAZYRT_MATH_DOUBLE_TRIG_H

/* GCC stops inlining the (long) reductions once a kernel calls sin, cos and
 * tan, and an outlined call with pointer outputs keeps the loop scalar */
#define LZ__ALWAYS_INLINE static inline __attribute__((always_inline))

/* 2/pi's bits 1..1216 in 64-bit words, after a zero word (the window of a
 * small E starts before the binary point) */
static const uint64_t lz__two_over_pi_words[20] = {
    0, 0xa2f9836e4e441529ULL, 0xfc2757d1f534ddc0ULL, 0xdb6295993c439041ULL,
    0xfe5163abdebbc561ULL, 0xb7246e3a424dd2e0ULL, 0x06492eea09d1921cULL, 0xfe1deb1cb129a73eULL,
    0xe88235f52ebb4484ULL, 0xe99c7026b45f7e41ULL, 0x3991d639835339f4ULL, 0x9c845f8bbdf9283bULL,
    0x1ff897ffde05980fULL, 0xef2f118b5a0a6d1fULL, 0x6d367ecf27cb09b7ULL, 0x4f463f669e5fea2dULL,
    0x7527bac7ebe5f17bULL, 0x3d0739f78a5292eaULL, 0x6bfb5fb11f8d5d08ULL, 0x56033046fc7b6babULL};

/* the 64 bits of a:b starting s bits into a (0 <= s < 64; no shift by 64) */
static inline uint64_t lz__funnel(uint64_t a, uint64_t b, uint64_t s)
{
    return (a << s) | ((b >> 1) >> (63 - s));
}

/* t mod 1 into [-1/2, 1/2] exactly, its integer part added to *q (t < 2^51) */
static inline double lz__frac(double t, double *q)
{
    double n = (t + 0x1.8p52) - 0x1.8p52;
    *q += n;
    return t - n;
}

/* Payne-Hanek for finite a >= 2^30 (others: bounded garbage): a 2/pi =
 * q + f + *fl, |f| <= 1/2 + 2^-15, as described at the top */
LZ__ALWAYS_INLINE double lz__reduce_ph(double a, double *fl, double *q)
{
    uint64_t ia = lz__asuint64(a);
    int64_t e = (int64_t)(ia >> 52) - 1075;          /* a = M 2^e */
    uint64_t m = (ia & 0x000fffffffffffffULL) | 0x0010000000000000ULL;
    uint64_t p = (uint64_t)(e - 1 + 63);             /* bit e - 1 of 2/pi in the words */
    uint64_t k = p >> 6, s = p & 63;
    uint64_t w0 = 0, w1 = 0, w2 = 0, w3 = 0;
#pragma GCC unroll 17
    for (uint64_t j = 0; j < 17; j++) {               /* selects, not a gather */
        int hit = k == j;
        w0 = hit ? lz__two_over_pi_words[j] : w0;
        w1 = hit ? lz__two_over_pi_words[j + 1] : w1;
        w2 = hit ? lz__two_over_pi_words[j + 2] : w2;
        w3 = hit ? lz__two_over_pi_words[j + 3] : w3;
    }
    uint64_t t0 = lz__funnel(w0, w1, s), t1 = lz__funnel(w1, w2, s), t2 = lz__funnel(w2, w3, s);
    const uint64_t c24 = 0xffffff;
    double c[8] = {0.0, (double)((t0 >> 16) & c24),
                   (double)(((t0 & 0xffff) << 8) | (t1 >> 56)), (double)((t1 >> 32) & c24),
                   (double)((t1 >> 8) & c24), (double)(((t1 & 0xff) << 16) | (t2 >> 48)),
                   (double)((t2 >> 24) & c24), (double)(t2 & c24)};
    double ma = (double)(m >> 27), mb = (double)(m & 0x7ffffff);
    /* a c_i 2^(5-24i) and b c_i 2^(-22-24i); a c_0 2^5 is a multiple of 4 */
    double b0 = mb * (double)(t0 >> 40) * 0x1p-22;
    double n = 0.0;
    double g = lz__frac(ma * c[1] * 0x1p-19, &n) + lz__frac(b0, &n)
             + lz__frac(ma * c[2] * 0x1p-43, &n) + lz__frac(mb * c[1] * 0x1p-46, &n);
    g = lz__frac(g, &n);                              /* exact: ulp 2^-46, |g| <= 2 */
    double l, h = lz__two_sum(g, ma * c[3] * 0x1p-67, &l), e1;
    h = lz__two_sum(h, mb * c[2] * 0x1p-70, &e1);
    l += e1;
    h = lz__two_sum(h, ma * c[4] * 0x1p-91, &e1);
    l += e1;
    h = lz__two_sum(h, mb * c[3] * 0x1p-94, &e1);
    l += e1;
    h = lz__two_sum(h, ma * c[5] * 0x1p-115, &e1);
    l += e1;
    h = lz__two_sum(h, mb * c[4] * 0x1p-118, &e1);
    l += e1 + (ma * c[6] * 0x1p-139 + mb * c[5] * 0x1p-142
               + (ma * c[7] * 0x1p-163 + mb * c[6] * 0x1p-166));
    *q = n;
    *fl = l;
    return h;
}

/* |x| = q pi/2 + r + *rl (q mod 4 in *quadrant), for finite x; NaN and inf
 * give garbage the callers select away */
LZ__ALWAYS_INLINE double lz__rem_pio2(double a, double *rl, int64_t *quadrant)
{
    /* Cody-Waite, a < 2^30 */
    double ac = lz__sel(a < 0x1p30, a, 0.0);
    const double shifter = 0x1.8p52;
    double kd = ac * 0x1.45f306dc9c883p-1 + shifter;
    int64_t na = (int64_t)(lz__asuint64(kd) - lz__asuint64(shifter));
    kd -= shifter;
    double r1 = __builtin_fma(kd, -0x1.921fb54442d18p0, ac);          /* exact */
    double t = kd * 0x1.1a62633145c07p-54;
    double tl = __builtin_fma(kd, 0x1.1a62633145c07p-54, -t);
    double e, ra = lz__two_sum(r1, -t, &e);
    double rla = (e - tl) + kd * 0x1.f1976b7ed8fbcp-110;
    /* Payne-Hanek, a >= 2^30: the fraction f + fl times pi/2 in double-double */
    double fl, nb, f = lz__reduce_ph(a, &fl, &nb);
    double rb = f * 0x1.921fb54442d18p0;
    double rlb = __builtin_fma(f, 0x1.921fb54442d18p0, -rb)
               + (f * 0x1.1a62633145c07p-54 + fl * 0x1.921fb54442d18p0);
    int big = a >= 0x1p30;
    double r = lz__sel(big, rb, ra), l = lz__sel(big, rlb, rla);
    *quadrant = big ? (int64_t)nb : na;
    double y = r + l;
    *rl = (r - y) + l;                                /* Fast2Sum: |r| >= |l| */
    return y;
}

/* sin(r + rl) = hi + *lo: r - r^3/6 + r^5 S(r^2) + rl (1 - r^2/2), S the Taylor
 * series to r^19 (truncation below 2^-72 relative on |r| <= 0.786); r^3 and
 * r^3/6 in double-double (they carry the error a plain Horner sum would:
 * 0.3 ULP at r ~ 0.5) */
LZ__ALWAYS_INLINE double lz__sin_dd(double r, double rl, double *lo)
{
    double z = r * r;
    double ze = __builtin_fma(r, r, -z);
    double r3 = z * r;
    double r3e = __builtin_fma(z, r, -r3) + ze * r;
    double s = -1.0 / 121645100408832000.0;
    s = s * z + 1.0 / 355687428096000.0;
    s = s * z - 1.0 / 1307674368000.0;
    s = s * z + 1.0 / 6227020800.0;
    s = s * z - 1.0 / 39916800.0;
    s = s * z + 1.0 / 362880.0;
    s = s * z - 1.0 / 5040.0;
    s = s * z + 1.0 / 120.0;
    const double c6 = -0x1.5555555555555p-3, c6l = -0x1.5555555555555p-57;  /* -1/6 */
    double t = r3 * c6;
    double l = __builtin_fma(r3, c6, -t) + (r3 * c6l + r3e * c6)
             + ((r3 * z) * s + rl * (1.0 - 0.5 * z));
    double y = r + t;
    l += (r - y) + t;                                 /* Fast2Sum: |r| >= |t| */
    double w = y + l;
    *lo = (y - w) + l;
    return w;
}

/* cos(r + rl) = hi + *lo: 1 - r^2/2 with r^2 exact by FMA and 1 - r^2/2 by
 * Fast2Sum, + r^4 C(r^2) (Taylor to r^20, truncation below 2^-77) - r rl */
LZ__ALWAYS_INLINE double lz__cos_dd(double r, double rl, double *lo)
{
    double z = r * r;
    double ze = __builtin_fma(r, r, -z);
    double c = 1.0 / 2432902008176640000.0;
    c = c * z - 1.0 / 6402373705728000.0;
    c = c * z + 1.0 / 20922789888000.0;
    c = c * z - 1.0 / 87178291200.0;
    c = c * z + 1.0 / 479001600.0;
    c = c * z - 1.0 / 3628800.0;
    c = c * z + 1.0 / 40320.0;
    c = c * z - 1.0 / 720.0;
    c = c * z + 1.0 / 24.0;
    double w = 1.0 - 0.5 * z;
    double l = (((1.0 - w) - 0.5 * z) - 0.5 * ze) + ((z * z) * c - r * rl);
    double y = w + l;
    *lo = (w - y) + l;
    return y;
}

/* sin: quadrant q of |x| picks sin r, cos r, -sin r, -cos r; x's sign last
 * (sin is odd: sin(-0) = -0). NaN and ±inf give NaN. */
static inline double lz_sin(double x)
{
    double a = __builtin_fabs(x);
    double rl;
    int64_t q;
    double r = lz__rem_pio2(a, &rl, &q);
    double sl, s = lz__sin_dd(r, rl, &sl), cl, c = lz__cos_dd(r, rl, &cl);
    double y = lz__sel(q & 1, c, s);
    uint64_t neg = ((uint64_t)(q & 2) << 62) ^ (lz__asuint64(x) & 0x8000000000000000ULL);
    y = lz__asdouble(lz__asuint64(y) ^ neg);
    return lz__sel(a < INFINITY, y, x - x);
}

/* cos: quadrant q of |x| picks cos r, -sin r, -cos r, sin r (cos is even) */
static inline double lz_cos(double x)
{
    double a = __builtin_fabs(x);
    double rl;
    int64_t q;
    double r = lz__rem_pio2(a, &rl, &q);
    double sl, s = lz__sin_dd(r, rl, &sl), cl, c = lz__cos_dd(r, rl, &cl);
    double y = lz__sel(q & 1, s, c);
    uint64_t neg = (uint64_t)((q + 1) & 2) << 62;
    y = lz__asdouble(lz__asuint64(y) ^ neg);
    return lz__sel(a < INFINITY, y, x - x);
}

/* tan: sin r / cos r (even q) or -cos r / sin r (odd q), both in double-double,
 * divided by the FMA remainder (one rounding at the end); x's sign last */
static inline double lz_tan(double x)
{
    double a = __builtin_fabs(x);
    double rl;
    int64_t q;
    double r = lz__rem_pio2(a, &rl, &q);
    double sl, s = lz__sin_dd(r, rl, &sl), cl, c = lz__cos_dd(r, rl, &cl);
    int odd = q & 1;
    double nh = lz__sel(odd, c, s), nl = lz__sel(odd, cl, sl);
    double dh = lz__sel(odd, s, c), dl = lz__sel(odd, sl, cl);
    double t = nh / dh;
    double y = t + (__builtin_fma(-t, dh, nh) + (nl - t * dl)) / dh;
    uint64_t neg = ((uint64_t)odd << 63) ^ (lz__asuint64(x) & 0x8000000000000000ULL);
    y = lz__asdouble(lz__asuint64(y) ^ neg);
    return lz__sel(a < INFINITY, y, x - x);
}

#endif /* LAZYRT_MATH_DOUBLE_TRIG_H */
