"""GEMM sweeps: every configuration checked for correctness, then timed per cache state (one
driver for every timed point: experiments.timed_cases)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from rooflab.backends.base import Backend
from rooflab.experiments.correctness import check_gemm
from rooflab.experiments.gemm_configs import GemmConfig, check_fits, config_ledger, sweep_configs
from rooflab.experiments.runs import measuring_run
from rooflab.experiments.timed_cases import Built, time_cases
from rooflab.experiments.timing import TimingSettings


def run_gemm_sweep(
    backend: Backend,
    name: str,
    sweep: dict,
    timing: TimingSettings | None,
    *,
    passed_config_ids: set[str] | None = None,
    run_id: str | None = None,
) -> dict[str, list[dict]]:
    """Check and time one sweep; return the rows of each table (nothing is written here).

    - `timing` None: check correctness only (a run of kind "correctness");
    - `passed_config_ids` given: the check was done by an earlier run; time only those;
    - otherwise: check every configuration, then time those that passed (kind "gemm").

    Holds the machine lock (experiments.machine_lock) throughout: one measurement at a time."""
    kind = "correctness" if timing is None else "gemm"
    configs = sweep_configs(name, sweep)
    if passed_config_ids is not None:
        configs = [c for c in configs if c.config_id in passed_config_ids]
    # Refused before waiting for the machine, not after another measurement's minutes.
    check_fits(backend, configs)
    timed = ("samples", "timed_points") if timing is not None else ()
    with measuring_run(
        backend, kind, name, what=f"gemm sweep {name}",
        tables=("correctness", *timed), disturbance=timing and timing.disturbance, run_id=run_id,
    ) as run:  # fmt: skip
        cases = [GemmCase(config, sweep["seed"]) for config in configs]
        time_cases(run, cases, sweep["cache_states"], timing, check=passed_config_ids is None)
        return run.close({"sweep": sweep, "timing": timing.record() if timing else None})


@dataclass(frozen=True)
class GemmCase:
    """A sweep's GEMM configuration as a timed case: its operands from the sweep's seed, the
    backend's GEMM (cuBLASLt for FP8 and int8), its ledger and its check (check_gemm)."""

    config: GemmConfig
    seed: int
    kind = "gemm"
    recheck = False

    @property
    def config_id(self) -> str:
        return self.config.config_id

    @property
    def label(self) -> str:
        return self.config.short_id

    @property
    def what(self) -> str:
        return f"gemm configuration {self.config_id}"

    def work_hint(self) -> tuple[float, float]:
        ledger = config_ledger(self.config)
        return float(ledger.flops), float(ledger.bytes)

    def child_spec(self) -> dict:
        """What a profiler's child needs to build the case again (experiments.profiled)."""
        c = self.config
        return {"kind": self.kind, "sweep": c.sweep, "m": c.m, "n": c.n, "k": c.k,
                "dtype": c.dtype, "layout": c.layout, "seed": self.seed}  # fmt: skip

    def build(self, backend: Backend) -> Built:
        c, ledger = self.config, config_ledger(self.config)
        backend.check_dtype(c.dtype)  # one line naming the dtypes it has, not a library error
        operands = backend.gemm_operands(c.m, c.n, c.k, c.dtype, c.layout, self.seed)

        def check(when: str) -> list[dict]:
            backend.poison(operands.y)
            backend.matmul(operands)
            backend.synchronize()
            # Where the operands live (numpy, or CuPy on the device): only samples come back.
            checks, rows, cols = check_gemm(
                operands.x, operands.w, operands.y, c.layout, c.dtype, seed=self.seed,
                xp=backend.array_module, scales=operands.scales,
            )  # fmt: skip
            identity = {"config_id": c.config_id, "sweep": c.sweep, "dtype": c.dtype}
            shape = {"m": c.m, "n": c.n, "k": c.k, "layout": c.layout}
            return [
                {**identity, **shape, **asdict(check), "rows_checked": rows, "cols_checked": cols}
                for check in checks
            ]

        columns = {
            "sweep": c.sweep, "m": c.m, "n": c.n, "k": c.k, "dtype": c.dtype,
            "x_dtype": ledger.x_dtype, "w_dtype": ledger.w_dtype, "y_dtype": ledger.y_dtype,
            "layout": c.layout, "flops": ledger.flops, "bytes_model": ledger.bytes,
        }  # fmt: skip
        return Built(
            lambda: backend.matmul(operands), check, columns,
            (operands.x, operands.w, operands.y), ledger.work_unit,
        )  # fmt: skip
