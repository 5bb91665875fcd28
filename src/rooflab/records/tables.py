"""The tables a measuring job writes (docs/store.md), their columns and types, and the schema
version every `runs` row carries."""

from __future__ import annotations

import pyarrow as pa

from rooflab.records.columns import BOOL as _B
from rooflab.records.columns import DISTURBANCE as _DISTURBANCE
from rooflab.records.columns import FLOAT as _F
from rooflab.records.columns import INT as _I
from rooflab.records.columns import ROUNDS as _ROUNDS
from rooflab.records.columns import SAMPLED as _SAMPLED
from rooflab.records.columns import SM_CLOCK as _SM_CLOCK
from rooflab.records.columns import STOPPED as _STOPPED
from rooflab.records.columns import STRING as _S
from rooflab.records.columns import TIMESTAMP as _T
from rooflab.records.derived_tables import DERIVED

# 2: disturbance (per sample: run-queue wait, CPU time, involuntary switches, `disturbed`; per
# measurement: the verdict and what other processes used; per run: the quiet check).
# 3: the stopping rule (ci_rel_width, stop_reason), rounds (samples.round; a timed point's
# n_rounds and round_spread: its round medians' max / min - 1).
# 4: compute ceilings per instruction path (ceilings.isa, vector_bits: fp64_fma is the widest
# path, fp64_fma_avx2 a narrower one) and roofs a library GEMM beats (roof_beaten, its evidence).
# 5: each cache level's measured edge (ceilings.cache_bytes_measured).
SCHEMA_VERSION = 6  # 6: one timed_points table (kind gemm or workload) for two tables before

