"""The host link: bytes between host memory and the GPU (PCIe, or NVLink-C2C on a Grace Hopper),
host to device (h2d) and device to host (d2h), measured the way NVIDIA's nvbandwidth measures it.

- rooflab's own measurement is an SM copy (nvbandwidth's `host_to_device_memcpy_sm`,
  `device_to_host_memcpy_sm`): the `stream_copy` kernel of kernels/stream.cu copies between a
  device buffer and pinned host memory mapped into the device's address space
  (cudaHostAlloc(cudaHostAllocMapped); the device's address from cudaPointerGetAttributes).
- Its peer in the same run is `cudaMemcpyAsync` on the same two buffers: the copy engines
  (nvbandwidth's `*_memcpy_ce`). The `host` ceiling of a direction is the faster of the two.
- Pageable host memory (plain numpy memory, not page-locked) is copied with cudaMemcpyAsync only
  (the driver stages it through pinned buffers of its own); it is recorded, labelled `pageable`,
  and never sets the ceiling.

Byte ledger: each copy moves the buffer across the host link once, and that is what is counted
(the named boundary is the host link; the SM copy's reads or writes of HBM are not counted).
Sizes: nvbandwidth copies a 512 MiB buffer (`--bufferSize`, default 512 MiB since its first
release), so rooflab does too; a buffer under 2x the device's caches is refused, since an SM copy's
repeated passes could then be served from the L2 instead of the link.

The pure parts (directions, methods, memory kinds, names, the ledger, the plan, the refusals) need
no CuPy. `host_link_loads` builds the loads from a CuPy module, stream, copy kernel and device given
to it (CudaBackend.host_link_loads) and checks each copy once before anything is timed.
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rooflab.backends.base import BackendError, CeilingLoad
from rooflab.backends.cuda_kernels import BLOCK, VECTOR_BYTES, check_reps
from rooflab.vocabulary import HOST_LEVEL

DIRECTIONS = {"h2d": "host to device", "d2h": "device to host"}
METHODS = {
    "sm": "SM copy kernel (stream_copy)",
    "memcpy": "cudaMemcpyAsync (copy engine)",
}
MEMORY_KINDS = {
    "pinned": "pinned host memory (cudaHostAlloc, mapped)",
    "pageable": "pageable host memory (not page-locked; the driver stages it)",
}
SKIP_HINT = "set ceilings.host_link_buffer: null to leave the host link out"


class HostLinkUnavailable(BackendError):
    """The device cannot take part in a copy the host link's plan asks for."""


@dataclass(frozen=True)
class HostLinkCase:
    """One measurement of the host link: a direction, a method and a kind of host memory."""

    direction: str  # h2d, d2h
    method: str  # sm, memcpy
    memory: str  # pinned, pageable

    def __post_init__(self) -> None:
        for value, known in (
            (self.direction, DIRECTIONS),
            (self.method, METHODS),
            (self.memory, MEMORY_KINDS),
        ):
            if value not in known:
                raise ValueError(f"unknown host-link {value!r}; known: {', '.join(known)}")
        if self.method == "sm" and self.memory == "pageable":
            raise ValueError("an SM copy needs host memory mapped into the device: pinned only")

    @property
    def kernel(self) -> str:
        """Its name in the `kernel` columns: h2d_sm_pinned, d2h_memcpy_pageable, ..."""
        return f"{self.direction}_{self.method}_{self.memory}"

    @property
    def config_id(self) -> str:
        """Its samples', conditions' and rows' config_id."""
        return f"{HOST_LEVEL}/{self.kernel}"

    @property
    def sets_ceiling(self) -> bool:
        """Only pinned memory sets the `host` ceiling; pageable is recorded beside it."""
        return self.memory == "pinned"

    def describe(self) -> str:
        return f"{METHODS[self.method]}, {DIRECTIONS[self.direction]}, {MEMORY_KINDS[self.memory]}"


# What is measured, in order: per direction the SM copy and its cudaMemcpyAsync peer back to back
# (they see the same conditions), then pageable memory.
PLAN: tuple[HostLinkCase, ...] = tuple(
    HostLinkCase(direction, method, memory)
    for direction in DIRECTIONS
    for method, memory in (("sm", "pinned"), ("memcpy", "pinned"), ("memcpy", "pageable"))
)


