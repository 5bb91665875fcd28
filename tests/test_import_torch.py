"""torch.profiler traces read as torch wrote them (rooflab.imports.torch_trace, op_ledgers,
torch_timeline), on the traces recorded with torch 2.13 on this project's CPU machine
(tests/fixtures/torch/README.md): each operator's F and Q from its shapes, nesting counted once,
the time without a ledger, the trace's own timeline, and each bad input refused in one line.
Only the last test needs torch: it records a fresh trace and checks the ledgers against torch's
own FLOP formulas."""

import gzip
import hashlib
import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rooflab.imports import OPERATOR_COLUMNS, ProfileError
from rooflab.imports.op_ledgers import op_ledger
from rooflab.imports.torch_timeline import trace_timeline
from rooflab.imports.torch_trace import TORCH_COLUMNS, ledger_coverage, read_torch_trace
from rooflab.model import gemm_ledger

TRACES = Path(__file__).parent / "fixtures" / "torch"
MLP, UNFUSED = TRACES / "mlp.json.gz", TRACES / "mlp_unfused.json.gz"
ELEMENTWISE, NO_SHAPES = TRACES / "elementwise.json", TRACES / "mlp_noshapes.json"
BATCH, D_IN, D_HIDDEN, D_OUT, STEPS = 64, 256, 512, 128, 3
N = 1 << 20  # the elementwise chain's elements
FP32 = 4


def raw_events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as stream:
        return json.load(stream)["traceEvents"]


def rows_named(profile, op: str, dims=None) -> list[dict]:
    return [
        r for r in profile.operators if r["op"] == op and (dims is None or r["input_dims"] == dims)
    ]


def children(profile, row) -> list[dict]:
    return [r for r in profile.operators if r["parent"] == row["index"]]


def ancestors(profile, row):
    while row["parent"] is not None:
        row = profile.operators[row["parent"]]
        yield row


# ---- what a trace is ---------------------------------------------------------------------------


def test_a_cpu_trace_reads_with_its_provenance_and_every_column():
    profile = read_torch_trace(MLP)
    assert (profile.tool, profile.tool_version, profile.device) == ("torch", None, "cpu")
    assert profile.sha256 == hashlib.sha256(MLP.read_bytes()).hexdigest()
    # baseTimeNanoseconds + the first event's ts: the minute the README says it was recorded
    assert profile.recorded_at == "2026-12-05T06:39:58+00:00"
    assert profile.settings["record_shapes"] == 1 and profile.settings["with_flops"] == 1
    steps = profile.settings["annotations"]
    assert [s["name"] for s in steps] == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    cpu_ops = [e for e in raw_events(MLP) if e.get("cat") == "cpu_op"]
    assert len(profile.operators) == len(cpu_ops)  # one row per operator, no kernels on a CPU
    assert [r["index"] for r in profile.operators] == list(range(len(cpu_ops)))
    for row in profile.operators:
        assert set(OPERATOR_COLUMNS) | set(TORCH_COLUMNS) <= set(row)
        assert row["kind"] == "cpu_op" and row["counted"] is None
    starts = [r["start_s"] for r in profile.operators]
    assert starts == sorted(starts) and min(starts) >= 0


def test_an_operators_time_is_its_events_own_duration():
    profile = read_torch_trace(MLP)
    raw = sorted(e["dur"] for e in raw_events(MLP) if e.get("name") == "aten::addmm")
    read = sorted(r["time_s"] for r in rows_named(profile, "aten::addmm"))
    assert len(raw) == 2 * STEPS
    assert read == pytest.approx([d * 1e-6 for d in raw], rel=1e-12)


# ---- F and Q per operator ----------------------------------------------------------------------


def test_the_first_linears_addmm_is_a_gemm_of_the_models_ledger():
    profile = read_torch_trace(MLP)
    dims = [[D_HIDDEN], [BATCH, D_IN], [D_IN, D_HIDDEN], [], []]
    addmms = rows_named(profile, "aten::addmm", dims)
    assert len(addmms) == STEPS
    ledger = gemm_ledger(BATCH, D_HIDDEN, D_IN, "fp32", bias=True)
    bytes_by_hand = FP32 * (BATCH * D_IN + D_IN * D_HIDDEN + BATCH * D_HIDDEN + D_HIDDEN)
    for addmm in addmms:
        # 2MNK as torch's own with_flops formula counts it (the bias adds are bytes, not FLOPs)
        assert addmm["flops"] == 2 * BATCH * D_IN * D_HIDDEN == ledger.flops
        assert addmm["bytes"] == bytes_by_hand == ledger.bytes
        assert (addmm["ledger"], addmm["dtype"]) == ("matmul", "fp32")
        assert (addmm["flops_source"], addmm["q_source"]) == ("ledger", "model")
        linear = profile.operators[addmm["parent"]]  # nn.Linear's aten::linear around it
        assert linear["op"] == "aten::linear" and linear["nested"] is False
        assert (linear["flops"], linear["bytes"], linear["ledger"]) == (None, None, None)
        assert linear["work_in_children"] is True and addmm["nested"] is True


