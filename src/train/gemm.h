/* gemm.h - single-precision matrix products with one fixed summation order.
 *
 *   C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C
 *
 * where op(X) is X or its transpose, every matrix row-major with its own
 * leading dimension. The promise that makes this more than another sgemm:
 * every output element is computed as
 *
 *   acc = 0;  for k = 0 .. K-1:  acc = fmaf(a(i, k), b(k, j), acc);
 *   c = fmaf(alpha, acc, beta * c)          (C is not read when beta == 0)
 *
 * exactly, whatever path computes it: the plain loops of gemm_ref, or the
 * AVX-512 tiles of gemm, which keep one accumulator per element and walk k
 * in order. So the result is the same bits on every CPU that runs either
 * path, whatever the tiling, and the two paths agree with each other
 * (tests/test_gemm.c checks it). OpenBLAS makes no such promise: it picks
 * its kernels by CPU, and they add the products in other orders. The
 * trainer uses these products so that a training run gives the same file
 * on every machine (notes/training.md, "Determinism").
 *
 * Single-threaded: callers that want threads give each its own rows and its
 * own scratch. */
#ifndef GEMM_H
#define GEMM_H
#include "kernels/ops.h"
#include <stddef.h>

typedef enum { GEMM_N = 0, GEMM_T = 1 } GemmTrans;

/* Floats of scratch a product with these N and K needs (the packed copy of
 * op(B), and one panel of op(A)). */
size_t gemm_scratch_floats(int N, int K);

/* The product above on the best path this CPU has (ops_isa()); scratch
 * holds gemm_scratch_floats(N, K) floats, 64-byte aligned. M, N or K of 0 is
 * allowed (K == 0 gives alpha * 0 + beta * C). */
void gemm(GemmTrans ta, GemmTrans tb, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc, float *scratch);

/* The same on a chosen path (OPS_PLAIN and OPS_GENERIC take the plain loops). */
void gemm_isa(GemmTrans ta, GemmTrans tb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc, float *scratch, OpsIsa isa);

/* The plain loops: the definition, written to be read. */
void gemm_ref(GemmTrans ta, GemmTrans tb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);

#endif
