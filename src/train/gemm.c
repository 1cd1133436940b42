/* gemm.c - matrix products with one fixed summation order (see gemm.h).
 *
 * Why the order can be fixed without giving up speed. A fast sgemm keeps a
 * tile of C in registers and, for each k, adds one product into every
 * element of the tile: element (i, j) receives a(i, 0) b(0, j), then
 * a(i, 1) b(1, j), and so on, one fused multiply-add at a time into its own
 * accumulator. That is already the order of the plain loop. What makes
 * libraries differ from the plain loop, and from each other, is everything
 * else: splitting K into blocks summed separately, several accumulators per
 * element added together at the end, a different tile on another CPU. This
 * file keeps only the part that is the plain loop: one accumulator per
 * element, k from 0 to K-1, no K blocking. Packing (copying op(A) and op(B)
 * into the order the tile reads them) moves numbers and never adds them,
 * and zero padding only fills rows and columns that are never stored.
 *
 * The tile: MR = 12 rows by NR = 32 columns (two 16-float registers per
 * row): 24 accumulators, two registers of B and one broadcast of A, within
 * AVX-512's 32. Each k costs 24 FMAs against 2 loads and 12 broadcasts.
 *
 * Layout of the scratch: op(B) packed in panels of NR columns, panel p
 * holding (K, NR) with k-major rows (so the tile reads 32 contiguous floats
 * per k), then one panel of op(A), (K, MR) k-major.
 *
 * Build note: the Makefile compiles everything with -ffp-contract=off, so
 * the compiler never fuses a multiply and an add on its own; every fused
 * operation here is written as one (fmaf, _mm512_fmadd_ps). */
#include "train/gemm.h"
#include "kernels/rows.h"
#include <math.h>
#include <string.h>

/* The widest tile's rows and columns: the scratch is sized for them. */
enum { MR_MAX = 16, NR_MAX = 64 };

/* Element (r, c) of op(X). */
static inline float elem(const float *X, int ld, GemmTrans t, int r, int c) {
    return t == GEMM_N ? X[(size_t)r * ld + c] : X[(size_t)c * ld + r];
}

size_t gemm_scratch_floats(int N, int K) {
    size_t k = K > 0 ? (size_t)K : 1, n = N > 0 ? ((size_t)N + NR_MAX - 1) / NR_MAX * NR_MAX : NR_MAX;
    return k * n + k * MR_MAX;
}

void gemm_ref(GemmTrans ta, GemmTrans tb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc = fmaf(elem(A, lda, ta, i, k), elem(B, ldb, tb, k, j), acc);
            float *c = C + (size_t)i * ldc + j;
            *c = fmaf(alpha, acc, beta == 0.0f ? 0.0f : beta * *c);
        }
}

#ifdef OPS_X86
#include <immintrin.h>

#define GEMM_FN __attribute__((target("avx512f,fma")))

/* op(B) into panels of NR columns, (K, NR) each, k-major; columns past N are 0. */
static void pack_b(float *Bp, GemmTrans tb, const float *B, int ldb, int K, int N, int NR) {
    int np = (N + NR - 1) / NR;
    for (int p = 0; p < np; p++) {
        float *dst = Bp + (size_t)p * K * NR;
        int j0 = p * NR, n = N - j0 < NR ? N - j0 : NR;
        if (tb == GEMM_N) {       /* row k of B holds b(k, j0 ..) contiguously */
            for (int k = 0; k < K; k++) {
                memcpy(dst + (size_t)k * NR, B + (size_t)k * ldb + j0, (size_t)n * sizeof(float));
                memset(dst + (size_t)k * NR + n, 0, (size_t)(NR - n) * sizeof(float));
            }
        } else {                  /* row j of B holds b(0 .., j) */
            for (int jj = 0; jj < NR; jj++) {
                const float *src = B + (size_t)(j0 + jj) * ldb;
                for (int k = 0; k < K; k++) dst[(size_t)k * NR + jj] = jj < n ? src[k] : 0.0f;
            }
        }
    }
}

/* Rows i0 .. i0+mr-1 of op(A) as (K, MR), k-major; rows past mr are 0. */
static void pack_a(float *Ap, GemmTrans ta, const float *A, int lda, int K, int i0, int mr, int MR) {
    if (ta == GEMM_N) {
        for (int ii = 0; ii < MR; ii++) {
            const float *src = A + (size_t)(i0 + ii) * lda;
            for (int k = 0; k < K; k++) Ap[(size_t)k * MR + ii] = ii < mr ? src[k] : 0.0f;
        }
    } else {
        for (int k = 0; k < K; k++) {
            memcpy(Ap + (size_t)k * MR, A + (size_t)k * lda + i0, (size_t)mr * sizeof(float));
            memset(Ap + (size_t)k * MR + mr, 0, (size_t)(MR - mr) * sizeof(float));
        }
    }
}