def test_the_backward_matmuls_are_gemms_of_their_own_shapes():
    profile = read_torch_trace(MLP)
    expected = {  # grad of layer 2's input and weight, grad of layer 1's weight
        ((64, 128), (128, 512)): 2 * 64 * 128 * 512,
        ((128, 64), (64, 512)): 2 * 128 * 64 * 512,
        ((512, 64), (64, 256)): 2 * 512 * 64 * 256,
    }
    mms = rows_named(profile, "aten::mm")
    assert Counter(tuple(map(tuple, r["input_dims"])) for r in mms) == dict.fromkeys(expected, 3)
    for mm in mms:
        (m, k), (_, n) = mm["input_dims"]
        assert mm["flops"] == expected[((m, k), (k, n))]
        assert mm["bytes"] == FP32 * (m * k + k * n + m * n)


def test_the_elementwise_chain_counts_a_flop_per_element_and_each_operand_once():
    profile = read_torch_trace(ELEMENTWISE)
    per_step = {  # op, dims -> (F, Q)
        # x * 2.0: the Python number is a 0-dim double tensor, 8 bytes; it does not promote
        ("aten::mul", ((N,), ())): (N, FP32 * N + 8 + FP32 * N),
        ("aten::add", ((N,), (), ())): (N, FP32 * N + 8 + FP32 * N),
        # relu is aten::clamp_min inside: a comparison, no FLOP; it reads and writes
        ("aten::clamp_min", ((N,), ())): (0, 2 * FP32 * N),
        ("aten::add", ((N,), (N,), ())): (N, 3 * FP32 * N),
        # the inner aten::sum of x.sum(): an add per element, one element written
        ("aten::sum", ((N,), (), (), ())): (N, FP32 * N + FP32),
    }
    held = Counter()
    for row in profile.operators:
        if row["flops"] is not None:
            key = (row["op"], tuple(map(tuple, row["input_dims"])))
            assert (row["flops"], row["bytes"]) == per_step[key], key
            assert row["dtype"] == "fp32"
            held[key] += 1
    assert held == dict.fromkeys(per_step, STEPS)
    for relu in rows_named(profile, "aten::relu"):
        assert relu["flops"] is None and relu["work_in_children"] is True


def test_an_outer_operators_ledger_is_the_same_work_as_its_inner_ones():
    """linear = addmm and matmul = mm for the same operands, so the work the innermost holds is
    all the outer one would have counted: nothing is lost by giving it to the inner one."""
    f = ["float", "float", "float"]
    linear = op_ledger("aten::linear", [[64, 256], [512, 256], [512]], f, [])
    addmm = op_ledger("aten::addmm", [[512], [64, 256], [256, 512], [], []], f, [])
    assert (linear.flops, linear.bytes) == (addmm.flops, addmm.bytes)
    matmul = op_ledger("aten::matmul", [[64, 256], [256, 512]], f[:2], [])
    mm = op_ledger("aten::mm", [[64, 256], [256, 512]], f[:2], [])
    assert (matmul.flops, matmul.bytes) == (mm.flops, mm.bytes)
    bmm = op_ledger("aten::bmm", [[8, 64, 32], [8, 32, 16]], ["c10::BFloat16"] * 2, [])
    assert bmm.flops == 8 * gemm_ledger(64, 16, 32, "bf16").flops
    assert bmm.bytes == 2 * 8 * (64 * 32 + 32 * 16 + 64 * 16) and bmm.dtype == "bf16"
    # beta = 0: C is not read; an M x N C with beta = 1 is read once
    dims, types = [[64, 512], [64, 256], [256, 512], [], []], f + ["Scalar"] * 2
    assert op_ledger("aten::addmm", dims, types, ["", "", "", "0", "1"]).bytes == mm.bytes
    beta_1 = op_ledger("aten::addmm", dims, types, ["", "", "", "1", "1"])
    assert beta_1.bytes == mm.bytes + 4 * 64 * 512
    # integer arithmetic has no FLOPs: no ledger; a type rooflab has no roof for neither
    assert op_ledger("aten::add", [[10], [10], []], ["long int", "long int", "Scalar"], []) is None
    assert op_ledger("aten::mm", [[4, 4], [4, 4]], ["long int"] * 2, []) is None


# ---- nesting and the time without a ledger -----------------------------------------------------


