"""The GPU identity rooflab records (backends.cuda_identity), built without a GPU: the machine_id
keeps its recipe (stores keep their machines across rooflab versions), and what NVML could not
read says why."""

import hashlib
import json

from rooflab.backends.cuda_identity import gpu_identity, version_text

HOST = {"machine_id": "0123456789abcdef", "hostname": "node1"}
DEVICE = {
    "name": "NVIDIA H200",
    "pci_bus_id": "0000:19:00.0",
    "compute_capability": 90,
    "sm_count": 132,
    "l2_bytes": 62914560,
    "l1_bytes_per_sm_lower_bound": 233472,
    "memory_bytes": 150121086976,
    "max_threads_per_sm": 2048,
}


def _id(gpu_key: str) -> str:
    key = {"host_machine_id": HOST["machine_id"], "gpu": gpu_key}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def test_the_machine_id_is_the_host_and_the_gpus_uuid_or_its_name_and_bus():
    static = {"nvml_uuid": "GPU-1234", "driver_version": "580.65"}
    identity = gpu_identity(HOST, DEVICE, static, None)
    assert identity["machine_id"] == _id("GPU-1234")
    assert identity["gpu"]["compute_capability"] == "9.0"
    assert identity["gpu"]["uuid"] == "GPU-1234" and "nvml_uuid" not in identity["gpu"]
    assert identity["gpu"]["driver_version"] == "580.65"
    assert identity["caches"] == [
        {"level": 2, "type": "Unified", "size_bytes": 62914560, "shared_cpu_count": 0,
         "instances": 1, "usable_instances": 1}
    ]  # fmt: skip
    assert identity["host"] is HOST and "unavailable" not in identity["gpu"]
    other = gpu_identity(HOST, DEVICE, {"nvml_uuid": "GPU-5678"}, None)
    assert other["machine_id"] != identity["machine_id"]


def test_without_nvml_the_identity_says_why_and_falls_back_to_name_and_bus():
    static = {"unavailable": {"power_limit_w": "not supported"}}
    identity = gpu_identity(HOST, DEVICE, static, "nvmlInit failed: driver not loaded")
    assert identity["machine_id"] == _id("NVIDIA H200 at 0000:19:00.0")
    assert identity["gpu"]["unavailable"] == {
        "power_limit_w": "not supported",
        "nvml": "nvmlInit failed: driver not loaded",
    }


def test_cuda_versions_read_as_major_dot_minor():
    assert [version_text(v) for v in (12040, 13000, 12090)] == ["12.4", "13.0", "12.9"]


def test_tensor_core_gemm_paths_from_sm_80_on():
    from rooflab.backends.cublas_args import library_paths

    hopper, volta = library_paths(90), library_paths(70)
    assert tuple(hopper) == ("fp64", "fp32", "tf32", "fp16", "bf16")
    assert tuple(volta) == ("fp64", "fp32", "fp16")
    assert (hopper["fp64"], volta["fp64"]) == ("fp64_tensor", "fp64_cublas")
    assert hopper["fp32"] == volta["fp32"] == "fp32_cublas"
