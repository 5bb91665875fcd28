"""The peak and bandwidth a `rooflab model` bound is drawn against, and where each came from:
`--peak`/`--bandwidth`, a datasheet preset (`--device`), or a machine's measured ceilings in the
store (`--measured [MACHINE]`); with a preset or measured ceilings, `--peak` or `--bandwidth`
replaces that one figure (a what-if)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from rooflab.cli.machines import Machine, listed, matching
from rooflab.cli.output import UsageError
from rooflab.config import ConfigError
from rooflab.devices import device_preset, load_device_presets
from rooflab.store import DEFAULT_DB, StoreError, query
from rooflab.units import UnitError, parse_byte_rate, parse_flop_rate
from rooflab.vocabulary import MEMORY_LEVELS, compute_path, datasheet_path


@dataclass(frozen=True)
class Roofs:
    peak_flops_per_s: float
    bandwidth_b_per_s: float
    peak_source: str  # "--peak", "datasheet h200-sxm, path bf16", "measured fp32_fma (fma_chains)"
    bandwidth_source: str
    origin: str | None = None  # measured: "ceilings run … of machine … (host …, cpu)"

    @property
    def explicit(self) -> bool:
        return (self.peak_source, self.bandwidth_source) == ("--peak", "--bandwidth")

    def sources(self) -> str:
        """One line: where each figure came from."""
        text = f"peak from {self.peak_source}; bandwidth from {self.bandwidth_source}"
        return text + (f"; {self.origin}" if self.origin else "")

    def json_sources(self) -> dict[str, str]:
        """peak_source, bandwidth_source for JSON and CSV, each whole (with the run measured)."""

        def whole(source: str) -> str:
            measured = self.origin and source.startswith("measured")
            return f"{source}, {self.origin}" if measured else source

        return {
            "peak_source": whole(self.peak_source),
            "bandwidth_source": whole(self.bandwidth_source),
        }


def device_help(devices: str | None = None) -> str:
    """--device's help: the presets of config/devices.yaml, read when the parser is built."""
    try:
        names = ", ".join(load_device_presets(devices))
    except (ConfigError, OSError):  # a broken file is reported when --device is used, not here
        names = "see config/devices.yaml"
    return f"datasheet preset of config/devices.yaml: {names}"


def add_roof_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--peak",
        help='compute ceiling, e.g. "120 TFLOP/s"; with --device or --measured it replaces '
        "that figure",
    )
    parser.add_argument(
        "--bandwidth",
        help='memory bandwidth, e.g. "2 TB/s" or "900 GiB/s"; with --device or --measured it '
        "replaces that figure",
    )
    parser.add_argument("--device", metavar="NAME", help=device_help())
    parser.add_argument(
        "--measured",
        nargs="?",
        const="",
        metavar="MACHINE",
        help="the measured ceilings in the store (--db) of MACHINE, a machine_id prefix or host "
        "(default: the machine of the newest ceilings run)",
    )
    parser.add_argument(
        "--path",
        help="compute path of --device or --measured (default: the one the dtype runs on)",
    )
    parser.add_argument(
        "--level",
        help="memory level of --device (default HBM) or --measured (default DRAM or HBM)",
    )
    parser.add_argument("--devices", help="preset file (default: config/devices.yaml)")
    parser.add_argument(
        "--db", default=str(DEFAULT_DB), help=f"the store of --measured (default {DEFAULT_DB})"
    )


def _parse_option(option: str, parse, text: str) -> float:
    try:
        return parse(text)
    except UnitError as error:
        raise UsageError(f"{option}: {error}") from None


def roofs_from_args(args, dtype: str | None, scenario: dict | None = None) -> Roofs:
    """The figures of --peak/--bandwidth, --device or --measured. `dtype`: the GEMM's (None for
    mixed X and W dtypes, or stages); `scenario`: a stages file's compute_path/memory_level, the
    measured ceilings it names."""
    peak = _parse_option("--peak", parse_flop_rate, args.peak) if args.peak else None
    bandwidth = (
        _parse_option("--bandwidth", parse_byte_rate, args.bandwidth) if args.bandwidth else None
    )
    measured = args.measured is not None
    if args.device and measured:
        raise UsageError("give --device or --measured, not both")
    if not (args.device or measured):
        if args.path or args.level:
            raise UsageError("--path and --level choose a figure of --device or --measured")
        if peak is None or bandwidth is None:
            raise UsageError(
                "give --peak and --bandwidth, or --device NAME, or --measured [MACHINE]"
            )
        return Roofs(peak, bandwidth, "--peak", "--bandwidth")
    given = "--device" if args.device else "--measured"
    if peak is not None and bandwidth is not None:
        raise UsageError(f"--peak and --bandwidth both given: {given} would not be used")
    need = {"need_peak": peak is None, "need_bandwidth": bandwidth is None}
    if args.device:
        found, origin = _preset_figures(args, dtype, **need), None
    else:
        found, origin = _measured_figures(args, dtype, scenario or {}, **need)
    peak, peak_source = (peak, "--peak") if peak is not None else found["peak"]
    bandwidth, bandwidth_source = (
        (bandwidth, "--bandwidth") if bandwidth is not None else found["bandwidth"]
    )
    return Roofs(peak, bandwidth, peak_source, bandwidth_source, origin)


