/* lazyrt_math.h — scalar math that generated C kernels call inside
 * `#pragma omp simd` loops, with NumPy's numerics and no -ffast-math.
 *
 * Built with `cc -O3 -march=native -fopenmp -std=c11` (lazyrt/backends/c_compiler.py).
 *
 * This header: bit casts, branch-free selects, and NumPy-compatible helpers.
 * lazyrt_math_transcendental.h (included after the selects): the float32
 * exp, log, tanh, erf, sin, cos..., their accuracy table and speed.
 * lazyrt_math_array_api.h: the array API's remaining elementwise functions.
 * lazyrt_math_double.h (included last): the float64 functions.
 *
 * NumPy-compatible helpers: integer floor division and modulo (floor
 * semantics, divisor's sign, x/0 == x%0 == 0 as NumPy returns), float
 * floor-div/modulo exactly as np.floor_divide/np.remainder, NaN-propagating
 * max/min as np.maximum/np.minimum, sign, round-half-to-even, float16 I/O.
 *
 * Everything is C11 (`static inline`, memcpy bit casts) plus GCC's _Float16
 * and always_inline (GCC and Clang).
 */
#ifndef LAZYRT_MATH_H
#define LAZYRT_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* elements above which a kernel runs on the OpenMP team: the C backend passes
 * this host's measured break-even (lazyrt/backends/c_parallel.py) */
#ifndef LZ_PAR_MIN
#define LZ_PAR_MIN 32768
#endif

/* Every function here is forced inline: a call GCC leaves out of line keeps
 * its `#pragma omp simd` loop scalar ("relevant stmt not supported"), and
 * GCC's size heuristics decline lz_erff as soon as a unit calls it twice
 * (GELU forward and backward in one kernel: 0.6 -> 9.4 ns per element). */
#define LZ_INLINE static inline __attribute__((always_inline))

/* ---- bit casts (memcpy: defined behaviour, compiles to nothing) --------- */

