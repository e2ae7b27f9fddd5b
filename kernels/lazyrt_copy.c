/* lazyrt concat: each operand copied once into its slice of the output, on the
 * kernels' OpenMP team (see lazyrt/backends/c_copy.py).
 *
 * Operand k is up to three dimensions (n0, n1, n2) after merging, read at
 * offset + i0*a0 + i1*a1 + i2*a2 of its buffer and written at
 * at + i0*d0 + i1*d1 + i2 of the output (elements of `item` bytes). Rows
 * contiguous in the operand (a2 == 1) are copied whole; others (an operand
 * stored transposed, as a product's gradient can be) in TILE x TILE tiles, so
 * both sides reuse each cache line. ia: [operands, item, then per operand
 * offset, at, n0, n1, n2, a0, a1, a2, d0, d1]; bufs: the operands, then the output. */
#include <stdint.h>
#include <string.h>
#include <omp.h>

#ifndef LZ_PAR_MIN
#define LZ_PAR_MIN 32768
#endif

#define LZ_COPY_TILE 32
#define LZ_COPY_WORDS 10

static inline void lz_copy_item(char *dst, const char *src, int64_t item)
{
    switch (item) {  /* constant sizes: a move each, not a call */
    case 1: memcpy(dst, src, 1); break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    default: memcpy(dst, src, (size_t)item);
    }
}

static void lz_copy_operand(char *out, const char *in, const int64_t *o, int64_t item)
{
    const int64_t off = o[0], at = o[1], n0 = o[2], n1 = o[3], n2 = o[4];
    const int64_t a0 = o[5], a1 = o[6], a2 = o[7], d0 = o[8], d1 = o[9];
    const int64_t lz_work = n0 * n1 * n2;
    if (a2 == 1 || n2 == 1) {
        #pragma omp parallel for collapse(2) if(parallel: lz_work > LZ_PAR_MIN) schedule(static)
        for (int64_t i0 = 0; i0 < n0; i0++)
            for (int64_t i1 = 0; i1 < n1; i1++)
                memcpy(out + (at + i0 * d0 + i1 * d1) * item, in + (off + i0 * a0 + i1 * a1) * item,
                       (size_t)(n2 * item));
        return;
    }
    const int64_t t1 = (n1 + LZ_COPY_TILE - 1) / LZ_COPY_TILE;
    const int64_t t2 = (n2 + LZ_COPY_TILE - 1) / LZ_COPY_TILE;
    #pragma omp parallel for collapse(3) if(parallel: lz_work > LZ_PAR_MIN) schedule(static)
    for (int64_t i0 = 0; i0 < n0; i0++)
        for (int64_t b1 = 0; b1 < t1; b1++)
            for (int64_t b2 = 0; b2 < t2; b2++) {
                const int64_t e1 = (b1 + 1) * LZ_COPY_TILE < n1 ? (b1 + 1) * LZ_COPY_TILE : n1;
                const int64_t e2 = (b2 + 1) * LZ_COPY_TILE < n2 ? (b2 + 1) * LZ_COPY_TILE : n2;
                for (int64_t i1 = b1 * LZ_COPY_TILE; i1 < e1; i1++)
                    for (int64_t i2 = b2 * LZ_COPY_TILE; i2 < e2; i2++)
                        lz_copy_item(out + (at + i0 * d0 + i1 * d1 + i2) * item,
                                     in + (off + i0 * a0 + i1 * a1 + i2 * a2) * item, item);
            }
}

void lz_concat(char *const *restrict bufs, const int64_t *restrict ia, const double *restrict fa)
{
    (void)fa;
    const int64_t n = ia[0], item = ia[1];
    for (int64_t k = 0; k < n; k++)
        lz_copy_operand(bufs[n], bufs[k], ia + 2 + LZ_COPY_WORDS * k, item);
}
