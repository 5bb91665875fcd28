import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from rooflab.model import (
    ELEMENT_BITS,
    Implementation,
    ModelError,
    Stage,
    WeightScales,
    bound,
    compare_implementations,
    gemm_ledger,
    hierarchical_bound,
    stage_bounds,
    tensor_bytes,
    topological_order,
)

C, B = 120e12, 2e12  # the article's hypothetical device


@pytest.mark.parametrize(
    ("m", "intensity", "compute_us", "memory_us", "bound_us", "limiter"),
    [
        (1, 0.9995, 0.280, 16.785, 16.785, "memory"),
        (32, 31.5077, 8.948, 17.039, 17.039, "memory"),
        (128, 120.4706, 35.791, 17.826, 35.791, "compute"),
    ],
)
def test_article_gemm_table_digit_for_digit(m, intensity, compute_us, memory_us, bound_us, limiter):
    ledger = gemm_ledger(m, 4096, 4096, "bf16")
    assert ledger.flops == 33_554_432 * m
    assert ledger.bytes == 33_554_432 + 16_384 * m
    assert ledger.intensity == pytest.approx(2048 * m / (2048 + m), rel=1e-12)
    b = bound(ledger.flops, ledger.bytes, C, B)
    assert round(b.intensity, 4) == intensity
    assert round(b.compute_s * 1e6, 3) == compute_us
    assert round(b.memory_s * 1e6, 3) == memory_us
    assert round(b.bound_s * 1e6, 3) == bound_us
    assert b.limiter == limiter
    assert b.ridge == 60


def test_two_serial_stages_200_us_vs_aggregate_101_us():
    stages = [Stage("A", 0.12e9, 200e6), Stage("B", 12e9, 2e6, after=("A",))]
    result = stage_bounds(stages, C, B)
    assert result.critical_path_s == pytest.approx(200e-6, rel=1e-12)
    assert result.aggregate_s == pytest.approx(101e-6, rel=1e-12)
    assert result.bound_s == pytest.approx(200e-6, rel=1e-12)
    assert result.critical_path == ["A", "B"]
    a, b = result.stages
    assert (a.bound.limiter, b.bound.limiter) == ("memory", "compute")
    assert b.start_s == pytest.approx(100e-6)


def test_independent_stages_bound_by_aggregate():
    # Each stage alone needs 100 μs, but together they share the one memory system.
    stages = [Stage("A", 0, 200e6), Stage("B", 0, 200e6)]
    result = stage_bounds(stages, C, B)
    assert result.critical_path_s == pytest.approx(100e-6)
    assert result.aggregate_s == pytest.approx(200e-6)
    assert result.bound_s == pytest.approx(200e-6)
    assert len(result.critical_path) == 1


def test_diamond_critical_path_takes_the_longer_branch():
    stages = [
        Stage("load", 0, 2e6),
        Stage("short", 1.2e9, 0, after=("load",)),
        Stage("long", 12e9, 0, after=("load",)),
        Stage("join", 0, 2e6, after=("short", "long")),
    ]
    result = stage_bounds(stages, C, B)
    assert result.critical_path == ["load", "long", "join"]
    assert result.critical_path_s == pytest.approx(1e-6 + 100e-6 + 1e-6)
    assert [s.on_critical_path for s in result.stages] == [True, False, True, True]


@pytest.mark.parametrize(
    ("stages", "says"),
    [
        ([Stage("A", 1, 1, ("B",)), Stage("B", 1, 1, ("A",))], "cycle"),
        ([Stage("A", 1, 1, ("A",))], "cycle"),
        ([Stage("A", 1, 1, ("ghost",))], "unknown stage 'ghost'"),
        ([Stage("A", 1, 1), Stage("A", 2, 2)], "defined twice"),
        ([], "no stages"),
    ],
)
def test_stage_refusals(stages, says):
    with pytest.raises(ModelError, match=says):
        stage_bounds(stages, C, B)


