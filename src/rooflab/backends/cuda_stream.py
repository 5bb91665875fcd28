"""The CUDA backend's bandwidth loads (kernels/stream.cu): read, copy and triad in the form their
working set calls for, and the L1 read with a region per block.

A part of CudaBackend, kept in a module of its own: CudaBackend.__init__ sets what these methods
use (`_cp`, `_kernels`, `_stream`, `sm_count`, `l2_bytes`) and defines `_grid`,
`default_threads` and `launch_passes`. Which form and how many vectors are decided by the pure
functions of rooflab.backends.cuda_kernels.
"""

from __future__ import annotations

import numpy as np

from rooflab.backends.base import BackendError, CeilingLoad
from rooflab.backends.cuda_kernels import (
    BLOCK,
    READ_SENTINEL,
    STREAM_ARRAYS,
    STREAM_INIT,
    check_reps,
    l1_plan,
    one_pass_blocks,
    one_pass_per_launch,
    one_pass_vectors,
    stream_function,
    stream_pass_bytes,
    stream_vectors,
)

TRIAD_SCALAR = 3.0  # s of a = b + s * c; each pass adds 1e-9 x its index, in both forms
SMALL_SET_BYTES = 64 * 1024  # the sets the warm-up runs every kernel on


class StreamLoads:
    """The `stream_workload` and `local_cache_workload` of CudaBackend."""

    def stream_workload(
        self, kernel: str, working_set_bytes: int, threads: int, isa: str | None = None
    ) -> CeilingLoad:
        if isa is not None:
            raise BackendError(f"backend cuda has one stream path, not {isa!r}")
        if kernel not in STREAM_ARRAYS:
            raise BackendError(
                f"unknown stream kernel {kernel!r}; known: {', '.join(STREAM_ARRAYS)}"
            )
        # Decided on the set the one-pass form would record, so that the recorded working set
        # alone says which form ran (runs.machine, stream_kernel_forms).
        one_pass_set = stream_pass_bytes(kernel, one_pass_vectors(kernel, working_set_bytes))
        if one_pass_per_launch(one_pass_set, self.l2_bytes, threads, self.default_threads()):
            return self._one_pass_load(kernel, working_set_bytes)
        return self._resident_load(kernel, working_set_bytes, threads)

    def _stream_arrays(self, kernel: str, vectors: int) -> tuple[list, object]:
        """The kernel's fp64 arrays of `vectors` 16-byte vectors each (positive, each array its
        own value) and the read's sink."""
        cp = self._cp
        with self._stream:
            arrays = [
                cp.full(2 * vectors, STREAM_INIT + 1e-3 * j, dtype=cp.float64)
                for j in range(STREAM_ARRAYS[kernel])
            ]
            sink = cp.zeros(1, dtype=cp.float64)
        return arrays, sink

    def _resident_load(self, kernel: str, working_set_bytes: int, threads: int) -> CeilingLoad:
        """stream_<kernel>: a resident grid of the threads asked for, `reps` passes per launch."""
        function = self._kernels[stream_function(kernel, one_pass=False)]
        grid = self._grid(function, threads)
        n = stream_vectors(kernel, working_set_bytes, grid * BLOCK)
        arrays, sink = self._stream_arrays(kernel, n)

        def run(reps: int) -> None:
            check_reps(reps)
            if kernel == "read":
                args = (arrays[0], np.uint64(n), np.int32(reps), np.float64(READ_SENTINEL), sink)
            elif kernel == "copy":
                args = (arrays[0], arrays[1], np.uint64(n), np.int32(reps))
            else:
                args = (*arrays, np.uint64(n), np.int32(reps), np.float64(TRIAD_SCALAR))
            with self._stream:
                function((grid,), (BLOCK,), args)

        return CeilingLoad(
            run=run, amount_per_unit=stream_pass_bytes(kernel, n), unit="B", threads=grid * BLOCK
        )

    def _one_pass_load(self, kernel: str, working_set_bytes: int) -> CeilingLoad:
        """stream_<kernel>_one_pass: a thread per vector, `reps` launches back to back."""
        function = self._kernels[stream_function(kernel, one_pass=True)]
        n = one_pass_vectors(kernel, working_set_bytes)
        blocks = one_pass_blocks(n)
        arrays, sink = self._stream_arrays(kernel, n)

        def launch(index: int) -> None:
            if kernel == "read":
                args = (arrays[0], np.uint64(n), np.float64(READ_SENTINEL), sink)
            elif kernel == "copy":
                args = (arrays[0], arrays[1], np.uint64(n))
            else:
                args = (*arrays, np.uint64(n), np.float64(TRIAD_SCALAR + 1e-9 * index))
            function((blocks,), (BLOCK,), args)

        def run(reps: int) -> None:
            check_reps(reps)
            self.launch_passes(launch, reps)

        return CeilingLoad(
            run=run, amount_per_unit=stream_pass_bytes(kernel, n), unit="B", threads=blocks * BLOCK
        )

    def local_cache_workload(self, working_set_bytes: int, threads: int) -> CeilingLoad:
        """l1_read: each block reads a region of its own; `working_set_bytes` is what one SM's L1
        must hold (the regions of the blocks it holds), the amount what all SMs' L1 serve."""
        cp = self._cp
        function = self._kernels["l1_read"]
        grid = self._grid(function, threads)
        plan = l1_plan(working_set_bytes, grid, self.sm_count)
        n = plan.region_vectors
        with self._stream:
            array = cp.full(2 * n * grid, STREAM_INIT, dtype=cp.float64)
            sink = cp.zeros(1, dtype=cp.float64)

        def run(reps: int) -> None:
            check_reps(reps)
            args = (array, np.uint64(n), np.int32(reps), np.float64(READ_SENTINEL), sink)
            with self._stream:
                function((grid,), (BLOCK,), args)

        return CeilingLoad(
            run=run,
            amount_per_unit=plan.bytes_per_pass,
            unit="B",
            threads=grid * BLOCK,
            working_set_bytes=plan.working_set_bytes,
        )

    def warm_stream_kernels(self) -> None:
        """Run every kernel of stream.cu once, on small sets: each is loaded now (lazy module
        loading would otherwise load one inside a held stream, which then times out)."""
        for kernel in STREAM_ARRAYS:
            self._resident_load(kernel, SMALL_SET_BYTES, BLOCK).run(1)
            self._one_pass_load(kernel, SMALL_SET_BYTES).run(1)
        self.local_cache_workload(SMALL_SET_BYTES, BLOCK).run(1)
