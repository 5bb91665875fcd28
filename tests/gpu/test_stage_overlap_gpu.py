"""Stage overlap on a real GPU (issue 29): the default GPU scenario's stages, sized from quick
ceilings of this GPU, run alone on two streams, serial, and overlapped; every row fits its table,
no measurement beats its bound, and the two streams do overlap (the overlapped schedule is
faster than the serial one)."""

from dataclasses import replace

from rooflab.config import config_file, load_config
from rooflab.experiments import ceiling_plan, ceilings
from rooflab.experiments.stage_overlap import run_stage_overlap
from rooflab.experiments.timing import TimingSettings
from rooflab.records import to_table


def test_two_streams_overlap_a_stream_stage_and_an_fma_stage(cuda, tmp_path):
    config = load_config(config_file("gpu.yaml"))
    spec = config["stages"]["overlap_two_stage"]
    quick = replace(ceiling_plan.QUICK, fma_dtypes=("fp32",), blas_dtypes=())
    measured = ceilings.run_ceilings(cuda, quick)["ceilings"]
    peak = max(r["value"] for r in measured if r["name"] == spec["compute_path"])
    bandwidth = max(r["value"] for r in measured if r["name"] == spec["memory_level"])
    timing = TimingSettings(warmup_s=0.05, min_time_s=0.2, min_samples=10)
    tables = run_stage_overlap(
        cuda,
        "overlap_two_stage",
        spec,
        timing,
        peak_flops_per_s=peak,
        bandwidth_b_per_s=bandwidth,
        ceilings_run_id=None,
    )
    for table, rows in tables.items():
        to_table(table, rows)
    rows = [*tables["stage_timings"], *tables["stage_schedules"]]
    assert not any(row["beats_bound"] for row in rows), rows
    assert [r["placement"] for r in tables["stage_timings"]] == ["stream 1", "stream 2"]
    serial, overlapped = tables["stage_schedules"]
    assert overlapped["median_s"] < serial["median_s"]  # the streams ran side by side