def _preset_figures(args, dtype, *, need_peak: bool, need_bandwidth: bool) -> dict:
    preset = device_preset(args.device, args.devices)
    found = {}
    if need_peak:
        path = args.path or (datasheet_path(dtype) if dtype else None)
        if path is None:
            raise UsageError(
                f"--path is needed with --device here; paths of {args.device}: "
                f"{', '.join(preset.peak_flops_per_s)}"
            )
        if path not in preset.peak_flops_per_s:
            raise UsageError(
                f"device {args.device} has no path {path!r}; "
                f"paths: {', '.join(preset.peak_flops_per_s)}"
            )
        found["peak"] = preset.peak_flops_per_s[path], f"datasheet {args.device}, path {path}"
    if need_bandwidth:
        level = args.level or "HBM"
        if level not in preset.bandwidth_b_per_s:
            raise UsageError(
                f"device {args.device} has no level {level!r}; "
                f"levels: {', '.join(preset.bandwidth_b_per_s)}"
            )
        found["bandwidth"] = (
            preset.bandwidth_b_per_s[level],
            f"datasheet {args.device}, level {level}",
        )
    return found


# Per machine and backend, the ceilings of its newest ceilings run (the latest_ceilings view),
# the best kernel per level as the report's summary takes it; newest run first.
_MEASURED_SQL = """
    SELECT machine_id, backend, host, device_name, run_id, started_at, kind, name,
           arg_max(kernel, value) AS kernel, max(value) AS value
    FROM latest_ceilings
    GROUP BY machine_id, backend, host, device_name, run_id, started_at, kind, name
    ORDER BY started_at DESC, run_id DESC, kind, name
"""


def _measured_figures(
    args, dtype, scenario: dict, *, need_peak: bool, need_bandwidth: bool
) -> tuple[dict, str]:
    rows = query(args.db, _MEASURED_SQL).to_pylist()
    if not rows:
        raise StoreError(
            f"no ceilings in {args.db}: measure them (the workflow, or `rooflab measure "
            "ceilings --out results/ceilings` then `rooflab store ingest`)"
        )
    machines = [Machine(r["machine_id"], r["host"]) for r in rows]
    if args.measured:
        found = matching(machines, args.measured)
        if not found:
            raise StoreError(
                f"no ceilings of a machine {args.measured!r} (a machine_id prefix or host) in "
                f"{args.db}; machines with ceilings: {listed(machines)}"
            )
        if len({m.machine_id for m in found}) > 1:
            raise StoreError(
                f"machine {args.measured!r} is ambiguous in {args.db}: it matches "
                f"{listed(found)}; give more of the machine_id"
            )
        rows = [r for r in rows if r["machine_id"] == found[0].machine_id]
    newest = rows[0]  # the newest ceilings run (of the machine named)
    scope = [r for r in rows if r["run_id"] == newest["run_id"]]
    where = (
        f"ceilings run {newest['run_id']} of machine {newest['machine_id']} "
        f"(host {newest['host']}, {newest['backend']})"
    )
    measured = {(r["kind"], r["name"]): r for r in scope}
    paths = [name for kind, name in measured if kind == "compute"]
    levels = [name for kind, name in measured if kind == "bandwidth"]
    found_figures = {}
    if need_peak:
        path = args.path or scenario.get("compute_path")
        if path is None and dtype:
            path = compute_path(newest["backend"], dtype)
            if path is None:
                raise UsageError(
                    f"no compute path pairs with {dtype} on {newest['backend']}; give --path: "
                    f"measured {', '.join(paths) or 'none'} in {where}"
                )
        if path is None:
            raise UsageError(
                f"--path is needed with --measured here; measured paths: "
                f"{', '.join(paths) or 'none'} in {where}"
            )
        if ("compute", path) not in measured:
            raise UsageError(
                f"no measured compute ceiling {path!r} in {where}; measured: "
                f"{', '.join(paths) or 'none'}"
            )
        row = measured["compute", path]
        found_figures["peak"] = row["value"], f"measured {path} ({row['kernel']})"
    if need_bandwidth:
        default = next((level for level in MEMORY_LEVELS if level in levels), None)
        level = args.level or scenario.get("memory_level") or default
        if level is None:
            raise UsageError(
                f"no DRAM or HBM ceiling in {where}; give --level: measured "
                f"{', '.join(levels) or 'none'}"
            )
        if ("bandwidth", level) not in measured:
            raise UsageError(
                f"no measured bandwidth ceiling {level!r} in {where}; measured: "
                f"{', '.join(levels) or 'none'}"
            )
        row = measured["bandwidth", level]
        found_figures["bandwidth"] = row["value"], f"measured {level} ({row['kernel']})"
    return found_figures, where
