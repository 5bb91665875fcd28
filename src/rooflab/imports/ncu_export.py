"""An Nsight Compute report's raw page, exported to CSV (`ncu --import REPORT.ncu-rep --csv --page
raw --print-units base --metrics ...`, or the `--log-file` of a profile with `--csv --page raw`),
read as ncu wrote it: one operator row per profiled kernel launch (OPERATOR_COLUMNS), with its
counts per memory level and per compute path in `counted`.

What a row holds, and where it comes from:
- `time_s`: `gpu__time_duration.sum`, the kernel's duration in ncu's replay (serialised, under
  the export's cache and clock control), not the application's own timing;
- `flops`: the counted FLOPs of every compute path whose metrics the export holds (CUDA cores:
  add + mul + 2·fma per precision; tensor cores: `sm__ops_path_tensor_src_*` ops), the same
  arithmetic as the counters step (`counters.ncu.flops_from_counters`). Counts, not trusted
  FLOPs: nothing here calibrates them (a kernel from an application has no 2MNK to meet);
- `bytes`: DRAM/HBM bytes read + written; `counted["bytes_by_level"]` has HBM, L2 and L1 as the
  counters step names them (None where a metric is missing; bypassed levels are for the caller,
  `counters.points.bypassed_levels`);
- `dtype` and `counted["compute_path"]`: the path with the most counted FLOPs, and its dtype;
- what ncu left out, per kernel (`counted["missing_metrics"]`) and in one line of `notes`.

The raw page records the device, its attributes, the launch and the replay passes
(`profiler__*`, ncu 2025) but neither the ncu version, the date, the replay mode nor the cache
and clock control. A profile's own `--log-file` also holds ncu's `==WARNING== Note: Running
with ...` lines, from which the cache and clock control are read (`settings`); otherwise they
stay None and a note says so.
"""

from __future__ import annotations

import re
from pathlib import Path

from rooflab.counters.ncu import (
    CLOCK_METRICS,
    DURATION,
    LEVEL_METRICS,
    REPLAY_PASSES,
    SASS_PATHS,
    TENSOR_PATHS,
    CounterParseError,
    RawPage,
    bytes_by_level,
    fixed_metrics,
    flops_from_counters,
    parse_number,
    read_raw_page,
    wanted_metrics,
)
from rooflab.imports.profile import Profile, ProfileError, file_sha256

__all__ = ["NEEDED_METRICS", "REEXPORT_COMMAND", "read_ncu_export"]

NEEDED_METRICS = wanted_metrics()
REEXPORT_COMMAND = (
    "ncu --import REPORT.ncu-rep --csv --page raw --print-units base --metrics "
    + ",".join(NEEDED_METRICS)
)
# A report holds only what its profile collected (ncu drops the other names silently on export).
_HOW_TO_GET_THEM = (
    f"re-export them with `{REEXPORT_COMMAND}` (a report that never collected them: profile "
    "again with `--metrics` of that list)"
)

# Compute path -> rooflab's dtype of its operands (fp8: e4m3 or e5m2, the counter does not say)
PATH_DTYPE = {
    "fp64_fma": "fp64",
    "fp32_fma": "fp32",
    "fp16_fma": "fp16",
    "fp64_tensor": "fp64",
    "tf32_tensor": "tf32",
    "fp16_tensor": "fp16",
    "bf16_tensor": "bf16",
    "fp8_tensor": None,
}

_BYTE_METRICS = frozenset(m for metrics in LEVEL_METRICS.values() for m in metrics)
# Units of `--print-units base`, as ncu 2024.1.1 (nsecond, cycle/second) and 2025.3.1 (ns, hz)
# print them; any other unit (usecond, Mbyte, Ghz, ...) scales the number.
_BASE_UNITS = (
    (lambda m: m == DURATION, frozenset({"ns", "nsecond"})),
    (lambda m: m.endswith(".per_second"), frozenset({"hz", "cycle/second"})),
    (lambda m: m in _BYTE_METRICS, frozenset({"byte"})),
    (lambda m: m.startswith("sm__sass_"), frozenset({"inst"})),
    (lambda m: m.startswith("sm__ops_path_tensor_"), frozenset({""})),
    (lambda m: m == REPLAY_PASSES, frozenset({"pass", ""})),
)
_NS_PER_S = 1e9
SM_CLOCK, DRAM_CLOCK, L2_CLOCK = CLOCK_METRICS

