/* lazyrt_math_double_trig.h — float64 sin, cos, tan, atan, atan2, vectorizable
 * and below 1 ULP over the whole double range (accuracy and speed: the table
 * in lazyrt_math_double.h). atan's reduction: above lz__tan_k_pi16.
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

/* 2/pi's bits 1..1216 in 64-bit words, after a zero word (the window of a
 * small E starts before the binary point) */
static const uint64_t lz__two_over_pi_words[20] = {
    0, 0xa2f9836e4e441529ULL, 0xfc2757d1f534ddc0ULL, 0xdb6295993c439041ULL,
    0xfe5163abdebbc561ULL, 0xb7246e3a424dd2e0ULL, 0x06492eea09d1921cULL, 0xfe1deb1cb129a73eULL,
    0xe88235f52ebb4484ULL, 0xe99c7026b45f7e41ULL, 0x3991d639835339f4ULL, 0x9c845f8bbdf9283bULL,
    0x1ff897ffde05980fULL, 0xef2f118b5a0a6d1fULL, 0x6d367ecf27cb09b7ULL, 0x4f463f669e5fea2dULL,
    0x7527bac7ebe5f17bULL, 0x3d0739f78a5292eaULL, 0x6bfb5fb11f8d5d08ULL, 0x56033046fc7b6babULL};

/* the 64 bits of a:b starting s bits into a (0 <= s < 64; no shift by 64) */
LZ_INLINE uint64_t lz__funnel(uint64_t a, uint64_t b, uint64_t s)
{
    return (a << s) | ((b >> 1) >> (63 - s));
}

/* t mod 1 into [-1/2, 1/2] exactly, its integer part added to *q (t < 2^51) */
LZ_INLINE double lz__frac(double t, double *q)
{
    double n = (t + 0x1.8p52) - 0x1.8p52;
    *q += n;
    return t - n;
}

/* Payne-Hanek for finite a >= 2^30 (others: bounded garbage): a 2/pi =
 * q + f + *fl, |f| <= 1/2 + 2^-15, as described at the top */
LZ_INLINE double lz__reduce_ph(double a, double *fl, double *q)
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
LZ_INLINE double lz__rem_pio2(double a, double *rl, int64_t *quadrant)
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
LZ_INLINE double lz__sin_dd(double r, double rl, double *lo)
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
LZ_INLINE double lz__cos_dd(double r, double rl, double *lo)
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
LZ_INLINE double lz_sin(double x)
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
LZ_INLINE double lz_cos(double x)
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
LZ_INLINE double lz_tan(double x)
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

/* ---- atan, atan2 ----------------------------------------------------------
 * atan(t) = k pi/16 + atan(u), u = (t - c_k) / (1 + t c_k), c_k = tan(k pi/16)
 * for the k nearest 16 atan(t)/pi (k = 8: u = -1/t, the same formula with
 * c = inf), so |u| <= tan(pi/32) and the Taylor series to u^19 is below 2^-70;
 * the classic addition-formula reduction (fdlibm's, with finer steps instead
 * of a minimax fit). c_k, the quotient and k pi/16 are double-double: at
 * k = 1 the result is as small as u, and a plain c_k would cost 2 ULPs. */

/* c_k and its low part for k in 0..7, by selects */
LZ_INLINE double lz__tan_k_pi16(int64_t k, double *lo)
{
    double h = 0.0, l = 0.0;
    h = lz__sel(k == 1, 0x1.975f5e0553158p-3, h), l = lz__sel(k == 1, 0x1.ef5d367441946p-61, l);
    h = lz__sel(k == 2, 0x1.a827999fcef32p-2, h), l = lz__sel(k == 2, 0x1.08b2fb1366ea9p-56, l);
    h = lz__sel(k == 3, 0x1.561b82ab7f990p-1, h), l = lz__sel(k == 3, 0x1.7a8c52172b675p-55, l);
    h = lz__sel(k == 4, 1.0, h);
    h = lz__sel(k == 5, 0x1.7f218e25a7461p+0, h), l = lz__sel(k == 5, 0x1.419fa6954928fp-54, l);
    h = lz__sel(k == 6, 0x1.3504f333f9de6p+1, h), l = lz__sel(k == 6, 0x1.21165f626cdd5p-53, l);
    h = lz__sel(k == 7, 0x1.41bfee2424771p+2, h), l = lz__sel(k == 7, 0x1.10706fed37f0ep-55, l);
    *lo = l;
    return h;
}

