"""The views of imported profiles (docs/imports.md): a trace's own timeline (each lane's busy time
and gaps, its operators as Gantt bars, the top operators by share of the end-to-end time) and its
operators on the Roofline, each of an import's newest run (per machine, backend and import name:
the config's `imports` key, `runs.sweep`). The figures are those of imports.torch_timeline (the
command line's), worked out in SQL from the stored operators. Each comment says what one row is.

A lane is a CPU thread (`cpu thread <tid>`: its top-level operators, those inside none) or a GPU
stream (`gpu stream <n>`: its kernels, copies and sets); an Nsight Compute export's kernels have
no start (replayed one by one) and are on no lane."""

# Each import name's newest run, per machine and backend
_NEWEST_IMPORTS = """
    SELECT machine_id, backend, sweep AS name, run_id, started_at
    FROM runs
    WHERE kind = 'import'
    QUALIFY row_number() OVER (
        PARTITION BY machine_id, backend, sweep ORDER BY started_at DESC, run_id DESC
    ) = 1
"""

# The rows whose time is a newest import's busy time (as imports.torch_trace.busy_rows): each
# thread's top-level operators and each GPU event, on its lane; end_s = start_s + time_s; a GPU
# event's launch_delay_s from its launch call's start to its own (null on a CPU thread)
_BUSY = f"""
    SELECT n.machine_id, n.backend, n.name, n.run_id, n.started_at, o.index, o.op, o.kind,
           o.parent, o.dtype, o.input_dims,
           CASE WHEN o.kind = 'cpu_op' THEN 'cpu thread ' ELSE 'gpu ' END
               || coalesce(o.thread, 'None') AS lane,
           o.start_s, o.time_s, o.start_s + o.time_s AS end_s,
           o.start_s - o.launch_s AS launch_delay_s
    FROM imported_operators AS o JOIN ({_NEWEST_IMPORTS}) AS n USING (run_id)
    WHERE o.start_s IS NOT NULL AND o.time_s IS NOT NULL
      AND NOT (o.kind = 'cpu_op' AND coalesce(o.nested, false))
"""

# Per run: the end-to-end time, from the first event to the last, where the trace marks its
# profiler steps (settings' annotations: ProfilerStep#1, record_function) from their start to
# their end if wider (the Python time before a step's first operator is part of the step)
_END_TO_END = f"""
    WITH steps AS (
        SELECT run_id, unnest(CAST(settings::JSON -> 'annotations' AS JSON[])) AS step
        FROM imported_profiles
    ),
    marked AS (
        SELECT run_id, min(CAST(step ->> 'start_s' AS DOUBLE)) AS first_s,
               max(CAST(step ->> 'start_s' AS DOUBLE) + CAST(step ->> 'time_s' AS DOUBLE))
                   AS last_s
        FROM steps GROUP BY run_id
    )
    SELECT b.run_id, least(min(b.start_s), any_value(m.first_s)) AS first_s,
           greatest(max(b.end_s), any_value(m.last_s)) AS last_s,
           greatest(max(b.end_s), any_value(m.last_s))
               - least(min(b.start_s), any_value(m.first_s)) AS end_to_end_s
    FROM ({_BUSY}) AS b LEFT JOIN marked AS m USING (run_id)
    GROUP BY b.run_id
"""

