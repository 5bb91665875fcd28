"""The views of measured schedules (docs/timelines.md): stage overlap against its bounds, and the
timeline of a decode-like step per mode. Each comment says what one row is."""

# The step's Roofline bound: its FLOPs on the FMA chains of its dtype, its bytes at the smallest
# cache level of the machine's newest ceilings run that holds them (cache_capacities, as a warm
# Roofline point is judged; where the roofline step has not derived them, the level whose measured
# plateau reached that working set), else the memory; max(F/C, Q/B) in s.
_STEP_BOUND = """
    SELECT t.run_id, t.mode,
           greatest(t.flops / c.value, t.bytes / b.value) AS bound_s,
           c.name AS compute_path, c.value AS peak_flops_per_s,
           b.name AS memory_level, b.value AS bandwidth_b_per_s
    FROM steps AS t
    JOIN latest_ceilings AS c
      ON c.machine_id = t.machine_id AND c.backend = t.backend AND c.kind = 'compute'
     AND c.name = t.dtype || '_fma'
    JOIN latest_ceilings AS b
      ON b.machine_id = t.machine_id AND b.backend = t.backend AND b.kind = 'bandwidth'
     AND b.name = coalesce(
            (SELECT arg_min(k.level, k.bytes) FROM latest_cache_capacities AS k
             WHERE k.machine_id = t.machine_id AND k.backend = t.backend AND k.bytes >= t.bytes),
            (SELECT arg_min(p.name, p.working_set_max_bytes) FROM latest_ceilings AS p
             WHERE p.machine_id = t.machine_id AND p.backend = t.backend
               AND p.kind = 'bandwidth' AND p.working_set_max_bytes >= t.bytes
               AND p.name NOT IN ('DRAM', 'HBM')),
            CASE WHEN t.backend = 'cuda' THEN 'HBM' ELSE 'DRAM' END)
    QUALIFY row_number() OVER (
        PARTITION BY t.run_id, t.mode ORDER BY c.value DESC, b.value DESC) = 1
"""


def _newest_per_scenario(table: str) -> str:
    """The rows of `table` (alias `x`) from each machine, backend and scenario's newest run, with
    the run's machine_id, backend and started_at."""
    return f"""
        SELECT r.machine_id, r.backend, r.started_at, x.*
        FROM {table} AS x JOIN runs AS r USING (run_id)
        QUALIFY dense_rank() OVER (
            PARTITION BY r.machine_id, r.backend, x.scenario
            ORDER BY r.started_at DESC, x.run_id DESC
        ) = 1
    """