def test_fewer_flops_per_second_can_be_twice_as_fast():
    # The article: 100 units in 10 (rate 10) -> 40 units in 5 (rate 8): FLOP/s fell, time halved.
    before = Implementation("before", useful_flops=40, executed_flops=100, seconds=10)
    after = Implementation("after", useful_flops=40, executed_flops=40, seconds=5)
    result = compare_implementations(before, after)
    assert result.speedup == 2
    assert result.executed_flops_per_s == (10, 8)
    assert result.useful_flops_per_s == (4, 8)
    assert "2x" in result.statement and "fell from 10 to 8" in result.statement


def test_compare_refuses_different_useful_work():
    with pytest.raises(ModelError, match="different useful work"):
        compare_implementations(Implementation("a", 10, 10, 1), Implementation("b", 20, 20, 1))


def test_ledger_terms_per_operand():
    ledger = gemm_ledger(3, 5, 7, "fp16", "int8", "fp32", beta=1.0, bias=True)
    assert ledger.flops == 2 * 3 * 5 * 7
    assert ledger.bytes_x == 2 * 3 * 7
    assert ledger.bytes_w == 1 * 7 * 5
    assert ledger.bytes_y_write == 4 * 3 * 5
    assert ledger.bytes_y_read == 4 * 3 * 5
    assert ledger.bytes_bias == 4 * 5
    assert ledger.bytes == 42 + 35 + 60 + 60 + 20
    assert gemm_ledger(3, 5, 7, "fp16").bytes_y_read == 0


def test_w4a8_ledger_with_group_scales():
    # int8 activations, int4 weights packed two per byte, one fp16 scale per 128 K-values per column
    scales = WeightScales(group_size=128, dtype="fp16")
    ledger = gemm_ledger(16, 4096, 4096, "int8", "int4", "fp16", weight_scales=scales)
    assert ledger.bytes_w == 4096 * 4096 // 2
    assert ledger.bytes_scales == (4096 // 128) * 4096 * 2
    assert ledger.bytes_x == 16 * 4096
    assert ledger.bytes_y_write == 16 * 4096 * 2
    assert ledger.bytes == (
        ledger.bytes_x + ledger.bytes_w + ledger.bytes_scales + ledger.bytes_y_write
    )  # the scales are traffic too


@pytest.mark.parametrize("beta", [math.nan, math.inf, "1", None])
def test_beta_must_be_a_finite_number(beta):
    with pytest.raises(ModelError, match="beta must be a finite number"):
        gemm_ledger(3, 5, 7, "fp32", beta=beta)


def test_int4_rounds_up_to_whole_bytes_and_tf32_is_stored_as_fp32():
    assert tensor_bytes("int4", 3) == 2
    assert tensor_bytes("tf32", 10) == 40
    assert gemm_ledger(1, 1, 3, "int4").bytes_x == 2


@pytest.mark.parametrize(
    ("dtype", "size"),
    [("fp64", 8), ("fp32", 4), ("bf16", 2), ("fp16", 2), ("fp8_e4m3", 1), ("fp8_e5m2", 1)],
)
def test_element_sizes_of_the_measured_dtypes(dtype, size):
    # the CPU and GPU sweeps' dtypes: every cold-cache byte count and intensity rests on these
    assert tensor_bytes(dtype, 1000) == 1000 * size
    assert gemm_ledger(2, 3, 5, dtype).bytes == size * (2 * 5 + 5 * 3 + 2 * 3)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((0, 1, 1, "fp32"), "m must be a positive integer"),
        ((1, -4, 1, "fp32"), "n must be a positive integer"),
        ((1, 1, 2.5, "fp32"), "k must be a positive integer"),
        ((1, 1, 1, "fp7"), "unknown dtype 'fp7'"),
    ],
)
def test_ledger_refusals(args, says):
    with pytest.raises(ModelError, match=says):
        gemm_ledger(*args)


