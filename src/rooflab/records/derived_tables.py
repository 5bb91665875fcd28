"""The tables the roofline step derives from the run folders (results/roofline/<table>.parquet,
docs/store.md), each row naming the run it derives from; recomputable at any time, and replaced in
the store for exactly the runs the step read (`roofline_inputs`)."""

from __future__ import annotations

import pyarrow as pa

from rooflab.records.columns import BOOL as _B
from rooflab.records.columns import FLOAT as _F
from rooflab.records.columns import INT as _I
from rooflab.records.columns import STRING as _S

DERIVED: dict[str, pa.Schema] = {
    # Derived by the roofline step, one row per timed point and memory level (run_id: its timing
    # run). q_source "model": the cold-cache ledger's bytes; "counters": counted bytes per level
    # (each against its own ceiling), from a trusted calibration and a replay paired with the
    # timing of the matching cache state; the columns after `efficiency` are null on model rows.
    "roofline_points": pa.schema(
        [
            ("run_id", _S),
            ("config_id", _S),
            ("cache_state", _S),
            ("machine_id", _S),
            ("ceilings_run_id", _S),
            ("sweep", _S),
            ("m", _I),
            ("n", _I),
            ("k", _I),
            ("dtype", _S),
            ("layout", _S),
            ("level", _S),
            ("q_source", _S),
            ("bytes", _I),
            ("footprint_bytes", _I),  # what the level was chosen from (model rows)
            ("flops", _I),
            ("work_unit", _S),  # of flops: FLOP, or OP (int8); intensity per B, rates per s
            ("intensity", _F),
            ("median_s", _F),
            ("achieved_flops_per_s", _F),
            ("compute_path", _S),
            ("peak_flops_per_s", _F),
            ("bandwidth_b_per_s", _F),
            ("attainable_flops_per_s", _F),
            ("bound_s", _F),
            ("limiter", _S),
            ("efficiency", _F),
            # clean (not disturbed, not noisy) and above its roof beyond noise
            # (vocabulary.ROOF_BEATEN_EFFICIENCY): a fault of the roof, not a feat of the point
            ("roof_beaten", _B),
            ("limiting_level", _S),  # the level whose B·I is smallest (counters rows)
            ("hierarchical_attainable_flops_per_s", _F),  # min(C, B_level·I_level over levels)
            ("hierarchical_bound_s", _F),
            ("pairing", _S),  # "flushed replay ↔ cold timing" | "no-flush replay ↔ warm timing"
            ("cache_control", _S),  # ncu --cache-control of the replay the bytes came from
            ("replay_mode", _S),
            ("counters_run_id", _S),
            ("flops_counted", _F),  # the counted FLOPs that admitted the point (F is 2MNK)
            ("calibration_ratio", _F),  # flops_counted / 2MNK
            ("noisy", _B),  # the GEMM point's flags, carried so a chart can mark the point
            ("disturbed", _B),
            ("disturbance", _S),
            # counters rows at the memory level: counted bytes / the cold-cache ledger's, and
            # "agrees" (within 1 %) | "model over-counts" | "model under-counts"
            ("counted_over_model", _F),
            ("model_vs_counted", _S),
            # a workload case's (sweep: the workload): its params as JSON, and the FLOPs its
            # implementation executes where they differ from the useful `flops`
            ("params", _S),
            ("executed_flops", _I),
            # the clock its samples ran at and the one its roof's samples ran at (MHz: the CPU's
            # measured clock, or the GPU's SM clock; median, lowest and highest); null unread
            ("clock_mhz", _F),
            ("clock_min_mhz", _F),
            ("clock_max_mhz", _F),
            ("roof_clock_mhz", _F),
            ("roof_clock_min_mhz", _F),
            ("roof_clock_max_mhz", _F),
            ("kind", _S),  # the timed point's: gemm or workload
            ("same_work_as", _S),  # a workload case's: the workload it does the same work as
            ("replay_clock_mhz", _F),  # a counted point's: the SM clock ncu saw in its replay
        ]
    ),
    # Derived: each imported operator (imported_operators) on the latest ceilings of its import
    # run's machine (roofline.imported): its roof, level, bound, efficiency and diagnosis (`cause`,
    # `next_step`, `predicted_s`); `unplaced` why one has none (no ledger, no such roof).
    "imported_points": pa.schema(
        [
            ("run_id", _S),
            ("machine_id", _S),
            ("ceilings_run_id", _S),
            ("index", _I),
            ("op", _S),
            ("dtype", _S),
            ("time_s", _F),
            ("flops", _I),
            ("bytes", _I),
            ("intensity", _F),
            ("level", _S),
            ("compute_path", _S),
            ("achieved_flops_per_s", _F),
            ("attainable_flops_per_s", _F),
            ("peak_flops_per_s", _F),
            ("bandwidth_b_per_s", _F),
            ("bound_s", _F),
            ("limiter", _S),
            ("efficiency", _F),
            ("cause", _S),
            ("next_step", _S),
            ("predicted_s", _F),
            ("unplaced", _S),
            ("levels", _S),  # JSON: per level bounded (bytes, intensity, attainable)
        ]
    ),
    # Derived: the critical path of an imported torch trace's own dependencies (roofline.
    # imported_timeline, imports.torch_timeline): one row per event on it, first to last
    # (`position`), with its lane ("cpu thread N", "gpu stream N"), `start_s` (from the trace's
    # first event) and `on_path_s` (the part of its time the path waited on); the path's own
    # `path_s` (first start to last end), `path_busy_s` and `path_waiting_s` on every row.
    "imported_critical_path": pa.schema(
        [
            *[("run_id", _S), ("machine_id", _S), ("position", _I), ("index", _I), ("op", _S)],
            *[("lane", _S), ("start_s", _F), ("on_path_s", _F)],
            *[("path_s", _F), ("path_busy_s", _F), ("path_waiting_s", _F)],
        ]
    ),
    # Derived, per ceilings run: each cache level's bytes, reported and measured (its sweeps' edge).
    "cache_capacities": pa.schema(
        [("run_id", _S), ("machine_id", _S), ("level", _S), ("bytes", _I), ("measured_bytes", _I)]
    ),
    # Derived, per ceilings run: the figures of the datasheet preset (config/devices.yaml) whose
    # match names the run's device; kind "compute" (name: a path, FLOP/s; an integer path, OP/s)
    # or "bandwidth" (name: a level, B/s), in `unit`.
    "datasheet_roofs": pa.schema(
        [
            ("run_id", _S),
            ("machine_id", _S),
            ("preset", _S),
            ("device", _S),
            ("source", _S),
            ("kind", _S),
            ("name", _S),
            ("value", _F),
            ("unit", _S),
        ]
    ),
    # Derived, per ceilings run and `stages` scenario: one row per stage (position: its order on
    # the critical-path schedule): ledger, own bound max(F/C, Q/B), start and finish (s), and the
    # scenario's critical-path and aggregate bounds on the run's measured ceilings.
    "stage_bounds": pa.schema(
        [
            ("run_id", _S),
            ("machine_id", _S),
            ("scenario", _S),
            ("stage", _S),
            ("position", _I),
            ("flops", _F),
            ("bytes", _F),
            ("start_s", _F),
            ("finish_s", _F),
            ("bound_s", _F),
            ("limiter", _S),
            ("on_critical_path", _B),
            ("critical_path_s", _F),
            ("aggregate_s", _F),
            ("compute_path", _S),
            ("peak_flops_per_s", _F),
            ("memory_level", _S),
            ("bandwidth_b_per_s", _F),
        ]
    ),
    # Derived: each timed point (a GEMM configuration or a workload case, in a cache state) that
    # got no Roofline point: `reason` a code (roofline.points.UNPLACED_REASONS), `why` a sentence.
    "unplaced_points": pa.schema(
        [(name, _S) for name in ("run_id", "machine_id", "sweep", "config_id", "cache_state")]
        + [("reason", _S), ("why", _S)]
    ),
    # Derived: why each Roofline point sits where it does (roofline.diagnosis, docs/diagnosis.md):
    # one row per roofline_points row. `key` its config_id, `kind` gemm, workload or counted;
    # `cause` one of roofline.diagnosis.CAUSES; `evidence` a JSON object of the figures that
    # decided it, each named by its column ("roofline_points.efficiency"); `next_step` a sentence;
    # `predicted_s` the bound after that step (s, rooflab.model), null where the ledgers give none.
    "point_diagnoses": pa.schema(
        [(name, _S) for name in ("run_id", "machine_id", "key", "kind", "cache_state", "level")]
        + [("limiter", _S), ("efficiency", _F), ("median_s", _F), ("cause", _S)]
        + [("evidence", _S), ("next_step", _S), ("predicted_s", _F), ("counters_run_id", _S)]
    ),
    # Derived: every run the roofline step read; the store replaces exactly these runs' rows.
    "roofline_inputs": pa.schema([("run_id", _S), ("machine_id", _S), ("kind", _S)]),
}
