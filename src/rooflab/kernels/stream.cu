// Bandwidth kernels of the GPU ceilings: read, copy and triad over fp64 arrays (L2 and HBM), the L1
// read (l1_read); stream_read over a buffer of 2x the L2 is also the cold-cache flush.
//
// Compiled at run time by CuPy (RawModule, NVRTC) and, in the tests, by nvcc for sm_80 and sm_90.
// No #include: NVRTC needs none for this file, so it compiles the same wherever CuPy runs.
//
// - Every access is one 16-byte vector (double2), and consecutive threads touch consecutive
//   vectors, so each warp moves whole 512-byte spans.
// - Two forms of read, copy and triad (the CUDA backend picks one per working set,
//   rooflab.backends.cuda_kernels.one_pass_per_launch):
//   - stream_<kernel>: grid-stride loops over a resident grid (SMs x resident blocks per SM); one
//     call makes `reps` passes over the arrays with no barrier between passes, so the launch cost
//     is paid once per call. Sets the L2 holds: a launch per pass (a few us) would be a large part
//     of a pass there.
//   - stream_<kernel>_one_pass: one vector per thread, a grid over the whole array, one pass per
//     launch (the host launches it once per pass). Sets past the L2: this moves HBM as fast as
//     cudaMemcpy, where the grid-stride loops reach 0.82-0.95 of it
//     (docs/measurements/2026-11-30-h200.md).
// - Loads are ld.global.cg (cache in L2, not L1) and stores st.global.cg: these kernels measure L2
//   and HBM, never the SMs' L1 (l1_read, below, measures that). All are `asm volatile`, so the
//   compiler can neither drop a pass nor merge the identical passes of a call.
// - Bytes follow STREAM's convention per vector: read 16, copy 32, triad 48 (GPU stores of whole
//   sectors need no read for ownership, so this is also the traffic).

#define ROOFLAB_UNROLL 4

__device__ __forceinline__ double2 load_cg(const double2* p) {
    double2 v;
    asm volatile("ld.global.cg.v2.f64 {%0, %1}, [%2];" : "=d"(v.x), "=d"(v.y) : "l"(p));
    return v;
}

__device__ __forceinline__ double2 load_ca(const double2* p) {
    double2 v;
    asm volatile("ld.global.ca.v2.f64 {%0, %1}, [%2];" : "=d"(v.x), "=d"(v.y) : "l"(p));
    return v;
}

__device__ __forceinline__ void store_cg(double2* p, double2 v) {
    asm volatile("st.global.cg.v2.f64 [%0], {%1, %2};" : : "l"(p), "d"(v.x), "d"(v.y) : "memory");
}

// The read kernels store their sum only if it equals `sentinel`, which positive data never sums
// to: the loads stay live and no bytes are added.
__device__ __forceinline__ void keep_live(double total, double sentinel, double* sink) {
    if (total == sentinel) {
        sink[0] = total;
    }
}

// One pass reading a[first], a[first + stride], ... below n into four independent sums (so the
// loads overlap). Load: load_cg (L2, HBM) or load_ca (L1).
template <double2 (*Load)(const double2*)>
__device__ __forceinline__ void read_pass(const double2* a, unsigned long long first,
                                          unsigned long long stride, unsigned long long n,
                                          double& s0, double& s1, double& s2, double& s3) {
    unsigned long long i = first;
    for (; i + 3 * stride < n; i += ROOFLAB_UNROLL * stride) {
        const double2 v0 = Load(a + i);
        const double2 v1 = Load(a + i + stride);
        const double2 v2 = Load(a + i + 2 * stride);
        const double2 v3 = Load(a + i + 3 * stride);
        s0 += v0.x + v0.y;
        s1 += v1.x + v1.y;
        s2 += v2.x + v2.y;
        s3 += v3.x + v3.y;
    }
    for (; i < n; i += stride) {
        const double2 v = Load(a + i);
        s0 += v.x + v.y;
    }
}

extern "C" __global__ void stream_read(const double2* a, unsigned long long n, int reps,
                                       double sentinel, double* sink) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    for (int r = 0; r < reps; ++r) {
        read_pass<load_cg>(a, first, stride, n, s0, s1, s2, s3);
    }
    keep_live((s0 + s1) + (s2 + s3), sentinel, sink);
}

