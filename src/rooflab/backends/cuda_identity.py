"""The identity of a GPU as rooflab records it (runs.machine), from what the CUDA backend read off
the device, NVML and the host: pure, so it is tested without a GPU."""

from __future__ import annotations

import hashlib
import json
from importlib import metadata


def version_text(version: int) -> str:
    """CUDA's integer versions: 12040 -> '12.4'."""
    return f"{version // 1000}.{version % 1000 // 10}"


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def cuda_versions(cp, cublas_version) -> dict:
    """The versions a CUDA run records: Python, numpy, CuPy, the CUDA runtime (linked and
    local), the driver API, NVRTC, cuBLAS (`cublas_version`, of the backend's handle), NVML's
    binding."""
    import platform

    import numpy as np
    from cupy_backends.cuda.libs import nvrtc

    runtime = cp.cuda.runtime
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cupy": cp.__version__,
        "cuda_runtime_linked": version_text(runtime.runtimeGetVersion()),
        "cuda_runtime_local": version_text(cp.cuda.get_local_runtime_version()),
        "cuda_driver_api": version_text(runtime.driverGetVersion()),
        "nvrtc": ".".join(map(str, nvrtc.getVersion())),
        "cublas": cublas_version,
        "nvidia-ml-py": package_version("nvidia-ml-py"),
    }


def gpu_identity(host: dict, device: dict, static: dict, nvml_error: str | None) -> dict:
    """`host`: machine.cpu_identity(); `device`: the device's name, pci_bus_id,
    compute_capability (an int, 90 for 9.0), sm_count, l2_bytes, l1_bytes_per_sm_lower_bound,
    memory_bytes and max_threads_per_sm; `static`: GpuMonitor.static_info(); `nvml_error`: why NVML
    could not be read, or None. The machine_id hashes the host's id and the GPU's UUID (its name
    and PCI bus id where NVML gives no UUID), so the same card in the same host keeps its id."""
    uuid = static.get("nvml_uuid")
    key = {
        "host_machine_id": host["machine_id"],
        "gpu": uuid or f"{device['name']} at {device['pci_bus_id']}",
    }
    machine_id = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    capability = device["compute_capability"]
    gpu = {
        "name": device["name"],
        "uuid": uuid,
        "pci_bus_id": device["pci_bus_id"],
        "compute_capability": f"{capability // 10}.{capability % 10}",
        **{
            field: device[field]
            for field in (
                "sm_count",
                "l2_bytes",
                "l1_bytes_per_sm_lower_bound",
                "memory_bytes",
                "max_threads_per_sm",
            )
        },
        **{k: v for k, v in static.items() if k not in ("nvml_uuid",)},
    }
    if nvml_error is not None:
        gpu["unavailable"] = {**static.get("unavailable", {}), "nvml": nvml_error}
    return {
        "machine_id": machine_id,
        "gpu": gpu,
        # One level-2 unified cache, in the shape of the CPU identity's cache entries, so the
        # Roofline and the report read the GPU's cache the way they read a CPU's.
        "caches": [
            {
                "level": 2,
                "type": "Unified",
                "size_bytes": device["l2_bytes"],
                "shared_cpu_count": 0,
                "instances": 1,
                "usable_instances": 1,
            }
        ],
        "host": host,
    }
