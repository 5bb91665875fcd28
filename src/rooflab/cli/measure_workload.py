"""`rooflab measure workload package.module:function --param n=1,2 --dtype fp32`: your own kernel,
checked and timed per case and cache state, without Snakemake (docs/workloads.md)."""

from __future__ import annotations

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
    }
    backend = select_backend(args.backend or config["backend"])
    timing = TimingSettings.from_config(config["timing"], config["disturbance"])
    with stdout_to_stderr():  # the kernel's own prints cannot corrupt --format json
        tables = run_workload(backend, name, spec, timing)
    if args.out:
        run_dir = write_run(args.out, tables["runs"][0]["run_id"], tables)
        print(f"rooflab: wrote {run_dir}", file=sys.stderr)
    columns = ("config_id", "params", "dtype", "cache_state", "flops", "bytes_model")
    columns += ("executed_flops", "n_samples", "median_s", "achieved_flops_per_s", "disturbed")
    rows = [{c: row.get(c) for c in columns} for row in tables["workload_points"]]
    for row in rows:
        row["bytes"] = row.pop("bytes_model")
        row["intensity"] = row["flops"] / row["bytes"]
    print_rows(rows, args.format)
    for row in tables["correctness"]:
        if not row["passed"]:
            timed = "again after" in row["detail"]  # workload_cases.AFTER_TIMING
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
