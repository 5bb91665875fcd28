"""The Roofline: measured results against measured ceilings.

- `points`: each timed GEMM configuration as a point against the ceilings of its own machine
  (model bytes), and hierarchical points from counted bytes;
- `analysis`: what the store derives beside the points, per ceilings run (cache capacities,
  datasheet roofs, the stage scenarios' bounds), and the files the roofline step writes.
"""

from rooflab.roofline.analysis import (
    DERIVED_TABLES,
    ROOFLINE_FOLDER,
    Analysis,
    analyse_results,
    build_analysis,
    kept_run_folders,
    write_analysis,
)
from rooflab.roofline.points import (
    UNPLACED_REASONS,
    RooflinePoints,
    build_points,
    ceiling_values,
    counter_points,
    latest_ceilings_by_machine,
    resident_level,
    roof_faults,
    roofline_points,
    timing_flags,
    unplaced_line,
    write_points,
)

__all__ = [
    "DERIVED_TABLES",
    "ROOFLINE_FOLDER",
    "UNPLACED_REASONS",
    "Analysis",
    "RooflinePoints",
    "analyse_results",
    "build_analysis",
    "build_points",
    "ceiling_values",
    "counter_points",
    "kept_run_folders",
    "latest_ceilings_by_machine",
    "resident_level",
    "roof_faults",
    "roofline_points",
    "timing_flags",
    "unplaced_line",
    "write_analysis",
    "write_points",
]
