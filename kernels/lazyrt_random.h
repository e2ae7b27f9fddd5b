/* Counter-based random bits for generated C kernels: Philox4x32-10 (Salmon,
 * Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC11).
 *
 * lazyrt reads one stream of 32-bit words per seed: word p is output (p & 3)
 * of the Philox block with counter (b & 0xffffffff, b >> 32, 0, 0), b = p >> 2,
 * under key (seed & 0xffffffff, seed >> 32); p and seed are taken as uint64.
 * The NumPy reference (lazyrt/ops.py, philox4x32_10), kernels/triton_random.py
 * and kernels/jax_math.py compute the same words, bit for bit.
 *
 * Branch-free (the lane is picked with selects) and made of 32x32->64 bit
 * multiplies, so a loop over elements vectorizes.
 */
#ifndef LAZYRT_RANDOM_H
#define LAZYRT_RANDOM_H

#include <stdint.h>

/* one round, then the key bump (the bump after the last round is never read);
 * written out ten times, not looped: a loop left rolled keeps the element loop
 * around it from vectorizing */
#define LZ_PHILOX_ROUND                                                          \
    do {                                                                         \
        const uint64_t p0 = (uint64_t)0xD2511F53u * c0;                          \
        const uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;                          \
        const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;                      \
        const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;                      \
        c1 = (uint32_t)p1;                                                       \
        c3 = (uint32_t)p0;                                                       \
        c0 = n0;                                                                 \
        c2 = n2;                                                                 \
        k0 += 0x9E3779B9u;                                                       \
        k1 += 0xBB67AE85u;                                                       \
    } while (0)

static inline int64_t lz_philox_word(int64_t seed, int64_t position) {
    const uint64_t p = (uint64_t)position, s = (uint64_t)seed, b = p >> 2;
    uint32_t c0 = (uint32_t)b, c1 = (uint32_t)(b >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)s, k1 = (uint32_t)(s >> 32);
    LZ_PHILOX_ROUND; LZ_PHILOX_ROUND; LZ_PHILOX_ROUND; LZ_PHILOX_ROUND; LZ_PHILOX_ROUND;
    LZ_PHILOX_ROUND; LZ_PHILOX_ROUND; LZ_PHILOX_ROUND; LZ_PHILOX_ROUND; LZ_PHILOX_ROUND;
    const uint32_t lane = (uint32_t)(p & 3);
    const uint32_t lo = lane & 1 ? c1 : c0, hi = lane & 1 ? c3 : c2;
    return (int64_t)(lane & 2 ? hi : lo);
}

#undef LZ_PHILOX_ROUND

#endif