def copy_bytes(buffer_bytes: int) -> int:
    """Bytes one copy moves across the host link: the buffer in whole 16-byte vectors (what the
    SM copy's double2 accesses cover), counted once."""
    vectors = int(buffer_bytes) // VECTOR_BYTES
    if vectors < 1:
        raise BackendError(
            f"a host-link buffer holds at least {VECTOR_BYTES} B, got {buffer_bytes}"
        )
    return vectors * VECTOR_BYTES


def check_buffer(buffer_bytes: int, cache_bytes: int, where: str = "ceilings") -> None:
    """Refuse a buffer under 2x the device's caches: repeated copies could then be served from
    its L2 instead of the link."""
    if buffer_bytes < 2 * cache_bytes:
        raise BackendError(
            f"{where}.host_link_buffer: {buffer_bytes} B is less than 2x the device's caches "
            f"({cache_bytes} B): copies could come from the L2, not the host link"
        )


def check_can_map(attributes: Mapping[str, int], device: str = "the device") -> None:
    """Refuse, with what was found, a device that cannot address pinned host memory (the SM
    copy's `CanMapHostMemory` and `UnifiedAddressing` of cudaDeviceGetAttribute)."""
    needed = ("CanMapHostMemory", "UnifiedAddressing")
    missing = [name for name in needed if not attributes.get(name)]
    if missing:
        found = ", ".join(f"{name} = {attributes.get(name, 'unreported')}" for name in missing)
        raise HostLinkUnavailable(
            f"the host link's SM copy needs pinned host memory mapped into {device}, which "
            f"cannot map it ({found}); {SKIP_HINT}"
        )


def mapped_pointer(host_ptr: int, device_ptr: int, memory_type: int, host_type: int) -> int:
    """The device's address of pinned host memory (cudaPointerGetAttributes' devicePointer), or a
    refusal saying what was found."""
    if memory_type != host_type or not device_ptr:
        raise HostLinkUnavailable(
            f"pinned host memory at {host_ptr:#x} has no device address (memory type "
            f"{memory_type}, device pointer {device_ptr:#x}); {SKIP_HINT}"
        )
    return device_ptr


@dataclass(frozen=True)
class HostLinkLoad:
    """A host-link case ready to time: `load.run(reps)` makes `reps` copies of the buffer."""

    case: HostLinkCase
    load: CeilingLoad
    # Seconds of one call where the backend's own timer cannot take it: a pageable copy makes the
    # host wait for the device, so it cannot be queued behind a held stream. None: the backend's.
    timer: Callable[[Callable[[], object]], float] | None = None
    timing: str = "the backend's timer"  # how it was timed, in words
    owner: Any = None  # what must live as long as the load: the buffers its copies use


# -- the GPU part: CuPy, its stream and the copy kernel are given, never imported here --


class _Buffers:
    """The buffers every case copies between: one on the device, one pinned and mapped, one
    pageable, each `nbytes`. The pinned buffer is freed when this object is collected."""

    def __init__(self, cp: Any, stream: Any, nbytes: int, device: Any) -> None:
        runtime = cp.cuda.runtime
        check_can_map(device.attributes, f"device {device.id}")
        self.nbytes = nbytes
        try:
            self.pinned_ptr = runtime.hostAlloc(nbytes, runtime.hostAllocMapped)
        except Exception as error:  # cudaErrorMemoryAllocation: say which buffer
            raise BackendError(f"could not pin {nbytes} B of host memory: {error}") from None
        weakref.finalize(self, runtime.freeHost, self.pinned_ptr)
        attributes = runtime.pointerGetAttributes(self.pinned_ptr)
        self.mapped_ptr = mapped_pointer(
            self.pinned_ptr,
            int(attributes.devicePointer),
            int(attributes.type),
            int(runtime.memoryTypeHost),
        )
        words = nbytes // 8
        self.pinned = np.ctypeslib.as_array(
            ctypes.cast(self.pinned_ptr, ctypes.POINTER(ctypes.c_uint64)), shape=(words,)
        )
        self.pageable = np.ones(words, dtype=np.uint64)  # written: its pages exist before timing
        self.pinned.fill(1)
        with stream:
            self.device = cp.ones(words, dtype=cp.uint64)

    def host(self, memory: str) -> np.ndarray:
        return self.pinned if memory == "pinned" else self.pageable

    def host_ptr(self, memory: str) -> int:
        return self.pinned_ptr if memory == "pinned" else int(self.pageable.ctypes.data)