extern "C" __global__ void stream_copy(const double2* a, double2* b, unsigned long long n,
                                       int reps) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (int r = 0; r < reps; ++r) {
        unsigned long long i = first;
        for (; i + 3 * stride < n; i += ROOFLAB_UNROLL * stride) {
            const double2 v0 = load_cg(a + i);
            const double2 v1 = load_cg(a + i + stride);
            const double2 v2 = load_cg(a + i + 2 * stride);
            const double2 v3 = load_cg(a + i + 3 * stride);
            store_cg(b + i, v0);
            store_cg(b + i + stride, v1);
            store_cg(b + i + 2 * stride, v2);
            store_cg(b + i + 3 * stride, v3);
        }
        for (; i < n; i += stride) {
            store_cg(b + i, load_cg(a + i));
        }
    }
}

__device__ __forceinline__ double2 triad_of(double2 b, double2 c, double s) {
    double2 v;
    v.x = fma(s, c.x, b.x);
    v.y = fma(s, c.y, b.y);
    return v;
}

// a = b + s * c, with s changing from pass to pass.
extern "C" __global__ void stream_triad(double2* a, const double2* b, const double2* c,
                                        unsigned long long n, int reps, double scalar) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (int r = 0; r < reps; ++r) {
        const double s = scalar + 1e-9 * r;
        unsigned long long i = first;
        for (; i + 3 * stride < n; i += ROOFLAB_UNROLL * stride) {
            const double2 b0 = load_cg(b + i);
            const double2 c0 = load_cg(c + i);
            const double2 b1 = load_cg(b + i + stride);
            const double2 c1 = load_cg(c + i + stride);
            const double2 b2 = load_cg(b + i + 2 * stride);
            const double2 c2 = load_cg(c + i + 2 * stride);
            const double2 b3 = load_cg(b + i + 3 * stride);
            const double2 c3 = load_cg(c + i + 3 * stride);
            store_cg(a + i, triad_of(b0, c0, s));
            store_cg(a + i + stride, triad_of(b1, c1, s));
            store_cg(a + i + 2 * stride, triad_of(b2, c2, s));
            store_cg(a + i + 3 * stride, triad_of(b3, c3, s));
        }
        for (; i < n; i += stride) {
            store_cg(a + i, triad_of(load_cg(b + i), load_cg(c + i), s));
        }
    }
}

// One pass per launch: thread i moves vector i, and the grid covers all n vectors (the last
// block's threads past n do nothing). The grid must be ceil(n / blockDim.x) blocks.
__device__ __forceinline__ unsigned long long vector_of_thread() {
    return (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
}

extern "C" __global__ void stream_read_one_pass(const double2* a, unsigned long long n,
                                                double sentinel, double* sink) {
    const unsigned long long i = vector_of_thread();
    if (i < n) {
        const double2 v = load_cg(a + i);
        keep_live(v.x + v.y, sentinel, sink);
    }
}

extern "C" __global__ void stream_copy_one_pass(const double2* a, double2* b,
                                                unsigned long long n) {
    const unsigned long long i = vector_of_thread();
    if (i < n) {
        store_cg(b + i, load_cg(a + i));
    }
}

// a = b + s * c; the host passes a different s to each pass's launch.
extern "C" __global__ void stream_triad_one_pass(double2* a, const double2* b, const double2* c,
                                                 unsigned long long n, double scalar) {
    const unsigned long long i = vector_of_thread();
    if (i < n) {
        store_cg(a + i, triad_of(load_cg(b + i), load_cg(c + i), scalar));
    }
}

// The L1 ceiling: block b reads its own region a[b n, (b + 1) n) `reps` times with ld.global.ca
// (cached in L1 as well as L2). An SM's L1 must hold the regions of all the blocks resident on it
// (the backend's working set: n x blocks per SM vectors). While they fit, every pass after the
// first is served by the SM's own L1; past its capacity the loads fall through to the L2 (and,
// once SMs x the set exceeds the L2, to HBM). Regions of their own matter: blocks reading one
// shared buffer in the same order turn one block's misses into the next block's hits, and the
// rate would not fall past the L1. Bytes: 16 per vector per block per pass, the traffic the SMs'
// L1 serves (what l1tex__t_bytes counts).
//
// n is whole warps, not always whole blocks, so some warps may read one vector more per pass than
// the others; each pass starts every thread one warp further round the block, so that extra load
// goes to each warp in turn rather than always to the first ones.
extern "C" __global__ void l1_read(const double2* a, unsigned long long n, int reps,
                                   double sentinel, double* sink) {
    const double2* region = a + (unsigned long long)blockIdx.x * n;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    unsigned int first = threadIdx.x;
    for (int r = 0; r < reps; ++r) {
        read_pass<load_ca>(region, first, blockDim.x, n, s0, s1, s2, s3);
        first += 32;
        if (first >= blockDim.x) {
            first -= blockDim.x;
        }
    }
    keep_live((s0 + s1) + (s2 + s3), sentinel, sink);
}
