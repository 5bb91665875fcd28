"""The tiny campaign config (`TINY`) a temporary copy of the workflow runs: CPU only, a few ms
per measurement, every kind of job (ceilings, two sweeps, stages, a timeline, two workloads) and
the store outside results/. Used by test_workflow and benchmarks/noop_rerun.py; not a test module,
so pytest collects nothing here.
"""

TINY = {
    "backend": "cpu",
    "timing": {"warmup_s": 0.01, "min_time_s": 0.02, "min_samples": 3},
    "disturbance": {"quiet_wait_s": 5},  # a busy CI machine: warn after 5 s, not 30 s per job
    "ceilings": {
        "points_per_octave": 2,
        "kernels": ["triad"],
        "window_s": 0.005,
        "windows": 1,
        "blas_n": 128,
    },
    # the store outside results/, as on a cluster (a local disk of the submit node)
    "store": {"db": "store/rooflab.duckdb"},
    "sweeps": {
        "a": {"m": [1, 2], "n": [16], "k": [16], "dtypes": ["fp64"]},
        "b": {"m": [3], "n": [8], "k": [8], "dtypes": ["fp32"], "cache_states": ["warm"]},
    },
    # stages measured serial and overlapped (docs/timelines.md), a few ms each
    "stages": {
        "overlap": {
            "measurable": True,
            "compute_path": "fp64_fma",
            "stages": [
                {"name": "A", "kernel": "stream", "time_s": 0.003},
                {"name": "B", "kernel": "fma", "time_s": 0.003, "after": ["A"]},
            ],
        }
    },
    # a decode-like step of many small calls, eager against fused (docs/timelines.md)
    "timelines": {"step": {"layers": 4, "hidden": 32}},
    # two implementations of the same work (docs/workloads.md), small
    "workloads": {
        "unfused": {
            "entry": "rooflab.workloads.builtin:relu_axpb_unfused",
            "params": {"n": [65536]},
        },
        "fused": {
            "entry": "rooflab.workloads.builtin:relu_axpb_fused",
            "params": {"n": [65536]},
            "same_work_as": "unfused",
        },
    },
}

# The smallest campaign that still measures (ceilings of one dtype a path swept inside the caches,
# one sweep, one workload: no counters, stages nor timelines), for the benchmarks' --smoke runs:
# their code, not their figures.
SMALLEST = {
    **TINY,
    "ceilings": {
        **TINY["ceilings"],
        "max_working_set": "16 MiB",
        "fma_dtypes": ["fp64"],
        "blas_dtypes": ["fp64"],
    },
    "sweeps": {"a": TINY["sweeps"]["a"]},
    "workloads": {"unfused": TINY["workloads"]["unfused"]},
    "stages": {},
    "timelines": {},
    "counters": {"enabled": False},
}
