"""A `torch.profiler` trace (`prof.export_chrome_trace(PATH)`, `.json` or `.json.gz`) read as
torch wrote it: one row per operator (complete events of category `cpu_op`) and, on a GPU, one
per kernel, memcpy and memset with its launching operator (docs/imports.md).

- Nesting: on each thread, an operator inside another's span is its child (`parent`: the
  enclosing operator's `index`; `nested`). Its time is inside its parent's.
- Work (F, Q) belongs to the innermost operator that has any (`op_ledgers`, or the profiler's
  own `flops` where an event carries one: torch 2.13's exporter writes none); every operator
  around it gets flops and bytes None and `work_in_children` True, so nothing counts twice
  (`aten::linear` around `aten::addmm`: the addmm holds the GEMM).
- On a GPU the work goes to the kernel: an operator whose span launched one kernel hands its F
  and Q to that kernel (timed on the GPU; `work_of` names the operator); one that launched
  several keeps them, with the kernels' summed time as `device_time_s`. A kernel's `launch_s` is
  its launch call's start. An fp32 matmul whose kernel's name says TF32 is dtype "tf32".
- Times are the events' own durations (µs in the trace, seconds here), starts from the trace's
  first event. `index` orders operators by start (an enclosing one first), then kernels by
  start: two traces of the same model pair by it.

Rows carry OPERATOR_COLUMNS and TORCH_COLUMNS. `ledger_coverage` says how much of the time the
ledgers cover; `torch_timeline.trace_timeline` reads the rows back as the trace's timeline.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from bisect import bisect_right
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from rooflab.imports.op_ledgers import UnknownDtype, op_ledger, rooflab_dtype
from rooflab.imports.profile import OPERATOR_COLUMNS, Profile, ProfileError, file_sha256

__all__ = [
    "GPU_CATEGORIES",
    "TORCH_COLUMNS",
    "ancestors",
    "busy_rows",
    "ledger_coverage",
    "read_torch_trace",
]

# Keys a torch row has beyond OPERATOR_COLUMNS
TORCH_COLUMNS = (
    "work_in_children",  # its work is counted in operators inside it (or in its one kernel)
    "launch_s",  # a kernel's launch call's start (s from the first event); None on a cpu_op
    "device_time_s",  # a cpu_op's kernels' summed GPU time, its span's launches (None: CPU)
    "work_of",  # a kernel carrying its launching operator's F and Q: that operator's index
)
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
_RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver")
# A GEMM kernel whose name says it multiplies fp32 operands in TF32 on the tensor cores (cuBLAS's
# `..._tf32f32_...`, CUTLASS's `tensorop_s1688gemm`): torch's allow_tf32 / matmul precision "high"
_TF32_KERNEL = re.compile(r"tf32|s1688gemm", re.IGNORECASE)
# µs: Kineto writes times to the ns; a child's end may round past its parent's
_END_TOLERANCE_US = 0.002
# The trace metadata kept as the profile's settings (how the profiler was told to record)
_SETTINGS = (
    "schemaVersion",
    "record_shapes",
    "with_flops",
    "profile_memory",
    "with_stack",
    "with_modules",
    "trace_id",
    "host_name",
    "deviceProperties",
)


def read_torch_trace(path: Path) -> Profile:
    """The trace at `path` as a Profile; a ProfileError naming the file where it is no trace
    torch.profiler wrote with shapes, or an operator with a ledger has a type rooflab lacks."""
    path = Path(path)
    trace = _load(path)
    events = [e for e in trace["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    ops = _spans(path, [e for e in events if e.get("cat") == "cpu_op"])
    if not ops:
        raise ProfileError(
            f"{path}: no cpu_op events: not a torch.profiler trace of operators; record with "
            "activities=[ProfilerActivity.CPU] (and ProfilerActivity.CUDA on a GPU)"
        )
    if not any("Input Dims" in op["args"] for op in ops):
        raise ProfileError(
            f"{path}: the trace has no input shapes: re-record with record_shapes=True"
        )
    gpu = _spans(path, [e for e in events if e.get("cat") in GPU_CATEGORIES])
    runtime = _spans(path, [e for e in events if e.get("cat") in _RUNTIME_CATEGORIES])
    annotations = _spans(path, [e for e in events if e.get("cat") == "user_annotation"])
    first = min(e["ts"] for e in ops + gpu + runtime + annotations)

    rows = [_op_row(path, i, op, first) for i, op in enumerate(ops)]
    _nest(ops, rows)
    _give_work_to_the_innermost(rows)
    if gpu:
        rows += _kernel_rows(ops, rows, gpu, runtime, first)
        _give_work_to_kernels(rows)
    device = _device(trace, gpu)
    steps = [
        {"name": a["name"], "start_s": (a["ts"] - first) * 1e-6, "time_s": a["dur"] * 1e-6}
        for a in annotations
    ]
    settings = {key: trace[key] for key in _SETTINGS if key in trace} | {"annotations": steps}
    return Profile(
        tool="torch",
        tool_version=None,  # the trace does not say which torch wrote it
        path=path,
        sha256=file_sha256(path),
        device=device,
        recorded_at=_recorded_at(trace, first),
        operators=rows,
        settings=settings,
        notes=_notes(rows),
    )


def ledger_coverage(operators: list[dict]) -> dict:
    """How much of the trace's time the ledgers cover, per lane kind: "cpu" (the top-level
    operators' time) and, on a GPU, "gpu" (the GPU events' time): the time of the operators that
    hold work, with what runs inside them and the kernels they launched, is covered; an operator
    around one that holds work has its covered children's time covered, not its own rest."""
    by_index = {row["index"]: row for row in operators}
    children: dict = defaultdict(list)
    for row in operators:
        if row["kind"] == "cpu_op" and row["parent"] is not None:
            children[row["parent"]].append(row)
    holding = {r["index"] for r in operators if r["kind"] == "cpu_op" and r["flops"] is not None}
    holding |= {r["work_of"] for r in operators if r["work_of"] is not None}
    around = {a for index in holding for a in ancestors(by_index, index)}

    def covered(row: dict) -> float:
        if row["kind"] != "cpu_op":
            chain = {row["parent"], *ancestors(by_index, row["parent"])} - {None}
            return row["time_s"] if row["flops"] is not None or chain & holding else 0.0
        if row["index"] in holding:
            return row["time_s"]
        return sum(covered(c) for c in children[row["index"]]) if row["index"] in around else 0.0

    result = {}
    for kind, rows in busy_rows(operators).items():
        total = sum(r["time_s"] for r in rows)
        inside = sum(covered(r) for r in rows)
        result[kind] = {
            "total_s": total,
            "with_ledger_s": inside,
            "without_ledger_s": total - inside,
            "share_without_ledger": (total - inside) / total if total else None,
        }
    return result


