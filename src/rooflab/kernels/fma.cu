// Compute kernels of the GPU ceilings: independent FMA chains in fp64, fp32 and fp16 (half2).
//
// Compiled at run time by CuPy (RawModule, NVRTC) and, in the tests, by nvcc for sm_80 and sm_90.
// No #include: fp16 is done on 32-bit registers holding two halves with the PTX instruction
// fma.rn.f16x2 (sm_53 and later), so no cuda_fp16.h is needed under NVRTC.
//
// Each thread keeps ROOFLAB_CHAINS independent accumulators in registers and, per iteration,
// applies ROOFLAB_REPEAT FMAs to each: acc = acc * x + y. With 0 < x < 1 the chain converges to
// y / (1 - x) = 1, so it stays finite for any iteration count. x and y are kernel arguments, so the
// compiler cannot fold the chains; every accumulator reaches `out`, so none is dead.
//
// FLOP per call = 2 * ROOFLAB_CHAINS * ROOFLAB_REPEAT * iters * threads (x 2 lanes for half2);
// rooflab.backends.cuda_kernels reads these two constants from this file. 512 FMAs per loop iteration
// against its ~6 loop instructions: fp32 and half2 FMAs are limited by the issue rate (one warp
// instruction per clock per scheduler), so every other instruction costs an FMA slot
// (16 repeats: 128 / 134 = 95.5 % of peak at best; 64: 512 / 518 = 98.8 %).

#define ROOFLAB_CHAINS 8
#define ROOFLAB_REPEAT 64

extern "C" __global__ void fma_fp64(long long iters, double x, double y, double* out) {
    double acc[ROOFLAB_CHAINS];
#pragma unroll
    for (int j = 0; j < ROOFLAB_CHAINS; ++j) {
        acc[j] = 1.0 + 1e-3 * j + 1e-9 * threadIdx.x;
    }
    for (long long i = 0; i < iters; ++i) {
#pragma unroll
        for (int k = 0; k < ROOFLAB_REPEAT; ++k) {
#pragma unroll
            for (int j = 0; j < ROOFLAB_CHAINS; ++j) {
                acc[j] = fma(acc[j], x, y);
            }
        }
    }
    double total = 0.0;
#pragma unroll
    for (int j = 0; j < ROOFLAB_CHAINS; ++j) {
        total += acc[j];
    }
    out[(unsigned long long)blockIdx.x * blockDim.x + threadIdx.x] = total;
}

extern "C" __global__ void fma_fp32(long long iters, float x, float y, float* out) {
    float acc[ROOFLAB_CHAINS];
#pragma unroll
    for (int j = 0; j < ROOFLAB_CHAINS; ++j) {
        acc[j] = 1.0f + 1e-3f * j + 1e-7f * threadIdx.x;
    }
    for (long long i = 0; i < iters; ++i) {
#pragma unroll
        for (int k = 0; k < ROOFLAB_REPEAT; ++k) {
#pragma unroll
            for (int j = 0; j < ROOFLAB_CHAINS; ++j) {
                acc[j] = fmaf(acc[j], x, y);
            }
        }
    }
    float total = 0.0f;
#pragma unroll
    for (int j = 0; j < ROOFLAB_CHAINS; ++j) {
        total += acc[j];
    }
    out[(unsigned long long)blockIdx.x * blockDim.x + threadIdx.x] = total;
}

__device__ __forceinline__ unsigned int fma_half2(unsigned int a, unsigned int b, unsigned int c) {
    unsigned int d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// x2, y2 and start2 hold two fp16 values each (low half = first lane), as the host packs them.
extern "C" __global__ void fma_fp16(long long iters, unsigned int x2, unsigned int y2,
                                    unsigned int start2, unsigned int* out) {
    unsigned int acc[ROOFLAB_CHAINS];
#pragma unroll
    for (int j = 0; j < ROOFLAB_CHAINS; ++j) {
        acc[j] = start2 ^ (unsigned int)(j + threadIdx.x % 7);  // distinct, near 1.0
    }
    for (long long i = 0; i < iters; ++i) {
#pragma unroll
        for (int k = 0; k < ROOFLAB_REPEAT; ++k) {
#pragma unroll
            for (int j = 0; j < ROOFLAB_CHAINS; ++j) {
                acc[j] = fma_half2(acc[j], x2, y2);
            }
        }
    }
    unsigned int total = 0;
#pragma unroll
    for (int j = 0; j < ROOFLAB_CHAINS; ++j) {
        total ^= acc[j];
    }
    out[(unsigned long long)blockIdx.x * blockDim.x + threadIdx.x] = total;
}