TIMELINE_VIEWS_SQL = {
    # Per machine, backend and measurable stages scenario (its newest run): the measured serial
    # and overlapped times (s) beside the serial schedule's critical-path bound and the aggregate
    # bound (s), overlap_speedup (serial / overlapped), each time over its own bound, the C and B
    # the stages were sized from and bounded on, `beats_bound` (a schedule faster than its bound:
    # a ledger or a ceiling is wrong), `disturbed`, and `says`, the article's sentence.
    "stage_overlap": f"""
        WITH latest AS (
            {_newest_per_scenario("stage_schedules")}
        ),
        pairs AS (
            SELECT a.machine_id, a.backend, a.scenario, a.run_id, a.started_at,
                   a.median_s AS serial_s, b.median_s AS overlapped_s,
                   a.critical_path_bound_s, a.aggregate_bound_s,
                   a.median_s / b.median_s AS overlap_speedup,
                   a.median_s / a.critical_path_bound_s AS serial_over_bound,
                   b.median_s / a.aggregate_bound_s AS overlapped_over_bound,
                   a.beats_bound OR b.beats_bound AS beats_bound,
                   coalesce(a.disturbed, false) OR coalesce(b.disturbed, false) AS disturbed,
                   a.compute_path, a.peak_flops_per_s, a.memory_level, a.bandwidth_b_per_s,
                   a.ceilings_run_id
            FROM latest AS a JOIN latest AS b
              ON a.run_id = b.run_id AND a.scenario = b.scenario
             AND a.schedule = 'serial' AND b.schedule = 'overlapped'
        )
        SELECT *,
               printf('serial %.3g ms against its critical-path bound %.3g ms; overlapped '
                      || '%.3g ms against the aggregate bound %.3g ms: ',
                      serial_s * 1e3, critical_path_bound_s * 1e3, overlapped_s * 1e3,
                      aggregate_bound_s * 1e3)
               || CASE WHEN beats_bound
                       THEN 'FASTER THAN A BOUND: a ledger or a ceiling is wrong'
                       WHEN overlap_speedup > 1
                       THEN printf('overlapping saves %.3g ms (%.3gx)',
                                   (serial_s - overlapped_s) * 1e3, overlap_speedup)
                       ELSE printf('overlapping gains nothing here (%.3gx)', overlap_speedup)
                  END AS says
        FROM pairs
    """,
    # Per machine, backend, scenario and stage (the scenario's newest run): the stage timed alone
    # on its lane (placement: its core or stream), its ledger (flops, bytes), median and
    # quartiles (s), its bound max(F/C, Q/B) (s) and limiter, and `beats_bound`; beside them its
    # nominal ledger (nominal_flops, nominal_bytes: the scenario's stage as the stage-bounds chart
    # draws it, latest_stage_bounds on the newest ceilings run `bounds_run_id`), the ceilings run
    # the stages were sized from (`ceilings_run_id`), and `resized`: the ledger as run differs
    # from the nominal one by more than 1 % (a stream stage runs whole passes over its working
    # set, an fma stage whole iterations; or the stages were sized on other ceilings).
    "latest_stage_timings": f"""
        WITH timings AS (
            {_newest_per_scenario("stage_timings")}
        ),
        sized AS (SELECT DISTINCT run_id, scenario, ceilings_run_id FROM stage_schedules)
        SELECT t.*, z.ceilings_run_id, b.run_id AS bounds_run_id,
               b.flops AS nominal_flops, b.bytes AS nominal_bytes,
               coalesce(abs(t.flops - b.flops) > 0.01 * b.flops
                        OR abs(t.bytes - b.bytes) > 0.01 * b.bytes, false) AS resized
        FROM timings AS t
        LEFT JOIN sized AS z USING (run_id, scenario)
        LEFT JOIN latest_stage_bounds AS b
          ON b.machine_id = t.machine_id AND b.backend = t.backend
         AND b.scenario = t.scenario AND b.stage = t.stage
    """,
    # Per machine, backend, timeline scenario and mode (the scenario's newest run): the step's
    # wall time (step_s, launch to synchronise), busy_s (the kernels' own times), gap_s and the
    # gap's share of the step, kernels per step, the step's ledger (flops, bytes) and its
    # Roofline bound (bound_s on the dtype's FMA chains and the level its bytes fit in, with
    # that C and B), step_over_bound, and `says` ("eager: 1.2 ms per step, 62 % in gaps").
    "timeline_modes": f"""
        WITH steps AS (
            {_newest_per_scenario("timeline_steps")}
        )
        SELECT s.machine_id, s.backend, s.scenario, s.mode, s.run_id, s.started_at, s.layers,
               s.hidden, s.dtype, s.kernels, s.n_samples, s.step_s, s.p25_s, s.p75_s, s.busy_s,
               s.gap_s, s.gap_s / s.step_s AS gap_fraction, s.flops, s.bytes, s.busy_method,
               s.noisy, coalesce(s.disturbed, false) AS disturbed, s.disturbance,
               b.bound_s, s.step_s / b.bound_s AS step_over_bound, b.compute_path,
               b.peak_flops_per_s, b.memory_level, b.bandwidth_b_per_s,
               printf('%s: %.3g μs per step in %d kernels, ', s.mode, s.step_s * 1e6, s.kernels)
               || coalesce(printf('%.3g μs busy, ', s.busy_s * 1e6)
                           || CASE WHEN s.gap_s > 0
                                   THEN printf('%.0f %% of the step in gaps',
                                               100 * s.gap_s / s.step_s)
                                   ELSE 'no gap beyond the noise' END,
                           'busy time not measured')
               || coalesce(printf('; %.3gx its Roofline bound', s.step_s / b.bound_s), '')
                   AS says
        FROM steps AS s LEFT JOIN ({_STEP_BOUND}) AS b USING (run_id, mode)
    """,
    # Per machine, backend, timeline scenario, mode and kernel (the scenario's newest run): the
    # per-kernel timeline of one instrumented step, start_s and end_s from its first launch (s).
    "latest_timeline_kernels": f"""
        {_newest_per_scenario("timeline_kernels")}
    """,
}