# ---- reading -----------------------------------------------------------------------------------


def _load(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as stream:
            trace = json.load(stream)
    except json.JSONDecodeError as error:
        raise ProfileError(
            f"{path}: not JSON ({error.msg}, line {error.lineno} column {error.colno}): a "
            "truncated trace? export it again with prof.export_chrome_trace(PATH)"
        ) from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise ProfileError(f"{path}: not a whole gzip file ({error}): truncated?") from None
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: not JSON text (binary content)") from None
    except OSError as error:
        raise ProfileError(f"{path}: cannot read it: {error.strerror or error}") from None
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        what = "an object" if isinstance(trace, dict) else f"a JSON {type(trace).__name__}"
        raise ProfileError(
            f"{path}: not a torch.profiler Chrome trace ({what} without traceEvents); "
            "export one with prof.export_chrome_trace(PATH)"
        )
    return trace


def _spans(path: Path, events: list[dict]) -> list[dict]:
    """Complete events in start order (an enclosing one before what it encloses)."""
    for event in events:
        if not all(isinstance(event.get(k), (int, float)) for k in ("ts", "dur")):
            raise ProfileError(
                f"{path}: a {event.get('cat')} event without a numeric ts and dur: "
                f"{json.dumps(event)[:120]}"
            )
        event.setdefault("args", {})
    return sorted(events, key=lambda e: (e["ts"], -e["dur"]))


def _op_row(path: Path, index: int, op: dict, first: float) -> dict:
    args = op["args"]
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    try:
        ledger = op_ledger(op["name"], dims, types, args.get("Concrete Inputs") or [])
    except UnknownDtype as error:
        raise ProfileError(f"{path}: {op['name']} (operator {index}): {error}") from None
    dtype = ledger.dtype if ledger else _main_dtype(types)
    row = dict.fromkeys(OPERATOR_COLUMNS + TORCH_COLUMNS) | {
        "index": index,
        "op": op["name"],
        "kind": "cpu_op",
        "input_dims": dims if "Input Dims" in args else None,
        "dtype": dtype,
        "start_s": (op["ts"] - first) * 1e-6,
        "time_s": op["dur"] * 1e-6,
        "thread": str(op.get("tid")),
        "nested": False,
        "work_in_children": False,
    }
    counted = args.get("flops")
    if isinstance(counted, (int, float)) and counted > 0:
        row |= {"flops": int(counted), "flops_source": "profiler"}
    elif ledger is not None:
        row |= {"flops": ledger.flops, "flops_source": "ledger"}
    if ledger is not None:
        row |= {"bytes": ledger.bytes, "q_source": "model", "ledger": ledger.kind}
    return row


def _main_dtype(types: list) -> str | None:
    """The dtype of an operator's first tensor input (None: none, or a type rooflab lacks)."""
    for torch_type in types:
        try:
            dtype = rooflab_dtype(torch_type)
        except UnknownDtype:
            return None  # an operator without a ledger: its type is shown, not needed
        if dtype is not None:
            return dtype
    return None


def _nest(ops: list[dict], rows: list[dict]) -> None:
    """Each operator's parent: the innermost operator on its thread whose span holds it."""
    stacks: dict = defaultdict(list)
    for index, op in enumerate(ops):
        stack = stacks[(op.get("pid"), op.get("tid"))]
        while stack and op["ts"] + op["dur"] > _end(ops[stack[-1]]) + _END_TOLERANCE_US:
            stack.pop()
        if stack:
            rows[index] |= {"parent": stack[-1], "nested": True}
        stack.append(index)


def _end(event: dict) -> float:
    return event["ts"] + event["dur"]


def ancestors(rows, index: int | None):
    """The operators around one (rows: a list by index, or a mapping index -> row)."""
    parent = rows[index]["parent"] if index is not None else None
    while parent is not None:
        yield parent
        parent = rows[parent]["parent"]


def _give_work_to_the_innermost(rows: list[dict]) -> None:
    """An operator with work inside one with work: the outer one's F and Q are its children's."""
    for row in rows:
        if row["flops"] is not None or row["bytes"] is not None:
            for parent in ancestors(rows, row["index"]):
                rows[parent]["work_in_children"] = True
    for row in rows:
        if row["work_in_children"]:
            _drop_work(row)


def _drop_work(row: dict) -> None:
    row |= dict.fromkeys(("flops", "flops_source", "bytes", "q_source", "ledger"))


# ---- kernels -----------------------------------------------------------------------------------


def _kernel_rows(ops, rows, gpu, runtime, first) -> list[dict]:
    """One row per GPU event, its parent the innermost operator around its launch call (found
    by the launch's `correlation`), else the operator with its `External id`."""
    launches = {e["args"].get("correlation"): e for e in runtime if "correlation" in e["args"]}
    by_external = {op["args"].get("External id"): i for i, op in enumerate(ops)}
    threads: dict = defaultdict(list)
    for i, op in enumerate(ops):
        threads[(op.get("pid"), op.get("tid"))].append(i)
    starts = {key: [ops[i]["ts"] for i in on] for key, on in threads.items()}
    kernels = []
    for number, event in enumerate(gpu):
        args = event["args"]
        launch = launches.get(args.get("correlation"))
        parent = _around(ops, rows, threads, starts, launch) if launch else None
        if parent is None:
            parent = by_external.get(args.get("External id"))
        launcher = rows[parent] if parent is not None else {}
        stream = args.get("stream")
        kernels.append(
            dict.fromkeys(OPERATOR_COLUMNS + TORCH_COLUMNS)
            | {
                "index": len(rows) + number,
                "op": event["name"],
                "kind": "kernel" if event["cat"] == "kernel" else event["cat"],
                "parent": parent,
                "input_dims": launcher.get("input_dims"),
                "dtype": launcher.get("dtype"),
                "start_s": (event["ts"] - first) * 1e-6,
                "time_s": event["dur"] * 1e-6,
                "thread": f"stream {stream}" if stream is not None else None,
                "nested": False,
                "work_in_children": False,
                "launch_s": (launch["ts"] - first) * 1e-6 if launch else None,
            }
        )
    return kernels


def _around(ops, rows, threads, starts, launch) -> int | None:
    """The innermost operator on the launch call's thread whose span holds the call."""
    key = (launch.get("pid"), launch.get("tid"))
    on_thread = threads.get(key, [])
    at = bisect_right(starts.get(key, []), launch["ts"]) - 1
    candidate = on_thread[at] if at >= 0 else None
    while candidate is not None:
        if _end(ops[candidate]) + _END_TOLERANCE_US >= _end(launch):
            return candidate
        candidate = rows[candidate]["parent"]
    return None


def _give_work_to_kernels(rows: list[dict]) -> None:
    """The GPU events an operator's span launched (its own and its children's) time its work on
    the GPU: a lone kernel takes the operator's F and Q; several events (or a lone copy or
    memset) leave them on the operator, which gets their summed time as device_time_s."""
    launched: dict[int, list[dict]] = defaultdict(list)
    for row in rows:
        if row["kind"] != "cpu_op" and row["parent"] is not None:
            launched[row["parent"]].append(row)
            for ancestor in ancestors(rows, row["parent"]):
                launched[ancestor].append(row)
    for index, kernels in launched.items():
        rows[index]["device_time_s"] = sum(k["time_s"] for k in kernels)
    for row in rows:
        mine = launched.get(row["index"], [])
        if row["kind"] != "cpu_op" or row["flops"] is None or not mine:
            continue
        if row["dtype"] == "fp32" and any(_TF32_KERNEL.search(k["op"]) for k in mine):
            row["dtype"] = "tf32"  # fp32 storage, TF32 tensor-core math (allow_tf32)
        if len(mine) == 1 and mine[0]["kind"] == "kernel":  # not a lone copy or memset
            (kernel,) = mine
            work = ("flops", "flops_source", "bytes", "q_source", "ledger", "dtype")
            kernel |= {key: row[key] for key in work} | {"work_of": row["index"]}
            _drop_work(row)
            row["work_in_children"] = True


# ---- what the trace says of itself -------------------------------------------------------------


def _device(trace: dict, gpu: list[dict]) -> str:
    """The GPU the kernels ran on (deviceProperties' name), else "cpu"."""
    if not gpu:
        return "cpu"
    used = {e["args"].get("device") for e in gpu}
    names = [p.get("name") for p in trace.get("deviceProperties") or [] if p.get("id") in used]
    names = sorted({n for n in names if n})
    return ", ".join(names) if names else "cuda"


def _recorded_at(trace: dict, first_us: float) -> str | None:
    """Kineto's timestamps are µs from an epoch it states as baseTimeNanoseconds (Unix ns); an
    older trace without it wrote Unix µs themselves (a value past 2001: > 1e15 µs)."""
    base = trace.get("baseTimeNanoseconds")
    if not isinstance(base, int) and first_us < 1e15:
        return None
    seconds = ((base if isinstance(base, int) else 0) + first_us * 1e3) / 1e9
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


def _notes(rows: list[dict]) -> list[str]:
    notes = []
    counted = sum(r["flops_source"] == "profiler" for r in rows)
    if counted:
        notes.append(f"F of {counted} operators is the profiler's own count (with_flops)")
    orphans = sum(r["kind"] != "cpu_op" and r["parent"] is None for r in rows)
    if orphans:
        notes.append(f"{orphans} GPU events have no launching operator in the trace")
    return notes


# ---- lanes -------------------------------------------------------------------------------------


def busy_rows(operators: list[dict]) -> dict[str, list[dict]]:
    """The rows whose time is the trace's busy time: top-level operators (cpu), GPU events."""
    lanes: dict[str, list[dict]] = {
        "cpu": [r for r in operators if r["kind"] == "cpu_op" and not r["nested"]]
    }
    gpu = [r for r in operators if r["kind"] != "cpu_op"]
    if gpu:
        lanes["gpu"] = gpu
    return lanes
