"""A GEMM sweep's configurations, their ledgers and whether they fit: what the Snakefile's
pre-flight check needs, without the timing machinery (experiments.gemm) and its imports."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from rooflab.backends.base import Backend, BackendError
from rooflab.backends.cublaslt_args import LT_ONLY_DTYPES, lt_gemm_ledger
from rooflab.experiments.correctness import MAX_CHECKED_COLS, MAX_CHECKED_ROWS
from rooflab.model import GemmLedger, gemm_ledger
from rooflab.units import format_quantity

# Headroom left for the interpreter, BLAS workspace and the rest of the machine.
MEMORY_HEADROOM = 0.8


class GemmTooLarge(BackendError):
    """A configuration whose operands would not fit in memory."""


@dataclass(frozen=True)
class GemmConfig:
    sweep: str
    m: int
    n: int
    k: int
    dtype: str
    layout: str

    @property
    def config_id(self) -> str:
        return f"{self.sweep}/{self.short_id}"

    @property
    def short_id(self) -> str:
        """The configuration within its sweep: `fp32/nn/m64_n1024_k1024` (progress lines)."""
        return f"{self.dtype}/{self.layout}/m{self.m}_n{self.n}_k{self.k}"


def sweep_configs(name: str, sweep: dict) -> list[GemmConfig]:
    """The sweep's cross product in a stable order: dtype, layout, n, k, then M ascending."""
    return [
        GemmConfig(name, m, n, k, dtype, layout)
        for dtype, layout, n, k, m in itertools.product(
            sweep["dtypes"], sweep["layouts"], sweep["n"], sweep["k"], sorted(sweep["m"])
        )
    ]


def config_ledger(config: GemmConfig) -> GemmLedger:
    """The configuration's work and model bytes. FP8 and int8 run through cuBLASLt
    (cublaslt_args.lt_gemm_ledger): X and W one byte an element, Y bf16 (FP8) or int32 (int8),
    plus FP8's two float32 per-tensor scales; an int8 GEMM's work is in OP (`work_unit`)."""
    ledger = lt_gemm_ledger if config.dtype in LT_ONLY_DTYPES else gemm_ledger
    return ledger(config.m, config.n, config.k, config.dtype)


def bytes_needed(config: GemmConfig) -> int:
    """Operands in their dtype, plus the float64 copies the correctness check makes: the sampled
    rows of X and columns of W, and three rows x columns arrays (reference, scale, result)."""
    m, n, k = config.m, config.n, config.k
    ledger = config_ledger(config)
    operands = ledger.bytes_x + ledger.bytes_w + ledger.bytes_y_write
    rows, cols = min(m, MAX_CHECKED_ROWS), min(n, MAX_CHECKED_COLS)
    return operands + 8 * (rows * k + k * cols + 3 * rows * cols)


def check_fits(backend: Backend, configs: list[GemmConfig]) -> None:
    available = int(backend.memory_available_bytes() * MEMORY_HEADROOM)
    for config in configs:
        backend.check_dtype(config.dtype)
        needed = bytes_needed(config)
        if needed > available:
            raise GemmTooLarge(
                f"{config.config_id}: m={config.m} n={config.n} k={config.k} {config.dtype} needs "
                f"{format_quantity(needed, 'bytes')} but only "
                f"{format_quantity(available, 'bytes')} is available to it ({backend.name})"
            )
