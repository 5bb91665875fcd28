"""The short table that ends tests/gpu/device_check.sh: the GPU's measured ceilings beside their
datasheet figures (config/devices.yaml), a few weight-reuse points, and the flags of the campaign.

    python tests/gpu/device_summary.py results/rooflab.duckdb

Reads the store only (rooflab.store.query, read-only connection).
"""

from __future__ import annotations

import json
import sys

from rooflab.devices import matching_preset
from rooflab.store import query

# (label, ceiling name in the store, datasheet path or level of config/devices.yaml)
ROWS = (
    ("HBM bandwidth", "HBM", "HBM"),
    ("L2 bandwidth", "L2", None),
    ("L1 bandwidth (all SMs)", "L1", None),
    ("host link (best pinned)", "host", None),
    ("fp64 FMA", "fp64_fma", "fp64"),
    ("fp32 FMA", "fp32_fma", "fp32"),
    ("fp16 FMA (half2)", "fp16_fma", None),
    ("fp64 cuBLAS (tensor)", "fp64_tensor", "fp64_tensor"),
    ("fp32 cuBLAS", "fp32_cublas", "fp32"),
    ("tf32 tensor (cuBLAS)", "tf32_tensor", "tf32"),
    ("fp16 tensor (cuBLAS)", "fp16_tensor", "fp16"),
    ("bf16 tensor (cuBLAS)", "bf16_tensor", "bf16"),
)
REUSE_M = (1, 16, 128, 1024, 8192)


def _rows(db: str, sql: str) -> list[dict]:
    return query(db, sql).to_pylist()


