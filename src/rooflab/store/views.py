"""The store's named views: every number a reader (a user's SQL, the report) needs, defined once.
Each comment says what one row is, with its columns and units where they are not in the name."""

import hashlib

from rooflab.records import POINT_VIEWS
from rooflab.store.comparison_views import COMPARISON_VIEWS_SQL
from rooflab.store.import_views import IMPORT_VIEWS_SQL
from rooflab.store.report_views import REPORT_VIEWS_SQL
from rooflab.store.timeline_views import TIMELINE_VIEWS_SQL

# Each kind of timed point with the columns its own table had before schema 6 (records.tables):
# gemm_points (a sweep's GEMM configurations), workload_points (a workload's cases).
POINT_VIEWS_SQL = {
    name: f"SELECT {', '.join(columns)} FROM timed_points WHERE kind = '{kind}'"
    for name, (kind, columns) in POINT_VIEWS.items()
}

VIEWS_SQL = {
    **POINT_VIEWS_SQL,
    # Per machine and backend (a GPU backend may share the host's machine_id), the ceilings of the
    # most recent ceilings run.
    "latest_ceilings": """
        WITH latest_run AS (
            SELECT run_id, machine_id, backend, host, device_name, started_at
            FROM runs
            WHERE kind = 'ceilings'
            QUALIFY row_number() OVER (
                PARTITION BY machine_id, backend ORDER BY started_at DESC, run_id DESC
            ) = 1
        )
        SELECT l.machine_id, l.backend, l.host, l.device_name, l.started_at, c.*
        FROM ceilings AS c
        JOIN latest_run AS l USING (run_id)
    """,
    # Per machine, backend, configuration and cache state, the point of the latest run that timed
    # it (a configuration whose latest check failed keeps its older timing here).
    "latest_gemm_points": """
        SELECT r.machine_id, r.backend, r.host, r.device_name, r.started_at, g.*
        FROM gemm_points AS g
        JOIN runs AS r USING (run_id)
        QUALIFY row_number() OVER (
            PARTITION BY r.machine_id, r.backend, g.config_id, g.cache_state
            ORDER BY r.started_at DESC, g.run_id DESC
        ) = 1
    """,
    # Per machine, backend, configuration, cache state, level and bytes source (q_source: model,
    # counters), the Roofline point of the newest run that timed it: after a rerun
    # `roofline_points` holds the points of every run, this view the newest only (columns as
    # roofline_points: intensity in work_unit/B and rates in work_unit/s, where work_unit is FLOP,
    # or OP for an int8 GEMM; times s; host, device and the timing run's start added).
    "latest_roofline_points": """
        SELECT p.machine_id, r.backend, r.host, r.device_name, r.started_at,
            p.* EXCLUDE (machine_id)
        FROM roofline_points AS p
        JOIN runs AS r USING (run_id)
        QUALIFY row_number() OVER (
            PARTITION BY p.machine_id, r.backend, p.config_id, p.cache_state, p.level,
                coalesce(p.q_source, 'model')
            ORDER BY r.started_at DESC, p.run_id DESC, p.counters_run_id DESC NULLS LAST
        ) = 1
    """,
    # Why each point of the Roofline sits where it does (roofline.diagnosis, docs/diagnosis.md):
    # per machine, backend, kind (gemm, workload, counted), key, cache state and level, the
    # diagnosis of the newest run's point (point_diagnoses columns; evidence JSON text).
    "diagnoses": """
        SELECT d.key, d.kind, d.cache_state, d.level, d.limiter, d.efficiency, d.cause,
               d.evidence, d.next_step, d.predicted_s, d.median_s, d.machine_id, r.backend,
               d.run_id, d.counters_run_id, r.started_at
        FROM point_diagnoses AS d
        JOIN runs AS r USING (run_id)
        QUALIFY row_number() OVER (
            PARTITION BY d.machine_id, r.backend, d.kind, d.key, d.cache_state, d.level
            ORDER BY r.started_at DESC, d.run_id DESC, d.counters_run_id DESC NULLS LAST
        ) = 1
    """,
    # Per machine, backend, configuration and cache state whose newest timing got no Roofline
    # point: that timing's `unplaced_points` row (`reason`: no_ceilings_run, no_compute_ceiling,
    # level_not_measured, failed_check, unit_mismatch; `why`: a sentence), its sweep and the
    # start of its run. A point a newer run placed is not here.
    "latest_unplaced_points": """
        WITH newest AS (
            SELECT r.machine_id, r.backend, r.started_at, t.run_id, t.config_id, t.cache_state
            FROM timed_points AS t
            JOIN runs AS r USING (run_id)
            QUALIFY row_number() OVER (
                PARTITION BY r.machine_id, r.backend, t.config_id, t.cache_state
                ORDER BY r.started_at DESC, t.run_id DESC
            ) = 1
        )
        SELECT n.machine_id, n.backend, u.sweep, u.config_id, u.cache_state, u.reason, u.why,
               u.run_id, n.started_at
        FROM unplaced_points AS u JOIN newest AS n USING (run_id, config_id, cache_state)
    """,
    # One row per ceiling and condition reading taken for it (before, after and during its
    # measurement), so a ceiling joins its conditions: an FMA round's or library GEMM's readings
    # carry the ceiling's own config_id (fma/fp64/round1, blas/fp64/n2048); a bandwidth ceiling's
    # config_id names its sweep point (stream/triad/ws170895360) while the readings name the
    # kernel's whole sweep (stream/triad), read before and after all its points. Clock in GHz
    # (cpu_ghz_measured) or MHz (sm_clock_mhz, mem_clock_mhz), temp_c in °C, power_w in W.
    "ceiling_conditions": """
        SELECT r.machine_id, r.backend, c.run_id, c.kind, c.name, c.kernel, c.value, c.unit,
            c.config_id, k.config_id AS conditions_config_id,
            k.* EXCLUDE (run_id, config_id)
        FROM ceilings AS c
        JOIN runs AS r USING (run_id)
        JOIN conditions AS k
          ON k.run_id = c.run_id
         AND k.config_id IN (c.config_id, regexp_replace(c.config_id, '/ws[0-9]+$', ''))
    """,
    # One row per machine and backend: what a cluster campaign ran where. Each machine's points are
    # computed against its own ceilings only (roofline.py), so this is also the list of Rooflines.
    "machine_summary": """
        SELECT machine_id, backend,
            arg_max(host, started_at) AS host,
            arg_max(device_name, started_at) AS device_name,
            count(*) AS n_runs,
            count(*) FILTER (WHERE kind = 'ceilings') AS n_ceilings_runs,
            count(*) FILTER (WHERE kind = 'gemm') AS n_gemm_runs,
            arg_max(run_id, started_at) FILTER (WHERE kind = 'ceilings') AS latest_ceilings_run,
            min(started_at) AS first_started_at,
            max(started_at) AS last_started_at
        FROM runs
        GROUP BY machine_id, backend
    """,
    # One row per counters run (issue 7): the tool, what it profiled, and whether any of it can
    # reach a Roofline point (status as rooflab.experiments.counters.counters_status gives it).
    "counters_summary": """
        WITH profiles AS (
            SELECT run_id, any_value(tool) AS tool, max(tool_version) AS tool_version,
                max(chip) AS chip,
                count(*) FILTER (WHERE status IN ('ok', 'partial')) AS n_profiled,
                count(*) FILTER (WHERE status = 'partial') AS n_partial,
                count(*) FILTER (WHERE status = 'unavailable') AS n_unavailable,
                count(*) FILTER (WHERE status = 'skipped') AS n_skipped,
                string_agg(DISTINCT reason, ' | ') FILTER (WHERE status = 'unavailable')
                    AS unavailable_reason
            FROM counters
            WHERE metric IS NULL
            GROUP BY run_id
        ),
        calibration AS (
            SELECT run_id, count(*) AS n_calibrations,
                count(*) FILTER (WHERE trusted) AS n_trusted,
                count(*) FILTER (WHERE trusted AND pairing IS NOT NULL) AS n_admitted
            FROM counter_calibration
            GROUP BY run_id
        )
        SELECT r.run_id, r.machine_id, r.backend, r.host, r.device_name, r.sweep, r.started_at,
            p.tool, p.tool_version, p.chip,
            CASE WHEN coalesce(p.n_unavailable, 0) > 0 AND coalesce(p.n_profiled, 0) = 0
                     THEN 'unavailable'
                 WHEN coalesce(p.n_unavailable, 0) > 0 OR coalesce(p.n_partial, 0) > 0
                     THEN 'partial'
                 WHEN coalesce(p.n_profiled, 0) > 0 THEN 'ok'
                 ELSE 'none' END AS status,
            p.unavailable_reason,
            coalesce(p.n_profiled, 0) AS n_profiled,
            coalesce(p.n_unavailable, 0) AS n_unavailable,
            coalesce(p.n_skipped, 0) AS n_skipped,
            coalesce(c.n_calibrations, 0) AS n_calibrations,
            coalesce(c.n_trusted, 0) AS n_trusted,
            coalesce(c.n_admitted, 0) AS n_admitted
        FROM runs AS r
        LEFT JOIN profiles AS p USING (run_id)
        LEFT JOIN calibration AS c USING (run_id)
        WHERE r.kind = 'counters'
    """,
    # One row per run. The clock is in MHz: the measured CPU clock for CPU runs, the SM clock for
    # GPU runs, from the condition readings and the reading taken after each sample.
    # n_disturbed of n_judged: the run's GEMM points, sweep points and ceilings flagged disturbed
    # (null for runs recorded before disturbance was); busy_warning: the quiet check's warning.
    "run_summary": """
        WITH gemm AS (
            SELECT run_id, count(*) AS n_gemm_points, count(*) FILTER (WHERE noisy) AS n_noisy
            FROM gemm_points
            GROUP BY run_id
        ),
        disturbed AS (
            SELECT run_id, count(*) FILTER (WHERE disturbed) AS n_disturbed,
                count(*) AS n_judged
            FROM (
                SELECT run_id, disturbed FROM gemm_points
                UNION ALL SELECT run_id, disturbed FROM ceilings
                UNION ALL SELECT run_id, disturbed FROM ceiling_sweep
            )
            WHERE disturbed IS NOT NULL
            GROUP BY run_id
        ),
        failed AS (
            SELECT run_id, count(DISTINCT config_id) AS n_failed_correctness
            FROM correctness
            WHERE NOT passed
            GROUP BY run_id
        ),
        cache AS (
            SELECT run_id, string_agg(DISTINCT cache_state, ',' ORDER BY cache_state)
                AS cache_states
            FROM (
                SELECT run_id, cache_state FROM gemm_points
                UNION ALL SELECT run_id, cache_state FROM samples
                UNION ALL SELECT run_id, cache_state FROM ceilings
            )
            WHERE cache_state IS NOT NULL
            GROUP BY run_id
        ),
        clock AS (
            SELECT run_id, min(clock_mhz) AS clock_min_mhz, max(clock_mhz) AS clock_max_mhz
            FROM (
                SELECT c.run_id,
                    CASE WHEN r.backend = 'cpu' THEN c.cpu_ghz_measured * 1000
                         ELSE c.sm_clock_mhz END AS clock_mhz
                FROM conditions AS c
                JOIN runs AS r USING (run_id)
                UNION ALL SELECT run_id, clock_mhz FROM samples
            )
            GROUP BY run_id
        )
        SELECT r.run_id, r.kind, r.sweep, r.started_at, r.ended_at, r.host, r.machine_id,
            r.backend, r.device_name, cache.cache_states, clock.clock_min_mhz,
            clock.clock_max_mhz, coalesce(gemm.n_gemm_points, 0) AS n_gemm_points,
            coalesce(gemm.n_noisy, 0) AS n_noisy,
            disturbed.n_disturbed, disturbed.n_judged,
            r.busy_warning, r.backend_note,
            coalesce(failed.n_failed_correctness, 0) AS n_failed_correctness,
            r.git_commit, r.git_dirty, r.schema_version
        FROM runs AS r
        LEFT JOIN gemm USING (run_id)
        LEFT JOIN disturbed USING (run_id)
        LEFT JOIN failed USING (run_id)
        LEFT JOIN cache USING (run_id)
        LEFT JOIN clock USING (run_id)
    """,
    # Two implementations of the same work (a workload's `same_work_as`): per machine, backend,
    # workload, case (params, dtype) and cache state, its newest timing beside its baseline's
    # newest: time_s and baseline_time_s (s), speedup (baseline time / time), useful and
    # executed FLOP/s of both, the bytes of both (Q), and `says` as the article puts it
    # ("lower executed FLOP/s, 2x faster").
    "implementation_comparisons": """
        WITH latest AS (
            SELECT r.machine_id, r.backend, w.*
            FROM workload_points AS w JOIN runs AS r USING (run_id)
            QUALIFY row_number() OVER (
                PARTITION BY r.machine_id, r.backend, w.sweep, w.dtype, w.params, w.cache_state
                ORDER BY r.started_at DESC, w.run_id DESC
            ) = 1
        ),
        pairs AS (
            SELECT a.machine_id, a.backend, a.sweep AS workload, b.sweep AS baseline,
                   a.params, a.dtype, a.cache_state, a.flops AS useful_flops,
                   a.median_s AS time_s, b.median_s AS baseline_time_s,
                   b.median_s / a.median_s AS speedup,
                   a.flops / a.median_s AS useful_flops_per_s,
                   b.flops / b.median_s AS baseline_useful_flops_per_s,
                   coalesce(a.executed_flops, a.flops) / a.median_s AS executed_flops_per_s,
                   coalesce(b.executed_flops, b.flops) / b.median_s
                       AS baseline_executed_flops_per_s,
                   a.bytes_model AS bytes, b.bytes_model AS baseline_bytes,
                   a.run_id, b.run_id AS baseline_run_id
            FROM latest AS a JOIN latest AS b
              ON a.same_work_as = b.sweep AND a.machine_id = b.machine_id
             AND a.backend = b.backend AND a.params = b.params AND a.dtype = b.dtype
             AND a.cache_state = b.cache_state
        )
        SELECT *,
               CASE WHEN executed_flops_per_s < baseline_executed_flops_per_s
                    THEN 'lower' ELSE 'higher' END || ' executed FLOP/s, '
               || CASE WHEN speedup >= 1 THEN printf('%.3gx faster', speedup)
                       ELSE printf('%.3gx slower', 1 / speedup) END AS says
        FROM pairs
    """,
}

