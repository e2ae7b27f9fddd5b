/* lazyrt GEMM driver: BLAS on lazyrt's own OpenMP threads (see lazyrt/backends/c_gemm.py) */
#include <stdint.h>
#include <pthread.h>
#include <omp.h>

typedef void (*lz_sgemm_t)(int, int, int, int64_t, int64_t, int64_t, float,
                           const float *, int64_t, const float *, int64_t, float, float *, int64_t);
typedef void (*lz_dgemm_t)(int, int, int, int64_t, int64_t, int64_t, double,
                           const double *, int64_t, const double *, int64_t, double, double *,
                           int64_t);
typedef int (*lz_get_threads_t)(void);
typedef void (*lz_set_threads_t)(int);

enum { LZ_ROW_MAJOR = 101, LZ_NO_TRANS = 111, LZ_TRANS = 112 };
#define LZ_MAX_BATCH 4

static pthread_mutex_t lz_lock = PTHREAD_MUTEX_INITIALIZER;
static int lz_active = 0, lz_saved = 1;

/* One (possibly row- or column-sliced) product C = A @ B of the batch. */
static void lz_gemm_one(const int64_t *restrict ia, int is_double, const char *A, const char *B,
                        char *C, int64_t lo, int64_t hi, int split_rows)
{
    const int64_t M = ia[4], N = ia[5], K = ia[6], lda = ia[9], ldb = ia[12], ldc = ia[13];
    const int ta = ia[8] ? LZ_TRANS : LZ_NO_TRANS, tb = ia[11] ? LZ_TRANS : LZ_NO_TRANS;
    /* the block's first row of A and C, or first column of B and C */
    const int64_t m = split_rows ? hi - lo : M, nn = split_rows ? N : hi - lo;
    const int64_t astep = split_rows ? lo * (ta == LZ_NO_TRANS ? lda : 1) : 0;
    const int64_t bstep = split_rows ? 0 : lo * (tb == LZ_NO_TRANS ? 1 : ldb);
    const int64_t cstep = split_rows ? lo * ldc : lo;
    if (is_double)
        ((lz_dgemm_t)(uintptr_t)ia[0])(LZ_ROW_MAJOR, ta, tb, m, nn, K, 1.0,
            (const double *)A + astep, lda, (const double *)B + bstep, ldb, 0.0,
            (double *)C + cstep, ldc);
    else
        ((lz_sgemm_t)(uintptr_t)ia[0])(LZ_ROW_MAJOR, ta, tb, m, nn, K, 1.0f,
            (const float *)A + astep, lda, (const float *)B + bstep, ldb, 0.0f,
            (float *)C + cstep, ldc);
}

/* Element offsets of batch item i in A and B (row-major over the batch dims). */
static void lz_batch_offsets(const int64_t *restrict ia, int64_t i, int64_t *ao, int64_t *bo)
{
    const int64_t nb = ia[15];
    int64_t a = 0, b = 0;
    for (int64_t d = nb - 1; d >= 0; --d) {
        const int64_t size = ia[16 + d], idx = i % size;
        i /= size;
        a += idx * ia[16 + LZ_MAX_BATCH + d];
        b += idx * ia[16 + 2 * LZ_MAX_BATCH + d];
    }
    *ao = a;
    *bo = b;
}

/* bufs: A, B, C. ia: gemm, get_threads, set_threads (addresses; 0 and 0 for a
   private single-threaded OpenBLAS), is_double,
   M, N, K, A offset, A transposed, lda, B offset, B transposed, ldb, ldc,
   parallel (0/1), then the batch: its rank nb (0 for one product), its sizes,
   A's and B's strides along it (LZ_MAX_BATCH slots each). C is contiguous
   (batch..., M, N). A batch of at least as many products as threads is split
   over the threads by product; a smaller one runs product by product, each
   split by rows (or columns, when there are more of them). */
void lz_gemm(char *const *restrict bufs, const int64_t *restrict ia, const double *restrict fa)
{
    (void)fa;
    const int is_double = (int)ia[3];
    const int64_t M = ia[4], N = ia[5];
    lz_get_threads_t get_threads = (lz_get_threads_t)(uintptr_t)ia[1];
    lz_set_threads_t set_threads = (lz_set_threads_t)(uintptr_t)ia[2];
    const size_t esize = is_double ? 8 : 4;
    const char *A = bufs[0] + ia[7] * esize, *B = bufs[1] + ia[10] * esize;
    char *C = bufs[2];
    const int split_rows = M >= N;
    int64_t batch = 1;
    for (int64_t d = 0; d < ia[15]; ++d)
        batch *= ia[16 + d];

    /* NumPy's own instance: one BLAS thread while any lz_gemm runs. A private
       single-threaded instance (no get/set address) needs none of this. */
    const int shared = get_threads != 0;
    if (shared) {
        pthread_mutex_lock(&lz_lock);
        if (lz_active++ == 0) {
            lz_saved = get_threads();
            set_threads(1);
        }
        pthread_mutex_unlock(&lz_lock);
    }

    #pragma omp parallel if(ia[14])
    {
        const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
        if (batch >= T) {
            for (int64_t i = batch * t / T; i < batch * (t + 1) / T; ++i) {
                int64_t ao, bo;
                lz_batch_offsets(ia, i, &ao, &bo);
                lz_gemm_one(ia, is_double, A + ao * esize, B + bo * esize,
                            C + i * M * N * esize, 0, split_rows ? M : N, split_rows);
            }
        } else {
            const int64_t n = split_rows ? M : N;
            const int64_t lo = n * t / T, hi = n * (t + 1) / T;
            for (int64_t i = 0; i < batch && hi > lo; ++i) {
                int64_t ao, bo;
                lz_batch_offsets(ia, i, &ao, &bo);
                lz_gemm_one(ia, is_double, A + ao * esize, B + bo * esize,
                            C + i * M * N * esize, lo, hi, split_rows);
            }
        }
    }

    if (shared) {
        pthread_mutex_lock(&lz_lock);
        if (--lz_active == 0)
            set_threads(lz_saved);
        pthread_mutex_unlock(&lz_lock);
    }
}