def test_bound_refuses_non_positive_ceilings():
    with pytest.raises(ModelError, match="peak"):
        bound(1, 1, 0, 1)
    with pytest.raises(ModelError, match="bandwidth"):
        bound(1, 1, 1, -1)
    with pytest.raises(ModelError, match="flops"):
        bound(float("nan"), 1, 1, 1)


def test_hierarchical_bound_names_the_binding_level():
    # 1 GFLOP; HBM moves 100 MB at 2 TB/s (50 μs), L2 moves 1 GB at 10 TB/s (100 μs).
    result = hierarchical_bound(1e9, {"HBM": 100e6, "L2": 1e9}, C, {"HBM": 2e12, "L2": 10e12})
    assert result.limiter == "L2"
    assert result.bound_s == pytest.approx(100e-6)
    assert result.levels["HBM"].intensity == 10
    assert result.levels["L2"].attainable_flops_per_s == pytest.approx(10e12)
    assert result.attainable_flops_per_s == pytest.approx(10e12)


def test_hierarchical_bound_refuses_mismatched_levels():
    with pytest.raises(ModelError, match="L2 have bytes but no bandwidth"):
        hierarchical_bound(1, {"HBM": 1, "L2": 1}, C, {"HBM": B})
    with pytest.raises(ModelError, match="L1 have a bandwidth but no bytes"):
        hierarchical_bound(1, {"HBM": 1}, C, {"HBM": B, "L1": B})


positive = st.floats(min_value=1e-3, max_value=1e18, allow_nan=False, allow_infinity=False)


@given(positive, positive, positive, positive)
def test_bound_properties(flops, bytes_, peak, bandwidth):
    b = bound(flops, bytes_, peak, bandwidth)
    assert b.bound_s >= flops / peak
    assert b.bound_s >= bytes_ / bandwidth
    assert b.attainable_flops_per_s <= peak * (1 + 1e-12)
    assert b.attainable_flops_per_s <= bandwidth * b.intensity * (1 + 1e-12)
    # P ≤ min(C, B·I) is the same statement as t ≥ max(F/C, Q/B)
    assert math.isclose(flops / b.bound_s, b.attainable_flops_per_s, rel_tol=1e-9)
    assert b.limiter == ("compute" if flops / peak >= bytes_ / bandwidth else "memory")


@given(
    positive, st.dictionaries(st.sampled_from(["HBM", "L2", "L1"]), positive, min_size=1), positive
)
def test_hierarchical_bound_is_the_tightest_single_level_bound(flops, bytes_by_level, peak):
    bandwidths = {level: 1e12 * (i + 1) for i, level in enumerate(sorted(bytes_by_level))}
    result = hierarchical_bound(flops, bytes_by_level, peak, bandwidths)
    singles = [bound(flops, q, peak, bandwidths[lv]).bound_s for lv, q in bytes_by_level.items()]
    assert result.bound_s == pytest.approx(max(singles), rel=1e-12)


sizes = st.integers(min_value=1, max_value=1 << 16)