def _rate(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    scale, prefix = (1e12, "T") if value >= 1e12 else (1e9, "G")
    return f"{value / scale:.3g} {prefix}{unit}"


def summary(db: str) -> str:
    ceilings = _rows(
        db,
        "SELECT name, kernel, value, unit, device_name, clock_moved, clock_capped "
        "FROM latest_ceilings WHERE backend = 'cuda'",
    )
    if not ceilings:
        return "no CUDA ceilings in the store"
    device = ceilings[0]["device_name"]
    preset = matching_preset(device)
    best: dict[str, dict] = {}
    for row in ceilings:
        if row["name"] not in best or row["value"] > best[row["name"]]["value"]:
            best[row["name"]] = row
    lines = [f"device: {device}; datasheet preset: {preset.key if preset else 'none'}", ""]
    lines.append(f"{'ceiling':<22} {'measured':>14} {'kernel':>10} {'datasheet':>14} {'ratio':>6}")
    for label, name, sheet in ROWS:
        row = best.get(name)
        unit = "B/s" if name in ("HBM", "L2", "L1", "host") else "FLOP/s"
        value = row["value"] if row else None
        figures = {} if preset is None else {**preset.peak_flops_per_s, **preset.bandwidth_b_per_s}
        reference = figures.get(sheet) if sheet else None
        ratio = f"{value / reference:.2f}" if value and reference else "-"
        flags = "".join(
            mark
            for mark, on in (("*", row and row["clock_moved"]), ("!", row and row["clock_capped"]))
            if on
        )
        kernel = row["kernel"] if row else "-"
        lines.append(
            f"{label:<22} {_rate(value, unit) + flags:>14} {kernel:>10} "
            f"{_rate(reference, unit):>14} {ratio:>6}"
        )
    lines.append("(* clock moved more than the allowed fraction; ! thermal or power cap seen)")

    points = _rows(
        db,
        "SELECT p.sweep, p.dtype, p.m, p.n, p.k, p.cache_state, p.median_s, p.bytes_model, "
        "p.achieved_flops_per_s, r.level, r.efficiency, r.limiter "
        "FROM latest_gemm_points p LEFT JOIN roofline_points r "
        "ON r.run_id = p.run_id AND r.config_id = p.config_id AND r.cache_state = p.cache_state "
        f"WHERE p.backend = 'cuda' AND p.dtype = 'bf16' AND p.n = p.k AND p.m IN {REUSE_M} "
        "ORDER BY p.n, p.cache_state, p.m",
    )
    lines += ["", "weight reuse, bf16 (model bytes / time; efficiency against its own roof):"]
    lines.append(
        f"{'K=N':>5} {'cache':>5} {'M':>5} {'time':>10} {'FLOP/s':>12} {'bytes/s':>12} "
        f"{'level':>5} {'limiter':>8} {'eff':>5}"
    )
    for p in points:
        efficiency = f"{p['efficiency']:.2f}" if p["efficiency"] is not None else "-"
        lines.append(
            f"{p['n']:>5} {p['cache_state']:>5} {p['m']:>5} {p['median_s'] * 1e6:>8.1f}us "
            f"{_rate(p['achieved_flops_per_s'], 'FLOP/s'):>12} "
            f"{_rate(p['bytes_model'] / p['median_s'], 'B/s'):>12} {p['level'] or '-':>5} "
            f"{p['limiter'] or '-':>8} {efficiency:>5}"
        )

    (counts,) = _rows(
        db,
        "SELECT count(*) AS points, count(*) FILTER (WHERE noisy) AS noisy, "
        "count(*) FILTER (WHERE clock_moved) AS moved, "
        "count(*) FILTER (WHERE clock_capped) AS capped, "
        "count(*) FILTER (WHERE disturbed) AS disturbed, "
        "string_agg(DISTINCT disturbance, ' | ') AS why "
        "FROM latest_gemm_points WHERE backend = 'cuda'",
    )
    busy = _rows(
        db,
        "SELECT run_id, busy_warning FROM runs WHERE backend = 'cuda' AND busy_warning NOT NULL",
    )
    (failed,) = _rows(
        db, "SELECT count(DISTINCT config_id) AS configs FROM correctness WHERE NOT passed"
    )
    timing = {
        json.loads(r["machine"]).get("timing_method")
        for r in _rows(db, "SELECT machine FROM runs WHERE backend = 'cuda'")
    }
    lines += [
        "",
        f"GEMM points {counts['points']}: noisy {counts['noisy']}, clock moved {counts['moved']}, "
        f"capped {counts['capped']}, disturbed {counts['disturbed']}"
        f"{' (' + counts['why'] + ')' if counts['why'] else ''}; "
        f"configurations failing correctness: {failed['configs']}",
        f"timing: {'; '.join(sorted(t for t in timing if t))}",
        *(f"busy machine: run {r['run_id']}: {r['busy_warning']}" for r in busy),
    ]
    return "\n".join(lines + counters_lines(db) + diagnosis_lines(db))


def counters_lines(db: str) -> list[str]:
    """How the ncu profiles went, their calibration (counted FLOPs / 2MNK) and pairing, and the
    hierarchical points they gave (counted bytes per level)."""
    profiles = _rows(
        db,
        "SELECT c.config_id, c.cache_control, c.status, c.reason, c.tool_version, c.chip "
        "FROM counters c JOIN runs r USING (run_id) WHERE r.backend = 'cuda' "
        "AND c.metric IS NULL ORDER BY c.config_id NULLS FIRST, c.cache_control",
    )
    lines = ["", "hardware counters (ncu):"]
    if not profiles:
        return [*lines, "  no counters run in the store"]
    for p in profiles:
        where = (
            f"{p['config_id']} --cache-control {p['cache_control']}" if p["config_id"] else "step"
        )
        said = f" ({p['reason']})" if p["reason"] else ""
        lines.append(f"  {where}: {p['status']}{said}; ncu {p['tool_version']}")
    calibrations = _rows(
        db,
        "SELECT config_id, cache_control, compute_path, ratio, trusted, pairing, pairing_error "
        "FROM counter_calibration ORDER BY config_id, cache_control",
    )
    if calibrations:
        lines.append(
            f"  {'configuration':<44} {'cache':>5} {'path':>12} {'counted/2MNK':>12} trusted"
        )
    for c in calibrations:
        ratio = f"{c['ratio']:.4f}" if c["ratio"] is not None else "-"
        lines.append(
            f"  {c['config_id']:<44} {c['cache_control']:>5} {c['compute_path'] or '-':>12} "
            f"{ratio:>12} {c['trusted']!s:<5} {c['pairing'] or c['pairing_error'] or ''}"
        )
    points = _rows(
        db,
        "SELECT config_id, cache_state, level, bytes, intensity, limiting_level, efficiency "
        "FROM roofline_points WHERE q_source = 'counters' ORDER BY config_id, cache_state, level",
    )
    if points:
        lines.append(
            f"  {'hierarchical point':<44} {'cache':>5} {'level':>5} {'bytes':>10} "
            f"{'FLOP/B':>8} {'limit':>5} {'eff':>5}"
        )
    for p in points:
        lines.append(
            f"  {p['config_id']:<44} {p['cache_state']:>5} {p['level']:>5} {p['bytes']:>10.4g} "
            f"{p['intensity']:>8.4g} {p['limiting_level']:>5} {p['efficiency']:>5.2f}"
        )
    return lines


def diagnosis_lines(db: str) -> list[str]:
    """Issue 43 on the GPU: how many points of each kind got each cause (docs/diagnosis.md), and
    each point judged `conditions` with its clock against its roof's (a power-capped point under
    a burst roof says so here)."""
    causes = _rows(
        db,
        "SELECT kind, cause, count(*) AS n FROM diagnoses WHERE backend = 'cuda' "
        "GROUP BY ALL ORDER BY kind, n DESC",
    )
    lines = ["", "diagnoses (rooflab explain):"]
    if not causes:
        return [*lines, "  none in the store"]
    for kind in dict.fromkeys(c["kind"] for c in causes):
        said = ", ".join(f"{c['cause']} {c['n']}" for c in causes if c["kind"] == kind)
        lines.append(f"  {kind}: {said}")
    for row in _rows(
        db,
        "SELECT key, cache_state, efficiency, evidence FROM diagnoses "
        "WHERE backend = 'cuda' AND cause = 'conditions' ORDER BY key, cache_state",
    ):
        figures = json.loads(row["evidence"])
        clock = figures.get("roofline_points.clock_mhz")
        roof = figures.get("roofline_points.roof_clock_mhz")
        scaled = figures.get("efficiency_at_its_clock")
        lines.append(
            f"  conditions: {row['key']} {row['cache_state']}: clock {clock or '-'} MHz, roof's "
            f"{roof or '-'} MHz; efficiency {row['efficiency']:.3f}, at its clock {scaled or '-'}"
        )
    return lines


if __name__ == "__main__":
    print(summary(sys.argv[1] if len(sys.argv) > 1 else "results/rooflab.duckdb"))
