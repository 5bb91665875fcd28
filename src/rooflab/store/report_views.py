"""The report's views: each is what one part of the report draws, per machine and backend.
`rooflab query "SELECT * FROM <view> WHERE machine_id = '…'"` gives a chart's rows; the report
reads them through store.read_view and holds no SQL of its own."""

# A GEMM point's disturbance as the charts show it: the reason, "no", or "not judged" where the
# flag is null (a run recorded before rooflab judged disturbance).
NOT_JUDGED = "not judged (a run of an older rooflab)"


def _disturbance_text(alias: str) -> str:
    return (
        f"CASE WHEN {alias}.disturbed THEN coalesce({alias}.disturbance, 'yes') "
        f"WHEN NOT {alias}.disturbed THEN 'no' ELSE '{NOT_JUDGED}' END"
    )


# A point whose efficiency (achieved over attainable) is below this is far below its roof: its
# time is explained by neither roof (latency, launch overhead, serialization).
FAR_BELOW_ROOF = 0.01

# Condition readings per machine are cut into this many time buckets over their whole span, so a
# single run keeps every reading and a long history stays a few thousand rows.
TIME_BUCKETS = 1500

_NEWEST_CHECKS = """
    SELECT r.machine_id, r.backend, c.run_id, c.config_id
    FROM correctness AS c JOIN runs AS r USING (run_id)
    QUALIFY row_number() OVER (
        PARTITION BY r.machine_id, r.backend, c.config_id ORDER BY r.started_at DESC, c.run_id DESC
    ) = 1
"""

# Per machine and backend, its newest ceilings run: what the derived tables of a ceilings run
# (cache_capacities, datasheet_roofs, stage_bounds) are read for.
_LATEST_CEILINGS_RUN = """
    SELECT machine_id, backend, run_id FROM runs
    WHERE kind = 'ceilings'
    QUALIFY row_number() OVER (
        PARTITION BY machine_id, backend ORDER BY started_at DESC, run_id DESC
    ) = 1
"""