@given(sizes, sizes, sizes, sizes, st.sampled_from(sorted(ELEMENT_BITS)))
def test_gemm_intensity_rises_with_m(m1, m2, n, k, dtype):
    assume(m1 < m2)
    # a sub-byte dtype (int4: two a byte) stores whole bytes, rounded up: M = 5 holds 3 bytes
    # of X where M = 4 holds 2, so intensity rises over whole bytes of rows, not every row
    per_byte = max(1, 8 // ELEMENT_BITS[dtype])
    m1, m2 = m1 * per_byte, m2 * per_byte
    assert gemm_ledger(m1, n, k, dtype).intensity < gemm_ledger(m2, n, k, dtype).intensity


def _draw_stages(data, ledgers) -> list[Stage]:
    """Stages s0, s1, ... of these (F, Q), each after a drawn set of the stages before it."""
    stages = []
    for i, (f, q) in enumerate(ledgers):
        names = [s.name for s in stages]
        deps = data.draw(st.lists(st.sampled_from(names), unique=True) if names else st.just([]))
        stages.append(Stage(f"s{i}", f, q, tuple(deps)))
    return stages


@given(st.lists(st.tuples(positive, positive), min_size=1, max_size=6), st.data())
def test_stage_bound_between_longest_stage_and_serial_sum(ledgers, data):
    stages = _draw_stages(data, ledgers)
    result = stage_bounds(stages, C, B)
    each = [bound(s.flops, s.bytes, C, B).bound_s for s in stages]
    assert result.bound_s >= max(each) * (1 - 1e-12)
    assert result.critical_path_s <= sum(each) * (1 + 1e-12)
    assert result.bound_s >= result.aggregate_s


def test_2000_stages_listed_last_first():
    # Each stage after the one listed below it: the order is found without recursing per stage.
    stages = [Stage(f"s{i}", 0, 2e6, (f"s{i - 1}",) if i else ()) for i in range(2000)][::-1]
    result = stage_bounds(stages, C, B)
    assert result.critical_path == [f"s{i}" for i in range(2000)]
    assert result.critical_path_s == pytest.approx(2000 * 1e-6, rel=1e-9)
    assert all(s.on_critical_path for s in result.stages)


def test_100000_stage_chain_has_the_whole_chain_as_critical_path():
    # How fast: benchmarks/model_stages_chain.py (linear: 10x the stages, about 10x the time).
    n = 100_000
    stages = [Stage(f"s{i}", 0, 2e6, (f"s{i - 1}",) if i else ()) for i in range(n)]
    result = stage_bounds(stages, C, B)  # each stage 2 MB / 2 TB/s = 1 μs
    assert len(result.critical_path) == n
    assert result.critical_path[0] == "s0" and result.critical_path[-1] == f"s{n - 1}"
    assert result.critical_path_s == pytest.approx(n * 1e-6, rel=1e-9)
    assert result.stages[-1].start_s == pytest.approx((n - 1) * 1e-6, rel=1e-9)


def test_a_long_cycle_is_named_from_where_it_closes():
    stages = [Stage(f"s{i}", 1, 1, (f"s{(i + 1) % 3000}",)) for i in range(3000)]
    with pytest.raises(ModelError) as caught:
        stage_bounds(stages, C, B)
    # named from where it closes, its middle counted: a 3000-stage cycle is one short line
    assert str(caught.value) == (
        "stages form a cycle: s0 -> s1 -> s2 -> s3 -> (2993 more) -> s2997 -> s2998 -> s2999 -> s0"
    )


def _recursive_order(stages):
    """The depth-first order stage_bounds used before it was iterative (the reference)."""
    by_name, order, done = {s.name: s for s in stages}, [], set()

    def visit(stage):
        if stage.name not in done:
            for dep in stage.after:
                visit(by_name[dep])
            done.add(stage.name)
            order.append(stage.name)

    for stage in stages:
        visit(stage)
    return order


@given(st.lists(st.tuples(positive, positive), min_size=1, max_size=8), st.data())
def test_iterative_order_and_ties_match_the_recursive_one(ledgers, data):
    # Ties between equal finish times are broken by the order, so the order itself must not change.
    # every other stage 1e9 FLOPs and no bytes: stages of equal time, to make ties
    ties = [(f, q) if i % 2 else (1e9, 0) for i, (f, q) in enumerate(ledgers)]
    stages = data.draw(st.permutations(_draw_stages(data, ties)))
    result = stage_bounds(stages, C, B)
    reference = _recursive_order(stages)
    finish = {s.name: s.finish_s for s in result.stages}
    assert result.critical_path[-1] == max(reference, key=finish.__getitem__)
    assert [s.name for s in topological_order(stages)] == reference