# Device attributes kept in `settings["device"]` (ncu 2025's raw page has ~180 of them)
DEVICE_ATTRIBUTES = (
    "display_name",
    "compute_capability_major",
    "compute_capability_minor",
    "multiprocessor_count",
    "clock_rate",  # kHz: the SM clock the driver reports
    "max_gpu_frequency_khz",
    "memory_clock_rate",  # kHz
    "max_mem_frequency_khz",
    "global_memory_bus_width",  # bits
    "l2_cache_size",  # bytes
    "total_memory",  # bytes
    "ecc_enabled",
)
# Launch metrics kept in `counted["launch"]`
LAUNCH_METRICS = (
    "launch__registers_per_thread",
    "launch__shared_mem_per_block",
    "launch__cluster_size",
    "launch__waves_per_multiprocessor",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
)
# ncu's notes on settings left uncontrolled, in a profile's own log: setting -> (note, value)
SETTING_NOTES = {
    "cache_control": ("Running with uncontrolled GPU caches", "none"),
    "clock_control": ("Running with unmodified GPU clocks", "none"),
}
# What ncu uses when not told otherwise (its --help: --cache-control all, --clock-control base)
SETTING_DEFAULTS = {"cache_control": "all", "clock_control": "base"}
_SETTING_NOTE = "==WARNING== Note: Running with"


def read_ncu_export(path: str | Path) -> Profile:
    """One Profile (tool "ncu") from a raw-page CSV export; a file that is not one, holds no
    kernel, none of the metrics rooflab reads, or numbers in other than base units is a
    `ProfileError` naming the file."""
    path = Path(path)
    text = _text(path)
    page = _raw_page(path, text)
    columns = {name: i for i, name in enumerate(page.header)}
    _check_units(path, page, columns)
    operators = [_kernel(i, record, columns) for i, record in enumerate(page.records)]
    if not any(_has_a_ledger(op["counted"]) for op in operators):
        absent = _missing_in_all(operators)
        raise ProfileError(
            f"{path}: none of the metrics rooflab needs for a point (bytes per level, FLOPs per "
            f"path) is in this export; missing: {', '.join(absent)}; {_HOW_TO_GET_THEM}"
        )
    settings, unrecorded = _settings(page, columns)
    notes = []
    missing = _missing_in_any(operators)
    if missing:
        notes.append(_missing_note(path, operators, missing))
    if unrecorded:
        notes.append(
            f"{path.name}: the export does not record its {', '.join(unrecorded)} (no column "
            "of ncu's raw page says; a profile's own --log-file has ncu's notes on cache and "
            "clock control): left unknown"
        )
    return Profile(
        tool="ncu",
        tool_version=None,  # the raw page does not say which ncu wrote it
        path=path,
        sha256=file_sha256(path),
        device=_device(page, columns),
        recorded_at=None,  # nor when
        operators=operators,
        settings=settings,
        notes=notes,
    )


# -- the file -------------------------------------------------------------------------------------


def _text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ProfileError(f"{path}: cannot read it ({error.strerror or error})") from None
    if b"\0" in data:
        raise ProfileError(f"{path}: a binary file, not a CSV; {_export_hint()}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: not UTF-8 text, so not ncu's CSV; {_export_hint()}") from None


def _export_hint() -> str:
    return f"an ncu report (.ncu-rep) is read through its raw-page CSV: `{REEXPORT_COMMAND}`"


def _raw_page(path: Path, text: str) -> RawPage:
    try:
        page = read_raw_page(text)
    except CounterParseError as error:
        raise ProfileError(f"{path}: not ncu's raw page as printed (truncated?): {error}") from None
    if page is None:
        said = [line.strip() for line in text.splitlines() if line.startswith("==")]
        if any("No kernels were profiled" in line for line in said):
            raise ProfileError(f"{path}: ncu profiled no kernel: {' | '.join(said)}")
        raise ProfileError(
            f'{path}: not an ncu raw-page CSV (no "ID",...,"Kernel Name" header); {_export_hint()}'
        )
    if "Metric Name" in page.header and "Metric Value" in page.header:
        raise ProfileError(
            f"{path}: ncu's details page (one row per metric), not its raw page; export it with "
            f"`{REEXPORT_COMMAND}`"
        )
    if not page.records:
        raise ProfileError(f"{path}: the export holds no kernel (a header and no launch)")
    return page


