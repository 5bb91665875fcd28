/* C reference for rooflab's CPU ceiling kernels (src/rooflab/backends/cpu_kernels.py).
 *
 *   gcc -O3 -march=native -fopenmp stream_fma.c -o stream_fma
 *   (at a chosen vector width: -DVEC_BYTES=64 -mprefer-vector-width=512 for AVX-512, or
 *   -DVEC_BYTES=32 -mno-avx512f for AVX2; benchmarks/cpu_ceilings_vs_c.py builds both)
 *   OMP_NUM_THREADS=2 ./stream_fma triad WORKING_SET_BYTES REPS    (also: read, copy)
 *   OMP_NUM_THREADS=2 ./stream_fma fma64 ITERS                      (also: fma32)
 *
 * Prints the seconds of one timed call (omp_get_wtime around the parallel region), after one
 * untimed warm-up call; elements per array and the checksum go to stderr. Same structure as the numba kernels: one
 * parallel region per call; thread t owns a contiguous chunk (first-touched by t) and makes REPS
 * passes over it. STREAM byte convention (fp64): read 8, copy 16, triad 24 B/element.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef VEC_BYTES
#define VEC_BYTES 32 /* the vector width the loops are written for: 32 (ymm) or 64 (zmm) */
#endif
#define VD (VEC_BYTES / 8) /* doubles per vector */
#define UNIT 64            /* per-thread chunk is a multiple of 64 doubles (512 B) */
#define BLOCK (4 * VD)     /* copy/triad: 4 vectors per loop trip, as rooflab's kernels; gcc
                              -O3 does not unroll, and the loop overhead costs ~20-40% at L1 */
#define NSUM (8 * VD)      /* read: 8 vector partial sums to hide vaddpd latency */
/* FMA: independent vector chains per thread (latency 4 x 2 pipes = 8 needed), as rooflab's */
#define NCHAIN (VEC_BYTES == 64 ? 16 : 12)

static double *arr[3];
static long m;      /* elements per thread per array (n = m * threads) */

/* The arrays of a kernel in one page-aligned buffer, array k starting 3k KiB past a page boundary
 * (as rooflab's _ARRAY_SKEW) so that a[i], b[i], c[i] never 4K-alias. Each thread first-touches
 * its own chunk. */
static void allocate(int narr, long ws, int threads) {
    long units = (long)((double)ws / (8.0 * narr * threads * UNIT) + 0.5);  /* nearest */
    long n = (units < 1 ? 1 : units) * threads * UNIT;
    m = n / threads;
    long stride = (n * 8 + 4095) / 4096 * 4096 + 3072;
    char *buf = aligned_alloc(4096, (size_t)(narr * stride + 4096) / 4096 * 4096);
    for (int k = 0; k < narr; k++) arr[k] = (double *)(buf + k * stride);
#pragma omp parallel num_threads(threads)
    {
        long lo = omp_get_thread_num() * m;
        for (int k = 0; k < narr; k++)
            for (long i = lo; i < lo + m; i++) arr[k][i] = 1.0 + k + 1e-3 * (i % 1000);
    }
}

/* One call: each thread makes `reps` passes over its chunk. Anti-collapse: triad's scalar
 * changes every pass, and after every pass copy/triad fold one freshly written element into
 * the checksum; read folds every pass's sum. */
static double run_stream(int kind, long reps, int threads) {
    double total = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
        long lo = omp_get_thread_num() * m;
        double *restrict a = arr[0] + lo, *restrict b = arr[1] + lo, *restrict c = arr[2] + lo;
        double chk = 0.0;
        for (long r = 0; r < reps; r++) {
            if (kind == 1) {
                double acc[NSUM] = {0};
                for (long i = 0; i < m; i += NSUM)
                    for (int j = 0; j < NSUM; j++) acc[j] += a[i + j];
                for (int w = NSUM / 2; w > 0; w /= 2)  /* tree: a serial sum costs ~25% at L1 */
                    for (int j = 0; j < w; j++) acc[j] += acc[j + w];
                chk += acc[0];
            } else if (kind == 2) {
                for (long i = 0; i < m; i += BLOCK)
                    for (int j = 0; j < BLOCK; j++) b[i + j] = a[i + j];
                chk += b[r % m];
            } else {
                double s = 3.0 + 1e-9 * r;
                for (long i = 0; i < m; i += BLOCK)
                    for (int j = 0; j < BLOCK; j++) a[i + j] = b[i + j] + s * c[i + j];
                chk += a[r % m];
            }
        }
        total += chk;
    }
    return total;
}

/* NCHAIN*VL independent chains acc = acc*x + y (x < 1, so they converge to y/(1-x) and stay
 * finite); the compiler keeps them in vector registers and emits one vfmadd per vector. */
#define FMA_KERNEL(name, T, VL, X, Y)                                                   \
    static double name(long iters, int threads) {                                       \
        double total = 0.0;                                                             \
        _Pragma("omp parallel num_threads(threads) reduction(+ : total)") {             \
            T acc[NCHAIN * VL], x = X, y = Y;                                           \
            for (int j = 0; j < NCHAIN * VL; j++) acc[j] = (T)(1.0 + 1e-3 * j);          \
            for (long it = 0; it < iters; it++)                                         \
                for (int j = 0; j < NCHAIN * VL; j++) acc[j] = acc[j] * x + y;          \
            for (int j = 0; j < NCHAIN * VL; j++) total += acc[j];                      \
        }                                                                               \
        return total;                                                                   \
    }
FMA_KERNEL(fma64, double, VD, 0.999999, 1e-6)
FMA_KERNEL(fma32, float, 2 * VD, 0.9999f, 1e-4f)

int main(int argc, char **argv) {
    const char *names[] = {"", "read", "copy", "triad"};
    int threads = omp_get_max_threads(), kind = 0;
    for (int k = 1; k <= 3; k++)
        if (argc == 4 && !strcmp(argv[1], names[k])) kind = k;
    int fma = argc == 3 ? (!strcmp(argv[1], "fma64") ? 64 : !strcmp(argv[1], "fma32") ? 32 : 0) : 0;
    if (!kind && !fma) {
        fprintf(stderr, "usage: %s read|copy|triad WORKING_SET_BYTES REPS | fma64|fma32 ITERS\n",
                argv[0]);
        return 2;
    }
    double chk, t0;
    if (kind) {
        long reps = atol(argv[3]);
        allocate(kind, atol(argv[2]), threads);
        run_stream(kind, reps, threads);
        t0 = omp_get_wtime();
        chk = run_stream(kind, reps, threads);
    } else {
        long iters = atol(argv[2]);
        (fma == 64 ? fma64 : fma32)(iters, threads);
        t0 = omp_get_wtime();
        chk = (fma == 64 ? fma64 : fma32)(iters, threads);
    }
    printf("%.9f\n", omp_get_wtime() - t0);
    double flops = fma ? 2.0 * NCHAIN * (fma == 64 ? VD : 2 * VD) * atol(argv[2]) * threads : 0.0;
    fprintf(stderr, "elements %ld flops %.0f checksum %.17g\n", kind ? m * threads : 0L, flops, chk);
    return 0;
}