@pytest.mark.parametrize("path", [MLP, UNFUSED, ELEMENTWISE])
def test_work_is_counted_once_in_the_innermost_operator_that_has_it(path):
    profile = read_torch_trace(path)
    for row in profile.operators:
        if row["flops"] is not None:
            assert not any(a["flops"] is not None for a in ancestors(profile, row))
            assert all(a["work_in_children"] for a in ancestors(profile, row))
        if row["work_in_children"]:
            assert row["flops"] is None and row["bytes"] is None


def test_a_training_steps_flops_are_the_models_by_hand():
    per_step = (
        2 * 64 * 256 * 512  # forward: layer 1's addmm
        + 2 * 64 * 512 * 128  # layer 2's addmm (relu: comparisons, 0)
        + 64 * 128  # mse_loss's mean: its sum over the elements...
        + 1  # ...and the division of that one element
        + 2 * 64 * 128 * 512  # backward: layer 2's input grad
        + 2 * 128 * 64 * 512  # layer 2's weight grad
        + 64 * 128  # layer 2's bias grad (a sum over the batch)
        + 2 * 512 * 64 * 256  # layer 1's weight grad (x needs no grad)
        + 64 * 512  # layer 1's bias grad
    )
    fused = read_torch_trace(MLP)
    assert sum(r["flops"] or 0 for r in fused.operators) == STEPS * per_step
    # the unfused forward does the same GEMMs and two broadcast adds more, where addmm adds the
    # bias in its epilogue (no FLOPs in the GEMM ledger)
    unfused = read_torch_trace(UNFUSED)
    adds = STEPS * (64 * 512 + 64 * 128)
    assert sum(r["flops"] or 0 for r in unfused.operators) == STEPS * per_step + adds


def test_the_time_without_a_ledger_is_what_no_ledgered_operator_covers():
    profile = read_torch_trace(ELEMENTWISE)
    coverage = ledger_coverage(profile.operators)["cpu"]
    top = [r for r in profile.operators if not r["nested"]]
    assert coverage["total_s"] == pytest.approx(sum(r["time_s"] for r in top))
    # relu around clamp_min and x.sum() around aten::sum hold no work themselves: the rest of
    # their time, outside the inner op, is the time without a ledger; mul and add hold theirs
    bare = 0.0
    for outer in top:
        if outer["work_in_children"]:
            (inner,) = [c for c in children(profile, outer) if c["flops"] is not None]
            bare += outer["time_s"] - inner["time_s"]
    assert coverage["without_ledger_s"] == pytest.approx(bare)
    assert coverage["with_ledger_s"] + coverage["without_ledger_s"] == pytest.approx(
        coverage["total_s"]
    )
    assert coverage["share_without_ledger"] == pytest.approx(bare / coverage["total_s"])
    mlp = ledger_coverage(read_torch_trace(MLP).operators)["cpu"]
    # the training step's autograd bookkeeping, transposes and loss have no ledger
    assert 0.01 < mlp["share_without_ledger"] < 0.5


# ---- the trace's timeline ----------------------------------------------------------------------


@pytest.mark.parametrize("path", [MLP, ELEMENTWISE])
def test_the_timeline_of_one_thread_adds_up(path):
    profile = read_torch_trace(path)
    timeline = trace_timeline(profile, top=50)
    top = [r for r in profile.operators if not r["nested"]]
    (lane,) = timeline["lanes"]
    assert lane["lane"] == f"cpu thread {top[0]['thread']}" and lane["events"] == len(top)
    assert lane["busy_s"] == pytest.approx(sum(r["time_s"] for r in top))
    assert lane["busy_s"] + lane["gaps_s"] == pytest.approx(lane["last_s"] - lane["first_s"])
    assert all(g["gap_s"] > 0 for g in lane["gaps"])
    assert lane["busy_s"] <= timeline["end_to_end_s"]
    steps = timeline["steps"]
    span = steps[-1]["start_s"] + steps[-1]["time_s"] - steps[0]["start_s"]
    assert timeline["end_to_end_s"] >= span > 0
    # one thread, one lane: the critical path is every top-level operator, in order
    path_ = timeline["critical_path"]
    assert [s["index"] for s in path_["steps"]] == [r["index"] for r in top]
    assert path_["busy_s"] == pytest.approx(lane["busy_s"])
    assert path_["total_s"] == pytest.approx(lane["last_s"] - lane["first_s"])
    assert path_["waiting_s"] == pytest.approx(lane["gaps_s"])
    assert timeline["launches"] == []  # no GPU


