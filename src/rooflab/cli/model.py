"""`rooflab model gemm | stages`: the ledgers and bounds, without hardware."""

from __future__ import annotations

import argparse
import json
import sys

from rooflab.cli.output import UsageError, json_safe, print_rows
from rooflab.cli.roofs import roofs_from_args
from rooflab.config import load_scenario, load_yaml, stages_from_config
from rooflab.model import bound, gemm_ledger, stage_bounds
from rooflab.units import format_quantity


def int_list(option: str):
    def parse(text: str) -> list[int]:
        try:
            values = [int(part) for part in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{option} expects comma-separated positive integers, got {text!r}"
            ) from None
        if any(v <= 0 for v in values):
            raise argparse.ArgumentTypeError(f"{option} values must be positive, got {text!r}")
        return values

    return parse


GEMM_TABLE_COLUMNS = (
    "m",
    "n",
    "k",
    "flops",
    "bytes",
    "intensity",
    "compute_s",
    "memory_s",
    "bound_s",
    "limiter",
    "attainable_flops_per_s",
    "bound_s_per_row",
)


def cmd_model_gemm(args) -> None:
    x = args.x_dtype or args.dtype
    w = args.w_dtype or args.dtype
    y = args.y_dtype or args.dtype
    if not (x and w and y):
        raise UsageError("give --dtype, or all of --x-dtype, --w-dtype and --y-dtype")
    roofs = roofs_from_args(args, x if x == w else None)
    peak, bandwidth = roofs.peak_flops_per_s, roofs.bandwidth_b_per_s
    rows = []
    for n in args.n:
        for k in args.k:
            for m in args.m:
                ledger = gemm_ledger(m, n, k, x, w, y, beta=args.beta, bias=args.bias)
                b = bound(ledger.flops, ledger.bytes, peak, bandwidth)
                rows.append(
                    {
                        "m": m,
                        "n": n,
                        "k": k,
                        "x_dtype": x,
                        "w_dtype": w,
                        "y_dtype": y,
                        "flops": ledger.flops,
                        "bytes": ledger.bytes,
                        "intensity": b.intensity,
                        "compute_s": b.compute_s,
                        "memory_s": b.memory_s,
                        "bound_s": b.bound_s,
                        "limiter": b.limiter,
                        "attainable_flops_per_s": b.attainable_flops_per_s,
                        "bound_s_per_row": b.bound_s / m,
                        "peak_flops_per_s": peak,
                        "bandwidth_b_per_s": bandwidth,
                        "ridge": b.ridge,
                        **roofs.json_sources(),
                    }
                )
    if args.format == "table":
        print(
            f"X {x}, W {w}, Y {y}; peak {format_quantity(peak, 'flop_rate')}, bandwidth "
            f"{format_quantity(bandwidth, 'byte_rate')}, ridge {peak / bandwidth:.6g} FLOP/B; "
            "bytes: cold-cache model, not measured traffic"
        )
        if not roofs.explicit:
            print(roofs.sources())
        rows = [{c: row[c] for c in GEMM_TABLE_COLUMNS} for row in rows]
    print_rows(rows, args.format)


def cmd_model_stages(args) -> None:
    stages = load_scenario(args.file)
    document = load_yaml(args.file)  # its compute_path and memory_level name measured ceilings
    scenario = {k: document[k] for k in ("compute_path", "memory_level") if k in document}
    roofs = roofs_from_args(args, None, scenario)
    peak, bandwidth = roofs.peak_flops_per_s, roofs.bandwidth_b_per_s
    if document.get("measurable"):  # its stages are times: sized on these roofs
        stages = stages_from_config(document["stages"], str(args.file), peak, bandwidth)
    result = stage_bounds(stages, peak, bandwidth)
    per_stage = [
        {
            "name": s.name,
            "after": list(s.after),
            "flops": s.bound.flops,
            "bytes": s.bound.bytes,
            "intensity": s.bound.intensity,
            "compute_s": s.bound.compute_s,
            "memory_s": s.bound.memory_s,
            "bound_s": s.bound.bound_s,
            "limiter": s.bound.limiter,
            "start_s": s.start_s,
            "finish_s": s.finish_s,
            "on_critical_path": s.on_critical_path,
        }
        for s in result.stages
    ]
    summary = {
        "critical_path_s": result.critical_path_s,
        "aggregate_s": result.aggregate_s,
        "bound_s": result.bound_s,
        "critical_path": result.critical_path,
        "peak_flops_per_s": peak,
        "bandwidth_b_per_s": bandwidth,
        **roofs.json_sources(),
    }
    if args.format == "json":
        safe = [{k: json_safe(v) for k, v in row.items()} for row in per_stage]
        json.dump({**summary, "stages": safe}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    print_rows(per_stage, args.format)
    if args.format == "table":
        print(
            f"critical path  {format_quantity(result.critical_path_s, 'time')}  "
            f"({' -> '.join(result.critical_path)})"
        )
        print(
            f"aggregate      {format_quantity(result.aggregate_s, 'time')}  "
            "(max of summed FLOP / peak and summed bytes / bandwidth)"
        )
        print(f"lower bound    {format_quantity(result.bound_s, 'time')}")
        origin = f"; {roofs.origin}" if roofs.origin else ""
        print(
            f"ceilings       peak {format_quantity(peak, 'flop_rate')} from {roofs.peak_source}, "
            f"bandwidth {format_quantity(bandwidth, 'byte_rate')} from {roofs.bandwidth_source}"
            + origin
        )