LZ_INLINE double lz__asdouble(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }
LZ_INLINE uint64_t lz__asuint64(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }
LZ_INLINE float lz__asfloat(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
LZ_INLINE uint32_t lz__asuint32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* ---- branch-free selects ------------------------------------------------
 * Without -ffast-math GCC assumes FP operations may trap (-ftrapping-math),
 * so it will not if-convert `c ? f(x) : g(x)` once it has sunk f or g into a
 * branch (or folded a constant into one side), and the loop stays scalar
 * ("control flow in loop"). Selecting the bits through a mask keeps both
 * sides unconditional and becomes a vector blend. */

LZ_INLINE double lz__sel(int c, double a, double b)
{
    uint64_t m = 0 - (uint64_t)(c != 0);
    return lz__asdouble((lz__asuint64(a) & m) | (lz__asuint64(b) & ~m));
}
LZ_INLINE float lz__self(int c, float a, float b)
{
    uint32_t m = 0 - (uint32_t)(c != 0);
    return lz__asfloat((lz__asuint32(a) & m) | (lz__asuint32(b) & ~m));
}

/* x with |x| clamped to lim (±inf too); NaN passes through unchanged. */
LZ_INLINE double lz__clamp_mag(double x, double lim)
{
    uint64_t u = lz__asuint64(x), l = lz__asuint64(lim);
    uint64_t a = u & 0x7fffffffffffffffULL;
    uint64_t m = 0 - (uint64_t)((a > l) & (a <= 0x7ff0000000000000ULL));
    return lz__asdouble((((u & 0x8000000000000000ULL) | l) & m) | (u & ~m));
}

LZ_INLINE float lz__clamp_magf(float x, float lim)
{
    uint32_t u = lz__asuint32(x), l = lz__asuint32(lim);
    uint32_t a = u & 0x7fffffffu;
    uint32_t m = 0u - (uint32_t)((a > l) & (a <= 0x7f800000u));
    return lz__asfloat((((u & 0x80000000u) | l) & m) | (u & ~m));
}

/* Explicit FMA where the target has it (-std=c11 never contracts a*b+c). */
#ifdef __FMA__
#define LZ__FMAF(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define LZ__FMAF(a, b, c) ((a) * (b) + (c))
#endif

/* the transcendental functions, on the selects above */
#include "lazyrt_math_transcendental.h"

/* ---- integer floor division and modulo, NumPy semantics -----------------
 * Floor division rounds toward -inf; the remainder takes the divisor's sign;
 * a divisor of 0 gives 0 (NumPy warns and returns 0). MIN // -1 wraps to MIN
 * and MIN % -1 is 0, as NumPy, instead of trapping as C's / and % would. */

#define LZ__INT_DIVMOD(T, S)                                                   \
    static inline T lz_floordiv_##S(T a, T b)                                  \
    {                                                                          \
        if (b == 0) return 0;                                                  \
        if (b == -1) return (T)(0u - (uint64_t)a);                             \
        T q = (T)(a / b);                                                      \
        return (T)(q - ((a % b != 0) & ((a < 0) != (b < 0))));                 \
    }                                                                          \
    static inline T lz_mod_##S(T a, T b)                                       \
    {                                                                          \
        if (b == 0 || b == -1) return 0;                                       \
        T r = (T)(a % b);                                                      \
        return (T)((r != 0 && ((r < 0) != (b < 0))) ? r + b : r);              \
    }

LZ__INT_DIVMOD(int64_t, i64)
LZ__INT_DIVMOD(int32_t, i32)
LZ__INT_DIVMOD(int8_t, i8)
#undef LZ__INT_DIVMOD

LZ_INLINE uint8_t lz_floordiv_u8(uint8_t a, uint8_t b) { return b ? (uint8_t)(a / b) : 0; }
LZ_INLINE uint8_t lz_mod_u8(uint8_t a, uint8_t b) { return b ? (uint8_t)(a % b) : 0; }

/* ---- float floor division and modulo, as NumPy's npy_divmod ------------- */

#define LZ__FLOAT_DIVMOD(T, S, FMOD, FLOOR, COPYSIGN)                          \
    static inline T lz__divmod_##S(T a, T b, T *modulus)                       \
    {                                                                          \
        T mod = FMOD(a, b);                                                    \
        if (b == 0) { *modulus = mod; return a / b; }                          \
        T div = (a - mod) / b;                                                 \
        if (mod != 0) {                                                        \
            if ((b < 0) != (mod < 0)) { mod += b; div -= 1; }                  \
        } else {                                                               \
            mod = COPYSIGN((T)0, b);                                           \
        }                                                                      \
        T floordiv;                                                            \
        if (div != 0) {                                                        \
            floordiv = FLOOR(div);                                             \
            if (div - floordiv > (T)0.5) floordiv += 1;                        \
        } else {                                                               \
            floordiv = COPYSIGN((T)0, a / b);                                  \
        }                                                                      \
        *modulus = mod;                                                        \
        return floordiv;                                                       \
    }                                                                          \
    static inline T lz_floordiv_##S(T a, T b)                                  \
    {                                                                          \
        T mod;                                                                 \
        return b == 0 ? a / b : lz__divmod_##S(a, b, &mod);                    \
    }                                                                          \
    static inline T lz_mod_##S(T a, T b)                                       \
    {                                                                          \
        T mod;                                                                 \
        if (b == 0) return FMOD(a, b);                                         \
        lz__divmod_##S(a, b, &mod);                                            \
        return mod;                                                            \
    }

LZ__FLOAT_DIVMOD(float, f32, fmodf, floorf, copysignf)
LZ__FLOAT_DIVMOD(double, f64, fmod, floor, copysign)
#undef LZ__FLOAT_DIVMOD

/* ---- max/min/sign/round, as NumPy ---------------------------------------
 * np.maximum/np.minimum propagate NaN from either side; on ties (+0 vs -0)
 * they return the second operand. */

LZ_INLINE float lz_maxf(float a, float b) { return (a > b || a != a) ? a : b; }
LZ_INLINE float lz_minf(float a, float b) { return (a < b || a != a) ? a : b; }
/* NumPy's float16 maximum/minimum keep the *first* operand of equal ones (its half
 * loop; float32/64 keep the second, as x86's maxps does): maximum(-0.0, 0.0) is -0.0
 * in float16, +0.0 in float32. */
LZ_INLINE float lz_max16f(float a, float b) { return (a >= b || a != a) ? a : b; }
LZ_INLINE float lz_min16f(float a, float b) { return (a <= b || a != a) ? a : b; }
LZ_INLINE double lz_max(double a, double b) { return (a > b || a != a) ? a : b; }
LZ_INLINE double lz_min(double a, double b) { return (a < b || a != a) ? a : b; }

/* np.sign: -1, 0 or 1; sign(±0) = +0; NaN -> NaN */
LZ_INLINE float lz_signf(float x)
{
    return x > 0 ? 1.0f : (x < 0 ? -1.0f : (x == 0 ? 0.0f : x));
}
LZ_INLINE double lz_sign(double x)
{
    return x > 0 ? 1.0 : (x < 0 ? -1.0 : (x == 0 ? 0.0 : x));
}

/* np.round / np.rint: half to even (the default rounding mode) */
LZ_INLINE float lz_roundf(float x) { return __builtin_rintf(x); }
LZ_INLINE double lz_round(double x) { return __builtin_rint(x); }

/* ---- float16 storage: load to float32, compute, round back on store -----
 * GCC 12 cannot vectorize _Float16 <-> float casts without AVX512-FP16, so the
 * conversions are done on the bits (F. Giesen's branch-free method, made into
 * mask selects); they are exact on load and round half to even on store, like
 * NumPy's astype. NaN stores as a quiet NaN of the same sign. */

LZ_INLINE float lz_f16bits_to_f32(uint16_t bits)
{
    uint32_t h = bits;
    uint32_t em = h & 0x7fffu;
    /* exponent rebias 15 -> 127 by multiplying by 2^112: exact, also for denormals */
    uint32_t o = lz__asuint32(lz__asfloat(em << 13) * 0x1p112f);
    o |= em >= 0x7c00u ? 0x7f800000u : 0u; /* inf / NaN keep all exponent bits */
    return lz__asfloat(o | ((h & 0x8000u) << 16));
}

LZ_INLINE uint16_t lz_f32_to_f16bits(float x)
{
    uint32_t u = lz__asuint32(x);
    uint32_t sign = u & 0x80000000u;
    uint32_t a = u ^ sign;
    /* |x| < 2^-14: the float16 result is denormal or zero; adding 0.5 rounds
     * the 10 mantissa bits into place (round half to even by the FPU) */
    float d = lz__asfloat(a) + 0.5f;
    uint32_t denorm = lz__asuint32(d) - 0x3f000000u;
    /* normal range: rebias the exponent and round half to even by hand */
    uint32_t normal = (a + ((uint32_t)(15 - 127) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
    uint32_t special = a > 0x7f800000u ? 0x7e00u : 0x7c00u; /* NaN, else inf/overflow */
    uint32_t m_den = 0u - (uint32_t)(a < 0x38800000u);  /* mask selects: see lz__sel */
    uint32_t m_spc = 0u - (uint32_t)(a >= 0x47800000u);
    uint32_t o = (denorm & m_den) | (normal & ~m_den);
    o = (special & m_spc) | (o & ~m_spc);
    return (uint16_t)(o | (sign >> 16));
}

LZ_INLINE float lz_f16_to_f32(_Float16 h)
{
    uint16_t bits;
    memcpy(&bits, &h, 2);
    return lz_f16bits_to_f32(bits);
}
LZ_INLINE _Float16 lz_f32_to_f16(float x)
{
    uint16_t bits = lz_f32_to_f16bits(x);
    _Float16 h;
    memcpy(&h, &bits, 2);
    return h;
}
LZ_INLINE float lz_load_f16(const _Float16 *p)
{
    uint16_t bits;
    memcpy(&bits, p, 2);
    return lz_f16bits_to_f32(bits);
}
LZ_INLINE void lz_store_f16(_Float16 *p, float x)
{
    uint16_t bits = lz_f32_to_f16bits(x);
    memcpy(p, &bits, 2);
}

/* ---- bfloat16 storage: the upper 16 bits of a float32 ---------------------
 * Stored as lz_bf16, a struct, so that C cannot convert it by accident (a
 * forgotten conversion fails to compile rather than reading bits as a number);
 * loads are exact, stores round half to even, overflow gives inf and NaN stores
 * as a quiet NaN of the same sign (0x7fc0 | sign), as ml_dtypes' astype does. */

typedef struct { uint16_t bits; } lz_bf16;

LZ_INLINE float lz_bf16_to_f32(lz_bf16 h) { return lz__asfloat((uint32_t)h.bits << 16); }

LZ_INLINE uint16_t lz_f32_to_bf16bits(float x)
{
    uint32_t u = lz__asuint32(x);
    /* round half to even at bit 16: a carry out of the mantissa bumps the exponent
     * (the largest floats round to inf) */
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = ((u >> 16) & 0x8000u) | 0x7fc0u;
    uint32_t m_nan = 0u - (uint32_t)((u & 0x7fffffffu) > 0x7f800000u);
    return (uint16_t)((nan & m_nan) | (rounded & ~m_nan));
}

LZ_INLINE lz_bf16 lz_f32_to_bf16(float x)
{
    lz_bf16 h = {lz_f32_to_bf16bits(x)};
    return h;
}

/* a float rounded to the nearest bfloat16, held in float (one rounding per op) */
LZ_INLINE float lz_bf(float x) { return lz__asfloat((uint32_t)lz_f32_to_bf16bits(x) << 16); }

/* a double rounded once to bfloat16: to float by rounding to odd (toward zero, the
 * last bit set when inexact), whose 24 bits keep what the rounding to bfloat16's 8
 * needs, then to nearest even (through a float rounded to nearest it would round twice) */
LZ_INLINE float lz_bfd(double x)
{
    float f = (float)x;
    uint32_t u = lz__asuint32(f);
    uint32_t away = fabs((double)f) > fabs(x);   /* rounded away from zero: step back */
    uint32_t inexact = (double)f != x;            /* NaN too: it stays NaN */
    return lz_bf(lz__asfloat((u - away) | inexact));
}

/* an integer rounded once to bfloat16: its 24 leading bits, rounded to odd (the
 * bits below them as a sticky bit), scaled exactly, then to nearest even */
LZ_INLINE float lz_bf_i64(int64_t x)
{
    uint64_t m = x < 0 ? 0u - (uint64_t)x : (uint64_t)x;
    int n = (m >> 24) ? 40 - __builtin_clzll(m) : 0;  /* bits past a float's 24 */
    uint64_t kept = (m >> n) | (uint64_t)((m & ((UINT64_C(1) << n) - 1u)) != 0u);
    float f = (float)kept * lz__asfloat((uint32_t)(127 + n) << 23);
    return lz_bf(x < 0 ? -f : f);
}

/* ---- streaming (non-temporal) stores for large outputs -----------------
 * A plain store first reads the cache line it writes (read-for-ownership):
 * writing a 64 MiB result moves 128 MiB. Kernels whose output is larger than
 * the last-level cache compute a tile in L1 and stream it out with
 * non-temporal stores, which skip that read (measured on the 2^24 copy,
 * 1 thread: 12.7 -> 9.8 ms). Smaller outputs are stored normally, so the next
 * kernel finds them in cache. Each thread that streamed calls
 * lz_stream_fence() before the parallel region ends. */

#define LZ_TILE 2048                          /* elements per streamed tile */
#define LZ_STREAM_MIN_BYTES ((int64_t)8 << 20) /* about this machine's L3 */

#if defined(__AVX__) && defined(__GNUC__) && !defined(__clang__)
typedef long long lz__v4di __attribute__((vector_size(32), aligned(1)));
LZ_INLINE void lz_stream_bytes(void *restrict dst, const void *restrict src, size_t n)
{
    char *d = (char *)dst;
    const char *s = (const char *)src;
    size_t head = (32 - ((uintptr_t)d & 31)) & 31; /* movntdq needs 32-byte alignment */
    if (head > n) head = n;
    memcpy(d, s, head);
    d += head, s += head, n -= head;
    for (; n >= 32; n -= 32, d += 32, s += 32) {
        lz__v4di v;
        memcpy(&v, s, 32);
        __builtin_ia32_movntdq256((lz__v4di *)(void *)d, v);
    }
    memcpy(d, s, n);
}
LZ_INLINE void lz_stream_fence(void) { __builtin_ia32_sfence(); }
#else
LZ_INLINE void lz_stream_bytes(void *restrict dst, const void *restrict src, size_t n)
{
    memcpy(dst, src, n);
}
LZ_INLINE void lz_stream_fence(void) {}
#endif

/* the array API's remaining elementwise functions, on the cores above */
#include "lazyrt_math_array_api.h"

/* the float64 functions */
#include "lazyrt_math_double.h"

#endif /* LAZYRT_MATH_H */
