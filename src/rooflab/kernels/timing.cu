// The stream-holding kernel of CUDA-event timing (the "blocking kernel" of NVIDIA nvbench).
//
// Without it, the start event fires as soon as it is recorded and the interval includes the host's
// time to enqueue the measured call (tens of microseconds through Python), which would dominate
// a small GEMM. So each sample enqueues: hold_stream, start event, the call, stop event; then the
// host sets *release. The GPU runs the call back to back with the start event, and the interval is
// device time only.
//
// The flags live in mapped pinned host memory (readable by the GPU through unified addressing);
// `volatile` makes every poll a fresh read. If the host never releases it (a call that itself
// waits for the device would deadlock here), the kernel gives up after timeout_ns of the GPU's
// global timer and sets *timed_out, which the host checks after the stop event.
//
// Compiled at run time by CuPy (RawModule, NVRTC) and, in the tests, by nvcc for sm_80 and sm_90.

extern "C" __global__ void hold_stream(volatile int* release, volatile int* timed_out,
                                       unsigned long long timeout_ns) {
    unsigned long long start;
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    while (*release == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > timeout_ns) {
            *timed_out = 1;
            return;
        }
    }
}
