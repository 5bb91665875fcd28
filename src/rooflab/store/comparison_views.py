"""The views of runs over time and across machines (docs/compare.md): every run of a point or a
ceiling in time order, and the newest run against the one before it. Each comment says what one
row is."""

from rooflab.vocabulary import CacheState

WARM = CacheState.WARM

# What defines a timed point's work, beyond its key: two runs whose work differs are not the same
# experiment (a workload name given to another kernel, a ledger that changed), and compare calls
# them incomparable, naming what changed.
_WORK = (
    "CASE kind WHEN 'gemm' THEN 'dtypes ' || concat_ws('/', coalesce(x_dtype, dtype), "
    "coalesce(w_dtype, dtype), coalesce(y_dtype, dtype)) || ', ' || flops || ' FLOP, ' || "
    "bytes_model || ' B' ELSE 'entry ' || entry || ', dtype ' || dtype || ', ' || flops || "
    "' FLOP, ' || bytes_model || ' B' || coalesce(', executed ' || executed_flops || ' FLOP', '') "
    "END"
)

# Every timed point (a GEMM configuration's, a workload case's; a measured stage's or schedule's
# and a timeline mode's step, whose samples are all warm) and every ceiling, per run:
# `value` in `unit` (s for a point: the median; B/s or FLOP/s for a ceiling) with its noise band
# `low`..`high` (a point's p25..p75; a ceiling's windows' p25..p75 rate).
_MEASURED = f"""
    SELECT 'point' AS kind, run_id, config_id, cache_state, sweep AS name,
           config_id || ' ' || cache_state AS key, median_s AS value, p25_s AS low,
           p75_s AS high, 's' AS unit, n_samples, coalesce(disturbed, false) AS disturbed, work
    FROM (SELECT run_id, config_id, cache_state, sweep, median_s, p25_s, p75_s, n_samples,
                 disturbed, {_WORK} AS work FROM timed_points)
    UNION ALL BY NAME
    SELECT 'point' AS kind, run_id, config_id, '{WARM}' AS cache_state, scenario AS name,
           config_id || ' {WARM}' AS key, median_s AS value, p25_s AS low, p75_s AS high,
           's' AS unit, n_samples, coalesce(disturbed, false) AS disturbed
    FROM (SELECT run_id, config_id, scenario, median_s, p25_s, p75_s, n_samples, disturbed
          FROM stage_timings
          UNION ALL BY NAME
          SELECT run_id, config_id, scenario, median_s, p25_s, p75_s, n_samples, disturbed
          FROM stage_schedules
          UNION ALL BY NAME
          SELECT run_id, config_id, scenario, median_s, p25_s, p75_s, n_samples, disturbed
          FROM timeline_steps)
    UNION ALL BY NAME
    SELECT 'ceiling' AS kind, c.run_id, c.config_id, c.cache_state, c.name,
           c.kind || '/' || c.name || '/' || c.kernel AS key, c.value, w.low, w.high, c.unit,
           w.n_samples, coalesce(c.disturbed, false) AS disturbed
    FROM ceilings AS c
    LEFT JOIN (
        SELECT run_id, config_id, count(*) AS n_samples,
               quantile_cont(amount / seconds, 0.25) AS low,
               quantile_cont(amount / seconds, 0.75) AS high
        FROM samples WHERE NOT coalesce(disturbed, false) AND seconds > 0
        GROUP BY run_id, config_id
    ) AS w USING (run_id, config_id)
"""

COMPARISON_VIEWS_SQL = {
    # Every run of every point and ceiling, per machine and backend, in time order: `kind`
    # (point, ceiling), `key` (a point's config_id and cache state; a ceiling's kind/name/kernel),
    # `name` (the sweep, workload or ceiling), `value` in `unit` (s: a point's median; B/s or
    # FLOP/s: a ceiling) with its noise band `low`..`high` (p25..p75 of the samples, a ceiling's
    # windows' rates), `n_samples`, `disturbed`, the run's `started_at`, `git_commit` and
    # `git_dirty`, `work` (what defines a point's work: a workload's entry, dtype and ledger, a
    # GEMM's dtypes and ledger; null for a ceiling, stage or timeline step), and `position`
    # (1: the key's oldest run).
    "history": f"""
        SELECT r.machine_id, r.backend, r.host, m.kind, m.key, m.name, m.config_id,
               m.cache_state, m.run_id, r.started_at, r.git_commit, r.git_dirty, m.value,
               m.low, m.high, m.unit, m.n_samples, m.disturbed, m.work,
               row_number() OVER (
                   PARTITION BY r.machine_id, r.backend, m.kind, m.key
                   ORDER BY r.started_at, m.run_id
               ) AS position
        FROM ({_MEASURED}) AS m JOIN runs AS r USING (run_id)
    """,
    # Per machine, backend and key with at least two runs, the newest run against the one before
    # it, as the store worked it out when it last ingested (table run_comparisons, from the raw
    # samples: Mann-Whitney and a Hodges-Lehmann interval for the ratio of medians, and a minimum
    # effect): `baseline_s`, `candidate_s` (a ceiling: the time of the baseline's amount of work
    # at each run's rate), `ratio` (candidate / baseline: above 1 is slower), `ci_low`..`ci_high`,
    # `p_value`, `verdict` (faster, slower, same, incomparable, inconclusive: the interval holds
    # both no change and the effect, a side disturbed or on a busy machine, or slower but
    # provisional; `samples_verdict` the samples' own, `note` why), `method` (samples, or
    # summary where a run's samples were pruned), `provisional` (the key's run-to-run spread not
    # known yet), `conditions_changed` (what differs between the runs), `accuracy_changed` (a
    # correctness error that moved beyond its tolerance's noise), and `says`.
    "comparisons": """
        SELECT c.*,
               c.verdict
               || CASE WHEN c.samples_verdict = 'inconclusive'
                       THEN ' (' || coalesce(c.note, '') || ')'
                       WHEN c.verdict = 'inconclusive'
                       THEN ' (' || coalesce(c.samples_verdict, '?') || ' by its samples: '
                            || coalesce(c.note, '') || ')' ELSE '' END
               || CASE WHEN coalesce(c.samples_verdict, c.verdict) IN ('faster', 'slower')
                       THEN printf(' (%.3gx, %.3g to %.3g)', c.ratio, c.ci_low, c.ci_high)
                       ELSE '' END
               || CASE WHEN c.verdict IN ('faster', 'slower') AND c.provisional
                       THEN ', provisional' ELSE '' END
               || CASE WHEN c.accuracy_changed IS NOT NULL
                       THEN '; accuracy changed: ' || c.accuracy_changed ELSE '' END
               || CASE WHEN c.conditions_changed IS NOT NULL
                       THEN '; changed: ' || c.conditions_changed ELSE '' END AS says
        FROM run_comparisons AS c
    """,
}