def test_the_top_operators_rank_by_share_of_the_end_to_end_time():
    profile = read_torch_trace(ELEMENTWISE)
    timeline = trace_timeline(profile, top=3)
    ranked = timeline["top_operators"]
    assert len(ranked) == 3
    shares = [g["share"] for g in ranked]
    assert shares == sorted(shares, reverse=True) and sum(shares) <= 1
    calls = {g["op"]: g["calls"] for g in trace_timeline(profile, top=10)["top_operators"]}
    assert calls == {
        "aten::add": 2 * STEPS,
        "aten::mul": STEPS,
        "aten::relu": STEPS,
        "aten::sum": STEPS,
    }
    for group in ranked:
        time = sum(
            r["time_s"] for r in profile.operators if r["op"] == group["op"] and not r["nested"]
        )
        assert group["time_s"] == pytest.approx(time)
        assert group["share"] == pytest.approx(time / timeline["end_to_end_s"])


# ---- bad input ---------------------------------------------------------------------------------


def refused(path: Path) -> str:
    with pytest.raises(ProfileError) as caught:
        read_torch_trace(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    return message


def test_a_truncated_trace_is_refused(tmp_path):
    text = ELEMENTWISE.read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: len(text) // 2])
    assert "not JSON" in refused(cut) and "truncated" in refused(cut)
    squeezed = MLP.read_bytes()
    cut_gz = tmp_path / "cut.json.gz"
    cut_gz.write_bytes(squeezed[: len(squeezed) // 2])
    assert "gzip" in refused(cut_gz)
    assert "cannot read" in refused(tmp_path / "absent.json")


def test_json_that_is_no_chrome_trace_is_refused(tmp_path):
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2, 3]")
    assert "not a torch.profiler Chrome trace" in refused(listed)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"metadata": {}, "events": []}))
    assert "traceEvents" in refused(other)


def test_a_trace_without_operators_is_refused(tmp_path):
    trace = json.loads(ELEMENTWISE.read_text())
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("cat") != "cpu_op"]
    path = tmp_path / "annotations_only.json"
    path.write_text(json.dumps(trace))
    assert "no cpu_op events" in refused(path)


def test_a_trace_recorded_without_shapes_says_how_to_record_it():
    assert refused(NO_SHAPES).endswith("re-record with record_shapes=True")


def test_an_unknown_dtype_is_refused_where_a_ledger_needs_it(tmp_path):
    trace = json.loads(ELEMENTWISE.read_text())
    ops = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"]
    (mul, *_) = [e for e in ops if e["name"] == "aten::mul"]
    mul["args"]["Input type"][0] = "c10::Float4_e2m1fn_x2"  # a type this table does not know
    path = tmp_path / "fp4.json"
    path.write_text(json.dumps(trace))
    message = refused(path)
    assert "aten::mul" in message and "'c10::Float4_e2m1fn_x2'" in message
    # the same type on an operator without a ledger is shown as unknown, not refused
    trace = json.loads(ELEMENTWISE.read_text())
    (to, *_) = [e for e in trace["traceEvents"] if e.get("name") == "aten::to"]
    to["args"]["Input type"][0] = "c10::Float4_e2m1fn_x2"
    path.write_text(json.dumps(trace))
    assert read_torch_trace(path).operators


# ---- live, with torch --------------------------------------------------------------------------


def test_a_fresh_trace_recorded_live_reads_and_agrees_with_torchs_own_flops(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    layer = torch.nn.Linear(48, 40)
    x, a, b = torch.randn(16, 48), torch.randn(4, 8, 24), torch.randn(4, 24, 12)
    c = torch.randn(4, 8, 12)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
        layer(x).relu().sum()
        torch.bmm(a, b) * 2.0 + 1.0
        torch.baddbmm(c, a, b)
        x @ x.T
    path = tmp_path / "live.json"
    prof.export_chrome_trace(str(path))
    profile_ = read_torch_trace(path)
    theirs = {  # (op, shapes) -> torch's FLOPs per call, for the ops its formulas count
        (e.key, str(e.input_shapes)): e.flops / e.count
        for e in prof.key_averages(group_by_input_shape=True)
        if e.flops
    }
    assert {op for op, _ in theirs} >= {"aten::addmm", "aten::bmm", "aten::baddbmm", "aten::mm"}
    for (op, shapes), flops in theirs.items():
        rows = [r for r in profile_.operators if r["op"] == op and str(r["input_dims"]) == shapes]
        assert rows, (op, shapes)
        assert all(r["flops"] == flops for r in rows), (op, shapes, flops)
    gemm = gemm_ledger(16, 40, 48, "fp32", bias=True)
    (addmm,) = [r for r in profile_.operators if r["op"] == "aten::addmm"]
    assert (addmm["flops"], addmm["bytes"]) == (gemm.flops, gemm.bytes)
    recorded = datetime.fromisoformat(profile_.recorded_at)
    assert abs((datetime.now(UTC) - recorded).total_seconds()) < 600