REPORT_VIEWS_SQL = {
    # One row per machine and backend: host, device_name, the newest ceilings run
    # (ceilings_run_id) and its machine description (JSON), the start of that run and of the newest
    # run; `position` orders them as the report does: machines with ceilings first, newest first.
    "report_scopes": """
        SELECT *, row_number() OVER (
            ORDER BY last_ceilings DESC NULLS LAST, last_run DESC, machine_id, backend
        ) AS position
        FROM (
            SELECT machine_id, backend,
                   arg_max(host, started_at) AS host,
                   arg_max(device_name, started_at) AS device_name,
                   arg_max(run_id, started_at) FILTER (WHERE kind = 'ceilings') AS ceilings_run_id,
                   arg_max(machine, started_at) FILTER (WHERE kind = 'ceilings') AS machine,
                   max(started_at) FILTER (WHERE kind = 'ceilings') AS last_ceilings,
                   max(started_at) AS last_run
            FROM runs
            GROUP BY machine_id, backend
        )
    """,
    # The summary's ceilings: per machine and backend, the best kernel per bandwidth level and
    # every compute path of the latest ceilings run (value in `unit`: B/s, FLOP/s, or OP/s for an
    # integer path such as int8_tensor), with the
    # windows its value used (n_windows; iqr_ratio of their rates) and, for FMA paths, the lowest
    # and highest median of its rounds (rounds_min, rounds_max, in `unit`); for a bandwidth level,
    # read_value is the `read` kernel's ceiling on it (B/s; null where no read kernel ran), which
    # sits below `value` where another kernel was faster on the level. isa and vector_bits: the
    # instruction path of a CPU's kernels (fp64_fma the widest path, fp64_fma_avx2 a narrower
    # one); roof_beaten: a library GEMM of the roof's dtype beat it, roof_beaten_evidence says
    # which and both figures (a fault of the roof).
    "ceiling_summary": """
        WITH ceiling AS (
            SELECT machine_id, backend, run_id, config_id, kind, name, kernel, dtype, value, unit,
                   working_set_min_bytes, working_set_max_bytes, n_points,
                   coalesce(disturbed, false) AS disturbed, disturbance, isa, vector_bits,
                   roof_beaten, roof_beaten_evidence
            FROM latest_ceilings
            QUALIFY row_number() OVER (
                PARTITION BY machine_id, backend, kind, name ORDER BY value DESC
            ) = 1
        ),
        windows AS (  -- the windows a value used: the undisturbed ones, or all where none is
            SELECT run_id, config_id, count(*) AS n_windows,
                   median(amount / seconds) AS median_rate,
                   (quantile_cont(amount / seconds, 0.75) - quantile_cont(amount / seconds, 0.25))
                       / median(amount / seconds) AS iqr_ratio
            FROM (
                SELECT *, count(*) FILTER (WHERE NOT coalesce(disturbed, false))
                              OVER (PARTITION BY run_id, config_id) AS n_clean
                FROM samples
                WHERE run_id IN (SELECT run_id FROM ceiling) AND amount IS NOT NULL
            )
            WHERE NOT coalesce(disturbed, false) OR n_clean = 0
            GROUP BY run_id, config_id
        ),
        rounds AS (  -- fma/<dtype>/round<i>: the spread of the rounds' medians
            SELECT run_id, regexp_replace(config_id, '/round[0-9]+$', '') AS family,
                   min(median_rate) AS rounds_min, max(median_rate) AS rounds_max
            FROM windows WHERE regexp_matches(config_id, '/round[0-9]+$')
            GROUP BY ALL
        )
        SELECT c.machine_id, c.backend, c.kind, c.name, c.kernel, c.dtype, c.value, c.unit,
               c.working_set_min_bytes, c.working_set_max_bytes, c.n_points, w.n_windows,
               w.iqr_ratio, r.rounds_min, r.rounds_max, c.disturbed, c.disturbance,
               k.read_value, c.isa, c.vector_bits, c.roof_beaten, c.roof_beaten_evidence
        FROM ceiling AS c
        LEFT JOIN windows AS w USING (run_id, config_id)
        LEFT JOIN rounds AS r
            ON r.run_id = c.run_id
           AND r.family = regexp_replace(c.config_id, '/round[0-9]+$', '')
        LEFT JOIN (
            SELECT machine_id, backend, name, max(value) AS read_value
            FROM latest_ceilings WHERE kind = 'bandwidth' AND kernel = 'read'
            GROUP BY machine_id, backend, name
        ) AS k
            ON c.kind = 'bandwidth' AND k.machine_id = c.machine_id AND k.backend = c.backend
           AND k.name = c.name
    """,
    # Per machine and backend, the configurations whose newest correctness check failed: one row
    # per failed metric (error and tolerance, relative).
    "failed_checks": f"""
        SELECT n.machine_id, n.backend, c.config_id, c.metric, c.error, c.tolerance, c.run_id
        FROM correctness AS c JOIN ({_NEWEST_CHECKS}) AS n USING (run_id, config_id)
        WHERE NOT c.passed
    """,
    # The Roofline's points: per machine, backend, configuration and cache state, the newest
    # run's model-bytes point (roofline_points columns; `work_unit` FLOP, or OP for an int8 GEMM:
    # intensity in work_unit/B, rates in work_unit/s, the *_flops_* columns too; times s),
    # with the timing's flags (noisy, disturbed, `judged` false for runs of an older rooflab,
    # disturbance as text), iqr_ratio, and the clock range of its samples in MHz; started_at, the
    # start of its run; above_roof, whether it beat its own roof (achieved over attainable,
    # efficiency > 1); far_below_roof, whether its efficiency is under FAR_BELOW_ROOF (1 %): a
    # time neither roof explains; its diagnosis's `cause` and `next_step` (point_diagnoses). A
    # configuration whose newest check failed is not drawn, even if an older run timed it.
    "latest_model_points": f"""
        WITH latest AS (
            SELECT p.*, r.backend, r.started_at
            FROM roofline_points AS p JOIN runs AS r USING (run_id)
            WHERE coalesce(p.q_source, 'model') = 'model'
              AND NOT EXISTS (
                  SELECT 1 FROM failed_checks AS f
                  WHERE f.machine_id = p.machine_id AND f.backend = r.backend
                    AND f.config_id = p.config_id)
            QUALIFY row_number() OVER (
                PARTITION BY p.machine_id, r.backend, p.config_id, p.cache_state
                ORDER BY r.started_at DESC, p.run_id DESC
            ) = 1
        )
        SELECT l.machine_id, l.backend, l.config_id, l.cache_state, l.sweep, l.m, l.n, l.k,
               l.dtype, l.layout, l.level, l.intensity, l.median_s, l.achieved_flops_per_s,
               l.attainable_flops_per_s, l.efficiency, l.limiter, l.bound_s, l.run_id,
               l.compute_path, l.q_source, l.started_at, l.params, l.executed_flops,
               coalesce(l.work_unit, 'FLOP') AS work_unit,
               l.achieved_flops_per_s > l.attainable_flops_per_s AS above_roof,
               l.efficiency < {FAR_BELOW_ROOF} AS far_below_roof,
               coalesce(g.noisy, false) AS noisy,
               coalesce(g.disturbed, false) AS disturbed,
               g.disturbed IS NOT NULL AS judged,
               {_disturbance_text("g")} AS disturbance,
               (g.p75_s - g.p25_s) / g.median_s AS iqr_ratio,
               c.clock_min_mhz, c.clock_max_mhz, d.cause, d.next_step
        FROM latest AS l
        LEFT JOIN timed_points AS g USING (run_id, config_id, cache_state)
        LEFT JOIN point_diagnoses AS d
          ON d.run_id = l.run_id AND d.key = l.config_id AND d.cache_state = l.cache_state
         AND d.level = l.level AND d.kind <> 'counted'
        LEFT JOIN (
            SELECT run_id, config_id, cache_state, min(clock_mhz) AS clock_min_mhz,
                   max(clock_mhz) AS clock_max_mhz
            FROM samples GROUP BY run_id, config_id, cache_state
        ) AS c USING (run_id, config_id, cache_state)
    """,
    # The time-vs-params charts of your workloads: per machine, backend, workload (a
    # latest_model_points row with params), case and cache state, one row per param that varies
    # across the workload's cases (a workload of one case has none): `param`, its `value`
    # (DOUBLE; null where it is no number) and `value_text`, `series` (the dtype and the case's
    # other varying params, "fp32 · steps=100"), median_s and bound_s (s), efficiency.
    "workload_param_points": """
        WITH cases AS (
            SELECT machine_id, backend, sweep AS workload, config_id, dtype, cache_state,
                   median_s, bound_s, efficiency, run_id, params,
                   unnest(json_keys(params)) AS param
            FROM latest_model_points
            WHERE params IS NOT NULL AND json_valid(params)
        ),
        valued AS (
            SELECT *, json_extract_string(
                       params, '/' || replace(replace(param, '~', '~0'), '/', '~1')
                   ) AS value_text
            FROM cases
        ),
        varying AS (
            SELECT * FROM valued
            QUALIFY count(DISTINCT value_text) OVER (
                PARTITION BY machine_id, backend, workload, param) > 1
        )
        SELECT machine_id, backend, workload, param, try_cast(value_text AS DOUBLE) AS value,
               value_text, dtype || coalesce(' · ' || others, '') AS series, dtype, cache_state,
               config_id, median_s, bound_s, efficiency, run_id
        FROM (
            SELECT a.*, string_agg(b.param || '=' || b.value_text, ', ' ORDER BY b.param)
                            AS others
            FROM varying AS a
            LEFT JOIN varying AS b
              ON b.machine_id = a.machine_id AND b.backend = a.backend
             AND b.config_id = a.config_id AND b.cache_state = a.cache_state
             AND b.param <> a.param
            GROUP BY ALL
        )
    """,
    # The hierarchical Roofline's points (q_source = counters): per machine, backend,
    # configuration and cache state, every level of the newest timing run's newest counters run,
    # with the model's bytes beside the counted ones and the timing's disturbance.
    "latest_counted_points": f"""
        WITH latest AS (
            SELECT p.*, r.backend, r.started_at
            FROM roofline_points AS p JOIN runs AS r USING (run_id)
            WHERE p.q_source = 'counters'
              AND NOT EXISTS (
                  SELECT 1 FROM failed_checks AS f
                  WHERE f.machine_id = p.machine_id AND f.backend = r.backend
                    AND f.config_id = p.config_id)
            QUALIFY dense_rank() OVER (
                PARTITION BY p.machine_id, r.backend, p.config_id, p.cache_state
                ORDER BY r.started_at DESC, p.run_id DESC, p.counters_run_id DESC
            ) = 1
        )
        SELECT l.machine_id, l.backend, l.config_id, l.cache_state, l.sweep, l.m, l.n, l.k,
               l.dtype, l.level, l.bytes, l.intensity, l.median_s, l.achieved_flops_per_s,
               l.attainable_flops_per_s, l.efficiency, l.limiter, l.limiting_level,
               l.compute_path, l.pairing, l.cache_control, l.replay_mode, l.q_source,
               l.calibration_ratio, l.counters_run_id, l.run_id, g.bytes_model,
               l.counted_over_model, l.model_vs_counted, coalesce(l.work_unit, 'FLOP') AS work_unit,
               coalesce(g.disturbed, false) AS disturbed, {_disturbance_text("g")} AS disturbance
        FROM latest AS l
        LEFT JOIN timed_points AS g USING (run_id, config_id, cache_state)
    """,
    # The model-vs-counted chart and table: per machine, backend, configuration and cache state
    # (newest counted points), at the memory level, the cold-cache ledger's bytes, the counted
    # bytes (B), counted / model, and the direction ("agrees" within 1 %, "model over-counts",
    # "model under-counts"), as the roofline step worked them out.
    "model_vs_counted_bytes": """
        SELECT machine_id, backend, config_id, cache_state, level, bytes_model,
               bytes AS bytes_counted, counted_over_model AS ratio, model_vs_counted AS direction
        FROM latest_counted_points
        WHERE model_vs_counted IS NOT NULL
    """,
    # The ceiling sweep chart's cache marks: per machine and backend (its newest ceilings run),
    # the data-cache bytes per level (L1, L2, ...) this process could fill, as reported
    # (`bytes`) and as its sweeps measured them (`measured_bytes`: their edge; null: none seen).
    "latest_cache_capacities": f"""
        SELECT l.machine_id, l.backend, c.run_id, c.level, c.bytes, c.measured_bytes
        FROM cache_capacities AS c JOIN ({_LATEST_CEILINGS_RUN}) AS l USING (run_id)
    """,
    # The Roofline's dashed datasheet roofs: per machine and backend (its newest ceilings run),
    # the figures of the device preset matching its device name: kind "compute" (name: the path,
    # value in `unit`: FLOP/s, or OP/s for an integer path such as int8) or "bandwidth" (name:
    # the level, B/s), with the preset and its source.
    "latest_datasheet_roofs": f"""
        SELECT l.machine_id, l.backend, d.run_id, d.preset, d.device, d.source, d.kind, d.name,
               d.value, d.unit
        FROM datasheet_roofs AS d JOIN ({_LATEST_CEILINGS_RUN}) AS l USING (run_id)
    """,
    # The stage-bounds charts: per machine and backend (its newest ceilings run), each `stages`
    # scenario of the config on those measured ceilings, one row per stage in schedule order
    # (position): its own bound, start and finish on the critical-path schedule (s), whether it
    # is on the critical path, and the scenario's critical-path and aggregate bounds (s).
    "latest_stage_bounds": f"""
        SELECT l.machine_id, l.backend, s.* EXCLUDE (machine_id)
        FROM stage_bounds AS s JOIN ({_LATEST_CEILINGS_RUN}) AS l USING (run_id)
    """,
    # Per machine and backend, the newest counters run of each sweep: how each profile went
    # (what = 'status': the tool's status and reason, n profiles) and its calibrations (what =
    # 'calibration': trusted, untrusted or unpaired, with the reason, n replays).
    "counters_state": """
        WITH latest AS (
            SELECT run_id, machine_id, backend, sweep FROM runs
            WHERE kind = 'counters'
            QUALIFY row_number() OVER (
                PARTITION BY machine_id, backend, sweep ORDER BY started_at DESC, run_id DESC
            ) = 1
        )
        SELECT l.machine_id, l.backend, 'status' AS what, l.sweep, c.tool, c.status, c.reason,
               count(*) AS n
        FROM counters AS c JOIN latest AS l USING (run_id)
        WHERE c.metric IS NULL
        GROUP BY ALL
        UNION ALL
        SELECT l.machine_id, l.backend, 'calibration', l.sweep, 'ncu',
               CASE WHEN NOT k.trusted THEN 'untrusted'
                    WHEN k.pairing IS NULL THEN 'unpaired' ELSE 'trusted' END,
               CASE WHEN NOT k.trusted THEN k.reason
                    WHEN k.pairing IS NULL THEN k.pairing_error END,
               count(*)
        FROM counter_calibration AS k JOIN latest AS l USING (run_id)
        GROUP BY ALL
    """,
    # The ceiling sweep chart: per ceilings run, each kernel's bandwidth (GB/s) at each working
    # set (B), with the plateau level the point belongs to. Not the host link's copies
    # (config_id host/...): one buffer each, no working set of a cache.
    "ceiling_sweep_points": """
        SELECT run_id, kernel, working_set_bytes, value / 1e9 AS gb_per_s, level, iqr_ratio
        FROM ceiling_sweep
        WHERE config_id NOT LIKE 'host/%'
    """,
    # Per ceilings run, the working-set range (lo, hi, and mid between them, B) each bandwidth
    # ceiling was taken over: the shaded plateaus of the ceiling sweep chart.
    "bandwidth_plateaus": """
        SELECT run_id, name AS level, min(working_set_min_bytes) AS lo,
               max(working_set_max_bytes) AS hi,
               sqrt(min(working_set_min_bytes) * max(working_set_max_bytes)) AS mid
        FROM ceilings
        WHERE kind = 'bandwidth' AND working_set_min_bytes IS NOT NULL
        GROUP BY run_id, name
    """,
    # The sample distributions: per machine, backend, configuration and cache state of the
    # newest run, the quantiles (s) of the samples its statistics used (the undisturbed ones, or
    # all where every one was disturbed), its verdict (`spread`: disturbed, noisy or steady), the
    # samples left out, and the disturbance as text; `position` orders the boxes as the report
    # draws them (sweep, dtype, layout, n, k, m, cache state).
    "sample_quantiles": f"""
        WITH latest AS (
            SELECT r.machine_id, r.backend, g.run_id, g.config_id, g.cache_state, g.noisy,
                   g.sweep, g.dtype, g.layout, g.n, g.k, g.m,
                   coalesce(g.disturbed, false) AS disturbed,
                   {_disturbance_text("g")} AS disturbance
            FROM gemm_points AS g JOIN runs AS r USING (run_id)
            QUALIFY row_number() OVER (
                PARTITION BY r.machine_id, r.backend, g.config_id, g.cache_state
                ORDER BY r.started_at DESC, g.run_id DESC
            ) = 1
        ),
        counted AS (  -- per point, its disturbed and clean samples (a group, not a window)
            SELECT s.run_id, s.config_id, s.cache_state,
                   count(*) FILTER (WHERE coalesce(s.disturbed, false)) AS n_disturbed_samples,
                   count(*) FILTER (WHERE NOT coalesce(s.disturbed, false)) AS n_clean
            FROM samples AS s JOIN latest USING (run_id, config_id, cache_state)
            GROUP BY ALL
        )
        SELECT l.machine_id, l.backend, s.config_id || ' · ' || s.cache_state AS label,
               count(*) AS n,
               min(s.seconds) AS min_s, quantile_cont(s.seconds, 0.25) AS p25_s,
               median(s.seconds) AS median_s, quantile_cont(s.seconds, 0.75) AS p75_s,
               max(s.seconds) AS max_s,
               CASE WHEN any_value(l.disturbed) THEN 'disturbed'
                    WHEN any_value(l.noisy) THEN 'noisy' ELSE 'steady' END AS spread,
               CASE WHEN any_value(c.n_clean) = 0 THEN 0
                    ELSE any_value(c.n_disturbed_samples) END AS n_left_out,
               any_value(l.disturbance) AS disturbance,
               row_number() OVER (
                   PARTITION BY l.machine_id, l.backend
                   ORDER BY l.sweep, l.dtype, l.layout, l.n, l.k, l.m, s.cache_state
               ) AS position
        FROM samples AS s
        JOIN latest AS l USING (run_id, config_id, cache_state)
        JOIN counted AS c USING (run_id, config_id, cache_state)
        WHERE NOT coalesce(s.disturbed, false) OR c.n_clean = 0
        GROUP BY l.machine_id, l.backend, s.config_id, s.cache_state, l.sweep, l.dtype,
                 l.layout, l.n, l.k, l.m
    """,
    # The conditions chart: per machine and backend, one row per quantity (clock in GHz,
    # temperature in °C, power in W), run and time bucket (TIME_BUCKETS over the machine's whole
    # span): the bucket's first time, median, min and max, readings, and its phase and
    # configuration (or 'several'); `nominal`, the machine's nominal value of the quantity in the
    # same unit (its newest run's description: the GPU's max SM clock and enforced power limit
    # from NVML, or the base clock a CPU's model name states, "… @ 2.40GHz"; null where it
    # records none), and `nominal_from`, where that figure comes from.
    "condition_readings": f"""
        WITH machines AS (
            SELECT machine_id, backend, CASE WHEN json_valid(m) THEN m END AS m
            FROM (
                SELECT machine_id, backend, arg_max(machine, started_at) AS m
                FROM runs GROUP BY machine_id, backend
            )
        ),
        nominal AS (
            SELECT machine_id, backend, 'clock (GHz)' AS quantity,
                   coalesce(gpu_mhz / 1000, cpu_ghz) AS nominal,
                   CASE WHEN gpu_mhz IS NOT NULL THEN 'GPU max SM clock (NVML)'
                        WHEN cpu_ghz IS NOT NULL THEN 'CPU base clock (its model name)'
                   END AS nominal_from
            FROM (
                SELECT machine_id, backend,
                       try_cast(json_extract_string(m, '$.gpu.max_clock_sm_mhz') AS DOUBLE)
                           AS gpu_mhz,
                       try_cast(regexp_extract(
                           json_extract_string(m, '$.cpu_model'), '@\\s*([0-9.]+)\\s*GHz', 1
                       ) AS DOUBLE) AS cpu_ghz
                FROM machines
            )
            UNION ALL
            SELECT machine_id, backend, 'power (W)',
                   try_cast(json_extract_string(m, '$.gpu.power_limit_w') AS DOUBLE),
                   'GPU power limit (NVML)'
            FROM machines
        ),
        readings AS (
            SELECT r.machine_id, r.backend, c.t, c.phase, c.config_id,
                   r.kind || coalesce(' ' || r.sweep, '') AS kind, r.run_id AS run,
                   unnest([
                       {{'quantity': 'clock (GHz)',
                        'value': coalesce(c.cpu_ghz_measured, c.sm_clock_mhz / 1000)}},
                       {{'quantity': 'temperature (°C)', 'value': c.temp_c}},
                       {{'quantity': 'power (W)', 'value': c.power_w}}
                   ], recursive := true)
            FROM conditions AS c JOIN runs AS r USING (run_id)
        ),
        span AS (
            SELECT machine_id, backend, epoch(min(t)) AS t0,
                   greatest(epoch(max(t)) - epoch(min(t)), 0.001) / {TIME_BUCKETS} AS width
            FROM readings
            GROUP BY machine_id, backend
        )
        SELECT machine_id, backend, quantity, kind, run, min(t) AS t, median(value) AS value,
               min(value) AS value_min, max(value) AS value_max, count(*) AS readings,
               CASE WHEN count(DISTINCT phase) = 1 THEN any_value(phase)
                    ELSE 'several' END AS phase,
               CASE WHEN count(DISTINCT config_id) <= 1 THEN any_value(config_id)
                    ELSE 'several' END AS config_id,
               any_value(n.nominal) AS nominal,
               CASE WHEN any_value(n.nominal) IS NOT NULL THEN any_value(n.nominal_from)
               END AS nominal_from
        FROM readings JOIN span USING (machine_id, backend)
        LEFT JOIN nominal AS n USING (machine_id, backend, quantity)
        WHERE value IS NOT NULL
        GROUP BY machine_id, backend, quantity, kind, run, floor((epoch(t) - t0) / width)
    """,
    # The change chart: per machine, backend, configuration and cache state with two runs, the
    # median (s) of the newest and the one before, their ratio (latest / previous: 2 is twice as
    # slow), the relative change (ratio - 1), the noise band (± half
    # the larger IQR / median), which of the two runs was disturbed, and the verdict (slower,
    # faster, within noise).
    "median_changes": """
        WITH ranked AS (
            SELECT r.machine_id, r.backend, g.config_id, g.cache_state, g.run_id, g.median_s,
                   (g.p75_s - g.p25_s) / g.median_s AS iqr_ratio,
                   coalesce(g.disturbed, false) AS disturbed,
                   row_number() OVER (
                       PARTITION BY r.machine_id, r.backend, g.config_id, g.cache_state
                       ORDER BY r.started_at DESC, g.run_id DESC) AS rank
            FROM gemm_points AS g JOIN runs AS r USING (run_id)
        )
        SELECT a.machine_id, a.backend, a.config_id || ' · ' || a.cache_state AS label,
               b.median_s AS previous_s, a.median_s AS latest_s,
               a.median_s / b.median_s AS ratio, a.median_s / b.median_s - 1 AS rel_change,
               greatest(a.iqr_ratio, b.iqr_ratio) / 2 AS noise_hi,
               -greatest(a.iqr_ratio, b.iqr_ratio) / 2 AS noise_lo,
               b.run_id AS previous_run, a.run_id AS latest_run,
               CASE WHEN a.disturbed AND b.disturbed THEN 'both runs'
                    WHEN a.disturbed THEN 'latest run' WHEN b.disturbed THEN 'previous run'
                    ELSE 'no' END AS disturbed,
               CASE WHEN abs(a.median_s / b.median_s - 1)
                         <= greatest(a.iqr_ratio, b.iqr_ratio) / 2 THEN 'within noise'
                    WHEN a.median_s > b.median_s THEN 'slower' ELSE 'faster' END AS verdict
        FROM ranked AS a JOIN ranked AS b
          ON a.machine_id = b.machine_id AND a.backend = b.backend
         AND a.config_id = b.config_id AND a.cache_state = b.cache_state
         AND a.rank = 1 AND b.rank = 2
    """,
}