TABLES: dict[str, pa.Schema] = {
    "runs": pa.schema(
        [
            ("run_id", _S),
            ("schema_version", _I),
            ("kind", _S),
            ("sweep", _S),
            ("started_at", _T),
            ("ended_at", _T),
            ("host", _S),
            ("machine_id", _S),
            ("backend", _S),
            ("device_name", _S),
            ("device_uuid", _S),
            ("driver_version", _S),
            ("runtime_version", _S),
            ("library_versions", _S),
            ("git_commit", _S),
            ("git_dirty", _B),
            ("config_hash", _S),
            ("machine", _S),
            ("blas", _S),
            ("settings", _S),
            ("backend_requested", _S),  # auto, cpu or cuda, as configured
            ("backend_note", _S),  # why the backend differs from the one asked for (auto)
            # The quiet check before measuring: CPUs other processes used at its last look, how
            # long it waited for quiet, and the warning when the machine stayed busy.
            ("busy_other_cpus", _F),
            ("quiet_waited_s", _F),
            ("busy_warning", _S),
        ]
    ),
    "conditions": pa.schema(
        [
            ("run_id", _S),
            ("t", _T),
            ("phase", _S),
            ("config_id", _S),
            ("cpu_ghz_measured", _F),
            ("sm_clock_mhz", _F),
            ("mem_clock_mhz", _F),
            ("temp_c", _F),
            ("power_w", _F),
            ("throttle_reasons", _S),
            ("governor", _S),
            ("load_avg_1m", _F),
            ("gpu_other_processes", _I),  # processes other than rooflab with a GPU context
            ("unavailable", _S),
        ]
    ),
    "ceilings": pa.schema(
        [
            ("run_id", _S),
            ("kind", _S),
            ("name", _S),
            ("kernel", _S),
            ("dtype", _S),
            ("value", _F),
            ("unit", _S),
            ("method", _S),
            ("cache_state", _S),
            ("threads", _I),
            ("working_set_min_bytes", _I),
            ("working_set_max_bytes", _I),
            ("n_points", _I),
            ("cache_bytes_measured", _I),  # a cache's edge in this sweep; null: no fall seen
            # The instruction path of a CPU's kernels ("avx512", "avx2", "neon") and its vector
            # width; null where the backend has one unnamed path (a GPU's).
            ("isa", _S),
            ("vector_bits", _I),
            # A compute roof that a library GEMM of its dtype beats: a fault of the roof, with
            # both figures (experiments.compute_paths.beaten_roofs); null on bandwidth rows.
            ("roof_beaten", _B),
            ("roof_beaten_evidence", _S),
            *_SM_CLOCK,
            # The samples behind the value: the sweep point or FMA round that gave it, or the
            # library GEMM's configuration; how they stopped; FMA: rounds taken, best two's gap.
            ("config_id", _S),
            *_STOPPED,
            *_ROUNDS,
            *_DISTURBANCE,
        ]
    ),
    "ceiling_sweep": pa.schema(
        [
            ("run_id", _S),
            ("config_id", _S),  # its windows are the `samples` rows of this config_id
            ("kernel", _S),
            ("working_set_bytes", _I),
            ("threads", _I),
            ("value", _F),
            ("unit", _S),
            ("reps", _I),
            ("n_windows", _I),
            ("window_s", _F),
            ("iqr_ratio", _F),
            ("level", _S),
            *_STOPPED,
            *_DISTURBANCE,
        ]
    ),
    "samples": pa.schema(
        [
            ("run_id", _S),
            ("config_id", _S),
            ("cache_state", _S),
            ("sample_idx", _I),
            ("seconds", _F),
            ("clock_mhz", _F),
            # Work in the timed interval (amount / seconds: the sample's rate; FLOP or B).
            ("amount", _F),
            ("amount_unit", _S),
            # What the rest of the machine took from the sample, read around it: this process's
            # run-queue wait, CPU time and involuntary switches; `disturbed` ones are kept here
            # but left out of the statistics.
            ("wait_s", _F),
            ("cpu_s", _F),
            ("involuntary_switches", _I),
            ("disturbed", _B),
            ("round", _I),  # a timed point's round (experiments.rounds); null: one round
        ]
    ),
    # One row per timed point and cache state: a sweep's GEMM configuration (kind "gemm": m, n,
    # k, operand dtypes, layout) or a workload's case (kind "workload": `sweep` its name, `entry`
    # its factory, `params` as JSON, `same_work_as` the workload it reimplements). `flops` is F
    # (OP for int8), `bytes_model` the cold-cache Q, `executed_flops` the work done (null: F),
    # `footprint_bytes` the bytes its call touches (declared, else its arrays'; null: Q).
    "timed_points": pa.schema(
        [
            ("run_id", _S),
            ("config_id", _S),
            ("kind", _S),
            ("sweep", _S),
            ("m", _I),
            ("n", _I),
            ("k", _I),
            ("dtype", _S),
            ("x_dtype", _S),
            ("w_dtype", _S),
            ("y_dtype", _S),
            ("layout", _S),
            ("entry", _S),
            ("params", _S),
            ("same_work_as", _S),
            ("cache_state", _S),
            *_SAMPLED,
            *_ROUNDS,
            ("flops", _I),
            ("bytes_model", _I),
            ("executed_flops", _I),
            ("footprint_bytes", _I),
            ("achieved_flops_per_s", _F),
            ("noisy", _B),
            ("flush_method", _S),
            ("flush_bytes", _I),
            *_SM_CLOCK,
            ("threads", _I),  # the library's thread pool, set explicitly (null on a GPU)
            *_DISTURBANCE,
        ]
    ),
    # Measured stage overlap (docs/timelines.md): per scenario and schedule (serial; overlapped on
    # disjoint cores or GPU streams), its time beside the bound it cannot beat (`bound_kind`) and
    # both bounds, on the ceilings (C, B) the stages were sized from. `beats_bound`: faster than
    # its bound by more than the noise, a bug in a ledger or a ceiling.
    "stage_schedules": pa.schema(
        [
            ("run_id", _S),
            ("config_id", _S),
            ("scenario", _S),
            ("schedule", _S),
            *_SAMPLED,
            ("bound_s", _F),
            ("bound_kind", _S),
            ("critical_path_bound_s", _F),
            ("aggregate_bound_s", _F),
            ("beats_bound", _B),
            ("compute_path", _S),
            ("peak_flops_per_s", _F),
            ("memory_level", _S),
            ("bandwidth_b_per_s", _F),
            ("ceilings_run_id", _S),
            ("noisy", _B),
            *_DISTURBANCE,
        ]
    ),
    # One row per stage of a measured scenario: its ledger (F, Q), its time alone on its lane
    # (`placement`: cpu 0, stream 1), its bound max(F/C, Q/B) and limiter, `beats_bound`.
    "stage_timings": pa.schema(
        [
            ("run_id", _S),
            ("config_id", _S),
            ("scenario", _S),
            ("stage", _S),
            ("position", _I),
            ("after", _S),
            ("kernel", _S),
            ("placement", _S),
            ("flops", _I),
            ("bytes", _I),
            *_SAMPLED,
            ("bound_s", _F),
            ("limiter", _S),
            ("beats_bound", _B),
            ("noisy", _B),
            *_DISTURBANCE,
        ]
    ),
    # A decode-like step timed per mode (docs/timelines.md: eager, graph, fused). step_s: host
    # wall time per step, launch to synchronise (the samples' median); busy_s: the kernels' own
    # times summed in one instrumented step (`busy_method`: how); gap_s = step_s - busy_s;
    # kernels: launches (calls) per step; flops and bytes: the step's ledger (cold-cache bytes).
    # A profile another tool recorded (docs/imports.md), read by an import run (runs.kind
    # "import", runs.sweep its name in the config): where it came from, one row per run.
    # `recorded_at` ISO 8601 UTC as the profile says (null: it does not); `settings` JSON (ncu:
    # replay mode, cache and clock control); `notes` JSON list of lines (metrics missing, ...).
    "imported_profiles": pa.schema(
        [
            ("run_id", _S),
            ("name", _S),
            ("file", _S),
            ("sha256", _S),
            ("tool", _S),
            ("tool_version", _S),
            ("device", _S),
            ("recorded_at", _S),
            ("settings", _S),
            ("notes", _S),
            ("operators", _I),
        ]
    ),
    # One row per operator (torch: a CPU op, or a GPU kernel with its launching op) or kernel
    # (ncu) of an imported profile (rooflab.imports.OPERATOR_COLUMNS): `index` its order, `time_s`
    # its own duration as the profile measured it, `flops` (F; null: no ledger) and `bytes` (Q)
    # with their sources; `parent` the index of the operator it runs inside (torch: its enclosing
    # op, or a kernel's launching op); `nested` inside another (its time is in its parent's);
    # `input_dims` JSON; `counted` JSON (ncu: bytes per level, FLOPs per path, replay clock).
    "imported_operators": pa.schema(
        [
            ("run_id", _S),
            ("index", _I),
            ("op", _S),
            ("kind", _S),
            ("parent", _I),
            ("nested", _B),
            ("work_in_children", _B),  # its work is counted in the operators inside it
            ("input_dims", _S),
            ("dtype", _S),
            ("start_s", _F),
            ("time_s", _F),
            ("launch_s", _F),  # a GPU kernel's launch call's start (s, as start_s)
            ("thread", _S),
            ("flops", _I),
            ("flops_source", _S),
            ("bytes", _I),
            ("q_source", _S),
            ("ledger", _S),
            ("counted", _S),
        ]
    ),
    "timeline_steps": pa.schema(
        [
            ("run_id", _S),
            ("config_id", _S),
            ("scenario", _S),
            ("mode", _S),
            ("layers", _I),
            ("hidden", _I),
            ("dtype", _S),
            ("kernels", _I),
            *_SAMPLED,
            ("step_s", _F),
            ("busy_s", _F),
            ("gap_s", _F),
            ("flops", _I),
            ("bytes", _I),
            ("busy_method", _S),
            ("noisy", _B),
            *_DISTURBANCE,
        ]
    ),
    # The per-kernel timeline of one instrumented step per mode: each kernel (call) in launch
    # order, its start and end (s) from the step's first launch, and its own duration.
    "timeline_kernels": pa.schema(
        [
            ("run_id", _S),
            ("config_id", _S),
            ("scenario", _S),
            ("mode", _S),
            ("position", _I),
            ("layer", _I),
            ("kernel", _S),
            ("start_s", _F),
            ("end_s", _F),
            ("duration_s", _F),
        ]
    ),
    "correctness": pa.schema(
        [
            ("run_id", _S),
            ("config_id", _S),
            ("sweep", _S),
            ("m", _I),
            ("n", _I),
            ("k", _I),
            ("dtype", _S),
            ("layout", _S),
            ("metric", _S),
            ("error", _F),
            ("tolerance", _F),
            ("passed", _B),
            ("rows_checked", _I),
            ("cols_checked", _I),
            ("detail", _S),
        ]
    ),
    # Hardware counters (docs/counters.md): one row per metric per kernel (scope "kernel"), per
    # metric over the profiled range (scope "range": the sum of a counter), per derived figure
    # (scope "derived", e.g. perf's LLC-miss byte estimate, labelled in `reason`), per metric a
    # chip lacks (status "missing") or the tool's output lacks (status "not in output"), and one
    # status row per profile with `metric` null: status
    # "ok", "partial", "unavailable" (the tool or its counters could not be used; `reason` has
    # the tool's own words) or "skipped". Every setting that changes the experiment is on every
    # row; `metrics_requested` is the comma-joined list passed to the tool.
    "counters": pa.schema(
        [
            ("run_id", _S),
            ("config_id", _S),
            ("kernel_id", _I),
            ("kernel", _S),
            ("scope", _S),
            ("metric", _S),
            ("value", _F),
            ("unit", _S),
            ("status", _S),
            ("reason", _S),
            ("tool", _S),
            ("tool_version", _S),
            ("chip", _S),
            ("cache_control", _S),
            ("clock_control", _S),
            ("replay_mode", _S),
            ("nvtx_include", _S),
            ("metrics_requested", _S),
        ]
    ),
    # Counted FLOPs of a compute path against the useful work, per configuration, replay (cache
    # control) and path; only `trusted` counts reach a Roofline point. The pairing columns name
    # the timing the replay pairs with, or say in `pairing_error` why there is none.
    "counter_calibration": pa.schema(
        [
            ("run_id", _S),
            ("config_id", _S),
            ("cache_control", _S),
            ("compute_path", _S),
            ("m", _I),
            ("n", _I),
            ("k", _I),
            ("counted_flops", _F),
            ("expected_flops", _I),
            ("ratio", _F),
            ("tolerance", _F),
            ("trusted", _B),
            ("reason", _S),
            ("formula", _S),
            ("hfma_flop_per_inst", _F),
            ("tensor_flop_per_op", _F),
            ("pairing", _S),
            ("timing_run_id", _S),
            ("timing_cache_state", _S),
            ("timing_median_s", _F),
            ("pairing_error", _S),
        ]
    ),
    **DERIVED,
}

DERIVED_TABLES = tuple(DERIVED)
MEASURED_TABLES = tuple(name for name in TABLES if name not in DERIVED_TABLES)


# The store's views of timed_points, one per kind, each with the columns that kind's own table had
# before schema 6, so every documented query of gemm_points and workload_points keeps working. A
# run folder written before schema 6 holds those tables, read back as timed_points.
_ONLY = {
    "gemm": ("m", "n", "k", "x_dtype", "w_dtype", "y_dtype", "layout"),
    "workload": ("entry", "params", "same_work_as", "executed_flops"),
}
POINT_VIEWS: dict[str, tuple[str, list[str]]] = {
    f"{kind}_points": (
        kind,
        [
            c
            for c in TABLES["timed_points"].names
            if c != "kind" and not any(c in only for k, only in _ONLY.items() if k != kind)
        ],
    )
    for kind in _ONLY
}


def timed_rows(tables: dict) -> list[dict]:
    """A timing run's points (its tables as read_run gives them): a sweep's GEMM configurations,
    or a workload's cases."""
    return tables["timed_points"].to_pylist() if "timed_points" in tables else []