/* atan(t + tl) = hi + *lo for t >= 0 (inf too), |tl| <= ulp(t) */
LZ_INLINE double lz__atan_dd(double t, double tl, double *lo)
{
    int64_t k = (int64_t)(t > 0.09849140335716425) + (int64_t)(t > 0.3033466836073424)
              + (int64_t)(t > 0.5345111359507917) + (int64_t)(t > 0.8206787908286604)
              + (int64_t)(t > 1.2185035255879764) + (int64_t)(t > 1.8708684117893895)
              + (int64_t)(t > 3.2965582089383205) + (int64_t)(t > 10.15317038760886);
    double cl, c = lz__tan_k_pi16(k, &cl);
    int inv = k == 8;
    double nl, nh = lz__two_sum(t, -c, &nl);          /* t - c, exactly */
    nl = lz__sel(inv, 0.0, nl + (tl - cl));
    nh = lz__sel(inv, -1.0, nh);
    double p = t * c, pe = __builtin_fma(t, c, -p);
    double dl, dh = lz__two_sum(1.0, p, &dl);         /* 1 + t c */
    dl = lz__sel(inv, tl, dl + (pe + t * cl));
    dh = lz__sel(inv, t, dh);
    double uh = nh / dh;
    double ul = (__builtin_fma(-uh, dh, nh) + (nl - uh * dl)) / dh;
    ul = lz__sel(dh < INFINITY, ul, 0.0);
    double z = uh * uh;
    double q = -1.0 / 19.0;
    q = q * z + 1.0 / 17.0;
    q = q * z - 1.0 / 15.0;
    q = q * z + 1.0 / 13.0;
    q = q * z - 1.0 / 11.0;
    q = q * z + 1.0 / 9.0;
    q = q * z - 1.0 / 7.0;
    q = q * z + 1.0 / 5.0;
    q = q * z - 1.0 / 3.0;
    double kd = (double)k;
    double ah = kd * 0x1.921fb54442d18p-3;
    double al = __builtin_fma(kd, 0x1.921fb54442d18p-3, -ah) + kd * 0x1.1a62633145c07p-57;
    double e, s = lz__two_sum(ah, uh, &e);
    double l = e + (al + (ul * (1.0 - z) + (z * uh) * q));
    double y = s + l;
    *lo = (s - y) + l;
    return y;
}

/* atan: odd, on |x| (atan(-0) = -0, NaN passes) */
LZ_INLINE double lz_atan(double x)
{
    double a = __builtin_fabs(x), lo;
    double y = lz__atan_dd(a, 0.0, &lo) + lo;
    y = lz__sel(a < 0x1p-30, a, y);                   /* keeps subnormals exact */
    return lz__asdouble(lz__asuint64(y) | (lz__asuint64(x) & 0x8000000000000000ULL));
}

/* atan2(y, x) = ±atan(|y|/|x|), or ±(pi - atan(|y|/|x|)) when x's sign bit is
 * set: the quotient as t + tl by the FMA remainder; 0/0 -> t = 0 and inf/inf
 * -> t = 1 give Annex F's ±0, ±pi, ±pi/4, ±3pi/4; y's sign last. */
LZ_INLINE double lz_atan2(double y, double x)
{
    double ay = __builtin_fabs(y), ax = __builtin_fabs(x);
    double sc = lz__sel((ay < 0x1p-900) & (ax < 0x1p-900), 0x1p1000, 1.0);  /* exact */
    ay *= sc;
    ax *= sc;
    double t = ay / ax;
    /* the remainder is exact unless it underflows; below ay = 2^-960, t < 2^-60
     * (or both were scaled up) and atan(t) rounds as t does */
    double tl = __builtin_fma(-t, ax, ay) / ax;
    tl = lz__sel((ay > 0x1p-960) & (t < 0x1p1000) & (ax < INFINITY), tl, 0.0);
    t = lz__sel(ay == 0.0, 0.0, lz__sel((ay == INFINITY) & (ax == INFINITY), 1.0, t));
    double lo, hi = lz__atan_dd(t, tl, &lo);
    double e, s = lz__two_sum(0x1.921fb54442d18p+1, -hi, &e);   /* pi - atan */
    double r = lz__sel(lz__asuint64(x) >> 63, s + (e + (0x1.1a62633145c07p-53 - lo)), hi + lo);
    r = lz__asdouble(lz__asuint64(r) | (lz__asuint64(y) & 0x8000000000000000ULL));
    return lz__sel((x == x) & (y == y), r, x + y);    /* NaN even where t was fixed */
}

#endif /* LAZYRT_MATH_DOUBLE_TRIG_H */