IMPORT_VIEWS_SQL = {
    # Per machine, backend, import name and event on a lane (its newest run): the Gantt chart's
    # bars. A thread's top-level operator or a GPU event (`kind` cpu_op, kernel, gpu_memcpy,
    # gpu_memset) with `index` (its order in the trace), `op`, `parent`, `dtype`, `input_dims`
    # (JSON), `lane`, `start_s` and `end_s` (s from the trace's first event), `time_s`; where
    # the roofline step placed it (imported_points, by run_id and index; most top-level
    # operators hold no work of their own: it is in the operators inside them) its `level`,
    # `limiter`, `efficiency` and `cause`, else `unplaced`; `on_critical_path` and `on_path_s`
    # (imported_critical_path, by run_id and index).
    "latest_imported_operators": f"""
        SELECT b.*, p.intensity, p.level, p.limiter, p.efficiency, p.cause, p.unplaced,
               c.index IS NOT NULL AS on_critical_path, c.on_path_s
        FROM ({_BUSY}) AS b
        LEFT JOIN imported_points AS p USING (run_id, index)
        LEFT JOIN imported_critical_path AS c USING (run_id, index)
    """,
    # Per machine, backend, import name and operator of its newest run, nested ones included
    # (the work belongs to the innermost operator that has a ledger): its imported_points row
    # (intensity in FLOP/B, rates in FLOP/s, times in s; `unplaced` says why one has no point)
    # with the operator's `kind`, `nested`, `input_dims` (JSON), `ledger`, `flops_source`,
    # `q_source` and `start_s` (imported_operators, by run_id and index).
    "latest_imported_points": f"""
        SELECT n.machine_id, n.backend, n.name, n.started_at, p.* EXCLUDE (machine_id),
               o.kind, o.nested, o.input_dims, o.ledger, o.flops_source, o.q_source, o.start_s
        FROM imported_points AS p
        JOIN ({_NEWEST_IMPORTS}) AS n USING (run_id)
        JOIN imported_operators AS o USING (run_id, index)
    """,
    # Per machine, backend, import name and lane (its newest run): `events`, `first_s` and
    # `last_s` (its first start and last end, s from the trace's first event), `span_s`
    # (last - first), `busy_s` (the union of its events' intervals: a thread's top-level
    # operators, or a stream's events, do not overlap, but a partial overlap is counted once),
    # `gap_s` (span - busy: time between its events), `gap_fraction` (of the span), the trace's
    # `end_to_end_s` (from `trace_start_s` to `trace_end_s`: its profiler steps' or its events'
    # first start to last end) and `busy_fraction` (busy over it); the critical path of the
    # trace's dependencies (imported_critical_path: `path_s`, `path_busy_s`, `path_waiting_s`,
    # the same on every lane of a run; `on_path_s`, this lane's time on it; null where the
    # trace has none: see roofline.imported_timeline), on a GPU stream the launch-to-kernel
    # gaps (`median_launch_delay_s`, `max_launch_delay_s`: from each event's launch call to its
    # start), and `says`.
    "imported_timeline": f"""
        WITH reach AS (
            SELECT *, max(end_s) OVER (
                PARTITION BY run_id, lane ORDER BY start_s, index
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
            ) AS reach_s
            FROM ({_BUSY})
        ),
        lanes AS (
            SELECT machine_id, backend, name, run_id, started_at, lane, count(*) AS events,
                   min(start_s) AS first_s, max(end_s) AS last_s,
                   max(end_s) - min(start_s) AS span_s,
                   sum(greatest(0, end_s - greatest(start_s, coalesce(reach_s, start_s))))
                       AS busy_s,
                   median(launch_delay_s) AS median_launch_delay_s,
                   max(launch_delay_s) AS max_launch_delay_s
            FROM reach
            GROUP BY ALL
        ),
        path AS (
            SELECT run_id, any_value(path_s) AS path_s, any_value(path_busy_s) AS path_busy_s,
                   any_value(path_waiting_s) AS path_waiting_s
            FROM imported_critical_path GROUP BY run_id
        ),
        on_path AS (
            SELECT run_id, lane, sum(on_path_s) AS on_path_s
            FROM imported_critical_path GROUP BY run_id, lane
        ),
        timed AS (
            SELECT l.*, l.span_s - l.busy_s AS gap_s,
                   (l.span_s - l.busy_s) / nullif(l.span_s, 0) AS gap_fraction,
                   e.first_s AS trace_start_s, e.last_s AS trace_end_s, e.end_to_end_s,
                   l.busy_s / nullif(e.end_to_end_s, 0) AS busy_fraction,
                   p.path_s, p.path_busy_s, p.path_waiting_s, o.on_path_s
            FROM lanes AS l
            JOIN ({_END_TO_END}) AS e USING (run_id)
            LEFT JOIN path AS p USING (run_id)
            LEFT JOIN on_path AS o USING (run_id, lane)
        )
        SELECT *,
               printf('%s: %d events, %.3g ms busy over %.3g ms from its first to its last '
                      || '(%.0f %% in gaps), busy %.0f %% of the %.3g ms end to end',
                      lane, events, busy_s * 1e3, span_s * 1e3, 100 * coalesce(gap_fraction, 0),
                      100 * busy_fraction, end_to_end_s * 1e3)
               || coalesce(printf('; %.3g ms of its time on the critical path', on_path_s * 1e3),
                           '')
               || coalesce(printf('; its events started a median %.3g μs after their launch '
                                  || '(at most %.3g μs)', median_launch_delay_s * 1e6,
                                  max_launch_delay_s * 1e6), '') AS says
        FROM timed
    """,
    # Per machine, backend, import name and top-level operator name (its newest run): `calls`,
    # `time_s` (their summed inclusive time, s), `device_time_s` (on a GPU trace: the time of
    # the GPU events their spans launched, theirs and the operators' inside them; null on a CPU
    # trace), `share` of the trace's `end_to_end_s` (of device_time_s on a GPU trace, else of
    # time_s; one thread's shares sum to at most 1), and `rank` (1: the largest share), as HTA
    # and the profiler's tables rank operators.
    "imported_top_operators": f"""
        WITH RECURSIVE busy AS ({_BUSY}),
        top AS (SELECT * FROM busy WHERE kind = 'cpu_op'),
        inside(run_id, index, root) AS (
            SELECT run_id, index, index FROM top
            UNION ALL
            SELECT o.run_id, o.index, i.root
            FROM imported_operators AS o JOIN inside AS i
              ON o.run_id = i.run_id AND o.parent = i.index
        ),
        launched AS (
            SELECT i.run_id, i.root, sum(o.time_s) AS device_time_s
            FROM inside AS i JOIN imported_operators AS o USING (run_id, index)
            WHERE o.kind <> 'cpu_op'
            GROUP BY i.run_id, i.root
        ),
        gpu AS (SELECT DISTINCT run_id FROM busy WHERE kind <> 'cpu_op'),
        groups AS (
            SELECT t.machine_id, t.backend, t.name, t.run_id, t.started_at, t.op,
                   count(*) AS calls, sum(t.time_s) AS time_s,
                   CASE WHEN any_value(g.run_id) IS NOT NULL
                        THEN sum(coalesce(l.device_time_s, 0)) END AS device_time_s
            FROM top AS t
            LEFT JOIN launched AS l ON l.run_id = t.run_id AND l.root = t.index
            LEFT JOIN gpu AS g ON g.run_id = t.run_id
            GROUP BY t.machine_id, t.backend, t.name, t.run_id, t.started_at, t.op
        )
        SELECT g.*, e.end_to_end_s,
               coalesce(g.device_time_s, g.time_s) / nullif(e.end_to_end_s, 0) AS share,
               row_number() OVER (
                   PARTITION BY g.run_id ORDER BY coalesce(g.device_time_s, g.time_s) DESC, g.op
               ) AS rank
        FROM groups AS g JOIN ({_END_TO_END}) AS e USING (run_id)
    """,
}
