"""`rooflab measure workload package.module:function --param n=1,2 --dtype fp32`: your own kernel,
checked and timed per case and cache state, without Snakemake (docs/workloads.md)."""

from __future__ import annotations

import contextlib
import os
import sys

import yaml

from rooflab.cli.output import UsageError, print_rows, stdout_to_stderr
from rooflab.vocabulary import CACHE_STATES


def parse_params(items: list[str]) -> dict[str, list]:
    """`key=v1,v2` items as {key: [v1, v2]}, each value read as YAML (1048576 is an int)."""
    params: dict[str, list] = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise UsageError(f"measure workload: --param {item!r} is not KEY=VALUE[,VALUE...]")
        if key in params:
            raise UsageError(f"measure workload: --param {key} given twice")
        params[key.strip()] = [yaml.safe_load(value) for value in values.split(",")]
    return params


@contextlib.contextmanager
def _kernel_cannot_exit(name: str):
    """A kernel that calls sys.exit() or os._exit() would end the command with its status (0: a
    success with nothing measured); while it runs, both are one error naming the workload."""
    from rooflab.workloads import WorkloadError

    def refuse(status=0):
        raise WorkloadError(f"workload {name}: the kernel called os._exit({status}); nothing kept")

    real_exit, os._exit = os._exit, refuse
    try:
        yield
    except SystemExit as exit_:
        raise WorkloadError(
            f"workload {name}: the kernel called sys.exit({exit_.code!r}); nothing kept"
        ) from None
    finally:
        os._exit = real_exit


def cmd_measure_workload(args) -> None:
    from rooflab.backends.selection import select_backend
    from rooflab.config import load_config, validate_config
    from rooflab.experiments.timing import TimingSettings
    from rooflab.experiments.workload_cases import run_workload
    from rooflab.records import check_writable, write_run

    config = load_config(args.config) if args.config else validate_config({})
    if args.out:
        check_writable(args.out)  # before measuring: a finished run must not be lost
    name = args.name or args.entry.rpartition(":")[2] or "workload"
    spec = {
        "entry": args.entry,
        "params": parse_params(args.param),
        "dtypes": args.dtype or ["fp32"],
        "cache_states": args.cache_state or list(CACHE_STATES),
        "path": config["workloads_path"],
    }
    backend = select_backend(args.backend or config["backend"])
    timing = TimingSettings.from_config(config["timing"], config["disturbance"])
    with stdout_to_stderr(), _kernel_cannot_exit(name):  # nor its prints corrupt the JSON
        tables = run_workload(backend, name, spec, timing)
    if args.out:
        run_dir = write_run(args.out, tables["runs"][0]["run_id"], tables)
        print(f"rooflab: wrote {run_dir}", file=sys.stderr)
    columns = ("config_id", "params", "dtype", "cache_state", "flops", "bytes_model")
    columns += ("executed_flops", "n_samples", "median_s", "achieved_flops_per_s", "disturbed")
    rows = [{c: row.get(c) for c in columns} for row in tables["timed_points"]]
    for row in rows:
        row["bytes"] = row.pop("bytes_model")
        row["intensity"] = row["flops"] / row["bytes"]
    print_rows(rows, args.format)
    for row in tables["correctness"]:
        if not row["passed"]:
            timed = "again after" in row["detail"]  # timed_cases.AFTER_TIMING
            outcome = (
                "after its timing: the timing is kept, never placed on the Roofline"
                if timed
                else "and was not timed"
            )
            print(
                f"rooflab: {row['config_id']} failed its check (error {row['error']:.3g} > "
                f"tolerance {row['tolerance']:.3g}) {outcome}",
                file=sys.stderr,
            )
