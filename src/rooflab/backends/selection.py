"""Choosing a backend: `cuda` where a usable GPU is found (else one error that says what was
looked for and what was found), `cpu`, or `auto` (CUDA when usable, else the CPU, and the run
record says which and why). Apart from the interface (backends/base.py) so that the interface
imports no implementation."""

from __future__ import annotations

import os
import sys

from rooflab.backends.base import Backend, BackendError

# A CUDA device on Linux needs the NVIDIA driver's device nodes (or WSL2's GPU node): where none
# is there, CuPy is not imported to be told so (0.7 s in every job and every `snakemake` start
# on a CPU-only machine with the [gpu] extra installed).
NVIDIA_DRIVER_NODES = ("/dev/nvidiactl", "/proc/driver/nvidia/version", "/dev/dxg")


def cuda_problem() -> str | None:
    """Why the CUDA backend cannot run here: what was looked for, what was found; None if it can."""
    if sys.platform.startswith("linux") and not any(map(os.path.exists, NVIDIA_DRIVER_NODES)):
        return (
            f"looked for the NVIDIA driver ({', '.join(NVIDIA_DRIVER_NODES)}); found: none of them"
        )
    try:
        import cupy
    except ImportError as error:
        return f"looked for CuPy (pip install cupy-cuda13x or cupy-cuda12x); found: {error}"
    try:
        from cupy.cuda import runtime

        count = runtime.getDeviceCount()
    except Exception as error:  # CUDARuntimeError: no driver, driver too old, no device
        return (
            f"looked for a CUDA device through CuPy {cupy.__version__} "
            f"(CUDA runtime {_cuda_version(cupy)}); found: {error}"
        )
    if count < 1:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        return f"looked for a CUDA device; found none{where}"
    try:
        from cupy_backends.cuda.libs import cublas  # noqa: F401 - loads libcublas
    except Exception as error:
        return f"found {count} CUDA device(s) but not cuBLAS, which the GEMMs need: {error}"
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as error:
        return f"found {count} CUDA device(s) but not NVRTC, which compiles the kernels: {error}"
    return None


def _cuda_version(cupy) -> str:
    try:
        version = cupy.cuda.runtime.runtimeGetVersion()
    except Exception:  # pragma: no cover - only on broken installs
        return "unknown"
    return f"{version // 1000}.{version % 1000 // 10}"


def select_backend(name: str) -> Backend:
    """`cuda` needs a usable GPU (else one error saying what was looked for and what was found);
    `auto` is CUDA when a device is usable, else the CPU, and the run record says which and why."""
    if name not in ("auto", "cpu", "cuda"):
        raise BackendError(f"unknown backend {name!r}; choose auto, cpu or cuda")
    problem = None if name == "cpu" else cuda_problem()
    if name == "cuda" and problem is not None:
        raise BackendError(f"backend cuda asked for, but no usable CUDA device: {problem}")
    if name != "cpu" and problem is None:
        from rooflab.backends.cuda import CudaBackend

        backend: Backend = CudaBackend()
    else:
        from rooflab.backends.cpu import CpuBackend

        backend = CpuBackend()
        if name == "auto":
            backend.backend_note = f"auto: no CUDA device ({problem}); fell back to cpu"
            print(f"rooflab: {backend.backend_note}", file=sys.stderr)
    backend.backend_requested = name
    return backend
