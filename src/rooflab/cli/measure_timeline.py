"""`rooflab measure timeline`: the config's timeline scenarios, a decode-like step per mode
(eager, graph, fused): wall time per step, the kernels' busy time and the gap, without
Snakemake (docs/timelines.md)."""

from __future__ import annotations

import sys

from rooflab.cli.output import UsageError, print_rows

COLUMNS = ("scenario", "mode", "step_s", "busy_s", "gap_s", "kernels", "n_samples")
COLUMNS += ("flops", "bytes", "disturbed", "busy_method")


def cmd_measure_timeline(args) -> None:
    from rooflab.backends.selection import select_backend
    from rooflab.cli.measure_stages import default_config
    from rooflab.experiments.timeline import run_timeline
    from rooflab.experiments.timing import TimingSettings
    from rooflab.records import check_writable, write_run

    config = default_config(args)
    names = args.scenario or sorted(config["timelines"])
    unknown = [n for n in names if n not in config["timelines"]]
    if unknown or not names:
        known = ", ".join(sorted(config["timelines"])) or "none"
        raise UsageError(
            f"measure timeline: no timeline scenario {', '.join(unknown)} in the config; "
            f"timelines: {known}"
        )
    if args.out:
        check_writable(args.out)  # before measuring: a finished run must not be lost
    backend = select_backend(args.backend or config["backend"])
    timing = TimingSettings.from_config(config["timing"], config["disturbance"])
    rows = []
    for name in names:
        tables = run_timeline(backend, name, config["timelines"][name], timing)
        if args.out:
            run_dir = write_run(args.out, tables["runs"][0]["run_id"], tables)
            print(f"rooflab: wrote {run_dir}", file=sys.stderr)
        rows += [{c: row[c] for c in COLUMNS} for row in tables["timeline_steps"]]
    if args.format == "table":
        for row in rows:
            del row["busy_method"]  # a sentence: in --format json and the store
    print_rows(rows, args.format)