def _event_timer(cp: Any, stream: Any) -> Callable[[Callable[[], object]], float]:
    """CUDA events around the call on `stream`, without holding it (the host waits inside a
    pageable copy), the host waiting on the stop event."""
    start, stop = cp.cuda.Event(), cp.cuda.Event()

    def timer(call: Callable[[], object]) -> float:
        start.record(stream)
        call()
        stop.record(stream)
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop) * 1e-3

    return timer


def _load(cp: Any, stream: Any, buffers: _Buffers, case: HostLinkCase, copy_kernel, grid: int):
    runtime = cp.cuda.runtime
    nbytes, device = buffers.nbytes, buffers.device
    if case.method == "sm":
        host = np.uint64(buffers.mapped_ptr)
        source, target = (host, device) if case.direction == "h2d" else (device, host)
        n = np.uint64(nbytes // VECTOR_BYTES)

        def run(reps: int) -> None:
            check_reps(reps)
            with stream:
                copy_kernel((grid,), (BLOCK,), (source, target, n, np.int32(reps)))

        return CeilingLoad(run=run, amount_per_unit=nbytes, unit="B", threads=grid * BLOCK)
    host_ptr = buffers.host_ptr(case.memory)
    if case.direction == "h2d":
        dst, src, kind = device.data.ptr, host_ptr, runtime.memcpyHostToDevice
    else:
        dst, src, kind = host_ptr, device.data.ptr, runtime.memcpyDeviceToHost

    def run(reps: int) -> None:
        check_reps(reps)
        for _ in range(reps):
            runtime.memcpyAsync(dst, src, nbytes, kind, stream.ptr)

    return CeilingLoad(run=run, amount_per_unit=nbytes, unit="B")


def check_copy(cp: Any, stream: Any, buffers: _Buffers, link: HostLinkLoad, mark: int) -> None:
    """Correct before timed: the source filled with `mark`, the target with something else, one
    copy, and every word of the target must hold `mark` (an unwritten part keeps the other)."""
    host = buffers.host(link.case.memory)
    source_is_host = link.case.direction == "h2d"
    with stream:
        if source_is_host:
            host.fill(mark)
            buffers.device.fill(0)
        else:
            buffers.device.fill(mark)
        stream.synchronize()
        if not source_is_host:
            host.fill(0)
        link.load.run(1)
        stream.synchronize()
        target = buffers.device if source_is_host else host
        copied = bool((target == mark).all())
    if not copied:
        raise BackendError(
            f"host link {link.case.kernel}: one copy of {buffers.nbytes} B left words of the "
            f"target without the source's value {mark:#x}: the copy is not measured"
        )


def host_link_loads(
    cp: Any, stream: Any, buffer_bytes: int, copy_kernel: Any, grid: int, device: Any
) -> list[HostLinkLoad]:
    """The loads of PLAN on `stream` (a CuPy stream), each copy checked once: `copy_kernel` is the
    compiled `stream_copy` (double2 *a, double2 *b, n, reps) launched with `grid` blocks of
    BLOCK threads, `device` the CuPy device (its attributes say whether it can map host memory).
    Every case copies between the same three buffers of copy_bytes(buffer_bytes)."""
    buffers = _Buffers(cp, stream, copy_bytes(buffer_bytes), device)
    unheld = _event_timer(cp, stream)
    loads = []
    for index, case in enumerate(PLAN):
        pageable = case.memory == "pageable"
        link = HostLinkLoad(
            case,
            _load(cp, stream, buffers, case, copy_kernel, grid),
            timer=unheld if pageable else None,
            timing=(
                "CUDA events on the measuring stream, not held (the host waits for a pageable copy)"
                if pageable
                else "the backend's timer, as every other ceiling (runs.machine timing_method)"
            ),
            owner=buffers,
        )
        check_copy(cp, stream, buffers, link, 0x5EED_0000_0000_0000 + index + 1)
        loads.append(link)
    return loads
