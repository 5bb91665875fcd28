"""The SQL the report runs on the store: per machine and backend (a scope), its ceilings, points,
failed checks, counters, sweeps, samples, conditions and changes, each as a DataFrame aggregated
in SQL (raw samples never leave the store)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rooflab.store import StoreError

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

# A GEMM point's disturbance where its run was recorded before rooflab judged disturbance
NOT_JUDGED = "not judged (a run of an older rooflab)"


def _df(connection: duckdb.DuckDBPyConnection, sql: str, params=None) -> pd.DataFrame:
    import duckdb

    try:
        return connection.execute(sql, params or []).df()
    except duckdb.Error as error:
        raise StoreError(f"report query failed: {' '.join(str(error).split())[:300]}") from None


def scopes(connection) -> list[dict]:
    """One scope per machine and backend in the store: machine_id, backend, host, device_name,
    the newest ceilings run and its machine description. Machines with ceilings come first,
    newest ceilings run first; then the rest, newest run first."""
    pairs = _df(
        connection,
        """
        SELECT machine_id, backend,
               arg_max(host, started_at) AS host,
               arg_max(device_name, started_at) AS device_name,
               arg_max(run_id, started_at) FILTER (WHERE kind = 'ceilings') AS ceilings_run_id,
               arg_max(machine, started_at) FILTER (WHERE kind = 'ceilings') AS machine,
               max(started_at) FILTER (WHERE kind = 'ceilings') AS last_ceilings,
               max(started_at) AS last_run
        FROM runs
        GROUP BY machine_id, backend
        ORDER BY last_ceilings DESC NULLS LAST, last_run DESC, machine_id, backend
        """,
    )
    scopes = [
        {key: (None if _missing(value) else value) for key, value in row.items()}
        for row in pairs.to_dict("records")
    ]
    if len(scopes) > 1:
        for scope in scopes:
            scope["prefix"] = _slug(
                f"{scope['host']}_{scope['backend']}_{str(scope['machine_id'])[:8]}"
            )
    return scopes


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text) + "__"


def ceilings(connection, scope) -> pd.DataFrame:
    """Latest ceilings of the machine: the best kernel per bandwidth level, every compute path;
    with the spread of the windows behind each value and, for the FMA paths, of their rounds."""
    return _df(
        connection,
        """
        WITH ceiling AS (
            SELECT run_id, config_id, kind, name, kernel, dtype, value, unit,
                   working_set_min_bytes, working_set_max_bytes, n_points,
                   coalesce(disturbed, false) AS disturbed, disturbance
            FROM latest_ceilings
            WHERE machine_id = ? AND backend = ?
            QUALIFY row_number() OVER (PARTITION BY kind, name ORDER BY value DESC) = 1
        ),
        windows AS (  -- per sweep point, round or GEMM: the windows its value used (the
                      -- undisturbed ones; all, where every one was disturbed)
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
        SELECT c.kind, c.name, c.kernel, c.dtype, c.value, c.unit, c.working_set_min_bytes,
               c.working_set_max_bytes, c.n_points, w.n_windows, w.iqr_ratio, r.rounds_min,
               r.rounds_max, c.disturbed, c.disturbance
        FROM ceiling AS c
        LEFT JOIN windows AS w USING (run_id, config_id)
        LEFT JOIN rounds AS r
            ON r.run_id = c.run_id
           AND r.family = regexp_replace(c.config_id, '/round[0-9]+$', '')
        ORDER BY c.kind, c.value DESC
        """,
        [scope["machine_id"], scope["backend"]],
    )


# Configurations of the machine whose newest correctness check failed (one row per metric).
_NEWEST_FAILED = """
    WITH newest AS (
        SELECT c.run_id, c.config_id
        FROM correctness AS c JOIN runs AS r USING (run_id)
        WHERE r.machine_id = $machine AND r.backend = $backend
        QUALIFY row_number() OVER (
            PARTITION BY c.config_id ORDER BY r.started_at DESC, c.run_id DESC
        ) = 1
    )
    SELECT c.config_id, c.metric, c.error, c.tolerance, c.run_id
    FROM correctness AS c JOIN newest USING (run_id, config_id)
    WHERE NOT c.passed
"""

# The newest run's point per configuration and cache state on the machine (model bytes); a
# configuration whose newest check failed is not drawn, even if an older run timed it.
_LATEST_POINTS = f"""
    SELECT p.*, r.started_at
    FROM roofline_points AS p JOIN runs AS r USING (run_id)
    WHERE p.machine_id = $machine AND r.backend = $backend
      AND coalesce(p.q_source, 'model') = 'model'
      AND p.config_id NOT IN (SELECT config_id FROM ({_NEWEST_FAILED}))
    QUALIFY row_number() OVER (
        PARTITION BY p.config_id, p.cache_state ORDER BY r.started_at DESC, p.run_id DESC
    ) = 1
"""

# Hierarchical points (q_source = counters) of the machine: for each configuration and cache
# state, every level of the newest timing run's newest counters run.
_LATEST_COUNTER_POINTS = f"""
    SELECT p.*, r.started_at
    FROM roofline_points AS p JOIN runs AS r USING (run_id)
    WHERE p.machine_id = $machine AND r.backend = $backend AND p.q_source = 'counters'
      AND p.config_id NOT IN (SELECT config_id FROM ({_NEWEST_FAILED}))
    QUALIFY dense_rank() OVER (
        PARTITION BY p.config_id, p.cache_state
        ORDER BY r.started_at DESC, p.run_id DESC, p.counters_run_id DESC
    ) = 1
"""

# The newest counters run of each sweep on the machine: how each profile went (status rows have
# no metric) and the calibrations, one row per status or calibration verdict and reason.
_COUNTERS_STATE = """
    WITH latest AS (
        SELECT run_id, sweep FROM runs
        WHERE kind = 'counters' AND machine_id = $machine AND backend = $backend
        QUALIFY row_number() OVER (PARTITION BY sweep ORDER BY started_at DESC, run_id DESC) = 1
    )
    SELECT 'status' AS what, l.sweep, c.tool, c.status, c.reason, count(*) AS n
    FROM counters AS c JOIN latest AS l USING (run_id)
    WHERE c.metric IS NULL
    GROUP BY ALL
    UNION ALL
    SELECT 'calibration', l.sweep, 'ncu',
           CASE WHEN NOT k.trusted THEN 'untrusted'
                WHEN k.pairing IS NULL THEN 'unpaired' ELSE 'trusted' END,
           CASE WHEN NOT k.trusted THEN k.reason
                WHEN k.pairing IS NULL THEN k.pairing_error END,
           count(*)
    FROM counter_calibration AS k JOIN latest AS l USING (run_id)
    GROUP BY ALL
    ORDER BY 1, 2, 4, 5
"""


def _disturbance_sql(alias: str) -> str:
    """A GEMM point's disturbance as the charts show it: the reason, "no", or "not judged" where
    the flag is null (a run recorded before rooflab judged disturbance)."""
    return (
        f"CASE WHEN {alias}.disturbed THEN coalesce({alias}.disturbance, 'yes') "
        f"WHEN NOT {alias}.disturbed THEN 'no' ELSE '{NOT_JUDGED}' END"
    )


def _machine(scope) -> dict:
    return {"machine": scope["machine_id"], "backend": scope["backend"]}


def points(connection, scope) -> pd.DataFrame:
    return _df(
        connection,
        f"""
        WITH latest AS ({_LATEST_POINTS})
        SELECT l.config_id, l.cache_state, l.sweep, l.m, l.n, l.k, l.dtype, l.layout, l.level,
               l.intensity, l.median_s, l.achieved_flops_per_s, l.attainable_flops_per_s,
               l.efficiency, l.limiter, l.bound_s, l.run_id, l.compute_path, l.q_source,
               coalesce(g.noisy, false) AS noisy,
               coalesce(g.disturbed, false) AS disturbed,
               g.disturbed IS NOT NULL AS judged,  -- false: a run of an older rooflab
               {_disturbance_sql("g")} AS disturbance,
               (g.p75_s - g.p25_s) / g.median_s AS iqr_ratio,
               c.clock_min_mhz, c.clock_max_mhz
        FROM latest AS l
        LEFT JOIN gemm_points AS g USING (run_id, config_id, cache_state)
        LEFT JOIN (
            SELECT run_id, config_id, cache_state, min(clock_mhz) AS clock_min_mhz,
                   max(clock_mhz) AS clock_max_mhz
            FROM samples GROUP BY run_id, config_id, cache_state
        ) AS c USING (run_id, config_id, cache_state)
        ORDER BY l.sweep, l.dtype, l.layout, l.n, l.k, l.m, l.cache_state
        """,
        _machine(scope),
    )


def failed(connection, scope) -> pd.DataFrame:
    return _df(connection, f"{_NEWEST_FAILED} ORDER BY c.config_id, c.metric", _machine(scope))


def counter_points(connection, scope) -> pd.DataFrame:
    return _df(
        connection,
        f"""
        WITH latest AS ({_LATEST_COUNTER_POINTS})
        SELECT l.config_id, l.cache_state, l.sweep, l.m, l.n, l.k, l.dtype, l.level, l.bytes,
               l.intensity, l.median_s, l.achieved_flops_per_s, l.attainable_flops_per_s,
               l.efficiency, l.limiter, l.limiting_level, l.compute_path, l.pairing,
               l.cache_control, l.replay_mode, l.q_source, l.calibration_ratio,
               l.counters_run_id, l.run_id, g.bytes_model,
               coalesce(g.disturbed, false) AS disturbed, {_disturbance_sql("g")} AS disturbance
        FROM latest AS l
        LEFT JOIN gemm_points AS g USING (run_id, config_id, cache_state)
        ORDER BY l.sweep, l.dtype, l.n, l.k, l.m, l.cache_state, l.level
        """,
        _machine(scope),
    )


def counters_state(connection, scope) -> pd.DataFrame:
    return _df(connection, _COUNTERS_STATE, _machine(scope))


def ceiling_sweep(connection, run_id: str) -> pd.DataFrame:
    """A ceilings run's bandwidth per kernel and working set (GB/s), with its plateau level."""
    return _df(
        connection,
        """
        SELECT kernel, working_set_bytes, value / 1e9 AS gb_per_s, level, iqr_ratio
        FROM ceiling_sweep WHERE run_id = ? ORDER BY kernel, working_set_bytes
    """,
        [run_id],
    )


def bandwidth_plateaus(connection, run_id: str) -> pd.DataFrame:
    """The working-set range (lo, hi, and mid between them) each bandwidth ceiling of a ceilings
    run was taken over."""
    return _df(
        connection,
        """
        SELECT name AS level, min(working_set_min_bytes) AS lo,
               max(working_set_max_bytes) AS hi,
               sqrt(min(working_set_min_bytes) * max(working_set_max_bytes)) AS mid
        FROM ceilings
        WHERE run_id = ? AND kind = 'bandwidth' AND working_set_min_bytes IS NOT NULL
        GROUP BY name ORDER BY lo
    """,
        [run_id],
    )


def sample_quantiles(connection, scope) -> pd.DataFrame:
    """The quantiles of each newest point's samples, with its verdict (steady, noisy, disturbed).

    The samples the point's statistics used (rooflab.experiments.timing): the undisturbed ones,
    or all of them where every one was disturbed."""
    return _df(
        connection,
        f"""
        WITH latest AS (
            SELECT g.run_id, g.config_id, g.cache_state, g.noisy,
                   coalesce(g.disturbed, false) AS disturbed,
                   {_disturbance_sql("g")} AS disturbance
            FROM gemm_points AS g JOIN runs AS r USING (run_id)
            WHERE r.machine_id = ? AND r.backend = ?
            QUALIFY row_number() OVER (
                PARTITION BY g.config_id, g.cache_state ORDER BY r.started_at DESC, g.run_id DESC
            ) = 1
        ),
        taken AS (
            SELECT s.run_id, s.config_id, s.cache_state, s.seconds,
                   coalesce(s.disturbed, false) AS sample_disturbed,
                   count(*) FILTER (WHERE coalesce(s.disturbed, false)) OVER point
                       AS n_disturbed_samples,
                   count(*) FILTER (WHERE NOT coalesce(s.disturbed, false)) OVER point AS n_clean
            FROM samples AS s JOIN latest USING (run_id, config_id, cache_state)
            WINDOW point AS (PARTITION BY s.run_id, s.config_id, s.cache_state)
        )
        SELECT s.config_id || ' · ' || s.cache_state AS label, count(*) AS n,
               min(s.seconds) AS min_s, quantile_cont(s.seconds, 0.25) AS p25_s,
               median(s.seconds) AS median_s, quantile_cont(s.seconds, 0.75) AS p75_s,
               max(s.seconds) AS max_s,
               CASE WHEN any_value(l.disturbed) THEN 'disturbed'
                    WHEN any_value(l.noisy) THEN 'noisy' ELSE 'steady' END AS spread,
               CASE WHEN any_value(s.n_clean) = 0 THEN 0
                    ELSE any_value(s.n_disturbed_samples) END AS n_left_out,
               any_value(l.disturbance) AS disturbance
        FROM taken AS s JOIN latest AS l USING (run_id, config_id, cache_state)
        JOIN gemm_points AS g USING (run_id, config_id, cache_state)
        WHERE NOT s.sample_disturbed OR s.n_clean = 0
        GROUP BY s.config_id, s.cache_state, g.sweep, g.dtype, g.layout, g.n, g.k, g.m
        ORDER BY g.sweep, g.dtype, g.layout, g.n, g.k, g.m, s.cache_state
    """,
        [scope["machine_id"], scope["backend"]],
    )


# Condition readings of a machine, one row per quantity, run and time bucket: the whole time span
# is cut into TIME_BUCKETS buckets, so a single run keeps every reading and a long history stays a
# few thousand rows.
TIME_BUCKETS = 1500
_CONDITIONS_SQL = """
    WITH readings AS (
        SELECT c.t, c.phase, c.config_id, r.kind || coalesce(' ' || r.sweep, '') AS kind,
               r.run_id AS run,
               unnest([
                   {'quantity': 'clock (GHz)',
                    'value': coalesce(c.cpu_ghz_measured, c.sm_clock_mhz / 1000)},
                   {'quantity': 'temperature (°C)', 'value': c.temp_c},
                   {'quantity': 'power (W)', 'value': c.power_w}
               ], recursive := true)
        FROM conditions AS c JOIN runs AS r USING (run_id)
        WHERE r.machine_id = $machine AND r.backend = $backend
    ),
    span AS (
        SELECT epoch(min(t)) AS t0,
               greatest(epoch(max(t)) - epoch(min(t)), 0.001) / $buckets AS width
        FROM readings
    )
    SELECT quantity, kind, run, min(t) AS t, median(value) AS value, min(value) AS value_min,
           max(value) AS value_max, count(*) AS readings,
           CASE WHEN count(DISTINCT phase) = 1 THEN any_value(phase) ELSE 'several' END AS phase,
           CASE WHEN count(DISTINCT config_id) <= 1 THEN any_value(config_id)
                ELSE 'several' END AS config_id
    FROM readings, span
    WHERE value IS NOT NULL
    GROUP BY quantity, kind, run, floor((epoch(t) - t0) / width)
    ORDER BY quantity, t
"""


def conditions(connection, scope) -> pd.DataFrame:
    return _df(connection, _CONDITIONS_SQL, {**_machine(scope), "buckets": TIME_BUCKETS})


def median_changes(connection, scope) -> pd.DataFrame:
    """Each configuration's median in its two newest runs: the change, the noise band and the
    verdict (slower, faster, within noise)."""
    return _df(
        connection,
        """
        WITH ranked AS (
            SELECT g.config_id, g.cache_state, g.run_id, g.median_s,
                   (g.p75_s - g.p25_s) / g.median_s AS iqr_ratio,
                   coalesce(g.disturbed, false) AS disturbed,
                   row_number() OVER (
                       PARTITION BY g.config_id, g.cache_state
                       ORDER BY r.started_at DESC, g.run_id DESC) AS rank
            FROM gemm_points AS g JOIN runs AS r USING (run_id)
            WHERE r.machine_id = ? AND r.backend = ?
        )
        SELECT a.config_id || ' · ' || a.cache_state AS label, b.median_s AS previous_s,
               a.median_s AS latest_s, a.median_s / b.median_s - 1 AS rel_change,
               greatest(a.iqr_ratio, b.iqr_ratio) / 2 AS noise_hi,
               -greatest(a.iqr_ratio, b.iqr_ratio) / 2 AS noise_lo,
               b.run_id AS previous_run, a.run_id AS latest_run,
               CASE WHEN a.disturbed AND b.disturbed THEN 'both runs'
                    WHEN a.disturbed THEN 'latest run' WHEN b.disturbed THEN 'previous run'
                    ELSE 'no' END AS disturbed,
               CASE WHEN abs(a.median_s / b.median_s - 1) <= greatest(a.iqr_ratio, b.iqr_ratio) / 2
                    THEN 'within noise'
                    WHEN a.median_s > b.median_s THEN 'slower' ELSE 'faster' END AS verdict
        FROM ranked AS a JOIN ranked AS b
          ON a.config_id = b.config_id AND a.cache_state = b.cache_state
         AND a.rank = 1 AND b.rank = 2
        ORDER BY a.config_id, a.cache_state
    """,
        [scope["machine_id"], scope["backend"]],
    )


def run_counts(connection, scope, shown: list[str]) -> pd.Series:
    """The machine's runs: how many, of what, when, the newest backend note; and of the `shown`
    runs, those taken on a busy machine and the newest one's warning."""
    return _df(
        connection,
        """
        SELECT count(*) AS runs, count(*) FILTER (WHERE kind = 'gemm') AS gemm_runs,
               min(started_at) AS first, max(started_at) AS last,
               arg_max(backend_note, started_at) AS backend_note,
               count(*) FILTER (WHERE busy) AS busy_runs,
               arg_max(run_id, started_at) FILTER (WHERE busy) AS busy_run,
               arg_max(busy_warning, started_at) FILTER (WHERE busy) AS busy_warning
        FROM (
            SELECT *, busy_warning IS NOT NULL
                      AND list_contains($shown::VARCHAR[], run_id) AS busy
            FROM runs WHERE machine_id = $machine AND backend = $backend
        )
    """,
        {**_machine(scope), "shown": shown},
    ).iloc[0]
