"""The timeline chart (report.timeline_charts, issue 29): one instrumented step per mode as a
Gantt chart. Pure tests on frames shaped like the timeline_kernels and timeline_steps rows
(made-up values, never a measurement): the layers and their encodings, the data each draws in
μs, a mode with no kernel rows still on the y axis, and the step, busy and gap said per mode."""

from __future__ import annotations

import pandas as pd
import pytest

from rooflab.report.timeline_charts import (
    KERNEL_ORDER,
    MODE_ORDER,
    gantt_frames,
    timeline_chart,
)
from tests.report_pages import layers_of

EAGER = [  # two layers of four kernels, launch gaps of 4 μs between them
    ("gemv", 0), ("bias_add", 0), ("relu", 0), ("residual_add", 0),
    ("gemv", 1), ("bias_add", 1), ("relu", 1), ("residual_add", 1),
]  # fmt: skip
FUSED = [("gemv", 0), ("bias_relu_residual", 0), ("gemv", 1), ("bias_relu_residual", 1)]


def _kernel_rows(mode: str, kernels, gap_s: float) -> list[dict]:
    rows, start = [], 0.0
    for position, (kernel, layer) in enumerate(kernels):
        duration = 2e-6 if kernel == "gemv" else 1e-6
        row = {"run_id": "r1", "config_id": f"decode/{mode}", "scenario": "decode", "mode": mode}
        row |= {"position": position, "layer": layer, "kernel": kernel, "start_s": start}
        rows.append(row | {"end_s": start + duration, "duration_s": duration})
        start += duration + gap_s
    return rows


def _frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    # listed fused first: the chart orders the modes itself; graph has no kernel rows (its
    # event record nodes were refused), so no busy time either
    kernels = pd.DataFrame(_kernel_rows("fused", FUSED, 4e-6) + _kernel_rows("eager", EAGER, 4e-6))
    steps = pd.DataFrame(
        [
            {"mode": "fused", "kernels": 4, "step_s": 24e-6, "busy_s": 6e-6, "gap_s": 18e-6},
            {"mode": "graph", "kernels": 8, "step_s": 15e-6, "busy_s": None, "gap_s": None},
            {"mode": "eager", "kernels": 8, "step_s": 45e-6, "busy_s": 10e-6, "gap_s": 35e-6},
        ]
    ).assign(
        run_id="r1",
        scenario="decode",
        busy_method=["events (fused)", "no per-kernel timeline: refused", "events (eager)"],
    )
    return kernels, steps


def _mark(layer: dict) -> str:
    mark = layer["mark"]
    return mark if isinstance(mark, str) else mark["type"]


@pytest.fixture
def spec() -> dict:
    return timeline_chart(*_frames(), "decode").to_dict()


def test_three_layers_bars_ticks_and_their_words(spec):
    assert [_mark(layer) for layer in layers_of(spec)] == ["bar", "tick", "text"]
    assert spec["title"]["text"] == "Timeline of one step: decode"


def test_one_row_per_mode_in_run_order_a_mode_without_kernels_included(spec):
    for layer in layers_of(spec):
        y = layer["encoding"]["y"]
        assert (y["field"], y["type"]) == ("mode", "nominal")
        assert y["sort"] == y["scale"]["domain"] == list(MODE_ORDER)


def test_bars_run_from_start_to_end_in_microseconds_coloured_by_kernel(spec):
    bars, ticks, _ = layers_of(spec)
    encoding = bars["encoding"]
    assert (encoding["x"]["field"], encoding["x2"]["field"]) == ("start_us", "end_us")
    assert "μs" in encoding["x"]["title"]
    assert encoding["color"]["field"] == "kernel"
    # the kernels present, in the order they run in a layer
    present = ["gemv", "bias_add", "relu", "residual_add", "bias_relu_residual"]
    assert encoding["color"]["scale"]["domain"] == present
    assert set(encoding["color"]["scale"]["domain"]) <= set(KERNEL_ORDER)
    data = pd.DataFrame(spec["datasets"][bars["data"]["name"]])
    assert len(data) == len(EAGER) + len(FUSED)
    eager = data[data["mode"] == "eager"].sort_values("position")
    assert list(eager.start_us) == pytest.approx([0, 6, 11, 16, 21, 27, 32, 37])
    assert list(eager.end_us) == pytest.approx([2, 7, 12, 17, 23, 28, 33, 38])
    # the launch gaps are empty space: no bar covers 2..6 μs of the eager row
    assert all(
        end <= 2 or start >= 6 for start, end in zip(eager.start_us, eager.end_us, strict=True)
    )
    assert ticks["encoding"]["x"]["scale"] == encoding["x"]["scale"]  # one time axis


def test_each_mode_has_a_tick_at_its_measured_step_with_its_times_said(spec):
    _, ticks, text = layers_of(spec)
    assert ticks["encoding"]["x"]["field"] == text["encoding"]["x"]["field"] == "step_us"
    assert text["encoding"]["text"]["field"] == "says"
    data = pd.DataFrame(spec["datasets"][ticks["data"]["name"]]).set_index("mode")
    assert data.step_us.to_dict() == pytest.approx({"fused": 24.0, "graph": 15.0, "eager": 45.0})
    assert data.says["eager"] == "step 45.0 μs: 8 kernels, busy 10.0, gap 35.0"
    assert data.says["graph"] == "step 15.0 μs: 8 kernels"  # no busy measured
    tooltip = [t["field"] for t in ticks["encoding"]["tooltip"]]
    assert {"busy_us", "gap_us", "busy_method", "kernels"} <= set(tooltip)
    # the axis reaches past the slowest step, so every tick is on the chart
    assert ticks["encoding"]["x"]["scale"]["domain"][1] >= 45.0


def test_gantt_frames_convert_to_microseconds_and_keep_the_run_order():
    bars, ticks = gantt_frames(*_frames())
    columns = ["mode", "position", "layer", "kernel", "start_us", "end_us", "duration_us"]
    assert list(bars.columns) == columns
    assert bars.duration_us.sum() == pytest.approx((2 * 2 + 6 * 1) + (2 * 2 + 2 * 1))
    assert list(bars[bars["mode"] == "fused"].position) == [0, 1, 2, 3]
    assert set(ticks["mode"]) == {"eager", "graph", "fused"}


def test_a_single_kernel_step_is_said_in_the_singular():
    kernels, steps = _frames()
    steps = steps[steps["mode"] == "fused"].assign(kernels=1)
    _, ticks = gantt_frames(kernels[kernels["mode"] == "fused"], steps)
    assert ticks.says[0].startswith("step 24.0 μs: 1 kernel,")