def _check_units(path: Path, page: RawPage, columns: dict[str, int]) -> None:
    if page.units is None:
        raise ProfileError(
            f"{path}: no units row under the header, so the numbers' units are unknown; "
            f"export with `{REEXPORT_COMMAND}`"
        )
    for metric in (*NEEDED_METRICS, REPLAY_PASSES):
        if metric not in columns:
            continue
        unit = page.units[columns[metric]].strip()
        allowed = next((units for applies, units in _BASE_UNITS if applies(metric)), None)
        if allowed is not None and unit not in allowed:
            names = ", ".join(repr(u) for u in sorted(allowed))
            raise ProfileError(
                f"{path}: {metric} is in {unit!r}, not in base units ({names}): export with "
                f"`--print-units base` (`{REEXPORT_COMMAND}`)"
            )


# -- one kernel -----------------------------------------------------------------------------------


def _kernel(index: int, record: list[str], columns: dict[str, int]) -> dict:
    def value(name: str) -> float | None:
        return parse_number(record[columns[name]]) if name in columns else None

    def text(name: str) -> str | None:
        return (record[columns[name]].strip() or None) if name in columns else None

    counts = {metric: value(metric) for metric in NEEDED_METRICS}
    flops_by_path = {
        path: counted.flops for path, counted in flops_from_counters(counts).paths.items()
    }
    levels = bytes_by_level(counts)
    counted_paths = [f for f in flops_by_path.values() if f is not None]
    compute_path = max(
        (p for p, f in flops_by_path.items() if f), key=lambda p: flops_by_path[p], default=None
    )
    duration_ns = counts[DURATION]
    passes = value(REPLAY_PASSES)
    flops = float(sum(counted_paths)) if counted_paths else None
    hbm = levels.get("HBM")
    counted = {
        "bytes_by_level": levels,
        "flops_by_path": flops_by_path,
        "compute_path": compute_path,
        "sm_clock_hz": counts[SM_CLOCK],
        "dram_clock_hz": counts[DRAM_CLOCK],
        "l2_clock_hz": counts[L2_CLOCK],
        "replay_passes": int(passes) if passes is not None else None,
        "missing_metrics": _missing_metrics(counts),
        "kernel_id": int(record[0]),
        "grid": _dims(text("Grid Size")),
        "block": _dims(text("Block Size")),
        "nvtx": [record[i].strip() for n, i in columns.items() if _is_nvtx(n) and record[i].strip()]
        or None,
        "launch": {m: value(m) for m in LAUNCH_METRICS if value(m) is not None},
    }
    return {
        "index": index,
        "op": record[columns["Kernel Name"]],
        "kind": "kernel",
        "parent": None,
        "input_dims": None,
        "dtype": PATH_DTYPE.get(compute_path) if compute_path else None,
        "start_s": None,  # the raw page has no timestamps (kernels are replayed one by one)
        "time_s": duration_ns / _NS_PER_S if duration_ns is not None else None,
        "thread": text("Stream"),
        "flops": None if flops is None else round(flops),  # counts: whole numbers
        "flops_source": "counters" if flops is not None else None,
        "bytes": None if hbm is None else round(hbm),
        "q_source": "counters" if hbm is not None else None,
        "ledger": None,  # counted, not modelled: no ledger of rooflab's
        "nested": False,  # ncu replays each kernel alone
        "counted": counted,
    }


def _missing_metrics(counts: dict[str, float | None]) -> list[str]:
    """The metrics rooflab reads that a kernel has no value for: the fixed ones, and per tensor
    path every alternative's metrics where none is complete (a chip has one of them)."""
    missing = [m for m in fixed_metrics() if counts.get(m) is None]
    for alternatives in TENSOR_PATHS.values():
        if not any(all(counts.get(m) is not None for m in alt) for alt in alternatives):
            missing += [m for alt in alternatives for m in alt if counts.get(m) is None]
    return missing


def _has_a_ledger(counted: dict) -> bool:
    """A kernel rooflab can say anything about: bytes at some level or FLOPs on some path."""
    levels = counted["bytes_by_level"].values()
    paths = counted["flops_by_path"].values()
    return any(q is not None for q in levels) or any(f is not None for f in paths)


_DIMS = re.compile(r"^\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)$")


def _dims(text: str | None) -> list[int] | None:
    """`(2, 66, 1)` -> [2, 66, 1]."""
    match = _DIMS.match(text or "")
    return [int(g) for g in match.groups()] if match else None


def _is_nvtx(column: str) -> bool:
    return "Push/Pop_Range" in column or "Start/Stop_Range" in column


# -- the whole export -----------------------------------------------------------------------------


def _missing_in_any(operators: list[dict]) -> list[str]:
    seen = {m for op in operators for m in op["counted"]["missing_metrics"]}
    return [m for m in NEEDED_METRICS if m in seen]