/* The whole product with tiles of MR rows by NV registers of 16 columns.
 * Inlined into a function per tile shape, where MR and NV are constants: the
 * loops over them unroll and the accumulators stay in registers. */
#define GEMM_INLINE static inline __attribute__((always_inline)) GEMM_FN
GEMM_INLINE void gemm_tiles(GemmTrans ta, GemmTrans tb, int M, int N, int K, float alpha,
                            const float *A, int lda, const float *B, int ldb, float beta,
                            float *C, int ldc, float *scratch, const int MR, const int NV) {
    const int NR = 16 * NV, np = (N + NR - 1) / NR;
    float *Bp = scratch, *Ap = scratch + (size_t)(K > 0 ? K : 1) * np * NR;
    pack_b(Bp, tb, B, ldb, K, N, NR);
    __m512 valpha = _mm512_set1_ps(alpha), vbeta = _mm512_set1_ps(beta);
    for (int i0 = 0; i0 < M; i0 += MR) {
        int mr = M - i0 < MR ? M - i0 : MR;
        pack_a(Ap, ta, A, lda, K, i0, mr, MR);
        for (int p = 0; p < np; p++) {
            const float *bp = Bp + (size_t)p * K * NR;
            __m512 acc[MR_MAX][4];
#pragma GCC unroll 16
            for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
                for (int h = 0; h < NV; h++) acc[r][h] = _mm512_setzero_ps();
            for (int k = 0; k < K; k++) {   /* k in order: the plain loop's order */
                __m512 b[4];
#pragma GCC unroll 4
                for (int h = 0; h < NV; h++) b[h] = _mm512_loadu_ps(bp + (size_t)k * NR + 16 * h);
                const float *a = Ap + (size_t)k * MR;
#pragma GCC unroll 16
                for (int r = 0; r < MR; r++) {
                    __m512 av = _mm512_set1_ps(a[r]);
#pragma GCC unroll 4
                    for (int h = 0; h < NV; h++) acc[r][h] = _mm512_fmadd_ps(av, b[h], acc[r][h]);
                }
            }
            for (int r = 0; r < mr; r++)
                for (int h = 0; h < NV; h++) {
                    int j = p * NR + 16 * h, n = N - j;
                    if (n <= 0) break;
                    __mmask16 m = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
                    float *c = C + (size_t)(i0 + r) * ldc + j;
                    __m512 old = beta == 0.0f ? _mm512_setzero_ps()
                                              : _mm512_mul_ps(vbeta, _mm512_maskz_loadu_ps(m, c));
                    _mm512_mask_storeu_ps(c, m, _mm512_fmadd_ps(valpha, acc[r][h], old));
                }
        }
    }
}

/* Two tile shapes, each 24 or 28 accumulators: 14 x 32 for narrow products
 * (attention's head-wide ones, N = 32), 6 x 64 for the rest, where it loads
 * four registers of B per six broadcasts. */
GEMM_FN static void gemm_avx512_14x32(GemmTrans ta, GemmTrans tb, int M, int N, int K, float alpha,
                                      const float *A, int lda, const float *B, int ldb, float beta,
                                      float *C, int ldc, float *scratch) {
    gemm_tiles(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, scratch, 14, 2);
}

GEMM_FN static void gemm_avx512_6x64(GemmTrans ta, GemmTrans tb, int M, int N, int K, float alpha,
                                     const float *A, int lda, const float *B, int ldb, float beta,
                                     float *C, int ldc, float *scratch) {
    gemm_tiles(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, scratch, 6, 4);
}
#endif

void gemm_isa(GemmTrans ta, GemmTrans tb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc, float *scratch, OpsIsa isa) {
    if (M <= 0 || N <= 0) return;
    if (isa == OPS_BEST) isa = ops_best_isa();
#ifdef OPS_X86
    if (isa == OPS_AVX512 && ops_best_isa() == OPS_AVX512) {
        if (N <= 32)
            gemm_avx512_14x32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, scratch);
        else
            gemm_avx512_6x64(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, scratch);
        return;
    }
#endif
    (void)scratch;
    gemm_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(GemmTrans ta, GemmTrans tb, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc, float *scratch) {
    gemm_isa(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, scratch, ops_isa());
}
