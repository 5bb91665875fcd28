"""A torch.profiler trace's own timeline (issue 45, docs/imports.md), from the rows
`torch_trace.read_torch_trace` gives: per lane (a CPU thread's top-level operators, a GPU
stream's kernels, copies and sets) its busy time, gaps and segments for a Gantt chart; each
kernel's delay from its launch call to its start; the critical path of the trace's own
dependencies (lane order, and a launch before a starved GPU); and the operators with the largest
share of the end-to-end time, as HTA and the profiler's tables rank them. Plain dicts and lists,
seconds from the trace's first event."""

from __future__ import annotations

from collections import defaultdict

from rooflab.imports.profile import Profile
from rooflab.imports.torch_trace import ancestors, busy_rows

__all__ = ["trace_timeline"]


def trace_timeline(profile: Profile, top: int = 10) -> dict:
    """The trace's own timeline, from its rows (plain dicts and lists, seconds from the first
    event): per lane (a CPU thread's top-level operators, a GPU stream's events) its busy time,
    its gaps and its segments; the launch-to-start delay of each kernel; the critical path; the
    `top` operators by their share of the end-to-end time (top-level, inclusive: on a GPU by the
    kernels their spans launched); the profiler steps (its user annotations, as
    `record_function` and `prof.step()` name them)."""
    lanes = _lanes(profile.operators)
    every = [row for rows in lanes.values() for row in rows]
    steps = profile.settings.get("annotations", [])
    if not every:
        raise ValueError(f"{profile.path}: no operators: no timeline")
    # The end-to-end time: the profiled steps' span where annotations mark them (the Python time
    # before a step's first operator is part of it), else the operators'
    start = min(r["start_s"] for r in every + steps)
    end = max(r["start_s"] + r["time_s"] for r in every + steps)
    span = end - start
    return {
        "start_s": start,
        "end_s": end,
        "end_to_end_s": span,
        "lanes": [_lane(name, rows, span) for name, rows in lanes.items()],
        "launches": [
            {
                "index": r["index"],
                "op": r["op"],
                "parent": r["parent"],
                "launch_s": r["launch_s"],
                "start_s": r["start_s"],
                "delay_s": r["start_s"] - r["launch_s"],
            }
            for r in every
            if r.get("launch_s") is not None
        ],
        "critical_path": _critical_path(profile.operators, lanes),
        "top_operators": _top_operators(lanes, span, top),
        "steps": steps,
    }


def _lanes(operators: list[dict]) -> dict[str, list[dict]]:
    """Lane name ("cpu thread 7", "gpu stream 7") -> its rows in start order."""
    lanes: dict[str, list[dict]] = defaultdict(list)
    for kind, rows in busy_rows(operators).items():
        for row in rows:
            lanes[f"{kind} {'thread ' if kind == 'cpu' else ''}{row['thread']}"].append(row)
    return {name: sorted(rows, key=lambda r: r["start_s"]) for name, rows in lanes.items()}


def _lane(name: str, rows: list[dict], span: float) -> dict:
    busy, gaps, reach = 0.0, [], None
    for row in rows:
        begin, finish = row["start_s"], row["start_s"] + row["time_s"]
        if reach is not None and begin > reach:
            gaps.append({"start_s": reach, "gap_s": begin - reach, "before": row["index"]})
        busy += max(0.0, finish - max(begin, reach if reach is not None else begin))
        reach = finish if reach is None else max(reach, finish)
    first, last = rows[0]["start_s"], reach
    return {
        "lane": name,
        "events": len(rows),
        "first_s": first,
        "last_s": last,
        "busy_s": busy,
        "gaps_s": sum(g["gap_s"] for g in gaps),  # between its first event and its last
        "idle_s": span - busy,  # of the trace's end-to-end time
        "gaps": gaps,
        "segments": [
            {"index": r["index"], "op": r["op"], "start_s": r["start_s"], "time_s": r["time_s"]}
            for r in rows
        ],
    }


def _critical_path(operators: list[dict], lanes: dict[str, list[dict]]) -> dict:
    """Walking back from the event that ends last: each event waited on the one before it on its
    lane, or, a GPU event whose launch came after its stream's previous event ended, on the CPU
    operator that launched it (the GPU starved). A CPU wait on the GPU that the rows do not link
    (a sync) is not followed: the walk stays on the CPU lane there."""
    by_index = {r["index"]: r for r in operators}
    place = {r["index"]: (name, i) for name, rows in lanes.items() for i, r in enumerate(rows)}
    every = [row for rows in lanes.values() for row in rows]
    current = max(every, key=lambda r: r["start_s"] + r["time_s"])
    path: list[tuple[dict, float]] = []  # (event, the time it spent on the path), last first
    until = current["start_s"] + current["time_s"]
    while current is not None:
        path.append((current, min(current["time_s"], until - current["start_s"])))
        name, i = place[current["index"]]
        before = lanes[name][i - 1] if i > 0 else None
        launch = current.get("launch_s")
        launcher = _root(by_index, current["parent"]) if current["kind"] != "cpu_op" else None
        if (
            launch is not None
            and launcher is not None
            and launcher["index"] in place
            and (before is None or launch > before["start_s"] + before["time_s"])
        ):
            current, until = launcher, launch
        else:
            current, until = before, before["start_s"] + before["time_s"] if before else 0.0
    path.reverse()
    first = path[0][0]["start_s"]
    last = path[-1][0]["start_s"] + path[-1][0]["time_s"]
    busy = sum(on for _, on in path)
    return {
        "total_s": last - first,
        "busy_s": busy,
        "waiting_s": last - first - busy,
        "steps": [
            {
                "index": e["index"],
                "op": e["op"],
                "lane": place[e["index"]][0],
                "start_s": e["start_s"],
                "on_path_s": on,
            }
            for e, on in path
        ],
    }


def _root(by_index: dict, index: int | None) -> dict | None:
    """The top-level operator around an operator (itself when it is top-level)."""
    if index is None:
        return None
    *_, root = [index, *ancestors(by_index, index)]
    return by_index[root]


def _top_operators(lanes: dict[str, list[dict]], span: float, top: int) -> list[dict]:
    """Top-level operators by name: calls, their inclusive time and its share of the end-to-end
    time; on a GPU, ranked by the time of the kernels their spans launched (`device_time_s`)."""
    groups: dict[str, dict] = {}
    gpu = any(name.startswith("gpu") for name in lanes)
    for name, rows in lanes.items():
        for row in rows if name.startswith("cpu") else ():
            group = groups.setdefault(
                row["op"], {"op": row["op"], "calls": 0, "time_s": 0.0, "device_time_s": 0.0}
            )
            group["calls"] += 1
            group["time_s"] += row["time_s"]
            group["device_time_s"] += row.get("device_time_s") or 0.0
    key = "device_time_s" if gpu else "time_s"
    ranked = sorted(groups.values(), key=lambda g: -g[key])[:top]
    for group in ranked:
        group["share"] = group[key] / span if span else None
        if not gpu:
            group["device_time_s"] = None
    return ranked