def _missing_in_all(operators: list[dict]) -> list[str]:
    common = set.intersection(*(set(op["counted"]["missing_metrics"]) for op in operators))
    return [m for m in NEEDED_METRICS if m in common]


def _missing_note(path: Path, operators: list[dict], missing: list[str]) -> str:
    """One line: which metrics, in how many kernels, what is lost, and how to get them."""
    without = sum(bool(op["counted"]["missing_metrics"]) for op in operators)
    kernels = (
        "every kernel" if without == len(operators) else f"{without} of {len(operators)} kernels"
    )
    lost = [
        f"no {level} bytes"
        for level, metrics in LEVEL_METRICS.items()
        if any(m in missing for m in metrics)
    ]
    uncounted = [p for p, terms in SASS_PATHS.items() if any(m in missing for m, _ in terms)]
    uncounted += [
        p for p, alts in TENSOR_PATHS.items() if all(any(m in missing for m in a) for a in alts)
    ]
    if uncounted:
        lost.append(f"FLOPs not counted on {', '.join(uncounted)}")
    if DURATION in missing:
        lost.append("no duration")
    return (
        f"{path.name}: {len(missing)} of the metrics rooflab reads are missing ({kernels}): "
        f"{', '.join(missing)} ({'; '.join(lost) or 'clocks only'}); {_HOW_TO_GET_THEM}"
    )


def _settings(page: RawPage, columns: dict[str, int]) -> tuple[dict, list[str]]:
    """How the export was profiled, as far as it says, and the settings it does not record."""
    notes = [line.strip() for line in page.tool_lines if line.startswith(_SETTING_NOTE)]
    settings: dict = {"replay_mode": None}
    for setting, (note, value) in SETTING_NOTES.items():
        if any(note in line for line in notes):
            settings[setting] = value
        elif notes:  # this ncu notes uncontrolled settings, and did not note this one
            settings[setting] = SETTING_DEFAULTS[setting]
        else:
            settings[setting] = None
    settings["settings_evidence"] = notes or None
    settings["replay_passes"] = _column(page, columns, REPLAY_PASSES, number=True)
    settings["profiler"] = {
        name: _same_or_all(page, columns, name) for name in columns if name.startswith("profiler__")
    }
    settings["compute_capability"] = _same_or_all(page, columns, "CC", number=False)
    settings["device"] = {
        name: _same_or_all(page, columns, f"device__attribute_{name}")
        for name in DEVICE_ATTRIBUTES
        if f"device__attribute_{name}" in columns
    }
    settings["process_names"] = sorted(set(_column(page, columns, "Process Name") or [])) or None
    settings["print_units"] = "base"  # checked (_check_units)
    unrecorded = [s.replace("_", " ") for s in ("replay_mode", *SETTING_NOTES) if not settings[s]]
    return settings, unrecorded


def _column(page: RawPage, columns: dict[str, int], name: str, *, number: bool = False):
    """One column over every kernel (numbers where `number`), or None where there is none."""
    if name not in columns:
        return None
    raw = [record[columns[name]].strip() for record in page.records]
    if not number:
        return raw
    values = [parse_number(r) for r in raw]
    return [int(v) if v is not None and v.is_integer() else v for v in values]


def _same_or_all(page: RawPage, columns: dict[str, int], name: str, *, number: bool = True):
    """A column's value where every kernel has the same, else the list per kernel; a number
    where ncu printed one (unless not `number`: "9.0" is a compute capability, not 9)."""
    raw = _column(page, columns, name)
    if raw is None:
        return None
    values = []
    for text in raw:
        parsed = parse_number(text) if number else None
        values.append(text if parsed is None else int(parsed) if parsed.is_integer() else parsed)
    return values[0] if len(set(map(str, values))) == 1 else values


def _device(page: RawPage, columns: dict[str, int]) -> str | None:
    """The device as the export names it (ncu 2025: its display name), else its index and
    compute capability (ncu 2024's raw page has no name)."""
    names = _column(page, columns, "device__attribute_display_name")
    if names and all(names):
        return "; ".join(dict.fromkeys(names))
    index = _column(page, columns, "Device")
    capability = _column(page, columns, "CC")
    if index is None:
        return None
    found = dict.fromkeys(
        f"CUDA device {i}" + (f" (compute capability {cc})" if cc else "")
        for i, cc in zip(index, capability or [None] * len(index), strict=True)
    )
    return "; ".join(found)
