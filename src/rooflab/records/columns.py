"""Column groups that several tables of records.tables share (names and Arrow types)."""

from __future__ import annotations

import pyarrow as pa

STRING, FLOAT, INT, BOOL, TIMESTAMP = (
    pa.string(),
    pa.float64(),
    pa.int64(),
    pa.bool_(),
    pa.timestamp("us", "UTC"),
)

# What the rest of the machine took from a measurement (conditions.disturbance): `disturbed` and
# why, samples (windows) left out and re-taken, other processes' CPUs and the hypervisor's steal
# while it sampled, other processes seen on the GPU (null on a CPU).
DISTURBANCE = [
    ("disturbed", BOOL),
    ("disturbance", STRING),
    ("n_disturbed", INT),
    ("other_cpus", FLOAT),
    ("steal_fraction", FLOAT),
    ("gpu_other_processes", INT),
]

# How sampling stopped (experiments.stopping): the width of the median's 95 % interval over the
# median when it stopped, and why (converged, time_cap, sample_cap, retakes).
STOPPED = [("ci_rel_width", FLOAT), ("stop_reason", STRING)]
# A timed point's samples: how many its statistics used, and their quantiles (s).
SAMPLED = [
    ("n_samples", INT),
    ("median_s", FLOAT),
    ("p25_s", FLOAT),
    ("p75_s", FLOAT),
    ("min_s", FLOAT),
]
SAMPLED += STOPPED
ROUNDS = [("n_rounds", INT), ("round_spread", FLOAT)]
# The SM clock over a measurement's condition readings (before, during, after), and its flags:
# clock range above the configured fraction, thermal or power cap seen, every clock-event reason
# seen. Null where no SM clock was read (CPU).
SM_CLOCK = [
    ("sm_clock_min_mhz", FLOAT),
    ("sm_clock_max_mhz", FLOAT),
    ("clock_moved", BOOL),
    ("clock_capped", BOOL),
    ("clock_events", STRING),
]
