"""`rooflab model gemm | stages`: the ledgers and bounds, without hardware.

A GEMM whose X and W are integers (int8) does integer operations: its work, peak and rates are in
OP and OP/s (model.work_unit), its peak an OP/s figure (`--peak "1978.9 TOP/s"`, a preset's
`integer_paths`, a measured integer path), never a FLOP/s one; and a FLOP GEMM is never drawn
against an integer path."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from rooflab.cli.output import UsageError, json_safe, print_rows
from rooflab.cli.roofs import Roofs, roofs_from_args
from rooflab.config import load_scenario, stages_from_config
from rooflab.devices import device_preset
from rooflab.model import bound, gemm_ledger, stage_bounds, work_unit
from rooflab.units import UnitError, format_quantity, parse_byte_rate, parse_op_rate
from rooflab.vocabulary import INTEGER_PATHS, datasheet_path


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


# A bound's columns (model.Bound's fields), in both commands' rows
BOUND_COLUMNS = ("intensity", "compute_s", "memory_s", "bound_s", "limiter")
GEMM_TABLE_COLUMNS = ("m", "n", "k", "flops", "bytes", *BOUND_COLUMNS, "attainable_flops_per_s")
GEMM_TABLE_COLUMNS += ("bound_s_per_row",)


# An integer GEMM's columns: its work in OP (the FLOP columns' names and units, renamed)
OP_NAMES = {
    "flops": "ops",
    "attainable_flops_per_s": "attainable_ops_per_s",
    "peak_flops_per_s": "peak_ops_per_s",
}
_PLACEHOLDER_PEAK = "1 FLOP/s"  # stands for an OP/s --peak where roofs_from_args parses FLOP/s


def _refuse_integer_path(path: str | None, work: str) -> None:
    if path in INTEGER_PATHS:
        raise UsageError(
            f"--path {path} is an integer path (OP/s); work in {work} is never bounded by it: "
            "give a FLOP/s path"
        )


def integer_roofs(args, dtype: str | None) -> Roofs:
    """The roofs of an integer GEMM: the peak in OP/s (`--peak` as an OP/s rate; with
    `--device`, the preset's integer path, `integer_paths`; with `--measured`, an integer path's
    measured ceiling, int8_tensor), the bandwidth as for any GEMM (roofs_from_args)."""
    peak = None
    if args.peak:
        try:
            peak = parse_op_rate(args.peak)
        except UnitError as error:
            raise UsageError(f"--peak: {error}; an integer GEMM's work is in OP") from None
    if args.path and args.measured is not None and args.path not in INTEGER_PATHS:
        raise UsageError(
            f"--path {args.path} is no integer path: an integer GEMM's peak is in OP/s; "
            f"integer paths: {', '.join(sorted(INTEGER_PATHS))}"
        )
    if peak is not None:  # the rest as for any GEMM, its peak replaced
        given = argparse.Namespace(**{**vars(args), "peak": _PLACEHOLDER_PEAK})
        return dataclasses.replace(roofs_from_args(given, dtype), peak_flops_per_s=peak)
    if not args.device:  # --measured: its integer path's ceiling (OP/s); or the usual refusal
        return roofs_from_args(args, dtype)
    preset = device_preset(args.device, args.devices)
    path = args.path or (datasheet_path(dtype) if dtype else None)
    if path not in preset.peak_ops_per_s:
        raise UsageError(
            f"device {args.device} has no integer path {path!r} (an integer GEMM's peak is in "
            f"OP/s); integer paths: {', '.join(preset.peak_ops_per_s) or 'none'}"
        )
    source = f"datasheet {args.device}, integer path {path}"
    if args.bandwidth:
        try:
            bandwidth = parse_byte_rate(args.bandwidth)
        except UnitError as error:
            raise UsageError(f"--bandwidth: {error}") from None
        return Roofs(preset.peak_ops_per_s[path], bandwidth, source, "--bandwidth")
    given = argparse.Namespace(**{**vars(args), "peak": _PLACEHOLDER_PEAK, "path": None})
    rest = roofs_from_args(given, dtype)
    return dataclasses.replace(
        rest, peak_flops_per_s=preset.peak_ops_per_s[path], peak_source=source
    )


def _op_header(header: str) -> str:
    """A table header of an integer GEMM's rows (FLOP-named) in OP, its decimal prefix kept."""
    name, _, unit = header.partition(" ")
    return OP_NAMES.get(name, name) + " " * bool(unit) + unit.replace("FLOP", "OP")


def cmd_model_gemm(args) -> None:
    x = args.x_dtype or args.dtype
    w = args.w_dtype or args.dtype
    y = args.y_dtype or args.dtype
    if not (x and w and y):
        raise UsageError("give --dtype, or all of --x-dtype, --w-dtype and --y-dtype")
    work = work_unit(x, w)  # OP for int8 x int8, else FLOP
    if work == "OP":
        roofs = integer_roofs(args, x if x == w else None)
    else:
        _refuse_integer_path(args.path, work)
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
                        **{c: getattr(b, c) for c in BOUND_COLUMNS},
                        "attainable_flops_per_s": b.attainable_flops_per_s,
                        "bound_s_per_row": b.bound_s / m,
                        "peak_flops_per_s": peak,
                        "bandwidth_b_per_s": bandwidth,
                        "ridge": b.ridge,
                        **roofs.json_sources(),
                    }
                )
    if args.format == "table":
        rate = "op_rate" if work == "OP" else "flop_rate"
        integer = "work: 2MNK integer operations (OP, not FLOP); " * (work == "OP")
        print(
            f"X {x}, W {w}, Y {y}; peak {format_quantity(peak, rate)}, bandwidth "
            f"{format_quantity(bandwidth, 'byte_rate')}, ridge {peak / bandwidth:.6g} {work}/B; "
            f"{integer}bytes: cold-cache model, not measured traffic"
        )
        if not roofs.explicit:
            print(roofs.sources())
        rows = [{c: row[c] for c in GEMM_TABLE_COLUMNS} for row in rows]
    elif work == "OP":  # JSON, CSV: the work's columns named in OP
        rows = [{OP_NAMES.get(k, k): v for k, v in row.items()} for row in rows]
    print_rows(rows, args.format, header=_op_header if work == "OP" else None)


def cmd_model_stages(args) -> None:
    _refuse_integer_path(args.path, "FLOP (a stage's)")
    document, stages = load_scenario(args.file)  # the file read once (100,000 stages: seconds)
    # its compute_path and memory_level, where it gives them, name measured ceilings
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
            **{c: getattr(s.bound, c) for c in BOUND_COLUMNS},
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
        # one stage a line, each through json's C encoder (indent=2 runs its Python one: seconds
        # for 100,000 stages)
        head = json.dumps({**summary, "stages": []}, indent=2).removesuffix("[]\n}")
        lines = (json.dumps({k: json_safe(v) for k, v in row.items()}) for row in per_stage)
        sys.stdout.write(head + "[\n    " + ",\n    ".join(lines) + "\n  ]\n}\n")
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
