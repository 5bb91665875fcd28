"""Before a campaign measures anything: everything it will ask of a machine, checked. Every sweep's
configurations fit in memory in dtypes the backend has, and the ceilings' kernels, dtypes, sweep
and library GEMMs are possible and fit. A refusal is one line naming the config key; nothing is
allocated or measured, so a campaign never spends minutes measuring a machine it must then stop
on. Each measuring job checks its own part again when it starts, on the machine it runs on.
"""

from __future__ import annotations

from collections.abc import Mapping

from rooflab.backends.base import Backend, BackendError
from rooflab.config import ConfigError
from rooflab.experiments.ceiling_plan import (
    CeilingSettings,
    check_memory,
    check_supported,
    settings_from_config,
)
from rooflab.experiments.gemm_configs import check_fits, sweep_configs


def preflight(backend: Backend, sweeps: Mapping[str, dict], ceilings: CeilingSettings) -> None:
    """Raise BackendError at the first thing `backend` cannot do, naming the config key."""
    check_supported(backend, ceilings)
    check_memory(backend, ceilings)
    for name, sweep in sweeps.items():
        try:
            check_fits(backend, sweep_configs(name, dict(sweep)))
        except BackendError as error:
            raise type(error)(f"sweeps.{name}: {error}") from None


def check_campaign(config: dict, source: str = "config") -> None:
    """The Snakefile's check, on the host Snakemake runs on, of a validated config: when a
    machine of the campaign is this host (no `slurm_extra`) and it measures on the CPU. A GPU's
    memory, and a cluster node's, are checked by each job on its machine before it measures
    (starting CUDA for every `snakemake` call, dry runs too, would cost seconds)."""
    from rooflab.backends.cpu import CpuBackend
    from rooflab.backends.selection import cuda_problem

    here = [name for name, spec in config["machines"].items() if not spec.get("slurm_extra")]
    backend = config["backend"]
    if not here or backend == "cuda" or (backend == "auto" and cuda_problem() is None):
        return
    try:
        preflight(CpuBackend(), config["sweeps"], settings_from_config(config["ceilings"]))
    except BackendError as error:
        raise ConfigError(f"{source}: {error}") from None