# The report's views (store.report_views), the measured schedules' (store.timeline_views) and
# the imported profiles' (store.import_views) are named views like the others.
VIEWS_SQL.update(REPORT_VIEWS_SQL)
VIEWS_SQL.update(TIMELINE_VIEWS_SQL)
VIEWS_SQL.update(COMPARISON_VIEWS_SQL)
VIEWS_SQL.update(IMPORT_VIEWS_SQL)


def view_query(view: str, /, **equal) -> str:
    """The SQL a reader runs (`rooflab query`) for the rows of view `view` whose columns equal
    the values given: what the report shows where it leaves rows out. A value may be a
    placeholder such as '<sweep>' for the reader to fill in."""

    def literal(value) -> str:
        return "'" + str(value).replace("'", "''") + "'"

    where = " AND ".join(f"{column} = {literal(value)}" for column, value in equal.items())
    return f"SELECT * FROM {view}" + (f" WHERE {where}" if where else "")


def make_views(connection, *, anew: bool) -> None:
    """Make each view of VIEWS_SQL whose SQL changed, or every one when `anew` (the tables they
    read changed). A view's comment holds a digest of the SQL it was made from: making all of
    them anew was most of a writer's opening."""
    made = dict(
        connection.execute(
            "SELECT view_name, comment FROM duckdb_views() "
            "WHERE database_name = current_database() AND schema_name = 'main'"
        ).fetchall()
    )
    for name, sql in VIEWS_SQL.items():
        digest = hashlib.sha256(sql.encode()).hexdigest()[:16]
        if not anew and made.get(name) == digest:
            continue
        connection.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")
        connection.execute(f"COMMENT ON VIEW {name} IS '{digest}'")
